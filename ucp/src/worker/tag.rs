//! Tag send and receive: the user calls, and the protocols that move the data (eager
//! short/bcopy/zcopy, multi-fragment eager, synchronous eager, the sender's side of the
//! rendezvous and the rendezvous AM pipeline). The receiver's side of a rendezvous is in
//! `rndv.rs`; what happens when protocol messages arrive is in `handler.rs`.

use smallvec::SmallVec;
use ucs::{Status, UcsResult};
use uct::{Done, Iface, IfaceFlags, Iov, MemoryType, OpenIface};

use super::mapped;
use super::rma::{self, MappingCache};
use super::rndv::{finish_get, remote_segs, span_of, start_rndv_recv};
use super::{stage, wireup, Core, Ctrl, FragTarget, Op, RecvOp, SendOp, Unexp, Worker};
use crate::buf;
use std::sync::Arc;

use crate::datatype::{regular_iov, Data, DataState, DtLayout};
use crate::dt::Layout;
use crate::proto::select::{Op as SelOp, Proto};
use crate::proto::wire::{self, FirstHdr, FragHdr, RemoteSeg, RndvKey, RtsData, FLAG_SYNC};
use crate::request::ReqId;
use crate::tag::{MessageHandle, PostResult, TagInfo};

use super::EpHandle;

/// Options of a send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendParams {
    /// Complete only once the receiver has matched the message (`ucp_tag_send_sync_nbx`).
    pub sync: bool,
    /// Reported back with the completion.
    pub user_data: u64,
    /// Report the completion through `Worker::poll_completion`.
    pub notify: bool,
    /// Complete at once or fail with `NoResource` having sent nothing
    /// (`UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL`).
    pub force_imm: bool,
    /// The caller waits for this send's local completion next, as a blocking send does
    /// (`UCP_OP_ATTR_FLAG_FAST_CMPL`). Between eager and rendezvous, such a send takes
    /// whichever the endpoint measured faster for one message alone (`proto::tune`);
    /// any other send in that range is one of several in flight and goes zero-copy by
    /// rendezvous, which moves its bytes once, by the receiver, and leaves both processes'
    /// cores to the rest of the traffic (docs/ucp.md).
    pub fast_cmpl: bool,
}

/// Options of a receive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvParams {
    pub user_data: u64,
    pub notify: bool,
    /// Receive only a message that is here whole already (it completes at once); fail
    /// with `NoResource`, posting nothing, otherwise (`UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL`).
    pub force_imm: bool,
}

impl Worker {
    /// Sends `data` tagged `tag` on `ep` (`ucp_tag_send_nbx`). `Ok(None)`: done already,
    /// the buffer may be reused. `Ok(Some(id))`: the request to test, wait for, and free.
    #[inline]
    pub fn tag_send(
        &mut self,
        ep: EpHandle,
        data: &Data,
        tag: u64,
        p: SendParams,
    ) -> UcsResult<Option<ReqId>> {
        // Fastest path: small contiguous data on a wired, idle endpoint is one eager short
        // message, sent without a request, a data state or a protocol lookup.
        if let Data::Contig(b) = data {
            if let Some(hb) = crate::HostBuf::accessible(*b) {
                return self.tag_send_host(ep, hb, tag, p);
            }
        }
        self.tag_send_any(ep, data, tag, p)
    }

    /// [`tag_send`](Self::tag_send) of a contiguous buffer the CPU can read, for the C
    /// ABI's send: the eager short message is inlined into the caller without a [`Data`]
    /// to build and drop (docs/c-abi.md); anything else is a call.
    #[inline(always)]
    pub fn tag_send_host(
        &mut self,
        ep: EpHandle,
        hb: crate::HostBuf,
        tag: u64,
        p: SendParams,
    ) -> UcsResult<Option<ReqId>> {
        let b = hb.buf();
        if let Some(e) = self.core.eps.get(ep.idx()) {
            if e.failed.is_none()
                && !p.sync
                && !p.notify
                && e.queue.is_empty()
                && e.remote_id.is_some()
                && e.thresh.short_fits(b.len())
            {
                let lane = e.am;
                let iface = &mut self.ifaces[lane.iface];
                match b.with_slice(|s| iface.am_short(lane.ep, wire::AM_EAGER, tag, s)) {
                    Ok(()) => {
                        self.core.stats.eager_short += 1;
                        return Ok(None);
                    }
                    Err(Status::NoResource) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        self.tag_send_any(ep, &Data::Contig(b), tag, p)
    }

    /// Every send but the eager short one on an idle endpoint.
    #[inline(never)]
    fn tag_send_any(
        &mut self,
        ep: EpHandle,
        data: &Data,
        tag: u64,
        p: SendParams,
    ) -> UcsResult<Option<ReqId>> {
        let Worker { ifaces, core, .. } = self;
        let idx = ep.idx();
        let e = core.eps.get(idx).ok_or(Status::InvalidParam)?;
        if let Some(s) = e.failed {
            return Err(s);
        }
        // An iov list shaped like a vector travels as one (compact, copied with strided
        // loops).
        let vector = as_vector(&mut core.vectors, data);
        let data = vector.as_ref().unwrap_or(data);
        let e = &core.eps[idx];
        let mut st = data.start_pack();
        let total = st.len();
        let sop = if p.sync {
            SelOp::TagSendSync
        } else {
            SelOp::TagSend
        };
        let mem = st.mem_type();
        let mut proto = e.thresh.select(sop, mem, data.class(), total);
        if matches!(proto, Proto::RndvGet | Proto::RndvPut) && !rts_fits(core, idx, data) {
            // A layout too large to describe in one RTS: its description goes first in
            // parts where the AM lane keeps the order and `RNDV_LAYOUT_PARTS` asks for it
            // (off by default; `auto`: device layouts, which the receiver then maps and
            // moves with one kernel, as any other); otherwise a device layout goes by the
            // device lane packed (its scratch buffer is the contiguous message), a host one
            // by the AM pipeline.
            let ordered = core.info[e.am.iface]
                .attr
                .flags
                .contains(IfaceFlags::EP_ORDERED);
            let wanted = core
                .layout_parts
                .unwrap_or(st.mem_type() == MemoryType::Cuda);
            let parts =
                proto == Proto::RndvGet && ordered && wanted && matches!(data, Data::Layout(_));
            if !parts && !st.send_packed() {
                proto = Proto::RndvAm;
            }
        }
        // Same-host endpoints measure which of eager and rendezvous is faster for each
        // size class (`proto::tune`); a timed eager send asks for an acknowledgement.
        let mut timed = false;
        // Only a send with nothing else of the endpoint in flight measures one message
        // (holding it back until the others finish could deadlock a program whose
        // receiver waits for this message before matching the earlier ones).
        let alone = e.outstanding == 0 && e.queue.is_empty();
        let mut flags = if p.sync { FLAG_SYNC } else { 0 };
        if proto == Proto::EagerMulti
            && mem == MemoryType::Host
            && !p.sync
            && total >= crate::proto::tune::MIN_TUNED
            && matches!(data, Data::Contig(_) | Data::Iov(_) | Data::Layout(_))
            && e.tuner.is_some()
            && rts_fits(core, idx, data)
        {
            if !p.fast_cmpl {
                proto = Proto::RndvGet;
            } else if let Some(t) = core.eps[idx].tuner.as_mut() {
                use crate::proto::tune::{Choice, Tuner};
                let choice = if core.shared_eager_max > 0 {
                    Tuner::choose_shared(total, core.shared_eager_max)
                } else {
                    t.choose(total)
                };
                match choice {
                    Choice::Eager { timed: tm } => {
                        timed = tm && alone;
                        if timed {
                            flags |= FLAG_SYNC;
                        }
                    }
                    Choice::Rndv { timed: tm } => {
                        proto = Proto::RndvGet;
                        timed = tm && alone;
                    }
                }
            }
        }
        let e = &core.eps[idx];
        // Fast path: a single message that needs no request.
        if e.queue.is_empty() && e.remote_id.is_some() && !p.sync {
            let lane = e.am;
            let iface = &mut ifaces[lane.iface];
            let r = match (proto, &st) {
                (Proto::EagerShort, DataState::Contig(b)) => {
                    b.with_slice(|s| iface.am_short(lane.ep, wire::AM_EAGER, tag, s))
                }
                (Proto::EagerBcopy, _) => iface
                    .am_bcopy(lane.ep, wire::AM_EAGER, &mut |buf| {
                        buf[..8].copy_from_slice(&tag.to_le_bytes());
                        8 + st.pack(0, &mut buf[8..8 + total])
                    })
                    .map(drop),
                _ => Err(Status::NoResource),
            };
            match r {
                Ok(()) => {
                    if proto == Proto::EagerShort {
                        core.stats.eager_short += 1;
                    } else {
                        core.stats.eager_bcopy += 1;
                    }
                    if p.notify {
                        // The caller asked for a completion event: give it a request.
                        let id = core.reqs.insert(
                            Op::Done {
                                status: Status::Ok,
                                info: None,
                            },
                            p.user_data,
                            true,
                        );
                        core.completions.push_back(crate::request::Completion {
                            req: id,
                            status: Status::Ok,
                            info: None,
                            user_data: p.user_data,
                        });
                        return Ok(Some(id));
                    }
                    return Ok(None);
                }
                Err(Status::NoResource) => {}
                Err(e) => return Err(e),
            }
        }
        if p.force_imm {
            // Anything past the single-message path needs a request.
            return Err(Status::NoResource);
        }
        match proto {
            Proto::EagerShort => core.stats.eager_short += 1,
            Proto::EagerBcopy => core.stats.eager_bcopy += 1,
            Proto::EagerZcopy => core.stats.eager_zcopy += 1,
            Proto::EagerMulti => core.stats.eager_multi += 1,
            Proto::RndvGet => core.stats.rndv_get += 1,
            Proto::RndvPut => core.stats.rndv_put += 1,
            Proto::RndvAm => core.stats.rndv_am += 1,
        }
        let id = core.reqs.insert(
            Op::Send(SendOp {
                ep: idx,
                tag,
                data: st,
                total,
                proto,
                flags,
                started: false,
                offset: 0,
                rreq: None,
                wait_ack: false,
                wait_comp: 0,
                memh: None,
                umr_use: None,
                queued: false,
                put: None,
                split_offered: false,
                ack_status: Status::Ok,
                fin_pending: false,
                am: None,
                stream: false,
                timed,
                t0: 0,
                stage: None,
            }),
            p.user_data,
            p.notify,
        );
        let e = &mut core.eps[idx];
        e.outstanding += 1;
        if e.queue.is_empty() && e.remote_id.is_some() {
            match push_send(ifaces, core, id) {
                Ok(true) => {}
                Ok(false) => enqueue(core, idx, id),
                Err(s) => core.complete(id, s, None),
            }
        } else {
            enqueue(core, idx, id);
        }
        maybe_finish_send(ifaces, core, id);
        Ok(Some(id))
    }

    /// Posts a receive for `(tag, tag_mask)` into `data` (`ucp_tag_recv_nbx`).
    #[inline]
    pub fn tag_recv(
        &mut self,
        data: &Data,
        tag: u64,
        tag_mask: u64,
        p: RecvParams,
    ) -> UcsResult<ReqId> {
        if p.force_imm && !self.arrived_whole(tag, tag_mask) {
            return Err(Status::NoResource);
        }
        let id = if let Data::Iov(_) = data {
            self.tag_recv_iov(data, tag, tag_mask, p)
        } else {
            post_recv(&mut self.core, data, tag, tag_mask, p)
        };
        if self.core.work {
            self.answer_now();
        }
        Ok(id)
    }

    /// A receive into contiguous memory the CPU can reach ([`HostBuf`](crate::HostBuf)),
    /// subscribed with `user_data` when it waits, for the C ABI's receive with a request:
    /// `Ok(id)` while it waits (its completion is reported by [`Worker::take_completion`]
    /// or [`Worker::take_completions`]); `Err` with its status and info when it finished in
    /// the call (nothing is kept). A receive that waits is a direct receive
    /// (`request::DirectRecvs`): no request until a message that needs one matches it; one
    /// whose whole eager message is here is copied in the call without a request. Neither
    /// goes through the general path's result enum, whose trip through memory cost more
    /// than the queueing.
    #[inline]
    pub fn tag_recv_host(
        &mut self,
        hb: crate::HostBuf,
        tag: u64,
        tag_mask: u64,
        user_data: u64,
    ) -> Result<ReqId, (Status, Option<TagInfo>)> {
        let buf = hb.buf();
        let core = &mut self.core;
        if !core.matcher.no_unexpected() {
            if let Some((info, msg)) = core.matcher.take_matching(tag, tag_mask) {
                return self.recv_arrived(buf, info, msg, user_data);
            }
        }
        let Core {
            direct, matcher, ..
        } = &mut self.core;
        Ok(direct.insert(buf, user_data, |id| matcher.queue_recv(tag, tag_mask, id)))
    }

    /// [`tag_recv_host`](Self::tag_recv_host) of a message that arrived first: a whole
    /// eager one that fits is copied here and reported as finished, without a request;
    /// any other becomes the receive's request as in `post_recv` (the receive
    /// of `MPI_Sendrecv` usually finds its message here).
    #[inline(never)]
    fn recv_arrived(
        &mut self,
        buf: crate::Buf,
        info: TagInfo,
        msg: Unexp,
        user_data: u64,
    ) -> Result<ReqId, (Status, Option<TagInfo>)> {
        let core = &mut self.core;
        match msg {
            Unexp::Eager { data, sync } if data.len() <= buf.len() => {
                buf.write_at(0, &data);
                core.recycle_unexp(data);
                core.ack_sync(sync);
                if core.work {
                    self.answer_now();
                }
                Err((Status::Ok, Some(info)))
            }
            msg => {
                let id = core.reqs.insert_with(
                    move || Op::Recv(recv_into(DataState::Contig(buf))),
                    0,
                    false,
                );
                deliver(core, info, msg, id);
                if self.core.work {
                    self.answer_now();
                }
                self.subscribe_or_take(id, user_data).map(|()| id)
            }
        }
    }

    /// Whether the oldest unexpected message matching `(tag, tag_mask)` is here whole,
    /// so that a receive of it completes at once.
    #[cold]
    fn arrived_whole(&mut self, tag: u64, tag_mask: u64) -> bool {
        let core = &mut self.core;
        match core.matcher.peek(tag, tag_mask) {
            Some(Unexp::Eager { .. }) => true,
            Some(Unexp::Frag(f)) => core.unexp_frags.get(*f).is_some_and(|b| b.whole()),
            _ => false,
        }
    }

    /// Sends what matching a posted receive queued (a synchronous send's acknowledgement, a
    /// rendezvous request) before the posting call returns, as UCX does: the application
    /// may not call into the library again for a long time, and the sender waits for it.
    #[cold]
    #[inline(never)]
    pub(super) fn answer_now(&mut self) {
        self.run_actions();
    }

    /// [`tag_recv`](Self::tag_recv) into an iov list, which may become a vector layout.
    #[inline(never)]
    fn tag_recv_iov(&mut self, data: &Data, tag: u64, tag_mask: u64, p: RecvParams) -> ReqId {
        let core = &mut self.core;
        let vector = as_vector(&mut core.vectors, data);
        post_recv(core, vector.as_ref().unwrap_or(data), tag, tag_mask, p)
    }

    /// Looks for an unexpected message matching `(tag, tag_mask)` (`ucp_tag_probe_nb`).
    /// With `remove`, the message leaves the queue and the handle receives it later.
    pub fn tag_probe(
        &mut self,
        tag: u64,
        tag_mask: u64,
        remove: bool,
    ) -> Option<(TagInfo, Option<MessageHandle>)> {
        self.core
            .matcher
            .probe(tag, tag_mask, remove)
            .map(|r| (r.info, r.message))
    }

    /// Receives a message taken by `tag_probe(.., remove = true)` (`ucp_tag_msg_recv_nbx`).
    pub fn tag_msg_recv(
        &mut self,
        data: &Data,
        msg: MessageHandle,
        p: RecvParams,
    ) -> UcsResult<ReqId> {
        let core = &mut self.core;
        let vector = as_vector(&mut core.vectors, data);
        let data = vector.as_ref().unwrap_or(data);
        let id = core
            .reqs
            .insert(Op::Recv(new_recv(data)), p.user_data, p.notify);
        match core.matcher.msg_recv(msg, id) {
            Ok(m) => {
                deliver(core, m.info, m.msg, id);
                if self.core.work {
                    self.answer_now();
                }
                Ok(id)
            }
            Err(id) => {
                core.reqs.remove(id);
                Err(Status::InvalidParam)
            }
        }
    }

    /// Cancels a receive that has not matched yet (`ucp_request_cancel`): it completes with
    /// `Canceled`. Anything else is left to finish.
    pub fn request_cancel(&mut self, id: ReqId) {
        let core = &mut self.core;
        if id.is_direct() {
            let h = core.direct.get(id).map(|d| d.handle);
            if h.is_some_and(|h| core.matcher.cancel(h).is_some()) {
                if let Some(d) = core.direct.take(id) {
                    core.completions.push_back(crate::request::Completion {
                        req: id,
                        status: Status::Canceled,
                        info: None,
                        user_data: d.user_data,
                    });
                }
            }
            return;
        }
        let h = match core.reqs.get(id).map(|r| &r.state) {
            Some(Op::Recv(r)) => r.handle,
            _ => None,
        };
        if let Some(h) = h {
            if core.matcher.cancel(h).is_some() {
                core.complete(id, Status::Canceled, None);
            }
        }
    }

    /// Unexpected messages waiting for a receive.
    pub fn unexpected_len(&self) -> usize {
        self.core.matcher.unexpected_len()
    }
}

/// Posts a receive into `data` (its final form: no iov list left to turn into a vector).
#[inline(always)]
fn post_recv(core: &mut Core, data: &Data, tag: u64, tag_mask: u64, p: RecvParams) -> ReqId {
    let ds = data.start_unpack();
    let id = core
        .reqs
        .insert_with(move || Op::Recv(recv_into(ds)), p.user_data, p.notify);
    match core.matcher.post_recv(tag, tag_mask, id) {
        PostResult::Matched(m) => deliver(core, m.info, m.msg, id),
        PostResult::Queued(h) => {
            if let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
                r.handle = Some(h);
            }
        }
    }
    id
}

/// Compiled vectors of iov lists seen by [`as_vector`], by (count, length, stride).
pub(crate) type VectorCache = std::collections::HashMap<(usize, usize, usize), Arc<DtLayout>>;

/// `data` as a layout when it is an iov list shaped like a vector ([`regular_iov`]): it
/// then travels as a compact layout the peer memoizes, and is copied with strided loops
/// instead of entry by entry. The compiled vector is cached (`cache`, a few dozen shapes).
#[inline]
fn as_vector(cache: &mut VectorCache, data: &Data) -> Option<Data> {
    match data {
        Data::Iov(v) => iov_as_vector(cache, v),
        _ => None,
    }
}

#[inline(never)]
fn iov_as_vector(cache: &mut VectorCache, v: &[crate::Buf]) -> Option<Data> {
    let Some((origin, count, len, stride)) = regular_iov(v) else {
        return device_iov_layout(v);
    };
    let key = (count, len, stride);
    let dt = match cache.get(&key) {
        Some(d) => Arc::clone(d),
        None => {
            let vector =
                Layout::hvector(count as u64, 1, stride as i64, &Layout::bytes(len as u64)).ok()?;
            let d = DtLayout::new(&vector).ok()?;
            if cache.len() >= 64 {
                cache.clear();
            }
            cache.insert(key, Arc::clone(&d));
            d
        }
    };
    Some(Data::Layout(buf::layout_over_iov(origin, dt)))
}

/// Whether `d` is a device layout that travels packed (`RUCX_GPU_DT_METHOD=pack-unpack`):
/// its RTS describes its scratch buffer, not the layout.
fn packs_device_layout(d: &DataState) -> bool {
    #[cfg(feature = "cuda")]
    if let DataState::DeviceLayout(g) = d {
        use crate::dt::gpu::model::Method;
        return g.packed_rts || super::gpu_dt::forced() == Some(Method::PackUnpack);
    }
    let _ = d;
    false
}

/// An iov list of device memory within one allocation, as a layout (`hindexed` from its
/// first entry): it then moves by kernels (`gpu_dt`), not by one copy per entry.
fn device_iov_layout(v: &[crate::Buf]) -> Option<Data> {
    if v.len() < 2 || !ucs::memtype::active() || v.iter().any(|b| b.host_accessible()) {
        return None;
    }
    let first = ucs::memtype::detect(v[0].addr() as *const u8);
    let (lo, hi) = (first.base, first.base.checked_add(first.len)?);
    if first.mem_type != MemoryType::Cuda
        || v.iter()
            .any(|b| b.addr() < lo || b.addr().saturating_add(b.len() as u64) > hi)
    {
        return None;
    }
    let origin = v[0].addr();
    let lens: Vec<u64> = v.iter().map(|b| b.len() as u64).collect();
    let displs: Vec<i64> = v
        .iter()
        .map(|b| b.addr().wrapping_sub(origin) as i64)
        .collect();
    let l = Layout::hindexed(&lens, &displs, &Layout::bytes(1)).ok()?;
    let d = DtLayout::new(&l).ok()?;
    Some(Data::Layout(buf::layout_over_iov(origin, d)))
}

#[inline(always)]
pub(super) fn new_recv(data: &Data) -> RecvOp {
    recv_into(data.start_unpack())
}

/// A receive into `data`, with nothing received yet.
#[inline(always)]
fn recv_into(data: DataState) -> RecvOp {
    RecvOp {
        data,
        handle: None,
        info: None,
        received: 0,
        expect: 0,
        status: Status::Ok,
        peer: None,
        ack_sync: false,
        stream: super::StreamMode::No,
        rndv: None,
    }
}

/// Whether a get-rendezvous RTS for `data` fits one bcopy message of `ep`'s AM lane.
fn rts_fits(core: &Core, ep: usize, data: &Data) -> bool {
    let entries = match data {
        // A layout travels as its compact canonical encoding.
        Data::Layout(l) => {
            return l.dt.encoded().len() + 160 <= core.info[core.eps[ep].am.iface].attr.am.max_bcopy
        }
        Data::Contig(_) => 1,
        Data::Iov(v) => v.len(),
        Data::Generic { .. } => return false,
    };
    let seg = core.info[core.eps[ep].am.iface].attr.am.max_bcopy;
    wire::EAGER_FIRST_HDR + 1 + 2 + 64 + 4 + 16 * entries <= seg
}

/// Queues send `id` behind the endpoint's other waiting sends. A wired-up endpoint is
/// retried from the next progress call (it is out of resources, or behind one that is);
/// one still wiring up is retried when the wire-up reply arrives.
pub(super) fn enqueue(core: &mut Core, ep: usize, id: ReqId) {
    if let Some(Op::Send(s)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
        if !s.queued {
            s.queued = true;
            core.eps[ep].queue.push_back(id);
        }
    }
    if core.eps[ep].remote_id.is_some() {
        core.mark_ready(ep);
    }
}

/// Sends what request `id` can send now. `Ok(true)`: nothing more to send until a peer
/// answers; `Ok(false)`: out of resources, call again later.
pub(super) fn push_send(ifaces: &mut [OpenIface], core: &mut Core, id: ReqId) -> UcsResult<bool> {
    let Core {
        reqs,
        eps,
        info,
        stats,
        split_thresh,
        mems,
        shm_regions,
        mappings,
        stage_cfg,
        ctrl_eps,
        work,
        ..
    } = core;
    let split_thresh = *split_thresh;
    let Some(Op::Send(s)) = reqs.get_mut(id).map(|r| &mut r.state) else {
        return Ok(true);
    };
    if s.timed && s.t0 == 0 {
        s.t0 = ucs::time::cycles();
    }
    let e = &eps[s.ep];
    let rid = e.remote_id.ok_or(Status::NotConnected)?;
    let lane = e.am;
    let rma = e.rma;
    let rma_dev = e.rma_dev;
    if s.started && s.put.as_ref().is_some_and(|p| p.umr.is_some()) {
        // RTR_UMR: write each chunk into the receiver's chunk key; FIN follows completion.
        let rma = rma.ok_or(Status::Unsupported)?;
        return super::umr::write(ifaces[rma.iface].as_mut(), rma, s, id);
    }
    if s.started && s.put.is_some() {
        // RTR_PUT or RTR_SPLIT: write into the receiver's segments; FIN follows completion.
        // Device memory of the receiver's goes through the memory lane for it.
        let device = s
            .put
            .as_ref()
            .and_then(|p| RndvKey::decode(&p.rkey))
            .is_some_and(|k| k.device);
        let rma = if device { rma_dev } else { rma }.ok_or(Status::Unsupported)?;
        return match write_to_receiver(ifaces[rma.iface].as_mut(), rma.ep, s, id, mappings) {
            Ok(mapped) => {
                stats.rndv_mapped += u64::from(mapped);
                // Puts carried as messages of the AM lane's own connection (tcp): the FIN
                // follows the data at once, and the connection's order makes the
                // receiver read every byte before it. The receiver so completes a round
                // trip sooner than after the puts' answers; this send still completes
                // on them (its buffer is in use until then). A put the target refuses
                // can only be into a receive that ended already, which the FIN then
                // finds gone.
                let same_connection = rma.iface == lane.iface
                    && rma.ep == lane.ep
                    && super::wireup::by_messages(&info[rma.iface])
                    && info[rma.iface].attr.flags.contains(IfaceFlags::EP_ORDERED);
                if same_connection && s.fin_pending && s.put.is_none() {
                    s.fin_pending = false;
                    let rreq = s.rreq.unwrap_or(0);
                    let e = &mut eps[s.ep];
                    e.ctrl.push_back(Ctrl::Fin {
                        rreq,
                        status: Status::Ok,
                    });
                    if !e.in_ctrl {
                        e.in_ctrl = true;
                        ctrl_eps.push_back(s.ep);
                    }
                    *work = true;
                }
                Ok(true)
            }
            // Out of resources part way: the rest waits in the endpoint's queue.
            Err(Status::NoResource) if s.put.is_some() => Ok(false),
            Err(e) => Err(e),
        };
    }
    let seg = info[lane.iface].attr.am.max_bcopy;
    let iface = &mut ifaces[lane.iface];
    let total = s.total;
    let sync = s.flags & FLAG_SYNC != 0;
    let tag = s.tag;
    let nb = |r: UcsResult<usize>| -> UcsResult<Option<usize>> {
        match r {
            Ok(n) => Ok(Some(n)),
            Err(Status::NoResource) => Ok(None),
            Err(e) => Err(e),
        }
    };
    if s.stream {
        while s.offset < total {
            let (data, off) = (&mut s.data, s.offset);
            let r = iface.am_bcopy(lane.ep, super::stream::AM_STREAM, &mut |buf| {
                let h = super::stream::STREAM_HDR;
                buf[..h].copy_from_slice(&rid.to_le_bytes());
                h + data.pack(off, &mut buf[h..seg])
            });
            let Some(n) = nb(r)? else { return Ok(false) };
            s.offset += n - super::stream::STREAM_HDR;
        }
        s.started = true;
        return Ok(true);
    }
    match s.proto {
        Proto::EagerShort => {
            let r = match &s.data {
                DataState::Contig(b) => {
                    b.with_slice(|d| iface.am_short(lane.ep, wire::AM_EAGER, tag, d))
                }
                _ => Err(Status::InvalidParam),
            };
            if nb(r.map(|()| 0))?.is_none() {
                return Ok(false);
            }
            s.started = true;
            s.offset = total;
        }
        Proto::EagerBcopy => {
            let data = &mut s.data;
            let r = if let Some(am) = &s.am {
                iface.am_bcopy(lane.ep, super::am::AM_USER, &mut |buf| {
                    super::am::pack_queued(buf, am, rid, data, total)
                })
            } else if sync {
                iface.am_bcopy(lane.ep, wire::AM_EAGER_SYNC, &mut |buf| {
                    buf[0..8].copy_from_slice(&tag.to_le_bytes());
                    buf[8..12].copy_from_slice(&rid.to_le_bytes());
                    buf[12..20].copy_from_slice(&id.0.to_le_bytes());
                    let h = wire::EAGER_SYNC_HDR;
                    h + data.pack(0, &mut buf[h..h + total])
                })
            } else {
                iface.am_bcopy(lane.ep, wire::AM_EAGER, &mut |buf| {
                    buf[..8].copy_from_slice(&tag.to_le_bytes());
                    8 + data.pack(0, &mut buf[8..8 + total])
                })
            };
            if nb(r)?.is_none() {
                return Ok(false);
            }
            s.started = true;
            s.offset = total;
            s.wait_ack = sync;
        }
        Proto::EagerZcopy => {
            let iov: SmallVec<[Iov; 8]> = s.data.iovs(0, total).ok_or(Status::InvalidParam)?;
            match buf::am_zcopy(
                iface.as_mut(),
                lane.ep,
                wire::AM_EAGER,
                &tag.to_le_bytes(),
                &iov,
                id.0,
            ) {
                Ok(Done::Now) => {}
                Ok(Done::Later) => s.wait_comp += 1,
                Err(Status::NoResource) => return Ok(false),
                Err(e) => return Err(e),
            }
            s.started = true;
            s.offset = total;
        }
        Proto::EagerMulti => {
            if !s.started {
                let hdr = first_hdr(tag, rid, s.flags, id, total);
                let data = &mut s.data;
                let r = iface.am_bcopy(lane.ep, wire::AM_EAGER_FIRST, &mut |buf| {
                    let h = wire::EAGER_FIRST_HDR;
                    hdr.write(&mut buf[..h]);
                    h + data.pack(0, &mut buf[h..seg])
                });
                let Some(n) = nb(r)? else { return Ok(false) };
                s.started = true;
                s.offset = n - wire::EAGER_FIRST_HDR;
                s.wait_ack = sync;
            }
            while s.offset < total {
                let hdr = FragHdr {
                    ep: rid,
                    req: id.0,
                    offset: s.offset as u64,
                };
                let (data, off) = (&mut s.data, s.offset);
                let r = iface.am_bcopy(lane.ep, wire::AM_EAGER_MIDDLE, &mut |buf| {
                    let h = wire::EAGER_MIDDLE_HDR;
                    hdr.write(&mut buf[..h]);
                    h + data.pack(off, &mut buf[h..seg])
                });
                let Some(n) = nb(r)? else { return Ok(false) };
                s.offset += n - wire::EAGER_MIDDLE_HDR;
            }
        }
        Proto::RndvGet if s.data.layout().is_some() && !packs_device_layout(&s.data) => {
            // A structured layout travels by its canonical hash, and its compact encoding
            // only the first time this endpoint sends it (the receiver memoizes it). One
            // over device memory is registered with the memory lane for device memory:
            // the receiver maps it and moves it with one kernel (`gpu_dt`).
            let device = s.data.mem_type() == MemoryType::Cuda;
            let rma = if device { rma_dev } else { rma }.ok_or(Status::Unsupported)?;
            let Some(l) = s.data.layout() else {
                return Err(Status::InvalidParam);
            };
            let (lo, hi) = (l.span.addr(), l.span.addr() + l.span.len() as u64);
            let mine = s.memh.as_deref().map(|(_, m)| m);
            let Some((mkey, memh)) = rts_mkey(ifaces[rma.iface].md(), mine, lo, hi)? else {
                s.proto = Proto::RndvAm;
                stats.rndv_no_keys += 1;
                return Ok(false);
            };
            let shm = (!device)
                .then(|| rma::shm_window(mems, *shm_regions, lo, hi))
                .flatten();
            // Offer to write a tail where the receiver copies through a mapping (a layout
            // read through cma is not split).
            let help = shm.is_some()
                && total >= split_thresh
                && info[rma.iface].attr.flags.contains(IfaceFlags::PUT_ZCOPY);
            s.split_offered = help;
            let rkey = RndvKey {
                mkey: mkey.into(),
                shm,
                device,
            }
            .encode();
            if let Some(m) = memh {
                s.memh = Some(Box::new((rma.iface, m)));
            }
            let hash = l.dt.hash();
            let e = &mut eps[s.ep];
            let first = !e.layouts_sent.contains(&hash);
            // A description too large for the RTS goes before it in LAYOUT_PART messages
            // (where `tag_send` chose so: an ordered lane, `UCX_RNDV_LAYOUT_PARTS`). Until
            // the RTS is out, `s.offset` counts the description's bytes sent.
            let in_parts = l.dt.encoded().len() + 160 > seg;
            if first && in_parts {
                let mut from = s.offset;
                let r = super::wireup::send_layout_parts(
                    ifaces[lane.iface].as_mut(),
                    lane.ep,
                    rid,
                    hash,
                    l.dt.encoded(),
                    seg,
                    &mut from,
                );
                s.offset = from;
                if !r? {
                    return Ok(false);
                }
            }
            let layout = (first && !in_parts).then(|| l.dt.encoded().to_vec());
            let msg = wire::encode_rts(
                &first_hdr(tag, rid, s.flags, id, total),
                &RtsData::GetLayout {
                    rkey,
                    origin: l.origin_addr,
                    hash,
                    layout,
                    help,
                },
            );
            let (am_id, msg) = rts_for(&s.am, msg);
            let iface = &mut ifaces[lane.iface];
            if nb(send_bytes(iface.as_mut(), lane, am_id, &msg))?.is_none() {
                return Ok(false);
            }
            if first {
                if e.layouts_sent.len() >= 4096 {
                    e.layouts_sent.clear();
                }
                e.layouts_sent.insert(hash);
                stats.layout_bytes_sent += l.dt.encoded().len() as u64;
            }
            s.started = true;
            s.offset = total;
            s.wait_ack = true;
        }
        Proto::RndvGet => {
            // Device memory goes through the memory lane for it: the peer maps it.
            let device = s.data.mem_type() == MemoryType::Cuda;
            let rma = if device { rma_dev } else { rma }.ok_or(Status::Unsupported)?;
            // A device layout sent packed: its scratch buffer, once the kernel filled it.
            s.data.prepare_device()?;
            let iov = if device {
                smallvec::smallvec![s.data.device_iov(0, total).ok_or(Status::InvalidParam)?]
            } else {
                s.data.iovs(0, total).ok_or(Status::InvalidParam)?
            };
            let segs = remote_segs(&iov);
            // One registration spanning every segment: its remote key bounds what the
            // receiver may read.
            let (lo, hi) = span_of(&segs).unwrap_or((0, 0));
            let mine = s.memh.as_deref().map(|(_, m)| m);
            let Some((mkey, memh)) = rts_mkey(ifaces[rma.iface].md(), mine, lo, hi)? else {
                s.proto = Proto::RndvAm;
                stats.rndv_no_keys += 1;
                return Ok(false);
            };
            // Worker-allocated shared memory: the receiver may map it and copy directly.
            let shm = (!device)
                .then(|| rma::shm_window(mems, *shm_regions, lo, hi))
                .flatten();
            if let Some(m) = memh {
                s.memh = Some(Box::new((rma.iface, m)));
            }
            // Offer to write part of the data when both sides can then copy at once
            // (a memory lane that also writes, and a message worth sharing; host memory:
            // the receiver's segments come with its host lane's key).
            let help = !device
                && total >= split_thresh
                && info[rma.iface].attr.flags.contains(IfaceFlags::PUT_ZCOPY);
            s.split_offered = help;
            let hdr = first_hdr(tag, rid, s.flags, id, total);
            let key = wire::RndvKeyRef {
                mkey: &mkey,
                shm,
                device,
            };
            let iface = &mut ifaces[lane.iface];
            if s.am.is_none() {
                // A tag RTS is written straight into the transport's buffer: no key or
                // message built first (two allocations per message with `cuda_ipc`'s key).
                let n = wire::rts_get_len(&key, &segs);
                let r = iface.am_bcopy(lane.ep, wire::AM_RTS, &mut |buf| {
                    wire::write_rts_get(buf, &hdr, help, &key, &segs).unwrap_or(0)
                });
                match nb(r)? {
                    None => return Ok(false),
                    Some(m) if m != n => return Err(Status::MessageTruncated),
                    Some(_) => {}
                }
            } else {
                let rkey = RndvKey {
                    mkey: mkey.as_slice().into(),
                    shm,
                    device,
                }
                .encode();
                let msg = wire::encode_rts(&hdr, &RtsData::Get { rkey, segs, help });
                let (am_id, msg) = rts_for(&s.am, msg);
                if nb(send_bytes(iface.as_mut(), lane, am_id, &msg))?.is_none() {
                    return Ok(false);
                }
            }
            s.started = true;
            s.offset = total;
            s.wait_ack = true;
        }
        Proto::RndvAm | Proto::RndvPut => {
            if !s.started {
                let rts = if s.proto == Proto::RndvPut {
                    RtsData::Put
                } else {
                    RtsData::Am
                };
                let msg = wire::encode_rts(&first_hdr(tag, rid, s.flags, id, total), &rts);
                let (am_id, msg) = rts_for(&s.am, msg);
                if nb(send_bytes(iface.as_mut(), lane, am_id, &msg))?.is_none() {
                    return Ok(false);
                }
                s.started = true;
                if stage::applies(&s.data) {
                    // Device data goes through pinned fragments: the first copies run
                    // while the RTS travels.
                    stage::fill(s, *stage_cfg)?;
                }
            }
            let Some(rreq) = s.rreq else {
                // The RTR (or RTR_PUT) puts the request back in the queue.
                return Ok(true);
            };
            if s.offset >= total {
                // Refused by the receiver (truncation): nothing to stream.
                s.stage = None;
                return Ok(true);
            }
            if s.stage.is_some() {
                return stage::send(
                    iface.as_mut(),
                    lane.ep,
                    seg,
                    rid,
                    rreq,
                    s,
                    *stage_cfg,
                    &mut stats.rndv_staged,
                );
            }
            // The AM pipeline (also a put rendezvous whose receiver has no addresses).
            while s.offset < total {
                let hdr = FragHdr {
                    ep: rid,
                    req: rreq,
                    offset: s.offset as u64,
                };
                let (data, off) = (&mut s.data, s.offset);
                let r = iface.am_bcopy(lane.ep, wire::AM_RNDV_DATA, &mut |buf| {
                    let h = wire::RNDV_DATA_HDR;
                    hdr.write(&mut buf[..h]);
                    h + data.pack(off, &mut buf[h..seg])
                });
                let Some(n) = nb(r)? else { return Ok(false) };
                s.offset += n - wire::RNDV_DATA_HDR;
            }
        }
    }
    Ok(true)
}

/// The packed key of an RTS whose data spans `lo..hi`: the send's registration's (`mine`)
/// when it has one, else a new registration's (returned too, for the send to keep).
/// `None` when the lane is out of keys (an HCA whose keys its peers' caches may hold while
/// they wait for this very message): nothing is sent yet, and the caller sends the data
/// by the active-message pipeline, which needs none.
fn rts_mkey(
    md: &dyn uct::Md,
    mine: Option<&uct::MemH>,
    lo: u64,
    hi: u64,
) -> UcsResult<Option<(Vec<u8>, Option<uct::MemH>)>> {
    if let Some(m) = mine {
        return Ok(Some((md.mkey_pack(m), None)));
    }
    match buf::register_span(md, lo, (hi - lo) as usize) {
        Ok(m) => Ok(Some((md.mkey_pack(&m), Some(m)))),
        Err(Status::NoResource) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes send `s`'s bytes from its put target's offset on into the receiver's segments
/// (a put rendezvous, or the tail of a split one), and marks FIN to follow completion.
/// `Ok(true)`: written with stores into the receiver's mapped shared memory (its key
/// carried a window `mappings` could map), not through the memory lane.
/// `Err(NoResource)` with `s.put` given back: the lane ran out of resources part way;
/// call again to write the rest.
fn write_to_receiver(
    iface: &mut dyn Iface,
    ep: uct::EpId,
    s: &mut SendOp,
    id: ReqId,
    mappings: &mut MappingCache,
) -> UcsResult<bool> {
    let Some(put) = s.put.take() else {
        return Ok(false);
    };
    let key = RndvKey::decode(&put.rkey).ok_or(Status::InvalidParam)?;
    let n = s.total - put.offset;
    // Device data with a layout on either side: one kernel into the receiver's memory.
    #[cfg(feature = "cuda")]
    if let Some(r) = super::gpu_dt::direct_put(iface, ep, s, &put, &key, id) {
        s.wait_comp += r?;
        s.offset = s.total;
        s.fin_pending = true;
        return Ok(false);
    }
    // A device layout read as packed bytes (`device_iov`) is packed first.
    s.data.prepare_device()?;
    let mapped = key
        .shm
        .and_then(|w| rma::map_window(mappings, &w).map(|m| (w, m)));
    if let Some((w, seg)) = &mapped {
        let remote;
        let (dst, dst_from) = match &put.layout {
            Some((origin, canon)) => (
                mapped::remote_canon(canon, *origin, w, seg)?,
                put.offset as u64,
            ),
            None => {
                remote = mapped::remote_segs(&put.segs, w, seg)?;
                (mapped::Side::Pieces(&remote), 0)
            }
        };
        let mut pieces = SmallVec::new();
        let src =
            mapped::local_side(&mut s.data, s.total, &mut pieces).ok_or(Status::InvalidParam)?;
        mapped::copy(src, put.offset as u64, dst, dst_from, n as u64)?;
    } else if put.layout.is_some() {
        // A receiver asks for a layout split only when its memory can be mapped here.
        return Err(Status::Unsupported);
    } else {
        let local = match s.data.device_iov(put.offset, n) {
            Some(v) => smallvec::smallvec![v],
            None => s.data.iovs(put.offset, n).ok_or(Status::InvalidParam)?,
        };
        let rk = iface.md().rkey_unpack(&key.mkey)?;
        let (mut later, mut posted) = (0, 0);
        let r = for_each_remote_seg(&local, &put.segs, |pieces, addr| {
            match buf::put_zcopy(iface, ep, pieces, addr, &rk, id.0)? {
                Done::Now => {}
                Done::Later => later += 1,
            }
            posted += 1;
            Ok(())
        });
        s.wait_comp += later;
        if r == Err(Status::NoResource) {
            // Out of resources (a registration, a send queue): what was posted stays
            // posted, and the rest is written on a later progress, from where it stopped.
            let mut put = put;
            let done: u64 = put.segs[..posted].iter().map(|g| g.len).sum();
            put.offset += done as usize;
            put.segs.drain(..posted);
            s.put = Some(put);
            return Err(Status::NoResource);
        }
        r?;
    }
    s.offset = s.total;
    s.fin_pending = true;
    Ok(mapped.is_some())
}

/// Reads the sender's structured layout `dt` at `origin` into `local`, in chunks of
/// remote segments generated lazily from the canonical form: each chunk is one remote
/// gather (`get_zcopy_iov`), or one read per segment where the transport cannot gather.
/// Returns how many reads complete later (through `comp`).
pub(super) fn get_layout(
    iface: &mut dyn Iface,
    ep: uct::EpId,
    local: &[Iov],
    dt: &crate::datatype::DtLayout,
    origin: u64,
    rk: &uct::RemoteKey,
    comp: u64,
) -> UcsResult<u32> {
    const CHUNK: usize = 4096;
    let mut later = 0u32;
    let mut cur = crate::dt::Cursor::new(dt.canon(), 0).map_err(|_| Status::InvalidParam)?;
    let mut segs = Vec::with_capacity(CHUNK);
    let mut remote: Vec<(u64, u64)> = Vec::with_capacity(CHUNK);
    let mut cut = IovCutter::default();
    let mut pieces: Vec<Iov> = Vec::new();
    let mut gather = true;
    loop {
        let n = cur.fill(&mut segs, CHUNK, u64::MAX);
        if n == 0 {
            return Ok(later);
        }
        remote.clear();
        for g in &segs {
            let a = origin.wrapping_add(g.offset as u64);
            remote.push((a, g.len));
        }
        // The local pieces for these `n` bytes.
        pieces.clear();
        cut.take(local, n as usize, &mut pieces)?;
        if gather {
            match buf::get_zcopy_iov(iface, ep, &pieces, &remote, rk, comp) {
                Ok(Done::Now) => continue,
                Ok(Done::Later) => {
                    later += 1;
                    continue;
                }
                Err(Status::Unsupported) => gather = false,
                Err(e) => return Err(e),
            }
        }
        let segs_r: Vec<RemoteSeg> = remote
            .iter()
            .map(|&(addr, len)| RemoteSeg { addr, len })
            .collect();
        for_each_remote_seg(&pieces, &segs_r, |p, addr| {
            if buf::get_zcopy(iface, ep, p, addr, rk, comp)? == Done::Later {
                later += 1;
            }
            Ok(())
        })?;
    }
}

/// Calls `f(local_pieces, remote_addr)` once per remote segment, with the local iov pieces
/// that cover it (the two lists describe the same number of bytes, cut differently).
pub(super) fn for_each_remote_seg(
    local: &[Iov],
    segs: &[RemoteSeg],
    mut f: impl FnMut(&[Iov], u64) -> UcsResult<()>,
) -> UcsResult<()> {
    let mut cut = IovCutter::default();
    let mut pieces: SmallVec<[Iov; 8]> = SmallVec::new();
    for seg in segs {
        pieces.clear();
        cut.take(local, seg.len as usize, &mut pieces)?;
        f(&pieces, seg.addr)?;
    }
    Ok(())
}

/// Walks a local iov list, cutting off the pieces that cover the next bytes asked for
/// (to pair them with remote segments cut differently).
#[derive(Default)]
pub(super) struct IovCutter {
    /// The current entry, and the offset into it.
    li: usize,
    loff: usize,
}

impl IovCutter {
    /// Appends to `out` the pieces of `local` covering the next `n` bytes;
    /// `MessageTruncated` if the list ends first.
    pub(super) fn take(
        &mut self,
        local: &[Iov],
        n: usize,
        out: &mut impl Extend<Iov>,
    ) -> UcsResult<()> {
        let mut need = n;
        while need > 0 && self.li < local.len() {
            let l = local[self.li];
            let take = (l.length - self.loff).min(need);
            out.extend(std::iter::once(Iov {
                buffer: l.buffer.wrapping_add(self.loff),
                length: take,
            }));
            need -= take;
            self.loff += take;
            if self.loff == l.length {
                self.li += 1;
                self.loff = 0;
            }
        }
        if need > 0 {
            Err(Status::MessageTruncated)
        } else {
            Ok(())
        }
    }
}

/// The first header of send `id`'s message (eager first fragment or RTS).
fn first_hdr(tag: u64, rid: u32, flags: u8, id: ReqId, total: usize) -> FirstHdr {
    FirstHdr {
        tag,
        ep: rid,
        flags,
        sreq: id.0,
        total: total as u64,
    }
}

/// The AM id and bytes of an RTS: a tag RTS, or an AM RTS with its prefix.
fn rts_for(am: &Option<Box<super::am::AmHdr>>, rts: Vec<u8>) -> (u8, Vec<u8>) {
    match am {
        Some(a) => (super::am::AM_USER_RTS, super::am::rts_prefix(a, rts)),
        None => (wire::AM_RTS, rts),
    }
}

fn send_bytes(iface: &mut dyn Iface, lane: super::Lane, id: u8, b: &[u8]) -> UcsResult<usize> {
    iface
        .am_bcopy(lane.ep, id, &mut |buf| {
            if buf.len() < b.len() {
                return 0;
            }
            buf[..b.len()].copy_from_slice(b);
            b.len()
        })
        .and_then(|n| {
            if n == b.len() {
                Ok(n)
            } else {
                Err(Status::MessageTruncated)
            }
        })
}

/// Completes send `id` if nothing about it is outstanding any more.
pub(super) fn maybe_finish_send(ifaces: &mut [OpenIface], core: &mut Core, id: ReqId) {
    let Some(Op::Send(s)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    let sent = s.started
        && s.offset >= s.total
        && s.put.is_none()
        && (!matches!(s.proto, Proto::RndvAm | Proto::RndvPut) || s.rreq.is_some());
    if !sent || s.wait_ack || s.wait_comp > 0 {
        return;
    }
    let fin = s.fin_pending.then(|| (s.ep, s.rreq.unwrap_or(0)));
    s.fin_pending = false;
    let status = s.ack_status;
    let memh = s.memh.take();
    if s.timed && s.t0 != 0 {
        let ns = ucs::time::cycles().wrapping_sub(s.t0) as f64 / ucs::time::cycles_per_ns();
        let (ep, proto, total) = (s.ep, s.proto, s.total);
        if let Some(t) = core.eps.get_mut(ep).and_then(|e| e.tuner.as_mut()) {
            t.record(proto, total, ns);
        }
    }
    if let Some((ep, rreq)) = fin {
        // Every write of a put rendezvous has landed: tell the receiver.
        core.queue_ctrl(ep, Ctrl::Fin { rreq, status });
    }
    if let Some((i, m)) = memh.map(|b| *b) {
        let _ = ifaces[i].md().mem_dereg(&m);
    }
    core.complete(id, status, None);
}

/// Sends the queued requests of `ep` in order until one blocks. Returns whether any moved.
pub(super) fn drain_queue(ifaces: &mut [OpenIface], core: &mut Core, ep: usize) -> bool {
    let mut moved = false;
    loop {
        let Some(e) = core.eps.get(ep) else {
            return moved;
        };
        if e.failed.is_some() || e.remote_id.is_none() {
            return moved;
        }
        let Some(&id) = e.queue.front() else {
            return moved;
        };
        match push_send(ifaces, core, id) {
            Ok(true) => {}
            Ok(false) => {
                // Out of resources: try again on the next progress.
                core.mark_ready(ep);
                return moved;
            }
            Err(s) => core.complete(id, s, None),
        }
        moved = true;
        core.eps[ep].queue.pop_front();
        if let Some(Op::Send(s)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
            s.queued = false;
        }
        maybe_finish_send(ifaces, core, id);
    }
}

/// Delivers a matched message `msg` (with `info`) into receive `id`.
pub(super) fn deliver(core: &mut Core, info: TagInfo, msg: Unexp, id: ReqId) {
    let id = match msg {
        Unexp::Eager { .. } => id,
        _ => core.materialize(id),
    };
    match msg {
        Unexp::Eager { data, sync } => {
            recv_eager(core, id, info, &data);
            core.recycle_unexp(data);
            core.ack_sync(sync);
        }
        Unexp::Frag(f) => {
            let fb = core.unexp_frags.remove(f);
            let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
                return;
            };
            r.handle = None;
            r.info = Some(info);
            r.expect = info.length;
            r.received = fb.received();
            r.peer = Some((fb.ep, fb.sreq));
            r.ack_sync = fb.sync;
            if let Err(s) = r.data.unpack(0, &fb.buf) {
                r.status = s;
            }
            let whole = fb.received() >= info.length;
            if !whole {
                core.frags.insert((fb.ep, fb.sreq), FragTarget::Recv(id));
            }
            core.recycle_unexp(fb.buf);
            if whole {
                finish_recv(core, id);
            }
        }
        Unexp::Rts { ep, sreq, rts } => start_rndv_recv(core, id, info, ep, sreq, *rts),
    }
}

impl Core {
    /// Acknowledges the synchronous send of a received unexpected eager message (`sync`
    /// of its `Unexp::Eager`).
    fn ack_sync(&mut self, sync: Option<(usize, u64)>) {
        if let Some((ep, sreq)) = sync {
            self.queue_ctrl(
                ep,
                Ctrl::Ack {
                    sreq,
                    status: Status::Ok,
                },
            );
        }
    }

    /// The request of receive `id`, which a message just took out of the matcher: a direct
    /// receive (`tag_recv_host`) becomes one here, subscribed as it was; any other id is
    /// returned as it is.
    #[inline]
    pub(super) fn materialize(&mut self, id: ReqId) -> ReqId {
        match self.direct.take(id) {
            Some(d) => self.reqs.insert_with(
                move || Op::Recv(recv_into(DataState::Contig(d.buf))),
                d.user_data,
                true,
            ),
            None => id,
        }
    }
}

/// A whole eager message for receive `id`.
#[inline(always)]
pub(super) fn recv_eager(core: &mut Core, id: ReqId, info: TagInfo, payload: &[u8]) {
    let id = if id.is_direct() {
        match core.direct.get(id) {
            Some(d) if payload.len() <= d.buf.len() => {
                if let Some(d) = core.direct.take(id) {
                    d.buf.write_at(0, payload);
                    core.completions.push_back(crate::request::Completion {
                        req: id,
                        status: Status::Ok,
                        info: Some(info),
                        user_data: d.user_data,
                    });
                }
                return;
            }
            // Truncated: the request's path says so as for any receive.
            _ => core.materialize(id),
        }
    } else {
        id
    };
    let Some(r) = core.reqs.get_mut(id) else {
        return;
    };
    let Op::Recv(rv) = &mut r.state else {
        return;
    };
    let status = match &mut rv.data {
        // The common case, a contiguous buffer that holds the message, copies inline.
        DataState::Contig(b) if payload.len() <= b.len() => {
            b.write_at(0, payload);
            Status::Ok
        }
        // Others unpack; a device layout's bytes then go from its scratch buffer into
        // the layout (`finish_recv`).
        d => match d
            .unpack(0, payload)
            .and_then(|()| d.finish_recv(payload.len()))
        {
            Ok(()) => Status::Ok,
            Err(s) => s,
        },
    };
    // A receive holds no endpoint's count (see `Core::complete`): finish it in place.
    let done = Op::Done {
        status,
        info: Some(info),
    };
    if owns_nothing(rv) {
        // Nothing to drop: skip the drop glue of the whole `Op`.
        std::mem::forget(std::mem::replace(&mut r.state, done));
    } else {
        r.state = done;
    }
    if r.notify {
        core.completions.push_back(crate::request::Completion {
            req: id,
            status,
            info: Some(info),
            user_data: r.user_data,
        });
    }
    if r.released {
        core.reqs.remove(id);
    }
}

/// Whether dropping receive `r` would free nothing: contiguous data, no rendezvous state,
/// and the other fields plain data. The pattern names every field, so a new one cannot be
/// added without deciding here whether it owns something.
#[inline]
fn owns_nothing(r: &RecvOp) -> bool {
    const _: () = assert!(!std::mem::needs_drop::<(
        Option<crate::tag::RecvHandle>,
        Option<TagInfo>,
        usize,
        Status,
        Option<(usize, u64)>,
        bool,
        super::StreamMode,
    )>());
    matches!(
        r,
        RecvOp {
            data: DataState::Contig(_),
            rndv: None,
            handle: _,
            info: _,
            received: _,
            expect: _,
            status: _,
            peer: _,
            ack_sync: _,
            stream: _,
        }
    )
}

/// Completes a receive whose bytes have all arrived, acknowledging a synchronous send.
pub(super) fn finish_recv(core: &mut Core, id: ReqId) {
    let Some(Op::Recv(r)) = core.reqs.get(id).map(|r| &r.state) else {
        return;
    };
    let (status, info, peer, sync) = (r.status, r.info, r.peer, r.ack_sync);
    if sync {
        if let Some((ep, sreq)) = peer {
            core.queue_ctrl(
                ep,
                Ctrl::Ack {
                    sreq,
                    status: Status::Ok,
                },
            );
        }
    }
    core.complete(id, status, info);
}

/// A transport completion for request `id`.
pub(super) fn on_completion(core: &mut Core, id: ReqId, status: Status) {
    if !core.staging.is_empty() {
        if let Some(i) = core.staging.iter().position(|(r, _)| *r == id) {
            // A bounce copied into device memory: back to the pool, and the gets waiting
            // for room go again.
            core.staging.swap_remove(i);
            core.gets.extend(core.waiting_gets.drain(..));
            core.work = true;
        }
    }
    match core.reqs.get_mut(id).map(|r| &mut r.state) {
        Some(Op::Send(s)) => {
            s.wait_comp = s.wait_comp.saturating_sub(1);
            if status != Status::Ok {
                core.complete(id, status, None);
            } else {
                // Finishing may deregister memory: the worker does it in run_actions.
                core.finished.push(id);
                core.work = true;
            }
        }
        Some(Op::Recv(r)) => {
            let x = r.rndv();
            x.gets = x.gets.saturating_sub(1);
            let gets = x.gets;
            if status != Status::Ok {
                r.status = status;
            }
            if gets == 0 {
                finish_get(core, id);
            }
        }
        Some(Op::Flush(_)) => wireup::flush_completion(core, id),
        Some(Op::Rma(_)) => super::rma::on_completion(core, id, status),
        _ => {}
    }
}
