//! The worker (`ucp_worker_h`): the transport interfaces of one context, the endpoints,
//! the requests, the tag matcher, and the progress engine that drives them.
//!
//! # Structure
//!
//! A [`Worker`] is its interfaces plus a `Core` holding every piece of protocol state.
//! `progress()` hands each interface the core as its event handler: received messages are
//! matched and copied into user buffers right there, but nothing is *sent* from inside a
//! handler (an interface cannot be re-entered). What must be sent in answer — an
//! acknowledgement, a rendezvous RTR, a wire-up reply, the next fragments of a stalled
//! send — is queued as an action and run after the interfaces return (`run_actions`).
//!
//! * `tag`: tag send/receive, probe, cancel, and the protocols behind them.
//! * `handler`: what each protocol message does on arrival.
//! * `wireup`: endpoint creation, lanes, wire-up, failure.
//! * `listener`: client/server connection through a socket address.
//!
//! # Endpoints and wire-up
//!
//! Endpoints are created from a peer's [`WorkerAddress`]: for each of our interfaces the
//! peer reaches, the lane is picked from the transports' estimates (self for our own
//! worker, shared memory and CMA on the same host, tcp otherwise). Every protocol header
//! names the *receiver's* endpoint id, which the sender learns from a wire-up exchange:
//! the new endpoint sends `WIREUP REQ` with its id and our address, and the peer answers
//! `WIREUP REP` with the id of its endpoint for us (an existing one if it already has one
//! for us that is not paired yet, so two sides that connect to each other pair up). Sends
//! posted before the reply wait in the endpoint's queue, in order.

pub mod am;
mod capi;
pub mod channel;
#[cfg(feature = "cuda")]
mod gpu_dt;
mod handler;
mod listener;
mod mapped;
pub mod queue;
pub mod rma;
mod rndv;
mod stage;
pub mod stream;
pub(crate) mod tag;
#[cfg(test)]
#[allow(unsafe_code)] // tests describe their buffers as user code does
mod tests;
mod umr;
mod wireup;

use std::collections::{HashMap, VecDeque};
use std::os::fd::RawFd;
use std::sync::Arc;

use slab::Slab;
use smallvec::SmallVec;
use ucs::{Status, UcsResult};
use uct::component::DeviceKind;
use uct::{EpId, IfaceAttr, MemH, OpenIface};

use crate::address::{TlAddress, WorkerAddress};
use crate::context::{Context, Error};
use crate::datatype::DataState;
use crate::proto::select::{Proto, Thresholds};
use crate::request::{Completion, ReqId, Requests};
use crate::tag::{TagInfo, TagMatcher};

pub use am::{AmData, AmEvent, AmHandler, AmRndv, AmSendParams};
pub use listener::ConnRequest;
pub use rma::{AtomicOp, MemHandle, Rkey, SharedRegion};
pub use stream::StreamRecv;
pub use tag::{RecvParams, SendParams};

/// An endpoint of a worker (`ucp_ep_h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpHandle(pub u32);

impl EpHandle {
    fn idx(self) -> usize {
        self.0 as usize
    }
}

/// Counters a test or tool can read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Messages that arrived before a matching receive was posted.
    pub unexpected: u64,
    /// Messages by protocol, as sent.
    pub eager_short: u64,
    pub eager_bcopy: u64,
    pub eager_zcopy: u64,
    pub eager_multi: u64,
    pub rndv_get: u64,
    pub rndv_put: u64,
    pub rndv_am: u64,
    /// Get-rendezvous receives whose copy was shared with the sender (RTR_SPLIT: this side
    /// read the head, the sender wrote the tail), counted by the receiver.
    pub rndv_split: u64,
    /// Rendezvous copies done with loads and stores through a mapping of the peer's
    /// worker-allocated shared memory (reads by receivers, tail or put writes by senders),
    /// instead of the memory lane.
    pub rndv_mapped: u64,
    /// Get rendezvous whose sender found its memory lane out of keys, sent by the
    /// active-message pipeline instead.
    pub rndv_no_keys: u64,
    /// Active messages sent eagerly / by rendezvous.
    pub am_eager: u64,
    pub am_rndv: u64,
    /// Eager active messages whose handler ran on the bytes where they arrived, in the
    /// transport's receive buffer (no copy, no queue), counted by the receiver.
    pub am_in_place: u64,
    /// Bytes of structured-layout descriptions sent, and layouts found (or not) in the
    /// receiver's memo cache.
    pub layout_bytes_sent: u64,
    pub layout_hits: u64,
    pub layout_misses: u64,
    /// Puts and gets done as copies into a same-host peer's mapped memory.
    pub rma_mapped: u64,
    /// Atomics executed by the network device (`UCX_ATOMIC_MODE=device`).
    pub amo_device: u64,
    /// Protocol messages refused as malformed.
    pub malformed: u64,
    /// Rendezvous whose data was read through the memory lane for device memory (counted
    /// by the receiver), and device data staged through host buffers by the driver (counted
    /// by the side that copied: sender packing, receiver unpacking).
    pub rndv_device: u64,
    /// Device transfers with a layout on either side moved by one kernel (or 2D copy)
    /// through a mapping of the peer's memory, counted by the side that ran it.
    pub rndv_device_direct: u64,
    /// Protocol messages dropped because their endpoint was closed or had failed (they
    /// crossed the close).
    pub late: u64,
    /// Layout rendezvous moved by UMR writes (counted by the receiver, which asks), the
    /// bytes of chunk-key lists it sent, and the requests whose list the sender already
    /// had (the per-peer remote key cache: no list sent).
    pub rndv_umr: u64,
    pub umr_list_bytes: u64,
    pub umr_list_hits: u64,
    /// Layout rendezvous over a UMR lane that the receiver asked to have packed (the
    /// hybrid's other half).
    pub rndv_pack: u64,
    /// Fragments of device data staged through pinned host buffers by the rendezvous
    /// pipeline (`UCX_RNDV_FRAG_SIZE`), counted by each side: sent by the sender, copied
    /// into the device by the receiver.
    pub rndv_staged: u64,
}

impl WorkerStats {
    /// Every counter with its name, in declaration order.
    pub fn counters(&self) -> [(&'static str, u64); 28] {
        [
            ("unexpected", self.unexpected),
            ("eager short", self.eager_short),
            ("eager bcopy", self.eager_bcopy),
            ("eager zcopy", self.eager_zcopy),
            ("eager multi-fragment", self.eager_multi),
            ("rendezvous get", self.rndv_get),
            ("rendezvous put", self.rndv_put),
            ("rendezvous am", self.rndv_am),
            ("rendezvous split", self.rndv_split),
            ("rendezvous mapped", self.rndv_mapped),
            ("rendezvous without keys", self.rndv_no_keys),
            ("am eager", self.am_eager),
            ("am rendezvous", self.am_rndv),
            ("am in place", self.am_in_place),
            ("layout bytes sent", self.layout_bytes_sent),
            ("layout hits", self.layout_hits),
            ("layout misses", self.layout_misses),
            ("rma mapped", self.rma_mapped),
            ("atomics on the device", self.amo_device),
            ("malformed", self.malformed),
            ("rendezvous device", self.rndv_device),
            ("rendezvous device direct", self.rndv_device_direct),
            ("late", self.late),
            ("rendezvous umr", self.rndv_umr),
            ("umr list bytes", self.umr_list_bytes),
            ("umr list hits", self.umr_list_hits),
            ("rendezvous packed", self.rndv_pack),
            ("rendezvous staged fragments", self.rndv_staged),
        ]
    }
}

/// The counters that are not zero, "eager short 1000, unexpected 3" ("nothing counted"
/// when all are).
impl std::fmt::Display for WorkerStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut first = true;
        for (name, v) in self.counters() {
            if v != 0 {
                write!(f, "{}{name} {v}", if first { "" } else { ", " })?;
                first = false;
            }
        }
        if first {
            f.write_str("nothing counted")?;
        }
        Ok(())
    }
}

/// A transport interface as the core knows it.
#[derive(Debug)]
pub(crate) struct IfaceInfo {
    pub(crate) tl: &'static str,
    pub(crate) device: String,
    pub(crate) kind: DeviceKind,
    pub(crate) attr: IfaceAttr,
}

/// A lane: an interface and the transport endpoint on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Lane {
    pub(crate) iface: usize,
    pub(crate) ep: EpId,
}

#[derive(Debug)]
pub(crate) struct Ep {
    pub(crate) remote_uuid: u64,
    /// The peer's endpoint id for us, from wire-up.
    pub(crate) remote_id: Option<u32>,
    pub(crate) am: Lane,
    /// The memory lane for host-accessible memory (zero-copy rendezvous, RMA).
    pub(crate) rma: Option<Lane>,
    /// The memory lane for device memory: a transport whose put/get reach a peer's device
    /// memory and take device buffers locally (same-host GPUs).
    pub(crate) rma_dev: Option<Lane>,
    pub(crate) thresh: Thresholds,
    /// Sends in posting order that could not go out yet (wire-up, no resources, stream).
    pub(crate) queue: VecDeque<ReqId>,
    pub(crate) failed: Option<Status>,
    /// The failure was the peer's orderly close (its close notice), not an error: closing
    /// this endpoint then completes with `Ok`, as when both sides close at once.
    pub(crate) peer_closed: bool,
    /// Send requests not yet complete.
    pub(crate) outstanding: u32,
    /// Replies still due for puts carried by messages that completed when their messages
    /// were out (the data was copied into them); a flush waits for them.
    pub(crate) puts_unacked: u32,
    /// The first error such a reply reported, for the next flush of the endpoint.
    pub(crate) put_error: Option<Status>,
    /// RMA operations of this endpoint not yet complete, and those of them carried by
    /// messages.
    pub(crate) rma_ops: u32,
    pub(crate) rma_carried: u32,
    /// `rma_carried + puts_unacked`, readable without the worker: while it is not zero,
    /// puts and gets that would reach the target at once (a mapped copy, the memory lane)
    /// go by messages behind the earlier ones instead (`rma::Order`).
    pub(crate) rma_order: rma::Order,
    /// In `Core::ready`.
    pub(crate) in_ready: bool,
    /// Control messages waiting for the AM lane, in order, and whether the endpoint is in
    /// `Core::ctrl_eps`.
    pub(crate) ctrl: VecDeque<Ctrl>,
    pub(crate) in_ctrl: bool,
    /// The peer's puts handled here since the last RMA_PUT_ACK, and the first error among
    /// them (`rma::send_put_acks`).
    pub(crate) put_acks: u32,
    pub(crate) put_ack_status: Status,
    /// Stream bytes received and not yet taken (and the offset into the first chunk), and
    /// the stream receives waiting for bytes.
    pub(crate) stream_rx: VecDeque<Vec<u8>>,
    pub(crate) stream_off: usize,
    pub(crate) stream_recvs: VecDeque<ReqId>,
    /// In `Core::stream_ready` (reported once per arrival of data to an idle stream).
    pub(crate) stream_queued: bool,
    /// Structured layouts already sent to the peer (by hash), and those the peer sent us,
    /// most recent first (an LRU of `Core::layout_cache_size`).
    pub(crate) layouts_sent: std::collections::HashSet<u128>,
    pub(crate) layout_cache: VecDeque<(u128, Arc<crate::datatype::DtLayout>)>,
    /// A layout arriving in LAYOUT_PART messages: its hash, total bytes, and the bytes so
    /// far.
    pub(crate) layout_in: Option<Box<(u128, usize, Vec<u8>)>>,
    /// UMR chunk-key lists, kept in step on both sides (`worker::umr`): the ids this side
    /// sent with their lists as a receiver, and the lists it was sent as a sender.
    pub(crate) umr_taught: VecDeque<u64>,
    pub(crate) umr_known: VecDeque<(u64, Vec<u32>)>,
    /// Measured eager-versus-rendezvous choice (same-host endpoints with an automatic
    /// rendezvous threshold, see `proto::tune`).
    pub(crate) tuner: Option<Box<crate::proto::tune::Tuner>>,
}

/// A protocol message to send from `run_actions`.
#[derive(Debug)]
pub(crate) enum Ctrl {
    Ack {
        sreq: u64,
        status: Status,
    },
    Rtr {
        sreq: u64,
        rreq: u64,
    },
    RtrPut {
        sreq: u64,
        rreq: u64,
        rkey: crate::proto::wire::KeyBytes,
        segs: crate::proto::wire::Segs,
    },
    /// Split rendezvous: the receiver reads the bytes before `offset`, the sender writes
    /// the rest into `segs`.
    RtrSplit {
        sreq: u64,
        rreq: u64,
        offset: u64,
        rkey: crate::proto::wire::KeyBytes,
        segs: crate::proto::wire::Segs,
    },
    /// Split rendezvous of a receiver whose data is a layout: the sender writes the bytes
    /// from `offset` on into that layout (`layout`, encoded, placed at `origin`).
    /// A layout too large for one message goes first in LAYOUT_PART messages, and the
    /// request names it by `hash`.
    RtrSplitLayout {
        sreq: u64,
        rreq: u64,
        offset: u64,
        rkey: crate::proto::wire::KeyBytes,
        origin: u64,
        layout: Vec<u8>,
        hash: u128,
    },
    /// Layout rendezvous by UMR: the sender writes each chunk into the receiver's chunk
    /// key (`keys` empty when the sender has the list `kid` already).
    RtrUmr {
        sreq: u64,
        rreq: u64,
        chunk: u64,
        kid: u64,
        keys: Vec<u32>,
    },
    RmaReply {
        req: u64,
        offset: u64,
        status: Status,
        data: Vec<u8>,
    },
    PutAck {
        count: u32,
        status: Status,
    },
    Fin {
        rreq: u64,
        status: Status,
    },
    LayoutMiss {
        sreq: u64,
        rreq: u64,
    },
    /// A layout resent after the peer's miss (in LAYOUT_PART messages first when it is
    /// too large for one).
    Layout {
        rreq: u64,
        hash: u128,
        bytes: Vec<u8>,
    },
    WireupRep {
        dst: u32,
    },
    WireupReq,
}

/// The payload of an unexpected eager message: a buffer from `Core::unexp_bufs`, given
/// back when the message is received.
pub(crate) type UnexpData = Vec<u8>;

/// Payload buffers `Core::unexp_bufs` keeps for reuse, the largest one it keeps, and the
/// bytes it keeps in all: an unexpected eager message (one cell, or several fragments)
/// then allocates nothing once a run is warm, and a burst of large ones is not held for the
/// rest of the run. When only buffers of up to 16 KiB were kept, every unexpected 32 KiB
/// message (one posix cell) allocated and freed its buffer, and a window of them both ways
/// ran at half speed whenever the two processes fell out of step (MPI `bibw` 32 KiB on the
/// VM: 11.7 or 22 GB/s by run, 2026-11-27).
const UNEXP_BUFS_KEEP: usize = 256;
const UNEXP_BUF_KEEP_MAX: usize = 256 << 10;
const UNEXP_BUFS_KEEP_BYTES: usize = 4 << 20;

/// Payload buffers of received unexpected eager messages, kept for the next ones (within
/// the bounds above).
#[derive(Debug, Default)]
pub(crate) struct UnexpPool {
    bufs: Vec<UnexpData>,
    /// Their capacity, in bytes.
    bytes: usize,
}

impl UnexpPool {
    /// A buffer holding `payload`: the last one given back, else a new one.
    #[inline]
    pub(crate) fn take(&mut self, payload: &[u8]) -> UnexpData {
        let mut v = match self.bufs.pop() {
            Some(v) => {
                self.bytes -= v.capacity();
                v
            }
            None => Vec::new(),
        };
        v.extend_from_slice(payload);
        v
    }

    /// Takes back a buffer, or drops it when it is too large or the pool is full.
    #[inline]
    pub(crate) fn give(&mut self, mut v: UnexpData) {
        let cap = v.capacity();
        if self.bufs.len() < UNEXP_BUFS_KEEP
            && cap <= UNEXP_BUF_KEEP_MAX
            && self.bytes + cap <= UNEXP_BUFS_KEEP_BYTES
        {
            v.clear();
            self.bytes += cap;
            self.bufs.push(v);
        }
    }

    /// Buffers kept and their bytes.
    #[cfg(test)]
    pub(crate) fn kept(&self) -> (usize, usize) {
        (self.bufs.len(), self.bytes)
    }
}

/// An unexpected message, stored in the matcher until a receive takes it.
#[derive(Debug)]
pub(crate) enum Unexp {
    Eager {
        /// The small messages of `MPI_Sendrecv` and bidirectional windows mostly arrive
        /// before their receive. Their bytes are kept in a pooled buffer rather than in
        /// the enum: a message is moved into the matcher and out again, and an enum with
        /// 128 bytes inline cost a `memcpy` call at each move (callgrind,
        /// 2026-11-27).
        data: UnexpData,
        /// `(ep, sreq)` to acknowledge on match (synchronous send).
        sync: Option<(usize, u64)>,
    },
    /// A multi-fragment eager message, in `Core::unexp_frags`.
    Frag(usize),
    Rts {
        ep: usize,
        sreq: u64,
        /// Boxed: the description is large and rarely unexpected (one allocation per
        /// unexpected rendezvous).
        rts: Box<crate::proto::wire::RtsData>,
    },
}

/// The fragments of a multi-fragment message received before its receive was posted.
#[derive(Debug)]
pub(crate) struct FragBuf {
    /// The bytes received so far, in order (grown as fragments arrive, so a header that
    /// announces a large message costs nothing until its bytes come).
    pub(crate) buf: Vec<u8>,
    /// The message's announced length.
    pub(crate) total: usize,
    pub(crate) ep: usize,
    pub(crate) sreq: u64,
    pub(crate) sync: bool,
}

impl FragBuf {
    pub(crate) fn received(&self) -> usize {
        self.buf.len()
    }

    pub(crate) fn whole(&self) -> bool {
        self.buf.len() == self.total
    }
}

/// Where the later fragments of a multi-fragment message go.
#[derive(Clone, Copy, Debug)]
pub(crate) enum FragTarget {
    Unexpected(usize),
    Recv(ReqId),
}

/// The state of one operation.
#[derive(Debug)]
pub(crate) enum Op {
    Send(SendOp),
    Recv(RecvOp),
    Flush(FlushOp),
    Rma(rma::RmaOp),
    Done {
        status: Status,
        info: Option<TagInfo>,
    },
}

#[derive(Debug)]
pub(crate) struct SendOp {
    pub(crate) ep: usize,
    pub(crate) tag: u64,
    pub(crate) data: DataState,
    pub(crate) total: usize,
    pub(crate) proto: Proto,
    pub(crate) flags: u8,
    /// The first message (single eager, FIRST or RTS) went out.
    pub(crate) started: bool,
    /// Bytes of data sent so far.
    pub(crate) offset: usize,
    /// RndvAm: the receiver's request, from its RTR.
    pub(crate) rreq: Option<u64>,
    /// Waiting for an ACK (synchronous send, rendezvous get).
    pub(crate) wait_ack: bool,
    /// Zero-copy operations not yet completed by the transport.
    pub(crate) wait_comp: u32,
    /// The registration behind a rendezvous get, and its interface.
    pub(crate) memh: Option<Box<(usize, MemH)>>,
    /// UMR rendezvous: the use of this side's chunk keys, ended when the send completes.
    pub(crate) umr_use: Option<Box<UmrUse>>,
    /// In the endpoint's queue.
    pub(crate) queued: bool,
    /// Put rendezvous (RTR_PUT) or the tail of a split one (RTR_SPLIT): where to write.
    pub(crate) put: Option<Box<PutTarget>>,
    /// Get rendezvous: the RTS offered to write a tail of the data (mode GET_HELP).
    pub(crate) split_offered: bool,
    /// Split rendezvous: a failure the receiver's ACK reported, kept until this side's
    /// writes of the tail and its FIN are done (the receiver waits for that FIN).
    pub(crate) ack_status: Status,
    /// Put rendezvous: the writes are posted; FIN goes once they complete.
    pub(crate) fin_pending: bool,
    /// An active message's id and header (None: a tag message).
    pub(crate) am: Option<Box<am::AmHdr>>,
    /// Bytes of the endpoint's stream (no tag, no message boundary).
    pub(crate) stream: bool,
    /// Timed for the endpoint's eager/rendezvous tuner (`proto::tune`; posted while no
    /// other send of the endpoint was in flight), and when it started (TSC cycles).
    pub(crate) timed: bool,
    pub(crate) t0: u64,
    /// The staged pipeline of device data (`stage`), once begun.
    pub(crate) stage: Option<Box<stage::SendStage>>,
}

impl SendOp {
    /// Whether everything this side does for the send is done and only the peer's answer
    /// is awaited (a synchronous send's ACK, a rendezvous's RTR, the receiver's reads):
    /// a flush does not wait for such a send, as in UCX, and a close cancels it.
    pub(crate) fn awaits_peer_only(&self) -> bool {
        let rndv = matches!(self.proto, Proto::RndvGet | Proto::RndvPut | Proto::RndvAm);
        self.started
            && !self.queued
            && self.wait_comp == 0
            && !self.fin_pending
            && self.put.is_none()
            && (self.offset >= self.total || (rndv && self.rreq.is_none()))
    }
}

/// Where the sender of a put rendezvous, or of a split rendezvous's tail, writes.
#[derive(Debug)]
pub(crate) struct PutTarget {
    /// The receiver's packed key and segments, or its layout placed at an origin (RTR_SPLIT_LAYOUT;
    /// `segs` is then empty).
    pub(crate) rkey: crate::proto::wire::KeyBytes,
    pub(crate) segs: crate::proto::wire::Segs,
    pub(crate) layout: Option<(u64, crate::dt::Canon)>,
    /// The message offset of the first byte still to write (0 for a put rendezvous not
    /// yet begun).
    pub(crate) offset: usize,
    /// UMR: the chunk and the receiver's chunk keys (`rkey` and `segs` are then empty).
    pub(crate) umr: Option<(u64, Vec<u32>)>,
}

#[derive(Debug)]
pub(crate) struct RecvOp {
    pub(crate) data: DataState,
    pub(crate) handle: Option<crate::tag::RecvHandle>,
    pub(crate) info: Option<TagInfo>,
    pub(crate) received: usize,
    /// Bytes that will arrive (the message length clipped to the capacity).
    pub(crate) expect: usize,
    pub(crate) status: Status,
    /// The rendezvous sender to acknowledge or the fragment stream's source, `(ep, sreq)`.
    pub(crate) peer: Option<(usize, u64)>,
    pub(crate) ack_sync: bool,
    /// A stream receive, and whether it waits until full.
    pub(crate) stream: StreamMode,
    /// Rendezvous state; `None` for eager receives (see [`RecvRndv`]).
    pub(crate) rndv: Option<Box<RecvRndv>>,
}

/// Whether a receive is a stream receive, and of which kind. Zero is "not one", so that a
/// new receive's fields past its data are all zero: the compiler then writes them straight
/// into the request slot (an `Option<bool>`, whose `None` is 2, had them built on the stack
/// and copied over, with a stalled load per receive).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum StreamMode {
    #[default]
    No = 0,
    /// Completes with whatever arrived.
    Any,
    /// Waits until the buffer is full (`UCP_STREAM_RECV_FLAG_WAITALL`).
    WaitAll,
}

impl RecvOp {
    /// The rendezvous state, created on first use.
    pub(crate) fn rndv(&mut self) -> &mut RecvRndv {
        self.rndv.get_or_insert_with(Box::default)
    }
}

/// A receive's bounce buffer: pinned when it is to be copied into device memory (the
/// driver copies from pinned memory at the bus's speed, from pageable memory at a
/// fraction of it, and the pool saves allocating it for every message).
#[derive(Debug)]
pub(crate) enum Bounce {
    Heap(Vec<u8>),
    #[cfg(feature = "cuda")]
    Pinned(ucs::cuda::PinnedBuf),
}

impl Bounce {
    /// `total` bytes to be copied into device memory afterwards.
    pub(crate) fn for_device(total: usize) -> Bounce {
        #[cfg(feature = "cuda")]
        if let Ok(p) = ucs::cuda::PinnedBuf::take(total) {
            return Bounce::Pinned(p);
        }
        Bounce::Heap(vec![0u8; total])
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bounce::Heap(v) => v,
            #[cfg(feature = "cuda")]
            Bounce::Pinned(p) => p.as_slice(),
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Bounce::Heap(v) => v,
            #[cfg(feature = "cuda")]
            Bounce::Pinned(p) => p.as_mut_slice(),
        }
    }

    pub(crate) fn is_pinned(&self) -> bool {
        !matches!(self, Bounce::Heap(_))
    }
}

/// The part of a receive that only rendezvous uses. Boxed, so that an eager receive's
/// request stays small (posting moves it into the request table) and completing one
/// drops nothing but this empty `Option`.
#[derive(Debug, Default)]
pub(crate) struct RecvRndv {
    /// Outstanding get operations, and the RTS to read for a pending get.
    pub(crate) gets: u32,
    pub(crate) rts: Option<crate::proto::wire::RtsData>,
    /// Bounce buffer for a get into data without addresses (generic datatypes), or into
    /// device memory the lane cannot write.
    pub(crate) bounce: Option<Bounce>,
    /// The bounce is being copied into device memory by the memory-type copy engine.
    pub(crate) unpacking: bool,
    /// Put rendezvous: the registration the sender writes into, and its interface.
    pub(crate) memh: Option<(usize, MemH)>,
    /// Split rendezvous: the sender's FIN for the tail it writes has not come yet, and
    /// whether this side's reads of the head are already done (then FIN completes).
    pub(crate) wait_fin: bool,
    pub(crate) reads_done: bool,
    /// UMR rendezvous: the sender writes into our chunk keys (a use of the keys of
    /// `(interface, name, chunk)`, ended when the receive completes); its FIN completes.
    pub(crate) umr: Option<UmrUse>,
    /// The staged pipeline into device memory (`stage`), once data arrived.
    pub(crate) stage: Option<Box<stage::RecvStage>>,
}

/// A use of the UMR keys an interface built for `(name, chunk)`: `(interface, name, chunk)`.
pub(crate) type UmrUse = (usize, (u128, u64, u64), u64);

#[derive(Debug)]
pub(crate) struct FlushOp {
    pub(crate) ep: Option<usize>,
    /// Transport flushes issued and not yet complete; `None` until issued.
    pub(crate) uct: Option<u32>,
    /// Destroy the endpoint when done (close).
    pub(crate) close: bool,
}

/// Interfaces no endpoint uses as its AM lane are progressed once every this many
/// `progress` calls (an idle tcp interface costs an `epoll_wait` system call; cma only
/// checks its peers' liveness). At ~0.1 µs per call that is every ~50 µs.
const IDLE_POLL_EVERY: u32 = 512;

/// `Core::poll_one` when not exactly one interface is active (`Worker::new` refuses more
/// than 255 interfaces, so no index is this).
const NO_IFACE: u8 = u8::MAX;

/// Completion tokens of transport flushes carry this bit; the rest is the request id.
pub(crate) const COMP_FLUSH: u64 = 1 << 63;

/// All protocol state of a worker; the interfaces' event handler.
pub(crate) struct Core {
    pub(crate) uuid: u64,
    pub(crate) address: Vec<u8>,
    pub(crate) info: Vec<IfaceInfo>,
    pub(crate) rndv_cfg: ucs::config::AutoSize,
    pub(crate) zcopy_cfg: ucs::config::AutoSize,
    pub(crate) rndv_scheme: ucs::config::RndvScheme,
    /// `UCX_ATOMIC_MODE=device`: 8-byte fetch-add and compare-and-swap go to transports
    /// with device atomics.
    pub(crate) atomic_device: bool,
    pub(crate) layout_cache_size: usize,
    /// Smallest same-host get rendezvous shared between receiver and sender
    /// (`UCX_RNDV_SPLIT_THRESH`; `usize::MAX`: never, also while `cpu` finds this
    /// thread sharing its CPU).
    pub(crate) split_thresh: usize,
    split_cfg: usize,
    /// Whether the progressing thread waits for a CPU (`Worker::watch_cpu_share`; `None`
    /// with `UCX_SHARED_CPU_ADAPT=n`).
    cpu: Option<ucs::sched::CpuShare>,
    /// While `cpu` finds the CPU shared, the largest size sent eagerly where endpoints
    /// would measure (`proto::tune::Tuner::choose_shared`); 0: they measure.
    pub(crate) shared_eager_max: usize,
    /// `UCX_RNDV_LAYOUT_PARTS` (`None`: auto, device layouts only; off by default).
    pub(crate) layout_parts: Option<bool>,
    pub(crate) proto_info: bool,
    pub(crate) eps: Slab<Ep>,
    pub(crate) uct_eps: HashMap<(usize, EpId), usize>,
    pub(crate) reqs: Requests<Op>,
    /// Receives posted by `tag_recv_host` that wait in the matcher without a request.
    pub(crate) direct: crate::request::DirectRecvs,
    pub(crate) matcher: TagMatcher<Unexp, ReqId>,
    pub(crate) frags: HashMap<(usize, u64), FragTarget>,
    pub(crate) unexp_frags: Slab<FragBuf>,
    /// Payload buffers of received unexpected eager messages, for the next ones.
    pub(crate) unexp_bufs: UnexpPool,
    /// Endpoints with control messages waiting (`Ep::ctrl`), each once.
    pub(crate) ctrl_eps: VecDeque<usize>,
    /// Endpoints whose peer's puts await an acknowledgement (`Ep::put_acks`).
    pub(crate) put_ack_eps: Vec<usize>,
    /// Wire-up requests from peers, to answer (their decoded message and address).
    pub(crate) accepts: VecDeque<(crate::proto::wire::Wireup, WorkerAddress)>,
    /// Endpoints whose queue may move.
    pub(crate) ready: VecDeque<usize>,
    /// Receives that matched a get rendezvous and must issue their gets.
    pub(crate) gets: VecDeque<ReqId>,
    /// Receives that matched a put rendezvous and must expose their buffer (RTR_PUT).
    pub(crate) puts: VecDeque<ReqId>,
    /// Registrations to release.
    pub(crate) deregs: Vec<(usize, MemH)>,
    /// UMR key uses that ended, for their interfaces (`Iface::umr_release`).
    pub(crate) umr_releases: Vec<UmrUse>,
    pub(crate) flushes: Vec<ReqId>,
    /// Wire-up requests held back (endpoint, time to send), see `wireup::ep_create`.
    pub(crate) deferred_reqs: Vec<(usize, u64)>,
    /// Sends that may be complete (an ACK or transport completion arrived).
    pub(crate) finished: Vec<ReqId>,
    /// Pinned bounces to be copied into the device memory of their receives by `mt_copy`.
    pub(crate) unpacks: Vec<(ReqId, Bounce)>,
    /// Bounces being copied, kept here until the copy's completion whatever becomes of
    /// their receive (the copy engine reads them until then), and the gets that wait for
    /// their bytes to fall under `STAGE_BUDGET` before they take a bounce of their own.
    pub(crate) staging: Vec<(ReqId, Bounce)>,
    pub(crate) waiting_gets: VecDeque<ReqId>,
    /// The memory-type copy engine (an interface with `MEMTYPE_COPY`) and its endpoint to
    /// itself, where one opened.
    pub(crate) mt_copy: Option<Lane>,
    /// The staged rendezvous pipeline's fragment size and depth, and the receives whose
    /// data has all arrived while their last fragments are being copied into the device.
    pub(crate) stage_cfg: stage::StageCfg,
    pub(crate) stage_recvs: Vec<ReqId>,
    /// Endpoint failures a lane other than the endpoint's AM lane found, failed once that
    /// lane has delivered what it holds (`Worker::fail_after_drain`).
    pub(crate) lane_errors: Vec<(usize, Status)>,
    /// Endpoints whose peer closed (`WIREUP_CLOSE`), failed once what arrived before the
    /// notice is done with (an ACK's send completes first).
    pub(crate) peer_closes: Vec<usize>,
    pub(crate) completions: crate::request::CompletionQueue,
    /// Active messages waiting for their handlers, and buffers to reuse for them.
    pub(crate) am_events: VecDeque<am::QueuedAm>,
    pub(crate) am_pool: Vec<Vec<u8>>,
    /// Endpoints whose stream has bytes no receive took yet, for `ucp_stream_worker_poll`.
    pub(crate) stream_ready: VecDeque<usize>,
    /// The active message an interface kept in place during this `progress` call.
    pub(crate) kept: Option<am::KeptAm>,
    /// The interface whose kept message's handler has returned: released at the start of
    /// the next `progress` (or `arm`), off the path from a message to the reply it causes.
    pub(crate) release_owed: u8,
    /// How many AM handlers of this worker are running (nested when a handler progresses).
    pub(crate) am_depth: u32,
    /// Mapped regions, and RMA operations waiting to send their messages.
    pub(crate) mems: Slab<rma::MemReg>,
    /// Vectors compiled for iov lists of that shape (`tag::as_vector`).
    pub(crate) vectors: tag::VectorCache,
    /// How many of `mems` are worker-allocated shared memory.
    pub(crate) shm_regions: usize,
    /// Peers' shared-memory regions mapped here, by (pid, fd, region nonce).
    pub(crate) mappings: rma::MappingCache,
    pub(crate) rma_queue: VecDeque<ReqId>,
    pub(crate) ep_errors: VecDeque<(EpHandle, Status)>,
    /// Receives bound to the endpoint they expect a message from (`Worker::bind_recv`):
    /// when it fails, those not matched yet end with its error.
    pub(crate) bound_recvs: Vec<(usize, ReqId)>,
    /// Set when any of the queues above may hold work for `run_actions`.
    pub(crate) work: bool,
    /// The interface being progressed (for the handler).
    pub(crate) cur_iface: usize,
    /// Indices of the interfaces some endpoint uses, or that delivered something:
    /// progressed on every call. The others (a tcp interface nobody talks to costs an
    /// `epoll_wait` per call) are looked at once every `IDLE_POLL_EVERY` calls, so a first
    /// message still arrives.
    pub(crate) active: SmallVec<[u8; 4]>,
    /// The one interface in `active`, or `NO_IFACE` when there are none or several.
    pub(crate) poll_one: u8,
    /// Interfaces in use that need polling only while they have work
    /// (`IfaceFlags::ON_DEMAND`: `self`): not in `active`, so that a worker with one
    /// other interface keeps its one-interface path.
    pub(crate) on_demand: Vec<u8>,
    pub(crate) tick: u32,
    pub(crate) stats: WorkerStats,
    /// Some stream-triggered queue has a released operation to fire or one running
    /// (`queue.rs`); keeps `work` set.
    pub(crate) queues_armed: bool,
}

/// A worker. Driven by one thread at a time (`&mut self`); wrap it in a mutex for the
/// serialized thread mode.
pub struct Worker {
    ctx: Arc<Context>,
    ifaces: Vec<OpenIface>,
    core: Core,
    epoll: ucs::wakeup::Epoll,
    /// Wakes a sleeper from any thread (`ucp_worker_signal`); in the epoll set.
    signal: Arc<ucs::wakeup::EventFd>,
    sock: listener::Sockets,
    am_handlers: Vec<Option<am::AmHandler>>,
    queues: Slab<queue::Queue>,
    channels: Slab<channel::Channel>,
    /// The generation of the last channel opened (`ChannelHandle`).
    channel_gen: u32,
    /// Wakes the queues' progress thread, when there is one, on `enqueue_start`.
    queue_kick: Option<Arc<queue::Kick>>,
    /// The generation of the last queue made (`QueueId`).
    queue_gen: u32,
}

/// Wakes a worker sleeping in [`Worker::wait_event`] (or makes its next [`Worker::arm`]
/// report work), from any thread, without the worker (`ucp_worker_signal`).
#[derive(Clone, Debug)]
pub struct Signaler(Arc<ucs::wakeup::EventFd>);

impl Signaler {
    pub fn signal(&self) -> UcsResult<()> {
        self.0.signal().map_err(|_| Status::IoError)
    }
}

/// The epoll data of the signal descriptor (interfaces use their index).
const SIGNAL_EVENT: u64 = u64::MAX;
/// The epoll data of the worker's client/server sockets (`listener`).
pub(crate) const SOCKET_EVENT: u64 = u64::MAX - 1;

impl Drop for Worker {
    fn drop(&mut self) {
        if self.core.am_depth > 0 {
            // Dropped from inside one of its own AM handlers (moved out with `mem::swap`):
            // that handler may still read a message kept in an interface's receive memory,
            // so the interfaces are leaked rather than closed.
            std::mem::forget(std::mem::take(&mut self.ifaces));
            return;
        }
        self.queues_drop_all();
        // Endpoints the application left open are closed as `ep_close` would: their peers
        // learn of it and end theirs without a failure.
        let open: Vec<usize> = self.core.eps.iter().map(|(i, _)| i).collect();
        let Worker { ifaces, core, .. } = self;
        for ep in open {
            wireup::destroy_ep(ifaces, core, ep);
        }
        // Regions the application left mapped are deregistered before their memory goes
        // (`cuda_copy` pins host memory while registered).
        rma::unmap_all(ifaces, core);
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("uuid", &self.core.uuid)
            .field("ifaces", &self.core.info)
            .field("eps", &self.core.eps.len())
            .field("requests", &self.core.reqs.len())
            .field("direct_receives", &self.core.direct.len())
            .finish()
    }
}

impl Worker {
    /// Opens every transport the context allows. Fails only when none opens.
    pub fn new(ctx: &Arc<Context>) -> Result<Worker, Error> {
        let mut ifaces: Vec<OpenIface> = Vec::new();
        let mut info = Vec::new();
        let mut failures = Vec::new();
        for res in &ctx.discovery.available {
            match uct::open_iface(res, &ctx.config) {
                Ok(i) => {
                    info.push(IfaceInfo {
                        tl: res.tl,
                        device: res.device.clone(),
                        kind: res.kind,
                        attr: i.attr().clone(),
                    });
                    ifaces.push(i);
                }
                Err(e) => {
                    log::warn!("{e}");
                    failures.push(e.to_string());
                }
            }
        }
        if ifaces.is_empty() {
            return Err(Error::NoTransport(if failures.is_empty() {
                "none allowed by UCX_TLS".into()
            } else {
                failures.join("; ")
            }));
        }
        // Interfaces are named by a byte in the active list (`Core::active`).
        if ifaces.len() > usize::from(u8::MAX) {
            return Err(Error::NoTransport(format!(
                "{} interfaces, more than a worker drives (255): narrow UCX_TLS or UCX_NET_DEVICES",
                ifaces.len()
            )));
        }
        let epoll = ucs::wakeup::Epoll::new().map_err(|source| Error::Os {
            call: "epoll_create1",
            source,
        })?;
        for (i, iface) in ifaces.iter().enumerate() {
            if let Some(fd) = iface.event_fd() {
                epoll
                    .add(fd, libc::EPOLLIN as u32, i as u64)
                    .map_err(|source| Error::Os {
                        call: "epoll_ctl",
                        source,
                    })?;
            }
        }
        let signal = Arc::new(ucs::wakeup::EventFd::new().map_err(|source| Error::Os {
            call: "eventfd",
            source,
        })?);
        {
            use std::os::fd::AsRawFd;
            epoll
                .add(signal.as_raw_fd(), libc::EPOLLIN as u32, SIGNAL_EVENT)
                .map_err(|source| Error::Os {
                    call: "epoll_ctl",
                    source,
                })?;
        }
        let mt_copy = ifaces.iter_mut().enumerate().find_map(|(i, f)| {
            if !f.attr().flags.contains(uct::IfaceFlags::MEMTYPE_COPY) {
                return None;
            }
            let (dev, addr) = (f.device_address().to_vec(), f.iface_address().to_vec());
            f.ep_connect(&dev, &addr)
                .ok()
                .map(|ep| Lane { iface: i, ep })
        });
        let uuid = rand::random::<u64>();
        let address = WorkerAddress {
            uuid,
            host_id: ucs::sys::host_id(),
            pid: std::process::id(),
            tls: ifaces
                .iter()
                .zip(&info)
                .map(|(i, inf)| TlAddress {
                    tl: inf.tl.to_string(),
                    device: inf.device.clone(),
                    device_addr: i.device_address().to_vec(),
                    iface_addr: i.iface_address().to_vec(),
                })
                .collect(),
        }
        .encode();
        let core = Core {
            uuid,
            address,
            info,
            rndv_cfg: ctx.config.rndv_thresh,
            zcopy_cfg: ctx.config.zcopy_thresh,
            rndv_scheme: ctx.config.rndv_scheme,
            atomic_device: ctx.config.atomic_mode.device(),
            layout_cache_size: ctx.config.rndv_layout_cache,
            split_thresh: ctx.config.rndv_split_thresh,
            split_cfg: ctx.config.rndv_split_thresh,
            cpu: ctx.config.shared_cpu_adapt.then(Default::default),
            shared_eager_max: 0,
            layout_parts: ctx.config.rndv_layout_parts,
            proto_info: ctx.config.proto_info,
            eps: Slab::new(),
            uct_eps: HashMap::new(),
            reqs: Requests::new(),
            direct: Default::default(),
            matcher: TagMatcher::with_capacity(64, 64),
            frags: HashMap::new(),
            unexp_frags: Slab::new(),
            unexp_bufs: UnexpPool::default(),
            ctrl_eps: VecDeque::new(),
            put_ack_eps: Vec::new(),
            accepts: VecDeque::new(),
            ready: VecDeque::new(),
            gets: VecDeque::new(),
            puts: VecDeque::new(),
            deregs: Vec::new(),
            umr_releases: Vec::new(),
            flushes: Vec::new(),
            deferred_reqs: Vec::new(),
            finished: Vec::new(),
            unpacks: Vec::new(),
            staging: Vec::new(),
            waiting_gets: VecDeque::new(),
            mt_copy,
            stage_cfg: stage::StageCfg {
                frag: ctx.config.rndv_frag_size,
                depth: ctx.config.rndv_pipeline_depth,
            },
            stage_recvs: Vec::new(),
            lane_errors: Vec::new(),
            peer_closes: Vec::new(),
            completions: Default::default(),
            am_events: VecDeque::new(),
            am_pool: Vec::new(),
            stream_ready: VecDeque::new(),
            kept: None,
            release_owed: NO_IFACE,
            am_depth: 0,
            mems: Slab::new(),
            mappings: Default::default(),
            shm_regions: 0,
            vectors: Default::default(),
            rma_queue: VecDeque::new(),
            ep_errors: VecDeque::new(),
            bound_recvs: Vec::new(),
            work: false,
            cur_iface: 0,
            active: SmallVec::new(),
            poll_one: NO_IFACE,
            on_demand: Vec::new(),
            tick: 0,
            stats: WorkerStats::default(),
            queues_armed: false,
        };
        Ok(Worker {
            ctx: Arc::clone(ctx),
            ifaces,
            core,
            epoll,
            signal,
            sock: listener::Sockets::default(),
            am_handlers: Vec::new(),
            queues: Slab::new(),
            channels: Slab::new(),
            channel_gen: 0,
            queue_kick: None,
            queue_gen: 0,
        })
    }

    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// This worker's address, for peers' `ep_create` (`ucp_worker_get_address`).
    pub fn address(&self) -> &[u8] {
        &self.core.address
    }

    /// The transports this worker opened, as `tl/device`.
    pub fn transports(&self) -> Vec<String> {
        self.core
            .info
            .iter()
            .map(|i| format!("{}/{}", i.tl, i.device))
            .collect()
    }

    pub fn stats(&self) -> WorkerStats {
        self.core.stats
    }

    /// A description of the worker's state: endpoints, live requests, queues (for
    /// diagnosing a stuck program, like `ucp_worker_print_info`).
    pub fn dump_state(&self) -> String {
        use std::fmt::Write;
        let c = &self.core;
        let mut s = format!("{self:?}\n{:?}\n", c.stats);
        for (i, e) in c.eps.iter() {
            let _ = writeln!(
                s,
                "ep {i}: remote {:#x}/{:?} failed {:?} queue {} outstanding {}",
                e.remote_uuid,
                e.remote_id,
                e.failed,
                e.queue.len(),
                e.outstanding
            );
        }
        for (id, r) in c.reqs.iter() {
            let _ = writeln!(s, "req {:#x}: {:?}", id.0, r.state);
        }
        let _ = writeln!(s, "direct receives {}", c.direct.len());
        let _ = writeln!(
            s,
            "ctrl {} ready {} gets {} puts {} flushes {} rma {} am events {} work {}",
            c.eps.iter().map(|(_, e)| e.ctrl.len()).sum::<usize>(),
            c.ready.len(),
            c.gets.len(),
            c.puts.len(),
            c.flushes.len(),
            c.rma_queue.len(),
            c.am_events.len(),
            c.work
        );
        s
    }

    /// Makes progress on every interface and on the protocols; returns the number of
    /// events handled (`ucp_worker_progress`).
    ///
    /// Inlined into the caller's polling loop: when one interface is in use and nothing is
    /// queued, an empty poll is that interface's `progress` and a few loads. Half of a
    /// polling loop's length is, on average, added to the time a message waits to be
    /// seen (docs/ucp.md, workers and progress).
    #[inline(always)]
    pub fn progress(&mut self) -> usize {
        self.core.tick = self.core.tick.wrapping_add(1);
        if let Some(i) = self.core.lone_iface(&self.sock, self.core.tick) {
            self.release_if_owed();
            self.core.cur_iface = i;
            let mut n = self.ifaces[i].progress(&mut self.core);
            if self.core.kept.is_some() {
                n += self.dispatch_kept();
            }
            if !self.core.on_demand.is_empty() {
                n += self.poll_on_demand();
            }
            if self.core.work || !self.core.am_events.is_empty() {
                n += self.progress_protocols();
            }
            return n;
        }
        self.progress_general()
    }

    /// An empty [`progress`](Self::progress), when that is all there is to do: true when
    /// the one interface in use is posix and no message waits on it, nothing else is due,
    /// and `quiet` (the caller's own condition) holds; the call is then counted as
    /// `progress` counts it. False, having changed nothing, when `progress` must run.
    /// Asked before `progress` by a caller that polls in a loop while its CPU is shared
    /// ([`cpu_shared`](Self::cpu_shared)), so that an empty poll is a few loads and no
    /// frame for the message path (`ucp_worker_progress` in OpenMPI's one-core ping-pong:
    /// 199 -> 114 instructions per call, 2026-11-28). Self's queue and
    /// then the FIFO are looked at first, so that a poll that finds a message pays for
    /// little of this before `progress` runs.
    #[inline(always)]
    pub fn progress_idle(&mut self, quiet: impl FnOnce() -> bool) -> bool {
        let Worker {
            ifaces, core, sock, ..
        } = self;
        if !on_demand_quiet(core, ifaces) {
            return false;
        }
        let Some(uct::OpenIface::Posix(posix)) = ifaces.get_mut(usize::from(core.poll_one)) else {
            return false;
        };
        let tick = core.tick.wrapping_add(1);
        if !posix.idle()
            || core.lone_iface(sock, tick).is_none()
            || core.release_owed != NO_IFACE
            || core.kept.is_some()
            || core.has_reports(sock)
            || !quiet()
        {
            return false;
        }
        posix.poll_idle();
        core.tick = tick;
        true
    }

    /// Progresses the on-demand interfaces in use that have work.
    #[inline]
    fn poll_on_demand(&mut self) -> usize {
        let mut n = 0;
        for k in 0..self.core.on_demand.len() {
            let i = usize::from(self.core.on_demand[k]);
            if self.ifaces[i].has_work() {
                self.core.cur_iface = i;
                n += self.ifaces[i].progress(&mut self.core);
                if self.core.kept.is_some() {
                    n += self.dispatch_kept();
                }
            }
        }
        n
    }

    /// `progress` with several interfaces in use, queued work, or the periodic look at
    /// the idle interfaces.
    #[inline(never)]
    fn progress_general(&mut self) -> usize {
        self.release_if_owed();
        let mut n = if self.core.tick.is_multiple_of(IDLE_POLL_EVERY) {
            self.watch_cpu_share();
            self.progress_all_ifaces()
        } else {
            let mut n = 0;
            for k in 0..self.core.active.len() {
                let i = usize::from(self.core.active[k]);
                self.core.cur_iface = i;
                n += self.ifaces[i].progress(&mut self.core);
                if self.core.kept.is_some() {
                    n += self.dispatch_kept();
                }
            }
            n + self.poll_on_demand()
        };
        if self.core.work || !self.core.am_events.is_empty() || self.sock.active() {
            n += self.progress_protocols();
        }
        n
    }

    /// Follows whether the progressing thread shares its CPU with other busy threads
    /// (`ucs::sched`, a reading every 10 ms at most). While it does, the processes it
    /// talks to on this host most likely take turns on the same cores, and three things
    /// that pay off with a core each are turned off: the split rendezvous, whose second
    /// half waits for the sender's next turn; the pause between posix spin-wait polls,
    /// which makes each poll five times longer and so delays the point where an MPI
    /// library's wait loop yields its turn (docs/uct.md); and the
    /// endpoints' measured choice between eager and rendezvous, whose samples then
    /// measure the scheduler (`proto::tune`). The posix receive FIFO also
    /// shrinks to its compact ring, whose cells the processes taking turns on a core do
    /// not push out of its caches (docs/uct.md).
    fn watch_cpu_share(&mut self) {
        let Some(cpu) = &mut self.core.cpu else {
            return;
        };
        let was = (cpu.shared(), cpu.crowded());
        let shared = cpu.update(ucs::time::now_ns());
        if (shared, cpu.crowded()) == was {
            return;
        }
        use crate::proto::tune::{CROWDED_EAGER_MAX, SHARED_EAGER_MAX};
        self.core.shared_eager_max = match (shared, cpu.crowded()) {
            (false, _) => 0,
            (true, false) => SHARED_EAGER_MAX,
            (true, true) => CROWDED_EAGER_MAX,
        };
        if shared == was.0 {
            return;
        }
        self.core.split_thresh = if shared {
            usize::MAX
        } else {
            self.core.split_cfg
        };
        for iface in &mut self.ifaces {
            if let OpenIface::Posix(p) = iface {
                p.set_spin_pause(!shared);
                p.set_compact_ring(shared);
            }
        }
    }

    /// Fails the endpoints another lane found dead (`Core::lane_errors`), each once its AM
    /// lane has been read dry: a peer that sent its last messages and exited has them
    /// delivered before its endpoint fails, whichever transport noticed first (cma checks
    /// its peers' liveness on its own; the peer's last message may still sit in the
    /// posix FIFO).
    #[cold]
    #[inline(never)]
    fn fail_after_drain(&mut self) -> usize {
        /// Progress calls of the AM lane at most: it is only read while it delivers.
        const DRAIN_POLLS: usize = 64;
        let mut n = 0;
        for (ep, status) in std::mem::take(&mut self.core.lane_errors) {
            let Some(i) = self
                .core
                .eps
                .get(ep)
                .filter(|e| e.failed.is_none())
                .map(|e| e.am.iface)
            else {
                continue;
            };
            for _ in 0..DRAIN_POLLS {
                self.release_if_owed();
                self.core.cur_iface = i;
                let mut k = self.ifaces[i].progress(&mut self.core);
                if self.core.kept.is_some() {
                    k += self.dispatch_kept();
                }
                n += k;
                if k == 0 {
                    break;
                }
            }
            wireup::fail_ep(&mut self.core, ep, status, wireup::Failure::Error);
            n += 1;
        }
        n
    }

    /// Lets the interface whose kept message was handled, if any, reuse its memory.
    #[inline(always)]
    fn release_if_owed(&mut self) {
        if self.core.release_owed != NO_IFACE {
            self.release_owed();
        }
    }

    #[cold]
    #[inline(never)]
    fn release_owed(&mut self) {
        let i = std::mem::replace(&mut self.core.release_owed, NO_IFACE);
        if let Some(iface) = self.ifaces.get_mut(usize::from(i)) {
            iface.am_release();
        }
    }

    /// Progresses every interface, the idle ones too; one that delivered something joins
    /// the active ones.
    #[inline(never)]
    fn progress_all_ifaces(&mut self) -> usize {
        let mut n = 0;
        for i in 0..self.ifaces.len() {
            self.core.cur_iface = i;
            let k = self.ifaces[i].progress(&mut self.core);
            if k > 0 {
                self.core.mark_active(i);
            }
            if self.core.kept.is_some() {
                n += self.dispatch_kept();
            }
            n += k;
        }
        n
    }

    /// Queued protocol actions, active-message handlers and sockets: out of the polling
    /// loop's way when there is nothing of the kind to do.
    #[inline(never)]
    fn progress_protocols(&mut self) -> usize {
        let mut n = 0;
        if !self.core.lane_errors.is_empty() {
            n += self.fail_after_drain();
        }
        if self.core.work {
            n += self.run_actions();
        }
        if !self.core.am_events.is_empty() {
            n += self.dispatch_am();
        }
        if self.sock.active() {
            listener::poll_sockets(self);
        }
        if self.core.queues_armed {
            n += self.progress_queues();
            self.core.work |= self.core.queues_armed;
        }
        n
    }

    /// Whether the progressing thread was last found sharing its CPU with other busy
    /// threads (`UCX_SHARED_CPU_ADAPT`): while it does, a caller polling in a loop gains
    /// by asking [`progress_idle`](Self::progress_idle) before `progress`.
    #[inline]
    pub fn cpu_shared(&self) -> bool {
        self.core
            .cpu
            .as_ref()
            .is_some_and(ucs::sched::CpuShare::shared)
    }

    /// Whether a completion, an endpoint failure or a connection request waits to be
    /// taken (`poll_completion`, `poll_ep_error`, `poll_conn_request`).
    #[inline]
    pub fn has_reports(&self) -> bool {
        self.core.has_reports(&self.sock)
    }

    /// Each interface's own counters (`uct::Iface::counters`), by transport name.
    pub fn transport_counters(&self) -> Vec<(&'static str, Vec<(&'static str, u64)>)> {
        self.ifaces
            .iter()
            .zip(&self.core.info)
            .map(|(i, info)| (info.tl, i.counters()))
            .filter(|(_, c)| !c.is_empty())
            .collect()
    }

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

    /// Runs until the request finishes, then frees it and returns its status and info.
    pub fn wait(&mut self, id: ReqId) -> (Status, Option<TagInfo>) {
        loop {
            if let Some(done) = self.request_test(id) {
                return done;
            }
            if self.progress() == 0 {
                std::hint::spin_loop();
            }
        }
    }

    /// A descriptor that becomes readable when `progress` has something to do, after
    /// `arm` succeeded (`ucp_worker_get_efd`): the worker's epoll set of its interfaces'
    /// descriptors, its listener and connection sockets, and its signal. Every worker has
    /// one: one whose interfaces have no descriptor (self alone) still sleeps on it, woken
    /// by `ucp_worker_signal` and its sockets, while `arm` answers `Busy` whenever such an
    /// interface has work.
    pub fn event_fd(&self) -> Option<RawFd> {
        use std::os::fd::AsRawFd;
        Some(self.epoll.as_raw_fd())
    }

    /// Prepares for sleeping on `event_fd` (`ucp_worker_arm`): `Err(Busy)` means there is
    /// work already; progress instead of sleeping.
    pub fn arm(&mut self) -> UcsResult<()> {
        self.release_if_owed();
        // A signal that came before arming is not lost: it is the work found.
        if self.signal.drain()
            || self.core.work
            || !self.core.completions.is_empty()
            || !self.core.ep_errors.is_empty()
            || !self.core.am_events.is_empty()
        {
            return Err(Status::Busy);
        }
        // Each interface arms its own descriptor, or says it has work. One without a
        // descriptor that is driven on demand (self) is busy while it has work; the
        // others without one (cma) produce no events of their own.
        for (i, iface) in self.ifaces.iter_mut().enumerate() {
            match iface.arm() {
                Ok(()) => {}
                Err(Status::Unsupported) => {
                    if self.core.on_demand.contains(&(i as u8)) && iface.has_work() {
                        return Err(Status::Busy);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        // What is readable now is work that has arrived: the descriptors are
        // level-triggered (a tcp socket with unread bytes, a listener with a connection
        // waiting), so they stay readable until progress takes what they hold, and
        // sleeping on them would return at once. Progress first.
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let n = self.epoll.wait(&mut ev, 0).unwrap_or(0);
        if n > 0 {
            if ev[..n].iter().any(|e| e.u64 == SIGNAL_EVENT) {
                self.signal.drain();
            }
            if ev[..n].iter().any(|e| e.u64 == SOCKET_EVENT) {
                self.sock.due = true;
            }
            return Err(Status::Busy);
        }
        Ok(())
    }

    /// Hands `data` to the protocol handlers as if active message `id` had arrived on the
    /// first interface, then runs what the handlers queued: the fuzzing entry for
    /// peer-supplied protocol bytes (`fuzz/`). A malformed message must fail only the
    /// endpoint it names (or be counted in `WorkerStats::malformed`), never panic.
    #[doc(hidden)]
    pub fn deliver_for_fuzzing(&mut self, id: u8, data: &[u8]) {
        use uct::Handler as _;
        self.core.cur_iface = 0;
        self.core.am(id, data);
        self.run_actions();
    }

    /// A handle that wakes this worker from another thread (`ucp_worker_signal`).
    pub fn signaler(&self) -> Signaler {
        Signaler(Arc::clone(&self.signal))
    }

    /// Sleeps until `event_fd` is readable or `timeout_ms` passes (-1: forever)
    /// (`ucp_worker_wait`, after a successful `arm`). Returns whether an event came.
    pub fn wait_event(&mut self, timeout_ms: i32) -> UcsResult<bool> {
        let mut ev = [libc::epoll_event { events: 0, u64: 0 }; 8];
        let n = self
            .epoll
            .wait(&mut ev, timeout_ms)
            .map_err(|_| Status::IoError)?;
        if ev[..n].iter().any(|e| e.u64 == SOCKET_EVENT) {
            self.sock.due = true;
        }
        Ok(n > 0)
    }

    /// Runs the actions the handlers queued; returns how many ran.
    fn run_actions(&mut self) -> usize {
        self.core.work = false;
        let mut n = 0;
        let Worker { ifaces, core, .. } = self;
        while let Some((w, addr)) = core.accepts.pop_front() {
            wireup::accept(ifaces, core, w, addr);
            n += 1;
        }
        if !core.deferred_reqs.is_empty() {
            wireup::deferred_requests(core);
        }
        // Gets and sends first: they queue acknowledgements, sent below in this same call.
        while let Some(id) = core.gets.pop_front() {
            rndv::start_get(ifaces, core, id);
            n += 1;
            if !core.unpacks.is_empty() {
                // Copy what was read into device memory while the next get reads.
                n += rndv::start_unpacks(ifaces, core);
            }
        }
        while let Some(id) = core.puts.pop_front() {
            rndv::start_put_recv(ifaces, core, id);
            n += 1;
        }
        if !core.unpacks.is_empty() {
            n += rndv::start_unpacks(ifaces, core);
        }
        for (i, m) in core.deregs.drain(..) {
            let _ = ifaces[i].md().mem_dereg(&m);
        }
        for (i, name, chunk) in core.umr_releases.drain(..) {
            ifaces[i].umr_release(name, chunk);
        }
        // (Taken and put back, so the vector keeps its capacity.)
        let mut finished = std::mem::take(&mut core.finished);
        for id in finished.drain(..) {
            tag::maybe_finish_send(ifaces, core, id);
            n += 1;
        }
        core.finished = finished;
        // Endpoints that block again are re-queued behind: visit each queued one once.
        for _ in 0..core.ready.len() {
            let Some(ep) = core.ready.pop_front() else {
                break;
            };
            if let Some(e) = core.eps.get_mut(ep) {
                e.in_ready = false;
            }
            if tag::drain_queue(ifaces, core, ep) {
                n += 1;
            }
        }
        // Control messages, each endpoint's in order (a split rendezvous's RTR_SPLIT must
        // reach the sender before the ACK that follows it). An endpoint whose lane is full
        // keeps the rest of its messages and waits for the next pass; the others go on.
        // Queued per endpoint, so that a pass costs what it sends: one queue for all made
        // a target holding the replies to a million small gets walk them all on every
        // progress call while the origin's FIFO was full.
        if !core.put_ack_eps.is_empty() {
            rma::send_put_acks(core);
        }
        let mut blocked = 0;
        for _ in 0..core.ctrl_eps.len() {
            let Some(ep) = core.ctrl_eps.pop_front() else {
                break;
            };
            // The queue is taken out while its messages go (sending needs the core), and
            // messages are moved only once sent: a `Ctrl` is a few hundred bytes.
            let Some(mut q) = core.eps.get_mut(ep).map(|e| std::mem::take(&mut e.ctrl)) else {
                continue;
            };
            let mut held = false;
            while let Some(c) = q.front() {
                match wireup::send_ctrl(ifaces, core, ep, c) {
                    Err(Status::NoResource) => {
                        held = true;
                        break;
                    }
                    Err(e) => log::debug!("ucp: control message to ep {ep} dropped: {e}"),
                    Ok(()) => n += 1,
                }
                q.pop_front();
            }
            // Sending may have ended the endpoint (its messages go with it) or queued more
            // for it (behind these).
            if let Some(e) = core.eps.get_mut(ep) {
                q.append(&mut e.ctrl);
                e.ctrl = q;
                if held {
                    core.ctrl_eps.push_back(ep);
                    blocked += 1;
                } else {
                    e.in_ctrl = !e.ctrl.is_empty();
                    if e.in_ctrl {
                        core.ctrl_eps.push_back(ep);
                    }
                }
            }
        }
        if !core.rma_queue.is_empty() {
            n += rma::progress_queue(ifaces, core);
        }
        for ep in std::mem::take(&mut core.peer_closes) {
            wireup::fail_ep(
                core,
                ep,
                Status::ConnectionReset,
                wireup::Failure::PeerClosed,
            );
            n += 1;
        }
        if !core.flushes.is_empty() {
            n += wireup::progress_flushes(ifaces, core);
        }
        if !core.stage_recvs.is_empty() {
            n += stage::poll_recvs(core);
        }
        if blocked > 0
            || !core.deferred_reqs.is_empty()
            || !core.ready.is_empty()
            || !core.flushes.is_empty()
            || !core.rma_queue.is_empty()
            || !core.stage_recvs.is_empty()
            || core.queues_armed
        {
            core.work = true;
        }
        n
    }
}

/// Whether every on-demand interface in use is known to have nothing to progress without
/// a call: self (in practice the only one) with nothing queued. Any other counts as busy,
/// which sends `progress_idle`'s caller to `progress` (`poll_on_demand` asks it); a call
/// here would give `ucp_worker_progress` a stack frame on every empty poll.
#[inline(always)]
fn on_demand_quiet(core: &Core, ifaces: &[OpenIface]) -> bool {
    for &i in &core.on_demand {
        match ifaces.get(usize::from(i)) {
            Some(OpenIface::SelfTl(s)) if !uct::Iface::has_work(&**s) => {}
            _ => return false,
        }
    }
    true
}

impl Core {
    /// The one interface that `progress` call number `tick` polls, when it polls one
    /// alone: one interface is in use, it is not the call that looks at the idle ones, and
    /// no protocol work or connection is waiting.
    #[inline(always)]
    fn lone_iface(&self, sock: &listener::Sockets, tick: u32) -> Option<usize> {
        (self.poll_one != NO_IFACE
            && !tick.is_multiple_of(IDLE_POLL_EVERY)
            && !self.work
            && self.am_events.is_empty()
            && !sock.active())
        .then_some(usize::from(self.poll_one))
    }

    /// [`Worker::has_reports`], from the parts `Worker::progress_idle` holds.
    #[inline(always)]
    fn has_reports(&self, sock: &listener::Sockets) -> bool {
        !self.completions.is_empty() || !self.ep_errors.is_empty() || sock.has_conn_requests()
    }

    /// Makes interface `i` one that every `progress` call polls.
    pub(crate) fn mark_active(&mut self, i: usize) {
        // Worker::new refuses more than 255 interfaces.
        let on_demand = self
            .info
            .get(i)
            .is_some_and(|f| f.attr.flags.contains(uct::IfaceFlags::ON_DEMAND));
        let i = i as u8;
        if on_demand {
            // Polled beside the others only while it has work (`poll_on_demand`).
            if !self.on_demand.contains(&i) {
                self.on_demand.push(i);
            }
            return;
        }
        if !self.active.contains(&i) {
            self.active.push(i);
            self.poll_one = if self.active.len() == 1 { i } else { NO_IFACE };
        }
    }

    /// Finishes request `id` with `status`: reports it, or frees it when released.
    pub(crate) fn complete(&mut self, id: ReqId, mut status: Status, info: Option<TagInfo>) {
        let Some(r) = self.reqs.get_mut(id) else {
            return;
        };
        // Bytes that landed packed (a device layout's scratch buffer) are unpacked before
        // the receive or get is reported: the message's bytes, not the whole layout.
        match (&mut r.state, status) {
            (Op::Recv(rv), Status::Ok) => {
                let len = info.map_or(rv.expect, |i| i.length);
                if let Err(s) = rv.data.finish_recv(len) {
                    status = s;
                }
            }
            (Op::Rma(o), Status::Ok) => {
                if let Err(s) = o.finish() {
                    status = s;
                }
            }
            _ => {}
        }
        // UMR keys this request used may be dropped from now on.
        let umr = match &mut r.state {
            Op::Recv(rv) => rv.rndv.as_mut().and_then(|x| x.umr.take()),
            Op::Send(s) => s.umr_use.take().map(|u| *u),
            _ => None,
        };
        if let Some(u) = umr {
            self.umr_releases.push(u);
            self.work = true;
        }
        let (ep, carried) = match &r.state {
            Op::Send(s) => (Some(s.ep), false),
            Op::Rma(o) => (Some(o.ep), o.carried),
            _ => (None, false),
        };
        let rma = matches!(r.state, Op::Rma(_));
        if let Some(e) = ep.and_then(|ep| self.eps.get_mut(ep)) {
            e.outstanding = e.outstanding.saturating_sub(1);
            if rma {
                e.rma_ops = e.rma_ops.saturating_sub(1);
            }
            if carried {
                e.rma_carried = e.rma_carried.saturating_sub(1);
                e.rma_order.note(e.rma_carried, e.puts_unacked);
            }
        }
        r.state = Op::Done { status, info };
        if r.notify {
            self.completions.push_back(Completion {
                req: id,
                status,
                info,
                user_data: r.user_data,
            });
        }
        if r.released {
            self.reqs.remove(id);
        }
    }

    /// The layout `hash` from `ep`'s memo cache, refreshed as most recently used.
    pub(crate) fn cached_layout(
        &mut self,
        ep: usize,
        hash: u128,
    ) -> Option<Arc<crate::datatype::DtLayout>> {
        let c = &mut self.eps.get_mut(ep)?.layout_cache;
        let i = c.iter().position(|(h, _)| *h == hash)?;
        let e = c.remove(i)?;
        let l = Arc::clone(&e.1);
        c.push_front(e);
        Some(l)
    }

    /// Decodes a layout a peer sent, checks it against its announced hash, and remembers it.
    pub(crate) fn learn_layout(
        &mut self,
        ep: usize,
        hash: u128,
        bytes: &[u8],
    ) -> Result<Arc<crate::datatype::DtLayout>, Status> {
        let canon = crate::dt::Canon::decode(bytes).map_err(|_| Status::InvalidParam)?;
        let l = crate::datatype::DtLayout::from_canon(canon).map_err(|_| Status::InvalidParam)?;
        if l.hash() != hash || !l.canon().is_ordered() {
            return Err(Status::InvalidParam);
        }
        let cap = self.layout_cache_size;
        let c = &mut self.eps[ep].layout_cache;
        c.retain(|(h, _)| *h != hash);
        c.push_front((hash, Arc::clone(&l)));
        c.truncate(cap);
        Ok(l)
    }

    /// Whether operations other than the one at hand are in flight. A rendezvous receiver
    /// splits the copy with its sender only when neither side has other work: in
    /// `MPI_Sendrecv` or a window of messages both ends are busy with their own copies,
    /// and the split's extra round trip made 32 KiB exchanges twice as slow
    /// (docs/ucp.md, split rendezvous).
    ///
    /// A request that has finished and waits only for the application to release it is
    /// not work: counting those (every slot of the request table) turned the split off in
    /// a ping-pong that frees its send after the next receive, as `ucx_perftest` and
    /// `rucx-perftest` do, and made same-host 2 MiB messages 1.8x slower from 2026-11-26
    /// (commit a56e6bf) until 2026-12-06. The walk stops at the second request in flight;
    /// it runs once per rendezvous of at least `UCX_RNDV_SPLIT_THRESH` bytes.
    pub(crate) fn busy_besides_one(&self) -> bool {
        let mut live = self.direct.len();
        if live > 1 {
            return true;
        }
        for (_, r) in self.reqs.iter() {
            if !matches!(r.state, Op::Done { .. }) {
                live += 1;
                if live > 1 {
                    return true;
                }
            }
        }
        false
    }

    /// A buffer holding `payload`, for an unexpected eager message.
    #[inline]
    pub(crate) fn unexp_data(&mut self, payload: &[u8]) -> UnexpData {
        self.unexp_bufs.take(payload)
    }

    /// Takes back the buffer of an unexpected eager message that was received.
    #[inline]
    pub(crate) fn recycle_unexp(&mut self, v: UnexpData) {
        self.unexp_bufs.give(v);
    }

    pub(crate) fn queue_ctrl(&mut self, ep: usize, c: Ctrl) {
        let Some(e) = self.eps.get_mut(ep) else {
            log::debug!("ucp: control message to ep {ep} dropped: no such endpoint");
            return;
        };
        e.ctrl.push_back(c);
        if !e.in_ctrl {
            e.in_ctrl = true;
            self.ctrl_eps.push_back(ep);
        }
        self.work = true;
    }

    pub(crate) fn mark_ready(&mut self, ep: usize) {
        if let Some(e) = self.eps.get_mut(ep) {
            if !e.in_ready {
                e.in_ready = true;
                self.ready.push_back(ep);
            }
            self.work = true;
        }
    }
}
