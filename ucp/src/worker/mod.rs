//! The worker (`ucp_worker_h`): `ucp`'s engine. It owns the transport interfaces of one
//! context, the endpoints and their lanes, the requests and the tag matcher, and the
//! progress engine that drives them; the protocols (`crate::proto`) are steps it runs.
//!
//! # Structure
//!
//! A [`Worker`] is its interfaces plus a `Core` holding every piece of protocol state.
//! `progress()` hands each interface the core as its event handler: received messages are
//! matched and copied into user buffers right there, but nothing is *sent* from inside a
//! handler (an interface cannot be re-entered). What must be sent in answer — an
//! acknowledgement, a rendezvous RTR, a wire-up reply, the next fragments of a stalled
//! send — is queued as an action and run after the interfaces return (`run_actions`).
//!
//! The files are floors (docs/layers.md): below the protocols,
//! * `state`: the worker, its core, the endpoints and lanes, the control messages;
//! * `op`: the state of each operation (send, receive, flush) and of unexpected messages;
//! * `wireup`: endpoint creation, lanes, wire-up, control messages, flush, failure;
//! * `listener`: client/server connection through a socket address;
//! * `requests`, `capi`: the request API (status, test, free, cancel, completions);
//!
//! and above them, the driver:
//! * this file: creation, `progress`, `run_actions` (the protocols' steps, in order),
//!   sleeping and waking, and `wait`;
//! * `handler`: the interfaces' event handler, which hands each arrived message to its
//!   protocol and each completion to its operation.
//!
//! A protocol's call that must run the driver's actions before it returns goes through
//! the `RunActions` trait (`Worker::answer_now`); the stream-triggered queues, a feature
//! above the driver, get their turn in `progress` through the hooks they register.
//!
//! # Endpoints and wire-up
//!
//! Endpoints are created from a peer's [`WorkerAddress`]: for each of our interfaces the
//! peer reaches, the lane is picked from the transports' estimates (self for our own
//! worker, shared memory and CMA on the same host, tcp otherwise). Every protocol header
//! names the *receiver's* endpoint id, which the sender learns from a wire-up exchange:
//! the new endpoint sends `WIREUP REQ` with its id and our address, and the peer answers
//! `WIREUP REP` with the id of its endpoint for us (an existing one if it already has one
//! for us that is not paired yet, so two sides that connect to each other pair up). Sends
//! posted before the reply wait in the endpoint's queue, in order.

mod capi;
pub(crate) mod handler;
pub(crate) mod keepalive;
mod listener;
pub(crate) mod op;
mod requests;
pub(crate) mod state;
#[cfg(test)]
#[allow(unsafe_code)] // tests describe their buffers as user code does
mod tests;
pub(crate) mod wireup;

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::Arc;

use slab::Slab;
use smallvec::SmallVec;
use ucs::{Status, UcsResult};
use uct::OpenIface;

use crate::address::{TlAddress, WorkerAddress};
use crate::context::{Context, Error};
use crate::proto::{eager, rndv};
use crate::request::{ReqId, Requests};
use crate::tag::{TagInfo, TagMatcher};
use op::UnexpPool;
use state::{Core, IfaceInfo, Lane, RunActions, Sockets, NO_IFACE, SOCKET_EVENT};

pub use crate::proto::am::{AmData, AmEvent, AmHandler, AmRndv, AmSendParams};
pub use crate::proto::rma::{AtomicOp, MemHandle, Rkey, SharedRegion};
pub use crate::proto::stream::StreamRecv;
/// The protocols that were modules of the worker, under their old paths.
pub use crate::proto::{am, rma, stream};
pub use crate::request::EpHandle;
pub use op::{RecvParams, SendParams};
pub use state::{ConnRequest, Worker, WorkerStats};
pub use wireup::FlushPoll;

/// Interfaces no endpoint uses as its AM lane are progressed once every this many
/// `progress` calls (an idle tcp interface costs an `epoll_wait` system call; cma only
/// checks its peers' liveness). At ~0.1 µs per call that is every ~50 µs.
const IDLE_POLL_EVERY: u32 = 512;

/// Wakes a worker sleeping in [`Worker::wait_event`] (or makes its next [`Worker::arm`]
/// report work), from any thread, without the worker (`ucp_worker_signal`).
#[derive(Clone, Debug)]
pub struct Signaler(Arc<ucs::wakeup::EventFd>);

impl Signaler {
    pub fn signal(&self) -> UcsResult<()> {
        self.0.signal().map_err(|_| Status::IoError)
    }
}

/// The epoll data of the signal descriptor (interfaces use their index).
const SIGNAL_EVENT: u64 = u64::MAX;
impl Drop for Worker {
    fn drop(&mut self) {
        if self.core.am_depth > 0 {
            // Dropped from inside one of its own AM handlers (moved out with `mem::swap`):
            // that handler may still read a message kept in an interface's receive memory,
            // so the interfaces are leaked rather than closed.
            std::mem::forget(std::mem::take(&mut self.ifaces));
            return;
        }
        if let Some(h) = self.queue_hooks {
            (h.drop)(self);
        }
        // Endpoints the application left open are closed as `ep_close` would: their peers
        // learn of it and end theirs without a failure.
        let open: Vec<usize> = self.core.eps.iter().map(|(i, _)| i).collect();
        let Worker { ifaces, core, .. } = self;
        for ep in open {
            wireup::destroy_ep(ifaces, core, ep);
        }
        // Regions the application left mapped are deregistered before their memory goes
        // (`cuda_copy` pins host memory while registered).
        rma::unmap_all(ifaces, core);
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("uuid", &self.core.uuid)
            .field("ifaces", &self.core.info)
            .field("eps", &self.core.eps.len())
            .field("requests", &self.core.reqs.len())
            .field("direct_receives", &self.core.direct.len())
            .finish()
    }
}

impl Worker {
    /// Opens every transport the context allows. Fails only when none opens.
    pub fn new(ctx: &Arc<Context>) -> Result<Worker, Error> {
        let mut ifaces: Vec<OpenIface> = Vec::new();
        let mut info = Vec::new();
        let mut failures = Vec::new();
        for res in &ctx.discovery.available {
            match uct::open_iface(res, &ctx.config) {
                Ok(i) => {
                    info.push(IfaceInfo {
                        tl: res.tl,
                        device: res.device.clone(),
                        kind: res.kind,
                        attr: i.attr().clone(),
                    });
                    ifaces.push(i);
                }
                Err(e) => {
                    log::warn!("{e}");
                    failures.push(e.to_string());
                }
            }
        }
        if ifaces.is_empty() {
            return Err(Error::NoTransport(if failures.is_empty() {
                "none allowed by UCX_TLS".into()
            } else {
                failures.join("; ")
            }));
        }
        // Interfaces are named by a byte in the active list (`Core::active`).
        if ifaces.len() > usize::from(u8::MAX) {
            return Err(Error::NoTransport(format!(
                "{} interfaces, more than a worker drives (255): narrow UCX_TLS or UCX_NET_DEVICES",
                ifaces.len()
            )));
        }
        let epoll = ucs::wakeup::Epoll::new().map_err(|source| Error::Os {
            call: "epoll_create1",
            source,
        })?;
        for (i, iface) in ifaces.iter().enumerate() {
            if let Some(fd) = iface.event_fd() {
                epoll
                    .add(fd, libc::EPOLLIN as u32, i as u64)
                    .map_err(|source| Error::Os {
                        call: "epoll_ctl",
                        source,
                    })?;
            }
        }
        let signal = Arc::new(ucs::wakeup::EventFd::new().map_err(|source| Error::Os {
            call: "eventfd",
            source,
        })?);
        {
            use std::os::fd::AsRawFd;
            epoll
                .add(signal.as_raw_fd(), libc::EPOLLIN as u32, SIGNAL_EVENT)
                .map_err(|source| Error::Os {
                    call: "epoll_ctl",
                    source,
                })?;
        }
        let keepalive = keepalive::start(
            &ctx.config,
            info.iter()
                .any(|i| i.kind == uct::component::DeviceKind::Network),
            &epoll,
        );
        let mt_copy = ifaces.iter_mut().enumerate().find_map(|(i, f)| {
            if !f.attr().flags.contains(uct::IfaceFlags::MEMTYPE_COPY) {
                return None;
            }
            let (dev, addr) = (f.device_address().to_vec(), f.iface_address().to_vec());
            f.ep_connect(&dev, &addr)
                .ok()
                .map(|ep| Lane { iface: i, ep })
        });
        let uuid = rand::random::<u64>();
        let address = WorkerAddress {
            uuid,
            host_id: ucs::sys::host_id(),
            pid: std::process::id(),
            tls: ifaces
                .iter()
                .zip(&info)
                .map(|(i, inf)| TlAddress {
                    tl: inf.tl.to_string(),
                    device: inf.device.clone(),
                    device_addr: i.device_address().to_vec(),
                    iface_addr: i.iface_address().to_vec(),
                })
                .collect(),
        }
        .encode();
        let min_am_bcopy = info
            .iter()
            .filter(|i| i.attr.flags.contains(uct::IfaceFlags::AM_BCOPY))
            .map(|i| i.attr.am.max_bcopy)
            .min()
            .unwrap_or(0);
        let core = Core {
            uuid,
            address,
            info,
            rndv_cfg: ctx.config.rndv_thresh,
            zcopy_cfg: ctx.config.zcopy_thresh,
            rndv_scheme: ctx.config.rndv_scheme,
            atomic_device: ctx.config.atomic_mode.device(),
            layout_cache_size: ctx.config.rndv_layout_cache,
            split_thresh: ctx.config.rndv_split_thresh,
            split_cfg: ctx.config.rndv_split_thresh,
            cpu: ctx.config.shared_cpu_adapt.then(Default::default),
            shared_eager_max: 0,
            layout_parts: ctx.config.rndv_layout_parts,
            proto_info: ctx.config.proto_info,
            eps: Slab::new(),
            uct_eps: HashMap::new(),
            reqs: Requests::new(),
            direct: Default::default(),
            matcher: TagMatcher::with_capacity(64, 64),
            frags: HashMap::new(),
            unexp_frags: Slab::new(),
            unexp_bufs: UnexpPool::default(),
            ctrl_eps: VecDeque::new(),
            put_ack_eps: Vec::new(),
            reply_pool: Vec::new(),
            lazy_replies: 0,
            accepts: VecDeque::new(),
            ready: VecDeque::new(),
            gets: VecDeque::new(),
            puts: VecDeque::new(),
            deregs: Vec::new(),
            umr_releases: Vec::new(),
            flushes: Vec::new(),
            deferred_reqs: Vec::new(),
            finished: Vec::new(),
            unpacks: Vec::new(),
            staging: Vec::new(),
            waiting_gets: VecDeque::new(),
            mt_copy,
            stage_cfg: crate::proto::rndv::stage::StageCfg {
                frag: ctx.config.rndv_frag_size,
                depth: ctx.config.rndv_pipeline_depth,
            },
            stage_recvs: Vec::new(),
            lane_errors: Vec::new(),
            peer_closes: Vec::new(),
            completions: Default::default(),
            am_events: VecDeque::new(),
            am_pool: Vec::new(),
            stream_ready: VecDeque::new(),
            kept: None,
            release_owed: NO_IFACE,
            am_depth: 0,
            mems: Slab::new(),
            mappings: Default::default(),
            shm_regions: 0,
            vectors: Default::default(),
            rma_queue: VecDeque::new(),
            light_gets: Slab::new(),
            light_gen: 0,
            ep_errors: VecDeque::new(),
            bound_recvs: Vec::new(),
            work: false,
            cur_iface: 0,
            active: SmallVec::new(),
            poll_one: NO_IFACE,
            on_demand: Vec::new(),
            tick: 0,
            stats: WorkerStats::default(),
            queues_armed: false,
            min_am_bcopy,
        };
        Ok(Worker {
            ctx: Arc::clone(ctx),
            ifaces,
            core,
            epoll,
            signal,
            armed: false,
            keepalive,
            sock: Sockets::default(),
            am_handlers: Vec::new(),
            queues: Slab::new(),
            channels: Slab::new(),
            channel_gen: 0,
            queue_kick: None,
            queue_hooks: None,
            queue_gen: 0,
        })
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// This worker's address, for peers' `ep_create` (`ucp_worker_get_address`).
    pub fn address(&self) -> &[u8] {
        &self.core.address
    }

    /// The transports this worker opened, as `tl/device`.
    pub fn transports(&self) -> Vec<String> {
        self.core
            .info
            .iter()
            .map(|i| format!("{}/{}", i.tl, i.device))
            .collect()
    }

    pub fn stats(&self) -> WorkerStats {
        self.core.stats
    }

    /// A description of the worker's state: endpoints, live requests, queues (for
    /// diagnosing a stuck program, like `ucp_worker_print_info`).
    pub fn dump_state(&self) -> String {
        use std::fmt::Write;
        let c = &self.core;
        let mut s = format!("{self:?}\n{:?}\n", c.stats);
        for (i, e) in c.eps.iter() {
            let _ = writeln!(
                s,
                "ep {i}: remote {:#x}/{:?} failed {:?} queue {} outstanding {}",
                e.remote_uuid,
                e.remote_id,
                e.failed,
                e.queue.len(),
                e.outstanding
            );
        }
        for (id, r) in c.reqs.iter() {
            let _ = writeln!(s, "req {:#x}: {:?}", id.0, r.state);
        }
        let _ = writeln!(s, "direct receives {}", c.direct.len());
        let _ = writeln!(
            s,
            "ctrl {} ready {} gets {} puts {} flushes {} rma {} light gets {} am events {} work {}",
            c.eps.iter().map(|(_, e)| e.ctrl.len()).sum::<usize>(),
            c.ready.len(),
            c.gets.len(),
            c.puts.len(),
            c.flushes.len(),
            c.rma_queue.len(),
            c.light_gets.len(),
            c.am_events.len(),
            c.work
        );
        s
    }

    /// Makes progress on every interface and on the protocols; returns the number of
    /// events handled (`ucp_worker_progress`).
    ///
    /// Inlined into the caller's polling loop: when one interface is in use and nothing is
    /// queued, an empty poll is that interface's `progress` and a few loads. Half of a
    /// polling loop's length is, on average, added to the time a message waits to be
    /// seen (docs/ucp.md, workers and progress).
    #[inline(always)]
    pub fn progress(&mut self) -> usize {
        self.armed = false;
        self.core.tick = self.core.tick.wrapping_add(1);
        if let Some(i) = self.core.lone_iface(&self.sock, self.core.tick) {
            self.release_if_owed();
            self.core.cur_iface = i;
            let mut n = self.ifaces[i].progress(&mut self.core);
            if self.core.kept.is_some() {
                n += self.dispatch_kept();
            }
            if !self.core.on_demand.is_empty() {
                n += self.poll_on_demand();
            }
            if self.core.work || !self.core.am_events.is_empty() {
                n += self.progress_protocols();
            }
            return n;
        }
        self.progress_general()
    }

    /// An empty [`progress`](Self::progress), when that is all there is to do: true when
    /// the one interface in use is posix and no message waits on it, nothing else is due,
    /// and `quiet` (the caller's own condition) holds; the call is then counted as
    /// `progress` counts it. False, having changed nothing, when `progress` must run.
    /// Asked before `progress` by a caller that polls in a loop while its CPU is shared
    /// ([`cpu_shared`](Self::cpu_shared)), so that an empty poll is a few loads and no
    /// frame for the message path (`ucp_worker_progress` in OpenMPI's one-core ping-pong:
    /// 199 -> 114 instructions per call, 2026-11-28). Self's queue and
    /// then the FIFO are looked at first, so that a poll that finds a message pays for
    /// little of this before `progress` runs.
    #[inline(always)]
    pub fn progress_idle(&mut self, quiet: impl FnOnce() -> bool) -> bool {
        let Worker {
            ifaces, core, sock, ..
        } = self;
        if !on_demand_quiet(core, ifaces) {
            return false;
        }
        let Some(uct::OpenIface::Posix(posix)) = ifaces.get_mut(usize::from(core.poll_one)) else {
            return false;
        };
        let tick = core.tick.wrapping_add(1);
        if !posix.idle()
            || core.lone_iface(sock, tick).is_none()
            || core.release_owed != NO_IFACE
            || core.kept.is_some()
            || core.has_reports(sock)
            || !quiet()
        {
            return false;
        }
        posix.poll_idle();
        core.tick = tick;
        true
    }

    /// Progresses the on-demand interfaces in use that have work.
    #[inline]
    fn poll_on_demand(&mut self) -> usize {
        let mut n = 0;
        for k in 0..self.core.on_demand.len() {
            let i = usize::from(self.core.on_demand[k]);
            if self.ifaces[i].has_work() {
                self.core.cur_iface = i;
                n += self.ifaces[i].progress(&mut self.core);
                if self.core.kept.is_some() {
                    n += self.dispatch_kept();
                }
            }
        }
        n
    }

    /// `progress` with several interfaces in use, queued work, or the periodic look at
    /// the idle interfaces.
    #[inline(never)]
    fn progress_general(&mut self) -> usize {
        self.release_if_owed();
        let mut n = if self.core.tick.is_multiple_of(IDLE_POLL_EVERY) {
            self.watch_cpu_share();
            self.keepalive_due();
            self.progress_all_ifaces()
        } else {
            let mut n = 0;
            for k in 0..self.core.active.len() {
                let i = usize::from(self.core.active[k]);
                self.core.cur_iface = i;
                n += self.ifaces[i].progress(&mut self.core);
                if self.core.kept.is_some() {
                    n += self.dispatch_kept();
                }
            }
            n + self.poll_on_demand()
        };
        if self.core.work || !self.core.am_events.is_empty() || self.sock.active() {
            n += self.progress_protocols();
        }
        n
    }

    /// Follows whether the progressing thread shares its CPU with other busy threads
    /// (`ucs::sched`, a reading every 10 ms at most). While it does, the processes it
    /// talks to on this host most likely take turns on the same cores, and three things
    /// that pay off with a core each are turned off: the split rendezvous, whose second
    /// half waits for the sender's next turn; the pause between posix spin-wait polls,
    /// which makes each poll five times longer and so delays the point where an MPI
    /// library's wait loop yields its turn (docs/uct.md); and the
    /// endpoints' measured choice between eager and rendezvous, whose samples then
    /// measure the scheduler (`proto::tune`). The posix receive FIFO also
    /// shrinks to its compact ring, whose cells the processes taking turns on a core do
    /// not push out of its caches (docs/uct.md).
    fn watch_cpu_share(&mut self) {
        let Some(cpu) = &mut self.core.cpu else {
            return;
        };
        let was = (cpu.shared(), cpu.crowded());
        let shared = cpu.update(ucs::time::now_ns());
        if (shared, cpu.crowded()) == was {
            return;
        }
        use crate::proto::tune::{CROWDED_EAGER_MAX, SHARED_EAGER_MAX};
        self.core.shared_eager_max = match (shared, cpu.crowded()) {
            (false, _) => 0,
            (true, false) => SHARED_EAGER_MAX,
            (true, true) => CROWDED_EAGER_MAX,
        };
        if shared == was.0 {
            return;
        }
        self.core.split_thresh = if shared {
            usize::MAX
        } else {
            self.core.split_cfg
        };
        for iface in &mut self.ifaces {
            if let OpenIface::Posix(p) = iface {
                p.set_spin_pause(!shared);
                p.set_compact_ring(shared);
            }
        }
    }

    /// Fails the endpoints another lane found dead (`Core::lane_errors`), each once its AM
    /// lane has been read dry: a peer that sent its last messages and exited has them
    /// delivered before its endpoint fails, whichever transport noticed first (cma checks
    /// its peers' liveness on its own; the peer's last message may still sit in the
    /// posix FIFO).
    #[cold]
    #[inline(never)]
    fn fail_after_drain(&mut self) -> usize {
        /// Progress calls of the AM lane at most: it is only read while it delivers.
        const DRAIN_POLLS: usize = 64;
        let mut n = 0;
        for (ep, status) in std::mem::take(&mut self.core.lane_errors) {
            let Some(i) = self
                .core
                .eps
                .get(ep)
                .filter(|e| e.failed.is_none())
                .map(|e| e.am.iface)
            else {
                continue;
            };
            for _ in 0..DRAIN_POLLS {
                self.release_if_owed();
                self.core.cur_iface = i;
                let mut k = self.ifaces[i].progress(&mut self.core);
                if self.core.kept.is_some() {
                    k += self.dispatch_kept();
                }
                n += k;
                if k == 0 {
                    break;
                }
            }
            wireup::fail_ep(&mut self.core, ep, status, wireup::Failure::Error);
            n += 1;
        }
        n
    }

    /// Progresses every interface, the idle ones too; one that delivered something joins
    /// the active ones.
    #[inline(never)]
    fn progress_all_ifaces(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.ifaces.len() {
            self.core.cur_iface = i;
            let k = self.ifaces[i].progress(&mut self.core);
            if k > 0 {
                self.core.mark_active(i);
            }
            if self.core.kept.is_some() {
                n += self.dispatch_kept();
            }
            n += k;
        }
        n
    }

    /// Queued protocol actions, active-message handlers and sockets: out of the polling
    /// loop's way when there is nothing of the kind to do.
    #[inline(never)]
    fn progress_protocols(&mut self) -> usize {
        let mut n = 0;
        if !self.core.lane_errors.is_empty() {
            n += self.fail_after_drain();
        }
        if self.core.work {
            n += self.run_actions();
        }
        if !self.core.am_events.is_empty() {
            n += self.dispatch_am();
        }
        if self.sock.active() {
            listener::poll_sockets(self);
        }
        if self.core.queues_armed {
            if let Some(h) = self.queue_hooks {
                n += (h.progress)(self);
            }
            self.core.work |= self.core.queues_armed;
        }
        n
    }

    /// Whether the progressing thread was last found sharing its CPU with other busy
    /// threads (`UCX_SHARED_CPU_ADAPT`): while it does, a caller polling in a loop gains
    /// by asking [`progress_idle`](Self::progress_idle) before `progress`.
    #[inline]
    pub fn cpu_shared(&self) -> bool {
        self.core
            .cpu
            .as_ref()
            .is_some_and(ucs::sched::CpuShare::shared)
    }

    /// Whether a completion, an endpoint failure or a connection request waits to be
    /// taken (`poll_completion`, `poll_ep_error`, `poll_conn_request`).
    #[inline]
    pub fn has_reports(&self) -> bool {
        self.core.has_reports(&self.sock)
    }

    /// Each interface's own counters (`uct::Iface::counters`), by transport name.
    pub fn transport_counters(&self) -> Vec<(&'static str, Vec<(&'static str, u64)>)> {
        self.ifaces
            .iter()
            .zip(&self.core.info)
            .map(|(i, info)| (info.tl, i.counters()))
            .filter(|(_, c)| !c.is_empty())
            .collect()
    }

    /// Runs until the request finishes, then frees it and returns its status and info.
    pub fn wait(&mut self, id: ReqId) -> (Status, Option<TagInfo>) {
        loop {
            if let Some(done) = self.request_test(id) {
                return done;
            }
            if self.progress() == 0 {
                std::hint::spin_loop();
            }
        }
    }

    /// A descriptor that becomes readable when `progress` has something to do, after
    /// `arm` succeeded (`ucp_worker_get_efd`): the worker's epoll set of its interfaces'
    /// descriptors, its listener and connection sockets, and its signal. Every worker has
    /// one: one whose interfaces have no descriptor (self alone) still sleeps on it, woken
    /// by `ucp_worker_signal` and its sockets, while `arm` answers `Busy` whenever such an
    /// interface has work.
    pub fn event_fd(&self) -> Option<RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.epoll.as_raw_fd())
    }

    /// Prepares for sleeping on `event_fd` (`ucp_worker_arm`): `Err(Busy)` means there is
    /// work already; progress instead of sleeping.
    pub fn arm(&mut self) -> UcsResult<()> {
        self.release_if_owed();
        self.keepalive_due();
        // A signal that came before arming is not lost: it is the work found.
        if self.signal.drain()
            || self.core.work
            || !self.core.completions.is_empty()
            || !self.core.ep_errors.is_empty()
            || !self.core.am_events.is_empty()
        {
            return Err(Status::Busy);
        }
        // Each interface arms its own descriptor, or says it has work. One without a
        // descriptor that is driven on demand (self) is busy while it has work; the
        // others without one (cma) produce no events of their own.
        for (i, iface) in self.ifaces.iter_mut().enumerate() {
            match iface.arm() {
                Ok(()) => {}
                Err(Status::Unsupported) => {
                    if self.core.on_demand.contains(&(i as u8)) && iface.has_work() {
                        return Err(Status::Busy);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        // What is readable now is work that has arrived: the descriptors are
        // level-triggered (a tcp socket with unread bytes, a listener with a connection
        // waiting), so they stay readable until progress takes what they hold, and
        // sleeping on them would return at once. Progress first.
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let n = self.epoll.wait(&mut ev, 0).unwrap_or(0);
        if n > 0 {
            if ev[..n].iter().any(|e| e.u64 == SIGNAL_EVENT) {
                self.signal.drain();
            }
            if ev[..n].iter().any(|e| e.u64 == SOCKET_EVENT) {
                self.sock.due = true;
            }
            return Err(Status::Busy);
        }
        self.keepalive_arm();
        self.armed = true;
        Ok(())
    }

    /// Wakes a thread asleep on `event_fd` when a call made since its `arm` left work
    /// that only `progress` finishes: a send another thread posted that did not fit the
    /// transport (a full FIFO), or one waiting for wire-up. Nothing else would make the
    /// descriptor readable (UCXX posts from Python's thread while its progress thread
    /// sleeps; a 4 MiB stream send then stopped at the first full FIFO, 2026-12-07). The
    /// C functions call this after every call into the worker; costs a load while no
    /// thread is armed.
    #[inline]
    pub fn wake_if_asleep(&mut self) {
        if self.armed && self.has_work() {
            self.armed = false;
            let _ = self.signal.signal();
        }
    }

    /// Whether `progress` has something to do without a new event: what `arm` answers
    /// `Busy` for before it looks at the interfaces' descriptors.
    fn has_work(&self) -> bool {
        self.core.work
            || !self.core.completions.is_empty()
            || !self.core.ep_errors.is_empty()
            || !self.core.am_events.is_empty()
            || self.core.on_demand.iter().any(|&i| {
                self.ifaces
                    .get(usize::from(i))
                    .is_some_and(|f| f.has_work())
            })
    }

    /// Hands `data` to the protocol handlers as if active message `id` had arrived on the
    /// first interface, then runs what the handlers queued: the fuzzing entry for
    /// peer-supplied protocol bytes (`fuzz/`). A malformed message must fail only the
    /// endpoint it names (or be counted in `WorkerStats::malformed`), never panic.
    #[doc(hidden)]
    pub fn deliver_for_fuzzing(&mut self, id: u8, data: &[u8]) {
        use uct::Handler as _;
        self.core.cur_iface = 0;
        self.core.am(id, data);
        self.run_actions();
    }

    /// A handle that wakes this worker from another thread (`ucp_worker_signal`).
    pub fn signaler(&self) -> Signaler {
        Signaler(Arc::clone(&self.signal))
    }

    /// Sleeps until `event_fd` is readable or `timeout_ms` passes (-1: forever)
    /// (`ucp_worker_wait`, after a successful `arm`). Returns whether an event came.
    pub fn wait_event(&mut self, timeout_ms: i32) -> UcsResult<bool> {
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let n = self
            .epoll
            .wait(&mut ev, timeout_ms)
            .map_err(|_| Status::IoError)?;
        if ev[..n].iter().any(|e| e.u64 == SOCKET_EVENT) {
            self.sock.due = true;
        }
        Ok(n > 0)
    }
}

impl RunActions for Worker {
    fn run_actions(&mut self) -> usize {
        self.core.work = false;
        let mut n = 0;
        let Worker { ifaces, core, .. } = self;
        while let Some((w, addr)) = core.accepts.pop_front() {
            wireup::accept(ifaces, core, w, addr);
            n += 1;
        }
        if !core.deferred_reqs.is_empty() {
            wireup::deferred_requests(core);
        }
        // Gets and sends first: they queue acknowledgements, sent below in this same call.
        while let Some(id) = core.gets.pop_front() {
            rndv::start_get(ifaces, core, id);
            n += 1;
            if !core.unpacks.is_empty() {
                // Copy what was read into device memory while the next get reads.
                n += rndv::start_unpacks(ifaces, core);
            }
        }
        while let Some(id) = core.puts.pop_front() {
            rndv::start_put_recv(ifaces, core, id);
            n += 1;
        }
        if !core.unpacks.is_empty() {
            n += rndv::start_unpacks(ifaces, core);
        }
        for (i, m) in core.deregs.drain(..) {
            let _ = ifaces[i].md().mem_dereg(&m);
        }
        for (i, name, chunk) in core.umr_releases.drain(..) {
            ifaces[i].umr_release(name, chunk);
        }
        // (Taken and put back, so the vector keeps its capacity.)
        let mut finished = std::mem::take(&mut core.finished);
        for id in finished.drain(..) {
            eager::maybe_finish_send(ifaces, core, id);
            n += 1;
        }
        core.finished = finished;
        // Endpoints that block again are re-queued behind: visit each queued one once.
        for _ in 0..core.ready.len() {
            let Some(ep) = core.ready.pop_front() else {
                break;
            };
            if let Some(e) = core.eps.get_mut(ep) {
                e.in_ready = false;
            }
            if eager::drain_queue(ifaces, core, ep) {
                n += 1;
            }
        }
        // Control messages, each endpoint's in order (a split rendezvous's RTR_SPLIT must
        // reach the sender before the ACK that follows it). An endpoint whose lane is full
        // keeps the rest of its messages and waits for the next pass; the others go on.
        // Queued per endpoint, so that a pass costs what it sends: one queue for all made
        // a target holding the replies to a million small gets walk them all on every
        // progress call while the origin's FIFO was full.
        if !core.put_ack_eps.is_empty() {
            rma::send_put_acks(core);
        }
        let mut blocked = 0;
        for _ in 0..core.ctrl_eps.len() {
            let Some(ep) = core.ctrl_eps.pop_front() else {
                break;
            };
            // The queue is taken out while its messages go (sending needs the core), and
            // messages are moved only once sent: a `Ctrl` is a few hundred bytes.
            let Some(mut q) = core.eps.get_mut(ep).map(|e| std::mem::take(&mut e.ctrl)) else {
                continue;
            };
            let mut held = false;
            while let Some(c) = q.front() {
                match wireup::send_ctrl(ifaces, core, ep, c) {
                    Err(Status::NoResource) => {
                        held = true;
                        break;
                    }
                    Err(e) => log::debug!("ucp: control message to ep {ep} dropped: {e}"),
                    Ok(()) => n += 1,
                }
                if let Some(c) = q.pop_front() {
                    core.recycle_ctrl(c);
                }
            }
            // Sending may have ended the endpoint (its messages go with it) or queued more
            // for it (behind these).
            if let Some(e) = core.eps.get_mut(ep) {
                q.append(&mut e.ctrl);
                e.ctrl = q;
                if held {
                    core.ctrl_eps.push_back(ep);
                    blocked += 1;
                } else {
                    e.in_ctrl = !e.ctrl.is_empty();
                    if e.in_ctrl {
                        core.ctrl_eps.push_back(ep);
                    }
                }
            }
        }
        if core.lazy_replies != 0 {
            core.materialize_replies();
        }
        if !core.rma_queue.is_empty() {
            n += rma::progress_queue(ifaces, core);
        }
        for ep in std::mem::take(&mut core.peer_closes) {
            wireup::fail_ep(
                core,
                ep,
                Status::ConnectionReset,
                wireup::Failure::PeerClosed,
            );
            n += 1;
        }
        if !core.flushes.is_empty() {
            n += wireup::progress_flushes(ifaces, core);
        }
        if !core.stage_recvs.is_empty() {
            n += rndv::poll_staged_recvs(core);
        }
        if blocked > 0
            || !core.deferred_reqs.is_empty()
            || !core.ready.is_empty()
            || !core.flushes.is_empty()
            || !core.rma_queue.is_empty()
            || !core.stage_recvs.is_empty()
            || core.queues_armed
        {
            core.work = true;
        }
        n
    }
}

/// Whether every on-demand interface in use is known to have nothing to progress without
/// a call: self (in practice the only one) with nothing queued. Any other counts as busy,
/// which sends `progress_idle`'s caller to `progress` (`poll_on_demand` asks it); a call
/// here would give `ucp_worker_progress` a stack frame on every empty poll.
#[inline(always)]
fn on_demand_quiet(core: &Core, ifaces: &[OpenIface]) -> bool {
    for &i in &core.on_demand {
        match ifaces.get(usize::from(i)) {
            Some(OpenIface::SelfTl(s)) if !uct::Iface::has_work(&**s) => {}
            _ => return false,
        }
    }
    true
}

impl Core {
    /// The one interface that `progress` call number `tick` polls, when it polls one
    /// alone: one interface is in use, it is not the call that looks at the idle ones, and
    /// no protocol work or connection is waiting.
    #[inline(always)]
    fn lone_iface(&self, sock: &Sockets, tick: u32) -> Option<usize> {
        (self.poll_one != NO_IFACE
            && !tick.is_multiple_of(IDLE_POLL_EVERY)
            && !self.work
            && self.am_events.is_empty()
            && !sock.active())
        .then_some(usize::from(self.poll_one))
    }

    /// [`Worker::has_reports`], from the parts `Worker::progress_idle` holds.
    #[inline(always)]
    fn has_reports(&self, sock: &Sockets) -> bool {
        !self.completions.is_empty() || !self.ep_errors.is_empty() || sock.has_conn_requests()
    }
}
