//! [`TagMatcher`]: the expected and unexpected queues and the operations on them. The
//! structure is described in the parent module's documentation.

use std::collections::VecDeque;

use slab::Slab;

use super::list::{advance_head, Links, List, NIL};
use super::table::TagTable;
use super::types::{tag_matches, SenderId, Tag, TagInfo, TagMask, TAG_MASK_FULL};

/// A posted receive that has not matched yet; given back by [`TagMatcher::post_recv`] and
/// taken by [`TagMatcher::cancel`]. Stale handles (receive already matched or cancelled)
/// are recognised and refused, never confused with a newer receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RecvHandle {
    key: usize,
    seq: u64,
}

#[cfg(test)]
impl RecvHandle {
    /// A handle that names nothing, for tests of code that only stores handles.
    pub(crate) fn for_test(key: usize) -> Self {
        RecvHandle { key, seq: 0 }
    }
}

/// The unexpected queue's capacity kept once it empties; more is released.
pub(super) const UNEXP_KEEP: usize = 1024;

/// A message taken out of the unexpected queue by [`TagMatcher::probe`] with `remove`,
/// waiting for [`TagMatcher::msg_recv`] (`ucp_tag_message_h`). A handle that was already
/// consumed is refused by `msg_recv`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MessageHandle {
    key: usize,
    seq: u64,
}

/// A message paired with a receive: the caller now delivers `msg` into the receive `user`
/// (checking the length with [`super::check_length`]) and completes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Match<T, R> {
    /// The message's tag, length and sender.
    pub info: TagInfo,
    /// The message descriptor given to [`TagMatcher::arrive`].
    pub msg: T,
    /// The receive's user data given to [`TagMatcher::post_recv`] or
    /// [`TagMatcher::msg_recv`].
    pub user: R,
}

/// The outcome of [`TagMatcher::post_recv`]. Dropping it would lose a matched message or
/// the only handle that can cancel the receive.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PostResult<T, R> {
    /// The oldest matching unexpected message was taken; nothing was queued.
    Matched(Match<T, R>),
    /// No unexpected message matched; the receive is queued as expected.
    Queued(RecvHandle),
}

/// The outcome of [`TagMatcher::arrive`]. Dropping a match would lose both the message
/// and the receive.
#[must_use]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArriveResult<T, R> {
    /// The oldest matching posted receive was taken.
    Matched(Match<T, R>),
    /// No posted receive matched; the message is stored as unexpected.
    Unexpected,
}

/// The outcome of a successful [`TagMatcher::probe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeResult {
    /// The oldest matching unexpected message's tag, length and sender.
    pub info: TagInfo,
    /// With `remove`, the handle to pass to [`TagMatcher::msg_recv`]; without, `None`
    /// (the message stays in the unexpected queue).
    pub message: Option<MessageHandle>,
}

#[derive(Debug)]
struct Expected<R> {
    tag: Tag,
    mask: TagMask,
    seq: u64,
    /// On its tag's bucket when `mask == TAG_MASK_FULL`, else on the wildcard list.
    links: Links,
    user: R,
}

/// A receive of the run (see [`TagMatcher`]'s `run`): posted while nothing waited in the
/// slab, held in post order outside it.
#[derive(Debug)]
struct Lone<R> {
    tag: Tag,
    mask: TagMask,
    seq: u64,
    user: R,
}

/// The run's receives in post order: a vector and the index of the oldest, emptied when
/// the last is taken (a deque's push was a call, 27 instructions per receive in a window,
/// 2026-11-27).
#[derive(Debug)]
struct Run<R> {
    v: Vec<Option<Lone<R>>>,
    head: usize,
}

impl<R> Run<R> {
    #[inline(always)]
    fn front(&self) -> Option<&Lone<R>> {
        self.v.get(self.head).and_then(Option::as_ref)
    }

    #[inline(always)]
    fn push_back(&mut self, l: Lone<R>) {
        self.v.push(Some(l));
    }

    #[inline(always)]
    fn pop_front(&mut self) -> Option<Lone<R>> {
        let l = self.v.get_mut(self.head)?.take();
        // A run that never empties (receives reposted as they match) keeps its size.
        advance_head(&mut self.v, &mut self.head);
        l
    }

    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.v.capacity()
    }

    fn len(&self) -> usize {
        self.v.len() - self.head
    }

    #[cfg(test)]
    fn iter(&self) -> impl Iterator<Item = &Lone<R>> {
        self.v[self.head..].iter().flatten()
    }

    /// Takes the receive posted as number `seq`, if it is here.
    fn remove_seq(&mut self, seq: u64) -> Option<Lone<R>> {
        let live = &self.v[self.head..];
        let i = live
            .binary_search_by_key(&seq, |l| l.as_ref().map_or(0, |l| l.seq))
            .ok()?;
        let l = self.v.remove(self.head + i);
        if self.head == self.v.len() {
            self.v.clear();
            self.head = 0;
        }
        l
    }
}

/// The `RecvHandle::key` of a receive posted into the run (wherever it lives now).
const LONE: usize = NIL;

#[derive(Debug)]
struct Unexpected<T> {
    info: TagInfo,
    seq: u64,
    /// On `unexp_hash[info.sender_tag]`.
    bucket: Links,
    /// On `unexp_all`.
    all: Links,
    msg: T,
}

/// A message held outside the unexpected lists: in the unexpected run, or taken by
/// `probe(remove)` and waiting for `msg_recv`.
#[derive(Debug)]
struct Probed<T> {
    info: TagInfo,
    seq: u64,
    msg: T,
}

fn exp_links<R>(e: &mut Expected<R>) -> &mut Links {
    &mut e.links
}

fn unexp_bucket<T>(e: &mut Unexpected<T>) -> &mut Links {
    &mut e.bucket
}

fn unexp_all<T>(e: &mut Unexpected<T>) -> &mut Links {
    &mut e.all
}

/// The tag-matching state of one worker: posted receives of type `R` and unexpected
/// message descriptors of type `T`.
#[derive(Debug)]
pub struct TagMatcher<T, R> {
    /// Receives posted while `exp` was empty, in post order: the first with any mask and
    /// more of its tag and mask behind it. While any is here `exp`
    /// is empty, so an arriving message compares its tag with the first alone, and a
    /// window of receives for one peer's tag is queued and matched without the slab, the
    /// lists or the table. A receive that does not fit moves them all into `exp` first.
    run: Run<R>,
    /// Where receives of the run went when they moved into `exp`: (seq, slab key), in seq
    /// order, for `cancel` (their handles name them by `LONE` and seq). Emptied whenever
    /// `exp` is empty, when none of them can be waiting any more.
    moved: Vec<(u64, usize)>,
    exp: Slab<Expected<R>>,
    /// Full-mask receives, per tag, in post order. Never holds an empty list.
    exp_hash: TagTable,
    /// Receives with any other mask, in post order.
    exp_wild: List,
    exp_seq: u64,

    /// Unexpected messages of one tag that arrived while `unexp` was empty, in arrival
    /// order: the unexpected side's run. While any is here `unexp` is empty, so a receive
    /// compares its tag with the first alone, and one peer's stream that runs ahead of its
    /// receives (a quarter of the messages of a bidirectional window, about half of
    /// `MPI_Sendrecv`'s) is stored and taken without the slab, the lists or the table
    /// (callgrind, 2026-11-27). A message of another tag moves them all into
    /// `unexp` first.
    urun: VecDeque<Probed<T>>,
    unexp: Slab<Unexpected<T>>,
    /// Unexpected messages per tag, in arrival order. Never holds an empty list.
    unexp_hash: TagTable,
    /// All unexpected messages in arrival order.
    unexp_all: List,
    unexp_seq: u64,

    /// Messages taken by `probe(remove)`, waiting for `msg_recv`.
    probed: Slab<Probed<T>>,

    /// List entries looked at by scans; lets tests assert the absence of quadratic work.
    #[cfg(test)]
    pub(super) scan_steps: u64,
}

impl<T, R> Default for TagMatcher<T, R> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, R> TagMatcher<T, R> {
    /// An empty matcher.
    pub fn new() -> Self {
        Self::with_capacity(0, 0)
    }

    /// An empty matcher with room for `expected` posted receives and `unexpected`
    /// messages before it allocates.
    pub fn with_capacity(expected: usize, unexpected: usize) -> Self {
        TagMatcher {
            run: Run {
                v: Vec::new(),
                head: 0,
            },
            moved: Vec::new(),
            exp: Slab::with_capacity(expected),
            exp_hash: TagTable::with_capacity(expected),
            exp_wild: List::EMPTY,
            exp_seq: 0,
            urun: VecDeque::new(),
            unexp: Slab::with_capacity(unexpected),
            unexp_hash: TagTable::with_capacity(unexpected),
            unexp_all: List::EMPTY,
            unexp_seq: 0,
            probed: Slab::new(),
            #[cfg(test)]
            scan_steps: 0,
        }
    }

    /// Number of posted receives waiting for a message.
    pub fn expected_len(&self) -> usize {
        self.exp.len() + self.run.len()
    }

    /// Number of unexpected messages waiting for a receive (not counting probed ones).
    pub fn unexpected_len(&self) -> usize {
        self.unexp.len() + self.urun.len()
    }

    /// Number of messages taken by `probe(remove)` and not yet passed to `msg_recv`.
    pub fn probed_len(&self) -> usize {
        self.probed.len()
    }

    /// Posts a receive for `(tag, tag_mask)` (`ucp_tag_recv_nbx`). If an unexpected
    /// message matches, the oldest such is taken and returned with `user`; otherwise the
    /// receive is queued and its handle returned.
    pub fn post_recv(&mut self, tag: Tag, tag_mask: TagMask, user: R) -> PostResult<T, R> {
        if let Some(e) = self.take_unexp_matching(tag, tag_mask) {
            return PostResult::Matched(Match {
                info: e.info,
                msg: e.msg,
                user,
            });
        }
        PostResult::Queued(self.queue_recv(tag, tag_mask, user))
    }

    /// Takes the oldest unexpected message matching `(tag, tag_mask)`, if any: the first
    /// half of [`post_recv`](Self::post_recv), for a caller that delivers a message here
    /// without naming a receive first. When it returns `None`, the caller queues the
    /// receive with [`queue_recv`](Self::queue_recv).
    #[inline]
    pub fn take_matching(&mut self, tag: Tag, tag_mask: TagMask) -> Option<(TagInfo, T)> {
        self.take_unexp_matching(tag, tag_mask)
            .map(|e| (e.info, e.msg))
    }

    /// Whether no unexpected message waits: a receive posted now is queued
    /// ([`queue_recv`](Self::queue_recv)).
    #[inline(always)]
    pub fn no_unexpected(&self) -> bool {
        self.unexp.is_empty() && self.urun.is_empty()
    }

    /// Takes the oldest unexpected message matching `(tag, tag_mask)`: the run's first
    /// (all of the run share its tag, and nothing else waits beside it), else from the
    /// slab.
    #[inline]
    fn take_unexp_matching(&mut self, tag: Tag, tag_mask: TagMask) -> Option<Probed<T>> {
        if let Some(f) = self.urun.front() {
            if !tag_matches(f.info.sender_tag, tag, tag_mask) {
                return None;
            }
            let e = self.urun.pop_front();
            if self.urun.is_empty() && self.urun.capacity() > UNEXP_KEEP {
                // As for the slab: a burst is over.
                self.urun = VecDeque::new();
            }
            return e;
        }
        if self.unexp.is_empty() {
            return None;
        }
        let key = self.find_unexpected(tag, tag_mask)?;
        let e = self.take_unexpected(key);
        Some(Probed {
            info: e.info,
            seq: e.seq,
            msg: e.msg,
        })
    }

    /// Moves the unexpected run into the slab and its lists (its messages are older than
    /// anything that arrives after).
    fn unrun_unexpected(&mut self) {
        while let Some(p) = self.urun.pop_front() {
            self.store_unexpected(p.info, p.seq, p.msg);
        }
        if self.urun.capacity() > UNEXP_KEEP {
            self.urun = VecDeque::new();
        }
    }

    fn store_unexpected(&mut self, info: TagInfo, seq: u64, msg: T) {
        let tag = info.sender_tag;
        let key = self.unexp.insert(Unexpected {
            info,
            seq,
            bucket: Links::UNLINKED,
            all: Links::UNLINKED,
            msg,
        });
        self.unexp_hash
            .push_back(tag, &mut self.unexp, key, unexp_bucket);
        self.unexp_all.push_back(&mut self.unexp, key, unexp_all);
    }

    /// Queues a receive as expected, without looking for an unexpected message (the caller
    /// saw [`no_unexpected`](Self::no_unexpected)). The handle comes back in registers,
    /// where [`PostResult`] comes back through memory. Joining the run is inlined into the
    /// caller; the rest is a call.
    #[inline(always)]
    pub fn queue_recv(&mut self, tag: Tag, tag_mask: TagMask, user: R) -> RecvHandle {
        let seq = self.exp_seq;
        self.exp_seq += 1;
        if self.exp.is_empty() {
            let fits = match self.run.front() {
                None => {
                    // Nothing moved out of a run can still be waiting.
                    self.moved.clear();
                    true
                }
                // Receives of one tag and mask: a message that does not match the first
                // matches none of them. MPICH's masks are not full (they leave out its
                // error bits), so its windows of receives for one peer are runs too.
                Some(f) => f.mask == tag_mask && f.tag == tag,
            };
            if fits {
                self.run.push_back(Lone {
                    tag,
                    mask: tag_mask,
                    seq,
                    user,
                });
                return RecvHandle { key: LONE, seq };
            }
        }
        self.queue_beside(tag, tag_mask, seq, user)
    }

    /// [`queue_recv`](Self::queue_recv) of a receive that does not join the run: into the
    /// slab and its list, behind the run if there is one.
    #[inline(never)]
    fn queue_beside(&mut self, tag: Tag, tag_mask: TagMask, seq: u64, user: R) -> RecvHandle {
        if self.exp.is_empty() {
            self.unrun();
        }
        let key = self.queue_expected(tag, tag_mask, seq, user);
        RecvHandle { key, seq }
    }

    /// Moves the run into the slab and its lists, ahead of a receive that does not fit it.
    fn unrun(&mut self) {
        while let Some(l) = self.run.pop_front() {
            let key = self.queue_expected(l.tag, l.mask, l.seq, l.user);
            self.moved.push((l.seq, key));
        }
    }

    /// Adds a receive (posted as number `seq`) behind the others of its list.
    fn queue_expected(&mut self, tag: Tag, mask: TagMask, seq: u64, user: R) -> usize {
        let key = self.exp.insert(Expected {
            tag,
            mask,
            seq,
            links: Links::UNLINKED,
            user,
        });
        if mask == TAG_MASK_FULL {
            self.exp_hash.push_back(tag, &mut self.exp, key, exp_links);
        } else {
            self.exp_wild.push_back(&mut self.exp, key, exp_links);
        }
        key
    }

    /// A message from `sender` with tag `tag` and total length `length` has arrived (its
    /// first fragment, or its rendezvous request). If a posted receive matches, the oldest
    /// such is taken and returned with `msg`; otherwise `msg` is stored as unexpected.
    pub fn arrive(
        &mut self,
        sender: SenderId,
        tag: Tag,
        length: usize,
        msg: T,
    ) -> ArriveResult<T, R> {
        let info = TagInfo {
            sender_tag: tag,
            length,
            sender,
        };
        if let Some(user) = self.match_expected(tag) {
            return ArriveResult::Matched(Match { info, msg, user });
        }

        let seq = self.unexp_seq;
        self.unexp_seq += 1;
        if self.unexp.is_empty() {
            match self.urun.front() {
                Some(f) if f.info.sender_tag != tag => self.unrun_unexpected(),
                _ => {
                    self.urun.push_back(Probed { info, seq, msg });
                    return ArriveResult::Unexpected;
                }
            }
        }
        self.store_unexpected(info, seq, msg);
        ArriveResult::Unexpected
    }

    /// The first half of [`arrive`](Self::arrive), for a caller that can deliver an
    /// expected message straight from the transport's buffer: takes and returns the oldest
    /// posted receive matching `tag`. When it returns `None`, the caller stores the message
    /// with `arrive`, which then finds no expected match either (nothing changed between).
    #[inline(always)]
    pub fn match_expected(&mut self, tag: Tag) -> Option<R> {
        // The commonest cases: the one receive posted, alone, or a run of one tag's.
        if let Some(l) = self.run.front() {
            if tag_matches(tag, l.tag, l.mask) {
                return self.run.pop_front().map(|l| l.user);
            }
            return None;
        }
        // Next: no wildcard receives, and the tag's bucket found once.
        if self.exp_wild.is_empty() {
            let slot = self.exp_hash.slot_of(tag)?;
            let key = self.exp_hash.pop_front_at(slot, &mut self.exp, exp_links);
            return Some(self.exp.remove(key).user);
        }
        let key = self.find_expected(tag)?;
        Some(self.take_expected(key).user)
    }

    /// The oldest unexpected message matching `(tag, tag_mask)`, left in place.
    pub fn peek(&mut self, tag: Tag, tag_mask: TagMask) -> Option<&T> {
        if !self.urun.is_empty() {
            let f = self.urun.front()?;
            return tag_matches(f.info.sender_tag, tag, tag_mask).then_some(&f.msg);
        }
        let key = self.find_unexpected(tag, tag_mask)?;
        Some(&self.unexp[key].msg)
    }

    /// Looks for the oldest unexpected message matching `(tag, tag_mask)`
    /// (`ucp_tag_probe_nb`). Without `remove` the message stays queued; with `remove` it
    /// leaves the unexpected queue and the result carries the handle for
    /// [`msg_recv`](Self::msg_recv).
    pub fn probe(&mut self, tag: Tag, tag_mask: TagMask, remove: bool) -> Option<ProbeResult> {
        if !remove {
            let info = match self.urun.front() {
                Some(f) => tag_matches(f.info.sender_tag, tag, tag_mask).then_some(f.info)?,
                None => {
                    let key = self.find_unexpected(tag, tag_mask)?;
                    self.unexp[key].info
                }
            };
            return Some(ProbeResult {
                info,
                message: None,
            });
        }
        let e = self.take_unexp_matching(tag, tag_mask)?;
        let info = e.info;
        let seq = e.seq;
        let pkey = self.probed.insert(Probed {
            info,
            seq,
            msg: e.msg,
        });
        Some(ProbeResult {
            info,
            message: Some(MessageHandle { key: pkey, seq }),
        })
    }

    /// Receives a message taken by `probe(remove)` (`ucp_tag_msg_recv_nbx`). A handle that
    /// was already consumed (or comes from another matcher) is refused and `user` given
    /// back.
    pub fn msg_recv(&mut self, message: MessageHandle, user: R) -> Result<Match<T, R>, R> {
        match self.probed.get(message.key) {
            Some(p) if p.seq == message.seq => {
                let p = self.probed.remove(message.key);
                Ok(Match {
                    info: p.info,
                    msg: p.msg,
                    user,
                })
            }
            _ => Err(user),
        }
    }

    /// Cancels a posted receive that has not matched yet (`ucp_request_cancel`), giving its
    /// user data back. `None` when it already matched or was cancelled.
    pub fn cancel(&mut self, recv: RecvHandle) -> Option<R> {
        let mut key = recv.key;
        if key == LONE {
            if let Some(l) = self.run.remove_seq(recv.seq) {
                return Some(l.user);
            }
            // Moved since (or matched: then it is in neither place, or the seq below does
            // not agree).
            let Ok(i) = self.moved.binary_search_by_key(&recv.seq, |m| m.0) else {
                return None;
            };
            key = self.moved[i].1;
        }
        match self.exp.get(key) {
            Some(e) if e.seq == recv.seq => Some(self.take_expected(key).user),
            _ => None,
        }
    }

    /// Removes every unexpected message from `sender` (for example when its endpoint is
    /// closed or failed), oldest first, handing each to `f`. Probed messages belong to the
    /// application and are left alone.
    pub fn drain_sender(&mut self, sender: SenderId, f: impl FnMut(TagInfo, T)) {
        self.drain_sender_if(sender, |_| true, f);
    }

    /// [`drain_sender`](Self::drain_sender) of the messages `remove` picks; `remove` may
    /// also change the messages it leaves.
    pub fn drain_sender_if(
        &mut self,
        sender: SenderId,
        mut remove: impl FnMut(&mut T) -> bool,
        mut f: impl FnMut(TagInfo, T),
    ) {
        if !self.urun.is_empty() {
            self.unrun_unexpected();
        }
        let mut key = self.unexp_all.head;
        while key != NIL {
            let e = &mut self.unexp[key];
            let next = e.all.next;
            if e.info.sender == sender && remove(&mut e.msg) {
                let e = self.take_unexpected(key);
                f(e.info, e.msg);
            }
            key = next;
        }
    }

    /// The key of the oldest unexpected message matching `(tag, tag_mask)`.
    fn find_unexpected(&mut self, tag: Tag, tag_mask: TagMask) -> Option<usize> {
        if tag_mask == TAG_MASK_FULL {
            return self.unexp_hash.get(tag).map(|l| l.head);
        }
        let mut key = self.unexp_all.head;
        while key != NIL {
            #[cfg(test)]
            {
                self.scan_steps += 1;
            }
            let e = &self.unexp[key];
            if tag_matches(e.info.sender_tag, tag, tag_mask) {
                return Some(key);
            }
            key = e.all.next;
        }
        None
    }

    /// The key of the oldest posted receive matching a message tagged `tag`: the head of
    /// the tag's bucket or the first matching wildcard, whichever was posted first.
    fn find_expected(&mut self, tag: Tag) -> Option<usize> {
        let exact = self
            .exp_hash
            .get(tag)
            .map(|l| (l.head, self.exp[l.head].seq));
        let limit = exact.map_or(u64::MAX, |(_, seq)| seq);
        let mut key = self.exp_wild.head;
        while key != NIL {
            #[cfg(test)]
            {
                self.scan_steps += 1;
            }
            let e = &self.exp[key];
            if e.seq > limit {
                // This and all later wildcards were posted after the exact receive.
                break;
            }
            if tag_matches(tag, e.tag, e.mask) {
                return Some(key);
            }
            key = e.links.next;
        }
        exact.map(|(key, _)| key)
    }

    fn take_expected(&mut self, key: usize) -> Expected<R> {
        let (tag, mask) = (self.exp[key].tag, self.exp[key].mask);
        if mask == TAG_MASK_FULL {
            self.exp_hash.unlink(tag, &mut self.exp, key, exp_links);
        } else {
            self.exp_wild.unlink(&mut self.exp, key, exp_links);
        }
        self.exp.remove(key)
    }

    fn take_unexpected(&mut self, key: usize) -> Unexpected<T> {
        let tag = self.unexp[key].info.sender_tag;
        self.unexp_hash
            .unlink(tag, &mut self.unexp, key, unexp_bucket);
        self.unexp_all.unlink(&mut self.unexp, key, unexp_all);
        let m = self.unexp.remove(key);
        if self.unexp.is_empty() && self.unexp.capacity() > UNEXP_KEEP {
            // A burst is over: give its memory back rather than keep the high-water mark
            // for the rest of the run (a sender with no flow control can make it large).
            self.unexp = Slab::with_capacity(UNEXP_KEEP);
            self.unexp_hash = TagTable::with_capacity(UNEXP_KEEP);
        }
        m
    }
}

#[cfg(test)]
impl<T, R> TagMatcher<T, R> {
    /// Storage capacities (slabs and tag tables): unchanged capacities across a phase mean
    /// that phase did not allocate in the matcher.
    pub(super) fn capacities(&self) -> [usize; 6] {
        [
            self.exp.capacity(),
            self.exp_hash.capacity(),
            self.unexp.capacity(),
            self.unexp_hash.capacity(),
            self.probed.capacity(),
            self.urun.capacity(),
        ]
    }

    /// Slots held by the run.
    pub(super) fn run_capacity(&self) -> usize {
        self.run.capacity()
    }

    /// Checks every structural invariant; panics with a description on the first broken one.
    pub(super) fn check_invariants(&self) {
        if let Some(f) = self.urun.front() {
            assert!(self.unexp.is_empty(), "an unexpected run beside the slab");
            let mut prev = None;
            for p in &self.urun {
                assert_eq!(p.info.sender_tag, f.info.sender_tag, "two tags in the run");
                assert!(
                    p.seq < self.unexp_seq,
                    "unexpected run message from the future"
                );
                assert!(
                    prev.is_none_or(|q| q < p.seq),
                    "unexpected run out of order"
                );
                prev = Some(p.seq);
            }
        }
        if let Some(f) = self.run.front() {
            assert!(self.exp.is_empty(), "a run beside queued receives");
            assert_eq!(self.run.iter().count(), self.run.len(), "a hole in the run");
            let run: Vec<&Lone<R>> = self.run.iter().collect();
            for (i, l) in run.iter().enumerate() {
                assert!(l.seq < self.exp_seq, "run receive from the future");
                if i > 0 {
                    assert!(l.seq > run[i - 1].seq, "run out of order");
                    assert!(
                        l.mask == f.mask && l.tag == f.tag,
                        "a run of more than one receive holds only its first's tag and mask"
                    );
                }
            }
        }
        for w in self.moved.windows(2) {
            assert!(w[0].0 < w[1].0, "moved receives out of order");
        }
        // Expected: every entry is on exactly the list its mask says, lists are in
        // ascending seq order and doubly linked consistently.
        let mut seen = 0;
        for (tag, list) in self.exp_hash.iter() {
            assert!(!list.is_empty(), "empty expected bucket for tag {tag:#x}");
            let keys = walk(list, |k| self.exp[k].links);
            for w in keys.windows(2) {
                assert!(
                    self.exp[w[0]].seq < self.exp[w[1]].seq,
                    "expected bucket out of order"
                );
            }
            for &k in &keys {
                assert_eq!(self.exp[k].tag, tag);
                assert_eq!(self.exp[k].mask, TAG_MASK_FULL);
            }
            seen += keys.len();
        }
        assert_eq!(self.exp_hash.iter().count(), self.exp_hash.len());
        let wild = walk(&self.exp_wild, |k| self.exp[k].links);
        for w in wild.windows(2) {
            assert!(
                self.exp[w[0]].seq < self.exp[w[1]].seq,
                "wildcard list out of order"
            );
        }
        for &k in &wild {
            assert_ne!(self.exp[k].mask, TAG_MASK_FULL);
        }
        seen += wild.len();
        assert_eq!(
            seen,
            self.exp.len(),
            "expected entries not on exactly one list"
        );

        // Unexpected: the global list holds every entry in seq order; buckets partition it.
        let all = walk(&self.unexp_all, |k| self.unexp[k].all);
        assert_eq!(
            all.len(),
            self.unexp.len(),
            "unexpected entries missing from global list"
        );
        for w in all.windows(2) {
            assert!(
                self.unexp[w[0]].seq < self.unexp[w[1]].seq,
                "unexpected list out of order"
            );
        }
        let mut seen = 0;
        for (tag, list) in self.unexp_hash.iter() {
            assert!(!list.is_empty(), "empty unexpected bucket for tag {tag:#x}");
            let keys = walk(list, |k| self.unexp[k].bucket);
            for w in keys.windows(2) {
                assert!(
                    self.unexp[w[0]].seq < self.unexp[w[1]].seq,
                    "unexpected bucket out of order"
                );
            }
            for &k in &keys {
                assert_eq!(self.unexp[k].info.sender_tag, tag);
            }
            seen += keys.len();
        }
        assert_eq!(
            seen,
            self.unexp.len(),
            "unexpected entries not on exactly one bucket"
        );
        assert_eq!(self.unexp_hash.iter().count(), self.unexp_hash.len());
    }
}

/// The keys of `list` head to tail, checking the back links on the way.
#[cfg(test)]
fn walk(list: &List, links: impl Fn(usize) -> Links) -> Vec<usize> {
    let mut keys = Vec::new();
    let mut prev = NIL;
    let mut key = list.head;
    while key != NIL {
        let l = links(key);
        assert_eq!(l.prev, prev, "broken back link");
        keys.push(key);
        prev = key;
        key = l.next;
    }
    assert_eq!(list.tail, prev, "broken tail");
    keys
}
