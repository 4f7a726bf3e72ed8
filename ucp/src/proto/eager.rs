//! Tagged messages (`ucp_tag_send_nbx`, `ucp_tag_recv_nbx`, `ucp_tag_probe_nb`,
//! `ucp_tag_msg_recv_nbx`) and the eager protocols: the user calls; the matching of arrived
//! messages with posted receives, each delivered by its protocol (eager here, a rendezvous
//! RTS by `proto::rndv`); the eager protocols' steps (short, bcopy, zcopy, multi-fragment,
//! synchronous) and the handlers of their messages; and the send queue every protocol's
//! sends go through (`push_send`, `enqueue`, `drain_queue`, `maybe_finish_send`), whose
//! rendezvous steps are `rndv::send`'s.

use smallvec::SmallVec;
use ucs::wire::Reader;
use ucs::{Status, UcsResult};
use uct::{Done, IfaceFlags, Iov, MemoryType, OpenIface};

use crate::buf;
use crate::datatype::{as_vector, Data, DataState};
use crate::proto::am::state::{pack_queued, AmHdr};
use crate::proto::rndv::send::{self as rndv_send, first_hdr, send_frags};
use crate::proto::rndv::start_rndv_recv;
use crate::proto::select::{Op as SelOp, Proto};
use crate::proto::wire::{self, FirstHdr, FragHdr, FLAG_SYNC};
use crate::request::{EpHandle, ReqId};
use crate::tag::{ArriveResult, MessageHandle, PostResult, SenderId, TagInfo};
use crate::worker::op::{
    FragBuf, FragTarget, Op, RecvOp, RecvParams, SendOp, SendParams, StreamMode, Unexp,
};
use crate::worker::state::{nb, Bad, Core, Ctrl, Res, Worker};

/// The largest multi-fragment eager message we buffer when it arrives unexpected.
const MAX_EAGER_TOTAL: u64 = 1 << 30;

/// What an unexpected multi-fragment message's buffer reserves up front (it grows with
/// the fragments that actually arrive). The buffer comes from the pool of unexpected
/// eager messages and goes back there once the message is received.
const FRAG_PREALLOC: usize = 256 << 10;

/// Plain eager messages carry no sender: they are complete on arrival and need no answer.
const ANONYMOUS: SenderId = SenderId(u64::MAX);

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
        let id = core.insert_send(
            idx,
            st,
            total,
            proto,
            (tag, flags, timed),
            None,
            p.user_data,
            p.notify,
        );
        core.start_send(ifaces, idx, id);
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

#[inline(always)]
pub(crate) fn new_recv(data: &Data) -> RecvOp {
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
        stream: StreamMode::No,
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
pub(crate) fn enqueue(core: &mut Core, ep: usize, id: ReqId) {
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

/// Sends what request `id` can send now, by its protocol: the eager ones here, the
/// rendezvous ones by `rndv::send`, the stream's fragments (`proto::stream`) here too.
/// `Ok(true)`: nothing more to send until a peer answers; `Ok(false)`: out of resources,
/// call again later.
pub(crate) fn push_send(ifaces: &mut [OpenIface], core: &mut Core, id: ReqId) -> UcsResult<bool> {
    let (reqs, mut cx) = core.send_parts();
    let Some(Op::Send(s)) = reqs.get_mut(id).map(|r| &mut r.state) else {
        return Ok(true);
    };
    if s.timed && s.t0 == 0 {
        s.t0 = ucs::time::cycles();
    }
    let e = &cx.eps[s.ep];
    let rid = e.remote_id.ok_or(Status::NotConnected)?;
    let lanes = (e.am, e.rma, e.rma_dev);
    let lane = e.am;
    if s.started && s.put.is_some() {
        // The rendezvous receiver said where to write (RTR_PUT, RTR_SPLIT, RTR_UMR).
        return rndv_send::write_tail(ifaces, &mut cx, s, id, lanes);
    }
    let seg = cx.info[lane.iface].attr.am.max_bcopy;
    let iface = &mut ifaces[lane.iface];
    let total = s.total;
    let sync = s.flags & FLAG_SYNC != 0;
    let tag = s.tag;
    if s.stream {
        while s.offset < total {
            let (data, off) = (&mut s.data, s.offset);
            let r = iface.am_bcopy(lane.ep, wire::AM_STREAM, &mut |buf| {
                let h = wire::STREAM_HDR;
                buf[..h].copy_from_slice(&rid.to_le_bytes());
                h + data.pack(off, &mut buf[h..seg])
            });
            let Some(n) = nb(r)? else { return Ok(false) };
            s.offset += n - wire::STREAM_HDR;
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
                iface.am_bcopy(lane.ep, wire::AM_USER, &mut |buf| {
                    pack_queued(buf, am, rid, data, total)
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
            let middle = (wire::AM_EAGER_MIDDLE, wire::EAGER_MIDDLE_HDR);
            if !send_frags(iface, lane.ep, middle, rid, id.0, s, seg)? {
                return Ok(false);
            }
        }
        Proto::RndvGet if s.data.layout().is_some() && !rndv_send::packs_device_layout(&s.data) => {
            return rndv_send::rts_layout(ifaces, &mut cx, s, id, rid, lanes);
        }
        Proto::RndvGet => return rndv_send::rts_get(ifaces, &mut cx, s, id, rid, lanes),
        Proto::RndvAm | Proto::RndvPut => {
            return rndv_send::pipeline(ifaces, &mut cx, s, id, rid, lane);
        }
    }
    Ok(true)
}

/// Completes send `id` if nothing about it is outstanding any more.
pub(crate) fn maybe_finish_send(ifaces: &mut [OpenIface], core: &mut Core, id: ReqId) {
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
pub(crate) fn drain_queue(ifaces: &mut [OpenIface], core: &mut Core, ep: usize) -> bool {
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
pub(crate) fn deliver(core: &mut Core, info: TagInfo, msg: Unexp, id: ReqId) {
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
    pub(crate) fn materialize(&mut self, id: ReqId) -> ReqId {
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
pub(crate) fn recv_eager(core: &mut Core, id: ReqId, info: TagInfo, payload: &[u8]) {
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
        StreamMode,
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
pub(crate) fn finish_recv(core: &mut Core, id: ReqId) {
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

impl Core {
    /// Inserts a send request (tag, with its message flags and whether the tuner times it;
    /// or AM, with its header) for endpoint `ep`.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn insert_send(
        &mut self,
        ep: usize,
        data: DataState,
        total: usize,
        proto: Proto,
        (tag, flags, timed): (u64, u8, bool),
        am: Option<Box<AmHdr>>,
        user_data: u64,
        notify: bool,
    ) -> ReqId {
        let id = self.reqs.insert(
            Op::Send(SendOp {
                ep,
                tag,
                data,
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
                am,
                stream: false,
                timed,
                t0: 0,
                stage: None,
            }),
            user_data,
            notify,
        );
        self.eps[ep].outstanding += 1;
        id
    }

    /// Sends what a new request can send now, or queues it behind the endpoint's others.
    #[inline]
    pub(crate) fn start_send(&mut self, ifaces: &mut [uct::OpenIface], ep: usize, id: ReqId) {
        let e = &self.eps[ep];
        if e.queue.is_empty() && e.remote_id.is_some() {
            match push_send(ifaces, self, id) {
                Ok(true) => {}
                Ok(false) => enqueue(self, ep, id),
                Err(s) => self.complete(id, s, None),
            }
        } else {
            enqueue(self, ep, id);
        }
        maybe_finish_send(ifaces, self, id);
    }
}

impl Core {
    /// Inlined into `am` and `am_keep`: one call fewer on the small-message path.
    #[inline(always)]
    pub(crate) fn on_eager(&mut self, data: &[u8]) -> Res {
        if data.len() < wire::EAGER_HDR {
            return Err(Bad::Malformed(None));
        }
        let tag = u64::from_le_bytes(data[..8].try_into().map_err(|_| Bad::Malformed(None))?);
        let payload = &data[8..];
        let info = TagInfo {
            sender_tag: tag,
            length: payload.len(),
            sender: ANONYMOUS,
        };
        if let Some(id) = self.matcher.match_expected(tag) {
            recv_eager(self, id, info, payload);
        } else {
            self.eager_unexpected(info, payload);
        }
        Ok(())
    }

    /// A plain eager message no receive waits for: its data is copied and queued.
    #[inline(never)]
    fn eager_unexpected(&mut self, info: TagInfo, payload: &[u8]) {
        self.stats.unexpected += 1;
        let msg = Unexp::Eager {
            data: self.unexp_data(payload),
            sync: None,
        };
        self.store_unexpected(info, msg);
    }

    fn store_unexpected(&mut self, info: TagInfo, msg: Unexp) {
        match self
            .matcher
            .arrive(info.sender, info.sender_tag, info.length, msg)
        {
            ArriveResult::Unexpected => {}
            // match_expected found nothing a moment ago; deliver anyway if it did now.
            ArriveResult::Matched(m) => deliver(self, m.info, m.msg, m.user),
        }
    }

    pub(crate) fn on_eager_sync(&mut self, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let (tag, ep, sreq) = match (r.u64(), r.u32(), r.u64()) {
            (Some(t), Some(e), Some(s)) => (t, e, s),
            _ => return Err(Bad::Malformed(None)),
        };
        let ep = self.live_ep(ep)?;
        let payload = r.rest();
        let info = TagInfo {
            sender_tag: tag,
            length: payload.len(),
            sender: SenderId(ep as u64),
        };
        if let Some(id) = self.matcher.match_expected(tag) {
            recv_eager(self, id, info, payload);
            self.queue_ctrl(
                ep,
                Ctrl::Ack {
                    sreq,
                    status: Status::Ok,
                },
            );
        } else {
            self.stats.unexpected += 1;
            let msg = Unexp::Eager {
                data: self.unexp_data(payload),
                sync: Some((ep, sreq)),
            };
            self.store_unexpected(info, msg);
        }
        Ok(())
    }

    pub(crate) fn on_first(&mut self, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let h = FirstHdr::read(&mut r).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(h.ep)?;
        let payload = r.rest();
        if h.total > MAX_EAGER_TOTAL || (payload.len() as u64) >= h.total {
            return Err(Bad::Malformed(Some(ep)));
        }
        if self.frags.contains_key(&(ep, h.sreq)) {
            return Err(Bad::Malformed(Some(ep)));
        }
        let total = h.total as usize;
        let info = TagInfo {
            sender_tag: h.tag,
            length: total,
            sender: SenderId(ep as u64),
        };
        let sync = h.flags & FLAG_SYNC != 0;
        if let Some(id) = self.matcher.match_expected(h.tag) {
            let id = self.materialize(id);
            if let Some(Op::Recv(rv)) = self.reqs.get_mut(id).map(|r| &mut r.state) {
                rv.handle = None;
                rv.info = Some(info);
                rv.expect = total;
                rv.received = payload.len();
                rv.peer = Some((ep, h.sreq));
                rv.ack_sync = sync;
                if let Err(s) = rv.data.unpack(0, payload) {
                    rv.status = s;
                }
                self.frags.insert((ep, h.sreq), FragTarget::Recv(id));
            }
        } else {
            self.stats.unexpected += 1;
            // Room for what came; the rest grows as it arrives (the announced total is
            // the peer's word, not an allocation to make on its behalf).
            let mut buf = self.unexp_bufs.take(payload);
            buf.reserve(total.min(FRAG_PREALLOC).saturating_sub(buf.len()));
            let f = self.unexp_frags.insert(FragBuf {
                buf,
                total,
                ep,
                sreq: h.sreq,
                sync,
            });
            self.frags.insert((ep, h.sreq), FragTarget::Unexpected(f));
            self.store_unexpected(info, Unexp::Frag(f));
        }
        Ok(())
    }

    pub(crate) fn on_middle(&mut self, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let h = FragHdr::read(&mut r).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(h.ep)?;
        let payload = r.rest();
        let key = (ep, h.req);
        let target = *self.frags.get(&key).ok_or(Bad::Malformed(Some(ep)))?;
        let off = usize::try_from(h.offset).map_err(|_| Bad::Malformed(Some(ep)))?;
        match target {
            FragTarget::Unexpected(f) => {
                let fb = self
                    .unexp_frags
                    .get_mut(f)
                    .ok_or(Bad::Malformed(Some(ep)))?;
                let end = off
                    .checked_add(payload.len())
                    .ok_or(Bad::Malformed(Some(ep)))?;
                if end > fb.total || off != fb.received() {
                    return Err(Bad::Malformed(Some(ep)));
                }
                fb.buf.extend_from_slice(payload);
                if fb.whole() {
                    self.frags.remove(&key);
                }
            }
            FragTarget::Recv(id) => {
                let Some(Op::Recv(rv)) = self.reqs.get_mut(id).map(|r| &mut r.state) else {
                    self.frags.remove(&key);
                    return Ok(());
                };
                let end = off
                    .checked_add(payload.len())
                    .ok_or(Bad::Malformed(Some(ep)))?;
                if end > rv.expect || off != rv.received {
                    return Err(Bad::Malformed(Some(ep)));
                }
                if let Err(s) = rv.data.unpack(off, payload) {
                    rv.status = s;
                }
                rv.received = end;
                if end == rv.expect {
                    self.frags.remove(&key);
                    finish_recv(self, id);
                }
            }
        }
        Ok(())
    }

    pub(crate) fn on_rts(&mut self, data: &[u8]) -> Res {
        let ep_hint =
            (data.len() >= 12).then(|| u32::from_le_bytes([data[8], data[9], data[10], data[11]]));
        let (h, rts) = match wire::decode_rts(data) {
            Some(x) => x,
            None => return Err(Bad::Malformed(ep_hint.and_then(|e| self.live_ep(e).ok()))),
        };
        let ep = self.live_ep(h.ep)?;
        let info = TagInfo {
            sender_tag: h.tag,
            length: usize::try_from(h.total).map_err(|_| Bad::Malformed(Some(ep)))?,
            sender: SenderId(ep as u64),
        };
        if let Some(id) = self.matcher.match_expected(h.tag) {
            let id = self.materialize(id);
            start_rndv_recv(self, id, info, ep, h.sreq, rts);
        } else {
            self.stats.unexpected += 1;
            self.store_unexpected(
                info,
                Unexp::Rts {
                    ep,
                    sreq: h.sreq,
                    rts: Box::new(rts),
                },
            );
        }
        Ok(())
    }
}
