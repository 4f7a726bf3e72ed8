//! `cuda_ipc`: zero-copy put and get between processes of one host whose memory is on
//! CUDA devices, through the driver's IPC handles (feature `cuda`).
//!
//! A registration of device memory packs, into its remote key, the IPC handle of the
//! allocation that holds it (`cuIpcGetMemHandle`), the allocation's range and identity
//! (the driver's buffer id) and the PCI bus id of its device. Memory of the virtual memory
//! API (`cuMemCreate`) has no legacy handle: its key carries instead the descriptor of a
//! shareable handle this process exported and keeps open (`ucs::cuda::vmm`), which a peer
//! takes a copy of and maps. A peer maps each allocation
//! once (`cuIpcOpenMemHandle`, on the device of its local buffer when that is device memory,
//! else on the owning device) and keeps the mapping in a cache keyed by (peer process,
//! buffer id). A buffer freed and allocated again at the same address has another buffer
//! id, so a stale mapping is never served: a key whose allocation overlaps a cached one of
//! another id closes the old mapping first. The cache holds at most `MAX_MAPPINGS`
//! mappings (least recently used go first).
//!
//! Copies go through the driver with unified addressing, so the local buffer may be host,
//! managed or device memory. Up to `SYNC_MAX` bytes are copied synchronously (an 8-byte
//! copy costs about 5 µs that way on an H200, against 10 µs for an asynchronous copy whose
//! event is polled); larger ones are queued on one of `STREAMS` streams of the device,
//! taken in turn so that operations in flight overlap on the copy engines, each with an
//! event of its own, and reported through `Handler::completion` once that event fired.
//!
//! `device_rma` (capability `DEVICE_RMA`) maps a peer's range the same way and runs the
//! caller's own device work on it, on one of these streams: `ucp` moves a layout from the
//! peer's buffer straight into its own (or back) with one kernel.
//!
//! There is no active-message path: `ucp` pairs this transport with one that has one
//! (posix) and uses it for the memory lane of device memory.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use slab::Slab;
use ucs::cuda::{self, Driver, Event, StreamSet};
use ucs::memtype::{self, MemoryType};
use ucs::wire::{Reader, Writer};
use ucs::{Config, Status, UcsResult};

use crate::ep::{Comp, Done, EpId, Iov};
use crate::iface::{Handler, Iface, IfaceAttr, IfaceFlags, MemCaps, OpLimits, PerfEstimate};
use crate::md::{Md, MemH, MemTypes, RemoteKey};

const MAGIC: [u8; 4] = *b"CIPC";
/// Largest copy made synchronously.
const SYNC_MAX: usize = 256 << 10;
/// Mappings kept open per interface.
const MAX_MAPPINGS: usize = 256;
/// Streams per device: operations in flight are taken in turn, so that they overlap on the
/// copy engines.
const STREAMS: usize = 4;

/// Whether this transport can run here: a CUDA driver with at least one device.
pub fn probe() -> Result<Vec<String>, String> {
    match cuda::driver() {
        Some(d) => Ok(vec![format!("cuda ({} devices)", d.devices().len())]),
        None => Err(cuda::absent_reason()
            .unwrap_or("no CUDA driver")
            .to_string()),
    }
}

/// Longest PCI bus id a key carries ("0000:19:00.0" is 12 bytes).
const BUS_ID_MAX: usize = 32;

/// A device's PCI bus id, held inline: every rendezvous message carries one, and a
/// `String` cost an allocation and a free per message on the receiving side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct BusId {
    len: u8,
    bytes: [u8; BUS_ID_MAX],
}

impl BusId {
    /// `s` as a bus id, or `None` when it is longer than `BUS_ID_MAX` bytes.
    fn new(s: &str) -> Option<BusId> {
        let n = s.len();
        if n > BUS_ID_MAX {
            return None;
        }
        let mut bytes = [0; BUS_ID_MAX];
        bytes[..n].copy_from_slice(s.as_bytes());
        Some(BusId {
            len: n as u8,
            bytes,
        })
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// Whether this is the bus id `s` (a device's, as the driver spells it).
    fn is(&self, s: &str) -> bool {
        self.as_bytes() == s.as_bytes()
    }
}

/// What a peer's key says of the allocation it names.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Exported {
    pid: u32,
    buffer_id: u64,
    alloc_base: u64,
    alloc_len: u64,
    bus_id: BusId,
    /// The legacy IPC handle (zeros when `fd` is set).
    handle: [u8; 64],
    /// Memory of the virtual memory API: the exporter's descriptor of its shareable
    /// handle (`ucs::cuda::vmm`), else -1.
    fd: i32,
}

/// A peer allocation mapped here.
#[derive(Debug)]
struct Mapping {
    /// This process's address of the allocation's first byte.
    local: u64,
    /// The device it was opened on (-1: the allocation is this process's own).
    dev: i32,
    alloc_base: u64,
    alloc_len: u64,
    last_use: u64,
    /// Mapped from a shareable handle (virtual memory API) rather than a legacy one.
    vmm: bool,
}

/// Our own allocations whose exported key is kept, at most (the cache is emptied when full).
const MAX_MINE: usize = 1024;
/// Descriptors of shareable handles kept open for peers to take, at most.
const MAX_EXPORTS: usize = 256;

/// The memory domain: registration exports IPC handles; unpacking remembers them.
#[derive(Debug)]
pub struct IpcMd {
    driver: &'static Driver,
    /// Keys unpacked, by (peer pid, buffer id).
    keys: Mutex<FxHashMap<(u32, u64), Exported>>,
    /// What our own allocations export, by buffer id (the driver never gives an id twice in
    /// a process, so an entry cannot go stale): a rendezvous sends a key per message, and
    /// the IPC handle and device of its buffer are then looked up once, not per message.
    mine: Mutex<FxHashMap<u64, Exported>>,
    /// Our virtual-memory allocations exported by descriptor, by buffer id, oldest first
    /// (a peer takes its own copy of a descriptor the first time it maps the allocation).
    exports: Mutex<VecDeque<(u64, i32)>>,
}

impl Drop for IpcMd {
    fn drop(&mut self) {
        for (_, fd) in self
            .exports
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            // SAFETY: descriptors this domain opened, closed once.
            unsafe { libc::close(fd) };
        }
    }
}

impl IpcMd {
    fn new(driver: &'static Driver) -> IpcMd {
        IpcMd {
            driver,
            keys: Mutex::new(FxHashMap::default()),
            mine: Mutex::new(FxHashMap::default()),
            exports: Mutex::new(VecDeque::new()),
        }
    }

    /// The descriptor of our virtual-memory allocation `info`, exported once.
    fn vmm_fd(&self, info: &ucs::memtype::MemInfo) -> UcsResult<i32> {
        let mut ex = self.exports.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(_, fd)) = ex.iter().find(|(id, _)| *id == info.buffer_id) {
            return Ok(fd);
        }
        let fd = self.driver.vmm_export(info.device.max(0), info.base)?;
        if ex.len() >= MAX_EXPORTS {
            if let Some((_, old)) = ex.pop_front() {
                // SAFETY: a descriptor this domain opened, closed once (removed).
                unsafe { libc::close(old) };
            }
        }
        ex.push_back((info.buffer_id, fd));
        Ok(fd)
    }

    fn exported(&self, pid: u32, id: u64) -> Option<Exported> {
        self.keys
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(pid, id))
            .cloned()
    }
}

/// Packs `e` and the registered range as a key blob.
fn pack_key(base: u64, len: u64, e: &Exported) -> Vec<u8> {
    let mut w = Writer::default()
        .bytes(&MAGIC)
        .u64(base)
        .u64(len)
        .u32(e.pid)
        .u64(e.buffer_id)
        .u64(e.alloc_base)
        .u64(e.alloc_len)
        .u8(e.bus_id.len);
    w = w
        .bytes(e.bus_id.as_bytes())
        .bytes(&e.handle)
        .u32(e.fd as u32);
    w.buf
}

fn unpack_key(buf: &[u8]) -> UcsResult<(RemoteKey, Exported)> {
    let mut r = Reader::new(buf);
    let bad = Status::InvalidParam;
    if r.bytes(4).ok_or(bad)? != MAGIC {
        return Err(bad);
    }
    let base = r.u64().ok_or(bad)?;
    let len = r.u64().ok_or(bad)?;
    let pid = r.u32().ok_or(bad)?;
    let buffer_id = r.u64().ok_or(bad)?;
    let alloc_base = r.u64().ok_or(bad)?;
    let alloc_len = r.u64().ok_or(bad)?;
    let n = r.u8().ok_or(bad)? as usize;
    let bus_id = std::str::from_utf8(r.bytes(n).ok_or(bad)?)
        .ok()
        .and_then(BusId::new)
        .ok_or(bad)?;
    let handle: [u8; 64] = r.bytes(64).ok_or(bad)?.try_into().map_err(|_| bad)?;
    let fd = r.u32().ok_or(bad)? as i32;
    if !r.is_empty() || fd < -1 {
        return Err(bad);
    }
    // The registered range lies inside the allocation.
    let end = base.checked_add(len).ok_or(bad)?;
    let alloc_end = alloc_base.checked_add(alloc_len).ok_or(bad)?;
    if base < alloc_base || end > alloc_end {
        return Err(bad);
    }
    Ok((
        RemoteKey {
            base,
            len,
            key: buffer_id,
        },
        Exported {
            pid,
            buffer_id,
            alloc_base,
            alloc_len,
            bus_id,
            handle,
            fd,
        },
    ))
}

impl Md for IpcMd {
    fn name(&self) -> &str {
        "cuda_ipc"
    }

    fn reg_mem_types(&self) -> MemTypes {
        MemTypes::CUDA
    }

    unsafe fn mem_reg(&self, addr: *mut u8, len: usize) -> UcsResult<MemH> {
        let info = self
            .driver
            .pointer(addr as u64)
            .ok_or(Status::InvalidParam)?;
        if info.mem_type != MemoryType::Cuda {
            return Err(Status::Unsupported);
        }
        let end = (addr as u64)
            .checked_add(len as u64)
            .ok_or(Status::InvalidParam)?;
        if end > info.base + info.len {
            return Err(Status::InvalidParam);
        }
        Ok(MemH {
            base: addr as u64,
            len: len as u64,
            key: info.buffer_id,
        })
    }

    fn mem_dereg(&self, _memh: &MemH) -> UcsResult<()> {
        Ok(())
    }

    fn mkey_pack(&self, memh: &MemH) -> Vec<u8> {
        // Registration checked the pointer and recorded the allocation's buffer id.
        if let Some(e) = self
            .mine
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&memh.key)
        {
            return pack_key(memh.base, memh.len, e);
        }
        // Memory of the virtual memory API has no legacy handle: it goes by a shareable
        // handle's descriptor. One that cannot be exported either (not made exportable)
        // packs an empty key, which peers refuse (they then use another protocol).
        let Some(info) = self.driver.pointer(memh.base) else {
            return Vec::new();
        };
        let (handle, fd) = match self.driver.ipc_handle(info.base) {
            Ok(h) => (h, -1),
            Err(_) => match self.vmm_fd(&info) {
                Ok(fd) => ([0; 64], fd),
                Err(_) => return Vec::new(),
            },
        };
        let bus_id = self
            .driver
            .devices()
            .get(info.device.max(0) as usize)
            .and_then(|d| BusId::new(&d.pci_bus_id))
            .unwrap_or_default();
        let e = Exported {
            pid: std::process::id(),
            buffer_id: info.buffer_id,
            alloc_base: info.base,
            alloc_len: info.len,
            bus_id,
            handle,
            fd,
        };
        let key = pack_key(memh.base, memh.len, &e);
        // A descriptor is kept open for at most MAX_EXPORTS allocations (`vmm_fd`): the
        // cache holds legacy handles only, whose validity is the allocation's own.
        if fd < 0 && e.buffer_id == memh.key {
            let mut mine = self.mine.lock().unwrap_or_else(|e| e.into_inner());
            if mine.len() >= MAX_MINE {
                mine.clear();
            }
            mine.insert(e.buffer_id, e);
        }
        key
    }

    fn rkey_same_device(&self, packed: &[u8], local: u64) -> Option<bool> {
        let (_, e) = unpack_key(packed).ok()?;
        // The detector's range cache: no driver call per message.
        let info = memtype::detect(local as *const u8);
        let dev = self
            .driver
            .devices()
            .get(usize::try_from(info.device).ok()?)?;
        Some(e.bus_id.is(&dev.pci_bus_id))
    }

    fn rkey_unpack(&self, buf: &[u8]) -> UcsResult<RemoteKey> {
        let (rk, e) = unpack_key(buf)?;
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if keys.len() > 4 * MAX_MAPPINGS {
            keys.clear();
        }
        // The latest key wins: the exporter may have closed and re-exported a
        // virtual-memory allocation's descriptor under another number. An unchanged key
        // (every message of a rendezvous carries one) is left as it is.
        match keys.entry((e.pid, e.buffer_id)) {
            std::collections::hash_map::Entry::Occupied(mut o) => {
                if *o.get() != e {
                    o.insert(e);
                }
            }
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(e);
            }
        }
        Ok(rk)
    }
}

/// A peer process.
#[derive(Debug)]
struct Peer {
    pid: u32,
    start_time: Option<u64>,
    failed: Option<Status>,
}

/// An asynchronous copy in flight: its device, the event recorded after it.
#[derive(Debug)]
struct InFlight {
    dev: usize,
    event: Event,
    comp: Comp,
    ep: EpId,
    /// When it was posted: its time to completion is counted.
    t0: u64,
    /// A `device_rma` (else copies).
    kernel: bool,
}

/// The `cuda_ipc` interface.
#[derive(Debug)]
pub struct CudaIpcIface {
    attr: IfaceAttr,
    md: Arc<IpcMd>,
    driver: &'static Driver,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    eps: Slab<Peer>,
    mappings: FxHashMap<(u32, u64), Mapping>,
    /// `STREAMS` streams per local device, made on first use, and their events.
    streams: StreamSet,
    inflight: VecDeque<InFlight>,
    errors: VecDeque<(EpId, Status)>,
    /// Mappings opened, translations served from the cache, mappings closed because their
    /// allocation was freed and another took its place, and closed to make room.
    opened: u64,
    hits: u64,
    stale: u64,
    evicted: u64,
    /// Copies made synchronously and queued on streams, and the time the synchronous
    /// ones took, ns.
    sync_copies: u64,
    async_copies: u64,
    sync_ns: u64,
    /// `device_rma` operations (device work of the caller's on a mapping), the host time
    /// spent posting them (mapping, the caller's launch), and from posting to completion.
    kernel_ops: u64,
    kernel_post_ns: u64,
    kernel_done_ns: u64,
    /// Time spent queueing asynchronous copies, and from queueing to seeing them done.
    async_post_ns: u64,
    async_done_ns: u64,
    tick: u64,
    check_every_ns: u64,
    last_check: u64,
}

impl CudaIpcIface {
    pub fn open(cfg: &Config) -> UcsResult<CudaIpcIface> {
        let driver = cuda::driver().ok_or(Status::Unsupported)?;
        let dev_addr = Writer::default().u64(ucs::sys::host_id()).buf;
        let iface_addr = Writer::default().u32(std::process::id()).buf;
        let big = OpLimits {
            max_short: 0,
            max_bcopy: 0,
            min_zcopy: 0,
            max_zcopy: usize::MAX,
            max_iov: 64,
            max_hdr: 0,
        };
        Ok(CudaIpcIface {
            attr: IfaceAttr {
                flags: IfaceFlags::PUT_ZCOPY
                    | IfaceFlags::GET_ZCOPY
                    | IfaceFlags::CONNECT_TO_IFACE
                    | IfaceFlags::ERRHANDLE_PEER_FAILURE
                    | IfaceFlags::DEVICE_RMA,
                am: OpLimits::default(),
                put: big,
                get: big,
                perf: PerfEstimate {
                    overhead_ns: 1000.0,
                    latency_ns: 5000.0,
                    bandwidth: 300e9,
                },
                mem: MemCaps {
                    am: MemTypes::empty(),
                    rma_local: MemTypes::HOST | MemTypes::CUDA | MemTypes::CUDA_MANAGED,
                    rma_remote: MemTypes::CUDA,
                },
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
            },
            md: Arc::new(IpcMd::new(driver)),
            driver,
            dev_addr,
            iface_addr,
            eps: Slab::new(),
            mappings: FxHashMap::default(),
            streams: StreamSet::new(driver, STREAMS),
            inflight: VecDeque::new(),
            errors: VecDeque::new(),
            opened: 0,
            hits: 0,
            stale: 0,
            evicted: 0,
            sync_copies: 0,
            async_copies: 0,
            sync_ns: 0,
            kernel_ops: 0,
            kernel_post_ns: 0,
            kernel_done_ns: 0,
            async_post_ns: 0,
            async_done_ns: 0,
            tick: 0,
            check_every_ns: cfg.error_check_interval_ns,
            last_check: ucs::time::now_ns(),
        })
    }

    /// The local ordinal of the device with PCI bus id `bus`.
    fn ordinal_of(&self, bus: &BusId) -> Option<i32> {
        self.driver
            .devices()
            .iter()
            .find(|d| bus.is(&d.pci_bus_id))
            .map(|d| d.ordinal)
    }

    /// This process's address of `[addr, addr+len)` of the peer allocation `key` names,
    /// mapping it on `dev` (or the owning device) on first use.
    fn translate(
        &mut self,
        pid: u32,
        rkey: &RemoteKey,
        addr: u64,
        len: u64,
        dev: i32,
    ) -> UcsResult<(u64, i32)> {
        rkey.check_range(addr, len)?;
        self.tick += 1;
        // The key is the allocation's buffer id: a mapped one is served without looking
        // further (the mapping records the allocation's base).
        let k = (pid, rkey.key);
        if let Some(m) = self.mappings.get_mut(&k) {
            // A peer's key names its range; the mapping bounds it.
            if addr < m.alloc_base || addr + len > m.alloc_base + m.alloc_len {
                return Err(Status::InvalidParam);
            }
            m.last_use = self.tick;
            self.hits += 1;
            return Ok((m.local + (addr - m.alloc_base), m.dev));
        }
        let e = self
            .md
            .exported(pid, rkey.key)
            .ok_or(Status::InvalidParam)?;
        let k = (pid, e.buffer_id);
        // A new allocation of that peer overlapping a cached one: the old one was freed.
        let stale: Vec<(u32, u64)> = self
            .mappings
            .iter()
            .filter(|((p, _), m)| {
                *p == pid
                    && m.alloc_base < e.alloc_base + e.alloc_len
                    && e.alloc_base < m.alloc_base + m.alloc_len
            })
            .map(|(k, _)| *k)
            .collect();
        for s in stale {
            self.stale += 1;
            self.unmap(s);
        }
        if self.mappings.len() >= MAX_MAPPINGS {
            if let Some(old) = self
                .mappings
                .iter()
                .min_by_key(|(_, m)| m.last_use)
                .map(|(k, _)| *k)
            {
                self.evicted += 1;
                self.unmap(old);
            }
        }
        let (local, dev) = if pid == std::process::id() {
            // Our own allocation: its address is ours already.
            (e.alloc_base, -1)
        } else {
            let dev = if dev >= 0 {
                dev
            } else {
                self.ordinal_of(&e.bus_id).unwrap_or(0)
            };
            let local = if e.fd >= 0 {
                self.driver
                    .vmm_import(dev, pid, e.fd, e.alloc_len as usize)?
            } else {
                self.driver.ipc_open(dev, &e.handle)?
            };
            (local, dev)
        };
        self.opened += 1;
        self.mappings.insert(
            k,
            Mapping {
                local,
                dev,
                alloc_base: e.alloc_base,
                alloc_len: e.alloc_len,
                last_use: self.tick,
                vmm: e.fd >= 0,
            },
        );
        Ok((local + (addr - e.alloc_base), dev))
    }

    fn unmap(&mut self, k: (u32, u64)) {
        if let Some(m) = self.mappings.remove(&k) {
            if m.dev >= 0 {
                // Copies in flight may use it: wait for them first.
                let _ = self.streams.synchronize();
                // SAFETY: opened by `ipc_open` or `vmm_import` on m.dev, closed once
                // (removed from the map).
                unsafe {
                    if m.vmm {
                        self.driver.vmm_close(m.dev, m.local, m.alloc_len as usize);
                    } else {
                        self.driver.ipc_close(m.dev, m.local);
                    }
                }
            }
        }
    }

    /// Mappings open now (for tests and statistics).
    pub fn mapped(&self) -> usize {
        self.mappings.len()
    }

    /// Copies between `local` and the peer range; `to_remote` for put.
    ///
    /// # Safety
    /// As for `put_zcopy`/`get_zcopy`.
    unsafe fn rma(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
        to_remote: bool,
    ) -> UcsResult<Done> {
        let peer = self.eps.get(ep.0 as usize).ok_or(Status::InvalidParam)?;
        if let Some(s) = peer.failed {
            return Err(s);
        }
        let pid = peer.pid;
        // Each local piece against the remote range that follows the last; the copies of
        // one operation go on one stream, so the event after the last marks them all.
        let total: usize = iov.iter().map(|v| v.length).sum();
        let big = total > SYNC_MAX;
        let t0 = if big { ucs::time::now_ns() } else { 0 };
        let mut at = remote_addr;
        let mut stream: Option<(usize, usize, Event)> = None;
        let last = iov.len().saturating_sub(1);
        for (k, v) in iov.iter().enumerate() {
            let n = v.length;
            let local = memtype::detect(v.buffer);
            let local_dev = if local.mem_type == MemoryType::Cuda {
                local.device
            } else {
                -1
            };
            let (remote, map_dev) = self.translate(pid, rkey, at, n as u64, local_dev)?;
            at += n as u64;
            let (dst, src) = if to_remote {
                (remote, v.buffer as u64)
            } else {
                (v.buffer as u64, remote)
            };
            if !big {
                let t0 = ucs::time::now_ns();
                if map_dev >= 0 {
                    // SAFETY: the caller keeps the local buffer valid until this returns,
                    // and the mapping is open; the copy is waited for.
                    unsafe { self.driver.copy_on(map_dev, dst, src, n)? };
                } else {
                    self.driver.copy(dst, src, n)?;
                }
                self.sync_ns += ucs::time::now_ns() - t0;
                self.sync_copies += 1;
                continue;
            }
            self.async_copies += 1;
            if stream.is_none() {
                let dev = if map_dev >= 0 {
                    map_dev
                } else {
                    local_dev.max(0)
                } as usize;
                let (si, ev) = self.streams.take(dev)?;
                stream = Some((dev, si, ev));
            }
            let (dev, si, ev) = stream.as_ref().ok_or(Status::NoResource)?;
            let s = self.streams.stream(*dev, *si);
            // SAFETY: the caller keeps the local buffer valid until `comp` is reported,
            // which waits for the event recorded after the last piece; the mapping stays
            // open until then (`unmap` waits for the streams).
            unsafe {
                if k == last {
                    s.copy_recorded(dst, src, n, ev)?;
                } else {
                    s.copy_async(dst, src, n)?;
                }
            }
        }
        let Some((dev, _, event)) = stream else {
            return Ok(Done::Now);
        };
        self.async_post_ns += ucs::time::now_ns().saturating_sub(t0);
        self.inflight.push_back(InFlight {
            dev,
            event,
            comp,
            ep,
            t0,
            kernel: false,
        });
        Ok(Done::Later)
    }

    fn check_peers(&mut self) {
        for (i, p) in self.eps.iter_mut() {
            if p.failed.is_some() || p.pid == std::process::id() {
                continue;
            }
            let alive = ucs::sys::process_alive(p.pid as i32)
                && ucs::sys::process_start_time(p.pid as i32)
                    .zip(p.start_time)
                    .is_none_or(|(a, b)| a == b);
            if !alive {
                p.failed = Some(Status::ConnectionReset);
                self.errors
                    .push_back((EpId(i as u32), Status::ConnectionReset));
            }
        }
    }
}

impl Iface for CudaIpcIface {
    fn tl_name(&self) -> &str {
        "cuda_ipc"
    }
    fn device_name(&self) -> &str {
        "cuda"
    }
    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn md(&self) -> &dyn Md {
        self.md.as_ref()
    }
    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }
    fn is_reachable(&self, dev: &[u8], iface: &[u8]) -> bool {
        dev == self.dev_addr.as_slice() && iface.len() == 4
    }

    fn ep_connect(&mut self, dev: &[u8], iface: &[u8]) -> UcsResult<EpId> {
        if !self.is_reachable(dev, iface) {
            return Err(Status::Unreachable);
        }
        let pid = Reader::new(iface).u32().ok_or(Status::InvalidAddr)?;
        Ok(EpId(self.eps.insert(Peer {
            pid,
            start_time: ucs::sys::process_start_time(pid as i32),
            failed: None,
        }) as u32))
    }

    fn ep_destroy(&mut self, ep: EpId) {
        if self.eps.try_remove(ep.0 as usize).is_some() {
            // Copies still queued for it complete with Canceled from the next progress.
            for f in self.inflight.iter_mut().filter(|f| f.ep == ep) {
                f.ep = EpId(u32::MAX);
            }
        }
    }

    unsafe fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(ep, iov, remote_addr, rkey, comp, true) }
    }

    unsafe fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(ep, iov, remote_addr, rkey, comp, false) }
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn device_rma(
        &mut self,
        ep: EpId,
        remote_addr: u64,
        len: usize,
        rkey: &RemoteKey,
        local_dev: i32,
        work: &mut dyn FnMut(u64, &cuda::StreamRef) -> UcsResult<()>,
        comp: Comp,
    ) -> UcsResult<Done> {
        let peer = self.eps.get(ep.0 as usize).ok_or(Status::InvalidParam)?;
        if let Some(s) = peer.failed {
            return Err(s);
        }
        let pid = peer.pid;
        let t0 = ucs::time::now_ns();
        let (mapped, map_dev) = self.translate(pid, rkey, remote_addr, len as u64, local_dev)?;
        let dev = if map_dev >= 0 {
            map_dev
        } else {
            local_dev.max(0)
        } as usize;
        let (si, event) = self.streams.take(dev)?;
        let s = cuda::StreamRef::of(self.streams.stream(dev, si));
        let queued = work(mapped, &s).and_then(|()| s.record(&event));
        if let Err(e) = queued {
            // Whatever was queued still runs before the event is reused.
            let _ = s.synchronize();
            self.streams.give_back(dev, event);
            return Err(e);
        }
        self.kernel_ops += 1;
        let posted = ucs::time::now_ns();
        self.kernel_post_ns += posted.saturating_sub(t0);
        if len <= SYNC_MAX {
            // As for small copies: waiting here answers sooner than a polled event.
            let r = event.synchronize();
            self.kernel_done_ns += ucs::time::now_ns().saturating_sub(t0);
            self.streams.give_back(dev, event);
            return r.map(|()| Done::Now);
        }
        self.inflight.push_back(InFlight {
            dev,
            event,
            comp,
            ep,
            t0,
            kernel: true,
        });
        Ok(Done::Later)
    }

    fn flush(&mut self, ep: Option<EpId>, _comp: Comp) -> UcsResult<Done> {
        // Synchronous copies are done when posted; asynchronous ones are waited for.
        let busy = self.inflight.iter().any(|f| ep.is_none_or(|e| e == f.ep));
        if busy {
            self.streams.synchronize()?;
        }
        Ok(Done::Now)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("ipc_opened", self.opened),
            ("ipc_hits", self.hits),
            ("ipc_stale_closed", self.stale),
            ("ipc_evicted", self.evicted),
            ("ipc_mapped", self.mappings.len() as u64),
            ("ipc_sync_copies", self.sync_copies),
            ("ipc_async_copies", self.async_copies),
            ("ipc_sync_ns", self.sync_ns),
            ("ipc_kernel_ops", self.kernel_ops),
            ("ipc_kernel_post_ns", self.kernel_post_ns),
            ("ipc_kernel_done_ns", self.kernel_done_ns),
            ("ipc_async_post_ns", self.async_post_ns),
            ("ipc_async_done_ns", self.async_done_ns),
        ]
    }

    fn progress(&mut self, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        // Operations on different streams finish in any order: each reports when its own
        // event has.
        let mut i = 0;
        while i < self.inflight.len() {
            let r = self.inflight[i].event.done();
            if matches!(r, Ok(false)) {
                i += 1;
                continue;
            }
            let f = self.inflight.remove(i).expect("index in range");
            let took = ucs::time::now_ns().saturating_sub(f.t0);
            if f.kernel {
                self.kernel_done_ns += took;
            } else {
                self.async_done_ns += took;
            }
            let status = match r {
                Ok(_) if f.ep == EpId(u32::MAX) => Status::Canceled,
                Ok(_) => Status::Ok,
                Err(e) => e,
            };
            self.streams.give_back(f.dev, f.event);
            h.completion(f.comp, status);
            n += 1;
        }
        let now = ucs::time::now_ns();
        if now.saturating_sub(self.last_check) >= self.check_every_ns {
            self.last_check = now;
            self.check_peers();
        }
        while let Some((ep, s)) = self.errors.pop_front() {
            h.ep_error(ep, s);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exported() -> Exported {
        Exported {
            pid: 77,
            buffer_id: 9,
            alloc_base: 0x7000_0000,
            alloc_len: 1 << 20,
            bus_id: BusId::new("0000:19:00.0").expect("a bus id"),
            handle: [5; 64],
            fd: -1,
        }
    }

    #[test]
    fn keys_round_trip_and_refuse_what_does_not_fit() {
        let e = exported();
        let blob = pack_key(0x7000_1000, 4096, &e);
        let (rk, back) = unpack_key(&blob).unwrap();
        assert_eq!(back, e);
        assert_eq!((rk.base, rk.len, rk.key), (0x7000_1000, 4096, 9));
        // A range outside the allocation, short and long blobs, a wrong magic.
        assert!(unpack_key(&pack_key(0x6fff_f000, 4096, &e)).is_err());
        assert!(unpack_key(&pack_key(0x7000_0000, 2 << 20, &e)).is_err());
        for cut in [0, 4, 20, blob.len() - 1] {
            assert!(unpack_key(&blob[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = blob.clone();
        longer.push(0);
        assert!(unpack_key(&longer).is_err());
        let mut wrong = blob;
        wrong[0] = b'X';
        assert!(unpack_key(&wrong).is_err());
        // A virtual-memory allocation's key: the descriptor travels, the handle is zeros.
        let v = Exported {
            handle: [0; 64],
            fd: 17,
            ..exported()
        };
        let (_, back) = unpack_key(&pack_key(0x7000_0000, 64, &v)).unwrap();
        assert_eq!(back, v);
        // A negative descriptor other than "none" is refused.
        let mut bad = pack_key(0x7000_0000, 64, &v);
        let n = bad.len();
        bad[n - 4..].copy_from_slice(&(-5i32).to_le_bytes());
        assert!(unpack_key(&bad).is_err());
        // A bus id longer than any the key holds inline, or not text, is refused.
        let at = 4 + 8 + 8 + 4 + 8 + 8 + 8;
        let bus = e.bus_id.as_bytes().len();
        let with_bus = |b: &[u8]| {
            let good = pack_key(0x7000_1000, 4096, &e);
            let mut v = good[..at].to_vec();
            v.push(b.len() as u8);
            v.extend_from_slice(b);
            v.extend_from_slice(&good[at + 1 + bus..]);
            v
        };
        assert_eq!(
            unpack_key(&with_bus(b"0000:19:00.0")).map(|k| k.1),
            Ok(e.clone())
        );
        assert!(unpack_key(&with_bus(&[b'0'; BUS_ID_MAX + 1])).is_err());
        assert!(unpack_key(&with_bus(&[0xff; 12])).is_err());
    }
}
