//! The request API (`ucp_request_check_status`, `ucp_request_test`, `ucp_request_free`,
//! `ucp_request_cancel`) and the queues of completions and endpoint failures a caller
//! polls: over the engine's request table, with no progress of its own (waiting, which
//! progresses, is the driver's: `Worker::wait`).

use ucs::Status;

use super::op::Op;
use super::state::Worker;
use crate::request::{Completion, EpHandle, ReqId};
use crate::tag::TagInfo;

impl Worker {
    /// Takes the next completion of a request posted with `notify`.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.core.completions.pop_front()
    }

    /// [`poll_completion`](Self::poll_completion) and [`request_free`](Self::request_free)
    /// of the completed request in one step, for a caller that reports each completion once
    /// and never asks about the request again.
    #[inline(always)]
    pub fn take_completion(&mut self) -> Option<Completion> {
        let c = self.core.completions.pop_front()?;
        // A finished request holds a status and a tag: nothing to drop. (A direct
        // receive left its table when it matched.)
        if !c.req.is_direct() {
            self.core
                .reqs
                .remove_plain(c.req, |s| matches!(s, Op::Done { .. }));
        }
        Some(c)
    }

    /// [`take_completion`](Self::take_completion) of every waiting completion, into `out`
    /// (empty on entry; it and the worker's queue trade buffers, so a caller that keeps
    /// handing the same vector back allocates nothing once both have grown).
    #[inline]
    pub fn take_completions(&mut self, out: &mut Vec<Completion>) {
        self.core.completions.take_all(out);
        for c in out.iter() {
            if !c.req.is_direct() {
                self.core
                    .reqs
                    .remove_plain(c.req, |s| matches!(s, Op::Done { .. }));
            }
        }
    }

    /// Whether a completion waits to be taken.
    #[inline]
    pub fn has_completions(&self) -> bool {
        !self.core.completions.is_empty()
    }

    /// Takes the next endpoint failure (each failed endpoint is reported once).
    pub fn poll_ep_error(&mut self) -> Option<(EpHandle, Status)> {
        self.core.ep_errors.pop_front()
    }

    /// The status of a request: `InProgress` while it runs, then its final status
    /// (`ucp_request_check_status`). A stale or unknown id gives `InvalidParam`.
    pub fn request_status(&self, id: ReqId) -> Status {
        match self.core.reqs.get(id).map(|r| &r.state) {
            Some(Op::Done { status, .. }) => *status,
            Some(_) => Status::InProgress,
            None => Status::InvalidParam,
        }
    }

    /// For a completed receive: the sender's tag and the message length
    /// (`ucp_tag_recv_request_test`).
    pub fn request_info(&self, id: ReqId) -> Option<TagInfo> {
        match self.core.reqs.get(id).map(|r| &r.state) {
            Some(Op::Done { info, .. }) => *info,
            _ => None,
        }
    }

    /// Releases a request handle (`ucp_request_free`): a finished request's slot is freed
    /// now, a running one's when it finishes (its completion is then not reported).
    pub fn request_free(&mut self, id: ReqId) {
        let done = match self.core.reqs.get_mut(id) {
            Some(r) => {
                r.released = true;
                r.notify = false;
                matches!(r.state, Op::Done { .. })
            }
            None => false,
        };
        if done {
            self.core.reqs.remove(id);
        }
    }

    /// `request_status`, `request_info` and `request_free` in one call, for a caller that
    /// polls a request it will free once done: `None` while the request runs; once it has
    /// finished, its status and (for receives) info, and the request is freed. A stale or
    /// unknown id gives `InvalidParam`.
    #[inline]
    pub fn request_test(&mut self, id: ReqId) -> Option<(Status, Option<TagInfo>)> {
        let done = match self.core.reqs.get(id).map(|r| &r.state) {
            Some(Op::Done { status, info }) => (*status, *info),
            Some(_) => return None,
            None => return Some((Status::InvalidParam, None)),
        };
        // A finished request holds a status and a tag: nothing to drop.
        self.core
            .reqs
            .remove_plain(id, |s| matches!(s, Op::Done { .. }));
        Some(done)
    }

    /// Cancels a receive that has not matched yet (`ucp_request_cancel`): it completes with
    /// `Canceled`. Anything else is left to finish.
    pub fn request_cancel(&mut self, id: ReqId) {
        let core = &mut self.core;
        if id.is_direct() {
            let h = core.direct.get(id).map(|d| d.handle);
            if h.is_some_and(|h| core.matcher.cancel(h).is_some()) {
                if let Some(d) = core.direct.take(id) {
                    core.completions.push_back(Completion {
                        req: id,
                        status: Status::Canceled,
                        info: None,
                        user_data: d.user_data,
                    });
                }
            }
            return;
        }
        core.cancel_unmatched(id, Status::Canceled);
    }

    /// Binds receive `req` to `ep`: if the endpoint fails before the receive matched, the
    /// receive ends with the endpoint's error (a tagged receive is otherwise not tied to
    /// any endpoint and would wait for ever).
    pub fn bind_recv(&mut self, ep: EpHandle, req: ReqId) {
        let core = &mut self.core;
        if let Some(s) = core.eps.get(ep.idx()).and_then(|e| e.failed) {
            core.cancel_unmatched(req, s);
            return;
        }
        // Drop bindings of receives that finished, now and then, so the list stays short.
        if core.bound_recvs.len() >= 64 && core.bound_recvs.len().is_power_of_two() {
            let reqs = &core.reqs;
            core.bound_recvs
                .retain(|(_, id)| matches!(reqs.get(*id).map(|r| &r.state), Some(Op::Recv(_))));
        }
        core.bound_recvs.push((ep.idx(), req));
    }

    /// Whether request `id` has finished (done, or done and freed already).
    pub(crate) fn request_finished(&self, id: ReqId) -> bool {
        match self.core.reqs.get(id) {
            Some(r) => matches!(r.state, Op::Done { .. }),
            None => true,
        }
    }

    /// Undoes [`bind_recv`](Self::bind_recv) of receive `req`.
    pub(crate) fn unbind_recv(&mut self, req: ReqId) {
        self.core.bound_recvs.retain(|(_, id)| *id != req);
    }
}
