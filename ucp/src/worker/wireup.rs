//! Endpoint creation, lane selection, wire-up, control messages, flush/close and failure.

use std::collections::VecDeque;

use smallvec::SmallVec;

use ucs::{Status, UcsResult};
use uct::component::DeviceKind;
use uct::{Done, Iface, IfaceFlags, MemoryType, OpenIface};

use super::op::{FlushOp, Op, Unexp};
use super::state::{Bad, Core, Ctrl, Ep, IfaceInfo, Lane, Res, Worker, COMP_FLUSH};
use crate::address::WorkerAddress;
use crate::proto::select::{LaneAttrs, Thresholds};
use crate::proto::wire::{self, Wireup, WIREUP_REP, WIREUP_REQ};
use crate::request::EpHandle;
use crate::request::ReqId;
use crate::tag::SenderId;

/// How long the larger-uuid side of a tcp pair waits for the other's wire-up request
/// before sending its own.
const WIREUP_DEFER_NS: u64 = 20_000_000;

/// Sends the deferred wire-up requests whose time has come, unless the peer's request
/// paired the endpoint meanwhile.
pub(crate) fn deferred_requests(core: &mut Core) {
    let now = ucs::time::now_ns();
    let mut i = 0;
    while i < core.deferred_reqs.len() {
        let (ep, at) = core.deferred_reqs[i];
        let paired = core
            .eps
            .get(ep)
            .is_none_or(|e| e.remote_id.is_some() || e.failed.is_some());
        if paired {
            core.deferred_reqs.swap_remove(i);
        } else if now >= at {
            core.deferred_reqs.swap_remove(i);
            core.queue_ctrl(ep, Ctrl::WireupReq { dst: u32::MAX });
        } else {
            i += 1;
        }
    }
    if !core.deferred_reqs.is_empty() {
        core.work = true;
    }
}

/// The lanes of an endpoint: one for active messages, and a memory lane for each kind of
/// memory (host-accessible, device), chosen from the interfaces' capabilities and
/// estimates.
struct Lanes {
    am: Lane,
    rma: Option<Lane>,
    rma_dev: Option<Lane>,
}

/// Which lanes an endpoint to `peer` uses.
fn select_lanes(ifaces: &mut [OpenIface], core: &Core, peer: &WorkerAddress) -> UcsResult<Lanes> {
    let same_worker = peer.uuid == core.uuid;
    // Our own worker goes through a loopback transport (self) when there is one; without
    // (`UCX_TLS=tcp`, as UCX allows), through the others, as any peer.
    let has_loopback = core.info.iter().any(|i| i.kind == DeviceKind::Loopback);
    let mut am: Option<(f64, usize, usize)> = None;
    let mut rma: Option<(f64, usize, usize)> = None;
    let mut rma_dev: Option<(f64, usize, usize)> = None;
    let better =
        |best: &Option<(f64, usize, usize)>, cost: f64| best.is_none_or(|(c, _, _)| cost < c);
    for (i, iface) in ifaces.iter().enumerate() {
        let info = &core.info[i];
        // A loopback transport only reaches our own worker, and our own worker is reached
        // only through one where there is one.
        let loopback = info.kind == DeviceKind::Loopback;
        if (loopback && !same_worker) || (same_worker && has_loopback && !loopback) {
            continue;
        }
        // A memory-type copy engine reaches no peer (the worker uses it for its own copies).
        if info.attr.flags.contains(IfaceFlags::MEMTYPE_COPY) {
            continue;
        }
        for (j, t) in peer.tls.iter().enumerate() {
            if t.tl != info.tl || !iface.is_reachable(&t.device_addr, &t.iface_addr) {
                continue;
            }
            let a = &info.attr;
            if a.flags.contains(IfaceFlags::AM_BCOPY) && a.mem.am.has(MemoryType::Host) {
                let cost = a.perf.time_ns(64);
                if better(&am, cost) {
                    am = Some((cost, i, j));
                }
            }
            // Rendezvous reads through a memory transport or RDMA; a network transport
            // whose get is emulated over its own AM (tcp) is no better than the pipeline
            // for that (it may still serve puts on the AM lane's connection: below).
            if !a.flags.contains(IfaceFlags::GET_ZCOPY)
                || (info.kind == DeviceKind::Network
                    && !a.flags.contains(IfaceFlags::RMA_ONE_SIDED))
            {
                continue;
            }
            let cost = a.perf.time_ns(1 << 20);
            if a.mem.rma_remote.has(MemoryType::Host) && better(&rma, cost) {
                rma = Some((cost, i, j));
            }
            if a.mem.rma_remote.has(MemoryType::Cuda)
                && a.mem.rma_local.has(MemoryType::Cuda)
                && better(&rma_dev, cost)
            {
                rma_dev = Some((cost, i, j));
            }
        }
    }
    let (_, ai, aj) = am.ok_or(Status::Unreachable)?;
    let connect = |ifaces: &mut [OpenIface], i: usize, j: usize| {
        let t = &peer.tls[j];
        ifaces[i]
            .ep_connect(&t.device_addr, &t.iface_addr)
            .map(|ep| Lane { iface: i, ep })
    };
    let am_lane = connect(ifaces, ai, aj)?;
    let memory_lane = |ifaces: &mut [OpenIface], choice: Option<(f64, usize, usize)>| match choice {
        Some((_, ri, _)) if ri == ai => Some(Lane {
            iface: ri,
            ep: am_lane.ep,
        }),
        Some((_, ri, rj)) => match connect(ifaces, ri, rj) {
            Ok(l) => Some(l),
            Err(e) => {
                log::debug!("ucp: no memory lane via {}: {e}", core.info[ri].tl);
                None
            }
        },
        None => None,
    };
    // No memory transport reaches the peer: a network transport that carries put and get
    // as messages on the AM lane's connection serves, for put rendezvous (the target
    // places the data as it arrives, with no copy through a bounce buffer at either end).
    let rma = rma.or_else(|| {
        let a = &core.info[ai].attr;
        (by_messages(&core.info[ai])
            && a.flags
                .contains(IfaceFlags::PUT_ZCOPY | IfaceFlags::EP_ORDERED)
            && a.mem.rma_remote.has(MemoryType::Host))
        .then_some((0.0, ai, aj))
    });
    let rma_lane = memory_lane(ifaces, rma);
    let rma_dev = match (rma_dev, rma, rma_lane) {
        // The same interface serves both: one transport endpoint.
        (Some((_, d, _)), Some((_, h, _)), Some(l)) if d == h => Some(l),
        (choice, ..) => memory_lane(ifaces, choice),
    };
    Ok(Lanes {
        am: am_lane,
        rma: rma_lane,
        rma_dev,
    })
}

/// Whether interface `info` moves put and get data as messages of its own connection (a
/// network transport without one-sided RMA: tcp), rather than by a memory transport or
/// RDMA.
pub(crate) fn by_messages(info: &IfaceInfo) -> bool {
    info.kind == DeviceKind::Network && !info.attr.flags.contains(IfaceFlags::RMA_ONE_SIDED)
}

/// The largest device message sent eager whatever the lanes (`LaneAttrs::dev_eager`).
fn dev_eager() -> usize {
    #[cfg(feature = "cuda")]
    return ucs::cuda::gdr::eager_max();
    #[cfg(not(feature = "cuda"))]
    0
}

/// The protocol thresholds and the eager/rendezvous tuner of an endpoint on these lanes.
fn lane_setup(
    core: &Core,
    am: Lane,
    rma: Option<Lane>,
    rma_dev: Option<Lane>,
) -> (Thresholds, Option<Box<crate::proto::tune::Tuner>>) {
    let thresh = Thresholds::new(
        LaneAttrs {
            am: &core.info[am.iface].attr,
            rma: rma.map(|l| &core.info[l.iface].attr),
            rma_dev: rma_dev.map(|l| &core.info[l.iface].attr),
            am_bounce: core.info[am.iface].kind == DeviceKind::Network,
            rma_by_messages: rma.is_some_and(|l| by_messages(&core.info[l.iface])),
            dev_eager: dev_eager(),
        },
        core.rndv_cfg,
        core.zcopy_cfg,
        core.rndv_scheme,
    );
    // Tuned where both protocols are zero-copy capable and nobody fixed the threshold.
    let tuner = (rma.is_some_and(|l| !by_messages(&core.info[l.iface]))
        && core.rndv_cfg == ucs::config::AutoSize::Auto
        && core.rndv_scheme != ucs::config::RndvScheme::PutZcopy
        && thresh.rndv > crate::proto::tune::MIN_TUNED)
        .then(Box::default);
    (thresh, tuner)
}

/// Creates an endpoint to `peer` and registers its lanes.
pub(crate) fn new_ep(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    peer: &WorkerAddress,
) -> UcsResult<usize> {
    let Lanes { am, rma, rma_dev } = select_lanes(ifaces, core, peer)?;
    let (thresh, tuner) = lane_setup(core, am, rma, rma_dev);
    let idx = core.eps.insert(Ep {
        remote_uuid: peer.uuid,
        remote_id: None,
        conn: None,
        provisional: false,
        am,
        rma,
        rma_dev,
        thresh,
        queue: VecDeque::new(),
        failed: None,
        peer_closed: false,
        outstanding: 0,
        puts_unacked: 0,
        rma_error: None,
        rma_ops: 0,
        rma_carried: 0,
        rma_order: Default::default(),
        in_ready: false,
        ctrl: VecDeque::new(),
        in_ctrl: false,
        put_acks: 0,
        put_ack_status: Status::Ok,
        stream_rx: VecDeque::new(),
        stream_off: 0,
        stream_recvs: VecDeque::new(),
        stream_queued: false,
        layouts_sent: Default::default(),
        layout_cache: VecDeque::new(),
        layout_in: None,
        umr_taught: VecDeque::new(),
        umr_known: VecDeque::new(),
        tuner,
    });
    register_lanes(core, idx);
    log_ep(core, idx);
    Ok(idx)
}

/// Makes the transports' events of `idx`'s lanes reach it, and polls their interfaces.
fn register_lanes(core: &mut Core, idx: usize) {
    let Ep {
        am, rma, rma_dev, ..
    } = core.eps[idx];
    core.uct_eps.insert((am.iface, am.ep), idx);
    core.mark_active(am.iface);
    for r in [rma, rma_dev].into_iter().flatten() {
        // Memory lanes report completions and failed peers: their interfaces are polled
        // (the idle polling looks at them too, but completions should not wait for it).
        core.uct_eps.insert((r.iface, r.ep), idx);
    }
    if let Some(r) = rma_dev {
        core.mark_active(r.iface);
    }
}

/// Says which lanes endpoint `idx` uses (debug log; the protocol table with
/// `UCX_PROTO_INFO`).
fn log_ep(core: &Core, idx: usize) {
    if core.proto_info {
        if let Some(t) = proto_table(core, idx) {
            eprint!("[rucx] {t}");
        }
    }
    let e = &core.eps[idx];
    let name =
        |l: Option<Lane>| l.map_or("none".to_string(), |l| core.info[l.iface].tl.to_string());
    log::debug!(
        "ucp: ep {idx} to worker {:#x}: am lane {}/{}, memory lanes: host {}, device {}",
        e.remote_uuid,
        core.info[e.am.iface].tl,
        core.info[e.am.iface].device,
        name(e.rma),
        name(e.rma_dev),
    );
}

/// Destroys the transport endpoints of an endpoint's lanes (`am`, `rma`, `rma_dev`), each
/// once, and forgets their events.
fn drop_lanes(ifaces: &mut [OpenIface], core: &mut Core, lanes: [Option<Lane>; 3]) {
    let mut gone: SmallVec<[Lane; 3]> = SmallVec::new();
    for l in lanes.into_iter().flatten() {
        if !gone.contains(&l) {
            core.uct_eps.remove(&(l.iface, l.ep));
            ifaces[l.iface].ep_destroy(l.ep);
            gone.push(l);
        }
    }
}

/// The client endpoint of a socket-address connection, created before the server's
/// address was known, gets its real lanes to `peer` (`listener`): its provisional ones,
/// which reach this worker and on which nothing was sent, go. Sends queued meanwhile
/// chose a protocol every lane carries (`Thresholds::before_connect`) and go out once the
/// server's wire-up request pairs the endpoint.
pub(crate) fn rebind_ep(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    idx: usize,
    peer: &WorkerAddress,
) -> UcsResult<()> {
    let Lanes { am, rma, rma_dev } = select_lanes(ifaces, core, peer)?;
    let (thresh, tuner) = lane_setup(core, am, rma, rma_dev);
    let old = {
        let e = &mut core.eps[idx];
        let old = [Some(e.am), e.rma, e.rma_dev];
        e.am = am;
        e.rma = rma;
        e.rma_dev = rma_dev;
        e.thresh = thresh;
        e.tuner = tuner;
        e.remote_uuid = peer.uuid;
        e.provisional = false;
        old
    };
    drop_lanes(ifaces, core, old);
    register_lanes(core, idx);
    log_ep(core, idx);
    Ok(())
}

impl Worker {
    /// Creates an endpoint to the worker whose address is `addr` (`ucp_ep_create` with
    /// `UCP_EP_PARAM_FIELD_REMOTE_ADDRESS`). Sends may be posted at once; they go out when
    /// wire-up completes.
    pub fn ep_create(&mut self, addr: &[u8]) -> UcsResult<EpHandle> {
        let peer = WorkerAddress::decode(addr)?;
        let Worker { ifaces, core, .. } = self;
        let idx = new_ep(ifaces, core, &peer)?;
        let network = core.info[core.eps[idx].am.iface].kind == DeviceKind::Network;
        if network && peer.uuid > core.uuid {
            // Both sides of a pair usually create endpoints at once (MPI, ucx_perftest).
            // Over tcp each first send opens a connection, and two crossing ones stay two:
            // every message then costs an extra ACK segment. So the side with the larger
            // uuid lets the other speak first: its request pairs our endpoint, and our
            // answer goes over the connection it opened. It speaks itself only if nothing
            // came within `WIREUP_DEFER_NS`.
            let at = ucs::time::now_ns() + WIREUP_DEFER_NS;
            core.deferred_reqs.push((idx, at));
            core.work = true;
        } else {
            core.queue_ctrl(idx, Ctrl::WireupReq { dst: u32::MAX });
        }
        Ok(EpHandle(idx as u32))
    }

    /// The protocol table of an endpoint: which protocol serves which sizes, per datatype
    /// class (like `UCX_PROTO_INFO=y`, which prints it for every new endpoint).
    pub fn ep_proto_info(&self, ep: EpHandle) -> Option<String> {
        proto_table(&self.core, ep.idx())
    }

    /// The time, in seconds, a message of `size` bytes takes on `ep` by the transports'
    /// estimates: the latency of its fastest-bandwidth lane plus the size over that
    /// bandwidth, as UCX's `ucp_ep_evaluate_perf` computes it.
    pub fn ep_estimate(&self, ep: EpHandle, size: usize) -> Option<f64> {
        let e = self.core.eps.get(ep.idx())?;
        let best = [Some(e.am), e.rma, e.rma_dev]
            .into_iter()
            .flatten()
            .map(|l| self.core.info[l.iface].attr.perf)
            .max_by(|a, b| a.bandwidth.total_cmp(&b.bandwidth))?;
        Some(best.latency_ns * 1e-9 + size as f64 / best.bandwidth.max(1.0))
    }

    /// The transports an endpoint uses, lane by lane: "am posix/memory, rma cma/memory".
    pub fn ep_lanes(&self, ep: EpHandle) -> Option<String> {
        lanes(&self.core, ep.idx())
    }

    /// The (transport, device) of each lane an endpoint uses, a lane used for several
    /// purposes once, in the order AM, RMA, device-memory RMA (`ucp_ep_query` with
    /// `UCP_EP_ATTR_FIELD_TRANSPORTS`).
    pub fn ep_transports(&self, ep: EpHandle) -> Option<Vec<(String, String)>> {
        let e = self.core.eps.get(ep.idx())?;
        let mut seen: Vec<Lane> = Vec::with_capacity(3);
        for l in [Some(e.am), e.rma, e.rma_dev].into_iter().flatten() {
            if !seen.contains(&l) {
                seen.push(l);
            }
        }
        let info = &self.core.info;
        Some(
            seen.iter()
                .map(|l| (info[l.iface].tl.to_string(), info[l.iface].device.clone()))
                .collect(),
        )
    }

    /// Flushes an endpoint, or every endpoint (`ucp_ep_flush_nbx` / `ucp_worker_flush_nbx`):
    /// completes when every send posted before it has completed.
    pub fn flush(&mut self, ep: Option<EpHandle>) -> UcsResult<ReqId> {
        self.flush_op(ep, false, 0, false)
    }

    /// [`flush`](Self::flush) that completes in the call when it can, as UCX's does: `None`
    /// when nothing this side posted is still in flight (the common case of
    /// `MPI_Win_flush` after mapped or synchronous puts), else the request.
    pub fn flush_nb(&mut self, ep: Option<EpHandle>) -> UcsResult<Option<ReqId>> {
        if self.flush_idle(ep)? {
            return Ok(None);
        }
        self.flush(ep).map(Some)
    }

    /// Whether a flush of `ep` (or of every endpoint) would have nothing to wait for:
    /// [`flush_nb`](Self::flush_nb) then returns `None`. For a caller that answers that case
    /// without the machinery of a request (the C ABI's `MPI_Win_flush` path).
    #[inline]
    pub fn flush_idle(&self, ep: Option<EpHandle>) -> UcsResult<bool> {
        let core = &self.core;
        let lane_idle = |l: Option<Lane>| l.is_none_or(|l| self.ifaces[l.iface].ep_idle(l.ep));
        let idle = |e: &Ep| lane_idle(Some(e.am)) && lane_idle(e.rma) && lane_idle(e.rma_dev);
        let quick = core.flushes.is_empty()
            && match ep {
                Some(h) => {
                    let e = core.eps.get(h.idx()).ok_or(Status::InvalidParam)?;
                    e.failed.is_none() && !ep_busy(core, h.idx()) && idle(e)
                }
                None => core
                    .eps
                    .iter()
                    .all(|(i, e)| e.failed.is_some() || (!ep_busy(core, i) && idle(e))),
            };
        Ok(quick)
    }

    /// A flush waited for in place (`ucp_ep_flush`, `ucp_worker_flush`), without a flush
    /// request: `InFlight` while something posted on `ep` (or on any endpoint) is still
    /// under way at this layer; once nothing is, `Done` with what the flush reports (the
    /// endpoint's failure, or the first error a target reported for puts that completed
    /// when their messages were out, or `Ok`) when every lane says it has nothing in
    /// flight, else `Transport`: then only a flush request ([`flush`](Self::flush)) waits
    /// for the transports. `MPI_Win_flush` after a small get (MPICH: `ucp_ep_flush`) then
    /// costs the get's round trip and no pass of the protocol actions.
    pub fn flush_poll(&mut self, ep: Option<EpHandle>) -> FlushPoll {
        let core = &mut self.core;
        let ifaces = &self.ifaces;
        let lane_idle = |l: Option<Lane>| l.is_none_or(|l| ifaces[l.iface].ep_idle(l.ep));
        let idle = |e: &Ep| lane_idle(Some(e.am)) && lane_idle(e.rma) && lane_idle(e.rma_dev);
        match ep {
            Some(h) => {
                let Some(e) = core.eps.get(h.idx()) else {
                    return FlushPoll::Done(Status::InvalidParam);
                };
                if let Some(s) = e.failed {
                    return FlushPoll::Done(s);
                }
                if ep_busy(core, h.idx()) {
                    return FlushPoll::InFlight;
                }
                if !idle(e) {
                    return FlushPoll::Transport;
                }
                let e = &mut core.eps[h.idx()];
                FlushPoll::Done(e.rma_error.take().unwrap_or(Status::Ok))
            }
            None => {
                let live = || core.eps.iter().filter(|(_, e)| e.failed.is_none());
                if live().any(|(i, _)| ep_busy(core, i)) {
                    return FlushPoll::InFlight;
                }
                if !live().all(|(_, e)| idle(e)) {
                    return FlushPoll::Transport;
                }
                let err = core.eps.iter_mut().find_map(|(_, e)| e.rma_error.take());
                FlushPoll::Done(err.unwrap_or(Status::Ok))
            }
        }
    }

    /// Closes an endpoint after flushing it (`ucp_ep_close_nbx` in flush mode); the handle
    /// is invalid once the returned request completes.
    pub fn ep_close(&mut self, ep: EpHandle) -> UcsResult<ReqId> {
        self.flush_op(Some(ep), true, 0, false)
    }

    /// Closes an endpoint at once, without flushing (`ucp_ep_close_nbx` with
    /// `UCP_EP_CLOSE_FLAG_FORCE`): its outstanding operations complete with `Canceled`, and
    /// the handle is invalid on return.
    pub fn ep_close_force(&mut self, ep: EpHandle) -> UcsResult<()> {
        if !self.core.eps.contains(ep.idx()) {
            return Err(Status::InvalidParam);
        }
        let Worker { ifaces, core, .. } = self;
        destroy_ep(ifaces, core, ep.idx());
        Ok(())
    }

    /// The id of the worker `ep` reaches (`WorkerAddress::uuid`); `None` for an unknown
    /// handle, or a socket-address client whose server's address has not come.
    pub fn ep_remote_worker(&self, ep: EpHandle) -> Option<u64> {
        self.core
            .eps
            .get(ep.idx())
            .filter(|e| !e.provisional)
            .map(|e| e.remote_uuid)
    }

    /// Whether `ep` is one of this worker's endpoints (not closed).
    pub(crate) fn ep_exists(&self, ep: EpHandle) -> bool {
        self.core.eps.contains(ep.idx())
    }

    /// The error endpoint `ep` failed with, if it did (`None` for an unknown handle too).
    pub(crate) fn ep_failed(&self, ep: EpHandle) -> Option<Status> {
        self.core.eps.get(ep.idx()).and_then(|e| e.failed)
    }

    pub(crate) fn flush_op(
        &mut self,
        ep: Option<EpHandle>,
        close: bool,
        user_data: u64,
        notify: bool,
    ) -> UcsResult<ReqId> {
        if let Some(e) = ep {
            if !self.core.eps.contains(e.idx()) {
                return Err(Status::InvalidParam);
            }
        }
        let id = self.core.reqs.insert(
            Op::Flush(FlushOp {
                ep: ep.map(EpHandle::idx),
                uct: None,
                close,
            }),
            user_data,
            notify,
        );
        self.core.flushes.push(id);
        self.core.work = true;
        Ok(id)
    }
}

/// "am posix/memory, rma cma/memory" (and the device-memory lane where there is one).
fn lanes(core: &Core, idx: usize) -> Option<String> {
    let e = core.eps.get(idx)?;
    let name = |l: Lane| format!("{}/{}", core.info[l.iface].tl, core.info[l.iface].device);
    let mut s = format!(
        "am {}, rma {}",
        name(e.am),
        e.rma.map_or("none".into(), name)
    );
    if let Some(l) = e.rma_dev {
        s.push_str(&format!(", rma (device memory) {}", name(l)));
    }
    Some(s)
}

fn proto_table(core: &Core, idx: usize) -> Option<String> {
    use crate::datatype::DtClass;
    use crate::proto::select::{fmt_size, Op as SOp};
    use std::fmt::Write;
    let e = core.eps.get(idx)?;
    let mut s = format!(
        "ep {idx} to worker {:#x}, lanes: {}\n",
        e.remote_uuid,
        lanes(core, idx)?
    );
    for (op, opname) in [
        (SOp::TagSend, "tag_send"),
        (SOp::TagSendSync, "tag_send_sync"),
    ] {
        for (dt, dtname) in [
            (DtClass::Contig, "contig"),
            (DtClass::Iov, "iov"),
            (DtClass::Generic, "generic"),
        ] {
            let _ = writeln!(s, "  {opname}(host, {dtname}):");
            for (a, b, p) in e.thresh.ranges(op, uct::MemoryType::Host, dt) {
                let _ = writeln!(s, "    {:>8} .. {:<8} {p}", fmt_size(a), fmt_size(b));
            }
        }
    }
    if let Some(t) = &e.tuner {
        let _ = writeln!(
            s,
            "  tag_send(host, contig|iov) eager multi-fragment from {}: eager or rendezvous get, \
             measured per size class",
            fmt_size(crate::proto::tune::MIN_TUNED)
        );
        for line in t.describe() {
            let _ = writeln!(s, "    {line}");
        }
    }
    let writes = e.rma.is_some_and(|l| {
        core.info[l.iface]
            .attr
            .flags
            .contains(uct::IfaceFlags::PUT_ZCOPY)
    });
    if writes && core.split_thresh != usize::MAX {
        let _ = writeln!(
            s,
            "  rendezvous get from {}: split, the receiver reads the head while the sender \
             writes the tail",
            fmt_size(core.split_thresh)
        );
    }
    Some(s)
}

/// Answers a peer's wire-up request: pairs it with the endpoint it names (the client
/// endpoint of a socket-address connection), or else with our endpoint for that worker
/// that has no peer yet (or already names it), or creates one.
///
/// A request that names no endpoint never pairs a socket-address client: with several
/// connections to one worker in flight (or a worker connected to itself, whose own
/// requests arrive here), the first unpaired endpoint is not necessarily the right one,
/// and a wrong pairing sends each side's stream bytes and replies to another connection.
pub(crate) fn accept(ifaces: &mut [OpenIface], core: &mut Core, w: Wireup, peer: WorkerAddress) {
    let fits = |e: &Ep| {
        e.remote_uuid == w.uuid
            && e.failed.is_none()
            && (e.remote_id.is_none() || e.remote_id == Some(w.src_ep))
    };
    let idx = if w.dst_ep != u32::MAX {
        match core.eps.get(w.dst_ep as usize) {
            Some(e) if e.conn.is_some() && fits(e) => w.dst_ep as usize,
            // The client closed its endpoint before the server's request came (or the
            // request is not ours to answer): nobody is left to pair.
            _ => {
                log::debug!(
                    "ucp: wire-up request from worker {:#x} names endpoint {}, which is gone",
                    w.uuid,
                    w.dst_ep
                );
                return;
            }
        }
    } else {
        let existing = core
            .eps
            .iter()
            .find(|(_, e)| e.conn.is_none() && fits(e))
            .map(|(i, _)| i);
        match existing {
            Some(i) => i,
            None => match new_ep(ifaces, core, &peer) {
                Ok(i) => i,
                Err(e) => {
                    ucs::warn_limited!("ucp: cannot answer wire-up from worker {:#x}: {e}", w.uuid);
                    return;
                }
            },
        }
    };
    core.eps[idx].remote_id = Some(w.src_ep);
    core.queue_ctrl(idx, Ctrl::WireupRep { dst: w.src_ep });
    core.mark_ready(idx);
}

impl Core {
    pub(crate) fn on_wireup(&mut self, data: &[u8]) -> Res {
        let w = Wireup::decode(data).ok_or(Bad::Malformed(None))?;
        match w.kind {
            wire::WIREUP_REQ => {
                let addr = WorkerAddress::decode(&w.addr).map_err(|_| Bad::Malformed(None))?;
                if addr.uuid != w.uuid {
                    return Err(Bad::Malformed(None));
                }
                self.accepts.push_back((w, addr));
                self.work = true;
            }
            _ => {
                let ep = self.live_ep(w.dst_ep)?;
                let e = &self.eps[ep];
                // Another worker's endpoint in that slot: ours closed, the slot was reused.
                if e.remote_uuid != w.uuid {
                    return Err(Bad::Late);
                }
                if w.kind == wire::WIREUP_KEEPALIVE {
                    return Ok(());
                }
                if w.kind == wire::WIREUP_CLOSE {
                    if e.remote_id != Some(w.src_ep) {
                        return Err(Bad::Late);
                    }
                    // After the messages that came before it (`Worker::run_actions`).
                    if !self.peer_closes.contains(&ep) {
                        self.peer_closes.push(ep);
                    }
                    self.work = true;
                    return Ok(());
                }
                self.eps[ep].remote_id = Some(w.src_ep);
                self.mark_ready(ep);
            }
        }
        Ok(())
    }
}

/// Sends one control message on `ep`'s AM lane.
pub(crate) fn send_ctrl(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    ep: usize,
    c: &Ctrl,
) -> UcsResult<()> {
    let Some(e) = core.eps.get(ep) else {
        return Err(Status::InvalidParam);
    };
    if let Some(s) = e.failed {
        return Err(s);
    }
    let lane = e.am;
    // A peer can send us data before its wire-up message reaches us (it learned our id
    // from our request). An answer to it waits, queued, until its reply names its own
    // endpoint: `NoResource` keeps the control message for the next progress call.
    let peer_id = e.remote_id.ok_or(Status::NoResource);
    let iface = &mut ifaces[lane.iface];
    let max_bcopy = core.info[lane.iface].attr.am.max_bcopy;
    let reply = |iface: &mut OpenIface, rid, req, offset, status: Status, data: &[u8]| {
        if wire::REPLY_HDR + data.len() > max_bcopy {
            return Err(Status::ExceedsLimit);
        }
        iface
            .am_bcopy(lane.ep, wire::AM_RMA_REPLY, &mut |buf| {
                wire::write_reply(buf, rid, req, offset, status.code(), data)
            })
            .map(drop)
    };
    let bcopy = |iface: &mut OpenIface, id: u8, b: &[u8]| {
        iface
            .am_bcopy(lane.ep, id, &mut |buf| {
                buf[..b.len()].copy_from_slice(b);
                b.len()
            })
            .map(drop)
    };
    match *c {
        Ctrl::WireupReq { dst } => {
            let m = Wireup {
                kind: WIREUP_REQ,
                uuid: core.uuid,
                src_ep: ep as u32,
                dst_ep: dst,
                addr: core.address.clone(),
            };
            bcopy(iface, wire::AM_WIREUP, &m.encode())
        }
        Ctrl::Keepalive => {
            let m = Wireup {
                kind: wire::WIREUP_KEEPALIVE,
                uuid: core.uuid,
                src_ep: ep as u32,
                dst_ep: peer_id?,
                addr: Vec::new(),
            };
            bcopy(iface, wire::AM_WIREUP, &m.encode())
        }
        Ctrl::WireupRep { dst } => {
            let m = Wireup {
                kind: WIREUP_REP,
                uuid: core.uuid,
                src_ep: ep as u32,
                dst_ep: dst,
                addr: Vec::new(),
            };
            bcopy(iface, wire::AM_WIREUP, &m.encode())
        }
        Ctrl::Ack { sreq, status } => {
            let rid = peer_id?;
            bcopy(
                iface,
                wire::AM_ACK,
                &wire::encode_ack(rid, sreq, status.code()),
            )
        }
        Ctrl::Rtr { sreq, rreq } => {
            let rid = peer_id?;
            bcopy(iface, wire::AM_RTR, &wire::encode_rtr(rid, sreq, rreq))
        }
        Ctrl::RtrPut {
            sreq,
            rreq,
            ref rkey,
            ref segs,
        } => {
            let rid = peer_id?;
            let m = wire::encode_rtr_put(rid, sreq, rreq, rkey, segs);
            if m.len() > core.info[lane.iface].attr.am.max_bcopy {
                return Err(Status::ExceedsLimit);
            }
            bcopy(iface, wire::AM_RTR_PUT, &m)
        }
        Ctrl::RtrSplit {
            sreq,
            rreq,
            offset,
            ref rkey,
            ref segs,
        } => {
            let rid = peer_id?;
            let m = wire::encode_rtr_split(rid, sreq, rreq, offset, rkey, segs);
            if m.len() > core.info[lane.iface].attr.am.max_bcopy {
                return Err(Status::ExceedsLimit);
            }
            bcopy(iface, wire::AM_RTR_SPLIT, &m)
        }
        Ctrl::RtrSplitLayout {
            sreq,
            rreq,
            offset,
            ref rkey,
            origin,
            ref layout,
            hash,
        } => {
            let rid = peer_id?;
            let mut m = wire::RtrSplitLayout {
                ep: rid,
                sreq,
                rreq,
                offset,
                rkey: rkey.clone(),
                origin,
                layout: layout.clone(),
                hash: None,
            };
            let max = core.info[lane.iface].attr.am.max_bcopy;
            if m.encode().len() > max {
                // The layout goes first, in parts; the request names it.
                let mut from = 0;
                if !send_layout_parts(iface.as_mut(), lane.ep, rid, hash, layout, max, &mut from)? {
                    return Err(Status::NoResource);
                }
                m.layout = Vec::new();
                m.hash = Some(hash);
            }
            let m = m.encode();
            if m.len() > max {
                return Err(Status::ExceedsLimit);
            }
            bcopy(iface, wire::AM_RTR_SPLIT_LAYOUT, &m)
        }
        Ctrl::RtrUmr {
            sreq,
            rreq,
            chunk,
            kid,
            ref keys,
        } => {
            let rid = peer_id?;
            let m = wire::RtrUmr {
                ep: rid,
                sreq,
                rreq,
                chunk,
                kid,
                keys: keys.clone(),
            }
            .encode();
            if m.len() > core.info[lane.iface].attr.am.max_bcopy {
                return Err(Status::ExceedsLimit);
            }
            bcopy(iface, wire::AM_RTR_UMR, &m)
        }
        Ctrl::RmaReply {
            req,
            offset,
            status,
            ref data,
        } => reply(iface, peer_id?, req, offset, status, data),
        Ctrl::RmaReplyAt {
            req,
            offset,
            addr,
            len,
        } => {
            let rid = peer_id?;
            crate::buf::with_raw(addr, len, |data| {
                reply(iface, rid, req, offset, Status::Ok, data)
            })
        }
        Ctrl::PutAck { count, status } => {
            let rid = peer_id?;
            let mut m = [0u8; 9];
            m[..4].copy_from_slice(&rid.to_le_bytes());
            m[4..8].copy_from_slice(&count.to_le_bytes());
            m[8] = status.code() as u8;
            bcopy(iface, wire::AM_RMA_PUT_ACK, &m)
        }
        Ctrl::LayoutMiss { sreq, rreq } => {
            let rid = peer_id?;
            bcopy(
                iface,
                wire::AM_LAYOUT_MISS,
                &wire::encode_rtr(rid, sreq, rreq),
            )
        }
        Ctrl::Layout {
            rreq,
            hash,
            ref bytes,
        } => {
            let rid = peer_id?;
            let max = core.info[lane.iface].attr.am.max_bcopy;
            let mut body = &bytes[..];
            if 12 + bytes.len() > max {
                // In parts first; the LAYOUT itself then carries none of it.
                let mut from = 0;
                if !send_layout_parts(iface.as_mut(), lane.ep, rid, hash, bytes, max, &mut from)? {
                    return Err(Status::NoResource);
                }
                body = &[];
            }
            let mut m = Vec::with_capacity(12 + body.len());
            m.extend_from_slice(&rid.to_le_bytes());
            m.extend_from_slice(&rreq.to_le_bytes());
            m.extend_from_slice(body);
            bcopy(iface, wire::AM_LAYOUT, &m)
        }
        Ctrl::Fin { rreq, status } => {
            let rid = peer_id?;
            bcopy(
                iface,
                wire::AM_FIN,
                &wire::encode_ack(rid, rreq, status.code()),
            )
        }
    }
}

/// Sends `layout` (the encoding of the layout `hash`) from byte `*from` on in LAYOUT_PART
/// messages of at most `max` bytes to the peer's endpoint `rid`, advancing `*from`.
/// `Ok(false)`: the transport ran out of resources; call again to go on. The AM lane keeps
/// the order, so the peer has learned the layout before the message that names it.
pub(crate) fn send_layout_parts(
    iface: &mut dyn Iface,
    ep: uct::EpId,
    rid: u32,
    hash: u128,
    layout: &[u8],
    max: usize,
    from: &mut usize,
) -> UcsResult<bool> {
    let room = max.saturating_sub(wire::LAYOUT_PART_HDR);
    if room == 0 || layout.len() > wire::MAX_LAYOUT_BYTES {
        return Err(Status::ExceedsLimit);
    }
    while *from < layout.len() {
        let (at, n) = (*from, room.min(layout.len() - *from));
        let r = iface.am_bcopy(ep, wire::AM_LAYOUT_PART, &mut |buf| {
            wire::write_layout_part_hdr(buf, rid, hash, layout.len() as u32, at as u32);
            buf[wire::LAYOUT_PART_HDR..wire::LAYOUT_PART_HDR + n]
                .copy_from_slice(&layout[at..at + n]);
            wire::LAYOUT_PART_HDR + n
        });
        match r {
            Ok(_) => *from += n,
            Err(Status::NoResource) => return Ok(false),
            Err(s) => return Err(s),
        }
    }
    Ok(true)
}

/// What [`Worker::flush_poll`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushPoll {
    /// Nothing in flight: the flush's status.
    Done(Status),
    /// Operations are under way: progress, and ask again.
    InFlight,
    /// A transport cannot tell that it has nothing in flight: wait with a flush request.
    Transport,
}

/// Moves flush requests along; returns how many completed. Allocates nothing in the
/// common case (one flush, a few lanes): a flush after one-sided operations is on the
/// latency path of `MPI_Win_flush`.
pub(crate) fn progress_flushes(ifaces: &mut [OpenIface], core: &mut Core) -> usize {
    let mut done = 0;
    // Taken and put back with the ones still waiting, so the vector keeps its capacity;
    // flushes posted meanwhile (by a completion callback) are appended.
    let mut ids = std::mem::take(&mut core.flushes);
    let mut keep = 0;
    for i in 0..ids.len() {
        let id = ids[i];
        let Some(Op::Flush(f)) = core.reqs.get(id).map(|r| &r.state) else {
            continue;
        };
        let (ep, close, uct) = (f.ep, f.close, f.uct);
        // Operations of the endpoint(s) with something left to do on this side?
        let busy = match ep {
            Some(e) => ep_busy(core, e),
            None => core.eps.iter().any(|(i, _)| ep_busy(core, i)),
        };
        if busy {
            ids[keep] = id;
            keep += 1;
            continue;
        }
        let pending = match uct {
            Some(n) => n,
            None => {
                // Flush the lanes at the transport level.
                let mut lanes: SmallVec<[Lane; 4]> = SmallVec::new();
                for (i, e) in core.eps.iter() {
                    if ep.is_none_or(|x| x == i) && e.failed.is_none() {
                        for l in [Some(e.am), e.rma, e.rma_dev].into_iter().flatten() {
                            if !lanes.contains(&l) {
                                lanes.push(l);
                            }
                        }
                    }
                }
                let mut n = 0;
                for l in lanes {
                    match ifaces[l.iface].flush(Some(l.ep), id.0 | COMP_FLUSH) {
                        Ok(Done::Later) => n += 1,
                        Ok(Done::Now) | Err(_) => {}
                    }
                }
                if let Some(Op::Flush(f)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
                    f.uct = Some(n);
                }
                n
            }
        };
        if pending > 0 {
            ids[keep] = id;
            keep += 1;
            continue;
        }
        // A put that completed when its messages were out and that the target then
        // refused is reported here, by the flush that waited for its reply.
        let rma_error = match ep {
            Some(e) => core.eps.get_mut(e).and_then(|e| e.rma_error.take()),
            None => core.eps.iter_mut().find_map(|(_, e)| e.rma_error.take()),
        };
        let status = match ep.and_then(|e| core.eps.get(e)) {
            // Both sides closing at once: the peer's notice came first, nothing failed.
            Some(e) if close && e.peer_closed => Status::Ok,
            Some(e) => e.failed.or(rma_error).unwrap_or(Status::Ok),
            None => rma_error.unwrap_or(Status::Ok),
        };
        if close {
            if let Some(e) = ep {
                destroy_ep(ifaces, core, e);
            }
        }
        core.complete(id, status, None);
        done += 1;
    }
    ids.truncate(keep);
    ids.append(&mut core.flushes);
    core.flushes = ids;
    done
}

/// Whether a flush of endpoint `ep` must wait for its operations: queued ones (protocol
/// replies to the peer included), one-sided ones, and sends with work left on this side. Sends waiting only for the peer
/// ([`SendOp::awaits_peer_only`](super::SendOp::awaits_peer_only)) do not count; a flush
/// that waited for a receiver to match would deadlock two processes that each flush before
/// receiving.
fn ep_busy(core: &Core, ep: usize) -> bool {
    let Some(e) = core.eps.get(ep) else {
        return false;
    };
    if e.failed.is_some() {
        return false;
    }
    if !e.queue.is_empty() || e.puts_unacked > 0 || e.rma_ops > 0 || !e.ctrl.is_empty() {
        return true;
    }
    // Sends are the rest of `outstanding`; only they need a look at each request (a scan
    // for one-sided operations made a flush behind a million small gets quadratic).
    e.outstanding > 0
        && core.reqs.iter().any(|(_, r)| match &r.state {
            Op::Send(s) => s.ep == ep && !s.awaits_peer_only(),
            _ => false,
        })
}

/// A transport flush completed.
pub(crate) fn flush_completion(core: &mut Core, id: ReqId) {
    if let Some(Op::Flush(f)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
        if let Some(n) = f.uct.as_mut() {
            *n = n.saturating_sub(1);
        }
        core.work = true;
    }
}

/// Removes an endpoint and its transport endpoints. A paired endpoint that has not failed
/// tells its peer first (`WIREUP_CLOSE`), so the peer's endpoint ends quietly instead of
/// failing when this process exits; the notice is best effort (a full FIFO drops it).
pub(crate) fn destroy_ep(ifaces: &mut [OpenIface], core: &mut Core, ep: usize) {
    if let Some(e) = core.eps.get(ep) {
        if let (None, Some(dst)) = (e.failed, e.remote_id) {
            let m = Wireup {
                kind: wire::WIREUP_CLOSE,
                uuid: core.uuid,
                src_ep: ep as u32,
                dst_ep: dst,
                addr: Vec::new(),
            }
            .encode();
            let lane = e.am;
            let r = ifaces[lane.iface].am_bcopy(lane.ep, wire::AM_WIREUP, &mut |buf| {
                buf[..m.len()].copy_from_slice(&m);
                m.len()
            });
            if let Err(s) = r {
                log::debug!("ucp: close notice to the peer of ep {ep} not sent: {s}");
            }
        }
    }
    fail_ep(core, ep, Status::Canceled, Failure::Closed);
    core.peer_closes.retain(|&e| e != ep);
    let Some(e) = core.eps.try_remove(ep) else {
        return;
    };
    drop_lanes(ifaces, core, [Some(e.am), e.rma, e.rma_dev]);
}

/// How an endpoint ended, for [`fail_ep`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Closed by this side: nothing is reported.
    Closed,
    /// The peer closed its endpoint cleanly (`WIREUP_CLOSE`): reported to the error
    /// handler, logged only at debug level.
    PeerClosed,
    /// A transport error, a dead peer, a malformed message: reported, and logged as a
    /// warning when operations were lost with it.
    Error,
}

/// Fails every operation that depends on `ep` with `status`, once, and reports the
/// failure as `how` says.
pub(crate) fn fail_ep(core: &mut Core, ep: usize, status: Status, how: Failure) {
    let Some(e) = core.eps.get_mut(ep) else {
        return;
    };
    if e.failed.is_some() {
        return;
    }
    e.failed = Some(status);
    e.peer_closed = how == Failure::PeerClosed;
    let queued = e.queue.len() + e.stream_recvs.len();
    e.queue.clear();
    e.stream_recvs.clear();
    let victims = core.reqs.ids_where(|op| match op {
        Op::Send(s) => s.ep == ep,
        Op::Recv(r) => r.peer.is_some_and(|(e, _)| e == ep),
        Op::Rma(o) => o.ep == ep,
        _ => false,
    });
    let lost = queued + victims.len() + core.drop_light_gets(ep);
    if how != Failure::Closed {
        if how == Failure::Error && lost > 0 {
            ucs::warn_limited!(
                "ucp: endpoint {ep} failed: {status} ({lost} operations ended with it)"
            );
        } else {
            log::debug!("ucp: endpoint {ep} ended ({how:?}, {status}, {lost} operations)");
        }
        core.ep_errors.push_back((EpHandle(ep as u32), status));
    }
    for id in victims {
        core.complete(id, status, None);
    }
    // Receives bound to this endpoint that have not matched: nothing will match them now.
    let bound: Vec<ReqId> = core
        .bound_recvs
        .iter()
        .filter(|(e, _)| *e == ep)
        .map(|(_, id)| *id)
        .collect();
    core.bound_recvs.retain(|(e, _)| *e != ep);
    for id in bound {
        core.cancel_unmatched(id, status);
    }
    // Messages in flight from this peer can no longer finish; those that arrived whole
    // stay receivable (a peer that sent and then closed has delivered them), but nobody
    // is left to acknowledge a synchronous one to, and the endpoint's slot may be reused.
    let Core {
        matcher,
        unexp_frags,
        frags,
        ..
    } = core;
    matcher.drain_sender_if(
        SenderId(ep as u64),
        |msg| match msg {
            Unexp::Eager { sync, .. } => {
                *sync = None;
                false
            }
            Unexp::Frag(f) => match unexp_frags.get_mut(*f) {
                Some(fb) if fb.whole() => {
                    fb.sync = false;
                    false
                }
                _ => {
                    unexp_frags.try_remove(*f);
                    true
                }
            },
            Unexp::Rts { .. } => true,
        },
        |_, _| {},
    );
    frags.retain(|k, _| k.0 != ep);
    core.work = true;
}
