//! Tag matching with UCX semantics: the state behind `ucp_tag_recv_nbx`, `ucp_tag_probe_nb`,
//! `ucp_tag_msg_recv_nbx` and `ucp_request_cancel` for receives.
//!
//! This is pure protocol state (STYLE.md §4): it does no I/O, reads no clock and moves no
//! data. The protocol layer feeds it posted receives and arrived message descriptors and it
//! answers with matching decisions. What a "message" is — an eager buffer, the first
//! fragment of a multi-fragment eager message, a rendezvous RTS — is the caller's business:
//! the matcher stores an opaque `T` for it. Likewise a posted receive is an opaque `R`
//! (typically a request handle). Delivering data, and deciding truncation with
//! [`check_length`], are the caller's job once a [`Match`] comes back.
//!
//! # Semantics
//!
//! * Tags are 64 bits. A receive posted with `(tag, tag_mask)` matches a message tagged
//!   `msg_tag` when `(msg_tag ^ tag) & tag_mask == 0` ([`tag_matches`]); a zero mask is a
//!   full wildcard, [`TAG_MASK_FULL`] an exact match.
//! * An arriving message matches the **oldest** posted receive that matches it; a posted
//!   receive (or a probe) matches the **oldest** unexpected message that matches it.
//! * Non-overtaking: the protocol layer hands messages to [`TagMatcher::arrive`] in the
//!   order it learns of them, which for any one sender is that sender's send order. Because
//!   both queues are consumed strictly oldest-first, two messages from one sender that
//!   match the same receive are never reordered.
//! * [`TagMatcher::probe`] with `remove == false` only reports the oldest matching
//!   unexpected message; with `remove == true` it takes the message out of the unexpected
//!   queue and hands back a [`MessageHandle`] that [`TagMatcher::msg_recv`] later consumes
//!   (UCX's `ucp_tag_probe_nb(remove=1)` + `ucp_tag_msg_recv_nbx`).
//! * [`TagMatcher::cancel`] removes a posted receive that has not matched yet. Handles are
//!   generation-checked: cancelling a receive that already matched (or was cancelled)
//!   returns `None`, as `ucp_request_cancel` on a completed request does nothing.
//!
//! # Structure
//!
//! Following UCX (`ucp_tag_match.h`), each queue is split so that the common case — exact
//! tags — costs one hash lookup:
//!
//! * **Expected queue** (posted receives). Receives with a full mask sit in per-tag FIFO
//!   buckets of a hash table; all others sit in one *wildcard* list in post order. Every
//!   receive gets a global post sequence number. An arriving message looks at the head of
//!   its tag's bucket (the oldest exact receive for that tag) and scans the wildcard list
//!   for the first match, stopping early once the wildcard entries are younger than that
//!   bucket head; the smaller sequence number wins.
//!
//!   Before either, a receive posted while no other waits starts the *run*: it and, when
//!   it has the full mask, later full-mask receives of its tag are held apart in post
//!   order, and an arriving message compares its tag with the run's first alone. A program
//!   that posts one receive ahead of each message (a ping-pong, a blocking `MPI_Recv`) or a
//!   window of receives for one peer's tag (`MPI_Irecv` in a loop) never touches the slab,
//!   the lists or the table. A receive that does not fit the run moves it into the buckets
//!   and the wildcard list first, with its sequence numbers, so the order rules above are
//!   unchanged.
//! * **Unexpected queue** (arrived messages not yet matched). Every message is on two
//!   lists at once: its tag's bucket in a hash table and one global arrival-ordered list. A
//!   full-mask receive or probe takes the head of its bucket in O(1); a masked one scans
//!   the global list from the oldest message.
//!
//!   Here too there is a run: messages of one tag that arrive while no other unexpected
//!   message waits are held apart in arrival order, and a receive or probe compares its
//!   tag with the first alone (one peer's stream running ahead of its receives, as in a
//!   bidirectional window or `MPI_Sendrecv`). A message of another tag moves the run into
//!   the lists first, with its sequence numbers.
//!
//! All entries live in [`slab::Slab`]s and the lists are intrusive (threaded through the
//! slab entries by key, see `list.rs`). The per-tag tables are open-addressed with
//! backward-shift deletion (`table.rs`): an emptied bucket is removed at once and leaves no
//! tombstone, so a stream of ever-new tags (counter-based tag schemes) does not grow them;
//! their size follows the largest number of distinct tags live at once. Hence once the
//! slabs and tables have grown to the working-set size, no operation allocates.

mod list;
mod matcher;
pub mod scheme;
mod table;
mod types;

pub(crate) use list::advance_head;
pub use matcher::{
    ArriveResult, Match, MessageHandle, PostResult, ProbeResult, RecvHandle, TagMatcher,
};
pub use types::{check_length, tag_matches, SenderId, Tag, TagInfo, TagMask, TAG_MASK_FULL};

#[cfg(test)]
mod tests;
