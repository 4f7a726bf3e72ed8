//! The state of one operation (a send, a receive, a flush, an RMA operation carried by
//! messages) as the request table holds it, and of the unexpected messages the tag matcher
//! holds: the engine's records that the protocols step through.

use ucs::Status;
use uct::MemH;

use crate::buf::Bounce;
use crate::datatype::DataState;
use crate::dt::Canon;
use crate::proto::am::state::AmHdr;
use crate::proto::rma::state::RmaOp;
use crate::proto::rndv::stage::{RecvStage, SendStage};
use crate::proto::select::Proto;
use crate::proto::wire::{KeyBytes, RtsData, Segs};
use crate::request::ReqId;
use crate::tag::{RecvHandle, TagInfo};

/// Options of a send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SendParams {
    /// Complete only once the receiver has matched the message (`ucp_tag_send_sync_nbx`).
    pub sync: bool,
    /// Reported back with the completion.
    pub user_data: u64,
    /// Report the completion through `Worker::poll_completion`.
    pub notify: bool,
    /// Complete at once or fail with `NoResource` having sent nothing
    /// (`UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL`).
    pub force_imm: bool,
    /// The caller waits for this send's local completion next, as a blocking send does
    /// (`UCP_OP_ATTR_FLAG_FAST_CMPL`). Between eager and rendezvous, such a send takes
    /// whichever the endpoint measured faster for one message alone (`proto::tune`);
    /// any other send in that range is one of several in flight and goes zero-copy by
    /// rendezvous, which moves its bytes once, by the receiver, and leaves both processes'
    /// cores to the rest of the traffic (docs/ucp.md).
    pub fast_cmpl: bool,
}

/// Options of a receive.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecvParams {
    pub user_data: u64,
    pub notify: bool,
    /// Receive only a message that is here whole already (it completes at once); fail
    /// with `NoResource`, posting nothing, otherwise (`UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL`).
    pub force_imm: bool,
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
pub(crate) const UNEXP_BUFS_KEEP: usize = 256;
pub(crate) const UNEXP_BUF_KEEP_MAX: usize = 256 << 10;
pub(crate) const UNEXP_BUFS_KEEP_BYTES: usize = 4 << 20;

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
        rts: Box<RtsData>,
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
    Rma(RmaOp),
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
    pub(crate) am: Option<Box<AmHdr>>,
    /// Bytes of the endpoint's stream (no tag, no message boundary).
    pub(crate) stream: bool,
    /// Timed for the endpoint's eager/rendezvous tuner (`proto::tune`; posted while no
    /// other send of the endpoint was in flight), and when it started (TSC cycles).
    pub(crate) timed: bool,
    pub(crate) t0: u64,
    /// The staged pipeline of device data (`stage`), once begun.
    pub(crate) stage: Option<Box<SendStage>>,
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
    pub(crate) rkey: KeyBytes,
    pub(crate) segs: Segs,
    pub(crate) layout: Option<(u64, Canon)>,
    /// The message offset of the first byte still to write (0 for a put rendezvous not
    /// yet begun).
    pub(crate) offset: usize,
    /// UMR: the chunk and the receiver's chunk keys (`rkey` and `segs` are then empty).
    pub(crate) umr: Option<(u64, Vec<u32>)>,
}

impl PutTarget {
    /// The receiver's segments, under the key `rkey`, to write from message offset
    /// `offset` on (RTR_PUT, RTR_SPLIT).
    pub(crate) fn segs(rkey: KeyBytes, segs: Segs, offset: usize) -> Box<PutTarget> {
        Box::new(PutTarget {
            rkey,
            segs,
            layout: None,
            offset,
            umr: None,
        })
    }

    /// The receiver's layout `canon` placed at `origin`, under the key `rkey` of its span,
    /// to write from message offset `offset` on (RTR_SPLIT_LAYOUT).
    pub(crate) fn layout(
        rkey: KeyBytes,
        origin: u64,
        canon: Canon,
        offset: usize,
    ) -> Box<PutTarget> {
        Box::new(PutTarget {
            rkey,
            segs: Segs::new(),
            layout: Some((origin, canon)),
            offset,
            umr: None,
        })
    }

    /// The receiver's UMR keys, one per `chunk` bytes (RTR_UMR).
    pub(crate) fn umr(chunk: u64, keys: Vec<u32>) -> Box<PutTarget> {
        Box::new(PutTarget {
            rkey: KeyBytes::new(),
            segs: Segs::new(),
            layout: None,
            offset: 0,
            umr: Some((chunk, keys)),
        })
    }
}

#[derive(Debug)]
pub(crate) struct RecvOp {
    pub(crate) data: DataState,
    pub(crate) handle: Option<RecvHandle>,
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

/// The part of a receive that only rendezvous uses. Boxed, so that an eager receive's
/// request stays small (posting moves it into the request table) and completing one
/// drops nothing but this empty `Option`.
#[derive(Debug, Default)]
pub(crate) struct RecvRndv {
    /// Outstanding get operations, and the RTS to read for a pending get.
    pub(crate) gets: u32,
    pub(crate) rts: Option<RtsData>,
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
    pub(crate) stage: Option<Box<RecvStage>>,
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
