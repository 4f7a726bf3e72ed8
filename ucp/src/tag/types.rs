//! Tags, masks, senders, and what a receive learns of the message it matched.

use ucs::Status;

/// A 64-bit message tag (`ucp_tag_t`).
pub type Tag = u64;

/// A tag mask: the bits of the tag that must be equal for a match.
pub type TagMask = u64;

/// The mask that matches one exact tag.
pub const TAG_MASK_FULL: TagMask = u64::MAX;

/// Who sent a message, as the protocol layer names it (typically the receive-side
/// endpoint's id). Opaque to the matcher; it is only recorded and reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SenderId(pub u64);

/// What a match or a probe tells about a message (`ucp_tag_recv_info_t` plus the sender).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagInfo {
    /// The tag the sender used.
    pub sender_tag: Tag,
    /// The total length of the message in bytes, as announced by the sender.
    pub length: usize,
    /// Who sent it.
    pub sender: SenderId,
}

/// Whether a message tagged `msg_tag` matches a receive posted with `(tag, tag_mask)`.
#[inline]
pub fn tag_matches(msg_tag: Tag, tag: Tag, tag_mask: TagMask) -> bool {
    (msg_tag ^ tag) & tag_mask == 0
}

/// UCX's truncation rule: a message longer than the receive buffer is an error
/// (`UCS_ERR_MESSAGE_TRUNCATED`); a shorter one is fine and completes with its own length.
#[inline]
pub fn check_length(msg_len: usize, recv_len: usize) -> Result<(), Status> {
    if msg_len > recv_len {
        Err(Status::MessageTruncated)
    } else {
        Ok(())
    }
}
