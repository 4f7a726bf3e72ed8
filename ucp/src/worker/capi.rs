//! Hooks for the C ABI (`bindings-c`), which posts operations without `notify` (so that
//! an operation finishing at once costs no completion event) and subscribes only those
//! still running to the completion queue.

use ucs::Status;

use super::op::Op;
use super::state::Worker;
use crate::request::ReqId;
use crate::tag::TagInfo;

impl Worker {
    /// Asks for request `id`'s completion to be reported by [`Worker::poll_completion`]
    /// with `user_data`. Returns `InProgress` when subscribed; the final status when the
    /// request has already finished (then nothing will be reported, and the caller frees
    /// it); `InvalidParam` for an unknown or stale id.
    pub fn request_subscribe(&mut self, id: ReqId, user_data: u64) -> Status {
        match self.core.reqs.get_mut(id) {
            Some(r) => match r.state {
                Op::Done { status, .. } => status,
                _ => {
                    r.notify = true;
                    r.user_data = user_data;
                    Status::InProgress
                }
            },
            None => Status::InvalidParam,
        }
    }

    /// [`request_subscribe`](Self::request_subscribe) in one step with what the caller
    /// does when the request finished already: then its status and info, and the request
    /// is freed. `Err((InvalidParam, None))` for an unknown id.
    #[inline]
    pub fn subscribe_or_take(
        &mut self,
        id: ReqId,
        user_data: u64,
    ) -> Result<(), (Status, Option<TagInfo>)> {
        let done = match self.core.reqs.get_mut(id) {
            Some(r) => match r.state {
                Op::Done { status, info } => (status, info),
                _ => {
                    r.notify = true;
                    r.user_data = user_data;
                    return Ok(());
                }
            },
            None => return Err((Status::InvalidParam, None)),
        };
        self.core
            .reqs
            .remove_plain(id, |s| matches!(s, Op::Done { .. }));
        Err(done)
    }
}
