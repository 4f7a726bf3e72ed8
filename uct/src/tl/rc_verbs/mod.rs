//! `rc_verbs`: reliable-connected queue pairs on a verbs [`Provider`].
//!
//! The transport is written against the provider interface of [`super::verbs`]. On the
//! active ports of RDMA devices it runs on the real provider (cargo feature `verbs`; not
//! run anywhere yet, no machine here has an HCA); where no HCA exists it runs on the
//! software HCA model (`RUCX_SOFTHCA=1`, device `softhca`, listed as "software HCA
//! model"), which is never chosen by default. What it does is what an RC transport does
//! on an HCA:
//!
//! * **Connection**: an endpoint is an RC QP. `ep_connect` creates it (Reset → Init) and
//!   sends a connection request through the provider's connection manager (the model's
//!   mailbox; on a device, acknowledged UD datagrams). The
//!   peer interface accepts in its `progress`: it creates a QP of its own, connects it
//!   to ours (Rtr, Rts) and replies; ours is then
//!   connected. Until then operations return `NoResource` (and `pending_add` waits for the
//!   connection). The accepted QP only receives (one connection per direction), and goes
//!   away on the initiator's disconnect message or when it finds its peer dead (it probes
//!   once a message showed the initiator connected).
//! * **Active messages** are SENDs from registered bounce buffers (the id in the first
//!   byte), received into bounce buffers posted on the accepted QP and re-posted after the
//!   handler ran. A SEND that finds no receive posted waits at the HCA (receive-not-ready,
//!   retried), holding its bounce buffer; when all are held, sends return `NoResource`.
//! * **Put and get** are RDMA WRITE and READ straight from and into the caller's buffers,
//!   registered on first use and kept in a registration cache (at most `RCACHE_MAX`
//!   regions, least recently used ones dropped when not in flight). At most `max_sge`
//!   entries go in one work request. Remote keys are the peer's memory region keys.
//! * **The send queue**: as on an HCA, an unsignalled request holds its slot until a later
//!   signalled one completes. So the last request of an operation, at least one in every
//!   `SIGNAL_EVERY`, and the one that fills the queue are signalled, and an account per
//!   endpoint frees slots as those complete. What the queue cannot take waits in the
//!   endpoint's backlog and goes as slots free up (an operation of more requests than the
//!   queue holds goes in parts); while a backlog exists, later operations are refused
//!   with `NoResource`, so nothing overtakes. An operation ends when its last signalled
//!   request completed; an error in an earlier request is remembered until then (the
//!   QP's flush completes the rest).
//! * **Flush** waits for every signalled request of the endpoint; a QP's requests take
//!   effect in order (the model executes them in order; the real provider fences a request
//!   that follows a READ or an atomic), so `fence` has nothing to add.
//! * **Peer failure**: a work request that fails moves the QP to Err; the endpoint fails
//!   with it (`EndpointTimeout` when the peer did not answer, `ConnectionReset` otherwise),
//!   every outstanding operation completes with that status, and `ep_error` is reported
//!   once. Idle endpoints are probed every `UCX_ERROR_CHECK_INTERVAL` with a zero-length
//!   RDMA WRITE, which needs no key and only proves the peer is there.
//!
//! * **UMR** (`IfaceFlags::UMR`): `umr_keys` builds and caches one indirect key per chunk
//!   over a list of this process's blocks, `umr_put` writes chunk by chunk into a peer's
//!   keys, and `umr_cost` measures on the provider what the `ucp` hybrid weighs
//!   (`calibrate.rs`).
//! * **GPU memory**, where a CUDA driver is: the model reaches it (peers' through CUDA
//!   IPC); it is registered for one operation, outside the registration cache.
//!
//! Registration of the caller's buffers assumes what is registered stays mapped at the same
//! address with the same pages; on the model the copy resolves addresses when it runs, so a
//! region that was freed fails the request (`LocProtErr`) instead of touching stale pages,
//! where a real HCA would need memory hooks (UCX's `ucm`) to drop such registrations.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use slab::Slab;
use smallvec::SmallVec;
use ucs::wire::{Reader, Writer};
use ucs::{Config, Status, UcsResult};

use crate::ep::{iov_total, Comp, Done, EpId, Iov};
use crate::error::OpenError;
use crate::iface::{
    check_am_id, Handler, Iface, IfaceAttr, IfaceFlags, OpLimits, PerfEstimate, UmrCost,
};
use crate::md::{pack_rkey, unpack_rkey, Md, MemH, MemTypes, RemoteKey};
mod calibrate;

use crate::tl::verbs::{
    model::SoftHca, Access, CmKind, CmMsg, Opcode, Provider, QpAddr, QpState, RecvWr, SendWr, Sge,
    Wc, WcOpcode, WcStatus, ACCESS_ALL,
};
use calibrate::calibrate;

const MAGIC: [u8; 4] = *b"RCV1";
/// Bytes of one bounce buffer: the AM id and the message.
const SEG: usize = 8192;
/// Send bounce buffers of an interface.
const TX_SLOTS: usize = 128;
/// Receive buffers posted on each accepted QP.
const RX_PER_QP: usize = 32;
/// RMA operations in flight per interface.
const MAX_OPS: usize = 512;
/// Local regions the registration cache keeps.
const RCACHE_MAX: usize = 256;
/// Sets of UMR chunk keys the key cache keeps.
const UMR_CACHE_MAX: usize = 64;
/// Indirect keys created when the interface opens, and how many more are kept free when
/// sets go (beyond that, they are destroyed).
const POOL_INIT: usize = 64;
const POOL_MAX: usize = 1024;

/// A work request of an operation is signalled at least this often: an unsignalled one
/// holds its send-queue slot until a later signalled one completes (as on an HCA).
const SIGNAL_EVERY: u32 = 64;
/// In `wr_id`: a signalled request the send-queue account counts.
const COUNTED: u64 = 1 << 55;
/// A backlog entry of no operation (a SEND, a probe).
const NO_OP: usize = usize::MAX;

/// Kinds of send work requests, in the top byte of `wr_id`.
const WR_AM: u64 = 1;
const WR_OP: u64 = 2;
const WR_PROBE: u64 = 3;
const WR_PASSIVE_PROBE: u64 = 4;

fn wr_id(kind: u64, v: u64) -> u64 {
    (kind << 56) | v
}

/// Whether the software HCA model is enabled in this process (`RUCX_SOFTHCA=1`).
pub fn softhca_enabled() -> bool {
    std::env::var("RUCX_SOFTHCA").is_ok_and(|v| v == "1")
}

/// The name a device of this transport is listed under.
pub const MODEL_DEVICE: &str = "softhca";

type Hca = Arc<Mutex<Box<dyn Provider>>>;

fn lock(h: &Hca) -> MutexGuard<'_, Box<dyn Provider>> {
    h.lock().unwrap_or_else(|e| e.into_inner())
}

/// The memory domain: registrations are the provider's memory regions.
pub struct RcMd {
    hca: Hca,
}

impl std::fmt::Debug for RcMd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RcMd({})", lock(&self.hca).name())
    }
}

impl Md for RcMd {
    fn name(&self) -> &str {
        "rc_verbs"
    }

    fn reg_mem_types(&self) -> MemTypes {
        mem_caps().rma_remote
    }

    unsafe fn mem_reg(&self, addr: *mut u8, len: usize) -> UcsResult<MemH> {
        if addr.is_null() && len != 0 {
            return Err(Status::InvalidParam);
        }
        if len == 0 {
            return Ok(MemH {
                base: addr as u64,
                len: 0,
                key: 0,
            });
        }
        let key = lock(&self.hca).reg_mr(addr as u64, len as u64, ACCESS_ALL)?;
        Ok(MemH {
            base: addr as u64,
            len: len as u64,
            key: u64::from(key),
        })
    }

    fn mem_dereg(&self, memh: &MemH) -> UcsResult<()> {
        if memh.len == 0 {
            return Ok(());
        }
        let key = u32::try_from(memh.key).map_err(|_| Status::InvalidParam)?;
        Ok(lock(&self.hca).dereg_mr(key)?)
    }

    fn mkey_pack(&self, memh: &MemH) -> Vec<u8> {
        pack_rkey(MAGIC, memh)
    }

    fn rkey_unpack(&self, buf: &[u8]) -> UcsResult<RemoteKey> {
        unpack_rkey(MAGIC, buf)
    }
}

/// A registered buffer of `n` bounce segments.
struct Bounce {
    mem: Box<[u8]>,
    key: u32,
    stride: usize,
}

impl Bounce {
    /// `n` registered buffers of [`SEG`] bytes.
    fn new(hca: &mut dyn Provider, n: usize) -> UcsResult<Bounce> {
        Self::with_stride(hca, n, SEG)
    }

    fn with_stride(hca: &mut dyn Provider, n: usize, stride: usize) -> UcsResult<Bounce> {
        let mem = vec![0u8; n * stride].into_boxed_slice();
        let key = hca.reg_mr(mem.as_ptr() as u64, mem.len() as u64, Access::LOCAL_WRITE)?;
        Ok(Bounce { mem, key, stride })
    }

    fn sge(&self, i: usize, len: usize) -> Sge {
        Sge {
            addr: self.mem.as_ptr() as u64 + (i * self.stride) as u64,
            len: len as u32,
            lkey: self.key,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// The request is not sent yet (the peer's mailbox was full).
    Unsent,
    /// Waiting for the peer's reply.
    Connecting,
    Ready,
    Failed(Status),
}

#[derive(Debug)]
struct RcEp {
    qp: u32,
    /// The peer's device (provider part) and its connection serial.
    peer_dev: Vec<u8>,
    peer_nonce: u64,
    serial: u32,
    state: State,
    reported: bool,
    /// Signalled requests in flight.
    outstanding: u32,
    flushes: Vec<Comp>,
    pending: VecDeque<u64>,
    /// Send-queue slots held: requests posted and not yet covered by a completed
    /// signalled one; per signalled request in flight, how many it covers; and requests
    /// posted since the last signalled one.
    sq_used: usize,
    sq_marks: VecDeque<u32>,
    since_signal: u32,
    /// Work requests of operations posted when the send queue could not take them all,
    /// in order (operation slot or `NO_OP`, request, whether it is the operation's last).
    backlog: VecDeque<(usize, SendWr, bool)>,
}

/// A QP this interface accepted: it receives the initiator's messages.
struct Passive {
    peer: QpAddr,
    rx: Bounce,
    /// A message arrived on it: the initiator has connected its side. Only then is it
    /// probed (a probe that reaches a QP not connected yet fails, and would move ours to
    /// Err under an initiator still connecting).
    seen: bool,
    probing: bool,
}

/// A cached registration of local memory.
struct Reg {
    end: u64,
    uses: u32,
    last: u64,
}

/// A cached set of UMR chunk keys and the registration under them.
struct UmrSet {
    keys: Vec<u32>,
    reg: (u64, u32),
    last: u64,
    /// Uses not ended (`umr_release`): the keys stay while a transfer may need them.
    uses: u32,
    /// GPU memory: the allocation the keys lie in (base, buffer id). The application may
    /// free it and allocate another at the same address: the set is then rebuilt.
    alloc: Option<(u64, u64)>,
}

/// The GPU allocation holding `addr` (base, buffer id), `None` for host memory.
fn device_alloc(addr: u64) -> Option<(u64, u64)> {
    #[cfg(feature = "cuda")]
    if let Some(m) = ucs::cuda::driver().and_then(|d| d.pointer(addr)) {
        if m.mem_type == ucs::memtype::MemoryType::Cuda {
            return Some((m.base, m.buffer_id));
        }
    }
    let _ = addr;
    None
}

/// An RMA operation in flight.
struct Op {
    ep: EpId,
    comp: Comp,
    regs: SmallVec<[(u64, u32); 4]>,
    /// An atomic's caller's result word (0 for RDMA): the old value lands in this op's
    /// slot of `amo` and is copied there on completion.
    result: u64,
    /// Signalled requests of the operation not completed yet, and the first error seen.
    signals: u32,
    status: Option<Status>,
    /// Its requests still in the endpoint's backlog.
    unposted: u32,
}

/// The `rc_verbs` interface.
pub struct RcIface {
    attr: IfaceAttr,
    hca: Hca,
    md: RcMd,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    nonce: u64,
    /// Our device address as the provider gives it (the part after the host id).
    hw_addr: Vec<u8>,
    send_cq: u32,
    recv_cq: u32,
    eps: Slab<RcEp>,
    passive: HashMap<u32, Passive>,
    tx: Bounce,
    /// One 8-byte landing slot per operation slot, for atomics' old values.
    amo: Bounce,
    /// Work requests a QP's send queue holds (the provider's `max_qp_wr`).
    sq_depth: usize,
    tx_free: Vec<u16>,
    /// Which endpoint each send slot is in flight for.
    tx_ep: Vec<Option<EpId>>,
    ops: Slab<Op>,
    rcache: BTreeMap<(u64, u32), Reg>,
    tick: u64,
    umr: HashMap<(u128, u64, u64, u64), UmrSet>,
    /// Indirect keys created and free to configure: the key pool, made at open and grown
    /// on demand.
    mkey_pool: Vec<u32>,
    max_klm: usize,
    /// Measured at the first `umr_cost` call.
    umr_cost: Option<UmrCost>,
    /// Events found outside `progress` (completions of destroyed endpoints, errors).
    done: VecDeque<(Comp, Status)>,
    errors: VecDeque<(EpId, Status)>,
    all_flushes: Vec<Comp>,
    total_outstanding: u32,
    serial: u32,
    /// Endpoints not connected yet.
    connecting: usize,
    wcs: Vec<Wc>,
    cms: Vec<CmMsg>,
    check_interval_ns: u64,
    next_check: u64,
    progress_calls: u32,
    counters: Counters,
}

#[derive(Default, Debug)]
struct Counters {
    sends: u64,
    recvs: u64,
    writes: u64,
    reads: u64,
    rma_bytes: u64,
    reg_hits: u64,
    reg_misses: u64,
    mkeys_created: u64,
    mkeys_configured: u64,
    umr_hits: u64,
    umr_misses: u64,
    umr_writes: u64,
    connects: u64,
    accepts: u64,
    atomics: u64,
}

impl std::fmt::Debug for RcIface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RcIface({}, {} eps)", self.device_name(), self.eps.len())
    }
}

/// The memory types the model reaches: host memory, and GPU memory where a CUDA driver is
/// (the model copies it with CUDA, a peer's through its IPC handle).
fn mem_caps() -> crate::iface::MemCaps {
    #[cfg(feature = "cuda")]
    if ucs::cuda::driver().is_some() {
        let t = MemTypes::HOST_ACCESSIBLE | MemTypes::CUDA;
        return crate::iface::MemCaps {
            am: MemTypes::HOST_ACCESSIBLE,
            rma_local: t,
            rma_remote: t,
        };
    }
    crate::iface::MemCaps::HOST
}

/// Where the transport can run here: the active ports of real RDMA devices, and the
/// model's device when it is enabled; else why neither.
pub fn devices() -> Result<Vec<String>, String> {
    let real = super::verbs::real::ports();
    let mut d = real.clone().unwrap_or_default();
    if softhca_enabled() {
        d.push(MODEL_DEVICE.to_string());
    }
    if d.is_empty() {
        return Err(real.err().unwrap_or_default());
    }
    Ok(d)
}

impl RcIface {
    /// Opens the interface on `device`: the model's, or a port of a real device.
    pub fn open(cfg: &Config, device: &str) -> Result<RcIface, OpenError> {
        let model = device == MODEL_DEVICE;
        // The model opens when named (discovery offers it only with RUCX_SOFTHCA=1).
        if !model && !super::verbs::real::ports().is_ok_and(|d| d.iter().any(|x| x == device)) {
            return Err(OpenError::NoDevice {
                tl: "rc_verbs",
                device: device.to_string(),
            });
        }
        let unavailable = |s: Status| OpenError::Unavailable {
            tl: "rc_verbs",
            reason: format!("{device}: {s}"),
        };
        let mut p: Box<dyn Provider> = if model {
            Box::new(SoftHca::from_env().map_err(|e| unavailable(e.into()))?)
        } else {
            super::verbs::real::open(device, cfg).map_err(|reason| OpenError::Unavailable {
                tl: "rc_verbs",
                reason,
            })?
        };
        let (send_cq, recv_cq) = (
            p.create_cq().map_err(|e| unavailable(e.into()))?,
            p.create_cq().map_err(|e| unavailable(e.into()))?,
        );
        let tx = Bounce::new(p.as_mut(), TX_SLOTS).map_err(unavailable)?;
        let amo = Bounce::with_stride(p.as_mut(), MAX_OPS, 8).map_err(unavailable)?;
        let max_klm = p.caps().max_klm;
        let sq_depth = p.caps().max_qp_wr.max(1);
        // The key pool: creating a key object is the expensive step, taken here (a device
        // without UMR has none, and `ucp` packs layouts instead).
        let pool_init = if max_klm > 0 { POOL_INIT } else { 0 };
        let mkey_pool = (0..pool_init)
            .map(|_| p.alloc_mkey())
            .collect::<Result<Vec<u32>, _>>()
            .map_err(|e| unavailable(e.into()))?;
        let hw_addr = p.device_address();
        let nonce = ucs::time::now_ns() ^ (u64::from(std::process::id()) << 32);
        let dev_addr = Writer::default()
            .u64(ucs::sys::host_id())
            .bytes(&hw_addr)
            .buf;
        let iface_addr = Writer::default().u64(nonce).buf;
        let hca: Hca = Arc::new(Mutex::new(p));
        let rma = OpLimits {
            min_zcopy: 0,
            max_zcopy: u32::MAX as usize,
            max_iov: usize::MAX,
            ..Default::default()
        };
        let umr = if max_klm > 0 {
            IfaceFlags::UMR
        } else {
            IfaceFlags::empty()
        };
        // The model as measured on the project machine (docs/uct.md): a work
        // request is a lock, a table lookup and a cross-memory copy; 8-byte round trips
        // take 4.3 µs, 4 MiB RDMA READs stream at 11 GB/s. For a real HCA, nominal EDR
        // InfiniBand figures (not measured here: no machine has an HCA).
        let perf = if model {
            PerfEstimate {
                overhead_ns: 300.0,
                latency_ns: 2000.0,
                bandwidth: 11e9,
            }
        } else {
            PerfEstimate {
                overhead_ns: 50.0,
                latency_ns: 800.0,
                bandwidth: 12e9,
            }
        };
        Ok(RcIface {
            attr: IfaceAttr {
                flags: IfaceFlags::AM_SHORT
                    | IfaceFlags::AM_BCOPY
                    | IfaceFlags::PUT_ZCOPY
                    | IfaceFlags::GET_ZCOPY
                    | IfaceFlags::RMA_ONE_SIDED
                    | IfaceFlags::ATOMIC64
                    | umr
                    | IfaceFlags::PENDING
                    | IfaceFlags::CONNECT_TO_IFACE
                    | IfaceFlags::ERRHANDLE_PEER_FAILURE
                    | IfaceFlags::EP_ORDERED,
                am: OpLimits {
                    max_short: SEG - 1 - 8,
                    max_bcopy: SEG - 1,
                    max_iov: 1,
                    ..Default::default()
                },
                put: rma,
                get: rma,
                perf,
                mem: mem_caps(),
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
            },
            md: RcMd { hca: hca.clone() },
            hca,
            dev_addr,
            iface_addr,
            nonce,
            hw_addr,
            send_cq,
            recv_cq,
            eps: Slab::new(),
            passive: HashMap::new(),
            tx,
            amo,
            sq_depth,
            tx_free: (0..TX_SLOTS as u16).rev().collect(),
            tx_ep: vec![None; TX_SLOTS],
            ops: Slab::new(),
            rcache: BTreeMap::new(),
            tick: 0,
            umr: HashMap::new(),
            mkey_pool,
            max_klm,
            umr_cost: None,
            done: VecDeque::new(),
            errors: VecDeque::new(),
            all_flushes: Vec::new(),
            total_outstanding: 0,
            serial: 0,
            connecting: 0,
            wcs: Vec::with_capacity(64),
            cms: Vec::new(),
            check_interval_ns: cfg.error_check_interval_ns.max(1_000_000),
            next_check: 0,
            progress_calls: 0,
            counters: Counters::default(),
        })
    }

    /// The peer's host id and provider device address.
    fn parse_dev(dev: &[u8]) -> Option<(u64, &[u8])> {
        let mut r = Reader::new(dev);
        let host = r.u64()?;
        let rest = &dev[8..];
        (!rest.is_empty()).then_some((host, rest))
    }

    fn parse_iface(iface: &[u8]) -> Option<u64> {
        let mut r = Reader::new(iface);
        let n = r.u64()?;
        r.is_empty().then_some(n)
    }

    fn my_qp(&self, qpn: u32) -> QpAddr {
        QpAddr {
            device: self.hw_addr.clone(),
            qpn,
        }
    }

    /// Sends `ep`'s connection request, if it is not sent yet.
    fn send_request(&mut self, ep: EpId) {
        let Some(e) = self.eps.get(ep.index()) else {
            return;
        };
        if e.state != State::Unsent {
            return;
        }
        let msg = CmMsg {
            kind: CmKind::Request,
            from: self.my_qp(e.qp),
            private: Writer::default()
                .u32(ep.0)
                .u32(e.serial)
                .u64(e.peer_nonce)
                .u64(self.nonce)
                .buf,
        };
        let dev = e.peer_dev.clone();
        let r = lock(&self.hca).cm_send(&dev, &msg);
        match r {
            Ok(()) => self.eps[ep.index()].state = State::Connecting,
            Err(crate::tl::verbs::VerbsError::NoMemory) => {}
            Err(_) => {
                self.fail(ep, Status::Unreachable);
            }
        }
    }

    /// Marks `ep` failed (once) and queues its error report.
    fn fail(&mut self, ep: EpId, st: Status) {
        if let Some(e) = self.eps.get_mut(ep.index()) {
            if !matches!(e.state, State::Failed(_)) {
                if e.state != State::Ready {
                    self.connecting = self.connecting.saturating_sub(1);
                }
                e.state = State::Failed(st);
                if !e.reported {
                    e.reported = true;
                    self.errors.push_back((ep, st));
                }
                let qp = e.qp;
                // Whatever is queued behind the failure is flushed by the HCA.
                let _ = lock(&self.hca).modify_qp(qp, QpState::Err, None);
                self.abandon_backlog(ep, st);
            }
        }
    }

    /// The endpoint, when it can post now.
    #[inline]
    fn ready(&self, ep: EpId) -> UcsResult<&RcEp> {
        let e = self.eps.get(ep.index()).ok_or(Status::InvalidParam)?;
        match e.state {
            State::Ready => Ok(e),
            State::Failed(s) => Err(s),
            State::Unsent | State::Connecting => Err(Status::NoResource),
        }
    }

    /// Posts the work requests of one operation (of `op`, an `ops` slot, or `None`) on
    /// `ep`'s QP, in order behind any earlier operation's: `NoResource` (nothing posted)
    /// when the endpoint has a backlog or a full send queue. What the send queue cannot
    /// take now waits in the endpoint's backlog and goes as completions free slots: an
    /// HCA's send queue holds unsignalled requests until a later signalled one completes,
    /// so the last request of an operation, one in every [`SIGNAL_EVERY`], and the one
    /// that fills the queue are signalled (and counted in `wr_id`).
    fn post_wrs(
        &mut self,
        ep: EpId,
        op: Option<usize>,
        wrs: impl ExactSizeIterator<Item = SendWr>,
    ) -> UcsResult<()> {
        let depth = self.sq_depth;
        let e = self.eps.get_mut(ep.index()).ok_or(Status::InvalidParam)?;
        if !e.backlog.is_empty() || e.sq_used >= depth {
            return Err(Status::NoResource);
        }
        let n = wrs.len();
        let slot = op.unwrap_or(NO_OP);
        for (i, wr) in wrs.enumerate() {
            e.backlog.push_back((slot, wr, i + 1 == n));
        }
        // One signalled completion (or the operation's end) to wait for, undone below when
        // nothing went out.
        e.outstanding += 1;
        self.total_outstanding += 1;
        if let Some(o) = op.and_then(|o| self.ops.get_mut(o)) {
            o.unposted = n as u32;
        }
        match self.drain_backlog(ep) {
            Ok(0) => {
                // The provider's queue refused the first: nothing went, take it back.
                self.take_back(ep);
                Err(Status::NoResource)
            }
            Ok(_) => Ok(()),
            Err((0, err)) => {
                self.take_back(ep);
                Err(err.into())
            }
            Err(_) => {
                // Part went out and cannot be taken back: the endpoint fails, and the
                // operation ends with the error when what went out is flushed.
                self.fail(ep, Status::IoError);
                Ok(())
            }
        }
    }

    /// Undoes a `post_wrs` of which nothing went out.
    fn take_back(&mut self, ep: EpId) {
        if let Some(e) = self.eps.get_mut(ep.index()) {
            e.backlog.clear();
            e.outstanding = e.outstanding.saturating_sub(1);
            self.total_outstanding = self.total_outstanding.saturating_sub(1);
        }
    }

    /// Posts from `ep`'s backlog while its send queue has room; returns how many went, or
    /// how many went before the provider refused one for another reason than a full queue.
    fn drain_backlog(&mut self, ep: EpId) -> Result<usize, (usize, crate::tl::verbs::VerbsError)> {
        let depth = self.sq_depth;
        let Some(e) = self.eps.get_mut(ep.index()) else {
            return Ok(0);
        };
        let mut posted = 0;
        let mut h = lock(&self.hca);
        while e.sq_used < depth {
            let Some((op, mut wr, last)) = e.backlog.pop_front() else {
                break;
            };
            let signal = last || e.since_signal + 1 >= SIGNAL_EVERY || e.sq_used + 1 >= depth;
            wr.signaled = signal;
            if signal {
                wr.wr_id |= COUNTED;
            }
            match h.post_send(e.qp, &wr) {
                Ok(()) => {}
                Err(crate::tl::verbs::VerbsError::NoMemory) => {
                    wr.wr_id &= !COUNTED;
                    e.backlog.push_front((op, wr, last));
                    break;
                }
                Err(err) => return Err((posted, err)),
            }
            posted += 1;
            e.sq_used += 1;
            e.since_signal += 1;
            if signal {
                e.sq_marks.push_back(e.since_signal);
                e.since_signal = 0;
            }
            if let Some(o) = self.ops.get_mut(op) {
                o.unposted = o.unposted.saturating_sub(1);
                if signal {
                    o.signals += 1;
                }
            }
        }
        Ok(posted)
    }

    /// Drops `ep`'s backlog (the endpoint failed): its operations end with `st` once
    /// what of them went out is flushed, or now when nothing of them is in flight.
    fn abandon_backlog(&mut self, ep: EpId, st: Status) {
        let Some(e) = self.eps.get_mut(ep.index()) else {
            return;
        };
        let ops: Vec<usize> = e.backlog.drain(..).map(|(o, _, _)| o).collect();
        for o in ops {
            let Some(op) = self.ops.get_mut(o) else {
                continue;
            };
            op.unposted = 0;
            op.status.get_or_insert(st);
            if op.signals == 0 {
                let op = self.ops.remove(o);
                self.unref(&op.regs);
                self.done.push_back((op.comp, st));
                self.retire(ep);
            }
        }
    }

    /// A counted signalled request of `ep` completed on QP `qpn`: the slots it covers
    /// are free (nothing when the endpoint's QP is another by now).
    fn sq_release(&mut self, ep: EpId, qpn: u32) {
        let Some(e) = self.eps.get_mut(ep.index()).filter(|e| e.qp == qpn) else {
            return;
        };
        let n = e.sq_marks.pop_front().unwrap_or(0) as usize;
        e.sq_used = e.sq_used.saturating_sub(n);
        if !e.backlog.is_empty() && e.state == State::Ready {
            if let Err((_, err)) = self.drain_backlog(ep) {
                log::debug!("rc_verbs: a backlogged request was refused: {err:?}");
                self.fail(ep, Status::IoError);
            }
        }
    }

    /// Posts a SEND of what `fill` writes after the id byte (returns its length).
    fn send_am(
        &mut self,
        ep: EpId,
        id: u8,
        fill: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> UcsResult<usize> {
        check_am_id(id)?;
        self.ready(ep)?;
        let slot = *self.tx_free.last().ok_or(Status::NoResource)? as usize;
        let seg = &mut self.tx.mem[slot * SEG..(slot + 1) * SEG];
        seg[0] = id;
        let n = fill(&mut seg[1..]);
        let wr = SendWr {
            wr_id: wr_id(WR_AM, slot as u64),
            opcode: Opcode::Send,
            sges: smallvec::smallvec![self.tx.sge(slot, n + 1)],
            remote_addr: 0,
            rkey: 0,
            signaled: true,
        };
        self.post_wrs(ep, None, std::iter::once(wr))?;
        self.tx_free.pop();
        self.tx_ep[slot] = Some(ep);
        self.counters.sends += 1;
        Ok(n)
    }

    /// The local key of `[addr, addr + len)`, registering it (whole pages) on a miss.
    fn local_key(&mut self, addr: u64, len: u64) -> UcsResult<(u64, u32)> {
        self.tick += 1;
        let end = addr.checked_add(len).ok_or(Status::InvalidParam)?;
        // GPU memory is registered for one operation, outside the cache: the allocation
        // at an address changes when the application frees and allocates (the pooled
        // scratch buffers of device layouts do), and a registration names the allocation
        // (peers reach it through its IPC handle). `unref` deregisters what the cache does
        // not hold.
        #[cfg(feature = "cuda")]
        if ucs::memtype::mem_type(addr as *const u8) == ucs::memtype::MemoryType::Cuda {
            let key = lock(&self.hca)
                .reg_mr(addr, len.max(1), ACCESS_ALL)
                .map_err(|e| match e {
                    crate::tl::verbs::VerbsError::NoMemory => Status::NoResource,
                    _ => Status::InvalidAddr,
                })?;
            return Ok((addr, key));
        }
        let hit = self
            .rcache
            .range(..=(addr, u32::MAX))
            .rev()
            .take(8)
            .find(|(_, r)| r.end >= end)
            .map(|(k, _)| *k);
        if let Some(k) = hit {
            let r = self.rcache.get_mut(&k).expect("found above");
            r.uses += 1;
            r.last = self.tick;
            self.counters.reg_hits += 1;
            return Ok(k);
        }
        self.counters.reg_misses += 1;
        if self.rcache.len() >= RCACHE_MAX {
            let victim = self
                .rcache
                .iter()
                .filter(|(_, r)| r.uses == 0)
                .min_by_key(|(_, r)| r.last)
                .map(|(k, _)| *k);
            if let Some(k) = victim {
                self.rcache.remove(&k);
                let _ = lock(&self.hca).dereg_mr(k.1);
            }
        }
        // Whole pages, so that neighbouring buffers share a registration; just the range
        // where a page around it is not mapped.
        let page = 4096u64;
        let (start, stop) = (addr & !(page - 1), end.div_ceil(page) * page);
        let mut h = lock(&self.hca);
        let (start, stop, key) = match h.reg_mr(start, stop - start, ACCESS_ALL) {
            Ok(k) => (start, stop, k),
            Err(_) => (
                addr,
                end,
                h.reg_mr(addr, len.max(1), ACCESS_ALL)
                    .map_err(|e| match e {
                        crate::tl::verbs::VerbsError::NoMemory => Status::NoResource,
                        _ => Status::InvalidAddr,
                    })?,
            ),
        };
        drop(h);
        self.rcache.insert(
            (start, key),
            Reg {
                end: stop,
                uses: 1,
                last: self.tick,
            },
        );
        Ok((start, key))
    }

    /// Ends one use of each registration; one the cache does not hold (GPU memory,
    /// registered for its operation) is deregistered.
    fn unref(&mut self, regs: &[(u64, u32)]) {
        for k in regs {
            if let Some(r) = self.rcache.get_mut(k) {
                r.uses = r.uses.saturating_sub(1);
            } else {
                let _ = lock(&self.hca).dereg_mr(k.1);
            }
        }
    }

    /// Posts RDMA WRITEs or READs between `iov` and the remote segments `remote` (the
    /// same number of bytes, cut differently) as one operation: the lists are cut at every
    /// boundary of either, a work request takes consecutive pieces while the remote side
    /// stays contiguous (at most `max_sge` local pieces), and only the last is signalled.
    ///
    /// # Safety
    /// The iov entries satisfy the zcopy contract of `put_zcopy`/`get_zcopy`.
    unsafe fn rdma(
        &mut self,
        ep: EpId,
        write: bool,
        iov: &[Iov],
        remote: &[(u64, u64)],
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        self.ready(ep)?;
        let total = iov_total(iov) as u64;
        let mut rtotal = 0u64;
        for &(a, l) in remote {
            rkey.check_range(a, l)?;
            rtotal += l;
        }
        if rtotal != total {
            return Err(Status::InvalidParam);
        }
        let rk = u32::try_from(rkey.key).map_err(|_| Status::InvalidParam)?;
        if self.ops.len() >= MAX_OPS {
            return Err(Status::NoResource);
        }
        let max_sge = lock(&self.hca).caps().max_sge.max(1);
        // Keys first, so that a buffer that cannot be registered posts nothing. A list of
        // many entries registers its whole span once (the buffer around a layout).
        let mut keys: SmallVec<[u32; 8]> = SmallVec::with_capacity(iov.len());
        let mut regs: SmallVec<[(u64, u32); 4]> = SmallVec::new();
        let span = (iov.len() > 4).then(|| {
            let lo = iov.iter().map(|v| v.buffer as u64).min().unwrap_or(0);
            let hi = iov
                .iter()
                .map(|v| v.buffer as u64 + v.length as u64)
                .max()
                .unwrap_or(0);
            (lo, hi)
        });
        let whole = span.and_then(|(lo, hi)| self.local_key(lo, hi - lo).ok());
        if let Some(k) = whole {
            regs.push(k);
            keys.extend(iov.iter().map(|_| k.1));
        }
        for v in iov.iter().filter(|_| whole.is_none()) {
            if v.length == 0 {
                keys.push(0);
                continue;
            }
            match self.local_key(v.buffer as u64, v.length as u64) {
                Ok(k) => {
                    keys.push(k.1);
                    if !regs.contains(&k) {
                        regs.push(k);
                    } else {
                        self.unref(&[k]);
                    }
                }
                Err(s) => {
                    self.unref(&regs);
                    return Err(s);
                }
            }
        }
        // The work requests: (remote address, local pieces).
        let mut wrs: Vec<(u64, SmallVec<[Sge; 4]>)> = Vec::new();
        let la: Vec<(u64, u64)> = iov
            .iter()
            .map(|v| (v.buffer as u64, v.length as u64))
            .collect();
        let mut next_remote = u64::MAX;
        // A piece stays below 1 GiB (a work request's byte count is 32 bits).
        for (i, l, _, r, n) in super::pieces(&la, remote, 1 << 30) {
            let sge = Sge {
                addr: l,
                len: n as u32,
                lkey: keys[i],
            };
            match wrs.last_mut() {
                Some((_, sges)) if r == next_remote && sges.len() < max_sge => sges.push(sge),
                _ => wrs.push((r, smallvec::smallvec![sge])),
            }
            next_remote = r + n;
        }
        if wrs.is_empty() {
            // Nothing to move: one zero-length request keeps completion in order.
            wrs.push((remote.first().map_or(0, |r| r.0), SmallVec::new()));
        }
        let op = self.ops.insert(Op {
            ep,
            comp,
            regs,
            result: 0,
            signals: 0,
            status: None,
            unposted: 0,
        });
        let opcode = if write {
            Opcode::RdmaWrite
        } else {
            Opcode::RdmaRead
        };
        let wrs: Vec<SendWr> = wrs
            .into_iter()
            .map(|(raddr, sges)| SendWr {
                wr_id: wr_id(WR_OP, op as u64),
                opcode,
                sges,
                remote_addr: raddr,
                rkey: rk,
                signaled: false,
            })
            .collect();
        if let Err(st) = self.post_wrs(ep, Some(op), wrs.into_iter()) {
            // Nothing posted: the caller may retry.
            let o = self.ops.remove(op);
            self.unref(&o.regs);
            return Err(st);
        }
        if write {
            self.counters.writes += 1;
        } else {
            self.counters.reads += 1;
        }
        self.counters.rma_bytes += total;
        Ok(Done::Later)
    }

    /// Accepts, refuses or ends connections as the connection manager tells. An accepted
    /// QP whose initiator disconnected is dropped after the messages it had received are
    /// handed over.
    fn handle_cm(&mut self, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        let mut cms = std::mem::take(&mut self.cms);
        cms.clear();
        lock(&self.hca).cm_poll(&mut cms);
        for m in cms.drain(..) {
            match m.kind {
                CmKind::Request => self.accept(m),
                CmKind::Reply | CmKind::Reject => self.connected(m),
                CmKind::Disconnect => {
                    let gone: Vec<u32> = self
                        .passive
                        .iter()
                        .filter(|(_, p)| p.peer == m.from)
                        .map(|(q, _)| *q)
                        .collect();
                    if !gone.is_empty() {
                        n += self.poll_recv(h, usize::MAX);
                    }
                    for q in gone {
                        self.drop_passive(q);
                    }
                }
            }
        }
        self.cms = cms;
        n
    }

    /// Hands received messages to `h` (at most `max` completions) and re-posts their
    /// buffers.
    fn poll_recv(&mut self, h: &mut dyn Handler, max: usize) -> usize {
        let mut n = 0;
        let mut wcs = std::mem::take(&mut self.wcs);
        let mut polled = 0;
        while polled < max {
            wcs.clear();
            let got = lock(&self.hca).poll_cq(self.recv_cq, 32.min(max - polled), &mut wcs);
            if got == 0 {
                break;
            }
            polled += got;
            for w in wcs.drain(..) {
                let qp = (w.wr_id >> 32) as u32;
                let i = (w.wr_id & 0xffff_ffff) as usize;
                if w.status != WcStatus::Success || w.opcode != WcOpcode::Recv {
                    // The QP failed (a request of its peer was refused, or it is being
                    // flushed).
                    if w.status != WcStatus::WrFlushErr {
                        self.drop_passive(qp);
                    }
                    continue;
                }
                let Some(p) = self.passive.get_mut(&qp) else {
                    continue;
                };
                p.seen = true;
                let len = (w.byte_len as usize).min(SEG);
                let seg = &p.rx.mem[i * SEG..i * SEG + len];
                if let Some((&id, data)) = seg.split_first() {
                    h.am(id, data);
                    n += 1;
                }
                let wr = RecvWr {
                    wr_id: w.wr_id,
                    sges: smallvec::smallvec![p.rx.sge(i, SEG)],
                };
                self.counters.recvs += 1;
                if lock(&self.hca).post_recv(qp, &wr).is_err() {
                    self.drop_passive(qp);
                }
            }
        }
        self.wcs = wcs;
        n
    }

    fn accept(&mut self, m: CmMsg) {
        let mut r = Reader::new(&m.private);
        let (Some(ep), Some(serial), Some(target), Some(_from_nonce)) =
            (r.u32(), r.u32(), r.u64(), r.u64())
        else {
            return;
        };
        let reply = |kind, qpn| CmMsg {
            kind,
            from: QpAddr {
                device: self.hw_addr.clone(),
                qpn,
            },
            private: Writer::default().u32(ep).u32(serial).buf,
        };
        if target != self.nonce {
            let msg = reply(CmKind::Reject, 0);
            let _ = lock(&self.hca).cm_send(&m.from.device, &msg);
            return;
        }
        let made = (|| -> UcsResult<(u32, Bounce)> {
            let mut h = lock(&self.hca);
            let qp = h.create_qp(self.send_cq, self.recv_cq)?;
            let setup = (|| -> UcsResult<Bounce> {
                h.modify_qp(qp, QpState::Init, None)?;
                let rx = Bounce::new(h.as_mut(), RX_PER_QP)?;
                for i in 0..RX_PER_QP {
                    let wr = RecvWr {
                        wr_id: (u64::from(qp) << 32) | i as u64,
                        sges: smallvec::smallvec![rx.sge(i, SEG)],
                    };
                    h.post_recv(qp, &wr)?;
                }
                h.modify_qp(qp, QpState::Rtr, Some(&m.from))?;
                h.modify_qp(qp, QpState::Rts, None)?;
                Ok(rx)
            })();
            match setup {
                Ok(rx) => Ok((qp, rx)),
                Err(s) => {
                    let _ = h.destroy_qp(qp);
                    Err(s)
                }
            }
        })();
        match made {
            Ok((qp, rx)) => {
                let msg = reply(CmKind::Reply, qp);
                if lock(&self.hca).cm_send(&m.from.device, &msg).is_ok() {
                    self.passive.insert(
                        qp,
                        Passive {
                            peer: m.from,
                            rx,
                            seen: false,
                            probing: false,
                        },
                    );
                    self.counters.accepts += 1;
                } else {
                    let mut h = lock(&self.hca);
                    let _ = h.destroy_qp(qp);
                    let _ = h.dereg_mr(rx.key);
                }
            }
            Err(_) => {
                let msg = reply(CmKind::Reject, 0);
                let _ = lock(&self.hca).cm_send(&m.from.device, &msg);
            }
        }
    }

    fn connected(&mut self, m: CmMsg) {
        let mut r = Reader::new(&m.private);
        let (Some(ep), Some(serial)) = (r.u32(), r.u32()) else {
            return;
        };
        let ep = EpId(ep);
        let Some(e) = self.eps.get(ep.index()) else {
            return;
        };
        if e.serial != serial || e.state != State::Connecting || e.peer_dev != m.from.device {
            return;
        }
        let qp = e.qp;
        if m.kind == CmKind::Reject {
            self.fail(ep, Status::Unreachable);
            return;
        }
        let r = {
            let mut h = lock(&self.hca);
            h.modify_qp(qp, QpState::Rtr, Some(&m.from))
                .and_then(|()| h.modify_qp(qp, QpState::Rts, None))
        };
        match r {
            Ok(()) => {
                self.eps[ep.index()].state = State::Ready;
                self.connecting = self.connecting.saturating_sub(1);
                self.counters.connects += 1;
            }
            Err(_) => self.fail(ep, Status::Unreachable),
        }
    }

    fn drop_passive(&mut self, qp: u32) {
        if let Some(p) = self.passive.remove(&qp) {
            let mut h = lock(&self.hca);
            let _ = h.destroy_qp(qp);
            let _ = h.dereg_mr(p.rx.key);
        }
    }

    /// One signalled request of `ep` is done.
    fn retire(&mut self, ep: EpId) {
        self.total_outstanding = self.total_outstanding.saturating_sub(1);
        if let Some(e) = self.eps.get_mut(ep.index()) {
            e.outstanding = e.outstanding.saturating_sub(1);
            if e.outstanding == 0 {
                for c in e.flushes.drain(..) {
                    self.done.push_back((c, Status::Ok));
                }
            }
        }
        if self.total_outstanding == 0 {
            for c in self.all_flushes.drain(..) {
                self.done.push_back((c, Status::Ok));
            }
        }
    }

    /// What a failed completion means for its endpoint.
    fn wc_status(s: WcStatus) -> Status {
        match s {
            WcStatus::Success => Status::Ok,
            WcStatus::RetryExcErr | WcStatus::RnrRetryExcErr => Status::EndpointTimeout,
            WcStatus::LocProtErr | WcStatus::LocLenErr => Status::InvalidAddr,
            _ => Status::ConnectionReset,
        }
    }

    fn send_completion(&mut self, w: Wc) {
        let (kind, v) = (w.wr_id >> 56, w.wr_id & (COUNTED - 1));
        let counted = w.wr_id & COUNTED != 0;
        let failed = |this: &Self, ep: EpId| match this.eps.get(ep.index()).map(|e| e.state) {
            Some(State::Failed(s)) => Some(s),
            _ => None,
        };
        match kind {
            WR_AM => {
                let slot = v as usize;
                let Some(ep) = self.tx_ep.get_mut(slot).and_then(Option::take) else {
                    return;
                };
                if counted {
                    self.sq_release(ep, w.qpn);
                }
                self.tx_free.push(slot as u16);
                if w.status != WcStatus::Success {
                    self.fail(ep, Self::wc_status(w.status));
                }
                self.retire(ep);
            }
            WR_OP => {
                // An operation ends with its last counted signalled request: errors of
                // earlier requests are remembered, and the flush that follows an error
                // completes the counted ones.
                let Some(o) = self.ops.get_mut(v as usize) else {
                    return;
                };
                let ep = o.ep;
                if self.eps.get(ep.index()).is_some_and(|e| e.qp != w.qpn) {
                    // A late completion of a slot reused by another endpoint's operation.
                    return;
                }
                let Some(o) = self.ops.get_mut(v as usize) else {
                    return;
                };
                if w.status != WcStatus::Success && o.status.is_none() {
                    o.status = Some(Self::wc_status(w.status));
                }
                if counted {
                    o.signals = o.signals.saturating_sub(1);
                }
                let finished = counted && o.signals == 0 && o.unposted == 0;
                if counted {
                    self.sq_release(ep, w.qpn);
                }
                if w.status != WcStatus::Success {
                    let st = failed(self, ep).unwrap_or(Self::wc_status(w.status));
                    self.fail(ep, st);
                }
                if !finished {
                    return;
                }
                let op = self.ops.remove(v as usize);
                self.unref(&op.regs);
                let st = match op.status {
                    None => {
                        if op.result != 0 {
                            let at = v as usize * 8;
                            let old = u64::from_ne_bytes(
                                self.amo.mem[at..at + 8].try_into().expect("8 bytes"),
                            );
                            // SAFETY: the caller of `atomic64_fetch` keeps its result word
                            // valid until this completion.
                            unsafe { std::ptr::write_unaligned(op.result as *mut u64, old) };
                        }
                        Status::Ok
                    }
                    Some(st) => failed(self, ep).unwrap_or(st),
                };
                self.done.push_back((op.comp, st));
                self.retire(ep);
            }
            WR_PROBE => {
                let ep = EpId(v as u32);
                if counted {
                    self.sq_release(ep, w.qpn);
                }
                if w.status != WcStatus::Success {
                    self.fail(ep, Self::wc_status(w.status));
                }
                self.retire(ep);
            }
            WR_PASSIVE_PROBE => {
                let qp = v as u32;
                if w.status != WcStatus::Success {
                    self.drop_passive(qp);
                } else if let Some(p) = self.passive.get_mut(&qp) {
                    p.probing = false;
                }
            }
            _ => {}
        }
    }

    /// Probes every connected endpoint and accepted QP with a zero-length RDMA WRITE.
    fn probe_peers(&mut self) {
        let eps: Vec<(usize, u32)> = self
            .eps
            .iter()
            .filter(|(_, e)| e.state == State::Ready && e.outstanding == 0)
            .map(|(i, e)| (i, e.qp))
            .collect();
        for (i, _) in eps {
            let wr = SendWr {
                wr_id: wr_id(WR_PROBE, i as u64),
                opcode: Opcode::RdmaWrite,
                sges: SmallVec::new(),
                remote_addr: 0,
                rkey: 0,
                signaled: true,
            };
            // Counted as outstanding by `post_wrs`; a full queue skips this round.
            let _ = self.post_wrs(EpId(i as u32), None, std::iter::once(wr));
        }
        let qps: Vec<u32> = self.passive.keys().copied().collect();
        for qp in qps {
            let p = self.passive.get_mut(&qp).expect("listed above");
            if !p.seen || p.probing {
                continue;
            }
            let wr = SendWr {
                wr_id: wr_id(WR_PASSIVE_PROBE, u64::from(qp)),
                opcode: Opcode::RdmaWrite,
                sges: SmallVec::new(),
                remote_addr: 0,
                rkey: 0,
                signaled: true,
            };
            if lock(&self.hca).post_send(qp, &wr).is_ok() {
                p.probing = true;
            }
        }
    }

    /// Destroys the least recently used set of UMR keys that no transfer uses; false when
    /// every set is in use.
    fn evict_umr_set(&mut self) -> bool {
        let Some(old) = self
            .umr
            .iter()
            .filter(|(_, e)| e.uses == 0)
            .min_by_key(|(_, e)| e.last)
            .map(|(k, _)| *k)
        else {
            return false;
        };
        let e = self.umr.remove(&old).expect("found above");
        self.pool_back(e.keys);
        self.unref(&[e.reg]);
        true
    }

    /// Keys back to the pool (destroyed beyond `POOL_MAX`).
    fn pool_back(&mut self, keys: Vec<u32>) {
        let mut h = lock(&self.hca);
        for key in keys {
            if self.mkey_pool.len() < POOL_MAX {
                self.mkey_pool.push(key);
            } else {
                let _ = h.destroy_mkey(key);
            }
        }
    }

    /// Destroys the pool's free keys (the device needs the room for regions); false
    /// when there were none.
    fn drain_pool(&mut self) -> bool {
        if self.mkey_pool.is_empty() {
            return false;
        }
        let mut h = lock(&self.hca);
        for key in self.mkey_pool.drain(..) {
            let _ = h.destroy_mkey(key);
        }
        true
    }

    /// One indirect key per `chunk` bytes of `segs` (in region `reg`), each taken from the
    /// pool (grown when empty) and configured by a UMR work request. On failure the keys
    /// taken go back to the pool.
    fn configure_chunks(
        &mut self,
        segs: &[(u64, u64)],
        reg: u32,
        chunk: u64,
    ) -> crate::tl::verbs::VResult<Vec<u32>> {
        use crate::tl::verbs::umr::chunk_klms;
        let total: u64 = segs.iter().map(|s| s.1).sum();
        let mut keys: Vec<u32> = Vec::with_capacity(total.div_ceil(chunk.max(1)) as usize);
        let mut at = 0;
        let r = (|| {
            while at < total {
                let n = chunk.min(total - at);
                let klms = chunk_klms(segs, reg, at, n);
                if klms.len() > self.max_klm {
                    return Err(crate::tl::verbs::VerbsError::Invalid);
                }
                let key = match self.mkey_pool.pop() {
                    Some(k) => k,
                    None => {
                        let k = lock(&self.hca).alloc_mkey()?;
                        self.counters.mkeys_created += 1;
                        k
                    }
                };
                match lock(&self.hca).configure_mkey(key, &klms, ACCESS_ALL) {
                    Ok(k) => keys.push(k),
                    Err(e) => {
                        self.mkey_pool.push(key);
                        return Err(e);
                    }
                }
                self.counters.mkeys_configured += 1;
                at += n;
            }
            Ok(())
        })();
        match r {
            Ok(()) => Ok(keys),
            Err(e) => {
                self.pool_back(keys);
                Err(e)
            }
        }
    }

    fn can_send(&self, e: &RcEp) -> bool {
        e.state == State::Ready
            && !self.tx_free.is_empty()
            && self.ops.len() < MAX_OPS
            && e.sq_used < self.sq_depth
            && e.backlog.is_empty()
    }
}

impl Drop for RcIface {
    fn drop(&mut self) {
        let mut h = lock(&self.hca);
        for (_, e) in self.eps.iter() {
            let msg = CmMsg {
                kind: CmKind::Disconnect,
                from: QpAddr {
                    device: self.hw_addr.clone(),
                    qpn: e.qp,
                },
                private: Vec::new(),
            };
            let _ = h.cm_send(&e.peer_dev, &msg);
            let _ = h.destroy_qp(e.qp);
        }
        for qp in self.passive.keys() {
            let _ = h.destroy_qp(*qp);
        }
    }
}

impl Iface for RcIface {
    fn tl_name(&self) -> &str {
        "rc_verbs"
    }

    fn device_name(&self) -> &str {
        MODEL_DEVICE
    }

    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }

    fn md(&self) -> &dyn Md {
        &self.md
    }

    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }

    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }

    fn is_reachable(&self, device_addr: &[u8], iface_addr: &[u8]) -> bool {
        // The model reaches devices of this host only (a real fabric: any port of it).
        matches!(Self::parse_dev(device_addr), Some((h, d)) if h == ucs::sys::host_id()
            && d.len() == self.hw_addr.len())
            && Self::parse_iface(iface_addr).is_some()
    }

    fn ep_connect(&mut self, device_addr: &[u8], iface_addr: &[u8]) -> UcsResult<EpId> {
        if !self.is_reachable(device_addr, iface_addr) {
            return Err(Status::Unreachable);
        }
        let (_, dev) = Self::parse_dev(device_addr).ok_or(Status::Unreachable)?;
        let peer_nonce = Self::parse_iface(iface_addr).ok_or(Status::Unreachable)?;
        let qp = {
            let mut h = lock(&self.hca);
            let qp = h.create_qp(self.send_cq, self.recv_cq)?;
            if let Err(e) = h.modify_qp(qp, QpState::Init, None) {
                let _ = h.destroy_qp(qp);
                return Err(e.into());
            }
            qp
        };
        self.serial = self.serial.wrapping_add(1);
        let id = EpId(self.eps.insert(RcEp {
            qp,
            peer_dev: dev.to_vec(),
            peer_nonce,
            serial: self.serial,
            state: State::Unsent,
            reported: false,
            outstanding: 0,
            flushes: Vec::new(),
            pending: VecDeque::new(),
            sq_used: 0,
            sq_marks: VecDeque::new(),
            since_signal: 0,
            backlog: VecDeque::new(),
        }) as u32);
        self.connecting += 1;
        self.send_request(id);
        if let Some(State::Failed(s)) = self.eps.get(id.index()).map(|e| e.state) {
            let e = self.eps.remove(id.index());
            self.connecting -= 1;
            let _ = lock(&self.hca).destroy_qp(e.qp);
            self.errors.retain(|(ep, _)| *ep != id);
            return Err(s);
        }
        Ok(id)
    }

    fn ep_destroy(&mut self, ep: EpId) {
        let Some(qp) = self.eps.get(ep.index()).map(|e| e.qp) else {
            return;
        };
        // What already completed is handled now; the HCA drops what had not run (requests
        // waiting for a receive at the peer), and those are canceled below.
        let mut left = Vec::new();
        {
            let mut h = lock(&self.hca);
            while h.poll_cq(self.send_cq, 64, &mut left) > 0 {}
            let msg = CmMsg {
                kind: CmKind::Disconnect,
                from: QpAddr {
                    device: self.hw_addr.clone(),
                    qpn: qp,
                },
                private: Vec::new(),
            };
            let e = &self.eps[ep.index()];
            let _ = h.cm_send(&e.peer_dev, &msg);
            let _ = h.destroy_qp(qp);
        }
        for w in left {
            self.send_completion(w);
        }
        let e = self.eps.remove(ep.index());
        self.total_outstanding = self.total_outstanding.saturating_sub(e.outstanding);
        for slot in 0..TX_SLOTS {
            if self.tx_ep[slot] == Some(ep) {
                self.tx_ep[slot] = None;
                self.tx_free.push(slot as u16);
            }
        }
        let dead: Vec<usize> = self
            .ops
            .iter()
            .filter(|(_, o)| o.ep == ep)
            .map(|(i, _)| i)
            .collect();
        for i in dead {
            let op = self.ops.remove(i);
            self.unref(&op.regs);
            self.done.push_back((op.comp, Status::Canceled));
        }
        for c in e.flushes {
            self.done.push_back((c, Status::Canceled));
        }
        if !matches!(e.state, State::Ready | State::Failed(_)) {
            self.connecting = self.connecting.saturating_sub(1);
        }
        self.errors.retain(|(x, _)| *x != ep);
        if self.total_outstanding == 0 {
            for c in self.all_flushes.drain(..) {
                self.done.push_back((c, Status::Ok));
            }
        }
    }

    fn am_short(&mut self, ep: EpId, id: u8, header: u64, payload: &[u8]) -> UcsResult<()> {
        if payload.len() > self.attr.am.max_short {
            return Err(Status::InvalidParam);
        }
        self.send_am(ep, id, &mut |b| {
            b[..8].copy_from_slice(&header.to_le_bytes());
            b[8..8 + payload.len()].copy_from_slice(payload);
            8 + payload.len()
        })?;
        Ok(())
    }

    fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> UcsResult<usize> {
        let max = self.attr.am.max_bcopy;
        self.send_am(ep, id, &mut |b| pack(&mut b[..max]).min(max))
    }

    unsafe fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        let remote = [(remote_addr, iov_total(iov) as u64)];
        // SAFETY: the caller's zcopy contract.
        unsafe { self.rdma(ep, true, iov, &remote, rkey, comp) }
    }

    unsafe fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        let remote = [(remote_addr, iov_total(iov) as u64)];
        // SAFETY: the caller's zcopy contract.
        unsafe { self.rdma(ep, false, iov, &remote, rkey, comp) }
    }

    unsafe fn get_zcopy_iov(
        &mut self,
        ep: EpId,
        local: &[Iov],
        remote: &[(u64, u64)],
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: the caller's zcopy contract.
        unsafe { self.rdma(ep, false, local, remote, rkey, comp) }
    }

    unsafe fn atomic64_fetch(
        &mut self,
        ep: EpId,
        op: crate::iface::Amo64,
        remote_addr: u64,
        rkey: &RemoteKey,
        result: *mut u64,
        comp: Comp,
    ) -> UcsResult<Done> {
        self.ready(ep)?;
        if result.is_null() || !remote_addr.is_multiple_of(8) {
            return Err(Status::InvalidParam);
        }
        rkey.check_range(remote_addr, 8)?;
        let rk = u32::try_from(rkey.key).map_err(|_| Status::InvalidParam)?;
        if self.ops.len() >= MAX_OPS {
            return Err(Status::NoResource);
        }
        let slot = self.ops.insert(Op {
            ep,
            comp,
            regs: SmallVec::new(),
            result: result as u64,
            signals: 0,
            status: None,
            unposted: 0,
        });
        // Fewer than MAX_OPS operations are in flight, so the slab's index is below it.
        let wr = SendWr {
            wr_id: wr_id(WR_OP, slot as u64),
            opcode: match op {
                crate::iface::Amo64::Add(add) => Opcode::FetchAdd { add },
                crate::iface::Amo64::Cswap { compare, swap } => Opcode::CompSwap { compare, swap },
            },
            sges: smallvec::smallvec![self.amo.sge(slot, 8)],
            remote_addr,
            rkey: rk,
            signaled: true,
        };
        if let Err(st) = self.post_wrs(ep, Some(slot), std::iter::once(wr)) {
            self.ops.remove(slot);
            return Err(st);
        }
        self.counters.atomics += 1;
        Ok(Done::Later)
    }

    fn umr_max_klm(&self) -> usize {
        self.max_klm
    }

    fn umr_keys(
        &mut self,
        id: (u128, u64, u64),
        segs: &[(u64, u64)],
        chunk: u64,
    ) -> UcsResult<Vec<u32>> {
        self.tick += 1;
        let k = (id.0, id.1, id.2, chunk);
        let lo = segs.iter().map(|s| s.0).min().unwrap_or(0);
        if let Some(e) = self.umr.get_mut(&k) {
            if e.alloc.is_none_or(|a| device_alloc(lo) == Some(a)) {
                e.last = self.tick;
                e.uses += 1;
                self.counters.umr_hits += 1;
                return Ok(e.keys.clone());
            }
            // Keys over a GPU allocation that is gone: never used again.
            if e.uses > 0 {
                return Err(Status::InvalidParam);
            }
            let e = self.umr.remove(&k).expect("found above");
            self.pool_back(e.keys);
            self.unref(&[e.reg]);
        }
        self.counters.umr_misses += 1;
        if segs.is_empty() || chunk == 0 {
            return Err(Status::InvalidParam);
        }
        let hi = segs
            .iter()
            .map(|s| s.0.saturating_add(s.1))
            .max()
            .unwrap_or(0);
        if self.umr.len() >= UMR_CACHE_MAX {
            self.evict_umr_set();
        }
        let reg = loop {
            match self.local_key(lo, hi - lo) {
                Ok(r) => break r,
                // The device is out of regions: free the pool's keys, or drop an unused
                // key set, and try again.
                Err(Status::NoResource) if self.drain_pool() || self.evict_umr_set() => {}
                Err(e) => return Err(e),
            }
        };
        loop {
            let built = self.configure_chunks(segs, reg.1, chunk);
            match built {
                Ok(keys) => {
                    self.umr.insert(
                        k,
                        UmrSet {
                            keys: keys.clone(),
                            reg,
                            last: self.tick,
                            uses: 1,
                            alloc: device_alloc(lo),
                        },
                    );
                    return Ok(keys);
                }
                // The device is out of keys: drop an unused set (its keys back to the
                // pool) and try again.
                Err(crate::tl::verbs::VerbsError::NoMemory) if self.evict_umr_set() => {}
                Err(e) => {
                    self.unref(&[reg]);
                    return Err(match e {
                        crate::tl::verbs::VerbsError::Invalid => Status::InvalidParam,
                        e => e.into(),
                    });
                }
            }
        }
    }

    fn umr_cost(&mut self) -> Option<UmrCost> {
        if self.umr_cost.is_none() {
            let c = calibrate(lock(&self.hca).as_mut(), self.max_klm, SEG);
            match c {
                Ok(c) => {
                    log::debug!("rc_verbs: UMR costs measured: {c:?}");
                    self.umr_cost = Some(c);
                }
                Err(e) => log::warn!("rc_verbs: UMR costs not measured ({e:?})"),
            }
        }
        self.umr_cost
    }

    fn umr_release(&mut self, id: (u128, u64, u64), chunk: u64) {
        if let Some(e) = self.umr.get_mut(&(id.0, id.1, id.2, chunk)) {
            e.uses = e.uses.saturating_sub(1);
        }
    }

    unsafe fn umr_put(
        &mut self,
        ep: EpId,
        local: &[u32],
        remote: &[u32],
        chunk: u64,
        total: u64,
        comp: Comp,
    ) -> UcsResult<Done> {
        self.ready(ep)?;
        if chunk == 0
            || local.len() != remote.len()
            || total.div_ceil(chunk) != local.len() as u64
            || chunk > u64::from(u32::MAX)
        {
            return Err(Status::InvalidParam);
        }
        if self.ops.len() >= MAX_OPS {
            return Err(Status::NoResource);
        }
        let op = self.ops.insert(Op {
            ep,
            comp,
            regs: SmallVec::new(),
            result: 0,
            signals: 0,
            status: None,
            unposted: 0,
        });
        let wrs: Vec<SendWr> = local
            .iter()
            .zip(remote)
            .enumerate()
            .map(|(i, (&l, &r))| SendWr {
                wr_id: wr_id(WR_OP, op as u64),
                opcode: Opcode::RdmaWrite,
                sges: smallvec::smallvec![Sge {
                    addr: 0,
                    len: chunk.min(total - i as u64 * chunk) as u32,
                    lkey: l,
                }],
                remote_addr: 0,
                rkey: r,
                signaled: false,
            })
            .collect();
        if let Err(st) = self.post_wrs(ep, Some(op), wrs.into_iter()) {
            self.ops.remove(op);
            return Err(st);
        }
        self.counters.umr_writes += local.len() as u64;
        self.counters.rma_bytes += total;
        Ok(Done::Later)
    }

    fn pending_add(&mut self, ep: EpId, token: u64) -> UcsResult<()> {
        let e = self.eps.get(ep.index()).ok_or(Status::InvalidParam)?;
        if let State::Failed(s) = e.state {
            return Err(s);
        }
        if self.can_send(e) && e.pending.is_empty() {
            return Err(Status::Busy);
        }
        self.eps[ep.index()].pending.push_back(token);
        Ok(())
    }

    fn pending_purge(&mut self, ep: EpId) -> Vec<u64> {
        self.eps
            .get_mut(ep.index())
            .map(|e| e.pending.drain(..).collect())
            .unwrap_or_default()
    }

    fn flush(&mut self, ep: Option<EpId>, comp: Comp) -> UcsResult<Done> {
        match ep {
            Some(ep) => {
                let e = self.eps.get_mut(ep.index()).ok_or(Status::InvalidParam)?;
                match e.state {
                    State::Failed(s) => Err(s),
                    _ if e.outstanding == 0 => Ok(Done::Now),
                    _ => {
                        e.flushes.push(comp);
                        Ok(Done::Later)
                    }
                }
            }
            None if self.total_outstanding == 0 => Ok(Done::Now),
            None => {
                self.all_flushes.push(comp);
                Ok(Done::Later)
            }
        }
    }

    fn ep_idle(&self, ep: EpId) -> bool {
        self.eps
            .get(ep.index())
            .is_some_and(|e| e.outstanding == 0 && e.state == State::Ready)
    }

    fn progress(&mut self, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        self.progress_calls = self.progress_calls.wrapping_add(1);
        // The connection manager: every call while our requests wait, else now and then
        // for peers' requests.
        if self.connecting > 0 || self.progress_calls.is_multiple_of(16) {
            let unsent: Vec<EpId> = self
                .eps
                .iter()
                .filter(|(_, e)| e.state == State::Unsent)
                .map(|(i, _)| EpId(i as u32))
                .collect();
            for ep in unsent {
                self.send_request(ep);
            }
            n += self.handle_cm(h);
        }
        n += self.poll_recv(h, 32);
        let mut wcs = std::mem::take(&mut self.wcs);
        wcs.clear();
        // Sends and RMA.
        lock(&self.hca).poll_cq(self.send_cq, 64, &mut wcs);
        for w in wcs.drain(..) {
            self.send_completion(w);
        }
        self.wcs = wcs;
        // Peers that stopped answering.
        if self.progress_calls.is_multiple_of(256) {
            let now = ucs::time::now_ns();
            if now >= self.next_check {
                self.next_check = now + self.check_interval_ns;
                self.probe_peers();
            }
        }
        while let Some((c, s)) = self.done.pop_front() {
            h.completion(c, s);
            n += 1;
        }
        while let Some((ep, s)) = self.errors.pop_front() {
            h.ep_error(ep, s);
            n += 1;
        }
        // Endpoints that can send again.
        let ready: Vec<usize> = self
            .eps
            .iter()
            .filter(|(_, e)| !e.pending.is_empty() && self.can_send(e))
            .map(|(i, _)| i)
            .collect();
        for i in ready {
            let tokens: Vec<u64> = self.eps[i].pending.drain(..).collect();
            for t in tokens {
                h.pending(EpId(i as u32), t);
                n += 1;
            }
        }
        n
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        vec![
            ("sends", c.sends),
            ("recvs", c.recvs),
            ("rdma_writes", c.writes),
            ("rdma_reads", c.reads),
            ("rma_bytes", c.rma_bytes),
            ("reg_cache_hits", c.reg_hits),
            ("reg_cache_misses", c.reg_misses),
            ("mkeys_created", c.mkeys_created + POOL_INIT as u64),
            ("mkeys_configured", c.mkeys_configured),
            ("umr_cache_hits", c.umr_hits),
            ("umr_cache_misses", c.umr_misses),
            ("umr_writes", c.umr_writes),
            ("connects", c.connects),
            ("accepts", c.accepts),
            ("atomics", c.atomics),
        ]
    }
}

#[cfg(test)]
mod tests;
