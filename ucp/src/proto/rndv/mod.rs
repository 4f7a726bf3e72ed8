//! The receiver's side of a rendezvous (a tag message's, or an active message's data). A
//! matched RTS starts it (`start_rndv_recv`); then the data comes by gets (a transport's
//! zero-copy get, a copy out of a mapping of the sender's memory, or pinned bounces copied
//! into device memory afterwards: `start_unpacks`), by a split in which each side copies
//! part (`start_split`), or by the sender's writes (its put after an RTR_PUT,
//! `start_put_recv`, or its push into our device buffer, `ask_push`). `finish_get`
//! acknowledges and completes the receive. The handlers of the messages a receiver gets
//! (LAYOUT, LAYOUT_PART, FIN, RNDV_DATA) are at the end.
//!
//! The sender's side is in `send.rs`; `segs.rs` pairs local iov lists with a peer's
//! segments and registers keys for both; `mapped.rs` copies through a mapping of a
//! same-host peer's shared memory; `stage.rs` is the pipeline of device data through
//! pinned fragments; `gpu.rs` moves device layouts with one kernel.

use smallvec::SmallVec;
use ucs::shm::Segment;
use ucs::wire::Reader;
use ucs::Status;
use uct::{Done, Iov, MemoryType, OpenIface, RemoteKey};

use crate::buf::{self, Bounce};
use crate::datatype::DataState;
use crate::proto::rma;
use crate::proto::wire::{self, FragHdr, RemoteSeg, RndvKey, RtsData, ShmWindow};
use crate::request::ReqId;
use crate::tag::TagInfo;
use crate::worker::op::{Op, RecvOp};
use crate::worker::state::{Bad, Core, Ctrl, Lane, Res};
use crate::worker::wireup;
use segs::{
    for_each_remote_seg, get_layout, head_of, register_key, remote_segs, span_of, IovCutter,
};

#[cfg(feature = "cuda")]
pub(crate) mod gpu;
pub(crate) mod mapped;
pub(crate) mod segs;
pub(crate) mod send;
pub(crate) mod stage;

/// A rendezvous RTS matched receive `id`.
pub(crate) fn start_rndv_recv(
    core: &mut Core,
    id: ReqId,
    info: TagInfo,
    ep: usize,
    sreq: u64,
    rts: RtsData,
) {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    r.handle = None;
    r.info = Some(info);
    r.expect = info.length;
    r.peer = Some((ep, sreq));
    if info.length > r.data.len() {
        // Truncated: release the sender without moving data.
        core.queue_ctrl(
            ep,
            Ctrl::Ack {
                sreq,
                status: Status::Ok,
            },
        );
        core.complete(id, Status::MessageTruncated, Some(info));
        return;
    }
    match rts {
        RtsData::Get { .. } => {
            r.rndv().rts = Some(rts);
            core.gets.push_back(id);
            core.work = true;
        }
        RtsData::GetLayout {
            hash, ref layout, ..
        } => {
            let known = match layout {
                Some(bytes) => {
                    let bytes = bytes.clone();
                    r.rndv().rts = Some(rts);
                    match core.learn_layout(ep, hash, &bytes) {
                        Ok(_) => true,
                        Err(s) => {
                            fail_get(core, id, ep, sreq, s);
                            return;
                        }
                    }
                }
                None => {
                    r.rndv().rts = Some(rts);
                    let hit = core.cached_layout(ep, hash).is_some();
                    if hit {
                        core.stats.layout_hits += 1;
                    } else {
                        core.stats.layout_misses += 1;
                    }
                    hit
                }
            };
            if known {
                core.gets.push_back(id);
                core.work = true;
            } else {
                // Evicted (or never seen): ask the sender for the layout again.
                core.queue_ctrl(ep, Ctrl::LayoutMiss { sreq, rreq: id.0 });
            }
        }
        RtsData::Put if r.data.iovs(0, 0).is_some() => {
            core.puts.push_back(id);
            core.work = true;
        }
        RtsData::Put | RtsData::Am => {
            if info.length == 0 {
                core.queue_ctrl(ep, Ctrl::Rtr { sreq, rreq: id.0 });
                core.complete(id, Status::Ok, Some(info));
                return;
            }
            core.queue_ctrl(ep, Ctrl::Rtr { sreq, rreq: id.0 });
        }
    }
}

/// Issues the gets of a matched get-rendezvous receive.
pub(crate) fn start_get(ifaces: &mut [OpenIface], core: &mut Core, id: ReqId) {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    let staged: usize = core
        .staging
        .iter()
        .chain(&core.unpacks)
        .map(|(_, b)| b.as_slice().len())
        .sum();
    if staged > 0 && staged + r.expect > STAGE_BUDGET && stages(r) {
        // Host data into device memory goes through a pinned bounce: wait until the
        // bounces in flight are copied, so that they come back to the pool (pinning
        // memory anew for every message costs more than the copy).
        core.waiting_gets.push_back(id);
        return;
    }
    let (rkey, mut segs, layout, help) = match r.rndv().rts.take() {
        Some(RtsData::Get { rkey, segs, help }) => (rkey, segs, None, help),
        Some(RtsData::GetLayout {
            rkey,
            origin,
            hash,
            help,
            ..
        }) => (rkey, wire::Segs::new(), Some((origin, hash)), help),
        _ => return,
    };
    let Some((ep, sreq)) = r.peer else { return };
    let total = r.expect;
    let Some(key) = wire::RndvKeyRef::decode(&rkey) else {
        fail_get(core, id, ep, sreq, Status::InvalidParam);
        return;
    };
    // The sender's device memory is read through the memory lane for device memory.
    let lane = core
        .eps
        .get(ep)
        .and_then(|e| if key.device { e.rma_dev } else { e.rma });
    let Some(lane) = lane else {
        fail_get(core, id, ep, sreq, Status::Unsupported);
        return;
    };
    let iface = &mut ifaces[lane.iface];
    let rk = match iface.md().rkey_unpack(key.mkey) {
        Ok(k) => k,
        Err(s) => {
            fail_get(core, id, ep, sreq, s);
            return;
        }
    };
    let host_only = r.data.host_only();
    // Device data with a layout on either side: one kernel between the two layouts.
    #[cfg(feature = "cuda")]
    if key.device
        && gpu::direct_get(
            ifaces,
            core,
            id,
            lane,
            (ep, sreq),
            &rk,
            layout,
            &segs,
            finish_get,
        )
    {
        return;
    }
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    // The sender's worker-allocated shared memory, mapped here: reads become copies.
    if let Some((w, seg)) = key
        .shm
        .filter(|_| host_only)
        .and_then(|w| rma::map_window(&mut core.mappings, &w).map(|m| (w, m)))
    {
        get_mapped(ifaces, core, id, lane, (&w, &seg), &segs, layout, help);
        return;
    }
    if key.device {
        core.stats.rndv_device += 1;
        // Device to device on one GPU: the side with the smaller worker id makes every
        // copy of the pair (see `send::pushes_device`), so that the GPU does not switch
        // between the two processes' contexts for each message. We are not it: ask the
        // sender to write. Between two GPUs there is no such switch, and reading here
        // saves the request to write (one message of three).
        let local = r.data.device_iov(0, total);
        let other_gpu = local.is_some_and(|v| {
            ifaces[lane.iface]
                .md()
                .rkey_same_device(key.mkey, v.buffer as u64)
                == Some(false)
        });
        let copier = other_gpu || core.eps.get(ep).is_some_and(|e| core.uuid < e.remote_uuid);
        if let (false, None, Some(v)) = (copier, layout, local) {
            if ask_push(ifaces, core, id, lane, ep, sreq, v) {
                return;
            }
        }
    } else if let (None, Some(v), Some(dev_lane)) = (
        layout,
        r.data.device_iov(0, total),
        core.eps.get(ep).and_then(|e| e.rma_dev),
    ) {
        // Host data into our device memory, with a device lane to the sender: the sender
        // writes it through that lane (it reads its own host memory, which we cannot map
        // onto the device), with no bounce here.
        if ask_push(ifaces, core, id, dev_lane, ep, sreq, v) {
            core.stats.rndv_device += 1;
            return;
        }
    }
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    let takes_device = core.info[lane.iface]
        .attr
        .mem
        .rma_local
        .has(MemoryType::Cuda);
    let direct = match r.data.device_iov(0, total) {
        Some(v) => takes_device.then(|| smallvec::smallvec![v]),
        None if host_only => r.data.iovs(0, total),
        None => None,
    };
    let mut local: SmallVec<[Iov; 8]> = match direct {
        Some(v) => v,
        None => {
            // Generic data, or device memory the lane cannot write: read into a bounce
            // buffer owned by the request, unpack after (pinned for device memory).
            let bounce = if r.data.device_iov(0, total).is_some() {
                Bounce::for_device(total)
            } else {
                Bounce::Heap(vec![0u8; total])
            };
            let b = r.rndv().bounce.insert(bounce);
            smallvec::smallvec![Iov::from_mut_slice(b.as_mut_slice())]
        }
    };
    if help
        && layout.is_none()
        && r.rndv().bounce.is_none()
        && total >= core.split_thresh
        && !core.busy_besides_receiving()
    {
        if let Some(head) = start_split(ifaces, core, id, lane, &local) {
            // Read only the head; the sender writes the rest.
            let mut cut = IovCutter::default();
            let mut mine = SmallVec::new();
            if cut.take(&local, head, &mut mine).is_ok() {
                local = mine;
            }
            segs = head_of(&segs, head);
        }
    }
    let iface = &mut ifaces[lane.iface];
    if let Some((origin, hash)) = layout {
        let (ep_, sreq_) = (ep, sreq);
        let Some(dt) = core.cached_layout(ep, hash) else {
            fail_get(core, id, ep_, sreq_, Status::InvalidParam);
            return;
        };
        if dt.size() != total {
            fail_get(core, id, ep_, sreq_, Status::InvalidParam);
            return;
        }
        // Into the receive's own memory (its blocks, or a device layout's scratch buffer),
        // not a bounce: a lane with UMR may take it (`proto::umr`).
        let direct = matches!(core.reqs.get(id).map(|r| &r.state),
                Some(Op::Recv(r)) if r.rndv.as_ref().is_none_or(|x| x.bounce.is_none()));
        let device = key.device || !host_only;
        if direct
            && crate::proto::umr::layout_get(ifaces, core, id, lane, ep, sreq, &local, &dt, device)
        {
            return;
        }
        let iface = &mut ifaces[lane.iface];
        let st = get_layout(iface.as_mut(), lane.ep, &local, &dt, origin, &rk, id.0);
        if let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
            match st {
                Ok(later) => r.rndv().gets += later,
                Err(s) => r.status = s,
            }
            if r.rndv().gets > 0 {
                return;
            }
        }
        finish_get(core, id);
        return;
    }
    let mut later = 0u32;
    let err = for_each_remote_seg(&local, &segs, |pieces, addr| {
        match buf::get_zcopy(iface.as_mut(), lane.ep, pieces, addr, &rk, id.0)? {
            Done::Now => {}
            Done::Later => later += 1,
        }
        Ok(())
    })
    .err();
    if let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
        r.rndv().gets += later;
        if let Some(s) = err {
            r.status = s;
        }
        if r.rndv().gets == 0 {
            finish_get(core, id);
        }
    }
}

/// Asks the sender of device rendezvous `id` to write into our device buffer `v` (an
/// `RTR_PUT` with the key of our memory lane for device memory); the FIN that follows its
/// writes completes the receive. False when our buffer cannot be registered (then we read).
fn ask_push(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    id: ReqId,
    lane: Lane,
    ep: usize,
    sreq: u64,
    v: Iov,
) -> bool {
    let Ok((m, rkey)) = register_key(
        ifaces[lane.iface].md(),
        v.buffer as u64,
        v.length,
        None,
        true,
    ) else {
        return false;
    };
    if let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
        r.rndv().memh = Some((lane.iface, m));
    }
    core.queue_ctrl(
        ep,
        Ctrl::RtrPut {
            sreq,
            rreq: id.0,
            rkey,
            segs: remote_segs(&[v]),
        },
    );
    true
}

/// A get rendezvous whose sender's data lies in window `win`, mapped here: the receiver
/// copies (its head, when the sender helps: a split), with no memory-lane I/O. The sender's
/// side is its structured `layout` at an origin, or its segments `segs`.
#[allow(clippy::too_many_arguments)]
fn get_mapped(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    id: ReqId,
    lane: Lane,
    win: (&ShmWindow, &Segment),
    segs: &[RemoteSeg],
    layout: Option<(u64, u128)>,
    help: bool,
) {
    let (w, seg) = win;
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    let Some((ep, sreq)) = r.peer else { return };
    let total = r.expect;
    let generic = matches!(r.data, DataState::Unpack(..));
    // The sender's side, checked against the window.
    let dt;
    let remote: Vec<Iov>;
    let src = match layout {
        Some((origin, hash)) => {
            dt = match core.cached_layout(ep, hash) {
                Some(d) if d.size() == total => d,
                _ => return fail_get(core, id, ep, sreq, Status::InvalidParam),
            };
            match mapped::remote_canon(dt.canon(), origin, w, seg) {
                Ok(s) => s,
                Err(s) => return fail_get(core, id, ep, sreq, s),
            }
        }
        None => {
            remote = match mapped::remote_segs(segs, w, seg) {
                Ok(v) => v,
                Err(s) => return fail_get(core, id, ep, sreq, s),
            };
            mapped::Side::Pieces(&remote)
        }
    };
    // Share the copy: the sender writes the tail (its RTR_SPLIT is out before this side
    // starts copying).
    let mut head = total;
    if help && !generic && total >= core.split_thresh && !core.busy_besides_receiving() {
        let split = match core.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Recv(r)) if matches!(r.data, DataState::Layout(_)) => {
                start_split_layout(ifaces, core, id, lane)
            }
            Some(Op::Recv(r)) => r
                .data
                .iovs(0, total)
                .and_then(|l| start_split(ifaces, core, id, lane, &l)),
            _ => None,
        };
        if let Some(h) = split {
            head = h;
        }
    }
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    let mut pieces = SmallVec::new();
    let st = match mapped::local_side(&mut r.data, total, &mut pieces) {
        Some(dst) => mapped::copy(src, 0, dst, 0, head as u64),
        None => {
            // Generic data: into a bounce buffer owned by the request, unpacked after.
            let b = r
                .rndv()
                .bounce
                .insert(Bounce::Heap(vec![0u8; total]))
                .as_mut_slice();
            let p = [Iov::from_mut_slice(b)];
            mapped::copy(src, 0, mapped::Side::Pieces(&p), 0, total as u64)
        }
    };
    if let Err(s) = st {
        r.status = s;
    }
    core.stats.rndv_mapped += 1;
    finish_get(core, id);
}

/// Shares the reads of get-rendezvous receive `id` (data `local`) with its sender: the
/// receiver reads the head while the sender writes the tail, so both cores copy at once.
/// Registers the tail, sends RTR_SPLIT with its segments (straight away, so the sender
/// starts while this side reads) and returns the head's length; `None` leaves the whole
/// read to this side (the tail's segment list would not fit a message, or registering
/// failed).
fn start_split(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    id: ReqId,
    lane: Lane,
    local: &[Iov],
) -> Option<usize> {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return None;
    };
    let (ep, sreq) = r.peer?;
    let total = r.expect;
    let head = split_point(total)?;
    let mut cut = IovCutter::default();
    let mut skip = SmallVec::<[Iov; 8]>::new();
    let mut tail = SmallVec::<[Iov; 8]>::new();
    cut.take(local, head, &mut skip).ok()?;
    cut.take(local, total - head, &mut tail).ok()?;
    let segs = remote_segs(&tail);
    let seg_max = core.info[core.eps.get(ep)?.am.iface].attr.am.max_bcopy;
    if 64 + 16 * segs.len() > seg_max {
        return None;
    }
    let (lo, hi) = span_of(&segs)?;
    let shm = core.shm_window(lo, hi);
    let (m, rkey) =
        register_key(ifaces[lane.iface].md(), lo, (hi - lo) as usize, shm, false).ok()?;
    let c = Ctrl::RtrSplit {
        sreq,
        rreq: id.0,
        offset: head as u64,
        rkey,
        segs,
    };
    send_split(ifaces, core, id, lane, ep, m, c).then_some(head)
}

/// As [`start_split`], for a receive whose data is a layout in shared memory the sender
/// can map: RTR_SPLIT_LAYOUT describes the tail by the layout itself (a few bytes, where
/// a segment list would not fit a message).
fn start_split_layout(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    id: ReqId,
    lane: Lane,
) -> Option<usize> {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return None;
    };
    let (ep, sreq) = r.peer?;
    let head = split_point(r.expect)?;
    let DataState::Layout(l) = &r.data else {
        return None;
    };
    let (lo, hi) = (l.span.addr(), l.span.addr() + l.span.len() as u64);
    let shm = rma::shm_window(&core.mems, core.shm_regions, lo, hi)?;
    let (origin, layout, hash) = (l.origin_addr, l.dt.encoded().to_vec(), l.dt.hash());
    let seg_max = core.info[core.eps.get(ep)?.am.iface].attr.am.max_bcopy;
    if 64 + layout.len() > seg_max {
        return None;
    }
    let (m, rkey) = register_key(
        ifaces[lane.iface].md(),
        lo,
        (hi - lo) as usize,
        Some(shm),
        false,
    )
    .ok()?;
    let c = Ctrl::RtrSplitLayout {
        sreq,
        rreq: id.0,
        offset: head as u64,
        rkey,
        origin,
        layout,
        hash,
    };
    send_split(ifaces, core, id, lane, ep, m, c).then_some(head)
}

/// Where a split rendezvous of `total` bytes cuts: half each, at a page (the two copies
/// touch separate pages and end together); `None` when there is nothing to share.
fn split_point(total: usize) -> Option<usize> {
    let head = (total / 2).next_multiple_of(4096);
    (head > 0 && head < total).then_some(head)
}

/// Sends split request `c` (RTR_SPLIT or RTR_SPLIT_LAYOUT) of receive `id`, whose tail is
/// registered as `m`; `false` (and `m` released) when it cannot be sent, so this side
/// reads everything.
fn send_split(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    id: ReqId,
    lane: Lane,
    ep: usize,
    m: uct::MemH,
    c: Ctrl,
) -> bool {
    // Out now if the lane takes it, behind any control message already waiting for this
    // endpoint otherwise (the ACK that ends this side's reads is queued after it).
    let waiting = core.eps.get(ep).is_some_and(|e| !e.ctrl.is_empty());
    match if waiting {
        Err(Status::NoResource)
    } else {
        wireup::send_ctrl(ifaces, core, ep, &c)
    } {
        Ok(()) => {}
        Err(Status::NoResource) => core.queue_ctrl(ep, c),
        Err(s) => {
            // Not sent: nobody will write the tail, so this side reads it all.
            log::debug!("ucp: split request to ep {ep} not sent: {s}");
            let _ = ifaces[lane.iface].md().mem_dereg(&m);
            return false;
        }
    }
    if let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
        let x = r.rndv();
        x.memh = Some((lane.iface, m));
        x.wait_fin = true;
    }
    core.stats.rndv_split += 1;
    true
}

/// Exposes the buffer of a receive matched by a put rendezvous: registers it and answers
/// RTR_PUT with its segments. Without a memory lane, or when the segment list does not fit
/// one message, asks for the pipeline instead (plain RTR).
pub(crate) fn start_put_recv(ifaces: &mut [OpenIface], core: &mut Core, id: ReqId) {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    let Some((ep, sreq)) = r.peer else { return };
    let total = r.expect;
    let lane = core.eps.get(ep).and_then(|e| e.rma);
    let seg_max = core
        .eps
        .get(ep)
        .map_or(0, |e| core.info[e.am.iface].attr.am.max_bcopy);
    let local = r.data.iovs(0, total).unwrap_or_default();
    let segs = remote_segs(&local);
    let fits = 64 + segs.len() * 16 <= seg_max;
    // The host memory lane writes with the host's hands (tcp's target copies; shared
    // memory maps): device memory takes the pipeline, which stages it.
    let reg = match lane {
        Some(l) if fits && !segs.is_empty() && r.data.host_only() => {
            let (lo, hi) = span_of(&segs).unwrap_or((0, 0));
            let shm = rma::shm_window(&core.mems, core.shm_regions, lo, hi);
            register_key(ifaces[l.iface].md(), lo, (hi - lo) as usize, shm, false)
                .ok()
                .map(|(m, rkey)| (l.iface, m, rkey))
        }
        _ => None,
    };
    let rreq = id.0;
    match reg {
        Some((i, m, rkey)) => {
            r.rndv().memh = Some((i, m));
            core.queue_ctrl(
                ep,
                Ctrl::RtrPut {
                    sreq,
                    rreq,
                    rkey,
                    segs,
                },
            );
        }
        None => core.queue_ctrl(ep, Ctrl::Rtr { sreq, rreq }),
    }
}

/// FIN of a put rendezvous: the sender's writes have landed in receive `id`.
pub(crate) fn on_fin(core: &mut Core, id: ReqId, status: Status) {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    let x = r.rndv();
    if let Some(m) = x.memh.take() {
        core.deregs.push(m);
        core.work = true;
    }
    let split_head_pending = std::mem::take(&mut x.wait_fin) && !x.reads_done;
    if status != Status::Ok {
        r.status = status;
    }
    if split_head_pending {
        // Split rendezvous: the tail is in; finishing the head's reads completes.
        return;
    }
    r.received = r.expect;
    let (st, info) = (r.status, r.info);
    core.complete(id, st, info);
}

fn fail_get(core: &mut Core, id: ReqId, ep: usize, sreq: u64, s: Status) {
    ucs::warn_limited!("ucp: rendezvous get failed: {s}");
    core.queue_ctrl(ep, Ctrl::Ack { sreq, status: s });
    let info = match core.reqs.get(id).map(|r| &r.state) {
        Some(Op::Recv(r)) => r.info,
        _ => None,
    };
    core.complete(id, s, info);
}

/// Every get of receive `id` finished: unpack a bounce buffer, acknowledge, complete.
pub(crate) fn finish_get(core: &mut Core, id: ReqId) {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    if std::mem::take(&mut r.rndv().unpacking) {
        // The copy engine has put the bounce into device memory (or failed: its status
        // is the request's).
    } else if let Some(b) = r.rndv().bounce.take() {
        let to_device = b.is_pinned() && r.data.device_iov(0, b.as_slice().len()).is_some();
        if to_device && r.status != Status::Ok {
            // Nothing to copy: the get failed, so the bounce holds no message.
        } else if to_device && core.mt_copy.is_some() {
            core.unpacks.push((id, b));
            core.work = true;
            return;
        } else if let Err(s) = r.data.unpack(0, b.as_slice()) {
            r.status = s;
        }
    }
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    // Split rendezvous: the sender's FIN for the tail completes.
    let split = r.rndv().wait_fin;
    r.rndv().reads_done = true;
    if !split {
        r.received = r.expect;
    }
    let (status, info, peer) = (r.status, r.info, r.peer);
    if let Some((ep, sreq)) = peer {
        core.queue_ctrl(ep, Ctrl::Ack { sreq, status });
    }
    if !split {
        core.complete(id, status, info);
    }
}

/// A bounce that was being copied into device memory for receive `id` is done with: back to
/// the pool, and the gets waiting for room go again (from the transports' completion of any
/// request, before its own step).
#[inline]
pub(crate) fn unstage(core: &mut Core, id: ReqId) {
    if !core.staging.is_empty() {
        if let Some(i) = core.staging.iter().position(|(r, _)| *r == id) {
            core.staging.swap_remove(i);
            core.gets.extend(core.waiting_gets.drain(..));
            core.work = true;
        }
    }
}

/// One of receive `r`'s gets (or its bounce's copy into device memory) completed with
/// `status`: true when it was the last, so that the receive's get is finished
/// ([`finish_get`]).
#[inline]
pub(crate) fn read_done(r: &mut RecvOp, status: Status) -> bool {
    let x = r.rndv();
    x.gets = x.gets.saturating_sub(1);
    let gets = x.gets;
    if status != Status::Ok {
        r.status = status;
    }
    gets == 0
}

/// A completion of receive `id`'s bounce copy, as the transports' completion of it would
/// be handled.
fn get_completion(core: &mut Core, id: ReqId, status: Status) {
    unstage(core, id);
    if let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
        if read_done(r, status) {
            finish_get(core, id);
        }
    }
}

/// Pinned bounce bytes being copied into device memory beyond which a get that needs a
/// bounce waits: half of what the pinned pool keeps, so that the bounces in flight and the
/// one being read into all come from the pool.
#[cfg(feature = "cuda")]
const STAGE_BUDGET: usize = ucs::cuda::PINNED_KEEP / 2;
#[cfg(not(feature = "cuda"))]
const STAGE_BUDGET: usize = usize::MAX;

/// Whether receive `r`'s pending get reads host data into device memory through a bounce.
fn stages(r: &mut RecvOp) -> bool {
    let total = r.expect;
    r.data.device_iov(0, total).is_some()
        && matches!(r.rndv().rts.as_ref(), Some(RtsData::Get { rkey, .. })
            if RndvKey::decode(rkey).is_some_and(|k| !k.device))
}

/// Starts the copies of pinned bounces into the device memory of their receives, on the
/// memory-type copy engine; each completes through [`get_completion`] (the transport's
/// completion, for those that finish later) and `finish_get`.
pub(crate) fn start_unpacks(ifaces: &mut [OpenIface], core: &mut Core) -> usize {
    let Some(lane) = core.mt_copy else {
        return 0;
    };
    core.mark_active(lane.iface);
    let mut n = 0;
    for (id, mut b) in std::mem::take(&mut core.unpacks) {
        n += 1;
        let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
            continue;
        };
        let src = Iov::from_mut_slice(b.as_mut_slice());
        let Some(dst) = r.data.device_iov(0, src.length) else {
            get_completion(core, id, Status::NoResource);
            continue;
        };
        let x = r.rndv();
        x.unpacking = true;
        x.gets += 1;
        let rk = RemoteKey {
            base: dst.buffer as u64,
            len: dst.length as u64,
            key: 0,
        };
        let piece = Iov {
            buffer: src.buffer,
            length: src.length.min(dst.length),
        };
        // The bounce stays in `core.staging` and the device buffer is the receive's: both
        // live until the completion.
        let st = buf::put_zcopy(
            ifaces[lane.iface].as_mut(),
            lane.ep,
            &[piece],
            dst.buffer as u64,
            &rk,
            id.0,
        );
        match st {
            Ok(Done::Later) => core.staging.push((id, b)),
            Ok(Done::Now) => get_completion(core, id, Status::Ok),
            Err(s) => get_completion(core, id, s),
        }
    }
    n
}

/// Completes the staged receives whose data has all arrived once their last copies into
/// the device have landed; returns how many completed.
pub(crate) fn poll_staged_recvs(core: &mut Core) -> usize {
    let mut n = 0;
    let mut waiting = std::mem::take(&mut core.stage_recvs);
    waiting.retain(|&id| {
        let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
            return false; // completed otherwise (failed, cancelled)
        };
        let Some(st) = r.rndv.as_mut().and_then(|x| x.stage.as_mut()) else {
            return false;
        };
        let idle = match stage::poll(st) {
            Ok(idle) => idle,
            Err(e) => {
                r.status = e;
                stage::poll(st).unwrap_or(true)
            }
        };
        if !idle {
            return true;
        }
        let (status, info) = (r.status, r.info);
        core.complete(id, status, info);
        n += 1;
        false
    });
    core.stage_recvs = waiting;
    n
}

/// Receive `id` has all its data: complete it, or, while copies into the device are in
/// flight, leave it to [`poll_staged_recvs`].
pub(crate) fn finish_staged_recv(core: &mut Core, id: ReqId) {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    if let Some(st) = r.rndv.as_mut().and_then(|x| x.stage.as_mut()) {
        match stage::poll(st) {
            Ok(true) => {}
            Ok(false) => {
                core.stage_recvs.push(id);
                core.work = true;
                return;
            }
            Err(e) => {
                r.status = e;
                if !stage::poll(st).unwrap_or(true) {
                    core.stage_recvs.push(id);
                    core.work = true;
                    return;
                }
            }
        }
    }
    let (status, info) = (r.status, r.info);
    core.complete(id, status, info);
}

impl Core {
    /// A piece of a layout too large for one message: kept until the last one, then
    /// learned as if an RTS had carried it. A piece at offset 0 starts over (a sender that
    /// ran out of resources sends the whole layout again).
    pub(crate) fn on_layout_part(&mut self, data: &[u8]) -> Res {
        let (ep, hash, total, offset, bytes) =
            wire::decode_layout_part(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let e = &mut self.eps[ep];
        if offset == 0 {
            let mut v = Vec::new();
            v.try_reserve_exact(total)
                .map_err(|_| Bad::Malformed(Some(ep)))?;
            e.layout_in = Some(Box::new((hash, total, v)));
        }
        let done = match e.layout_in.as_deref_mut() {
            Some((h, t, v)) if *h == hash && *t == total && v.len() == offset => {
                v.extend_from_slice(bytes);
                v.len() == total
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        };
        let whole = if done { e.layout_in.take() } else { None };
        if let Some(whole) = whole {
            self.learn_layout(ep, hash, &whole.2)
                .map_err(|_| Bad::Malformed(Some(ep)))?;
        }
        Ok(())
    }

    /// A layout resent after our miss: learn it and read the data.
    pub(crate) fn on_layout(&mut self, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let (ep, rreq) = match (r.u32(), r.u64()) {
            (Some(e), Some(q)) => (e, q),
            _ => return Err(Bad::Malformed(None)),
        };
        let ep = self.live_ep(ep)?;
        let id = ReqId(rreq);
        let hash = match self.reqs.get(id).map(|r| &r.state) {
            Some(Op::Recv(rv)) if rv.peer.is_some_and(|(e, _)| e == ep) => {
                match rv.rndv.as_ref().and_then(|x| x.rts.as_ref()) {
                    Some(wire::RtsData::GetLayout { hash, .. }) => *hash,
                    _ => return Err(Bad::Malformed(Some(ep))),
                }
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        };
        if r.rest().is_empty() {
            // It came in LAYOUT_PART messages just before.
            if self.cached_layout(ep, hash).is_none() {
                return Err(Bad::Malformed(Some(ep)));
            }
        } else {
            self.learn_layout(ep, hash, r.rest())
                .map_err(|_| Bad::Malformed(Some(ep)))?;
        }
        self.gets.push_back(id);
        self.work = true;
        Ok(())
    }

    pub(crate) fn on_fin(&mut self, data: &[u8]) -> Res {
        let (ep, rreq, status) = wire::decode_ack(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(rreq);
        match self.reqs.get(id).map(|r| &r.state) {
            Some(Op::Recv(r))
                if r.peer.is_some_and(|(e, _)| e == ep)
                    && r.rndv
                        .as_ref()
                        .is_some_and(|x| x.memh.is_some() || x.umr.is_some()) =>
            {
                let status = Status::from_code(status).unwrap_or(Status::IoError);
                on_fin(self, id, status);
                Ok(())
            }
            _ => Err(Bad::Malformed(Some(ep))),
        }
    }

    pub(crate) fn on_rndv_data(&mut self, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let h = FragHdr::read(&mut r).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(h.ep)?;
        let payload = r.rest();
        let id = ReqId(h.req);
        let off = usize::try_from(h.offset).map_err(|_| Bad::Malformed(Some(ep)))?;
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Recv(rv)) if rv.peer.is_some_and(|(e, _)| e == ep) => {
                let end = off
                    .checked_add(payload.len())
                    .ok_or(Bad::Malformed(Some(ep)))?;
                if end > rv.expect || off != rv.received {
                    return Err(Bad::Malformed(Some(ep)));
                }
                if let DataState::Device(b) = &rv.data {
                    // Device memory: through pinned fragments, each copied in as it fills.
                    let (dst, expect) = (*b, rv.expect);
                    let st = rv.rndv().stage.get_or_insert_with(Box::default);
                    match stage::absorb(st, self.stage_cfg, &dst, expect, off, payload) {
                        Ok(k) => self.stats.rndv_staged += k,
                        Err(s) => rv.status = s,
                    }
                } else if let Err(s) = rv.data.unpack(off, payload) {
                    rv.status = s;
                }
                rv.received = end;
                if end == rv.expect {
                    finish_staged_recv(self, id);
                }
                Ok(())
            }
            // A receive that was completed early (truncation) still gets the stream the
            // sender had already started: drop it.
            Some(Op::Done { .. }) => Ok(()),
            _ => Err(Bad::Malformed(Some(ep))),
        }
    }
}
