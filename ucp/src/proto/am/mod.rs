//! Active messages (`ucp_worker_set_am_recv_handler`, `ucp_am_send_nbx`,
//! `ucp_am_recv_data_nbx`, `ucp_am_data_release`).
//!
//! A message is a user header plus data, sent to a handler id. Data that fits one transport
//! buffer goes eagerly and is handed to the handler whole; larger data (or data from the
//! rendezvous threshold up) is announced by an RTS, and the handler — or the application
//! later — receives it into a buffer of its choice with [`Worker::am_recv_data`], through
//! the same rendezvous protocols as tag messages (get, put or pipeline).
//!
//! ```text
//! AM_USER       am_id:u16 flags:u8 ep:u32 hdr_len:u32 header data
//! AM_USER_SHORT word:u64 data          word = am_id | flags << 16 | ep << 24
//! AM_USER_RTS   am_id:u16 flags:u8 hdr_len:u32 header <RTS as for tags>
//! ```
//!
//! AM_USER_SHORT is the eager-short form of AM_USER for a message with no user header whose
//! data fits the lane's short size: its prefix is the transport's 8-byte short header, so it
//! goes out through `am_short` with no packing callback.
//!
//! Handlers run from [`Worker::progress`], with the worker itself as their first argument:
//! a handler may send, reply, or receive rendezvous data right there. As in UCX, eager data
//! and the user header are lent for the call: a handler that keeps them copies them (UCX's
//! "persistent data"; [`Worker::am_buf`] makes a pooled copy). A handler should not call
//! `progress` itself (ucp.h forbids it); if it does, later messages are still delivered.
//!
//! Two ways to the handler:
//! - **In place.** A transport with `AM_KEEP` (posix) offers each message through
//!   `Handler::am_keep`. An eager AM_USER or AM_USER_SHORT message, when no other message
//!   waits before it, is kept where it arrived: the transport's `progress` returns, the
//!   worker runs the handler on the bytes in the transport's receive buffer
//!   (`Worker::dispatch_kept`), then releases them. No copy, no queue.
//! - **Queued.** Every other message (other transports, rendezvous announcements, a
//!   message behind a queued one) is copied into pooled buffers and queued
//!   (`QueuedAm`); `progress` runs its handler after the transports, lending the copies.

use ucs::wire::Reader;
use ucs::{Status, UcsResult};

pub(crate) mod state;

pub use crate::worker::state::AmHandler;
pub use state::{AmData, AmEvent, AmRndv};

use crate::buf::KeptBytes;
use crate::datatype::Data;
use crate::proto::eager::new_recv;
use crate::proto::rndv::start_rndv_recv;
use crate::proto::select::{Op as SelOp, Proto};
use crate::proto::wire;
use crate::request::{EpHandle, ReqId};
use crate::tag::{SenderId, TagInfo};
use crate::worker::op::{Op, RecvParams};
use crate::worker::state::{Bad, Core, Ctrl, Res, Worker};
use state::{pack_user, pack_user_hdr, AmHdr, KeptAm, QueuedAm, QueuedData};

pub use crate::proto::wire::{
    AM_FLAG_REPLY, AM_USER, AM_USER_HDR, AM_USER_RTS, AM_USER_SHORT, MAX_AM_HEADER,
};

/// Options of an AM send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmSendParams {
    /// The receiver's handler gets an endpoint to reply on.
    pub reply: bool,
    /// Force the rendezvous protocol (`UCP_AM_SEND_FLAG_RNDV`).
    pub rndv: bool,
    /// Only eager (`UCP_AM_SEND_FLAG_EAGER`): refuse data that does not fit one fragment.
    pub eager: bool,
    pub user_data: u64,
    pub notify: bool,
}

impl Worker {
    /// Sets (or with `None` removes) the handler of AM id `id`
    /// (`ucp_worker_set_am_recv_handler`).
    pub fn am_set_handler(&mut self, id: u16, h: Option<AmHandler>) {
        let i = id as usize;
        if self.am_handlers.len() <= i {
            self.am_handlers.resize_with(i + 1, || None);
        }
        self.am_handlers[i] = h;
    }

    /// Sends an active message (`ucp_am_send_nbx`). `Ok(None)`: done, buffers reusable.
    #[inline]
    pub fn am_send(
        &mut self,
        ep: EpHandle,
        id: u16,
        header: &[u8],
        data: &Data,
        p: AmSendParams,
    ) -> UcsResult<Option<ReqId>> {
        // Fastest path: contiguous data that fits one buffer, on a wired, idle endpoint,
        // goes out at once, without a request, a data state or a protocol lookup; with no
        // user header and short data, through `am_short`.
        if let (Data::Contig(b), Some(e)) = (data, self.core.eps.get(ep.0 as usize)) {
            let total = b.len();
            let idle = e.failed.is_none() && e.queue.is_empty();
            let one_buffer = !p.rndv
                && total < e.thresh.rndv
                && header.len() <= MAX_AM_HEADER
                && b.host_accessible();
            if let Some(rid) = e.remote_id.filter(|_| idle && one_buffer && !p.notify) {
                let flags = if p.reply { AM_FLAG_REPLY } else { 0 };
                let lane = e.am;
                let r = if header.is_empty() && e.thresh.short_fits(total) {
                    let word = short_word(id, flags, rid);
                    let iface = &mut self.ifaces[lane.iface];
                    Some(b.with_slice(|d| iface.am_short(lane.ep, AM_USER_SHORT, word, d)))
                } else if AM_USER_HDR + header.len() + total
                    <= self.core.info[lane.iface].attr.am.max_bcopy
                {
                    let iface = &mut self.ifaces[lane.iface];
                    Some(b.with_slice(|d| {
                        iface
                            .am_bcopy(lane.ep, AM_USER, &mut |buf| {
                                let h = pack_user_hdr(buf, id, flags, rid, header);
                                ucs::wire::copy(&mut buf[h..h + total], d);
                                h + total
                            })
                            .map(drop)
                    }))
                } else {
                    None
                };
                match r {
                    Some(Ok(())) => {
                        self.core.stats.am_eager += 1;
                        return Ok(None);
                    }
                    Some(Err(Status::NoResource)) | None => {}
                    Some(Err(e)) => return Err(e),
                }
            }
        }
        self.am_send_any(ep, id, header, data, p)
    }

    /// Every active-message send but the one-buffer eager send on an idle endpoint.
    #[inline(never)]
    fn am_send_any(
        &mut self,
        ep: EpHandle,
        id: u16,
        header: &[u8],
        data: &Data,
        p: AmSendParams,
    ) -> UcsResult<Option<ReqId>> {
        if header.len() > MAX_AM_HEADER {
            return Err(Status::InvalidParam);
        }
        let Worker { ifaces, core, .. } = self;
        let idx = ep.0 as usize;
        let e = core.eps.get(idx).ok_or(Status::InvalidParam)?;
        if let Some(s) = e.failed {
            return Err(s);
        }
        let flags = if p.reply { AM_FLAG_REPLY } else { 0 };
        // Before its lanes are known, what every lane takes (`Thresholds::before_connect`).
        let seg = if e.provisional {
            core.min_am_bcopy
        } else {
            core.info[e.am.iface].attr.am.max_bcopy
        };
        let mut st = data.start_pack();
        let total = st.len();
        let fits = AM_USER_HDR + header.len() + total <= seg;
        let mem = st.mem_type();
        let mut proto = e.thresh.select(SelOp::TagSend, mem, data.class(), total);
        proto = match proto {
            _ if p.eager && !fits => return Err(Status::ExceedsLimit),
            _ if p.rndv => e
                .thresh
                .select(SelOp::TagSend, mem, data.class(), usize::MAX),
            Proto::RndvGet | Proto::RndvPut | Proto::RndvAm => proto,
            _ if fits => Proto::EagerBcopy,
            _ => e
                .thresh
                .select(SelOp::TagSend, mem, data.class(), usize::MAX),
        };
        if matches!(proto, Proto::RndvGet | Proto::RndvPut)
            && !matches!(data, Data::Contig(_) | Data::Iov(_))
        {
            proto = Proto::RndvAm;
        }
        if proto != Proto::EagerBcopy && AM_USER_HDR + header.len() + 256 > seg {
            // The header must travel in one RTS.
            return Err(Status::ExceedsLimit);
        }
        if proto == Proto::EagerBcopy && e.queue.is_empty() && e.remote_id.is_some() {
            let lane = e.am;
            let rid = e.remote_id.unwrap_or(0);
            let r = ifaces[lane.iface].am_bcopy(lane.ep, AM_USER, &mut |buf| {
                pack_user(buf, id, flags, rid, header, &mut st, total)
            });
            match r {
                Ok(_) => {
                    core.stats.am_eager += 1;
                    return Ok(None);
                }
                Err(Status::NoResource) => {}
                Err(e) => return Err(e),
            }
        }
        match proto {
            Proto::EagerBcopy => core.stats.am_eager += 1,
            _ => core.stats.am_rndv += 1,
        }
        let rid = core.insert_send(
            idx,
            st,
            total,
            proto,
            (0, 0, false),
            Some(Box::new(AmHdr {
                id,
                flags,
                header: header.to_vec(),
            })),
            p.user_data,
            p.notify,
        );
        core.start_send(ifaces, idx, rid);
        Ok(Some(rid))
    }

    /// Receives the data of a rendezvous active message into `data`
    /// (`ucp_am_recv_data_nbx`).
    pub fn am_recv_data(&mut self, rndv: AmRndv, data: &Data, p: RecvParams) -> UcsResult<ReqId> {
        let core = &mut self.core;
        let id = core
            .reqs
            .insert(Op::Recv(new_recv(data)), p.user_data, p.notify);
        let info = TagInfo {
            sender_tag: 0,
            length: rndv.length,
            sender: SenderId(rndv.ep as u64),
        };
        if core.eps.get(rndv.ep).is_none_or(|e| e.failed.is_some()) {
            let s = core
                .eps
                .get(rndv.ep)
                .and_then(|e| e.failed)
                .unwrap_or(Status::NotConnected);
            core.complete(id, s, Some(info));
            return Ok(id);
        }
        start_rndv_recv(core, id, info, rndv.ep, rndv.sreq, *rndv.rts);
        self.answer_now();
        Ok(id)
    }

    /// Drops rendezvous data without receiving it; the sender completes.
    pub fn am_data_release(&mut self, rndv: AmRndv) {
        self.core.queue_ctrl(
            rndv.ep,
            Ctrl::Ack {
                sreq: rndv.sreq,
                status: Status::Ok,
            },
        );
        self.answer_now();
    }

    /// A copy of `bytes` in a buffer from the worker's pool: for a handler that keeps a
    /// message's data past its call. Give it back with [`Worker::am_recycle`] when done.
    pub fn am_buf(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.core.take_buf(bytes)
    }

    /// Gives a buffer (from [`Worker::am_buf`] or a stream receive) back for reuse.
    pub fn am_recycle(&mut self, v: Vec<u8>) {
        self.core.recycle(v);
    }

    /// Runs the handler of the message an interface kept in place (from `progress`, right
    /// after that interface's progress), then lets the interface reuse its memory.
    #[inline(always)]
    pub(crate) fn dispatch_kept(&mut self) -> usize {
        let Some(k) = self.core.kept.take() else {
            return 0;
        };
        self.core.stats.am_in_place += 1;
        crate::buf::with_kept(k.bytes, |b| {
            let (header, payload) = b.split_at(k.hdr_len as usize);
            self.run_handler(AmEvent {
                id: k.id,
                header,
                data: AmData::Eager(payload),
                reply_ep: k.reply_ep,
            });
        });
        // The interface reuses the message's memory once the next `progress` starts: the
        // release is not on the way from this message to the next one the program sends
        // (the reply, in a ping-pong). After a handler that swapped this worker with
        // another (`mem::swap`), this marks the other worker, whose interface keeps
        // nothing: releasing is then a no-op.
        // (Owed already when the handler progressed and handled a kept message of another
        // interface.)
        self.release_if_owed();
        self.core.release_owed = k.iface;
        1
    }

    /// Runs the handlers of queued messages (from `progress`).
    pub(crate) fn dispatch_am(&mut self) -> usize {
        let mut n = 0;
        while let Some(q) = self.core.am_events.pop_front() {
            n += 1;
            let QueuedAm {
                id,
                header,
                data,
                reply_ep,
            } = q;
            let (buf, rndv) = match data {
                QueuedData::Eager(v) => (v, None),
                QueuedData::Rndv(r) => (Vec::new(), Some(r)),
            };
            let data = match rndv {
                Some(r) => AmData::Rndv(r),
                None => AmData::Eager(&buf),
            };
            self.run_handler(AmEvent {
                id,
                header: &header,
                data,
                reply_ep,
            });
            self.core.recycle(buf);
            self.core.recycle(header);
        }
        n
    }

    /// Calls the handler of `ev.id`, or drops the message when there is none.
    #[inline(always)]
    fn run_handler(&mut self, ev: AmEvent<'_>) {
        let i = ev.id as usize;
        match self.am_handlers.get_mut(i).and_then(Option::take) {
            Some(mut h) => {
                self.core.am_depth += 1;
                h(self, ev);
                self.core.am_depth = self.core.am_depth.saturating_sub(1);
                // The handler may have replaced itself; keep the newer one.
                if let Some(slot) = self.am_handlers.get_mut(i) {
                    if slot.is_none() {
                        *slot = Some(h);
                    }
                }
            }
            None => {
                ucs::warn_limited!("ucp: active message for id {i} without a handler dropped");
                if let AmData::Rndv(r) = ev.data {
                    self.am_data_release(r);
                }
            }
        }
    }
}

/// The 8-byte prefix of an AM_USER_SHORT message.
#[inline]
fn short_word(id: u16, flags: u8, ep: u32) -> u64 {
    u64::from(id) | u64::from(flags) << 16 | u64::from(ep) << 24
}

/// The endpoint a handler may reply on: the one the message came from, when the sender
/// asked for it.
fn reply_ep(flags: u8, ep: usize) -> Option<EpHandle> {
    (flags & AM_FLAG_REPLY != 0).then_some(EpHandle(ep as u32))
}

impl Core {
    fn take_buf(&mut self, data: &[u8]) -> Vec<u8> {
        if data.is_empty() {
            // No allocation, and no pooled buffer spent on nothing.
            return Vec::new();
        }
        let mut v = self.am_pool.pop().unwrap_or_default();
        v.extend_from_slice(data);
        v
    }

    fn recycle(&mut self, mut v: Vec<u8>) {
        if v.capacity() != 0 && self.am_pool.len() < 64 {
            v.clear();
            self.am_pool.push(v);
        }
    }

    /// Decodes an eager AM_USER or AM_USER_SHORT message.
    #[inline]
    fn decode_user<'d>(&self, id: u8, data: &'d [u8]) -> Result<UserMsg<'d>, Bad> {
        if id == AM_USER_SHORT {
            let Some((word, payload)) = data.split_first_chunk::<8>() else {
                return Err(Bad::Malformed(None));
            };
            let word = u64::from_le_bytes(*word);
            return Ok(UserMsg {
                id: word as u16,
                flags: (word >> 16) as u8,
                ep: self.live_ep((word >> 24) as u32)?,
                hdr_len: 0,
                rest: payload,
            });
        }
        let mut r = Reader::new(data);
        let (id, flags, ep, hdr_len) = match (r.u16(), r.u8(), r.u32(), r.u32()) {
            (Some(a), Some(b), Some(c), Some(d)) => (a, b, c, d as usize),
            _ => return Err(Bad::Malformed(None)),
        };
        let ep = self.live_ep(ep)?;
        let rest = r.rest();
        if hdr_len > rest.len() {
            return Err(Bad::Malformed(Some(ep)));
        }
        Ok(UserMsg {
            id,
            flags,
            ep,
            hdr_len,
            rest,
        })
    }

    /// An eager AM_USER or AM_USER_SHORT message arrived: queued for its handler, header
    /// and data copied into pooled buffers; `progress` runs the handlers after the
    /// transports.
    pub(crate) fn on_am_user(&mut self, id: u8, data: &[u8]) -> Res {
        let m = self.decode_user(id, data)?;
        let (header, payload) = m.rest.split_at(m.hdr_len);
        let header = self.take_buf(header);
        let payload = self.take_buf(payload);
        self.am_events.push_back(QueuedAm {
            id: m.id,
            header,
            data: QueuedData::Eager(payload),
            reply_ep: reply_ep(m.flags, m.ep),
        });
        Ok(())
    }

    /// The same message from a transport that can keep it in place: kept for
    /// `Worker::dispatch_kept`, which runs its handler right after this transport's
    /// progress, unless something that arrived before it still waits (a queued message, or
    /// protocol actions such as the wire-up that lets the handler reply): then it waits
    /// behind them, queued.
    #[inline]
    pub(crate) fn keep_am_user(&mut self, id: u8, data: &[u8]) -> Result<bool, Bad> {
        if self.work || !self.am_events.is_empty() {
            self.on_am_user(id, data)?;
            return Ok(false);
        }
        let m = self.decode_user(id, data)?;
        self.kept = Some(KeptAm {
            bytes: KeptBytes::new(m.rest),
            reply_ep: reply_ep(m.flags, m.ep),
            // Both fit: at most 255 interfaces (`Worker::new`), and the header length was
            // checked against a message that fits one transport buffer.
            hdr_len: m.hdr_len as u32,
            id: m.id,
            iface: self.cur_iface as u8,
        });
        Ok(true)
    }

    /// An AM_USER_RTS message arrived.
    pub(crate) fn on_am_rts(&mut self, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let (id, flags, hlen) = match (r.u16(), r.u8(), r.u32()) {
            (Some(a), Some(b), Some(c)) => (a, b, c as usize),
            _ => return Err(Bad::Malformed(None)),
        };
        let header = r.bytes(hlen).ok_or(Bad::Malformed(None))?.to_vec();
        let (h, rts) = wire::decode_rts(r.rest()).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(h.ep)?;
        let length = usize::try_from(h.total).map_err(|_| Bad::Malformed(Some(ep)))?;
        self.am_events.push_back(QueuedAm {
            id,
            header,
            data: QueuedData::Rndv(AmRndv {
                ep,
                sreq: h.sreq,
                length,
                rts: Box::new(rts),
            }),
            reply_ep: reply_ep(flags, ep),
        });
        Ok(())
    }
}

/// A decoded eager AM_USER or AM_USER_SHORT message.
struct UserMsg<'d> {
    id: u16,
    flags: u8,
    ep: usize,
    /// The user header's length: `rest` is the user header, then the data.
    hdr_len: usize,
    rest: &'d [u8],
}
