//! The worker core as the transports' event handler: each arrived protocol message goes to
//! its protocol's handler (`proto::eager`, `proto::rndv`, `proto::am`, `proto::rma`,
//! `proto::stream`, and wire-up's in `wireup`), each transport completion to the operation
//! it completes, each failed transport endpoint to its endpoint. The handlers sit with
//! their protocols; this is the dispatch above them.
//!
//! Every message is decoded with the checked decoders of `proto::wire`. A message that
//! names one of our endpoints and is malformed or inconsistent (unknown request, offset past
//! the message) fails that endpoint; one too short to name an endpoint is dropped and
//! counted (`WorkerStats::malformed`), since a transport AM does not say who sent it.

use ucs::Status;
use uct::{Comp, EpId, Handler};

use super::op::Op;
use super::state::{Bad, Core, Res, COMP_FLUSH};
use super::wireup::{self, fail_ep, Failure};
use crate::proto::{rma, rndv, wire};
use crate::request::ReqId;

impl Handler for Core {
    #[inline]
    fn am(&mut self, id: u8, data: &[u8]) {
        if self.lazy_replies != 0 && id != wire::AM_RMA_GET {
            self.materialize_replies();
        }
        // The small-message case first, with nothing else inlined around it.
        let ok = match id {
            wire::AM_EAGER => self.on_eager(data),
            wire::AM_USER_SHORT => self.on_am_user(id, data),
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
        if self.lazy_replies != 0 && id != wire::AM_RMA_GET {
            self.materialize_replies();
        }
        let ok = match id {
            wire::AM_EAGER => self.on_eager(data),
            wire::AM_USER_SHORT | wire::AM_USER => match self.keep_am_user(id, data) {
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
            wireup::flush_completion(self, ReqId(comp & !COMP_FLUSH));
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

impl Core {
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
            wire::AM_USER => self.on_am_user(id, data),
            wire::AM_USER_RTS => self.on_am_rts(data),
            wire::AM_RMA_PUT | wire::AM_RMA_GET | wire::AM_RMA_ATOMIC => {
                self.on_rma_request(id, data)
            }
            wire::AM_RMA_REPLY => self.on_rma_reply(data),
            wire::AM_RMA_PUT_ACK => self.on_put_ack(data),
            wire::AM_STREAM => self.on_stream(data),
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
}

/// A transport completion for request `id`.
pub(crate) fn on_completion(core: &mut Core, id: ReqId, status: Status) {
    rndv::unstage(core, id);
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
            // One of its gets (or its bounce's copy into device memory): the last ends it.
            let last = rndv::read_done(r, status);
            if last {
                rndv::finish_get(core, id);
            }
        }
        Some(Op::Flush(_)) => wireup::flush_completion(core, id),
        Some(Op::Rma(_)) => rma::on_completion(core, id, status),
        _ => {}
    }
}
