//! The engine's state: the [`Worker`] and its `Core` (every piece of protocol state, the
//! interfaces' event handler), the endpoints and their lanes, the control messages waiting
//! for them. Below the protocols, which step through this state, and below the driver
//! (`worker/mod.rs`), which progresses it.

use std::collections::{HashMap, VecDeque};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

use slab::Slab;
use smallvec::SmallVec;
use ucs::{Status, UcsResult};
use uct::component::DeviceKind;
use uct::{EpId, IfaceAttr, MemH, OpenIface};

use super::op::{FragBuf, FragTarget, Op, UmrUse, Unexp, UnexpData, UnexpPool};
use crate::address::WorkerAddress;
use crate::buf::{self, Bounce};
use crate::channel::state::Channel;
use crate::context::Context;
use crate::datatype::VectorCache;
use crate::dt::{Canon, DtLayout};
use crate::proto::am::state::{AmEvent, KeptAm, QueuedAm};
use crate::proto::rma::state::{LightGet, MappingCache, MemReg, Order};
use crate::proto::rndv::stage::StageCfg;
use crate::proto::select::Thresholds;
use crate::proto::tune::Tuner;
use crate::proto::wire::{KeyBytes, Segs, Wireup};
use crate::queue::state::{Kick, Queue};
use crate::request::{Completion, CompletionQueue, DirectRecvs, EpHandle, ReqId, Requests};
use crate::tag::{TagInfo, TagMatcher};

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
    /// Gets posted without a request (`Worker::rma_light`).
    pub light_gets: u64,
    /// Puts posted without a request (`Worker::rma_light`).
    pub light_puts: u64,
    /// Atomics executed by the network device (`UCX_ATOMIC_MODE=device`).
    pub amo_device: u64,
    /// Protocol messages refused as malformed.
    pub malformed: u64,
    /// Keepalive messages sent (`UCX_KEEPALIVE_INTERVAL`).
    pub keepalives: u64,
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
    pub fn counters(&self) -> [(&'static str, u64); 29] {
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
            ("keepalives", self.keepalives),
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
    /// The client side of a socket-address connection, with the connection's number
    /// (`Sockets::connecting`): paired only by the wire-up request that names it (the
    /// server's), never by another endpoint's request to this worker.
    pub(crate) conn: Option<u64>,
    /// Its lanes reach this worker, not the peer: a socket-address client whose server
    /// has not sent its address yet (`listener`). Nothing is sent on them; sends wait in
    /// the queue.
    pub(crate) provisional: bool,
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
    /// The first error reported for an operation that had no request left to carry it
    /// (a put complete once sent, a get posted by `ucp_get_nbi`), for the next flush of
    /// the endpoint.
    pub(crate) rma_error: Option<Status>,
    /// RMA operations of this endpoint not yet complete, and those of them carried by
    /// messages.
    pub(crate) rma_ops: u32,
    pub(crate) rma_carried: u32,
    /// `rma_carried + puts_unacked`, readable without the worker: while it is not zero,
    /// puts and gets that would reach the target at once (a mapped copy, the memory lane)
    /// go by messages behind the earlier ones instead (`rma::Order`).
    pub(crate) rma_order: Order,
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
    pub(crate) layout_cache: VecDeque<(u128, Arc<DtLayout>)>,
    /// A layout arriving in LAYOUT_PART messages: its hash, total bytes, and the bytes so
    /// far.
    pub(crate) layout_in: Option<Box<(u128, usize, Vec<u8>)>>,
    /// UMR chunk-key lists, kept in step on both sides (`proto::umr`): the ids this side
    /// sent with their lists as a receiver, and the lists it was sent as a sender.
    pub(crate) umr_taught: VecDeque<u64>,
    pub(crate) umr_known: VecDeque<(u64, Vec<u32>)>,
    /// Measured eager-versus-rendezvous choice (same-host endpoints with an automatic
    /// rendezvous threshold, see `proto::tune`).
    pub(crate) tuner: Option<Box<Tuner>>,
}

/// The bytes of a get's or an atomic's reply: inline up to 64 (no allocation per small
/// get on the target; `Ctrl` is larger than that already, for its rendezvous variants).
pub(crate) type ReplyBytes = SmallVec<[u8; INLINE_REPLY]>;
pub(crate) const INLINE_REPLY: usize = 64;

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
        rkey: KeyBytes,
        segs: Segs,
    },
    /// Split rendezvous: the receiver reads the bytes before `offset`, the sender writes
    /// the rest into `segs`.
    RtrSplit {
        sreq: u64,
        rreq: u64,
        offset: u64,
        rkey: KeyBytes,
        segs: Segs,
    },
    /// Split rendezvous of a receiver whose data is a layout: the sender writes the bytes
    /// from `offset` on into that layout (`layout`, encoded, placed at `origin`).
    /// A layout too large for one message goes first in LAYOUT_PART messages, and the
    /// request names it by `hash`.
    RtrSplitLayout {
        sreq: u64,
        rreq: u64,
        offset: u64,
        rkey: KeyBytes,
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
        data: ReplyBytes,
    },
    /// A successful get's reply whose bytes are read from the target's host memory when
    /// the reply is sent (`len` bytes at `addr`, a range the handler checked): written
    /// straight into the transport's buffer, without a copy of its own. It lives only
    /// until the next message is handled or the control messages of this pass have gone
    /// ([`Core::materialize_replies`]), so that a put or atomic handled after the get,
    /// or anything the application does once progress returns, cannot change what the
    /// get returns nor unmap what it reads.
    RmaReplyAt {
        req: u64,
        offset: u64,
        addr: u64,
        len: usize,
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
    /// A wire-up request; `dst` names the peer's endpoint it pairs (the client endpoint
    /// of a socket-address connection), `u32::MAX` lets the peer choose.
    WireupReq {
        dst: u32,
    },
    /// `WIREUP_KEEPALIVE` (`worker::keepalive`).
    Keepalive,
}

/// `Core::poll_one` when not exactly one interface is active (`Worker::new` refuses more
/// than 255 interfaces, so no index is this).
pub(crate) const NO_IFACE: u8 = u8::MAX;

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
    pub(crate) split_cfg: usize,
    /// Whether the progressing thread waits for a CPU (`Worker::watch_cpu_share`; `None`
    /// with `UCX_SHARED_CPU_ADAPT=n`).
    pub(crate) cpu: Option<ucs::sched::CpuShare>,
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
    pub(crate) direct: DirectRecvs,
    pub(crate) matcher: TagMatcher<Unexp, ReqId>,
    pub(crate) frags: HashMap<(usize, u64), FragTarget>,
    pub(crate) unexp_frags: Slab<FragBuf>,
    /// Payload buffers of received unexpected eager messages, for the next ones.
    pub(crate) unexp_bufs: UnexpPool,
    /// Endpoints with control messages waiting (`Ep::ctrl`), each once.
    pub(crate) ctrl_eps: VecDeque<usize>,
    /// Endpoints whose peer's puts await an acknowledgement (`Ep::put_acks`).
    pub(crate) put_ack_eps: Vec<usize>,
    /// Buffers of sent replies larger than `ReplyBytes` holds inline, for the next ones
    /// (`reply_bytes`).
    pub(crate) reply_pool: Vec<Vec<u8>>,
    /// `Ctrl::RmaReplyAt` messages queued (at most; a dropped one may leave it high).
    pub(crate) lazy_replies: usize,
    /// Wire-up requests from peers, to answer (their decoded message and address).
    pub(crate) accepts: VecDeque<(Wireup, WorkerAddress)>,
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
    pub(crate) stage_cfg: StageCfg,
    pub(crate) stage_recvs: Vec<ReqId>,
    /// Endpoint failures a lane other than the endpoint's AM lane found, failed once that
    /// lane has delivered what it holds (`Worker::fail_after_drain`).
    pub(crate) lane_errors: Vec<(usize, Status)>,
    /// Endpoints whose peer closed (`WIREUP_CLOSE`), failed once what arrived before the
    /// notice is done with (an ACK's send completes first).
    pub(crate) peer_closes: Vec<usize>,
    pub(crate) completions: CompletionQueue,
    /// Active messages waiting for their handlers, and buffers to reuse for them.
    pub(crate) am_events: VecDeque<QueuedAm>,
    pub(crate) am_pool: Vec<Vec<u8>>,
    /// Endpoints whose stream has bytes no receive took yet, for `ucp_stream_worker_poll`.
    pub(crate) stream_ready: VecDeque<usize>,
    /// The active message an interface kept in place during this `progress` call.
    pub(crate) kept: Option<KeptAm>,
    /// The interface whose kept message's handler has returned: released at the start of
    /// the next `progress` (or `arm`), off the path from a message to the reply it causes.
    pub(crate) release_owed: u8,
    /// How many AM handlers of this worker are running (nested when a handler progresses).
    pub(crate) am_depth: u32,
    /// Mapped regions, and RMA operations waiting to send their messages.
    pub(crate) mems: Slab<MemReg>,
    /// Vectors compiled for iov lists of that shape (`datatype::as_vector`).
    pub(crate) vectors: VectorCache,
    /// How many of `mems` are worker-allocated shared memory.
    pub(crate) shm_regions: usize,
    /// Peers' shared-memory regions mapped here, by (pid, fd, region nonce).
    pub(crate) mappings: MappingCache,
    pub(crate) rma_queue: VecDeque<ReqId>,
    /// Small gets posted without a request, by the slot their reply names
    /// (`Worker::rma_light`), and the generation the next one takes.
    pub(crate) light_gets: Slab<LightGet>,
    pub(crate) light_gen: u32,
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
    /// (`crate::queue`); keeps `work` set.
    pub(crate) queues_armed: bool,
    /// The smallest `max_bcopy` among the interfaces that carry active messages: what a
    /// send posted before its endpoint's lanes are known may count on
    /// (`Thresholds::before_connect`).
    pub(crate) min_am_bcopy: usize,
}

/// A worker. Driven by one thread at a time (`&mut self`); wrap it in a mutex for the
/// serialized thread mode.
pub struct Worker {
    pub(crate) ctx: Arc<Context>,
    pub(crate) ifaces: Vec<OpenIface>,
    pub(crate) core: Core,
    pub(crate) epoll: ucs::wakeup::Epoll,
    /// Wakes a sleeper from any thread (`ucp_worker_signal`); in the epoll set.
    pub(crate) signal: Arc<ucs::wakeup::EventFd>,
    /// `arm` succeeded and no `progress` came since: a thread may be asleep on the
    /// descriptor (`Worker::wake_if_asleep`).
    pub(crate) armed: bool,
    /// The keepalive rounds (`UCX_KEEPALIVE_INTERVAL`), when on and a network transport
    /// is in use.
    pub(crate) keepalive: Option<Keepalive>,
    pub(crate) sock: Sockets,
    pub(crate) am_handlers: Vec<Option<AmHandler>>,
    /// The channels (`crate::channel`) and the generation of the last one opened
    /// (`ChannelHandle`).
    pub(crate) channels: Slab<Channel>,
    pub(crate) channel_gen: u32,
    /// The stream-triggered queues (`crate::queue`), and their turn in `progress` and at
    /// the worker's drop, registered with the first queue.
    pub(crate) queues: Slab<Queue>,
    pub(crate) queue_hooks: Option<QueueHooks>,
    /// Wakes the queues' progress thread, when there is one, on `enqueue_start`.
    pub(crate) queue_kick: Option<Arc<Kick>>,
    /// The generation of the last queue made (`QueueId`).
    pub(crate) queue_gen: u32,
}

/// The turn in the worker's `progress` and drop of the stream-triggered queues
/// (`crate::queue`), a feature built on the worker's API above the driver: `progress`
/// fires the operations their starts released and collects the finished ones (called by
/// the driver's slow path while `Core::queues_armed`), `drop` destroys what is left when
/// the worker goes. Registered by the first `queue_create`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueHooks {
    pub(crate) progress: fn(&mut Worker) -> usize,
    pub(crate) drop: fn(&mut Worker),
}

/// A handler: called with the worker and the event.
pub type AmHandler = Box<dyn for<'a> FnMut(&mut Worker, AmEvent<'a>) + Send>;

/// What a protocol's call needs of the driver (`worker/mod.rs`), which sits above the
/// protocols: the actions that handling a message queued (an acknowledgement, a rendezvous
/// request, a wire-up reply) run before the call returns ([`Worker::answer_now`]). A trait,
/// so that a protocol reaches the driver's loop without naming the driver; implemented
/// once, for [`Worker`], and called statically.
pub(crate) trait RunActions {
    /// Runs the actions the handlers queued; returns how many ran.
    fn run_actions(&mut self) -> usize;
}

impl Worker {
    /// Sends what matching a posted receive queued (a synchronous send's acknowledgement, a
    /// rendezvous request) before the posting call returns, as UCX does: the application
    /// may not call into the library again for a long time, and the sender waits for it.
    #[cold]
    #[inline(never)]
    pub(crate) fn answer_now(&mut self) {
        RunActions::run_actions(self);
    }

    /// Lets the interface whose kept message was handled, if any, reuse its memory.
    #[inline(always)]
    pub(crate) fn release_if_owed(&mut self) {
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
}

/// A connection request waiting for the application's `accept` or `reject`.
#[derive(Debug)]
pub struct ConnRequest {
    /// The client's socket address.
    pub client: SocketAddr,
    /// The address of the listener that accepted it (a worker may listen on several).
    pub listener: SocketAddr,
    pub(crate) worker_addr: Vec<u8>,
    /// The client's endpoint for this connection, which the server's endpoint pairs.
    pub(crate) client_ep: u32,
    pub(crate) stream: TcpStream,
}

#[derive(Debug)]
pub(crate) struct Handshake {
    pub(crate) stream: TcpStream,
    pub(crate) client: SocketAddr,
    pub(crate) listener: SocketAddr,
    pub(crate) buf: Vec<u8>,
    /// The client's worker address, once its hello is complete and answered; the
    /// handshake then waits for the id of the client's endpoint.
    pub(crate) worker_addr: Option<Vec<u8>>,
}

/// The keepalive rounds' state (`worker::keepalive`).
#[derive(Debug)]
pub(crate) struct Keepalive {
    pub(crate) every_ns: u64,
    pub(crate) num_eps: usize,
    pub(crate) next_ns: u64,
    /// The endpoint slot the next round starts from.
    pub(crate) cursor: usize,
    /// Set to the next round while the worker sleeps; in its epoll set.
    pub(crate) timer: nix::sys::timerfd::TimerFd,
}

/// A client connection whose server has not sent its address yet (`listener`).
#[derive(Debug)]
pub(crate) struct Connecting {
    /// Its endpoint, and the connection's number (`Ep::conn`): the endpoint may have been
    /// closed, and its slot reused, meanwhile.
    pub(crate) ep: usize,
    pub(crate) conn: u64,
    pub(crate) stream: TcpStream,
    /// The hello, until the socket is connected and it went out.
    pub(crate) hello: Option<Vec<u8>>,
    /// The server's reply so far.
    pub(crate) got: Vec<u8>,
    /// Gives up then (`ucs::time::now_ns`).
    pub(crate) deadline_ns: u64,
}

/// The socket-level state of a worker.
#[derive(Debug, Default)]
pub(crate) struct Sockets {
    pub(crate) listeners: Vec<TcpListener>,
    pub(crate) handshakes: Vec<Handshake>,
    pub(crate) requests: VecDeque<ConnRequest>,
    /// Client connections on their way to the server's address: each with its endpoint.
    pub(crate) connecting: Vec<Connecting>,
    /// Client endpoints (and their connection's number) waiting for the server's decision.
    pub(crate) pending: Vec<(usize, u64, TcpStream)>,
    /// The number of the last client connection made.
    pub(crate) conns: u64,
    pub(crate) tick: u32,
    /// A socket became readable: look at them at the next progress call.
    pub(crate) due: bool,
}

impl Sockets {
    pub(crate) fn active(&self) -> bool {
        !self.listeners.is_empty() || !self.pending.is_empty() || !self.connecting.is_empty()
    }

    /// Connection requests received (complete handshakes) and not yet taken.
    pub(crate) fn has_conn_requests(&self) -> bool {
        !self.requests.is_empty()
    }
}

/// The epoll data of the worker's client/server sockets (`listener`).
pub(crate) const SOCKET_EVENT: u64 = u64::MAX - 1;

impl Core {
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
                if r.released && status != Status::Ok && e.rma_error.is_none() {
                    e.rma_error = Some(status);
                }
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
            // Its state is `Done` now: nothing to drop.
            self.reqs.remove_plain(id, |s| matches!(s, Op::Done { .. }));
        }
    }

    /// Ends receive `id` with `status` if it is still waiting in the matcher (has matched
    /// no message yet); leaves anything else alone.
    pub(crate) fn cancel_unmatched(&mut self, id: ReqId, status: Status) {
        let h = match self.reqs.get(id).map(|r| &r.state) {
            Some(Op::Recv(r)) => r.handle,
            _ => None,
        };
        if let Some(h) = h {
            if self.matcher.cancel(h).is_some() {
                self.complete(id, status, None);
            }
        }
    }

    /// The layout `hash` from `ep`'s memo cache, refreshed as most recently used.
    pub(crate) fn cached_layout(&mut self, ep: usize, hash: u128) -> Option<Arc<DtLayout>> {
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
    ) -> Result<Arc<DtLayout>, Status> {
        let canon = Canon::decode(bytes).map_err(|_| Status::InvalidParam)?;
        let l = DtLayout::from_canon(canon).map_err(|_| Status::InvalidParam)?;
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

    /// Whether operations other than receives are in flight: a rendezvous receiver splits
    /// the copy with its sender only when this is false. In `MPI_Sendrecv`, a
    /// bidirectional window or any exchange where both sides copy their own messages, the
    /// receiver has a send of its own in flight, the second core is already busy, and the
    /// split's extra round trip made 32 KiB exchanges twice as slow (docs/ucp.md, split
    /// rendezvous). Other receives do not count: in a window of messages in one direction
    /// the sender has nothing to copy, and writing tails is its share (1 MiB `tag_bw`
    /// 43 → 70 GB/s against counting them, as from 2026-11-26 until 2026-12-07).
    ///
    /// A request that has finished and waits only for the application to release it is
    /// not work: counting those turned the split off in a ping-pong that frees its send
    /// after the next receive, as `ucx_perftest` and `rucx-perftest` do, and made
    /// same-host 2 MiB messages 1.8x slower from 2026-11-26 (commit a56e6bf) until
    /// 2026-12-06. The walk runs once per rendezvous of at least `UCX_RNDV_SPLIT_THRESH`
    /// bytes.
    pub(crate) fn busy_besides_receiving(&self) -> bool {
        self.reqs
            .iter()
            .any(|(_, r)| !matches!(r.state, Op::Done { .. } | Op::Recv(_)))
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

    /// `src` as the bytes of a reply: inline when small, else in a buffer of the pool.
    /// A target answers a window of gets in bursts; allocating each reply made glibc's
    /// malloc and free leave their per-thread cache (about 260 instructions a reply of 512
    /// bytes, against about 360 for UCX 1.13's whole handler; callgrind, 2026-12-07).
    pub(crate) fn reply_bytes(&mut self, src: &[u8]) -> ReplyBytes {
        if src.len() <= INLINE_REPLY {
            return ReplyBytes::from_slice(src);
        }
        let mut v = self.reply_pool.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(src);
        ReplyBytes::from_vec(v)
    }

    /// [`reply_bytes`](Self::reply_bytes) of `len` bytes of host memory at `addr`, a range
    /// a handler checked against the region table.
    pub(crate) fn reply_from(&mut self, addr: u64, len: usize) -> ReplyBytes {
        buf::with_raw(addr, len, |src| self.reply_bytes(src))
    }

    /// Turns every queued `Ctrl::RmaReplyAt` into a `Ctrl::RmaReply` holding a copy of
    /// its bytes now: called before a message other than a get is handled, after a pass
    /// of control messages left some queued (a full lane), and before a region is
    /// unmapped.
    #[cold]
    #[inline(never)]
    pub(crate) fn materialize_replies(&mut self) {
        self.lazy_replies = 0;
        // Every endpoint with control messages queued is in `ctrl_eps` (outside the pass
        // that sends them, which calls this only after it).
        for i in 0..self.ctrl_eps.len() {
            let ep = self.ctrl_eps[i];
            let Some(e) = self.eps.get_mut(ep) else {
                continue;
            };
            let mut q = std::mem::take(&mut e.ctrl);
            for c in q.iter_mut() {
                if let Ctrl::RmaReplyAt {
                    req,
                    offset,
                    addr,
                    len,
                } = *c
                {
                    let data = self.reply_from(addr, len);
                    *c = Ctrl::RmaReply {
                        req,
                        offset,
                        status: Status::Ok,
                        data,
                    };
                }
            }
            if let Some(e) = self.eps.get_mut(ep) {
                e.ctrl = q;
            }
        }
    }

    /// Takes back the buffer of a control message that was sent or dropped.
    pub(crate) fn recycle_ctrl(&mut self, c: Ctrl) {
        if let Ctrl::RmaReplyAt { .. } = c {
            self.lazy_replies = self.lazy_replies.saturating_sub(1);
            return;
        }
        /// Buffers kept, and the largest kept: a burst of replies to a window of gets
        /// (osu's 64) reuses them; what a rare larger reply allocated goes.
        const POOL: usize = 256;
        const LARGEST: usize = 64 << 10;
        if let Ctrl::RmaReply { data, .. } = c {
            if data.spilled() && data.capacity() <= LARGEST && self.reply_pool.len() < POOL {
                self.reply_pool.push(data.into_vec());
            }
        }
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

    /// Checks that `ep` names a live endpoint of ours.
    pub(crate) fn live_ep(&self, ep: u32) -> Result<usize, Bad> {
        let i = ep as usize;
        match self.eps.get(i) {
            Some(e) if e.failed.is_none() => Ok(i),
            // Closed (its slot is free) or failed: late, not malformed.
            _ => Err(Bad::Late),
        }
    }
}

/// Why a protocol message was not acted on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// Addressed to an endpoint that is closed or failed: a message that crossed the close
    /// (a wire-up reply, an acknowledgement). Dropped quietly and counted.
    Late,
    /// Malformed or inconsistent; from endpoint `ep` when the message names a live one.
    Malformed(Option<usize>),
}

pub(crate) type Res = Result<(), Bad>;

/// The parts of the core that a send's protocol step touches besides the request itself,
/// which is borrowed from [`Core::reqs`] meanwhile (`eager::push_send` and the rendezvous
/// steps it calls, `rndv::send`).
pub(crate) struct SendCx<'a> {
    pub(crate) eps: &'a mut Slab<Ep>,
    pub(crate) info: &'a [IfaceInfo],
    pub(crate) stats: &'a mut WorkerStats,
    pub(crate) split_thresh: usize,
    pub(crate) mems: &'a Slab<MemReg>,
    pub(crate) shm_regions: usize,
    pub(crate) mappings: &'a mut MappingCache,
    pub(crate) stage_cfg: StageCfg,
    pub(crate) ctrl_eps: &'a mut VecDeque<usize>,
    pub(crate) work: &'a mut bool,
}

impl Core {
    /// The request table, and the rest of the core a send's step uses ([`SendCx`]).
    #[inline(always)]
    pub(crate) fn send_parts(&mut self) -> (&mut Requests<Op>, SendCx<'_>) {
        let Core {
            reqs,
            eps,
            info,
            stats,
            split_thresh,
            mems,
            shm_regions,
            mappings,
            stage_cfg,
            ctrl_eps,
            work,
            ..
        } = self;
        let cx = SendCx {
            eps,
            info,
            stats,
            split_thresh: *split_thresh,
            mems,
            shm_regions: *shm_regions,
            mappings,
            stage_cfg: *stage_cfg,
            ctrl_eps,
            work,
        };
        (reqs, cx)
    }
}

/// A transport call's outcome, with `NoResource` (the transport is full: try again later)
/// as `None`.
#[inline(always)]
pub(crate) fn nb(r: UcsResult<usize>) -> UcsResult<Option<usize>> {
    match r {
        Ok(n) => Ok(Some(n)),
        Err(Status::NoResource) => Ok(None),
        Err(e) => Err(e),
    }
}
