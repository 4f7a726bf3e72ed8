//! Requests: the handles of operations that did not complete when they were posted.
//!
//! Requests live in a [`slab::Slab`] and are named by a [`ReqId`] that carries the slot's
//! generation, so a stale id (the request was freed and the slot reused) is recognised and
//! refused. Once the slab has grown to the working set, posting and completing requests
//! allocates nothing (STYLE.md §9).

use slab::Slab;
use ucs::Status;

use crate::tag::TagInfo;

/// A request handle. Also the 64-bit id sent to peers (`sreq`/`rreq`) and the transport
/// completion token of the request's zero-copy operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u64);

impl ReqId {
    fn new(idx: usize, gen: u32) -> ReqId {
        ReqId(u64::from(gen) << 32 | idx as u64)
    }
    fn idx(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    fn gen(self) -> u32 {
        (self.0 >> 32) as u32
    }
}

/// A finished operation, as reported by [`crate::Worker::poll_completion`] for requests
/// posted with `notify`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    pub req: ReqId,
    pub status: Status,
    /// For receives: the sender's tag and the message length.
    pub info: Option<TagInfo>,
    pub user_data: u64,
}

/// One request slot.
#[derive(Debug)]
pub(crate) struct Request<S> {
    gen: u32,
    pub(crate) state: S,
    pub(crate) user_data: u64,
    /// Report the completion through the completion queue.
    pub(crate) notify: bool,
    /// The user released the handle: drop the slot when the operation completes.
    pub(crate) released: bool,
}

/// The table of live requests with operation state `S`.
#[derive(Debug)]
pub(crate) struct Requests<S> {
    slab: Slab<Request<S>>,
    gen: u32,
}

impl<S> Requests<S> {
    pub(crate) fn new() -> Self {
        Requests {
            slab: Slab::with_capacity(64),
            gen: 1,
        }
    }

    pub(crate) fn insert(&mut self, state: S, user_data: u64, notify: bool) -> ReqId {
        self.gen = self.gen.wrapping_add(1).max(1);
        let gen = self.gen;
        let idx = self.slab.insert(Request {
            gen,
            state,
            user_data,
            notify,
            released: false,
        });
        ReqId::new(idx, gen)
    }

    pub(crate) fn get(&self, id: ReqId) -> Option<&Request<S>> {
        self.slab.get(id.idx()).filter(|r| r.gen == id.gen())
    }

    pub(crate) fn get_mut(&mut self, id: ReqId) -> Option<&mut Request<S>> {
        self.slab.get_mut(id.idx()).filter(|r| r.gen == id.gen())
    }

    pub(crate) fn remove(&mut self, id: ReqId) -> Option<Request<S>> {
        self.get(id)?;
        Some(self.slab.remove(id.idx()))
    }

    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }

    /// Every live request, for diagnostics.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (ReqId, &Request<S>)> {
        self.slab.iter().map(|(i, r)| (ReqId::new(i, r.gen), r))
    }

    /// Ids of every request whose state satisfies `f` (rare paths: endpoint failure).
    pub(crate) fn ids_where(&self, mut f: impl FnMut(&S) -> bool) -> Vec<ReqId> {
        self.slab
            .iter()
            .filter(|(_, r)| f(&r.state))
            .map(|(i, r)| ReqId::new(i, r.gen))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_ids_are_refused() {
        let mut t: Requests<u32> = Requests::new();
        let a = t.insert(1, 0, false);
        assert_eq!(t.get(a).unwrap().state, 1);
        t.remove(a).unwrap();
        let b = t.insert(2, 0, false);
        assert_eq!(a.idx(), b.idx(), "slot reused");
        assert!(t.get(a).is_none());
        assert!(t.remove(a).is_none());
        assert_eq!(t.get(b).unwrap().state, 2);
        assert!(t.get(ReqId(u64::MAX)).is_none());
    }
}
