//! Requests: the handles of operations that did not complete when they were posted (and
//! [`EpHandle`], the handle of an endpoint, which operations and requests name).
//!
//! Requests live in a table of slots with a free list and are named by a [`ReqId`] that
//! carries the slot's generation, so a stale id (the request was freed and the slot reused) is recognised and
//! refused. Once the slab has grown to the working set, posting and completing requests
//! allocates nothing (STYLE.md §9).

use ucs::Status;

use crate::tag::{advance_head, TagInfo};

/// A request handle. Also the 64-bit id sent to peers (`sreq`/`rreq`) and the transport
/// completion token of the request's zero-copy operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReqId(pub u64);

/// An endpoint of a worker (`ucp_ep_h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpHandle(pub u32);

impl EpHandle {
    pub(crate) fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Generations of [`Requests`] and of [`DirectRecvs`] count in 31 bits: the top bit of an
/// id says which table it names. (Transport completion tokens use the same bit for
/// flushes, `worker::COMP_FLUSH`; a direct receive issues no transport operation, so its
/// id is never a token: it becomes a request first.)
const GEN_MASK: u32 = 0x7fff_ffff;
const DIRECT: u64 = 1 << 63;

impl ReqId {
    #[inline]
    fn new(idx: usize, gen: u32) -> ReqId {
        ReqId(u64::from(gen) << 32 | idx as u64)
    }
    /// Whether the id names a [`DirectRecvs`] entry, not a [`Requests`] slot.
    #[inline(always)]
    pub(crate) fn is_direct(self) -> bool {
        self.0 & DIRECT != 0
    }
    #[inline]
    fn idx(self) -> usize {
        (self.0 & 0xffff_ffff) as usize
    }
    #[inline]
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

/// The completions waiting to be taken, first in first out: a vector and the index of the
/// oldest, emptied when all are taken and compacted when the taken ones outnumber the rest.
/// A push is a vector push, built where it lands; `VecDeque::push_back` was a call that
/// copied each completion through the caller's stack (8 % of a receiver's time in a
/// small-message window, 2026-11-27).
#[derive(Debug, Default)]
pub(crate) struct CompletionQueue {
    v: Vec<Completion>,
    head: usize,
}

impl CompletionQueue {
    #[inline(always)]
    pub(crate) fn push_back(&mut self, c: Completion) {
        self.v.push(c);
    }

    #[inline]
    pub(crate) fn pop_front(&mut self) -> Option<Completion> {
        let c = *self.v.get(self.head)?;
        advance_head(&mut self.v, &mut self.head);
        Some(c)
    }

    #[inline(always)]
    pub(crate) fn is_empty(&self) -> bool {
        self.head == self.v.len()
    }

    /// Moves every waiting completion into `out` (empty on entry), oldest first. Usually
    /// the two vectors trade places, so nothing is copied and both keep their capacity.
    #[inline]
    pub(crate) fn take_all(&mut self, out: &mut Vec<Completion>) {
        debug_assert!(out.is_empty());
        if self.head == 0 {
            std::mem::swap(&mut self.v, out);
        } else {
            out.extend_from_slice(&self.v[self.head..]);
            self.v.clear();
            self.head = 0;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.v.len() - self.head
    }
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

/// The table of live requests with operation state `S`: a vector of slots and a free
/// list. Unlike a general slab, freeing drops the request where it lies instead of moving
/// it out (a request is a few hundred bytes, and every completed operation is freed).
#[derive(Debug)]
pub(crate) struct Requests<S> {
    slots: Vec<Slot<S>>,
    free: Vec<u32>,
    gen: u32,
    len: usize,
}

#[derive(Debug)]
struct Slot<S> {
    req: Option<Request<S>>,
}

impl<S> Requests<S> {
    pub(crate) fn new() -> Self {
        Requests {
            slots: Vec::with_capacity(64),
            free: Vec::with_capacity(64),
            gen: 1,
            len: 0,
        }
    }

    #[inline(always)]
    pub(crate) fn insert(&mut self, state: S, user_data: u64, notify: bool) -> ReqId {
        self.insert_with(|| state, user_data, notify)
    }

    /// [`insert`](Self::insert) with the state made by `state` (built straight into the
    /// slot rather than moved there).
    #[inline(always)]
    pub(crate) fn insert_with(
        &mut self,
        state: impl FnOnce() -> S,
        user_data: u64,
        notify: bool,
    ) -> ReqId {
        self.gen = (self.gen.wrapping_add(1) & GEN_MASK).max(1);
        let gen = self.gen;
        let idx = match self.free.pop() {
            Some(i) => i as usize,
            None => {
                self.grow();
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[idx].req;
        let req = move || Request {
            gen,
            state: state(),
            user_data,
            notify,
            released: false,
        };
        // Free slots are empty: the request is written over the empty slot without the
        // drop of what was there (`forget` of a `None`). A write that may drop first (a
        // call) had the request built on the stack and copied over, with a stalled load on
        // every post (2026-11-27).
        debug_assert!(slot.is_none());
        std::mem::forget(slot.replace(req()));
        self.len += 1;
        ReqId::new(idx, gen)
    }

    #[cold]
    fn grow(&mut self) {
        self.slots.push(Slot { req: None });
    }

    #[inline]
    pub(crate) fn get(&self, id: ReqId) -> Option<&Request<S>> {
        self.slots
            .get(id.idx())
            .and_then(|s| s.req.as_ref())
            .filter(|r| r.gen == id.gen())
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, id: ReqId) -> Option<&mut Request<S>> {
        self.slots
            .get_mut(id.idx())
            .and_then(|s| s.req.as_mut())
            .filter(|r| r.gen == id.gen())
    }

    /// Frees request `id`, dropping it in place; whether it was there.
    #[inline]
    pub(crate) fn remove(&mut self, id: ReqId) -> bool {
        match self.slots.get_mut(id.idx()) {
            Some(s) if s.req.as_ref().is_some_and(|r| r.gen == id.gen()) => {
                s.req = None;
                self.free.push(id.idx() as u32);
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    /// [`remove`](Self::remove) for a request whose state `owns_nothing` says has nothing
    /// to drop (a finished operation): the slot is emptied without running the state's drop
    /// glue. Where `owns_nothing` is wrong, the state's resources leak; nothing unsound
    /// happens.
    #[inline]
    pub(crate) fn remove_plain(&mut self, id: ReqId, owns_nothing: impl Fn(&S) -> bool) -> bool {
        match self.slots.get_mut(id.idx()) {
            Some(s) if s.req.as_ref().is_some_and(|r| r.gen == id.gen()) => {
                if s.req.as_ref().is_some_and(|r| owns_nothing(&r.state)) {
                    std::mem::forget(s.req.take());
                } else {
                    s.req = None;
                }
                self.free.push(id.idx() as u32);
                self.len -= 1;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Every live request, for diagnostics.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (ReqId, &Request<S>)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.req.as_ref().map(|r| (ReqId::new(i, r.gen), r)))
    }

    /// Ids of every request whose state satisfies `f` (rare paths: endpoint failure).
    pub(crate) fn ids_where(&self, mut f: impl FnMut(&S) -> bool) -> Vec<ReqId> {
        self.iter()
            .filter(|(_, r)| f(&r.state))
            .map(|(id, _)| id)
            .collect()
    }
}

/// A receive into contiguous host memory whose message had not arrived when it was posted
/// ([`crate::Worker::tag_recv_host`], the C ABI's `ucp_tag_recv_nbx`), kept here rather
/// than in [`Requests`] until a message matches it: posting, a whole eager message and its
/// completion then touch a few words instead of a request slot (docs/c-abi.md,
/// the small-message path). Any other match (fragments, a rendezvous, a message too long for the
/// buffer) first turns it into a request (`Core::materialize`).
#[derive(Debug)]
pub(crate) struct DirectRecv {
    pub(crate) buf: crate::Buf,
    pub(crate) user_data: u64,
    /// Where it waits in the matcher (for `request_cancel`).
    pub(crate) handle: crate::tag::RecvHandle,
    gen: u32,
}

/// The direct receives of a worker, named by ids with the top bit set.
#[derive(Debug, Default)]
pub(crate) struct DirectRecvs {
    slab: slab::Slab<DirectRecv>,
    gen: u32,
}

impl DirectRecvs {
    /// Adds a receive into `buf`; `queue` queues its id in the matcher and returns the
    /// handle.
    #[inline(always)]
    pub(crate) fn insert(
        &mut self,
        buf: crate::Buf,
        user_data: u64,
        queue: impl FnOnce(ReqId) -> crate::tag::RecvHandle,
    ) -> ReqId {
        self.gen = self.gen.wrapping_add(1) & GEN_MASK;
        let gen = self.gen;
        let e = self.slab.vacant_entry();
        let id = ReqId(DIRECT | ReqId::new(e.key(), gen).0);
        let handle = queue(id);
        e.insert(DirectRecv {
            buf,
            user_data,
            handle,
            gen,
        });
        id
    }

    #[inline(always)]
    fn key(&self, id: ReqId) -> Option<usize> {
        let k = id.idx();
        (id.is_direct()
            && self
                .slab
                .get(k)
                .is_some_and(|d| d.gen == id.gen() & GEN_MASK))
        .then_some(k)
    }

    #[inline(always)]
    pub(crate) fn get(&self, id: ReqId) -> Option<&DirectRecv> {
        self.key(id).map(|k| &self.slab[k])
    }

    /// Removes and returns receive `id` (`None` when stale or not direct).
    #[inline(always)]
    pub(crate) fn take(&mut self, id: ReqId) -> Option<DirectRecv> {
        self.key(id).map(|k| self.slab.remove(k))
    }

    pub(crate) fn len(&self) -> usize {
        self.slab.len()
    }
}

#[cfg(test)]
#[allow(unsafe_code)] // tests describe their buffers as user code does
mod tests {
    use super::*;

    fn done(i: u64) -> Completion {
        Completion {
            req: ReqId(i),
            status: Status::Ok,
            info: None,
            user_data: i,
        }
    }

    #[test]
    fn completions_come_out_in_order_and_the_queue_stays_small() {
        let mut q = CompletionQueue::default();
        assert!(q.pop_front().is_none());
        // Interleaved: never empty, so only compaction bounds it.
        let (mut next_in, mut next_out) = (0, 0);
        for _ in 0..10_000 {
            for _ in 0..3 {
                q.push_back(done(next_in));
                next_in += 1;
            }
            for _ in 0..2 {
                assert_eq!(q.pop_front().unwrap().user_data, next_out);
                next_out += 1;
            }
            assert_eq!(q.len() as u64, next_in - next_out);
            assert!(
                q.v.len() <= 2 * q.len() + 64 + 3,
                "{} stored for {}",
                q.v.len(),
                q.len()
            );
        }
        while let Some(c) = q.pop_front() {
            assert_eq!(c.user_data, next_out);
            next_out += 1;
        }
        assert_eq!(next_out, next_in);
        assert!(q.is_empty() && q.v.is_empty());
    }

    #[test]
    fn take_all_keeps_the_order_from_any_head() {
        let mut q = CompletionQueue::default();
        let mut out = Vec::new();
        for i in 0..5 {
            q.push_back(done(i));
        }
        assert_eq!(q.pop_front().unwrap().user_data, 0);
        q.take_all(&mut out);
        assert_eq!(
            out.iter().map(|c| c.user_data).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        assert!(q.is_empty());
        out.clear();
        for i in 5..8 {
            q.push_back(done(i));
        }
        q.take_all(&mut out);
        assert_eq!(
            out.iter().map(|c| c.user_data).collect::<Vec<_>>(),
            [5, 6, 7]
        );
        assert!(q.is_empty() && q.pop_front().is_none());
    }

    #[test]
    fn stale_ids_are_refused() {
        let mut t: Requests<u32> = Requests::new();
        let a = t.insert(1, 0, false);
        assert_eq!(t.get(a).unwrap().state, 1);
        assert!(t.remove(a));
        let b = t.insert(2, 0, false);
        assert_eq!(a.idx(), b.idx(), "slot reused");
        assert!(t.get(a).is_none());
        assert!(!t.remove(a));
        assert_eq!(t.get(b).unwrap().state, 2);
        assert!(t.get(ReqId(u64::MAX)).is_none());
    }

    #[test]
    fn generations_never_reach_the_direct_bit() {
        let mut t: Requests<u32> = Requests::new();
        t.gen = GEN_MASK - 1;
        for _ in 0..4 {
            let id = t.insert(0, 0, false);
            assert!(!id.is_direct(), "{id:?}");
            assert!(t.remove(id));
        }
    }

    #[test]
    fn direct_ids_are_their_own_and_stale_ones_are_refused() {
        let mut d = DirectRecvs::default();
        let mut r: Requests<u32> = Requests::new();
        let mut mem = [0u8; 8];
        // SAFETY: `mem` outlives every use of the Buf in this test.
        let buf = unsafe { crate::Buf::from_raw(mem.as_mut_ptr(), mem.len()) };
        let mut seen = None;
        let a = d.insert(buf, 7, |id| {
            seen = Some(id);
            crate::tag::RecvHandle::for_test(1)
        });
        assert_eq!(
            seen,
            Some(a),
            "the matcher is given the id that is returned"
        );
        assert!(a.is_direct());
        assert_eq!(d.get(a).map(|x| x.user_data), Some(7));
        assert!(r.get(a).is_none(), "a direct id names no request slot");
        let n = r.insert(1, 0, false);
        assert!(d.get(n).is_none(), "a request id names no direct entry");
        assert_eq!(d.take(a).map(|x| x.user_data), Some(7));
        assert!(d.take(a).is_none());
        let b = d.insert(buf, 8, |_| crate::tag::RecvHandle::for_test(2));
        assert_eq!(a.idx(), b.idx(), "slot reused");
        assert!(d.get(a).is_none(), "stale id refused");
        assert_eq!(d.len(), 1);
    }
}
