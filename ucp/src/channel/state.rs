//! A channel's record: its endpoint and id, how it derives its tags, its counters, and
//! the requests it keeps (the wrap markers, its pending receives). Held by the worker for
//! the channel API (`channel/mod.rs`), which is all of the logic.

use ucs::UcsResult;

use crate::request::{EpHandle, ReqId};
use crate::tag::scheme::{TagScheme, WrapPolicy};

/// How a channel derives its tags.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelOpts {
    pub scheme: TagScheme,
    /// The type field of every tag of the channel (keeps channels apart from other tagged
    /// traffic of the application that uses the same scheme with other types).
    pub msg_type: u64,
    pub wrap: WrapPolicy,
}

impl Default for ChannelOpts {
    fn default() -> Self {
        ChannelOpts {
            scheme: TagScheme::CHANNEL,
            msg_type: 0xC,
            wrap: WrapPolicy::Wait,
        }
    }
}

/// A channel of a worker: its slot and the slot's generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChannelHandle {
    pub(super) idx: u32,
    pub(super) gen: u32,
}

impl ChannelHandle {
    /// The handle as one integer (for the C ABI).
    pub fn to_raw(self) -> u64 {
        u64::from(self.gen) << 32 | u64::from(self.idx)
    }
    pub fn from_raw(v: u64) -> ChannelHandle {
        ChannelHandle {
            idx: v as u32,
            gen: (v >> 32) as u32,
        }
    }
}

pub(crate) struct Channel {
    pub(super) gen: u32,
    pub(super) ep: EpHandle,
    pub(super) id: u64,
    pub(super) opts: ChannelOpts,
    /// Sends and receives taken so far (the counter field is these modulo the period).
    pub(super) sends: u64,
    pub(super) recvs: u64,
    /// The synchronous send that opened each half of the counter space most recently.
    pub(super) markers: [Option<ReqId>; 2],
    /// Receives posted and maybe not matched (cancelled at close).
    pub(super) pending: Vec<ReqId>,
}

/// What the next send of a channel is: its tag, and whether it must go synchronously
/// (a marker; [`Worker::channel_sent`](crate::Worker::channel_sent) records its request).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NextSend {
    pub tag: u64,
    pub sync: bool,
}

impl Channel {
    pub(super) fn half_len(&self) -> u128 {
        (self.opts.scheme.counter_period() / 2).max(1)
    }

    pub(super) fn counter(&self, n: u64) -> u64 {
        (u128::from(n) % self.opts.scheme.counter_period()) as u64
    }

    pub(super) fn tag(&self, n: u64) -> UcsResult<u64> {
        self.opts
            .scheme
            .encode(self.opts.msg_type, self.id, self.counter(n))
    }
}
