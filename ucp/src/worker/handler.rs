//! What each protocol message does when it arrives: the worker core as the transports'
//! event handler.
//!
//! Every message is decoded with the checked decoders of `proto::wire`. A message that
//! names one of our endpoints and is malformed or inconsistent (unknown request, offset past
//! the message) fails that endpoint; one too short to name an endpoint is dropped and
//! counted (`WorkerStats::malformed`), since a transport AM does not say who sent it.

use ucs::wire::Reader;
use ucs::Status;
use uct::{Comp, EpId, Handler};

use super::rndv::start_rndv_recv;
use super::tag::{deliver, finish_recv, on_completion, recv_eager};
use super::wireup::{fail_ep, Failure};
use super::{stage, Core, FragBuf, FragTarget, Op, Unexp, COMP_FLUSH};
use crate::address::WorkerAddress;
use crate::datatype::DataState;
use crate::proto::select::Proto;
use crate::proto::wire::{self, FirstHdr, FragHdr, Wireup, FLAG_SYNC};
use crate::request::ReqId;
use crate::tag::{ArriveResult, SenderId, TagInfo};

/// The largest multi-fragment eager message we buffer when it arrives unexpected.
const MAX_EAGER_TOTAL: u64 = 1 << 30;

/// What an unexpected multi-fragment message's buffer reserves up front (it grows with
/// the fragments that actually arrive). The buffer comes from the pool of unexpected
/// eager messages and goes back there once the message is received.
const FRAG_PREALLOC: usize = 256 << 10;

/// Plain eager messages carry no sender: they are complete on arrival and need no answer.
const ANONYMOUS: SenderId = SenderId(u64::MAX);

impl Handler for Core {
    #[inline]
    fn am(&mut self, id: u8, data: &[u8]) {
        // The small-message case first, with nothing else inlined around it.
        let ok = match id {
            wire::AM_EAGER => self.on_eager(data),
            super::am::AM_USER_SHORT => self.on_am_user(id, data),
            _ => self.on_other(id, data),
        };
        if let Err(ep) = ok {
            self.malformed(id, data.len(), ep);
        }
    }

    /// As `am`, but eager user active messages are kept in place for their handler
    /// (`Core::keep_am_user`). The same dispatch as `am`, written out again: the tag path
    /// then pays no extra call.
    #[inline(always)]
    fn am_keep(&mut self, id: u8, data: &[u8]) -> bool {
        let ok = match id {
            wire::AM_EAGER => self.on_eager(data),
            super::am::AM_USER_SHORT | super::am::AM_USER => match self.keep_am_user(id, data) {
                Ok(kept) => return kept,
                Err(ep) => Err(ep),
            },
            _ => self.on_other(id, data),
        };
        if let Err(ep) = ok {
            self.malformed(id, data.len(), ep);
        }
        false
    }

    fn completion(&mut self, comp: Comp, status: Status) {
        if comp & COMP_FLUSH != 0 {
            super::wireup::flush_completion(self, ReqId(comp & !COMP_FLUSH));
        } else {
            on_completion(self, ReqId(comp), status);
        }
    }

    fn ep_error(&mut self, ep: EpId, status: Status) {
        let Some(&idx) = self.uct_eps.get(&(self.cur_iface, ep)) else {
            return;
        };
        if self
            .eps
            .get(idx)
            .is_some_and(|e| e.am.iface != self.cur_iface)
        {
            // Found by another lane (cma's liveness check, say) while what the peer sent
            // before it went may still wait on the endpoint's AM lane: the worker reads
            // that lane dry first (`Worker::fail_after_drain`), in this same progress call.
            self.lane_errors.push((idx, status));
            self.work = true;
            return;
        }
        fail_ep(self, idx, status, Failure::Error);
    }
}

/// Why a protocol message was not acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bad {
    /// Addressed to an endpoint that is closed or failed: a message that crossed the close
    /// (a wire-up reply, an acknowledgement). Dropped quietly and counted.
    Late,
    /// Malformed or inconsistent; from endpoint `ep` when the message names a live one.
    Malformed(Option<usize>),
}

pub(super) type Res = Result<(), Bad>;

impl Core {
    /// Checks that `ep` names a live endpoint of ours.
    pub(super) fn live_ep(&self, ep: u32) -> Result<usize, Bad> {
        let i = ep as usize;
        match self.eps.get(i) {
            Some(e) if e.failed.is_none() => Ok(i),
            // Closed (its slot is free) or failed: late, not malformed.
            _ => Err(Bad::Late),
        }
    }

    /// Every protocol message but plain eager and short active messages.
    #[inline(never)]
    fn on_other(&mut self, id: u8, data: &[u8]) -> Res {
        match id {
            wire::AM_EAGER_SYNC => self.on_eager_sync(data),
            wire::AM_EAGER_FIRST => self.on_first(data),
            wire::AM_EAGER_MIDDLE => self.on_middle(data),
            wire::AM_RTS => self.on_rts(data),
            wire::AM_RTR => self.on_rtr(data),
            wire::AM_RNDV_DATA => self.on_rndv_data(data),
            wire::AM_ACK => self.on_ack(data),
            wire::AM_RTR_PUT => self.on_rtr_put(data),
            wire::AM_RTR_SPLIT => self.on_rtr_split(data),
            wire::AM_RTR_SPLIT_LAYOUT => self.on_rtr_split_layout(data),
            wire::AM_RTR_UMR => self.on_rtr_umr(data),
            wire::AM_LAYOUT_MISS => self.on_layout_miss(data),
            wire::AM_LAYOUT => self.on_layout(data),
            wire::AM_LAYOUT_PART => self.on_layout_part(data),
            wire::AM_FIN => self.on_fin(data),
            wire::AM_WIREUP => self.on_wireup(data),
            super::am::AM_USER => self.on_am_user(id, data),
            super::am::AM_USER_RTS => self.on_am_rts(data),
            super::rma::AM_RMA_PUT | super::rma::AM_RMA_GET | super::rma::AM_RMA_ATOMIC => {
                self.on_rma_request(id, data)
            }
            super::rma::AM_RMA_REPLY => self.on_rma_reply(data),
            super::rma::AM_RMA_PUT_ACK => self.on_put_ack(data),
            super::stream::AM_STREAM => self.on_stream(data),
            _ => Err(Bad::Malformed(None)),
        }
    }

    #[cold]
    #[inline(never)]
    fn malformed(&mut self, id: u8, len: usize, why: Bad) {
        match why {
            Bad::Late => {
                self.stats.late += 1;
                log::debug!("ucp: message for a closed endpoint dropped (am id {id}, {len} bytes)");
            }
            Bad::Malformed(ep) => {
                self.stats.malformed += 1;
                ucs::warn_limited!("ucp: malformed protocol message (am id {id}, {len} bytes)");
                if let Some(ep) = ep {
                    fail_ep(self, ep, Status::IoError, Failure::Error);
                }
            }
        }
    }

    /// Inlined into `am` and `am_keep`: one call fewer on the small-message path.
    #[inline(always)]
    fn on_eager(&mut self, data: &[u8]) -> Res {
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

    fn on_eager_sync(&mut self, data: &[u8]) -> Res {
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
                super::Ctrl::Ack {
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

    fn on_first(&mut self, data: &[u8]) -> Res {
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

    fn on_middle(&mut self, data: &[u8]) -> Res {
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

    fn on_rts(&mut self, data: &[u8]) -> Res {
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

    fn on_rtr(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, rreq) = wire::decode_rtr(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s))
                if s.ep == ep
                    && matches!(s.proto, Proto::RndvAm | Proto::RndvPut)
                    && s.rreq.is_none() =>
            {
                s.rreq = Some(rreq);
            }
            // A get rendezvous whose receiver would rather have the bytes packed (the UMR
            // hybrid, `worker::umr`): the AM pipeline from the start, and no ACK.
            Some(Op::Send(s))
                if s.ep == ep
                    && s.proto == Proto::RndvGet
                    && s.started
                    && s.wait_ack
                    && s.rreq.is_none()
                    && s.put.is_none() =>
            {
                s.proto = Proto::RndvAm;
                s.wait_ack = false;
                s.offset = 0;
                s.rreq = Some(rreq);
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// Puts send `id` back in its endpoint's queue (once), to move on at the next
    /// progress (an RTR, RTR_PUT or RTR_SPLIT gave it what it waited for).
    fn requeue(&mut self, ep: usize, id: ReqId) {
        if let Some(Op::Send(s)) = self.reqs.get_mut(id).map(|r| &mut r.state) {
            if !s.queued {
                s.queued = true;
                self.eps[ep].queue.push_back(id);
            }
        }
        self.mark_ready(ep);
    }

    fn on_rtr_put(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, rreq, rkey, segs) =
            wire::decode_rtr_put(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s))
                if s.ep == ep
                    && (s.proto == Proto::RndvPut || pushes_device(s))
                    && s.rreq.is_none()
                    && segs.iter().map(|g| g.len).sum::<u64>() == s.total as u64 =>
            {
                // A device get rendezvous the receiver turned into a push: no ACK comes, a
                // FIN goes once the writes landed.
                s.wait_ack = false;
                s.rreq = Some(rreq);
                s.put = Some(Box::new(super::PutTarget {
                    rkey,
                    segs,
                    layout: None,
                    offset: 0,
                    umr: None,
                }));
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// The receiver of our layout rendezvous asks us to write its chunks by UMR. A list
    /// we were sent before is named by its id alone; an id we do not know (or a list for a
    /// send that is not a host layout get rendezvous) is a protocol violation.
    fn on_rtr_umr(&mut self, data: &[u8]) -> Res {
        let m = wire::RtrUmr::decode(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(m.ep)?;
        let keys = super::umr::learn_keys(self.eps.get_mut(ep), m.kid, m.keys)
            .ok_or(Bad::Malformed(Some(ep)))?;
        let id = ReqId(m.sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s))
                if s.ep == ep
                    && s.proto == Proto::RndvGet
                    && s.wait_ack
                    && s.rreq.is_none()
                    && s.data.layout().is_some()
                    && (s.total as u64).div_ceil(m.chunk) == keys.len() as u64 =>
            {
                s.wait_ack = false;
                s.rreq = Some(m.rreq);
                s.put = Some(Box::new(super::PutTarget {
                    rkey: Default::default(),
                    segs: crate::proto::wire::Segs::new(),
                    layout: None,
                    offset: 0,
                    umr: Some((m.chunk, keys)),
                }));
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// The receiver of our split rendezvous reads the head and asks us to write the tail
    /// (from `offset`) into its segments; its ACK follows when its reads are done.
    fn on_rtr_split(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, rreq, offset, rkey, segs) =
            wire::decode_rtr_split(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s))
                if takes_split(s, ep, offset)
                    && segs.iter().map(|g| g.len).sum::<u64>() == s.total as u64 - offset =>
            {
                s.rreq = Some(rreq);
                s.put = Some(Box::new(super::PutTarget {
                    rkey,
                    segs,
                    layout: None,
                    offset: offset as usize,
                    umr: None,
                }));
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// As [`on_rtr_split`](Self::on_rtr_split), for a receiver that describes its data by
    /// its layout: the tail goes into that layout's packed bytes from `offset` on.
    fn on_rtr_split_layout(&mut self, data: &[u8]) -> Res {
        let m = wire::RtrSplitLayout::decode(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(m.ep)?;
        let id = ReqId(m.sreq);
        let canon = match m.hash {
            // Sent just before in LAYOUT_PART messages.
            Some(h) => self.cached_layout(ep, h).map(|d| d.canon().clone()),
            None => crate::dt::Canon::decode(&m.layout).ok(),
        }
        .filter(crate::dt::Canon::is_ordered)
        .ok_or(Bad::Malformed(Some(ep)))?;
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            // Offset 0: a receiver of device data asks us to move all of it into its
            // layout (`gpu_dt`): no ACK comes, a FIN goes once the data landed.
            Some(Op::Send(s))
                if s.ep == ep
                    && m.offset == 0
                    && pushes_device(s)
                    && s.rreq.is_none()
                    && canon.size() == s.total as u64 =>
            {
                s.wait_ack = false;
                s.rreq = Some(m.rreq);
                s.put = Some(Box::new(super::PutTarget {
                    rkey: m.rkey,
                    segs: crate::proto::wire::Segs::new(),
                    layout: Some((m.origin, canon)),
                    offset: 0,
                    umr: None,
                }));
            }
            Some(Op::Send(s)) if takes_split(s, ep, m.offset) && canon.size() >= s.total as u64 => {
                s.rreq = Some(m.rreq);
                s.put = Some(Box::new(super::PutTarget {
                    rkey: m.rkey,
                    segs: crate::proto::wire::Segs::new(),
                    layout: Some((m.origin, canon)),
                    offset: m.offset as usize,
                    umr: None,
                }));
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// The receiver of our layout rendezvous evicted the layout: send it again.
    fn on_layout_miss(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, rreq) = wire::decode_rtr(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let (hash, bytes) = match self.reqs.get(ReqId(sreq)).map(|r| &r.state) {
            Some(Op::Send(s)) if s.ep == ep && s.proto == Proto::RndvGet => match s.data.layout() {
                Some(l) => (l.dt.hash(), l.dt.encoded().to_vec()),
                None => return Err(Bad::Malformed(Some(ep))),
            },
            _ => return Err(Bad::Malformed(Some(ep))),
        };
        self.stats.layout_bytes_sent += bytes.len() as u64;
        self.queue_ctrl(ep, super::Ctrl::Layout { rreq, hash, bytes });
        Ok(())
    }

    /// A piece of a layout too large for one message: kept until the last one, then
    /// learned as if an RTS had carried it. A piece at offset 0 starts over (a sender that
    /// ran out of resources sends the whole layout again).
    fn on_layout_part(&mut self, data: &[u8]) -> Res {
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
    fn on_layout(&mut self, data: &[u8]) -> Res {
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

    fn on_fin(&mut self, data: &[u8]) -> Res {
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
                super::rndv::on_fin(self, id, status);
                Ok(())
            }
            _ => Err(Bad::Malformed(Some(ep))),
        }
    }

    fn on_rndv_data(&mut self, data: &[u8]) -> Res {
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
                    stage::finish_recv(self, id);
                }
                Ok(())
            }
            // A receive that was completed early (truncation) still gets the stream the
            // sender had already started: drop it.
            Some(Op::Done { .. }) => Ok(()),
            _ => Err(Bad::Malformed(Some(ep))),
        }
    }

    fn on_ack(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, status) = wire::decode_ack(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s)) if s.ep == ep => {
                s.wait_ack = false;
                let status = Status::from_code(status).unwrap_or(Status::IoError);
                if matches!(s.proto, Proto::RndvAm | Proto::RndvPut) && s.rreq.is_none() {
                    // The receiver refused the data (truncation): nothing to stream.
                    s.rreq = Some(0);
                    s.offset = s.total;
                }
                let split = s.proto == Proto::RndvGet && s.rreq.is_some();
                if status != Status::Ok && split {
                    // The receiver's reads failed, but it waits for the FIN of the tail
                    // we write: finish that first, then complete with the failure.
                    s.ack_status = status;
                    self.finished.push(id);
                    self.work = true;
                } else if status != Status::Ok {
                    self.complete(id, status, None);
                } else {
                    self.finished.push(id);
                    self.work = true;
                }
                Ok(())
            }
            _ => Err(Bad::Malformed(Some(ep))),
        }
    }

    fn on_wireup(&mut self, data: &[u8]) -> Res {
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

/// Whether send `s` is a get rendezvous still waiting for its receiver, which may ask us
/// to write into its device memory instead of reading (`RTR_PUT` with a device key): on a
/// pair of processes, one side makes every device copy, so that one GPU never switches
/// between the two processes' contexts for each message; and host data bound for device
/// memory is written by its sender, who can read it (`rndv::start_get`). Data with
/// addresses only (contiguous, iov, device): a layout or generic datatype is never asked.
fn pushes_device(s: &super::SendOp) -> bool {
    use crate::datatype::DataState;
    s.proto == Proto::RndvGet
        && s.wait_ack
        && matches!(
            s.data,
            DataState::Device(_) | DataState::Contig(_) | DataState::Iov(_)
        )
        || device_layout(s)
}

/// Whether send `s` is a get rendezvous of a layout over device memory, whose receiver
/// may ask us to move it (`gpu_dt`).
fn device_layout(s: &super::SendOp) -> bool {
    #[cfg(feature = "cuda")]
    if s.proto == Proto::RndvGet && s.wait_ack {
        return matches!(s.data, crate::datatype::DataState::DeviceLayout(_));
    }
    let _ = s;
    false
}

/// Whether send `s` to endpoint `ep` may take a split request cutting at `offset`: a get
/// rendezvous that offered help, still waiting for its ACK, not split yet, and a cut
/// inside the message.
fn takes_split(s: &super::SendOp, ep: usize, offset: u64) -> bool {
    s.ep == ep
        && s.proto == Proto::RndvGet
        && s.split_offered
        && s.wait_ack
        && s.rreq.is_none()
        && offset > 0
        && offset < s.total as u64
}
