//! The stream API (`ucp_stream_send_nbx`, `ucp_stream_recv_nbx`,
//! `ucp_stream_recv_data_nb`, `ucp_stream_data_release`): an ordered byte stream per
//! endpoint, with no message boundaries.
//!
//! ```text
//! STREAM   ep:u32 data
//! ```
//!
//! Sends are cut into transport-sized fragments and go out in order behind the endpoint's
//! other sends. Arriving bytes queue per endpoint; posted receives take them in order. A
//! receive completes once it has any bytes (UCX's default) or, with `waitall`, once it is
//! full; its length is what it got.

use ucs::{Status, UcsResult};

use crate::datatype::Data;
use crate::proto::eager::new_recv;
use crate::proto::select::Proto;
use crate::request::{EpHandle, ReqId};
use crate::tag::{SenderId, TagInfo};
use crate::worker::op::{Op, RecvParams, SendParams, StreamMode};
use crate::worker::state::{Bad, Core, Res, Worker};

pub use crate::proto::wire::{AM_STREAM, STREAM_HDR};

/// The outcome of a stream receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamRecv {
    /// Completed at once with this many bytes.
    Done(usize),
    /// Completes later; its length is the request's info length.
    Pending(ReqId),
}

impl Worker {
    /// Sends `data` on the endpoint's byte stream (`ucp_stream_send_nbx`).
    pub fn stream_send(
        &mut self,
        ep: EpHandle,
        data: &Data,
        p: SendParams,
    ) -> UcsResult<Option<ReqId>> {
        let Worker { ifaces, core, .. } = self;
        let idx = ep.0 as usize;
        let e = core.eps.get(idx).ok_or(Status::InvalidParam)?;
        if let Some(s) = e.failed {
            return Err(s);
        }
        let st = data.start_pack();
        let total = st.len();
        if total == 0 {
            return Ok(None);
        }
        let id = core.insert_send(
            idx,
            st,
            total,
            Proto::EagerMulti,
            (0, 0, false),
            None,
            p.user_data,
            p.notify,
        );
        if let Some(Op::Send(s)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
            s.stream = true;
        }
        core.start_send(ifaces, idx, id);
        if !p.notify
            && core
                .reqs
                .get(id)
                .is_some_and(|r| matches!(r.state, Op::Done { .. }))
        {
            let s = self.request_status(id);
            self.request_free(id);
            return if s == Status::Ok { Ok(None) } else { Err(s) };
        }
        Ok(Some(id))
    }

    /// Receives bytes of the endpoint's stream into `data` (`ucp_stream_recv_nbx`).
    pub fn stream_recv(
        &mut self,
        ep: EpHandle,
        data: &Data,
        waitall: bool,
        p: RecvParams,
    ) -> UcsResult<StreamRecv> {
        let core = &mut self.core;
        let idx = ep.0 as usize;
        let e = core.eps.get(idx).ok_or(Status::InvalidParam)?;
        if let Some(s) = e.failed {
            return Err(s);
        }
        let mut r = new_recv(data);
        r.expect = r.data.len();
        r.stream = if waitall {
            StreamMode::WaitAll
        } else {
            StreamMode::Any
        };
        r.peer = Some((idx, 0));
        let id = core.reqs.insert(Op::Recv(r), p.user_data, p.notify);
        core.eps[idx].stream_recvs.push_back(id);
        core.stream_match(idx);
        if !p.notify {
            if let Some(Op::Done { status, info }) = core.reqs.get(id).map(|r| &r.state) {
                let (s, n) = (*status, info.map_or(0, |i| i.length));
                core.reqs.remove(id);
                return if s == Status::Ok {
                    Ok(StreamRecv::Done(n))
                } else {
                    Err(s)
                };
            }
        }
        Ok(StreamRecv::Pending(id))
    }

    /// Takes the next chunk of received stream bytes without copying
    /// (`ucp_stream_recv_data_nb`); give it back with [`Worker::am_recycle`] when done.
    pub fn stream_recv_data(&mut self, ep: EpHandle) -> UcsResult<Option<Vec<u8>>> {
        let e = self
            .core
            .eps
            .get_mut(ep.0 as usize)
            .ok_or(Status::InvalidParam)?;
        if !e.stream_recvs.is_empty() {
            // Posted receives come first, in order.
            return Ok(None);
        }
        match e.stream_rx.pop_front() {
            Some(mut v) => {
                if e.stream_off > 0 {
                    v.drain(..e.stream_off);
                    e.stream_off = 0;
                }
                Ok(Some(v))
            }
            None => match e.failed {
                Some(s) => Err(s),
                None => Ok(None),
            },
        }
    }
}

impl Worker {
    /// Endpoints whose stream has bytes waiting for a receive, at most `max`, each reported
    /// once per arrival of data while none was waiting (`ucp_stream_worker_poll`).
    pub fn stream_poll(&mut self, max: usize) -> Vec<EpHandle> {
        let core = &mut self.core;
        let mut out = Vec::new();
        while out.len() < max {
            let Some(ep) = core.stream_ready.pop_front() else {
                break;
            };
            if let Some(e) = core.eps.get_mut(ep) {
                e.stream_queued = false;
                if !e.stream_rx.is_empty() && e.failed.is_none() {
                    out.push(EpHandle(ep as u32));
                }
            }
        }
        out
    }
}

impl Core {
    /// STREAM arrived.
    pub(crate) fn on_stream(&mut self, data: &[u8]) -> Res {
        if data.len() < STREAM_HDR {
            return Err(Bad::Malformed(None));
        }
        let ep = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
        let ep = self.live_ep(ep)?;
        let payload = &data[STREAM_HDR..];
        if payload.is_empty() {
            return Ok(());
        }
        let mut v = self.am_pool.pop().unwrap_or_default();
        v.extend_from_slice(payload);
        self.eps[ep].stream_rx.push_back(v);
        self.stream_match(ep);
        let e = &mut self.eps[ep];
        if !e.stream_rx.is_empty() && !e.stream_queued {
            e.stream_queued = true;
            self.stream_ready.push_back(ep);
        }
        Ok(())
    }

    /// Moves queued stream bytes of `ep` into its posted receives, in order.
    pub(crate) fn stream_match(&mut self, ep: usize) {
        loop {
            let e = &mut self.eps[ep];
            let (Some(&id), Some(chunk)) = (e.stream_recvs.front(), e.stream_rx.front()) else {
                return;
            };
            let off = e.stream_off;
            let Some(Op::Recv(r)) = self.reqs.get_mut(id).map(|r| &mut r.state) else {
                e.stream_recvs.pop_front();
                continue;
            };
            let room = r.expect - r.received;
            let take = room.min(chunk.len() - off);
            let _ = r.data.unpack(r.received, &chunk[off..off + take]);
            r.received += take;
            e.stream_off += take;
            if e.stream_off == chunk.len() {
                let mut v = e.stream_rx.pop_front().unwrap_or_default();
                e.stream_off = 0;
                if self.am_pool.len() < 64 {
                    v.clear();
                    self.am_pool.push(v);
                }
            }
            let waitall = r.stream == StreamMode::WaitAll;
            let e = &self.eps[ep];
            let more = !e.stream_rx.is_empty();
            if r.received == r.expect || (!waitall && !more) {
                let info = TagInfo {
                    sender_tag: 0,
                    length: r.received,
                    sender: SenderId(ep as u64),
                };
                self.eps[ep].stream_recvs.pop_front();
                self.complete(id, Status::Ok, Some(info));
            }
        }
    }
}
