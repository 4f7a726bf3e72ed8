//! Remote memory access and atomics (`ucp_mem_map`, `ucp_rkey_pack`,
//! `ucp_ep_rkey_unpack`, `ucp_put_nbx`, `ucp_get_nbx`, `ucp_atomic_op_nbx`).
//!
//! A mapped region is registered with every memory transport of the worker (self, cma)
//! and entered in the worker's region table under a slot and a random nonce. Its remote
//! key carries the slot, the nonce, the bounds and each transport's key.
//!
//! * On an endpoint with a memory lane (same host: cma), put and get go straight through
//!   it, zero-copy; the initiator checks the range against the key first.
//! * Otherwise (tcp, or `UCX_TLS` without cma) they travel as protocol messages that the
//!   target executes after checking slot, nonce and range against its own table, so a
//!   bad key or an out-of-range access is refused at both ends and never performed.
//! * Atomics always travel as messages and run in the target's progress (atomic with
//!   respect to each other, as UCX's AM-based atomics are).
//!
//! Operations of one endpoint take effect at the target in the order they were posted,
//! whatever path each takes, and a flush completes every earlier one. `ucp.h` promises
//! order only across a fence, but OpenMPI's osc/ucx relies on it: its `MPI_REPLACE`
//! accumulate is a get of the old value followed by a put of the new one to the same
//! address. A get or an atomic carried by messages takes effect when the target handles
//! it, later than a put that is a copy now; so while an endpoint has operations carried by
//! messages that the target has not confirmed (`Order`), its puts and gets go by
//! messages too, behind them.
//!
//! ```text
//! RMA_PUT     ep:u32 req:u64 slot:u32 nonce:u64 addr:u64 data
//! RMA_GET     ep:u32 req:u64 slot:u32 nonce:u64 addr:u64 len:u32 offset:u64
//! RMA_ATOMIC  ep:u32 req:u64 slot:u32 nonce:u64 addr:u64 op:u8 size:u8 value:u64 compare:u64
//! RMA_REPLY   ep:u32 req:u64 offset:u64 status:i8 data
//! RMA_PUT_ACK ep:u32 count:u32 status:i8
//! ```
//!
//! A get or an atomic is answered by its RMA_REPLY, which names it by `req`: a request,
//! or a light get's slot (`ucp_get_nbi` of a few bytes posts no request;
//! [`Worker::rma_light`]). Puts are acknowledged by count: the
//! target answers the RMA_PUTs it handled in one progress call with one RMA_PUT_ACK
//! (carrying the first error among them), which halves the messages of a stream of small
//! puts. A put completes once its messages are out; the acknowledgements are what a flush
//! waits for (`Ep::puts_unacked`).

use std::sync::Arc;

use ucs::shm::Segment;
use ucs::wire::{Reader, Writer};
use ucs::{Status, UcsResult};
use uct::{Done, IfaceFlags, MemoryType, RemoteKey};

pub(crate) mod state;

pub use crate::buf::{AtomicOp, ATOMIC_SIZES};
pub use crate::proto::wire::{
    AM_RMA_ATOMIC, AM_RMA_GET, AM_RMA_PUT, AM_RMA_PUT_ACK, AM_RMA_REPLY, REPLY_HDR,
};
pub(crate) use state::{map_window, shm_window};
pub use state::{MemHandle, Rkey, SharedRegion};

use crate::buf::{self, Buf};
use crate::datatype::{Data, DataState};
use crate::proto::wire::ShmWindow;
use crate::request::{EpHandle, ReqId};
use crate::worker::op::{Op, SendParams};
use crate::worker::state::{Bad, Core, Ctrl, Lane, ReplyBytes, Res, Worker, INLINE_REPLY};
use crate::worker::wireup;
use state::{LightGet, MemReg, Owned, RmaKind, RmaOp};

const PUT_HDR: usize = 4 + 8 + 4 + 8 + 8;

const RKEY_MAGIC: &[u8; 4] = b"RKY1";

/// Puts and gets of at most this many bytes of a peer's host memory go by messages, not
/// by a memory lane that costs more per operation (see `Worker::rma`). Through MPICH's
/// `MPI_Put`/`MPI_Get` on the 2-core VM (2026-12-07, osu.sh, 7 rounds against 1 KiB):
/// 4 KiB latency 2.3 → 1.1–1.2 µs and bandwidth 2.0 → 6.1–7.9 GB/s (UCX 1.13: 0.9 µs,
/// 8.2 GB/s); at 8 and 16 KiB the messages' fragments and acknowledgements cost more
/// than a cross-memory-attach call saves (16 KiB windows of puts: 2.5 against 5.5 GB/s).
const SMALL_RMA: usize = 4096;

/// Gets of at most this many bytes go by messages too: since a reply is read from the
/// window straight into the transport's buffer, a get of 8 to 32 KiB by messages beats a
/// cross-memory-attach read, whose pinning of the peer's pages costs about 2 µs a call.
/// MPICH `MPI_Get` on the 2-core VM (2026-12-07, 3 rounds; UCX 1.13 makes no
/// `process_vm_readv` call for them either, strace of `contrib/bench/ucx-get-lat.c`):
/// windows of 8 KiB 3.4 → 8.8–10.0 GB/s (UCX 7.1–8.8), 32 KiB 7.3–7.9 → 10.4–15.3 GB/s
/// (UCX 8.1–8.5); latency 8 KiB 2.5 → 1.5 µs, 16 KiB 3.2 → 2.4, 32 KiB 4.2–4.3 either
/// way. At 64 KiB the memory lane is ahead again (latency 6.6 against 7.3 µs), and from
/// 256 KiB its bandwidth too.
const SMALL_GET: usize = 32 << 10;

/// The largest put or get that goes by messages where the memory lane costs more per
/// operation.
fn small_limit(kind: RmaKind) -> usize {
    if kind == RmaKind::Get {
        SMALL_GET
    } else {
        SMALL_RMA
    }
}

/// The top bit of the request id an RMA_GET carries marks a light get (`Core::light_gets`,
/// see [`Worker::rma_light`]): below it, the get's generation (31 bits) and slot (32
/// bits). Ids of `Requests` never have it.
const LIGHT_GET: u64 = 1 << 63;
const LIGHT_GEN: u32 = 0x7fff_ffff;

impl Worker {
    /// Maps memory for remote access (`ucp_mem_map`): `buf` registers the caller's memory,
    /// `None` allocates `len` zeroed bytes owned by the worker.
    pub fn mem_map(&mut self, buf: Option<Buf>, len: usize) -> UcsResult<MemHandle> {
        // Memory the worker allocates is a shared segment where a same-host interface is
        // open, so that peers on this host can map it.
        let shm_ok = self
            .core
            .info
            .iter()
            .any(|i| i.kind == uct::component::DeviceKind::SharedMemory);
        let (owned, base, len) = match buf {
            Some(b) => (None, b.addr(), b.len()),
            None => match shm_ok
                .then(|| Segment::create(len.max(1)))
                .and_then(Result::ok)
            {
                Some(seg) => {
                    let base = seg.base() as u64;
                    (Some(Owned::Shm(Arc::new(seg))), base, len)
                }
                None => {
                    // An impossible size is an error, not an abort in the allocator.
                    let mut v = Vec::new();
                    v.try_reserve_exact(len.max(1))
                        .map_err(|_| Status::NoMemory)?;
                    v.resize(len.max(1), 0u8);
                    let base = v.as_ptr() as u64;
                    (Some(Owned::Heap(v)), base, len)
                }
            },
        };
        self.register(owned, base, len)
    }

    /// Allocates `len` bytes of `mem` memory (`ucp_mem_map` with `UCP_MEM_MAP_ALLOCATE`
    /// and a memory type) on CUDA device `dev`, and maps them for remote access. Host
    /// memory is [`mem_map`](Self::mem_map)'s. Freed by `mem_unmap`.
    pub fn mem_map_alloc(&mut self, len: usize, mem: MemoryType, dev: i32) -> UcsResult<MemHandle> {
        match mem {
            MemoryType::Host => self.mem_map(None, len),
            #[cfg(feature = "cuda")]
            _ => {
                let a = ucs::cuda::DeviceAlloc::new(dev, len, mem == MemoryType::CudaManaged)?;
                let base = a.ptr();
                self.register(Some(Owned::Device(a)), base, len)
            }
            #[cfg(not(feature = "cuda"))]
            _ => {
                let _ = dev;
                Err(Status::Unsupported)
            }
        }
    }

    /// Maps a [`SharedRegion`] for remote access, as memory this worker allocated: a
    /// same-host peer with the posix transport maps it from the remote key.
    pub fn mem_map_region(&mut self, r: &SharedRegion) -> UcsResult<MemHandle> {
        let base = r.base() as u64;
        self.register(Some(Owned::Shm(Arc::clone(&r.0))), base, r.len())
    }

    /// Registers `len` bytes at `base` with the memory transports and records the region.
    fn register(&mut self, owned: Option<Owned>, base: u64, len: usize) -> UcsResult<MemHandle> {
        let mem = ucs::memtype::mem_type(base as *const u8);
        let mut regs = Vec::new();
        for (i, iface) in self.ifaces.iter().enumerate() {
            let a = &self.core.info[i].attr;
            if a.flags
                .intersects(IfaceFlags::PUT_ZCOPY | IfaceFlags::GET_ZCOPY)
                && (self.core.info[i].kind != uct::component::DeviceKind::Network
                    || a.flags.contains(IfaceFlags::RMA_ONE_SIDED))
                && iface.md().reg_mem_types().has(mem)
            {
                regs.push((i, buf::register_span(iface.md(), base, len)?));
            }
        }
        let nonce = rand::random::<u64>() | 1;
        if matches!(owned, Some(Owned::Shm(_))) {
            self.core.shm_regions += 1;
        }
        let slot = self.core.mems.insert(MemReg {
            nonce,
            base,
            len: len as u64,
            regs,
            owned,
            mem,
        }) as u32;
        Ok(MemHandle { slot, nonce })
    }

    /// Unmaps a region (`ucp_mem_unmap`); an allocated one is freed.
    pub fn mem_unmap(&mut self, h: MemHandle) -> UcsResult<()> {
        match self.core.mems.get(h.slot as usize) {
            Some(m) if m.nonce == h.nonce => {}
            _ => return Err(Status::InvalidParam),
        }
        // A reply still to be read from memory (`Ctrl::RmaReplyAt`) takes its copy first.
        if self.core.lazy_replies != 0 {
            self.core.materialize_replies();
        }
        let m = self.core.mems.remove(h.slot as usize);
        if matches!(m.owned, Some(Owned::Shm(_))) {
            self.core.shm_regions -= 1;
        }
        for (i, r) in m.regs {
            let _ = self.ifaces[i].md().mem_dereg(&r);
        }
        Ok(())
    }

    fn mem(&self, h: MemHandle) -> UcsResult<&MemReg> {
        match self.core.mems.get(h.slot as usize) {
            Some(m) if m.nonce == h.nonce => Ok(m),
            _ => Err(Status::InvalidParam),
        }
    }

    /// The region's address and length (`ucp_mem_query`).
    pub fn mem_query(&self, h: MemHandle) -> UcsResult<(u64, usize)> {
        self.mem(h).map(|m| (m.base, m.len as usize))
    }

    /// Copies from a worker-allocated region.
    pub fn mem_read(&self, h: MemHandle, off: usize, dst: &mut [u8]) -> UcsResult<()> {
        let m = self.mem(h)?;
        let end = off.checked_add(dst.len()).ok_or(Status::InvalidParam)?;
        match m.owned.as_ref().ok_or(Status::InvalidParam)? {
            Owned::Heap(v) => dst.copy_from_slice(v.get(off..end).ok_or(Status::InvalidParam)?),
            Owned::Shm(seg) => {
                if end > m.len as usize {
                    return Err(Status::InvalidParam);
                }
                buf::read_raw(seg.base() as u64 + off as u64, dst);
            }
            #[cfg(feature = "cuda")]
            Owned::Device(a) => {
                if end > m.len as usize {
                    return Err(Status::InvalidParam);
                }
                buf::read_raw_device(a.ptr() + off as u64, dst)?;
            }
        }
        Ok(())
    }

    /// Copies into a worker-allocated region.
    pub fn mem_write(&mut self, h: MemHandle, off: usize, src: &[u8]) -> UcsResult<()> {
        self.mem(h)?;
        let m = &mut self.core.mems[h.slot as usize];
        let end = off.checked_add(src.len()).ok_or(Status::InvalidParam)?;
        match m.owned.as_mut().ok_or(Status::InvalidParam)? {
            Owned::Heap(v) => v
                .get_mut(off..end)
                .ok_or(Status::InvalidParam)?
                .copy_from_slice(src),
            Owned::Shm(seg) => {
                if end > m.len as usize {
                    return Err(Status::InvalidParam);
                }
                buf::write_raw(seg.base() as u64 + off as u64, src);
            }
            #[cfg(feature = "cuda")]
            Owned::Device(a) => {
                if end > m.len as usize {
                    return Err(Status::InvalidParam);
                }
                buf::write_raw_device(a.ptr() + off as u64, src)?;
            }
        }
        Ok(())
    }

    /// Packs the remote key of a region (`ucp_rkey_pack`).
    pub fn rkey_pack(&self, h: MemHandle) -> UcsResult<Vec<u8>> {
        let m = self.mem(h)?;
        let shm = match &m.owned {
            Some(Owned::Shm(seg)) => Some(
                Writer::new()
                    .u64(ucs::sys::host_id())
                    .u32(std::process::id())
                    .u32(seg.fd() as u32)
                    .u64(seg.len() as u64)
                    .buf,
            ),
            _ => None,
        };
        let mut w = Writer::with_capacity(256)
            .bytes(RKEY_MAGIC)
            .u32(h.slot)
            .u64(m.nonce)
            .u64(m.base)
            .u64(m.len)
            .u8((m.regs.len() + usize::from(shm.is_some())) as u8);
        if let Some(k) = shm {
            w = w.u8(3).bytes(b"shm").u16(k.len() as u16).bytes(&k);
        }
        for (i, r) in &m.regs {
            let tl = self.core.info[*i].tl;
            let k = self.ifaces[*i].md().mkey_pack(r);
            w = w
                .u8(tl.len() as u8)
                .bytes(tl.as_bytes())
                .u16(k.len() as u16)
                .bytes(&k);
        }
        Ok(w.buf)
    }

    /// Unpacks a peer's remote key for use on `ep` (`ucp_ep_rkey_unpack`).
    pub fn rkey_unpack(&mut self, ep: EpHandle, blob: &[u8]) -> UcsResult<Rkey> {
        let e = self
            .core
            .eps
            .get(ep.0 as usize)
            .ok_or(Status::InvalidParam)?;
        if e.provisional {
            // A socket-address client whose server's address has not come: its lanes do
            // not reach the key's owner yet.
            return Err(Status::NotConnected);
        }
        let bad = Status::InvalidParam;
        let mut r = Reader::new(blob);
        if r.bytes(4) != Some(RKEY_MAGIC.as_slice()) {
            return Err(bad);
        }
        let slot = r.u32().ok_or(bad)?;
        let nonce = r.u64().ok_or(bad)?;
        let base = r.u64().ok_or(bad)?;
        let len = r.u64().ok_or(bad)?;
        base.checked_add(len).ok_or(bad)?;
        let n = r.u8().ok_or(bad)?;
        let mut lane = None;
        let mut lane_dev = None;
        let mut shm = None;
        for _ in 0..n {
            let tl_len = r.u8().ok_or(bad)? as usize;
            let tl = r.bytes(tl_len).ok_or(bad)?;
            let k_len = r.u16().ok_or(bad)? as usize;
            let k = r.bytes(k_len).ok_or(bad)?;
            if tl == b"shm" {
                let mut kr = Reader::new(k);
                if let (Some(host), Some(pid), Some(fd), Some(seg_len)) =
                    (kr.u64(), kr.u32(), kr.u32(), kr.u64())
                {
                    if host == ucs::sys::host_id() && seg_len >= len && kr.is_empty() {
                        shm = Some((pid, fd, seg_len));
                    }
                }
                continue;
            }
            for (l, slot) in [(e.rma, &mut lane), (e.rma_dev, &mut lane_dev)] {
                if let Some(l) = l {
                    if self.core.info[l.iface].tl.as_bytes() == tl {
                        let key = self.ifaces[l.iface].md().rkey_unpack(k)?;
                        if key.base != base || key.len != len {
                            return Err(bad);
                        }
                        *slot = Some(key);
                    }
                }
            }
        }
        if !r.is_empty() {
            return Err(bad);
        }
        let order = e.rma_order.clone();
        // A same-host peer's shared memory: mapped (once per region), if the endpoint is a
        // same-host one (it has a memory lane other than messages of a network
        // connection, or its active messages go through shared memory or loopback).
        let shm_ep = e
            .rma
            .is_some_and(|l| !wireup::by_messages(&self.core.info[l.iface]))
            || matches!(
                self.core.info[e.am.iface].kind,
                uct::component::DeviceKind::SharedMemory | uct::component::DeviceKind::Loopback
            );
        let mapped = match shm {
            Some((pid, fd, seg_len)) if shm_ep => self.core.map_window(&ShmWindow {
                pid,
                fd,
                nonce,
                seg_len,
                base,
                len,
            }),
            _ => None,
        };
        Ok(Rkey {
            ep: ep.0 as usize,
            slot,
            nonce,
            base,
            len,
            lane,
            lane_dev,
            mapped,
            order,
        })
    }

    /// Writes `data` to `remote_addr` of the peer's region (`ucp_put_nbx`). An access
    /// outside the region is refused with `InvalidParam` before anything moves.
    pub fn put(
        &mut self,
        ep: EpHandle,
        data: &Data,
        remote_addr: u64,
        rkey: &Rkey,
        p: SendParams,
    ) -> UcsResult<Option<ReqId>> {
        self.rma(
            ep,
            RmaKind::Put,
            data,
            remote_addr,
            rkey,
            p,
            None,
            (AtomicOp::Add, 0, 0, 0),
        )
    }

    /// Reads `remote_addr..` of the peer's region into `data` (`ucp_get_nbx`).
    pub fn get(
        &mut self,
        ep: EpHandle,
        data: &Data,
        remote_addr: u64,
        rkey: &Rkey,
        p: SendParams,
    ) -> UcsResult<Option<ReqId>> {
        self.rma(
            ep,
            RmaKind::Get,
            data,
            remote_addr,
            rkey,
            p,
            None,
            (AtomicOp::Add, 0, 0, 0),
        )
    }

    /// An atomic operation on the 1-, 2-, 4- or 8-byte word at `remote_addr`
    /// (`ucp_atomic_op_nbx`). With `reply`, the word's previous value is written there
    /// (`size` bytes, native endian) when the request completes. UCX takes 4 and 8 bytes
    /// only; the smaller words are for OpenMPI's osc/ucx, which hands `MPI_Fetch_and_op`
    /// of a `char` or `short` to ucp as it is and uses whatever comes back.
    #[allow(clippy::too_many_arguments)]
    pub fn atomic(
        &mut self,
        ep: EpHandle,
        op: AtomicOp,
        size: usize,
        value: u64,
        compare: u64,
        remote_addr: u64,
        rkey: &Rkey,
        reply: Option<Buf>,
        p: SendParams,
    ) -> UcsResult<ReqId> {
        if !ATOMIC_SIZES.contains(&size) || !remote_addr.is_multiple_of(size as u64) {
            return Err(Status::InvalidParam);
        }
        if reply.is_some_and(|b| b.len() < size) {
            return Err(Status::InvalidParam);
        }
        let r = self.rma(
            ep,
            RmaKind::Atomic,
            &Data::Contig(Buf::EMPTY),
            remote_addr,
            rkey,
            p,
            reply,
            (op, size as u8, value, compare),
        )?;
        r.ok_or(Status::IoError)
    }

    /// A put or get of contiguous host bytes through a region of the peer's that is mapped
    /// here, done in the call: `None` when that is not the case (the key is not mapped,
    /// or `local` may be device memory) and [`put`](Self::put)/[`get`](Self::get) must
    /// serve it. The C shim's `ucp_put_nbi`/`ucp_get_nbi` start here: no data state, no
    /// request, a bounds check and a copy.
    #[inline]
    pub fn rma_mapped(
        &mut self,
        ep: EpHandle,
        get: bool,
        local: Buf,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Option<UcsResult<()>> {
        let seg = rkey.mapped.as_ref()?;
        if !local.host_accessible() {
            return None;
        }
        let idx = ep.idx();
        let e = self.core.eps.get(idx);
        if rkey.ep != idx || e.is_none() {
            return Some(Err(Status::InvalidParam));
        }
        if let Some(s) = e.and_then(|e| e.failed) {
            return Some(Err(s));
        }
        if e.is_some_and(|e| e.rma_carried + e.puts_unacked > 0) {
            return None;
        }
        let len = local.len();
        if let Err(s) = rkey.check(remote_addr, len) {
            return Some(Err(s));
        }
        let at = seg.base() as u64 + (remote_addr - rkey.base);
        if get {
            buf::with_raw(at, len, |src| local.write_at(0, src));
        } else {
            buf::with_raw_mut(at, len, |dst| local.read_at(0, dst));
        }
        self.core.stats.rma_mapped += 1;
        Some(Ok(()))
    }

    /// A put or get of contiguous host bytes that one message (a get: one reply) carries,
    /// posted without a request (`ucp_put_nbi`/`ucp_get_nbi`, after
    /// [`rma_mapped`](Self::rma_mapped)): its message goes now. `None` when the general
    /// path must serve it (`light_route`), or the transport has no room for the message.
    ///
    /// * A put's bytes are copied into its message and the put is complete, as the
    ///   general path's put is once its messages are out (`put_sent`); the endpoint
    ///   counts its acknowledgement for the flush.
    /// * A get's destination waits in a slot of `Core::light_gets` that its reply names;
    ///   the reply is written straight there. The get counts as carried by messages on the
    ///   endpoint (puts behind it go by messages too, `Order`), a flush waits for its
    ///   reply, and a failing endpoint drops it (`fail_ep`).
    ///
    /// An error the target reports for either is the next flush's (`Ep::rma_error`).
    ///
    /// Through MPICH's `MPI_Get`, a window of 64 one-byte gets cost the origin about 860
    /// instructions a get by the general path (callgrind, 2026-12-07: a request with a
    /// data state, a pass of the RMA queue, the request's completion). With this path,
    /// `ucp_get_nbi` costs about 460 instructions (callgrind of
    /// `contrib/bench/ucx-get-lat.c`, 64 gets a flush, 1 B and 512 B alike; inclusive cost
    /// over callgrind's call count) against 365 for UCX 1.13's. MPICH's `MPI_Put` +
    /// `MPI_Win_flush` of 1 to 512 bytes took 1.10–1.19 of UCX 1.13's time through the
    /// general path (osu.sh, 2026-12-07).
    pub fn rma_light(
        &mut self,
        ep: EpHandle,
        get: bool,
        local: Buf,
        remote_addr: u64,
        rkey: &Rkey,
    ) -> Option<UcsResult<()>> {
        let idx = ep.idx();
        let kind = if get { RmaKind::Get } else { RmaKind::Put };
        let Worker { ifaces, core, .. } = self;
        let (rid, lane) = match light_route(core, idx, &local, remote_addr, rkey, kind)? {
            Ok(r) => r,
            Err(s) => return Some(Err(s)),
        };
        let iface = ifaces[lane.iface].as_mut();
        let len = local.len();
        let sent = if get {
            let slot = u32::try_from(core.light_gets.vacant_key()).ok()?;
            let gen = core.light_gen & LIGHT_GEN;
            let req = LIGHT_GET | u64::from(gen) << 32 | u64::from(slot);
            let mut m = [0u8; PUT_HDR + 12];
            m[..PUT_HDR].copy_from_slice(&rma_head(rid, req, rkey.slot, rkey.nonce, remote_addr));
            m[PUT_HDR..PUT_HDR + 4].copy_from_slice(&(len as u32).to_le_bytes());
            // Offset 0: the whole get is one reply.
            send_bytes(iface, lane.ep, AM_RMA_GET, &m).map(|()| {
                core.light_gets.insert(LightGet {
                    ep: idx,
                    gen,
                    buf: local,
                });
                core.light_gen = core.light_gen.wrapping_add(1);
                let e = &mut core.eps[idx];
                e.outstanding += 1;
                e.rma_ops += 1;
                e.rma_carried += 1;
                core.stats.light_gets += 1;
            })
        } else {
            // The put names no request: its acknowledgement is counted, not matched.
            let hdr = rma_head(rid, 0, rkey.slot, rkey.nonce, remote_addr);
            iface
                .am_bcopy(lane.ep, AM_RMA_PUT, &mut |buf| {
                    buf[..PUT_HDR].copy_from_slice(&hdr);
                    local.read_at(0, &mut buf[PUT_HDR..PUT_HDR + len]);
                    PUT_HDR + len
                })
                .map(|_| {
                    core.eps[idx].puts_unacked += 1;
                    core.stats.light_puts += 1;
                })
        };
        match sent {
            Ok(()) => {
                let e = &mut core.eps[idx];
                e.rma_order.note(e.rma_carried, e.puts_unacked);
                Some(Ok(()))
            }
            Err(Status::NoResource) => None,
            Err(s) => Some(Err(s)),
        }
    }

    /// Orders RMA operations posted after it after those posted before (`ucp_ep_fence`,
    /// `ucp_worker_fence`). Operations on one endpoint already execute in posting order
    /// (messages are ordered per endpoint; the memory lane completes before returning), so
    /// there is nothing to wait for.
    pub fn fence(&mut self, ep: Option<EpHandle>) -> UcsResult<()> {
        if let Some(e) = ep {
            self.core
                .eps
                .get(e.0 as usize)
                .ok_or(Status::InvalidParam)?;
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn rma(
        &mut self,
        ep: EpHandle,
        kind: RmaKind,
        data: &Data,
        remote_addr: u64,
        rkey: &Rkey,
        p: SendParams,
        reply_buf: Option<Buf>,
        atomic: (AtomicOp, u8, u64, u64),
    ) -> UcsResult<Option<ReqId>> {
        let idx = ep.0 as usize;
        if rkey.ep != idx {
            return Err(Status::InvalidParam);
        }
        let Worker { ifaces, core, .. } = self;
        let e = core.eps.get(idx).ok_or(Status::InvalidParam)?;
        if let Some(s) = e.failed {
            return Err(s);
        }
        // Operations carried by messages ahead of this one: it goes behind them, by
        // messages too (the module's doc).
        let behind = e.rma_carried + e.puts_unacked > 0;
        let mut st = match kind {
            RmaKind::Get => data.start_unpack(),
            _ => data.start_pack(),
        };
        let total = if kind == RmaKind::Atomic {
            usize::from(atomic.1)
        } else {
            st.len()
        };
        rkey.check(remote_addr, total)?;
        // Mapped shared memory: the operation is a copy, done now.
        if let (Some(seg), true, false) = (&rkey.mapped, kind != RmaKind::Atomic, behind) {
            let at = seg.base() as u64 + (remote_addr - rkey.base);
            let r = match kind {
                RmaKind::Put => buf::with_raw_mut(at, total, |dst| {
                    let n = st.pack(0, dst);
                    if n == total {
                        Ok(())
                    } else {
                        Err(Status::InvalidParam)
                    }
                }),
                _ => buf::with_raw(at, total, |src| st.unpack(0, src))
                    .and_then(|()| st.finish_recv(total)),
            };
            core.stats.rma_mapped += 1;
            return r.map(|()| None);
        }
        if kind == RmaKind::Put {
            // A device layout's bytes leave from its scratch buffer, packed by a kernel.
            st.prepare_device()?;
        }
        // The memory lane, for put and get of data with addresses: the one for device
        // memory when the region is device memory (it takes local memory of any type),
        // else the host one for host data.
        let direct = match (e.rma_dev, rkey.lane_dev, e.rma, rkey.lane) {
            _ if behind => None,
            (Some(l), Some(k), ..) => st
                .device_iov(0, total)
                .map(|v| smallvec::smallvec![v])
                .or_else(|| st.iovs(0, total))
                .map(|iov| (l, k, iov)),
            // A small put or get of host memory goes by messages on the AM lane where the
            // memory lane costs more per operation: a put is a message the target
            // copies, a get a request and a reply, each cheaper than a cross-memory-attach
            // call, which pins the peer's pages (UCX 1.13 over posix,cma makes no such
            // call for them either). MPICH's transposes move a matrix as a million 4-byte
            // puts or gets: by cma, a system call each.
            (_, _, Some(l), Some(_)) if total <= small_limit(kind) && am_cheaper(core, e.am, l) => {
                None
            }
            (_, _, Some(l), Some(k)) if st.host_only() => st.iovs(0, total).map(|iov| (l, k, iov)),
            _ => None,
        };
        // An 8-byte fetch-add or compare-and-swap on a transport with device atomics, when
        // `UCX_ATOMIC_MODE=device` asks for them (the host memory lane: it reaches the
        // peer's region).
        let (op, size, value, compare) = atomic;
        let device_amo = match (kind, op, size, e.rma, rkey.lane) {
            (RmaKind::Atomic, AtomicOp::Add | AtomicOp::Cswap, 8, Some(l), Some(k))
                if !behind
                    && core.atomic_device
                    && core.info[l.iface]
                        .attr
                        .flags
                        .contains(uct::IfaceFlags::ATOMIC64) =>
            {
                Some((l, k))
            }
            _ => None,
        };
        if let Some((lane, key)) = device_amo {
            let amo = match op {
                AtomicOp::Add => uct::Amo64::Add(value),
                _ => uct::Amo64::Cswap {
                    compare,
                    swap: value,
                },
            };
            let mut o = new_op(idx, kind, st, total, remote_addr, rkey, reply_buf, atomic);
            o.comps = 1;
            let id = core.reqs.insert(Op::Rma(o), p.user_data, p.notify);
            core.eps[idx].outstanding += 1;
            core.eps[idx].rma_ops += 1;
            core.stats.amo_device += 1;
            let iface = ifaces[lane.iface].as_mut();
            let Some(Op::Rma(o)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
                return Err(Status::IoError);
            };
            let old = o.amo_old.insert(Box::new(0));
            let r = buf::atomic64_fetch(iface, lane.ep, amo, remote_addr, &key, old, id.0);
            match r {
                Ok(Done::Later) => {}
                Ok(Done::Now) => on_completion(core, id, Status::Ok),
                Err(s) => core.complete(id, s, None),
            }
            return Ok(Some(id));
        }
        if let (Some((lane, key, iov)), true) = (direct, kind != RmaKind::Atomic) {
            {
                let iface = ifaces[lane.iface].as_mut();
                let id = core.reqs.insert(
                    Op::Rma(new_op(
                        idx,
                        kind,
                        st,
                        total,
                        remote_addr,
                        rkey,
                        reply_buf,
                        atomic,
                    )),
                    p.user_data,
                    p.notify,
                );
                let r = match kind {
                    RmaKind::Put => buf::put_zcopy(iface, lane.ep, &iov, remote_addr, &key, id.0),
                    _ => buf::get_zcopy(iface, lane.ep, &iov, remote_addr, &key, id.0),
                };
                core.eps[idx].outstanding += 1;
                core.eps[idx].rma_ops += 1;
                match r {
                    Ok(Done::Now) => {
                        core.complete(id, Status::Ok, None);
                        if !p.notify {
                            core.reqs.remove(id);
                            return Ok(None);
                        }
                    }
                    Ok(Done::Later) => {
                        if let Some(Op::Rma(o)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
                            o.comps = 1;
                        }
                    }
                    Err(s) => core.complete(id, s, None),
                }
                return Ok(Some(id));
            }
        }
        let mut o = new_op(idx, kind, st, total, remote_addr, rkey, reply_buf, atomic);
        o.carried = true;
        let id = core.reqs.insert(Op::Rma(o), p.user_data, p.notify);
        let e = &mut core.eps[idx];
        e.outstanding += 1;
        e.rma_ops += 1;
        e.rma_carried += 1;
        e.rma_order.note(e.rma_carried, e.puts_unacked);
        core.rma_queue.push_back(id);
        core.work = true;
        if core.rma_queue.len() == 1 {
            // Nothing ahead of it: its messages go now, not at the next progress (and a
            // put is then complete: `put_sent`).
            progress_queue(ifaces, core);
            let done = match core.reqs.get(id).map(|r| &r.state) {
                Some(Op::Done { status, .. }) => Some(*status),
                _ => None,
            };
            if let (Some(status), false) = (done, p.notify) {
                core.reqs.remove(id);
                return if status == Status::Ok {
                    Ok(None)
                } else {
                    Err(status)
                };
            }
        }
        Ok(Some(id))
    }
}

/// The peer's endpoint id and the AM lane for a light put or get ([`Worker::rma_light`])
/// of `local` at `remote_addr`: `Some(Err)` for an access outside
/// the key's region, `None` when the general path must serve it: more than one message's
/// worth or device memory, a memory lane or mapped copy it would take, operations
/// waiting in the RMA queue (it goes behind them there), an endpoint not wired up or
/// failed.
fn light_route(
    core: &Core,
    idx: usize,
    local: &Buf,
    remote_addr: u64,
    rkey: &Rkey,
    kind: RmaKind,
) -> Option<UcsResult<(u32, Lane)>> {
    let total = local.len();
    if rkey.ep != idx || total == 0 || total > small_limit(kind) {
        return None;
    }
    if let Err(s) = rkey.check(remote_addr, total) {
        return Some(Err(s));
    }
    if !core.rma_queue.is_empty() {
        return None;
    }
    let e = core.eps.get(idx)?;
    let rid = e.remote_id.filter(|_| e.failed.is_none())?;
    let lane = e.am;
    let hdr = if kind == RmaKind::Get {
        REPLY_HDR
    } else {
        PUT_HDR
    };
    if total + hdr > core.info[lane.iface].attr.am.max_bcopy || !local.host_accessible() {
        return None;
    }
    // As `Worker::rma` chooses: messages when operations carried by messages are ahead,
    // else a mapped copy, the memory lane for device memory, the host memory lane unless
    // messages cost less.
    let behind = e.rma_carried + e.puts_unacked > 0;
    let by_messages = behind
        || (rkey.mapped.is_none()
            && match (e.rma_dev, rkey.lane_dev, e.rma, rkey.lane) {
                (Some(_), Some(_), ..) => false,
                (_, _, Some(l), Some(_)) => am_cheaper(core, lane, l),
                _ => true,
            });
    by_messages.then_some(Ok((rid, lane)))
}

/// Whether a small put or get of host memory costs less by messages on `am` than by the
/// memory lane `mem` (see `Worker::rma`).
fn am_cheaper(core: &Core, am: Lane, mem: Lane) -> bool {
    core.info[mem.iface].attr.perf.overhead_ns > core.info[am.iface].attr.perf.overhead_ns
}

#[allow(clippy::too_many_arguments)]
fn new_op(
    ep: usize,
    kind: RmaKind,
    data: DataState,
    total: usize,
    addr: u64,
    rkey: &Rkey,
    reply_buf: Option<Buf>,
    atomic: (AtomicOp, u8, u64, u64),
) -> RmaOp {
    RmaOp {
        ep,
        kind,
        data,
        total,
        offset: 0,
        replies: 0,
        status: Status::Ok,
        addr,
        slot: rkey.slot,
        nonce: rkey.nonce,
        reply_buf,
        atomic,
        comps: 0,
        amo_old: None,
        carried: false,
    }
}

/// Deregisters every region still mapped, before their memory goes (a worker dropped with
/// regions the application never unmapped; `cuda_copy` pins host memory while registered).
pub(crate) fn unmap_all(ifaces: &mut [uct::OpenIface], core: &mut Core) {
    for m in core.mems.drain() {
        for (i, r) in &m.regs {
            let _ = ifaces[*i].md().mem_dereg(r);
        }
    }
    core.shm_regions = 0;
}

/// Sends the messages of queued message-carried RMA operations, in order, until the
/// transport runs out of resources (from `run_actions`).
pub(crate) fn progress_queue(ifaces: &mut [uct::OpenIface], core: &mut Core) -> usize {
    let mut n = 0;
    while let Some(&id) = core.rma_queue.front() {
        match push_rma(ifaces, core, id) {
            Ok(true) => {
                core.rma_queue.pop_front();
                put_sent(core, id);
                n += 1;
            }
            Ok(false) => {
                core.work = true;
                break;
            }
            Err(s) => {
                core.rma_queue.pop_front();
                core.complete(id, s, None);
            }
        }
    }
    n
}

/// A put whose messages are all out completes now, as UCX's puts carried by active
/// messages do: its data was copied into the messages, so the buffer is free, and the
/// target executes them in order before anything sent after them on the lane. Their
/// acknowledgements are still due; the endpoint counts them (`Ep::puts_unacked`) so that
/// a flush waits for them, and one reporting an error fails that flush.
fn put_sent(core: &mut Core, id: ReqId) {
    let Some(Op::Rma(o)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return;
    };
    if o.kind != RmaKind::Put || o.replies == 0 {
        return;
    }
    o.replies = 0;
    let status = o.status;
    core.complete(id, status, None);
}

/// The header every RMA request starts with: `ep req slot nonce addr`.
fn rma_head(rid: u32, req: u64, slot: u32, nonce: u64, addr: u64) -> [u8; PUT_HDR] {
    let mut h = [0u8; PUT_HDR];
    h[..4].copy_from_slice(&rid.to_le_bytes());
    h[4..12].copy_from_slice(&req.to_le_bytes());
    h[12..16].copy_from_slice(&slot.to_le_bytes());
    h[16..24].copy_from_slice(&nonce.to_le_bytes());
    h[24..32].copy_from_slice(&addr.to_le_bytes());
    h
}

/// `Ok(true)`: every message of `id` is out.
fn push_rma(ifaces: &mut [uct::OpenIface], core: &mut Core, id: ReqId) -> UcsResult<bool> {
    let Core {
        reqs, eps, info, ..
    } = core;
    let Some(Op::Rma(o)) = reqs.get_mut(id).map(|r| &mut r.state) else {
        return Ok(true);
    };
    let e = eps.get_mut(o.ep).ok_or(Status::NotConnected)?;
    if let Some(s) = e.failed {
        return Err(s);
    }
    let Some(rid) = e.remote_id else {
        return Ok(false);
    };
    let lane = e.am;
    let seg = info[lane.iface].attr.am.max_bcopy;
    let iface = ifaces[lane.iface].as_mut();
    match o.kind {
        RmaKind::Put => loop {
            // `replies` counts the messages sent (a put of nothing sends one); each is
            // acknowledged by count into `puts_unacked`.
            if o.offset >= o.total && (o.offset > 0 || o.replies > 0) {
                return Ok(true);
            }
            let hdr = rma_head(rid, id.0, o.slot, o.nonce, o.addr + o.offset as u64);
            let (data, off) = (&mut o.data, o.offset);
            let r = iface.am_bcopy(lane.ep, AM_RMA_PUT, &mut |buf| {
                buf[..PUT_HDR].copy_from_slice(&hdr);
                PUT_HDR + data.pack(off, &mut buf[PUT_HDR..seg])
            });
            match r {
                Ok(n) => {
                    o.offset += n - PUT_HDR;
                    o.replies += 1;
                    e.puts_unacked += 1;
                    e.rma_order.note(e.rma_carried, e.puts_unacked);
                    if o.total == 0 {
                        return Ok(true);
                    }
                }
                Err(Status::NoResource) => return Ok(false),
                Err(s) => return Err(s),
            }
        },
        RmaKind::Get => loop {
            if o.offset >= o.total && (o.offset > 0 || o.replies > 0) {
                return Ok(true);
            }
            let chunk = (o.total - o.offset).min(seg - REPLY_HDR);
            let mut m = [0u8; PUT_HDR + 12];
            m[..PUT_HDR].copy_from_slice(&rma_head(
                rid,
                id.0,
                o.slot,
                o.nonce,
                o.addr + o.offset as u64,
            ));
            m[PUT_HDR..PUT_HDR + 4].copy_from_slice(&(chunk as u32).to_le_bytes());
            m[PUT_HDR + 4..].copy_from_slice(&(o.offset as u64).to_le_bytes());
            match send_bytes(iface, lane.ep, AM_RMA_GET, &m) {
                Ok(()) => {
                    o.offset += chunk;
                    o.replies += 1;
                    if o.total == 0 {
                        return Ok(true);
                    }
                }
                Err(Status::NoResource) => return Ok(false),
                Err(s) => return Err(s),
            }
        },
        RmaKind::Atomic => {
            let (op, size, value, compare) = o.atomic;
            let m = Writer::with_capacity(PUT_HDR + 18)
                .bytes(&rma_head(rid, id.0, o.slot, o.nonce, o.addr))
                .u8(op as u8)
                .u8(size)
                .u64(value)
                .u64(compare)
                .buf;
            match send_bytes(iface, lane.ep, AM_RMA_ATOMIC, &m) {
                Ok(()) => {
                    o.replies = 1;
                    o.offset = o.total;
                    Ok(true)
                }
                Err(Status::NoResource) => Ok(false),
                Err(s) => Err(s),
            }
        }
    }
}

fn send_bytes(iface: &mut dyn uct::Iface, ep: uct::EpId, id: u8, b: &[u8]) -> UcsResult<()> {
    iface
        .am_bcopy(ep, id, &mut |buf| {
            buf[..b.len()].copy_from_slice(b);
            b.len()
        })
        .map(drop)
}

/// A transport completion of a zero-copy RMA operation.
pub(crate) fn on_completion(core: &mut Core, id: ReqId, status: Status) {
    if let Some(Op::Rma(o)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
        o.comps = o.comps.saturating_sub(1);
        if o.comps == 0 {
            if let (Some(old), Some(b), Status::Ok) = (&o.amo_old, o.reply_buf, status) {
                b.write_at(0, &old.to_ne_bytes());
            }
            core.complete(id, status, None);
        }
    }
}

impl Core {
    /// The shared-memory window of the worker-allocated region holding `[lo, hi)`, if any.
    pub(crate) fn shm_window(&self, lo: u64, hi: u64) -> Option<ShmWindow> {
        shm_window(&self.mems, self.shm_regions, lo, hi)
    }

    /// Maps a same-host peer's region; see [`map_window`].
    pub(crate) fn map_window(&mut self, w: &ShmWindow) -> Option<Arc<Segment>> {
        map_window(&mut self.mappings, w)
    }

    /// Checks `(slot, nonce, addr, len)` against the region table; the address to access,
    /// and whether the host can touch it directly.
    fn target(&self, slot: u32, nonce: u64, addr: u64, len: u64) -> Result<(u64, bool), Status> {
        let m = self
            .mems
            .get(slot as usize)
            .filter(|m| m.nonce == nonce)
            .ok_or(Status::InvalidParam)?;
        RemoteKey {
            base: m.base,
            len: m.len,
            key: 0,
        }
        .check_range(addr, len)?;
        Ok((addr, m.mem.host_accessible()))
    }

    /// RMA_PUT / RMA_GET / RMA_ATOMIC arrived: execute after the checks, and reply.
    pub(crate) fn on_rma_request(&mut self, am: u8, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let (ep, req, slot, nonce, addr) = match (r.u32(), r.u64(), r.u32(), r.u64(), r.u64()) {
            (Some(a), Some(b), Some(c), Some(d), Some(e)) => (a, b, c, d, e),
            _ => return Err(Bad::Malformed(None)),
        };
        let ep = self.live_ep(ep)?;
        let (status, offset, payload) = match am {
            AM_RMA_PUT => {
                let src = r.rest();
                let status = match self.target(slot, nonce, addr, src.len() as u64) {
                    Ok((a, true)) => {
                        buf::write_raw(a, src);
                        Status::Ok
                    }
                    Ok((a, false)) => match buf::write_raw_device(a, src) {
                        Ok(()) => Status::Ok,
                        Err(s) => s,
                    },
                    Err(s) => s,
                };
                if status != Status::Ok {
                    ucs::warn_limited!(
                        "ucp: refused remote access to {addr:#x} from ep {ep}: {status}"
                    );
                }
                self.ack_put(ep, status);
                return Ok(());
            }
            AM_RMA_GET => {
                let (len, off) = match (r.u32(), r.u64()) {
                    (Some(l), Some(o)) if r.is_empty() => (l as usize, o),
                    _ => return Err(Bad::Malformed(Some(ep))),
                };
                match self.target(slot, nonce, addr, len as u64) {
                    // Host bytes past the inline size are read when the reply is sent,
                    // straight into the transport's buffer (`Ctrl::RmaReplyAt`): a copy
                    // of the reply's own cost a window of 4 KiB gets a quarter of its
                    // bandwidth (MPICH `MPI_Get` 4 KiB, 6.7 against UCX 1.13's 9.0 GB/s,
                    // 2026-12-07).
                    Ok((a, true)) if len > INLINE_REPLY => {
                        self.lazy_replies += 1;
                        self.queue_ctrl(
                            ep,
                            Ctrl::RmaReplyAt {
                                req,
                                offset: off,
                                addr: a,
                                len,
                            },
                        );
                        return Ok(());
                    }
                    // Small host bytes are copied once, without zeroing the reply first.
                    Ok((a, true)) => (Status::Ok, off, self.reply_from(a, len)),
                    Ok((a, false)) => {
                        let mut v = ReplyBytes::from_elem(0, len);
                        match buf::read_raw_device(a, &mut v) {
                            Ok(()) => (Status::Ok, off, v),
                            Err(s) => (s, off, ReplyBytes::new()),
                        }
                    }
                    Err(s) => (s, off, ReplyBytes::new()),
                }
            }
            _ => {
                let (op, size, value, compare) = match (r.u8(), r.u8(), r.u64(), r.u64()) {
                    (Some(a), Some(b), Some(c), Some(d)) if r.is_empty() => (a, b, c, d),
                    _ => return Err(Bad::Malformed(Some(ep))),
                };
                let op = AtomicOp::from_u8(op).ok_or(Bad::Malformed(Some(ep)))?;
                if !ATOMIC_SIZES.contains(&usize::from(size))
                    || !addr.is_multiple_of(u64::from(size))
                {
                    return Err(Bad::Malformed(Some(ep)));
                }
                match self.target(slot, nonce, addr, u64::from(size)) {
                    Ok((a, true)) => {
                        let old = buf::atomic_raw(a, size, op, value, compare);
                        (Status::Ok, 0, ReplyBytes::from_slice(&old.to_le_bytes()))
                    }
                    // Atomics on device memory need a GPU-side operation this build lacks.
                    Ok((_, false)) => (Status::Unsupported, 0, ReplyBytes::new()),
                    Err(s) => (s, 0, ReplyBytes::new()),
                }
            }
        };
        if status != Status::Ok {
            ucs::warn_limited!("ucp: refused remote access to {addr:#x} from ep {ep}: {status}");
        }
        self.queue_ctrl(
            ep,
            Ctrl::RmaReply {
                req,
                offset,
                status,
                data: payload,
            },
        );
        Ok(())
    }

    /// Counts a put handled for `ep`'s peer; the acknowledgement goes out with the others
    /// of this progress call ([`send_put_acks`]).
    fn ack_put(&mut self, ep: usize, status: Status) {
        let e = &mut self.eps[ep];
        if e.put_acks == 0 {
            self.put_ack_eps.push(ep);
        }
        e.put_acks += 1;
        if status != Status::Ok && e.put_ack_status == Status::Ok {
            e.put_ack_status = status;
        }
        self.work = true;
    }

    /// RMA_PUT_ACK arrived: the target handled `count` of our puts.
    pub(crate) fn on_put_ack(&mut self, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let (ep, count, status) = match (r.u32(), r.u32(), r.u8()) {
            (Some(a), Some(b), Some(c)) if r.is_empty() => (a, b, c as i8),
            _ => return Err(Bad::Malformed(None)),
        };
        let ep = self.live_ep(ep)?;
        let e = &mut self.eps[ep];
        if count == 0 || count > e.puts_unacked {
            return Err(Bad::Malformed(Some(ep)));
        }
        e.puts_unacked -= count;
        e.rma_order.note(e.rma_carried, e.puts_unacked);
        let status = Status::from_code(status).unwrap_or(Status::IoError);
        if status != Status::Ok && e.rma_error.is_none() {
            e.rma_error = Some(status);
        }
        if e.puts_unacked == 0 {
            // A flush may have been waiting for this.
            self.work = true;
        }
        Ok(())
    }

    /// RMA_REPLY arrived for one of our operations.
    pub(crate) fn on_rma_reply(&mut self, data: &[u8]) -> Res {
        let mut r = Reader::new(data);
        let (ep, req, offset, status) = match (r.u32(), r.u64(), r.u64(), r.u8()) {
            (Some(a), Some(b), Some(c), Some(d)) => (a, b, c, d as i8),
            _ => return Err(Bad::Malformed(None)),
        };
        let ep = self.live_ep(ep)?;
        let payload = r.rest();
        if req & LIGHT_GET != 0 {
            return self.on_light_reply(ep, req, offset, status, payload);
        }
        let id = ReqId(req);
        let Some(Op::Rma(o)) = self.reqs.get_mut(id).map(|r| &mut r.state) else {
            // The answer to part of an operation that ended already (it failed on this
            // side after some of its requests were out).
            return Err(Bad::Late);
        };
        if o.ep != ep || o.replies == 0 || o.kind == RmaKind::Put {
            return Err(Bad::Malformed(Some(ep)));
        }
        o.replies -= 1;
        let status = Status::from_code(status).unwrap_or(Status::IoError);
        if status != Status::Ok {
            o.status = status;
        } else {
            match o.kind {
                RmaKind::Get => {
                    let off = usize::try_from(offset).map_err(|_| Bad::Malformed(Some(ep)))?;
                    if off
                        .checked_add(payload.len())
                        .is_none_or(|end| end > o.total)
                    {
                        return Err(Bad::Malformed(Some(ep)));
                    }
                    if let Err(s) = o.data.unpack(off, payload) {
                        o.status = s;
                    }
                }
                RmaKind::Atomic => {
                    if payload.len() != 8 {
                        return Err(Bad::Malformed(Some(ep)));
                    }
                    if let Some(b) = o.reply_buf {
                        let old = u64::from_le_bytes(
                            payload.try_into().map_err(|_| Bad::Malformed(Some(ep)))?,
                        );
                        write_old(b, old, o.atomic.1);
                    }
                }
                RmaKind::Put => {}
            }
        }
        if o.replies == 0 && o.offset >= o.total {
            let s = o.status;
            self.complete(id, s, None);
        }
        Ok(())
    }

    /// The reply to a light get (`Worker::rma_light`): its bytes go to the get's buffer.
    fn on_light_reply(
        &mut self,
        ep: usize,
        req: u64,
        offset: u64,
        status: i8,
        payload: &[u8],
    ) -> Res {
        let slot = (req & u64::from(u32::MAX)) as usize;
        let gen = (req >> 32) as u32 & LIGHT_GEN;
        let status = Status::from_code(status).unwrap_or(Status::IoError);
        match self.light_gets.get(slot) {
            Some(g)
                if g.ep == ep
                    && g.gen == gen
                    && offset == 0
                    && (status != Status::Ok || payload.len() == g.buf.len()) => {}
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        let g = self.light_gets.remove(slot);
        if status == Status::Ok {
            g.buf.write_at(0, payload);
        }
        let e = &mut self.eps[ep];
        e.outstanding = e.outstanding.saturating_sub(1);
        e.rma_ops = e.rma_ops.saturating_sub(1);
        e.rma_carried = e.rma_carried.saturating_sub(1);
        e.rma_order.note(e.rma_carried, e.puts_unacked);
        if status != Status::Ok && e.rma_error.is_none() {
            e.rma_error = Some(status);
        }
        if e.rma_ops == 0 {
            // A flush may have been waiting for this.
            self.work = true;
        }
        Ok(())
    }

    /// Drops the light gets of endpoint `ep`, which failed: how many there were.
    pub(crate) fn drop_light_gets(&mut self, ep: usize) -> usize {
        let before = self.light_gets.len();
        self.light_gets.retain(|_, g| g.ep != ep);
        let n = before - self.light_gets.len();
        if let Some(e) = self.eps.get_mut(ep) {
            let n = n as u32;
            e.outstanding = e.outstanding.saturating_sub(n);
            e.rma_ops = e.rma_ops.saturating_sub(n);
            e.rma_carried = e.rma_carried.saturating_sub(n);
            e.rma_order.note(e.rma_carried, e.puts_unacked);
        }
        n
    }
}

/// Queues one RMA_PUT_ACK for each endpoint whose peer's puts were handled since the
/// last call (from `run_actions`, after the messages of a progress call).
pub(crate) fn send_put_acks(core: &mut Core) {
    for ep in std::mem::take(&mut core.put_ack_eps) {
        let Some(e) = core.eps.get_mut(ep) else {
            continue;
        };
        let (count, status) = (e.put_acks, e.put_ack_status);
        e.put_acks = 0;
        e.put_ack_status = Status::Ok;
        if count > 0 {
            core.queue_ctrl(ep, Ctrl::PutAck { count, status });
        }
    }
}

/// Writes an atomic's previous value, `size` bytes of it in native order, to `b`.
fn write_old(b: Buf, old: u64, size: u8) {
    match size {
        1 => b.write_at(0, &(old as u8).to_ne_bytes()),
        2 => b.write_at(0, &(old as u16).to_ne_bytes()),
        4 => b.write_at(0, &(old as u32).to_ne_bytes()),
        _ => b.write_at(0, &old.to_ne_bytes()),
    }
}
