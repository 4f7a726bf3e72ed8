//! The software HCA model: a [`Provider`] that runs between processes of one host. It is a
//! model of an HCA, not one, and says so (`name()`); `rc_verbs` uses it only when
//! configured to (`RUCX_SOFTHCA=1`).
//!
//! # How it works
//!
//! Each device is a table in a shared-memory segment (`ucs::shm`), whose address (owner
//! pid, descriptor, length) is the device address peers exchange: its memory regions and
//! UMR keys (the HCA's translation table), its queue pairs with their receive queues, and
//! its completion queues. Every mutation happens under the table's lock (a spin lock that
//! names its owner, taken over if the owner died). A work request is executed by the
//! requester's model when posted (or when polled, if it had to wait), against the
//! responder's table and memory: the responder's CPU takes no part, as with a real HCA.
//! Data moves with cross-memory attach (`process_vm_readv`/`writev`); GPU memory (where a
//! CUDA driver is) with CUDA copies, a peer's through the IPC handle its registration
//! recorded. A device holds 4096 regions and keys of at most 64 entries each. Its
//! connection manager is a mailbox of messages in the table (what `rdma_cm` carries on a
//! device: request, reply, reject, disconnect, with private data). Completion queues and
//! the mailbox are polled without the lock when nothing is new.
//!
//! # The rules it keeps
//!
//! * **Keys**: a key names a region of its device only; every local SGE and every remote
//!   access is checked against the region's range and access flags (local write for what
//!   the HCA writes locally; remote write, read, atomic for what the peer does). A bad
//!   local SGE completes with `LocProtErr`, a refused remote access with `RemAccessErr`.
//!   Deregistered keys (and keys of an older registration in the same slot) are refused.
//! * **Queue pairs**: Reset → Init → Rtr (connected to its remote QP) → Rts, any → Err,
//!   any → Reset; sends need Rts, receives Init or later. A responder whose QP is not
//!   connected to the requester refuses with `RemInvReqErr`.
//! * **Receive not ready**: a SEND finding no posted receive waits and is retried when the
//!   requester polls (RC with `rnr_retry = 7`, infinite, as UCX sets it); work requests of
//!   a QP run in order, so later ones wait behind it.
//! * **Errors flush**: the first failed request completes with its error and moves its QP
//!   to Err; every request after it, and every posted receive, completes `WrFlushErr`; the
//!   responder's QP goes to Err too. Posting to a QP in Err completes at once, flushed.
//! * **UMR**: an indirect key lists at most `max_klm` (address, length, key) entries, each
//!   inside a region of the device; its addresses run from 0 over the entries in order.
//!   Creating the key object costs `mkey_ns` (`RUCX_SOFTHCA_MKEY_NS`, default 30 µs: a
//!   system call and device resources), pointing it at a list costs `umr_ns`
//!   (`RUCX_SOFTHCA_UMR_NS`, default 2 µs: a UMR work request and its completion on
//!   ConnectX-class HCAs), and each configuration gives the key a new variant (low byte),
//!   so a peer's copy of the old number is refused. Caching and pooling then show in
//!   measurements as they would on hardware.
//! * **Zero-length RDMA** checks no key (IB's rule): it only proves the responder is there.
//! * **A dead responder** (exited, or a zombie not reaped yet): its memory cannot be reached,
//!   and a request that finds no receive or moves no bytes finds it gone: `RetryExcErr`,
//!   QP to Err.
//! * **Atomics** (8 bytes, aligned, remote atomic access) are atomic with respect to the
//!   other atomics of the responder's device (they run under its table lock), which is the
//!   guarantee IB gives between HCA atomics.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};

use ucs::shm::Segment;

use super::{
    Access, Caps, CmKind, CmMsg, Klm, Opcode, Provider, QpAddr, QpState, RecvWr, SendWr, Sge,
    VResult, VerbsError, Wc, WcOpcode, WcStatus, CM_PRIVATE,
};

const MAGIC: u64 = 0x5275_6378_5368_6361; // "RucxShca"
/// Memory regions and UMR keys of a device (a real HCA has millions; a layout of 16384
/// blocks cut into chunks of 63 takes 261 keys).
const MAX_MR: usize = 4096;
/// Largest `max_klm` a device can be configured with (the KLM pool is sized by it).
pub const MAX_KLM: usize = 64;
const MAX_QP: usize = 64;
const RQ_DEPTH: usize = 256;
const MAX_CQ: usize = 32;
const CQ_DEPTH: usize = 2048;
const MAX_SGE: usize = 4;
/// What configuring an indirect key costs by default, ns: a UMR work request and its
/// completion, a few microseconds on ConnectX-class HCAs (creating the key object costs
/// ten times that: `RUCX_SOFTHCA_MKEY_NS`).
pub const UMR_NS: u64 = 2_000;
/// Connection-manager messages a device's mailbox holds.
const CM_DEPTH: usize = 128;

#[repr(C)]
#[derive(Clone, Copy)]
struct MrEnt {
    gen: u32,
    valid: u32,
    access: u32,
    indirect: u32,
    base: u64,
    len: u64,
    klm_n: u32,
    /// The GPU of a region of device memory, -1 for host memory.
    dev: i32,
    /// Device memory: the allocation holding the region and its CUDA IPC handle, what a
    /// peer's model needs to reach it.
    alloc_base: u64,
    ipc: [u8; 64],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct KlmEnt {
    addr: u64,
    len: u64,
    key: u32,
    _pad: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct SgeRaw {
    addr: u64,
    len: u32,
    lkey: u32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct RqEnt {
    wr_id: u64,
    nsge: u32,
    _pad: u32,
    sge: [SgeRaw; MAX_SGE],
}

#[repr(C)]
struct QpEnt {
    valid: u32,
    state: u32,
    send_cq: u32,
    recv_cq: u32,
    rpid: u32,
    rfd: u32,
    rlen: u64,
    rqpn: u32,
    rq_head: u32,
    rq_tail: u32,
    _pad: u32,
    rq: [RqEnt; RQ_DEPTH],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct WcRaw {
    wr_id: u64,
    status: u32,
    opcode: u32,
    byte_len: u32,
    qpn: u32,
}

#[repr(C)]
struct CqEnt {
    valid: u32,
    head: u32,
    /// Written under the table lock; read without it to see whether there is anything
    /// to poll.
    tail: AtomicU32,
    overflow: u32,
    ring: [WcRaw; CQ_DEPTH],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CmRaw {
    kind: u32,
    qpn: u32,
    dev: [u8; 16],
    plen: u32,
    _pad: u32,
    private: [u8; CM_PRIVATE],
}

/// The device table. Zero-filled is the empty device.
#[repr(C)]
struct Table {
    lock: AtomicU32,
    _pad: u32,
    magic: u64,
    pid: u32,
    max_klm: u32,
    mrs: [MrEnt; MAX_MR],
    klms: [[KlmEnt; MAX_KLM]; MAX_MR],
    qps: [QpEnt; MAX_QP],
    cqs: [CqEnt; MAX_CQ],
    /// The connection manager's mailbox: messages peers sent to this device.
    cm_head: u32,
    /// As a CQ's tail: read without the lock to see whether there is anything to poll.
    cm_tail: AtomicU32,
    cm: [CmRaw; CM_DEPTH],
}

/// The table under its lock: plain access to every field.
struct Locked<'a> {
    t: &'a mut Table,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        self.t.lock.store(0, Ordering::Release);
    }
}

fn pid_alive(pid: u32) -> bool {
    // A killed process that is not reaped yet is a zombie: dead for the model.
    ucs::sys::process_alive(pid as i32)
}

/// Locks the table at `t` (mapped, at least `size_of::<Table>()` bytes).
///
/// # Safety
/// `t` points at a mapped device table that stays mapped while the guard lives; every
/// process accesses it only under this lock (but for the lock word itself).
unsafe fn lock<'a>(t: *mut Table) -> Locked<'a> {
    let me = std::process::id();
    // SAFETY: the lock word is an atomic at the start of the mapping.
    let word = unsafe { &(*t).lock };
    let mut spins = 0u32;
    loop {
        match word.compare_exchange_weak(0, me, Ordering::Acquire, Ordering::Relaxed) {
            Ok(_) => break,
            Err(owner) => {
                spins += 1;
                // Whether the owner still lives is asked once the spinning turned to
                // yielding, and every 64 yields after: under load a yield can last a
                // time slice, and a dead owner must not hold its peers for long.
                if spins >= 256 && spins.is_multiple_of(64) && owner != 0 && !pid_alive(owner) {
                    // The owner died holding it: take it over.
                    if word
                        .compare_exchange(owner, me, Ordering::Acquire, Ordering::Relaxed)
                        .is_ok()
                    {
                        break;
                    }
                }
                if spins > 256 {
                    // The holder may be off its CPU (more processes than cores): let it run.
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
    Locked {
        // SAFETY: we hold the lock, so no other reference to the table is in use; the
        // caller keeps the mapping while the guard lives.
        t: unsafe { &mut *t },
    }
}

fn key_of(idx: usize, gen: u32) -> u32 {
    ((idx as u32) << 8) | (gen & 0xff)
}

/// The region named by `key` in `t`, if it is a live registration of that key.
fn mr(t: &Table, key: u32) -> Option<(usize, &MrEnt)> {
    let idx = (key >> 8) as usize;
    let e = t.mrs.get(idx)?;
    (idx > 0 && e.valid != 0 && (e.gen & 0xff) == (key & 0xff)).then_some((idx, e))
}

/// A piece of memory a work request touches: `n` bytes at `a`, in the direct region `r`
/// of its device's table, on GPU `d` (-1: host memory).
#[derive(Clone, Copy, Debug)]
struct Pc {
    a: u64,
    n: u64,
    // Read only by the device memory path, built with the `cuda` feature.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    r: u32,
    d: i32,
}

fn xy(p: &[Pc]) -> Vec<(u64, u64)> {
    p.iter().map(|p| (p.a, p.n)).collect()
}

/// The pieces of `[addr, addr + len)` of region `key`, checked against its range and
/// `need` access; an indirect key is resolved through its entries.
fn resolve(t: &Table, key: u32, addr: u64, len: u64, need: Access) -> Option<Vec<Pc>> {
    let (idx, e) = mr(t, key)?;
    if !Access::from_bits_truncate(e.access).contains(need) {
        return None;
    }
    let end = addr.checked_add(len)?;
    if addr < e.base || end > e.base.checked_add(e.len)? {
        return None;
    }
    if e.indirect == 0 {
        return Some(vec![Pc {
            a: addr,
            n: len,
            r: idx as u32,
            d: e.dev,
        }]);
    }
    // Zero-based over the entries in order.
    let mut out = Vec::new();
    let (mut at, mut pos) = (addr, 0u64);
    for k in &t.klms[idx][..e.klm_n as usize] {
        let (s, f) = (pos, pos + k.len);
        if at < f && at < end {
            let from = at - s;
            let n = (f.min(end)) - at;
            let (r, d) = mr(t, k.key).map_or((0, -1), |(i, m)| (i as u32, m.dev));
            out.push(Pc {
                a: k.addr + from,
                n,
                r,
                d,
            });
            at += n;
        }
        pos = f;
        if at >= end {
            break;
        }
    }
    (at == end).then_some(out)
}

fn cq_push(t: &mut Table, cq: u32, wc: WcRaw) {
    let Some(c) = t.cqs.get_mut(cq as usize) else {
        return;
    };
    if c.valid == 0 {
        return;
    }
    let tail = c.tail.load(Ordering::Relaxed);
    if tail.wrapping_sub(c.head) as usize >= CQ_DEPTH {
        // A real CQ overrun is a fatal asynchronous event; the model counts it.
        c.overflow += 1;
        return;
    }
    c.ring[tail as usize % CQ_DEPTH] = wc;
    c.tail.store(tail.wrapping_add(1), Ordering::Release);
}

/// Moves QP `qpn` of `t` to Err, completing its posted receives `WrFlushErr`.
fn qp_to_err(t: &mut Table, qpn: u32) {
    let Some(q) = t.qps.get_mut(qpn as usize) else {
        return;
    };
    if q.valid == 0 {
        return;
    }
    q.state = QpState::Err as u32;
    let cq = q.recv_cq;
    let mut flushed = Vec::new();
    while q.rq_head != q.rq_tail {
        flushed.push(q.rq[q.rq_head as usize % RQ_DEPTH].wr_id);
        q.rq_head = q.rq_head.wrapping_add(1);
    }
    for wr_id in flushed {
        cq_push(
            t,
            cq,
            WcRaw {
                wr_id,
                status: WcStatus::WrFlushErr as u32,
                opcode: WcOpcode::Recv as u32,
                byte_len: 0,
                qpn,
            },
        );
    }
}

/// Copies between this process's `local` pieces and process `pid`'s `remote` pieces (the
/// same number of bytes); `to_remote` writes. `Err(errno)` on failure.
fn cma(pid: u32, local: &[(u64, u64)], remote: &[(u64, u64)], to_remote: bool) -> Result<(), i32> {
    let iov = |v: &[(u64, u64)]| -> Vec<libc::iovec> {
        v.iter()
            .map(|&(a, n)| libc::iovec {
                iov_base: a as *mut libc::c_void,
                iov_len: n as usize,
            })
            .collect()
    };
    let (l, r) = (iov(local), iov(remote));
    let total: u64 = local.iter().map(|p| p.1).sum();
    // Batches of at most 1024 entries on each side (IOV_MAX) would need splitting; the
    // model's requests have at most MAX_SGE local and MAX_KLM remote pieces.
    let call = if to_remote {
        libc::process_vm_writev
    } else {
        libc::process_vm_readv
    };
    // SAFETY: the iovecs describe memory of this process (checked against its regions by
    // the caller) and of `pid` (checked against the responder's regions); the kernel
    // checks both mappings and fails with EFAULT rather than touching anything else.
    let n = unsafe {
        call(
            pid as i32,
            l.as_ptr(),
            l.len() as _,
            r.as_ptr(),
            r.len() as _,
            0,
        )
    };
    if n < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    if n as u64 != total {
        return Err(libc::EFAULT);
    }
    Ok(())
}

/// Where `[addr, addr + len)` is GPU memory: its device, the allocation's base and its
/// IPC handle; `None` for host memory; `Fault` for a range that leaves its allocation.
fn device_region(addr: u64, len: u64) -> VResult<Option<(i32, u64, [u8; 64])>> {
    #[cfg(feature = "cuda")]
    if let Some(drv) = ucs::cuda::driver() {
        if let Some(m) = drv.pointer(addr) {
            if m.mem_type != ucs::memtype::MemoryType::Cuda {
                // Managed memory is host-accessible: the host path reaches it.
                return Ok(None);
            }
            if addr + len > m.base + m.len {
                return Err(VerbsError::Fault);
            }
            let h = drv.ipc_handle(m.base).map_err(|_| VerbsError::Fault)?;
            return Ok(Some((m.device, m.base, h)));
        }
    }
    let _ = (addr, len);
    Ok(None)
}

/// How a request ran.
enum Outcome {
    Done(WcStatus, u32),
    /// No receive posted at the responder: retry later.
    Rnr,
}

/// A software HCA device (see the module documentation).
pub struct SoftHca {
    seg: Segment,
    table: *mut Table,
    caps: Caps,
    mkey_ns: u64,
    umr_ns: u64,
    /// Peers' device tables, by their address.
    peers: HashMap<(u32, u32), Segment>,
    /// Send requests posted and not run yet (waiting behind a receive-not-ready), per QP.
    pending: HashMap<u32, VecDeque<SendWr>>,
    /// Unsignalled requests that ran and still hold their send-queue slot, per QP: as on
    /// an HCA, a slot is free again only when a later completion covers it.
    sq_held: HashMap<u32, usize>,
    /// Peers' device allocations mapped here: (pid, allocation base in the peer) → (IPC
    /// handle, device, address here).
    #[cfg(feature = "cuda")]
    ipc_maps: HashMap<(u32, u64), ([u8; 64], i32, u64)>,
    /// UMR keys created, the time spent creating them, and configurations (UMR work
    /// requests).
    pub mkeys_created: u64,
    pub mkey_create_ns: u64,
    pub mkeys_configured: u64,
}

// SAFETY: the table pointer is into `seg`, owned by this value; all access goes through
// the table lock.
unsafe impl Send for SoftHca {}

#[cfg(feature = "cuda")]
impl Drop for SoftHca {
    fn drop(&mut self) {
        if let Some(drv) = ucs::cuda::driver() {
            for (_, (_, dev, p)) in self.ipc_maps.drain() {
                // SAFETY: opened by `ipc_mapping` on `dev`, used by nothing after the model.
                unsafe { drv.ipc_close(dev, p) };
            }
        }
    }
}

impl std::fmt::Debug for SoftHca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SoftHca(pid {}, fd {})",
            std::process::id(),
            self.seg.fd()
        )
    }
}

impl SoftHca {
    /// A device with `max_klm` entries per UMR key (at most [`MAX_KLM`]), a key creation
    /// cost of `mkey_ns`, and a configuration (UMR work request) cost of
    /// [`UMR_NS`] or `mkey_ns`, the smaller.
    pub fn open(max_klm: usize, mkey_ns: u64) -> VResult<SoftHca> {
        if max_klm == 0 || max_klm > MAX_KLM {
            return Err(VerbsError::Invalid);
        }
        let seg =
            Segment::create(std::mem::size_of::<Table>()).map_err(|_| VerbsError::NoMemory)?;
        let table = seg.base().cast::<Table>();
        {
            // SAFETY: a fresh zero-filled mapping of the table's size.
            let l = unsafe { lock(table) };
            l.t.magic = MAGIC;
            l.t.pid = std::process::id();
            l.t.max_klm = max_klm as u32;
        }
        Ok(SoftHca {
            seg,
            table,
            caps: Caps {
                max_klm,
                max_sge: MAX_SGE,
                max_qp_wr: RQ_DEPTH,
                max_cqe: CQ_DEPTH,
            },
            mkey_ns,
            umr_ns: UMR_NS.min(mkey_ns),
            peers: HashMap::new(),
            pending: HashMap::new(),
            sq_held: HashMap::new(),
            #[cfg(feature = "cuda")]
            ipc_maps: HashMap::new(),
            mkeys_created: 0,
            mkey_create_ns: 0,
            mkeys_configured: 0,
        })
    }

    /// As configured: `RUCX_SOFTHCA_MAX_KLM` (default 64), `RUCX_SOFTHCA_MKEY_NS`
    /// (default 30000), `RUCX_SOFTHCA_UMR_NS` (default [`UMR_NS`]).
    pub fn from_env() -> VResult<SoftHca> {
        let num = |k: &str, d: u64| {
            std::env::var(k)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(d)
        };
        let mut h = SoftHca::open(
            num("RUCX_SOFTHCA_MAX_KLM", 64) as usize,
            num("RUCX_SOFTHCA_MKEY_NS", 30_000),
        )?;
        h.umr_ns = num("RUCX_SOFTHCA_UMR_NS", UMR_NS);
        Ok(h)
    }

    fn lock(&self) -> Locked<'_> {
        // SAFETY: our own table, mapped while `self` lives.
        unsafe { lock(self.table) }
    }

    /// The table of the device at `addr` (ours, or a peer's, attached once).
    fn peer_table(&mut self, pid: u32, fd: u32, len: u64) -> Option<*mut Table> {
        if pid == std::process::id() && fd as i32 == self.seg.fd() {
            return Some(self.table);
        }
        if len as usize != std::mem::size_of::<Table>() {
            return None;
        }
        let t = match self.peers.entry((pid, fd)) {
            std::collections::hash_map::Entry::Occupied(e) => e.get().base(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let s = Segment::attach(pid as i32, fd, len as usize).ok()?;
                v.insert(s).base()
            }
        }
        .cast::<Table>();
        // SAFETY: a mapping of a device table's size; the magic is read under the lock.
        let ok = unsafe { lock(t) }.t.magic == MAGIC;
        ok.then_some(t)
    }

    /// The local pieces of `sges`, checked against our regions (`need`: what the HCA
    /// does with them).
    fn local_pieces(&self, sges: &[Sge], need: Access) -> Option<Vec<Pc>> {
        let l = self.lock();
        let mut out = Vec::with_capacity(sges.len());
        for s in sges {
            out.extend(resolve(l.t, s.lkey, s.addr, u64::from(s.len), need)?);
        }
        Some(out)
    }

    /// Runs `wr` of QP `qpn` against its responder.
    fn execute(&mut self, qpn: u32, wr: &SendWr) -> Outcome {
        let (rpid, rfd, rlen, rqpn) = {
            let l = self.lock();
            let q = &l.t.qps[qpn as usize];
            (q.rpid, q.rfd, q.rlen, q.rqpn)
        };
        let need_local = match wr.opcode {
            Opcode::Send | Opcode::RdmaWrite => Access::empty(),
            _ => Access::LOCAL_WRITE,
        };
        let Some(local) = self.local_pieces(&wr.sges, need_local) else {
            return Outcome::Done(WcStatus::LocProtErr, 0);
        };
        let bytes: u64 = local.iter().map(|p| p.n).sum();
        let Some(rt) = self.peer_table(rpid, rfd, rlen) else {
            return Outcome::Done(WcStatus::RetryExcErr, 0);
        };
        let me = std::process::id();
        let my_fd = self.seg.fd() as u32;
        // SAFETY: a peer table attached above (or ours), mapped while `self` lives.
        let g = unsafe { lock(rt) };
        let t = &mut *g.t;
        let Some(rq) = t.qps.get(rqpn as usize).filter(|q| q.valid != 0) else {
            return Outcome::Done(WcStatus::RemInvReqErr, 0);
        };
        let connected = rq.rpid == me && rq.rfd == my_fd && rq.rqpn == qpn;
        let st = QpState::from_u32(rq.state);
        if !connected || !matches!(st, QpState::Rtr | QpState::Rts) {
            return Outcome::Done(WcStatus::RemInvReqErr, 0);
        }
        let cma_err = |e: i32| {
            if e == libc::ESRCH {
                WcStatus::RetryExcErr
            } else {
                WcStatus::RemAccessErr
            }
        };
        match wr.opcode {
            Opcode::Send => {
                let q = &mut t.qps[rqpn as usize];
                if q.rq_head == q.rq_tail {
                    // A live responder answers "receiver not ready"; a dead one does not
                    // answer at all, and the retries run out.
                    if !pid_alive(rpid) {
                        return Outcome::Done(WcStatus::RetryExcErr, 0);
                    }
                    return Outcome::Rnr;
                }
                let e = q.rq[q.rq_head as usize % RQ_DEPTH];
                q.rq_head = q.rq_head.wrapping_add(1);
                let recv_cq = q.recv_cq;
                let mut dst = Vec::new();
                let mut room = 0u64;
                let mut ok = true;
                for s in &e.sge[..e.nsge as usize] {
                    match resolve(t, s.lkey, s.addr, u64::from(s.len), Access::LOCAL_WRITE) {
                        Some(p) => {
                            room += u64::from(s.len);
                            dst.extend(p);
                        }
                        None => ok = false,
                    }
                }
                let (rs, ss) = if !ok {
                    (WcStatus::LocProtErr, WcStatus::RemInvReqErr)
                } else if bytes > room {
                    (WcStatus::LocLenErr, WcStatus::RemInvReqErr)
                } else {
                    // The receive's pieces cut to the message's length.
                    let mut left = bytes;
                    let cut: Vec<Pc> = dst
                        .iter()
                        .filter_map(|&p: &Pc| {
                            let m = p.n.min(left);
                            left -= m;
                            (m > 0).then_some(Pc { n: m, ..p })
                        })
                        .collect();
                    match self.dma(t, &local, &cut, true) {
                        Ok(()) => (WcStatus::Success, WcStatus::Success),
                        Err(e) => (WcStatus::LocProtErr, cma_err(e)),
                    }
                };
                cq_push(
                    t,
                    recv_cq,
                    WcRaw {
                        wr_id: e.wr_id,
                        status: rs as u32,
                        opcode: WcOpcode::Recv as u32,
                        byte_len: if rs == WcStatus::Success {
                            bytes as u32
                        } else {
                            0
                        },
                        qpn: rqpn,
                    },
                );
                if ss != WcStatus::Success {
                    qp_to_err(t, rqpn);
                }
                Outcome::Done(ss, bytes as u32)
            }
            Opcode::RdmaWrite | Opcode::RdmaRead => {
                let need = if wr.opcode == Opcode::RdmaWrite {
                    Access::REMOTE_WRITE
                } else {
                    Access::REMOTE_READ
                };
                if bytes == 0 {
                    // A zero-length RDMA operation checks no key (IB's rule): it only
                    // proves the responder is there.
                    if !pid_alive(rpid) {
                        return Outcome::Done(WcStatus::RetryExcErr, 0);
                    }
                    return Outcome::Done(WcStatus::Success, 0);
                }
                let Some(remote) = resolve(t, wr.rkey, wr.remote_addr, bytes, need) else {
                    qp_to_err(t, rqpn);
                    return Outcome::Done(WcStatus::RemAccessErr, 0);
                };
                match self.dma(t, &local, &remote, wr.opcode == Opcode::RdmaWrite) {
                    Ok(()) => Outcome::Done(WcStatus::Success, bytes as u32),
                    Err(e) => {
                        qp_to_err(t, rqpn);
                        Outcome::Done(cma_err(e), 0)
                    }
                }
            }
            Opcode::FetchAdd { .. } | Opcode::CompSwap { .. } => {
                // Atomics on host memory only (the model has no device atomics).
                let remote = resolve(t, wr.rkey, wr.remote_addr, 8, Access::REMOTE_ATOMIC)
                    .filter(|r| r.len() == 1 && r[0].a % 8 == 0 && r[0].d < 0 && bytes == 8)
                    .map(|r| xy(&r));
                let Some(remote) = remote else {
                    qp_to_err(t, rqpn);
                    return Outcome::Done(WcStatus::RemAccessErr, 0);
                };
                // Read, compute and write under the responder's lock: atomic with respect
                // to every other atomic of that device.
                let mut old = 0u64;
                let tmp = [(&mut old as *mut u64 as u64, 8u64)];
                if let Err(e) = cma(t.pid, &tmp, &remote, false) {
                    qp_to_err(t, rqpn);
                    return Outcome::Done(cma_err(e), 0);
                }
                let new = match wr.opcode {
                    Opcode::FetchAdd { add } => Some(old.wrapping_add(add)),
                    Opcode::CompSwap { compare, swap } => (old == compare).then_some(swap),
                    _ => None,
                };
                if let Some(mut v) = new {
                    let src = [(&mut v as *mut u64 as u64, 8u64)];
                    if let Err(e) = cma(t.pid, &src, &remote, true) {
                        qp_to_err(t, rqpn);
                        return Outcome::Done(cma_err(e), 0);
                    }
                }
                drop(g);
                // The old value into the local SGE (checked for local write above).
                let src = [(&mut old as *mut u64 as u64, 8u64)];
                if local.iter().any(|p| p.d >= 0) {
                    return Outcome::Done(WcStatus::LocProtErr, 0);
                }
                match cma(std::process::id(), &xy(&local), &src, false) {
                    Ok(()) => Outcome::Done(WcStatus::Success, 8),
                    Err(_) => Outcome::Done(WcStatus::LocProtErr, 0),
                }
            }
        }
    }

    /// The model's DMA engine: moves the bytes between this process's `local` pieces and
    /// the responder's `remote` pieces (table `t`, held locked by the caller; the same
    /// number of bytes), `to_remote` writing. Host memory on both sides moves by
    /// cross-memory attach in one call; device memory by CUDA copies, the responder's
    /// device memory through its IPC handle (opened once per allocation, cached). `Err`
    /// carries an errno as `cma` does.
    fn dma(&mut self, t: &Table, local: &[Pc], remote: &[Pc], to_remote: bool) -> Result<(), i32> {
        if local.iter().chain(remote).all(|p| p.d < 0) {
            return cma(t.pid, &xy(local), &xy(remote), to_remote);
        }
        #[cfg(feature = "cuda")]
        {
            self.dma_device(t, local, remote, to_remote)
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = to_remote;
            Err(libc::EFAULT)
        }
    }

    /// [`dma`](Self::dma) where device memory takes part: piece by piece.
    #[cfg(feature = "cuda")]
    fn dma_device(
        &mut self,
        t: &Table,
        local: &[Pc],
        remote: &[Pc],
        to_remote: bool,
    ) -> Result<(), i32> {
        let drv = ucs::cuda::driver().ok_or(libc::EFAULT)?;
        let me = std::process::id();
        let mut tmp: Vec<u8> = Vec::new();
        let (lx, rx) = (xy(local), xy(remote));
        for (li, la, ri, ra, n) in crate::tl::pieces(&lx, &rx, u64::MAX) {
            let (l, r) = (local[li], remote[ri]);
            if r.d >= 0 {
                // The responder's device memory, mapped here (its own address when the
                // responder is this process).
                let m = t.mrs.get(r.r as usize).ok_or(libc::EFAULT)?;
                let base = if t.pid == me {
                    m.alloc_base
                } else {
                    self.ipc_mapping(t.pid, m.dev, m.alloc_base, &m.ipc)?
                };
                let at = base + (ra - m.alloc_base);
                let (dst, src) = if to_remote { (at, la) } else { (la, at) };
                drv.copy(dst, src, n as usize).map_err(|e| {
                    log::debug!("software HCA model: device copy of {n} bytes: {e}");
                    libc::EFAULT
                })?;
            } else if l.d >= 0 {
                // Our device memory and the responder's host memory: through a host buffer.
                tmp.resize(n as usize, 0);
                let h = tmp.as_mut_ptr() as u64;
                if to_remote {
                    drv.copy(h, la, n as usize).map_err(|_| libc::EFAULT)?;
                    cma(t.pid, &[(h, n)], &[(ra, n)], true)?;
                } else {
                    cma(t.pid, &[(h, n)], &[(ra, n)], false)?;
                    drv.copy(la, h, n as usize).map_err(|_| libc::EFAULT)?;
                }
            } else {
                cma(t.pid, &[(la, n)], &[(ra, n)], to_remote)?;
            }
        }
        Ok(())
    }

    /// A peer's device allocation (at `base` in the peer, exported as IPC handle `h`)
    /// mapped into this process, opened on first use. A mapping of an earlier allocation
    /// at the same address (freed since, its handle different) is closed first, and where
    /// the driver still refuses (another stale mapping overlaps), every mapping of that
    /// peer is closed and the open tried once more: the peer's memory is never reached
    /// through a stale mapping.
    #[cfg(feature = "cuda")]
    fn ipc_mapping(&mut self, pid: u32, dev: i32, base: u64, h: &[u8; 64]) -> Result<u64, i32> {
        let drv = ucs::cuda::driver().ok_or(libc::EFAULT)?;
        match self.ipc_maps.get(&(pid, base)) {
            Some((old, _, p)) if old == h => return Ok(*p),
            Some(&(_, d, p)) => {
                self.ipc_maps.remove(&(pid, base));
                // SAFETY: opened by this function on `d`; its allocation is gone.
                unsafe { drv.ipc_close(d, p) };
            }
            None => {}
        }
        let p = match drv.ipc_open(dev, h) {
            Ok(p) => p,
            Err(_) => {
                let stale: Vec<(u32, u64)> = self
                    .ipc_maps
                    .keys()
                    .filter(|k| k.0 == pid)
                    .copied()
                    .collect();
                for k in stale {
                    if let Some((_, d, p)) = self.ipc_maps.remove(&k) {
                        // SAFETY: as above; nothing uses it after this.
                        unsafe { drv.ipc_close(d, p) };
                    }
                }
                drv.ipc_open(dev, h).map_err(|e| {
                    log::debug!("software HCA model: opening a peer's GPU memory: {e}");
                    libc::EFAULT
                })?
            }
        };
        self.ipc_maps.insert((pid, base), (*h, dev, p));
        Ok(p)
    }

    /// Runs QP `qpn`'s pending sends in order, until one waits for a receive.
    fn run_pending(&mut self, qpn: u32) {
        loop {
            let Some(wr) = self.pending.get(&qpn).and_then(|q| q.front()).cloned() else {
                return;
            };
            let (state, send_cq) = {
                let l = self.lock();
                let q = &l.t.qps[qpn as usize];
                (QpState::from_u32(q.state), q.send_cq)
            };
            let outcome = if state == QpState::Err {
                Outcome::Done(WcStatus::WrFlushErr, 0)
            } else {
                self.execute(qpn, &wr)
            };
            let (status, n) = match outcome {
                Outcome::Rnr => return,
                Outcome::Done(s, n) => (s, n),
            };
            if let Some(q) = self.pending.get_mut(&qpn) {
                q.pop_front();
            }
            if status != WcStatus::Success && state != QpState::Err {
                log::debug!(
                    "software HCA model: {:?} of {} bytes on QP {qpn} failed: {status:?}",
                    wr.opcode,
                    wr.sges.iter().map(|s| u64::from(s.len)).sum::<u64>()
                );
            }
            let held = self.sq_held.entry(qpn).or_default();
            if status != WcStatus::Success || wr.signaled {
                *held = 0;
            } else {
                *held += 1;
            }
            let l = self.lock();
            if status != WcStatus::Success && state != QpState::Err {
                qp_to_err(l.t, qpn);
            }
            if status != WcStatus::Success || wr.signaled {
                let opcode = match wr.opcode {
                    Opcode::Send => WcOpcode::Send,
                    Opcode::RdmaWrite => WcOpcode::RdmaWrite,
                    Opcode::RdmaRead => WcOpcode::RdmaRead,
                    _ => WcOpcode::Atomic,
                };
                cq_push(
                    l.t,
                    send_cq,
                    WcRaw {
                        wr_id: wr.wr_id,
                        status: status as u32,
                        opcode: opcode as u32,
                        byte_len: n,
                        qpn,
                    },
                );
            }
        }
    }

    /// The peer table at a device address (16 bytes: pid, descriptor, length).
    fn table_at(&mut self, dev: &[u8]) -> Option<*mut Table> {
        let d: &[u8; 16] = dev.try_into().ok()?;
        let pid = u32::from_le_bytes(d[0..4].try_into().ok()?);
        let fd = u32::from_le_bytes(d[4..8].try_into().ok()?);
        let len = u64::from_le_bytes(d[8..16].try_into().ok()?);
        if !pid_alive(pid) {
            return None;
        }
        self.peer_table(pid, fd, len)
    }

    /// CQ overruns so far (a real HCA raises a fatal event).
    pub fn cq_overflows(&self, cq: u32) -> u32 {
        self.lock().t.cqs.get(cq as usize).map_or(0, |c| c.overflow)
    }
}

impl Provider for SoftHca {
    fn name(&self) -> &str {
        "software HCA model"
    }

    fn caps(&self) -> Caps {
        self.caps
    }

    fn device_address(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(16);
        v.extend_from_slice(&std::process::id().to_le_bytes());
        v.extend_from_slice(&(self.seg.fd() as u32).to_le_bytes());
        v.extend_from_slice(&(self.seg.len() as u64).to_le_bytes());
        v
    }

    fn reg_mr(&mut self, addr: u64, len: u64, access: Access) -> VResult<u32> {
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(VerbsError::Invalid);
        }
        // GPU memory (where the CUDA driver is): the region must lie in one allocation,
        // whose IPC handle peers' models open to reach it.
        let (dev, alloc_base, ipc) = match device_region(addr, len)? {
            Some(d) => d,
            None => {
                // Registration pins memory: memory that is not mapped cannot be registered.
                let mut probe = [0u8; 1];
                for a in [addr, addr + len - 1] {
                    let dst = [(probe.as_mut_ptr() as u64, 1u64)];
                    cma(std::process::id(), &dst, &[(a, 1)], false)
                        .map_err(|_| VerbsError::Fault)?;
                }
                (-1, 0, [0u8; 64])
            }
        };
        let l = self.lock();
        let idx = (1..MAX_MR)
            .find(|&i| l.t.mrs[i].valid == 0)
            .ok_or(VerbsError::NoMemory)?;
        let e = &mut l.t.mrs[idx];
        e.gen = e.gen.wrapping_add(1);
        e.valid = 1;
        e.access = access.bits();
        e.indirect = 0;
        e.base = addr;
        e.len = len;
        e.klm_n = 0;
        e.dev = dev;
        e.alloc_base = alloc_base;
        e.ipc = ipc;
        Ok(key_of(idx, e.gen))
    }

    fn dereg_mr(&mut self, key: u32) -> VResult<()> {
        let l = self.lock();
        let (idx, e) = mr(l.t, key).ok_or(VerbsError::Invalid)?;
        if e.indirect != 0 {
            return Err(VerbsError::Invalid);
        }
        l.t.mrs[idx].valid = 0;
        Ok(())
    }

    fn alloc_mkey(&mut self) -> VResult<u32> {
        let t0 = ucs::time::now_ns();
        let (idx, gen) = {
            let l = self.lock();
            let idx = (1..MAX_MR)
                .find(|&i| l.t.mrs[i].valid == 0)
                .ok_or(VerbsError::NoMemory)?;
            let e = &mut l.t.mrs[idx];
            e.gen = e.gen.wrapping_add(1);
            e.valid = 1;
            e.access = 0;
            e.indirect = 1;
            e.base = 0;
            e.len = 0;
            e.klm_n = 0;
            e.dev = -1;
            (idx, e.gen)
        };
        // The cost of creating the key object (a system call and device resources).
        while ucs::time::now_ns().saturating_sub(t0) < self.mkey_ns {
            std::hint::spin_loop();
        }
        self.mkeys_created += 1;
        self.mkey_create_ns += ucs::time::now_ns() - t0;
        Ok(key_of(idx, gen))
    }

    fn configure_mkey(&mut self, key: u32, entries: &[Klm], access: Access) -> VResult<u32> {
        if entries.is_empty() || entries.len() > self.caps.max_klm {
            return Err(VerbsError::Invalid);
        }
        let t0 = ucs::time::now_ns();
        let slot = {
            let l = self.lock();
            let (idx, e) = mr(l.t, key).ok_or(VerbsError::Invalid)?;
            if e.indirect == 0 {
                return Err(VerbsError::Invalid);
            }
            let mut total = 0u64;
            for k in entries {
                // Each entry lies in a direct region of this device.
                match mr(l.t, k.key) {
                    Some((_, e))
                        if e.indirect == 0
                            && k.addr >= e.base
                            && k.addr
                                .checked_add(k.len)
                                .is_some_and(|x| x <= e.base + e.len) => {}
                    _ => return Err(VerbsError::Invalid),
                }
                total = total.checked_add(k.len).ok_or(VerbsError::Invalid)?;
            }
            for (i, k) in entries.iter().enumerate() {
                l.t.klms[idx][i] = KlmEnt {
                    addr: k.addr,
                    len: k.len,
                    key: k.key,
                    _pad: 0,
                };
            }
            let e = &mut l.t.mrs[idx];
            e.gen = e.gen.wrapping_add(1);
            e.access = access.bits();
            e.len = total;
            e.klm_n = entries.len() as u32;
            (idx, e.gen)
        };
        // The HCA's cost of a UMR work request and its completion.
        while ucs::time::now_ns().saturating_sub(t0) < self.umr_ns {
            std::hint::spin_loop();
        }
        self.mkeys_configured += 1;
        Ok(key_of(slot.0, slot.1))
    }

    fn destroy_mkey(&mut self, key: u32) -> VResult<()> {
        let l = self.lock();
        let (idx, e) = mr(l.t, key).ok_or(VerbsError::Invalid)?;
        if e.indirect == 0 {
            return Err(VerbsError::Invalid);
        }
        l.t.mrs[idx].valid = 0;
        Ok(())
    }

    fn create_cq(&mut self) -> VResult<u32> {
        let l = self.lock();
        let i = (0..MAX_CQ)
            .find(|&i| l.t.cqs[i].valid == 0)
            .ok_or(VerbsError::NoMemory)?;
        let c = &mut l.t.cqs[i];
        c.valid = 1;
        c.head = 0;
        c.tail.store(0, Ordering::Relaxed);
        c.overflow = 0;
        Ok(i as u32)
    }

    fn create_qp(&mut self, send_cq: u32, recv_cq: u32) -> VResult<u32> {
        let l = self.lock();
        for cq in [send_cq, recv_cq] {
            if l.t.cqs.get(cq as usize).is_none_or(|c| c.valid == 0) {
                return Err(VerbsError::Invalid);
            }
        }
        let i = (1..MAX_QP)
            .find(|&i| l.t.qps[i].valid == 0)
            .ok_or(VerbsError::NoMemory)?;
        let q = &mut l.t.qps[i];
        q.valid = 1;
        q.state = QpState::Reset as u32;
        q.send_cq = send_cq;
        q.recv_cq = recv_cq;
        q.rpid = 0;
        q.rfd = 0;
        q.rlen = 0;
        q.rqpn = 0;
        q.rq_head = 0;
        q.rq_tail = 0;
        Ok(i as u32)
    }

    fn modify_qp(&mut self, qpn: u32, state: QpState, remote: Option<&QpAddr>) -> VResult<()> {
        let to_err;
        {
            let l = self.lock();
            let q =
                l.t.qps
                    .get_mut(qpn as usize)
                    .filter(|q| q.valid != 0)
                    .ok_or(VerbsError::Invalid)?;
            let cur = QpState::from_u32(q.state);
            match (cur, state) {
                (QpState::Reset, QpState::Init) | (QpState::Rtr, QpState::Rts) => {
                    q.state = state as u32;
                }
                (QpState::Init, QpState::Rtr) => {
                    let r = remote.ok_or(VerbsError::Invalid)?;
                    let d = &r.device;
                    if d.len() != 16 {
                        return Err(VerbsError::Invalid);
                    }
                    q.rpid =
                        u32::from_le_bytes(d[0..4].try_into().map_err(|_| VerbsError::Invalid)?);
                    q.rfd =
                        u32::from_le_bytes(d[4..8].try_into().map_err(|_| VerbsError::Invalid)?);
                    q.rlen =
                        u64::from_le_bytes(d[8..16].try_into().map_err(|_| VerbsError::Invalid)?);
                    q.rqpn = r.qpn;
                    q.state = state as u32;
                }
                (_, QpState::Reset) => {
                    q.state = QpState::Reset as u32;
                    q.rq_head = 0;
                    q.rq_tail = 0;
                    q.rpid = 0;
                    q.rqpn = 0;
                }
                (_, QpState::Err) => {}
                _ => return Err(VerbsError::Invalid),
            }
            to_err = state == QpState::Err;
            if to_err {
                qp_to_err(l.t, qpn);
            }
        }
        if state == QpState::Reset {
            self.pending.remove(&qpn);
            self.sq_held.remove(&qpn);
        }
        if to_err {
            // Requests waiting to run are flushed.
            self.run_pending(qpn);
        }
        Ok(())
    }

    fn query_qp(&self, qpn: u32) -> VResult<QpState> {
        let l = self.lock();
        l.t.qps
            .get(qpn as usize)
            .filter(|q| q.valid != 0)
            .map(|q| QpState::from_u32(q.state))
            .ok_or(VerbsError::Invalid)
    }

    fn destroy_qp(&mut self, qpn: u32) -> VResult<()> {
        let l = self.lock();
        let q =
            l.t.qps
                .get_mut(qpn as usize)
                .filter(|q| q.valid != 0)
                .ok_or(VerbsError::Invalid)?;
        q.valid = 0;
        drop(l);
        self.pending.remove(&qpn);
        self.sq_held.remove(&qpn);
        Ok(())
    }

    fn post_send(&mut self, qpn: u32, wr: &SendWr) -> VResult<()> {
        if wr.sges.len() > MAX_SGE {
            return Err(VerbsError::Invalid);
        }
        let state = self.query_qp(qpn)?;
        if !matches!(state, QpState::Rts | QpState::Err) {
            return Err(VerbsError::Invalid);
        }
        let held = self.sq_held.get(&qpn).copied().unwrap_or(0);
        let q = self.pending.entry(qpn).or_default();
        if q.len() + held >= RQ_DEPTH {
            return Err(VerbsError::NoMemory);
        }
        q.push_back(wr.clone());
        self.run_pending(qpn);
        Ok(())
    }

    fn post_recv(&mut self, qpn: u32, wr: &RecvWr) -> VResult<()> {
        if wr.sges.len() > MAX_SGE {
            return Err(VerbsError::Invalid);
        }
        let l = self.lock();
        let q =
            l.t.qps
                .get_mut(qpn as usize)
                .filter(|q| q.valid != 0)
                .ok_or(VerbsError::Invalid)?;
        match QpState::from_u32(q.state) {
            QpState::Reset => return Err(VerbsError::Invalid),
            QpState::Err => {
                let cq = q.recv_cq;
                cq_push(
                    l.t,
                    cq,
                    WcRaw {
                        wr_id: wr.wr_id,
                        status: WcStatus::WrFlushErr as u32,
                        opcode: WcOpcode::Recv as u32,
                        byte_len: 0,
                        qpn,
                    },
                );
                return Ok(());
            }
            _ => {}
        }
        if q.rq_tail.wrapping_sub(q.rq_head) as usize >= RQ_DEPTH {
            return Err(VerbsError::NoMemory);
        }
        let mut e = RqEnt {
            wr_id: wr.wr_id,
            nsge: wr.sges.len() as u32,
            _pad: 0,
            sge: [SgeRaw {
                addr: 0,
                len: 0,
                lkey: 0,
            }; MAX_SGE],
        };
        for (i, s) in wr.sges.iter().enumerate() {
            e.sge[i] = SgeRaw {
                addr: s.addr,
                len: s.len,
                lkey: s.lkey,
            };
        }
        q.rq[q.rq_tail as usize % RQ_DEPTH] = e;
        q.rq_tail = q.rq_tail.wrapping_add(1);
        Ok(())
    }

    fn cm_send(&mut self, to_device: &[u8], msg: &CmMsg) -> VResult<()> {
        if msg.private.len() > CM_PRIVATE || msg.from.device.len() != 16 {
            return Err(VerbsError::Invalid);
        }
        let t = self.table_at(to_device).ok_or(VerbsError::Fault)?;
        let mut raw = CmRaw {
            kind: msg.kind as u32,
            qpn: msg.from.qpn,
            dev: [0; 16],
            plen: msg.private.len() as u32,
            _pad: 0,
            private: [0; CM_PRIVATE],
        };
        raw.dev.copy_from_slice(&msg.from.device);
        raw.private[..msg.private.len()].copy_from_slice(&msg.private);
        // SAFETY: a device table attached by `table_at` (or ours), mapped while `self` lives.
        let l = unsafe { lock(t) };
        let tail = l.t.cm_tail.load(Ordering::Relaxed);
        if tail.wrapping_sub(l.t.cm_head) as usize >= CM_DEPTH {
            return Err(VerbsError::NoMemory);
        }
        l.t.cm[tail as usize % CM_DEPTH] = raw;
        l.t.cm_tail.store(tail.wrapping_add(1), Ordering::Release);
        Ok(())
    }

    fn cm_poll(&mut self, out: &mut Vec<CmMsg>) -> usize {
        // SAFETY: our own table, mapped while `self` lives; the tail is an atomic, read
        // through a reference to itself only (the rest of the table is not referenced).
        let tail = unsafe { &*std::ptr::addr_of!((*self.table).cm_tail) };
        // SAFETY: as above; only this process moves its own mailbox's head.
        let head = unsafe { std::ptr::addr_of!((*self.table).cm_head).read() };
        if tail.load(Ordering::Acquire) == head {
            return 0;
        }
        let l = self.lock();
        let mut n = 0;
        while l.t.cm_head != l.t.cm_tail.load(Ordering::Relaxed) {
            let r = l.t.cm[l.t.cm_head as usize % CM_DEPTH];
            l.t.cm_head = l.t.cm_head.wrapping_add(1);
            let Some(kind) = CmKind::from_u32(r.kind) else {
                continue;
            };
            out.push(CmMsg {
                kind,
                from: QpAddr {
                    device: r.dev.to_vec(),
                    qpn: r.qpn,
                },
                private: r.private[..(r.plen as usize).min(CM_PRIVATE)].to_vec(),
            });
            n += 1;
        }
        n
    }

    fn poll_cq(&mut self, cq: u32, max: usize, out: &mut Vec<Wc>) -> usize {
        // The HCA retries what waited for a receive.
        if self.pending.values().any(|q| !q.is_empty()) {
            let qps: Vec<u32> = self
                .pending
                .iter()
                .filter(|(_, q)| !q.is_empty())
                .map(|(k, _)| *k)
                .collect();
            for q in qps {
                self.run_pending(q);
            }
        }
        if cq as usize >= MAX_CQ {
            return 0;
        }
        // Nothing new: no lock (the peers' requests take it to complete into our CQs).
        // SAFETY: our own table, mapped while `self` lives; the tail is an atomic, read
        // through a reference to itself only.
        let tail = unsafe { &*std::ptr::addr_of!((*self.table).cqs[cq as usize].tail) };
        // SAFETY: as above; only this process moves its own CQ's head.
        let head = unsafe { std::ptr::addr_of!((*self.table).cqs[cq as usize].head).read() };
        if tail.load(Ordering::Acquire) == head {
            return 0;
        }
        let l = self.lock();
        let Some(c) = l.t.cqs.get_mut(cq as usize).filter(|c| c.valid != 0) else {
            return 0;
        };
        let mut n = 0;
        while n < max && c.head != c.tail.load(Ordering::Relaxed) {
            let w = c.ring[c.head as usize % CQ_DEPTH];
            c.head = c.head.wrapping_add(1);
            out.push(Wc {
                wr_id: w.wr_id,
                status: WcStatus::from_u32(w.status),
                opcode: WcOpcode::from_u32(w.opcode),
                byte_len: w.byte_len,
                qpn: w.qpn,
            });
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    //! Between two processes: the test re-runs its own binary as the responder
    //! (`RUCX_SOFTHCA_CHILD=1`), driven by lines on its stdin.
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

    use smallvec::smallvec;

    use super::*;
    use crate::test_util::{hex, pattern, unhex};

    const NAME: &str = "tl::verbs::model::tests::verbs_between_two_processes";

    fn connect(h: &mut SoftHca, qp: u32, dev: Vec<u8>, rqpn: u32) {
        h.modify_qp(qp, QpState::Init, None).unwrap();
        let r = QpAddr {
            device: dev,
            qpn: rqpn,
        };
        h.modify_qp(qp, QpState::Rtr, Some(&r)).unwrap();
        h.modify_qp(qp, QpState::Rts, None).unwrap();
    }

    fn reconnect(h: &mut SoftHca, qp: u32, dev: Vec<u8>, rqpn: u32) {
        h.modify_qp(qp, QpState::Reset, None).unwrap();
        connect(h, qp, dev, rqpn);
    }

    /// The responder.
    fn child() {
        let mut h = SoftHca::open(4, 0).unwrap();
        let cq = h.create_cq().unwrap();
        let qp = h.create_qp(cq, cq).unwrap();
        let mut buf = vec![0u8; 64 << 10];
        let ro = pattern(4096, 7);
        let mut at = vec![0u64; 8];
        at[0] = 100;
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
        let wkey = h
            .reg_mr(buf.as_mut_ptr() as u64, buf.len() as u64, rw)
            .unwrap();
        let rkey = h
            .reg_mr(ro.as_ptr() as u64, 4096, Access::REMOTE_READ)
            .unwrap();
        let akey = h
            .reg_mr(at.as_mut_ptr() as u64, 64, Access::REMOTE_ATOMIC)
            .unwrap();
        println!(
            "@@ DEV {} QP {qp} BUF {} W {wkey} RO {} R {rkey} AT {} A {akey}",
            hex(&h.device_address()),
            buf.as_ptr() as u64,
            ro.as_ptr() as u64,
            at.as_ptr() as u64
        );
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().lines();
        let l = lines.next().unwrap().unwrap();
        let f: Vec<&str> = l.split_whitespace().collect();
        let (pdev, pqp) = (unhex(f[1]), f[3].parse::<u32>().unwrap());
        connect(&mut h, qp, pdev.clone(), pqp);
        println!("@@ OK");
        #[cfg(feature = "cuda")]
        let mut gpu = 0u64;
        for l in lines {
            let l = l.unwrap();
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[0] {
                "RECV" => {
                    let n: usize = f[1].parse().unwrap();
                    for i in 0..n {
                        let addr = buf.as_ptr() as u64 + (32 << 10) + (i as u64) * 1024;
                        let wr = RecvWr {
                            wr_id: 1000 + i as u64,
                            sges: smallvec![Sge {
                                addr,
                                len: 1024,
                                lkey: wkey
                            }],
                        };
                        h.post_recv(qp, &wr).unwrap();
                    }
                    println!("@@ OK");
                }
                "POLL" => {
                    let mut v = Vec::new();
                    h.poll_cq(cq, 64, &mut v);
                    let s: Vec<String> = v
                        .iter()
                        .map(|w| format!("{}:{:?}:{}", w.wr_id, w.status, w.byte_len))
                        .collect();
                    println!("@@ WC {}", s.join(" "));
                }
                "CHECK" => {
                    let (off, len, seed): (usize, usize, u8) = (
                        f[1].parse().unwrap(),
                        f[2].parse().unwrap(),
                        f[3].parse().unwrap(),
                    );
                    let ok = buf[off..off + len] == pattern(len, seed)[..];
                    println!("@@ {}", if ok { "OK" } else { "BAD" });
                }
                "UMR" => {
                    let b = buf.as_ptr() as u64;
                    let e = |o: u64, n: u64| Klm {
                        addr: b + o,
                        len: n,
                        key: wkey,
                    };
                    let k = h
                        .create_mkey(&[e(1000, 100), e(5000, 300), e(9000, 50)], rw)
                        .unwrap();
                    let too_many = [e(0, 1), e(1, 1), e(2, 1), e(3, 1), e(4, 1)];
                    let refused = h.create_mkey(&too_many, rw) == Err(VerbsError::Invalid);
                    println!("@@ MKEY {k} {refused}");
                }
                #[cfg(feature = "cuda")]
                "GPU" => {
                    // 64 KiB of device memory, registered, and an indirect key over three
                    // pieces of it.
                    let drv = ucs::cuda::driver().unwrap();
                    let d = drv.alloc(0, 64 << 10).unwrap();
                    drv.memset(d, 0, 64 << 10).unwrap();
                    let dk = h.reg_mr(d, 64 << 10, rw).unwrap();
                    let e = |o: u64, n: u64| Klm {
                        addr: d + o,
                        len: n,
                        key: dk,
                    };
                    let mk = h
                        .create_mkey(&[e(1000, 100), e(5000, 300), e(9000, 50)], rw)
                        .unwrap();
                    gpu = d;
                    println!("@@ GPU {d} {dk} {mk}");
                }
                #[cfg(feature = "cuda")]
                "GCHECK" => {
                    let (off, len, seed): (usize, usize, u8) = (
                        f[1].parse().unwrap(),
                        f[2].parse().unwrap(),
                        f[3].parse().unwrap(),
                    );
                    let mut host = vec![0u8; len];
                    ucs::cuda::driver()
                        .unwrap()
                        .copy(host.as_mut_ptr() as u64, gpu + off as u64, len)
                        .unwrap();
                    println!(
                        "@@ {}",
                        if host == pattern(len, seed) {
                            "OK"
                        } else {
                            "BAD"
                        }
                    );
                }
                "STATE" => println!("@@ {:?}", h.query_qp(qp).unwrap()),
                "RECONNECT" => {
                    reconnect(&mut h, qp, pdev.clone(), pqp);
                    println!("@@ OK");
                }
                _ => std::process::exit(0),
            }
        }
        std::process::exit(0);
    }

    struct Peer {
        child: Child,
        stdin: ChildStdin,
        out: BufReader<ChildStdout>,
    }

    impl Peer {
        fn line(&mut self) -> String {
            loop {
                let mut l = String::new();
                assert!(self.out.read_line(&mut l).unwrap() > 0, "responder ended");
                // The child's test harness prints on the same stream: our lines carry a
                // marker.
                if let Some(i) = l.find("@@ ") {
                    return l[i + 3..].trim().to_string();
                }
            }
        }
        fn ask(&mut self, cmd: &str) -> String {
            writeln!(self.stdin, "{cmd}").unwrap();
            self.line()
        }
    }

    fn poll_all(h: &mut SoftHca, cq: u32) -> Vec<Wc> {
        let mut v = Vec::new();
        h.poll_cq(cq, 64, &mut v);
        v
    }

    fn wr(id: u64, op: Opcode, sge: Sge, raddr: u64, rkey: u32) -> SendWr {
        SendWr {
            wr_id: id,
            opcode: op,
            sges: smallvec![sge],
            remote_addr: raddr,
            rkey,
            signaled: true,
        }
    }

    #[test]
    fn verbs_between_two_processes() {
        if std::env::var_os("RUCX_SOFTHCA_CHILD").is_some() {
            child();
            return;
        }
        let mut c = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env("RUCX_SOFTHCA_CHILD", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = c.stdin.take().unwrap();
        let out = BufReader::new(c.stdout.take().unwrap());
        let mut p = Peer {
            child: c,
            stdin,
            out,
        };
        let hello = p.line();
        let f: Vec<&str> = hello.split_whitespace().collect();
        let num = |i: usize| f[i].parse::<u64>().unwrap();
        let (cdev, cqp) = (unhex(f[1]), num(3) as u32);
        let (cbuf, wkey, cro, rkey, cat, akey) = (
            num(5),
            num(7) as u32,
            num(9),
            num(11) as u32,
            num(13),
            num(15) as u32,
        );

        let mut h = SoftHca::open(8, 0).unwrap();
        let cq = h.create_cq().unwrap();
        let qp = h.create_qp(cq, cq).unwrap();
        let mut local = pattern(16 << 10, 3);
        let lkey = h
            .reg_mr(
                local.as_mut_ptr() as u64,
                local.len() as u64,
                Access::LOCAL_WRITE,
            )
            .unwrap();
        let lb = local.as_ptr() as u64;
        writeln!(p.stdin, "DEV {} QP {qp}", hex(&h.device_address())).unwrap();
        connect(&mut h, qp, cdev.clone(), cqp);
        assert_eq!(p.line(), "OK");
        let sge = |off: u64, len: u32| Sge {
            addr: lb + off,
            len,
            lkey,
        };

        // RDMA WRITE and READ; the data checked on the other side.
        h.post_send(qp, &wr(1, Opcode::RdmaWrite, sge(0, 4096), cbuf, wkey))
            .unwrap();
        let w = poll_all(&mut h, cq);
        assert_eq!(w.len(), 1);
        assert_eq!(
            (w[0].wr_id, w[0].status, w[0].byte_len),
            (1, WcStatus::Success, 4096)
        );
        assert_eq!(p.ask("CHECK 0 4096 3"), "OK");
        h.post_send(qp, &wr(2, Opcode::RdmaRead, sge(8192, 2048), cro, rkey))
            .unwrap();
        assert_eq!(poll_all(&mut h, cq)[0].status, WcStatus::Success);
        assert_eq!(local[8192..8192 + 2048], pattern(4096, 7)[..2048]);

        // Atomics: the old value comes back; a failed compare swaps nothing.
        h.post_send(
            qp,
            &wr(3, Opcode::FetchAdd { add: 5 }, sge(0, 8), cat, akey),
        )
        .unwrap();
        assert_eq!(poll_all(&mut h, cq)[0].status, WcStatus::Success);
        assert_eq!(u64::from_ne_bytes(local[0..8].try_into().unwrap()), 100);
        let cs = |c, s| Opcode::CompSwap {
            compare: c,
            swap: s,
        };
        h.post_send(qp, &wr(4, cs(105, 1), sge(0, 8), cat, akey))
            .unwrap();
        h.post_send(qp, &wr(5, cs(7, 9), sge(8, 8), cat, akey))
            .unwrap();
        assert!(poll_all(&mut h, cq)
            .iter()
            .all(|w| w.status == WcStatus::Success));
        assert_eq!(u64::from_ne_bytes(local[0..8].try_into().unwrap()), 105);
        assert_eq!(
            u64::from_ne_bytes(local[8..16].try_into().unwrap()),
            1,
            "no swap"
        );

        // Receive not ready: the SEND waits (and the WRITE behind it) until a receive is
        // posted; then both complete, in order.
        local[..512].copy_from_slice(&pattern(512, 9));
        h.post_send(qp, &wr(6, Opcode::Send, sge(0, 512), 0, 0))
            .unwrap();
        h.post_send(qp, &wr(7, Opcode::RdmaWrite, sge(0, 16), cbuf + 100, wkey))
            .unwrap();
        assert!(
            poll_all(&mut h, cq).is_empty(),
            "a SEND with no receive completed"
        );
        assert_eq!(p.ask("RECV 2"), "OK");
        let w = poll_all(&mut h, cq);
        assert_eq!(
            w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(6, WcStatus::Success), (7, WcStatus::Success)]
        );
        assert_eq!(p.ask("POLL"), "WC 1000:Success:512");
        assert_eq!(p.ask("CHECK 32768 512 9"), "OK");
        // A message longer than the receive: the responder's receive fails, both QPs go
        // to Err, and what follows is flushed.
        h.post_send(qp, &wr(8, Opcode::Send, sge(0, 2048), 0, 0))
            .unwrap();
        h.post_send(qp, &wr(9, Opcode::RdmaWrite, sge(0, 8), cbuf, wkey))
            .unwrap();
        let w = poll_all(&mut h, cq);
        assert_eq!(
            w.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
            vec![(8, WcStatus::RemInvReqErr), (9, WcStatus::WrFlushErr)]
        );
        assert_eq!(h.query_qp(qp), Ok(QpState::Err));
        assert_eq!(p.ask("POLL"), "WC 1001:LocLenErr:0");
        assert_eq!(p.ask("STATE"), "Err");
        h.post_send(qp, &wr(10, Opcode::RdmaWrite, sge(0, 8), cbuf, wkey))
            .unwrap();
        assert_eq!(
            poll_all(&mut h, cq)[0].status,
            WcStatus::WrFlushErr,
            "posted in Err"
        );

        // UMR: an indirect key over three pieces of the responder's buffer, written in one
        // request; an access past its length is refused; more than max_klm entries too.
        reconnect(&mut h, qp, cdev.clone(), cqp);
        assert_eq!(p.ask("RECONNECT"), "OK");
        let m = p.ask("UMR");
        let mf: Vec<&str> = m.split_whitespace().collect();
        let mkey: u32 = mf[1].parse().unwrap();
        assert_eq!(mf[2], "true", "more than max_klm entries accepted");
        local[..450].copy_from_slice(&pattern(450, 11));
        h.post_send(qp, &wr(11, Opcode::RdmaWrite, sge(0, 450), 0, mkey))
            .unwrap();
        assert_eq!(poll_all(&mut h, cq)[0].status, WcStatus::Success);
        assert_eq!(p.ask("CHECK 1000 100 11"), "OK");
        // The second and third pieces hold bytes 100.. and 400.. of the message: the same
        // pattern, its seed moved on by 100 * 13 and 400 * 13 (mod 256).
        assert_eq!(p.ask("CHECK 5000 300 31"), "OK");
        assert_eq!(p.ask("CHECK 9000 50 91"), "OK");
        h.post_send(qp, &wr(12, Opcode::RdmaWrite, sge(0, 100), 400, mkey))
            .unwrap();
        assert_eq!(poll_all(&mut h, cq)[0].status, WcStatus::RemAccessErr);

        // GPU memory on both sides (where a CUDA driver is): a local indirect key over two
        // pieces of our device buffer written into the responder's indirect key over three
        // pieces of its device buffer (reached through its IPC handle), then read back.
        #[cfg(feature = "cuda")]
        if let Some(drv) = ucs::cuda::driver() {
            reconnect(&mut h, qp, cdev.clone(), cqp);
            assert_eq!(p.ask("RECONNECT"), "OK");
            let g = p.ask("GPU");
            let gf: Vec<&str> = g.split_whitespace().collect();
            let rmk: u32 = gf[3].parse().unwrap();
            let d = drv.alloc(0, 4096).unwrap();
            let src = pattern(4096, 11);
            drv.copy(d, src.as_ptr() as u64, 4096).unwrap();
            let rw = Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_WRITE;
            let dk = h.reg_mr(d, 4096, rw).unwrap();
            let lmk = h
                .create_mkey(
                    &[
                        Klm {
                            addr: d,
                            len: 200,
                            key: dk,
                        },
                        Klm {
                            addr: d + 200,
                            len: 250,
                            key: dk,
                        },
                    ],
                    rw,
                )
                .unwrap();
            let s = Sge {
                addr: 0,
                len: 450,
                lkey: lmk,
            };
            h.post_send(qp, &wr(40, Opcode::RdmaWrite, s, 0, rmk))
                .unwrap();
            assert_eq!(poll_all(&mut h, cq)[0].status, WcStatus::Success);
            assert_eq!(p.ask("GCHECK 1000 100 11"), "OK");
            assert_eq!(p.ask("GCHECK 5000 300 31"), "OK");
            assert_eq!(p.ask("GCHECK 9000 50 91"), "OK");
            // Read the three pieces back into host memory.
            local[..450].fill(0);
            h.post_send(qp, &wr(41, Opcode::RdmaRead, sge(0, 450), 0, rmk))
                .unwrap();
            assert_eq!(poll_all(&mut h, cq)[0].status, WcStatus::Success);
            assert_eq!(&local[..450], &pattern(450, 11)[..]);
            h.destroy_mkey(lmk).unwrap();
            h.dereg_mr(dk).unwrap();
            // SAFETY: allocated above, no longer registered or used.
            unsafe { drv.free(d) }.unwrap();
            eprintln!("UMR over GPU memory between two processes: every byte checked");
        } else {
            eprintln!("SKIPPED: UMR over GPU memory: no CUDA driver here");
        }

        // Access rules: write to a read-only region, past a region, a bad local key.
        for (id, op, s, addr, key, want) in [
            (
                13,
                Opcode::RdmaWrite,
                sge(0, 8),
                cro,
                rkey,
                WcStatus::RemAccessErr,
            ),
            (
                14,
                Opcode::RdmaWrite,
                sge(0, 64),
                cbuf + (64 << 10) - 32,
                wkey,
                WcStatus::RemAccessErr,
            ),
            (
                15,
                Opcode::RdmaRead,
                Sge {
                    addr: lb,
                    len: 8,
                    lkey: lkey + 1,
                },
                cbuf,
                wkey,
                WcStatus::LocProtErr,
            ),
            (
                16,
                Opcode::FetchAdd { add: 1 },
                sge(0, 8),
                cat + 4,
                akey,
                WcStatus::RemAccessErr,
            ),
        ] {
            reconnect(&mut h, qp, cdev.clone(), cqp);
            assert_eq!(p.ask("RECONNECT"), "OK");
            h.post_send(qp, &wr(id, op, s, addr, key)).unwrap();
            let w = poll_all(&mut h, cq);
            assert_eq!((w[0].wr_id, w[0].status), (id, want));
            assert_eq!(h.query_qp(qp), Ok(QpState::Err));
        }

        // A dead responder: retries exceeded.
        reconnect(&mut h, qp, cdev.clone(), cqp);
        assert_eq!(p.ask("RECONNECT"), "OK");
        writeln!(p.stdin, "EXIT").unwrap();
        p.child.wait().unwrap();
        h.post_send(qp, &wr(17, Opcode::RdmaWrite, sge(0, 8), cbuf, wkey))
            .unwrap();
        assert_eq!(poll_all(&mut h, cq)[0].status, WcStatus::RetryExcErr);
    }

    /// One process: the state machine, key lifetimes, the UMR limit and creation cost.
    /// As on an HCA, an unsignalled request keeps its send-queue slot after it ran, until
    /// a later signalled request completes: a queue of unsignalled requests fills up.
    #[test]
    fn unsignalled_requests_hold_send_queue_slots() {
        let mut h = SoftHca::open(2, 0).unwrap();
        let cq = h.create_cq().unwrap();
        let qp = h.create_qp(cq, cq).unwrap();
        let me = QpAddr {
            device: h.device_address(),
            qpn: qp,
        };
        h.modify_qp(qp, QpState::Init, None).unwrap();
        h.modify_qp(qp, QpState::Rtr, Some(&me)).unwrap();
        h.modify_qp(qp, QpState::Rts, None).unwrap();
        // Zero-length RDMA WRITEs to itself: they need no key and run at once.
        let probe = |id: u64, signaled: bool| SendWr {
            wr_id: id,
            opcode: Opcode::RdmaWrite,
            sges: smallvec![],
            remote_addr: 0,
            rkey: 0,
            signaled,
        };
        for i in 0..RQ_DEPTH as u64 - 1 {
            h.post_send(qp, &probe(i, false)).unwrap();
        }
        assert!(
            poll_all(&mut h, cq).is_empty(),
            "nothing signalled, nothing reported"
        );
        h.post_send(qp, &probe(1000, true)).unwrap();
        assert_eq!(
            poll_all(&mut h, cq)
                .iter()
                .map(|w| w.wr_id)
                .collect::<Vec<_>>(),
            vec![1000]
        );
        // Its completion covered the queue: a full queue's worth fits again, and no more.
        for i in 0..RQ_DEPTH as u64 {
            h.post_send(qp, &probe(i, false)).unwrap();
        }
        assert_eq!(
            h.post_send(qp, &probe(2000, true)),
            Err(VerbsError::NoMemory),
            "every slot held by a request that ran unsignalled"
        );
    }

    #[test]
    fn state_machine_keys_and_umr_cost() {
        let mut h = SoftHca::open(2, 200_000).unwrap();
        assert!(SoftHca::open(MAX_KLM + 1, 0).is_err());
        let cq = h.create_cq().unwrap();
        let qp = h.create_qp(cq, cq).unwrap();
        assert_eq!(h.create_qp(cq, 99), Err(VerbsError::Invalid));
        let r = QpAddr {
            device: h.device_address(),
            qpn: qp,
        };
        // Transitions out of order are refused; posting needs the right state.
        assert_eq!(
            h.modify_qp(qp, QpState::Rts, None),
            Err(VerbsError::Invalid)
        );
        assert_eq!(
            h.modify_qp(qp, QpState::Rtr, Some(&r)),
            Err(VerbsError::Invalid)
        );
        let mut b = vec![0u8; 4096];
        let k = h
            .reg_mr(b.as_mut_ptr() as u64, 4096, Access::LOCAL_WRITE)
            .unwrap();
        let s = Sge {
            addr: b.as_ptr() as u64,
            len: 8,
            lkey: k,
        };
        let w = wr(1, Opcode::RdmaWrite, s, 0, 0);
        assert_eq!(
            h.post_send(qp, &w),
            Err(VerbsError::Invalid),
            "send in Reset"
        );
        let rw = RecvWr {
            wr_id: 1,
            sges: smallvec![s],
        };
        assert_eq!(
            h.post_recv(qp, &rw),
            Err(VerbsError::Invalid),
            "receive in Reset"
        );
        h.modify_qp(qp, QpState::Init, None).unwrap();
        h.post_recv(qp, &rw).unwrap();
        assert_eq!(
            h.modify_qp(qp, QpState::Rtr, None),
            Err(VerbsError::Invalid),
            "no remote"
        );
        // Unmapped memory cannot be registered; keys die with deregistration.
        assert_eq!(
            h.reg_mr(8, 4096, Access::LOCAL_WRITE),
            Err(VerbsError::Fault)
        );
        h.dereg_mr(k).unwrap();
        assert_eq!(h.dereg_mr(k), Err(VerbsError::Invalid));
        let k2 = h
            .reg_mr(b.as_mut_ptr() as u64, 4096, Access::LOCAL_WRITE)
            .unwrap();
        assert_ne!(k, k2, "a new registration in the same slot has a new key");
        // UMR: at most max_klm entries, each inside a region; creation costs what it was
        // configured to.
        let e = |o: u64| Klm {
            addr: b.as_ptr() as u64 + o,
            len: 16,
            key: k2,
        };
        assert_eq!(
            h.create_mkey(&[e(0), e(16), e(32)], Access::REMOTE_READ),
            Err(VerbsError::Invalid)
        );
        let bad = Klm {
            addr: b.as_ptr() as u64 + 4090,
            len: 16,
            key: k2,
        };
        assert_eq!(
            h.create_mkey(&[bad], Access::REMOTE_READ),
            Err(VerbsError::Invalid)
        );
        let t0 = ucs::time::now_ns();
        let m = h.create_mkey(&[e(0), e(64)], Access::REMOTE_READ).unwrap();
        assert!(ucs::time::now_ns() - t0 >= 200_000);
        // (The entry outside its region was refused after its key object was made.)
        assert_eq!(
            (h.mkeys_created, h.dereg_mr(m)),
            (2, Err(VerbsError::Invalid))
        );
        // Configured again (a UMR work request, no new object): a new number; the old
        // one is refused from now on.
        let m2 = h.configure_mkey(m, &[e(128)], Access::REMOTE_READ).unwrap();
        assert_ne!(m2, m);
        assert_eq!(h.mkeys_created, 2);
        assert_eq!(
            h.configure_mkey(m, &[e(0)], Access::REMOTE_READ),
            Err(VerbsError::Invalid)
        );
        assert_eq!(h.destroy_mkey(m), Err(VerbsError::Invalid));
        let m = m2;
        h.destroy_mkey(m).unwrap();
        // To Err: the posted receive is flushed.
        h.modify_qp(qp, QpState::Err, None).unwrap();
        let w = poll_all(&mut h, cq);
        assert_eq!(
            (w[0].wr_id, w[0].status, w[0].opcode),
            (1, WcStatus::WrFlushErr, WcOpcode::Recv)
        );
        h.destroy_qp(qp).unwrap();
        assert_eq!(h.query_qp(qp), Err(VerbsError::Invalid));
    }
}
