//! `posix`: shared memory between processes of one host. Each interface owns one receive
//! FIFO (see `fifo`) in an unlinked `/dev/shm` segment (`ucs::shm`); an endpoint
//! maps its peer's FIFO and writes cells into it. Short and bcopy active messages, eventfd
//! wakeup, and peer-death detection through the peer's pid and start time.

mod fifo;

use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;

use slab::Slab;
use ucs::wakeup::EventFd;
use ucs::{Config, Status, UcsResult};

use crate::ep::{Comp, Done, EpId};
use crate::error::OpenError;
use crate::iface::{check_am_id, Handler, Iface, IfaceAttr, IfaceFlags, OpLimits, PerfEstimate};
use crate::md::{BoundsMd, Md};
use fifo::{Fifo, FifoView};
use ucs::shm::Segment;
use ucs::wire::{Reader, Writer};

static MD: BoundsMd = BoundsMd::new("posix", *b"PSX1");

/// Checks that a shared-memory segment can be created here.
pub fn probe() -> Result<(), String> {
    Segment::create(4096)
        .map(drop)
        .map_err(|e| format!("cannot create a /dev/shm segment: {e}"))
}

/// A peer's FIFO, mapped once per interface however many endpoints use it.
#[derive(Debug)]
struct PeerFifo {
    fifo: Fifo,
    wake: Option<OwnedFd>,
    pid: i32,
    start_time: u64,
}

#[derive(Debug)]
struct PosixEp {
    /// The peer's FIFO, kept mapped by `peer`.
    fifo: FifoView,
    peer: Arc<PeerFifo>,
    failed: Option<Status>,
    reported: bool,
    /// The peer FIFO's `tail` as this endpoint last read it (`FifoView::push`).
    tail_seen: u64,
}

/// Parsed interface address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Addr {
    pid: u32,
    start_time: u64,
    seg_fd: u32,
    efd: u32,
    fifo_size: u32,
    seg_size: u32,
}

impl Addr {
    fn pack(&self) -> Vec<u8> {
        Writer::default()
            .u32(self.pid)
            .u64(self.start_time)
            .u32(self.seg_fd)
            .u32(self.efd)
            .u32(self.fifo_size)
            .u32(self.seg_size)
            .buf
    }

    fn parse(b: &[u8]) -> Option<Addr> {
        let mut r = Reader::new(b);
        let a = Addr {
            pid: r.u32()?,
            start_time: r.u64()?,
            seg_fd: r.u32()?,
            efd: r.u32()?,
            fifo_size: r.u32()?,
            seg_size: r.u32()?,
        };
        let sane = r.is_empty()
            && a.pid > 0
            && a.pid <= i32::MAX as u32
            && a.fifo_size.is_power_of_two()
            && (2..=65536).contains(&a.fifo_size)
            && a.seg_size.is_multiple_of(64)
            && (128..=(1 << 24)).contains(&a.seg_size);
        sane.then_some(a)
    }
}

/// The posix shared-memory interface.
#[derive(Debug)]
pub struct PosixIface {
    attr: IfaceAttr,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    rx: Fifo,
    rx_index: u64,
    /// Cells below this have been released to the producers.
    rx_released: u64,
    /// Whether the receive ring should run compact (`set_compact_ring`): it switches at
    /// the next point where it is empty.
    want_compact: bool,
    /// The cell a handler kept (`Handler::am_keep`), or `NOT_KEPT`: neither it nor any
    /// later cell is released until `am_release`.
    kept: u64,
    efd: EventFd,
    eps: Slab<PosixEp>,
    peers: HashMap<Addr, Arc<PeerFifo>>,
    pending: VecDeque<(EpId, u64)>,
    errors: VecDeque<(EpId, Status)>,
    /// A peer found gone: its failure is reported once the receive FIFO has been read up
    /// to this cell, the claim position when it was found. Messages it published before it
    /// exited (an acknowledgement, then its close) are delivered first; reporting at once
    /// lost them to an operation that ended with the error instead.
    report_after: Option<u64>,
    check_interval_ns: u64,
    next_check: u64,
    progress_calls: u32,
    /// The address of the cell the next send to the last peer sent to will most likely
    /// claim, or 0: prefetched for writing when the next message arrives, then 0 again
    /// (see `progress`).
    next_tx: usize,
    /// Sends that found the peer's FIFO full (`counters`: `posix_fifo_full`).
    fifo_full: u64,
    /// Empty polls in a row, and how many of them may pass before each further one pauses
    /// (`u32::MAX`: none pauses), as configured and as in force (`set_spin_pause`).
    idle_polls: u32,
    poll_backoff: u32,
    poll_backoff_cfg: u32,
    /// Cells `progress_full` hands over after the one `poll` hands over inline
    /// (`UCX_POSIX_FIFO_MAX_POLL` - 1): a call stops there, so that the application can
    /// post receives for the rest before they are matched (docs/uct.md).
    rx_batch: usize,
}

impl PosixIface {
    pub fn open(cfg: &Config) -> Result<PosixIface, OpenError> {
        let os = |call: &'static str| {
            move |source: std::io::Error| OpenError::Os {
                tl: "posix",
                device: "memory".into(),
                call,
                source,
            }
        };
        let (fifo_size, seg_size) = (cfg.posix_fifo_size, cfg.posix_seg_size);
        let seg = Segment::create(fifo::segment_len(fifo_size, seg_size))
            .map_err(os("segment create"))?;
        let rx = Fifo::init(seg, fifo_size, seg_size, cfg.posix_fifo_shared_size);
        let efd = EventFd::new().map_err(os("eventfd"))?;
        let pid = std::process::id();
        let addr = Addr {
            pid,
            start_time: ucs::sys::process_start_time(pid as i32).unwrap_or(0),
            seg_fd: rx.segment().fd() as u32,
            efd: efd.as_raw_fd() as u32,
            fifo_size: fifo_size as u32,
            seg_size: seg_size as u32,
        };
        let cap = rx.data_cap();
        let dev_addr = Writer::default().u64(ucs::sys::host_id()).buf;
        let iface_addr = addr.pack();
        Ok(PosixIface {
            attr: IfaceAttr {
                flags: IfaceFlags::AM_SHORT
                    | IfaceFlags::AM_BCOPY
                    | IfaceFlags::PENDING
                    | IfaceFlags::CONNECT_TO_IFACE
                    | IfaceFlags::EVENT_RECV
                    | IfaceFlags::ERRHANDLE_PEER_FAILURE
                    | IfaceFlags::EP_ORDERED
                    | IfaceFlags::AM_KEEP,
                am: OpLimits {
                    max_short: cap - 8,
                    max_bcopy: cap,
                    max_iov: 1,
                    ..Default::default()
                },
                put: OpLimits::default(),
                get: OpLimits::default(),
                perf: PerfEstimate {
                    overhead_ns: 15.0,
                    latency_ns: 80.0,
                    bandwidth: 12e9,
                },
                mem: crate::iface::MemCaps::HOST,
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
            },
            dev_addr,
            iface_addr,
            rx,
            rx_index: 0,
            rx_released: 0,
            want_compact: false,
            kept: NOT_KEPT,
            efd,
            eps: Slab::new(),
            peers: HashMap::new(),
            pending: VecDeque::new(),
            errors: VecDeque::new(),
            report_after: None,
            check_interval_ns: cfg.error_check_interval_ns.max(1_000_000),
            next_check: 0,
            progress_calls: 0,
            next_tx: 0,
            fifo_full: 0,
            idle_polls: 0,
            poll_backoff: u32::try_from(cfg.posix_poll_backoff).unwrap_or(u32::MAX),
            poll_backoff_cfg: u32::try_from(cfg.posix_poll_backoff).unwrap_or(u32::MAX),
            rx_batch: cfg.posix_fifo_max_poll.saturating_sub(1),
        })
    }

    fn attach(&mut self, a: Addr) -> UcsResult<Arc<PeerFifo>> {
        if let Some(p) = self.peers.get(&a) {
            return Ok(p.clone());
        }
        let pid = a.pid as i32;
        if ucs::sys::process_gone(pid, a.start_time) {
            return Err(Status::Unreachable);
        }
        let len = fifo::segment_len(a.fifo_size as usize, a.seg_size as usize);
        let seg = Segment::attach(pid, a.seg_fd, len).map_err(|e| {
            ucs::warn_limited!("posix: cannot map the FIFO of pid {pid}: {e}");
            Status::Unreachable
        })?;
        let fifo =
            Fifo::open(seg, a.fifo_size as usize, a.seg_size as usize, a.pid).map_err(|e| {
                log::warn!("posix: the segment of pid {pid} is not a FIFO ({e:?})");
                Status::InvalidAddr
            })?;
        let wake = match ucs::shm::dup_remote_fd(pid, a.efd) {
            Ok(fd) => Some(fd),
            Err(e) => {
                log::warn!(
                    "posix: cannot obtain the wakeup fd of pid {pid} ({e}); it will not be woken"
                );
                None
            }
        };
        let p = Arc::new(PeerFifo {
            fifo,
            wake,
            pid,
            start_time: a.start_time,
        });
        self.peers.insert(a, p.clone());
        Ok(p)
    }

    #[inline]
    fn ep(&self, ep: EpId) -> UcsResult<&PosixEp> {
        match self.eps.get(ep.index()) {
            Some(e @ PosixEp { failed: None, .. }) => Ok(e),
            Some(PosixEp {
                failed: Some(st), ..
            }) => Err(*st),
            None => Err(Status::InvalidParam),
        }
    }

    /// `ep`, for the send path, which updates the endpoint's `tail_seen`.
    #[inline]
    fn ep_mut(&mut self, ep: EpId) -> UcsResult<&mut PosixEp> {
        let e = self.eps.get_mut(ep.index()).ok_or(Status::InvalidParam)?;
        match e.failed {
            None => Ok(e),
            Some(st) => Err(st),
        }
    }

    #[inline]
    /// Sends one message whose `fill` writes at most `reach` bytes (`usize::MAX`: unknown).
    fn push(
        &mut self,
        ep: EpId,
        id: u8,
        reach: usize,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> UcsResult<usize> {
        let e = self.ep_mut(ep)?;
        match e.fifo.push_sized(&mut e.tail_seen, id, reach, fill) {
            None => {
                self.fifo_full += 1;
                Err(Status::NoResource)
            }
            Some((len, wake, next)) => {
                if wake {
                    if let Some(fd) = &e.peer.wake {
                        let _ = ucs::wakeup::signal_raw(fd.as_raw_fd());
                    }
                }
                self.next_tx = next;
                Ok(len)
            }
        }
    }

    fn check_peers(&mut self) {
        let mut dead = Vec::new();
        for (i, e) in self.eps.iter() {
            if e.failed.is_none() {
                let p = &e.peer;
                let alive = ucs::sys::process_alive(p.pid)
                    && ucs::sys::process_start_time(p.pid).is_none_or(|s| s == p.start_time);
                if !alive {
                    dead.push(i);
                }
            }
        }
        self.peers_gone(&dead);
    }

    /// Marks the endpoints `dead` failed; their failure is reported once what their peers
    /// published before exiting has been read (`report_after`).
    fn peers_gone(&mut self, dead: &[usize]) {
        if !dead.is_empty() {
            self.report_after = Some(self.rx.view().claimed());
        }
        for &i in dead {
            log::debug!("posix: peer pid {} is gone", self.eps[i].peer.pid);
            self.eps[i].failed = Some(Status::ConnectionReset);
            self.errors
                .push_back((EpId(i as u32), Status::ConnectionReset));
        }
    }
}

impl Iface for PosixIface {
    fn tl_name(&self) -> &str {
        "posix"
    }
    fn device_name(&self) -> &str {
        "memory"
    }
    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn md(&self) -> &dyn Md {
        &MD
    }
    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }
    fn is_reachable(&self, dev: &[u8], iface: &[u8]) -> bool {
        dev == self.dev_addr.as_slice() && Addr::parse(iface).is_some()
    }

    fn ep_connect(&mut self, dev: &[u8], iface: &[u8]) -> UcsResult<EpId> {
        if dev != self.dev_addr.as_slice() {
            return Err(Status::Unreachable);
        }
        let a = Addr::parse(iface).ok_or(Status::InvalidAddr)?;
        let peer = self.attach(a)?;
        Ok(EpId(self.eps.insert(PosixEp {
            fifo: peer.fifo.view(),
            peer,
            failed: None,
            reported: false,
            tail_seen: 0,
        }) as u32))
    }

    fn ep_destroy(&mut self, ep: EpId) {
        if let Some(e) = self.eps.try_remove(ep.index()) {
            // The peer's segment may be unmapped below: no prefetch of its cells.
            self.next_tx = 0;
            self.pending.retain(|(p, _)| *p != ep);
            self.errors.retain(|(p, _)| *p != ep);
            // Unmap the peer when this was its last endpoint.
            if Arc::strong_count(&e.peer) == 2 {
                self.peers.retain(|_, p| !Arc::ptr_eq(p, &e.peer));
            }
        }
    }

    #[inline]
    fn am_short(&mut self, ep: EpId, id: u8, header: u64, payload: &[u8]) -> UcsResult<()> {
        check_am_id(id)?;
        if payload.len() > self.attr.am.max_short {
            return Err(Status::InvalidParam);
        }
        self.push(ep, id, 8 + payload.len(), |d| {
            d[..8].copy_from_slice(&header.to_le_bytes());
            // The common tiny payloads are copied inline rather than through a memcpy call.
            ucs::wire::copy(&mut d[8..8 + payload.len()], payload);
            8 + payload.len()
        })
        .map(drop)
    }

    fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> UcsResult<usize> {
        check_am_id(id)?;
        self.push(ep, id, usize::MAX, pack)
    }

    fn pending_add(&mut self, ep: EpId, token: u64) -> UcsResult<()> {
        let room = self.ep(ep)?.fifo.has_room();
        if room && !self.pending.iter().any(|(e, _)| *e == ep) {
            return Err(Status::Busy);
        }
        self.pending.push_back((ep, token));
        Ok(())
    }

    fn pending_purge(&mut self, ep: EpId) -> Vec<u64> {
        let mut out = Vec::new();
        self.pending.retain(|(e, t)| {
            if *e == ep {
                out.push(*t);
                false
            } else {
                true
            }
        });
        out
    }

    fn flush(&mut self, ep: Option<EpId>, _comp: Comp) -> UcsResult<Done> {
        // A published cell is delivered; there is nothing in flight at the sender.
        if let Some(ep) = ep {
            self.ep(ep)?;
        }
        Ok(Done::Now)
    }

    fn ep_idle(&self, ep: EpId) -> bool {
        // A published cell is delivered (see `flush`).
        self.ep(ep).is_ok()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("posix_fifo_full", self.fifo_full)]
    }

    #[inline]
    fn progress(&mut self, h: &mut dyn Handler) -> usize {
        self.poll(h)
    }

    fn am_release(&mut self) {
        if self.kept != NOT_KEPT {
            self.kept = NOT_KEPT;
            self.release_due();
        }
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.efd.as_raw_fd())
    }

    fn arm(&mut self) -> UcsResult<()> {
        self.efd.drain();
        if self.kept != NOT_KEPT
            || !self.errors.is_empty()
            || self
                .pending
                .iter()
                .any(|(e, _)| self.ep(*e).is_ok_and(|p| p.fifo.has_room()))
        {
            return Err(Status::Busy);
        }
        self.switch_ring();
        self.rx_released = self.rx_index;
        if self.rx.arm(self.rx_index) {
            Ok(())
        } else {
            Err(Status::Busy)
        }
    }
}

/// `PosixIface::kept` when no cell is kept.
const NOT_KEPT: u64 = u64::MAX;

/// A peer wrote a cell whose length does not fit: the cell is skipped.
#[cold]
#[inline(never)]
fn bad_cell(len: u32) {
    log::error!("posix: dropped a cell with invalid length {len}");
}

impl PosixIface {
    /// Whether empty polls past `UCX_POSIX_POLL_BACKOFF` pause (the default), or none does
    /// (the worker's choice while its thread shares a CPU: `ucp`'s `watch_cpu_share`).
    pub fn set_spin_pause(&mut self, on: bool) {
        self.poll_backoff = if on { self.poll_backoff_cfg } else { u32::MAX };
    }

    /// Whether empty polls pause at all now (see [`set_spin_pause`](Self::set_spin_pause)).
    pub fn spin_pause(&self) -> bool {
        self.poll_backoff != u32::MAX
    }

    /// Whether the receive FIFO should use its compact ring (`UCX_POSIX_FIFO_SHARED_SIZE`
    /// cells: the worker's choice while its thread shares a CPU) or all its cells. The
    /// ring switches at the first point where every message in it has been handed over
    /// and none is kept: now, or in a later progress call (every 1024th) or `arm`.
    pub fn set_compact_ring(&mut self, on: bool) {
        self.want_compact = on;
        self.switch_ring();
    }

    /// Whether the receive FIFO runs its compact ring now.
    pub fn compact_ring(&self) -> bool {
        self.rx.compact()
    }

    /// Switches the receive ring to the geometry asked for, if it is quiescent.
    fn switch_ring(&mut self) {
        if self.want_compact == self.rx.compact() || self.kept != NOT_KEPT {
            return;
        }
        if self.rx.set_compact(self.rx_index, self.want_compact) {
            self.rx_released = self.rx_index;
        }
    }

    /// `Iface::progress`, generic over the handler: a worker that holds this interface by
    /// its own type (`uct::OpenIface`) calls it with its handler's type, and the handler's
    /// message path is inlined into the loop that reads the FIFO (measured
    /// 2026-11-28).
    #[inline(always)]
    pub fn poll<H: Handler + ?Sized>(&mut self, h: &mut H) -> usize {
        self.progress_calls = self.progress_calls.wrapping_add(1);
        let mut n = 0;
        // One message inline (the ping-pong case); a backlog continues in `progress_full`.
        let rx = self.rx.view();
        if let Some(cell) = rx.peek(self.rx_index) {
            // A message that arrives is often answered: ask for the first two lines of the
            // cell the answer will take now, so that their ownership travels while the
            // message is handled instead of after the answer's stores (the peer has the
            // first line in its cache: it polls it; the second, which an answer of more
            // than 40 bytes reaches, it read when the ring last came round). On a 16-core
            // Xeon, 64-byte ping-pong went from 0.53 to 0.36-0.41 us with the second line
            // (2026-11-27, docs/uct.md). A wrong guess takes the lines from
            // whoever writes or polls that cell next, so the guess is spent on the first
            // arrival after a send: at most two stray line transfers per message sent.
            if self.next_tx != 0 {
                fifo::prefetch_write(self.next_tx);
                fifo::prefetch_write(self.next_tx + 64);
                self.next_tx = 0;
            }
            if self.deliver(cell, h) {
                // Kept: the handler acts on it before anything else happens.
                return 1;
            }
            n = 1;
            if self.rx.ready(self.rx_index) {
                n += self.progress_full(h);
            }
            self.idle_polls = 0;
        } else {
            self.idle_wait();
        }
        if self.slow_due(self.progress_calls) {
            n += self.progress_slow(h);
        }
        n
    }

    /// Whether the next [`poll`](Self::poll) would be an empty one: no message waits and
    /// no slow work is due. The worker asks this first, so that an empty poll does not
    /// pay for the frame of the message path; [`poll_idle`](Self::poll_idle) then does
    /// that poll's bookkeeping (docs/ucp.md).
    #[inline(always)]
    pub fn idle(&self) -> bool {
        !self.rx.ready(self.rx_index) && !self.slow_due(self.progress_calls.wrapping_add(1))
    }

    /// An empty [`poll`](Self::poll), when [`idle`](Self::idle) said it would be one.
    #[inline(always)]
    pub fn poll_idle(&mut self) {
        self.progress_calls = self.progress_calls.wrapping_add(1);
        self.idle_wait();
    }

    /// An empty poll's wait. A caller polling in a loop is spin-waiting: after a few empty
    /// polls in a row, pause between them (UCX_POSIX_POLL_BACKOFF). Each reread of the
    /// cell takes its line back from a producer that has just claimed it for writing (the
    /// prefetch in `poll`, on the peer's side), which costs that producer another
    /// ownership round trip before its stores land (docs/uct.md).
    #[inline(always)]
    fn idle_wait(&mut self) {
        self.idle_polls = self.idle_polls.saturating_add(1);
        if self.idle_polls > self.poll_backoff {
            std::hint::spin_loop();
        }
    }

    /// Whether the poll numbered `calls` owes `progress_slow` a turn: every 1024th, and
    /// every one while sends wait for cells or peers' failures wait to be reported.
    #[inline(always)]
    fn slow_due(&self, calls: u32) -> bool {
        calls.is_multiple_of(1024) || !self.pending.is_empty() || !self.errors.is_empty()
    }

    /// Hands one cell to `h` and moves past it; returns true when the handler kept it.
    #[inline(always)]
    fn deliver<H: Handler + ?Sized>(&mut self, cell: Result<(u8, &[u8]), u32>, h: &mut H) -> bool {
        // Nothing is held in registers across the handler (an empty poll of `progress`
        // would pay for saving them), whether it is called through the trait object or,
        // for the worker's own handler, inlined here (empty poll 4.85 ns before, 4.87
        // after, 2026-11-28).
        match cell {
            Ok((id, data)) if self.kept == NOT_KEPT => {
                if h.am_keep(id, data) {
                    // Nothing to release: the batch ends below the kept cell.
                    self.kept = self.rx_index;
                    self.rx_index = self.rx_index.wrapping_add(1);
                    return true;
                }
            }
            Ok((id, data)) => {
                self.deliver_behind_kept(id, data, h);
                return false;
            }
            Err(len) => bad_cell(len),
        }
        self.rx_index = self.rx_index.wrapping_add(1);
        self.release_due();
        false
    }

    /// A message behind a kept one (a handler progressing from inside the kept message's
    /// handler): handed over to be copied; nothing is released. Out of line, so that the
    /// common path holds fewer registers.
    #[cold]
    #[inline(never)]
    fn deliver_behind_kept<H: Handler + ?Sized>(&mut self, id: u8, data: &[u8], h: &mut H) {
        h.am(id, data);
        self.rx_index = self.rx_index.wrapping_add(1);
    }

    /// Releases the consumed cells, up to the kept one. Each cell is released as soon as
    /// it has been handed over: released a quarter of the ring at a time, a window of 64
    /// sends into the 64-cell ring found it full for its last few messages, which then
    /// went the pending path (`bibw` 8 B: 155 -> 168 MB/s when released one by one; a
    /// 1 MiB message in the 32-cell compact ring needs every cell;
    /// docs/uct.md).
    #[inline(always)]
    fn release_due(&mut self) {
        let free = if self.kept == NOT_KEPT {
            self.rx_index
        } else {
            self.kept
        };
        if free != self.rx_released {
            self.rx.release(free);
            self.rx_released = free;
        }
    }

    /// Drains a backlog of up to `rx_batch` more cells.
    #[inline(never)]
    fn progress_full<H: Handler + ?Sized>(&mut self, h: &mut H) -> usize {
        let mut n = 0;
        while n < self.rx_batch {
            let rx = self.rx.view();
            let Some(cell) = rx.peek(self.rx_index) else {
                break;
            };
            n += 1;
            if self.deliver(cell, h) {
                break;
            }
        }
        n
    }

    /// Pending senders, peer liveness, failed endpoints: off the receive fast path.
    #[cold]
    #[inline(never)]
    fn progress_slow<H: Handler + ?Sized>(&mut self, h: &mut H) -> usize {
        let mut n = 0;
        if !self.pending.is_empty() {
            n += self.progress_pending(h);
        }
        if self.want_compact != self.rx.compact() {
            self.switch_ring();
        }
        if self.progress_calls.is_multiple_of(1024) && !self.eps.is_empty() {
            let now = ucs::time::now_ns();
            if now >= self.next_check {
                self.next_check = now + self.check_interval_ns;
                self.check_peers();
                self.skip_dead_claim();
            }
        }
        if let Some(at) = self.report_after {
            // (Wrapping: the receive index has reached `at` when it is at most half the
            // counter space past it.)
            if (self.rx_index.wrapping_sub(at) as i64) < 0 {
                return n;
            }
            self.report_after = None;
        }
        if !self.errors.is_empty() {
            n += self.report_errors(h);
        }
        n
    }

    /// A cell that a producer claimed and did not publish, stalling the receive FIFO for
    /// every other producer: when every process that may be writing it is gone, the cell
    /// is skipped (its message died with its writer).
    fn skip_dead_claim(&mut self) {
        if self.rx.ready(self.rx_index) {
            return;
        }
        let who = self.rx.claimants(self.rx_index);
        if who.is_empty() || who.iter().any(|&p| ucs::sys::process_alive(p as i32)) {
            return;
        }
        ucs::warn_limited!(
            "posix: pid {} died while writing a message into this FIFO; its cell is skipped",
            who[0]
        );
        self.rx.abandon(self.rx_index);
        self.rx_index = self.rx_index.wrapping_add(1);
        self.release_due();
    }

    fn report_errors<H: Handler + ?Sized>(&mut self, h: &mut H) -> usize {
        let mut n = 0;
        while let Some((ep, st)) = self.errors.pop_front() {
            let tokens = self.pending_purge(ep);
            if let Some(e) = self.eps.get_mut(ep.index()) {
                if !e.reported {
                    e.reported = true;
                    // Pending senders learn of the failure by retrying.
                    for t in tokens {
                        h.pending(ep, t);
                    }
                    h.ep_error(ep, st);
                    n += 1;
                }
            }
        }
        n
    }

    fn progress_pending<H: Handler + ?Sized>(&mut self, h: &mut H) -> usize {
        let mut n = 0;
        let eps = &self.eps;
        // Readiness is decided once per endpoint, so a FIFO that drains mid-scan cannot
        // let a later token of the same endpoint overtake an earlier one.
        let mut blocked: smallvec::SmallVec<[EpId; 8]> = smallvec::SmallVec::new();
        self.pending.retain(|(ep, token)| {
            let ready = !blocked.contains(ep)
                && match eps.get(ep.index()) {
                    Some(e) => e.failed.is_some() || e.fifo.has_room(),
                    None => true,
                };
            if !ready && !blocked.contains(ep) {
                blocked.push(*ep);
            }
            if ready {
                h.pending(*ep, *token);
                n += 1;
            }
            !ready
        });
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Sink(Vec<(u8, Vec<u8>)>);
    impl Handler for Sink {
        fn am(&mut self, id: u8, data: &[u8]) {
            self.0.push((id, data.to_vec()));
        }
    }

    /// An interface with an endpoint to its own FIFO.
    fn loopback(cfg: &Config) -> (PosixIface, EpId) {
        let mut iface = PosixIface::open(cfg).unwrap();
        let (dev, ifa) = (
            iface.device_address().to_vec(),
            iface.iface_address().to_vec(),
        );
        let ep = iface.ep_connect(&dev, &ifa).unwrap();
        (iface, ep)
    }

    #[test]
    fn segment_is_private_and_leaves_no_name_behind() {
        let iface = PosixIface::open(&Config::default()).unwrap();
        let fd = iface.rx.segment().fd();
        // SAFETY: st is a valid out-parameter; fd is open for the life of iface.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        assert_eq!(st.st_mode & 0o777, 0o600, "segment mode");
        assert_eq!(st.st_nlink, 0, "segment still has a name");
        // A segment that another test creates now has its name between its creation and
        // its unlink, a few instructions later: only a name still there after a second is
        // left behind.
        let names = || -> std::collections::HashSet<std::ffi::OsString> {
            std::fs::read_dir("/dev/shm")
                .unwrap()
                .filter_map(|e| e.ok())
                .map(|e| e.file_name())
                .filter(|n| n.to_string_lossy().starts_with("rucx-"))
                .collect()
        };
        let first = names();
        if !first.is_empty() {
            std::thread::sleep(std::time::Duration::from_secs(1));
            let left: Vec<_> = first.intersection(&names()).cloned().collect();
            assert!(left.is_empty(), "{left:?}");
        }
    }

    #[test]
    fn loopback_to_own_fifo_delivers_in_order() {
        let cfg = Config::default();
        let (mut iface, ep) = loopback(&cfg);
        let mut sink = Sink::default();
        for i in 0..200u32 {
            loop {
                match iface.am_short(ep, 3, u64::from(i), &i.to_le_bytes()) {
                    Ok(()) => break,
                    Err(Status::NoResource) => {
                        iface.progress(&mut sink);
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        while sink.0.len() < 200 {
            iface.progress(&mut sink);
        }
        for (i, (id, d)) in sink.0.iter().enumerate() {
            assert_eq!(*id, 3);
            assert_eq!(&d[..8], &(i as u64).to_le_bytes());
            assert_eq!(&d[8..], &(i as u32).to_le_bytes());
        }
        assert_eq!(
            iface.am_short(ep, AM_ID_MAX_TEST, 0, &[]),
            Err(Status::InvalidParam)
        );
    }

    #[test]
    fn the_compact_ring_switches_when_empty_and_never_under_a_kept_message() {
        let cfg = Config {
            posix_fifo_size: 16,
            posix_fifo_shared_size: 4,
            ..Config::default()
        };
        let (mut iface, ep) = loopback(&cfg);
        let mut h = Keeper {
            keep: 1,
            kept: None,
            got: Vec::new(),
        };
        iface.am_short(ep, 3, 0, &[]).unwrap();
        iface.am_short(ep, 3, 1, &[]).unwrap();
        iface.set_compact_ring(true);
        assert!(!iface.compact_ring(), "two messages wait");
        assert_eq!(iface.progress(&mut h), 2);
        assert!(h.kept.is_some());
        iface.set_compact_ring(true);
        assert!(!iface.compact_ring(), "a message is kept");
        iface.am_release();
        // The next progress call that runs the slow path switches; arm is one such point.
        assert_eq!(iface.arm(), Ok(()));
        assert!(iface.compact_ring());
        // Four cells in use now: a fifth send waits for the receiver.
        let mut sent = 0u64;
        while iface.am_short(ep, 3, 100 + sent, &[5; 20]).is_ok() {
            sent += 1;
        }
        assert_eq!(sent, 4);
        h.keep = u64::MAX;
        assert_eq!(iface.progress(&mut h), 4);
        // In order, across the switch, with their data.
        assert_eq!(h.got, [0, 100, 101, 102, 103]);
        iface.set_compact_ring(false);
        assert!(
            !iface.compact_ring(),
            "back to the full ring at once: it was empty"
        );
        sent = 0;
        while iface.am_short(ep, 3, 200 + sent, &[]).is_ok() {
            sent += 1;
        }
        assert_eq!(sent, 16);
        assert_eq!(iface.progress(&mut h), 16);
        assert_eq!(h.got.len(), 21);
        assert_eq!(h.got[20], 215);
    }

    #[test]
    fn a_progress_call_hands_over_at_most_max_poll_messages() {
        for (max_poll, per_call) in [(5, 5), (1, 1), (usize::MAX, 12)] {
            let cfg = Config {
                posix_fifo_max_poll: max_poll,
                ..Config::default()
            };
            let (mut iface, ep) = loopback(&cfg);
            for i in 0..12u32 {
                iface.am_short(ep, 3, 0, &i.to_le_bytes()).unwrap();
            }
            let mut sink = Sink::default();
            let mut calls = Vec::new();
            while sink.0.len() < 12 {
                let before = sink.0.len();
                iface.progress(&mut sink);
                calls.push(sink.0.len() - before);
            }
            let want: Vec<usize> = (0..12)
                .step_by(per_call)
                .map(|k| per_call.min(12 - k))
                .collect();
            assert_eq!(calls, want, "UCX_POSIX_FIFO_MAX_POLL={max_poll}");
            let order: Vec<u32> = sink
                .0
                .iter()
                .map(|(_, d)| u32::from_le_bytes(d[8..12].try_into().unwrap()))
                .collect();
            assert_eq!(order, (0..12).collect::<Vec<_>>());
        }
    }

    /// Messages and endpoint errors, in the order the interface reported them.
    #[derive(Default)]
    struct Events(Vec<Result<u32, (EpId, Status)>>);
    impl Handler for Events {
        fn am(&mut self, _id: u8, data: &[u8]) {
            self.0
                .push(Ok(u32::from_le_bytes(data[8..12].try_into().unwrap())));
        }
        fn ep_error(&mut self, ep: EpId, status: Status) {
            self.0.push(Err((ep, status)));
        }
    }

    #[test]
    fn a_peer_found_gone_is_reported_after_what_it_sent() {
        let (mut iface, ep) = loopback(&Config::default());
        // The peer publishes three messages (an acknowledgement, say, then its close) and
        // exits; the liveness check finds it gone before they are read.
        for i in 0..3u32 {
            iface.am_short(ep, 3, 0, &i.to_le_bytes()).unwrap();
        }
        iface.peers_gone(&[ep.index()]);
        let mut ev = Events::default();
        assert_eq!(iface.progress_slow(&mut ev), 0);
        assert!(ev.0.is_empty(), "reported before its messages: {:?}", ev.0);
        for _ in 0..10 {
            iface.progress(&mut ev);
        }
        assert_eq!(
            ev.0,
            vec![Ok(0), Ok(1), Ok(2), Err((ep, Status::ConnectionReset))]
        );
    }

    /// Keeps the message with payload `keep` (an 8-byte value), records the others.
    struct Keeper {
        keep: u64,
        kept: Option<(*const u8, usize)>,
        got: Vec<u64>,
    }
    impl Handler for Keeper {
        fn am(&mut self, _id: u8, data: &[u8]) {
            self.got
                .push(u64::from_le_bytes(data[..8].try_into().unwrap()));
        }
        fn am_keep(&mut self, id: u8, data: &[u8]) -> bool {
            if data[..8] == self.keep.to_le_bytes() {
                self.kept = Some((data.as_ptr(), data.len()));
                return true;
            }
            self.am(id, data);
            false
        }
    }

    #[test]
    fn kept_message_stays_in_place_until_released() {
        let cfg = Config {
            posix_fifo_size: 8,
            ..Config::default()
        };
        let (mut iface, ep) = loopback(&cfg);
        assert!(iface.attr().flags.contains(IfaceFlags::AM_KEEP));
        let mut h = Keeper {
            keep: 1,
            kept: None,
            got: Vec::new(),
        };
        iface.am_short(ep, 3, 0, &[]).unwrap();
        iface.am_short(ep, 3, 1, &[7; 40]).unwrap();
        iface.am_short(ep, 3, 2, &[]).unwrap();
        // Progress stops at the kept message: the one after it waits.
        assert_eq!(iface.progress(&mut h), 2);
        assert_eq!(h.got, [0]);
        let (ptr, len) = h.kept.expect("kept");
        // Later messages are delivered, but the kept cell and those after it are not
        // released: the producer runs out of cells instead of overwriting it. (The cell
        // before it, released when it was read, is used again.)
        let mut sent = 3u64;
        for _ in 0..100 {
            while iface.am_short(ep, 3, sent + 100, &[9; 40]).is_ok() {
                sent += 1;
            }
            iface.progress(&mut h);
        }
        assert_eq!(
            sent, 9,
            "cells up to the kept one are used again, the kept one and those after it not"
        );
        assert_eq!(iface.counters(), [("posix_fifo_full", 100)]);
        assert_eq!(h.got.len(), 8);
        assert_eq!(
            iface.arm(),
            Err(Status::Busy),
            "no sleeping on a kept message"
        );
        // SAFETY: the iface is alive and the message has not been released, so its cell
        // is mapped and unchanged (what this test checks).
        let data = unsafe { std::slice::from_raw_parts(ptr, len) };
        assert_eq!(&data[..8], &1u64.to_le_bytes());
        assert_eq!(&data[8..], &[7; 40]);
        iface.am_release();
        assert!(iface.am_short(ep, 3, 999, &[]).is_ok(), "cells released");
        iface.am_release(); // nothing kept: no effect
    }

    const AM_ID_MAX_TEST: u8 = crate::iface::AM_ID_MAX;

    #[test]
    fn malformed_addresses_are_unreachable_not_panics() {
        let mut iface = PosixIface::open(&Config::default()).unwrap();
        let dev = iface.device_address().to_vec();
        for bad in [&[][..], &[1, 2, 3], &[0u8; 28], &[0xffu8; 28], &[0u8; 29]] {
            assert!(!iface.is_reachable(&dev, bad));
            assert!(iface.ep_connect(&dev, bad).is_err());
        }
        let ifa = iface.iface_address().to_vec();
        assert_eq!(iface.ep_connect(&[9; 8], &ifa), Err(Status::Unreachable));
    }
}
