//! Hooks for the C ABI (`bindings-c`), which posts operations without `notify` (so that
//! an operation finishing at once costs no completion event) and subscribes only those
//! still running to the completion queue.

use ucs::Status;

use super::{Op, Worker};
use crate::request::ReqId;

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
}
