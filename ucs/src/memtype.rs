//! Memory types: which memory a pointer names (host, CUDA device, CUDA managed), and copies
//! between any two of them.
//!
//! [`detect`] answers for any pointer. Without a CUDA driver (or before [`enable`]
//! loaded one) every pointer is host memory and detection costs one load of a flag. With a
//! driver, answers come from a cache of known allocations, as UCX's memtype cache:
//! device and managed allocations by their whole range (learned from the driver's pointer
//! attributes, or told with [`remember`] by whoever allocated them), and host memory by the
//! page of the pointer asked about, in a small table shared by the process's threads, read
//! inline (a host page already seen costs a few instructions and no call). A pointer in
//! neither costs one driver query (about 0.1–0.2 µs on an H200), whose answer is then
//! cached.
//!
//! `UCX_MEMTYPE_CACHE=n` turns both caches off: every detection asks the driver.
//!
//! What the cache cannot see: host memory unmapped and then mapped again by the driver as
//! device memory at the same page, after that page was cached as host (UCX hooks the
//! allocation calls for this; Rucx does not). [`forget`] drops a range from the caches;
//! Rucx calls it when it frees memory itself.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::RwLock;

use crate::{Status, UcsResult};

/// The memory types Rucx moves data between.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MemoryType {
    Host,
    /// CUDA device memory (`cuMemAlloc`, `cudaMalloc`, the virtual memory API).
    Cuda,
    /// CUDA managed memory (`cuMemAllocManaged`): the host may touch it too.
    CudaManaged,
}

impl MemoryType {
    /// The name `rucx-perftest -m` and UCX use.
    pub fn name(self) -> &'static str {
        match self {
            MemoryType::Host => "host",
            MemoryType::Cuda => "cuda",
            MemoryType::CudaManaged => "cuda-managed",
        }
    }

    /// Parses a name of [`MemoryType::name`].
    pub fn parse(s: &str) -> Option<MemoryType> {
        match s {
            "host" => Some(MemoryType::Host),
            "cuda" => Some(MemoryType::Cuda),
            "cuda-managed" => Some(MemoryType::CudaManaged),
            _ => None,
        }
    }

    /// Whether the host can load and store it directly (memcpy works).
    pub fn host_accessible(self) -> bool {
        matches!(self, MemoryType::Host | MemoryType::CudaManaged)
    }
}

/// What [`detect`] knows about the allocation holding a pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemInfo {
    pub mem_type: MemoryType,
    /// The CUDA device ordinal, -1 for host memory.
    pub device: i32,
    /// The allocation's range (for host memory: unknown, 0 and 0).
    pub base: u64,
    pub len: u64,
    /// The driver's identity of the allocation: a freed and re-allocated buffer at the same
    /// address gets another (0 for host memory).
    pub buffer_id: u64,
}

impl MemInfo {
    pub const HOST: MemInfo = MemInfo {
        mem_type: MemoryType::Host,
        device: -1,
        base: 0,
        len: 0,
        buffer_id: 0,
    };
}

/// A source of pointer attributes (the CUDA driver; a table in tests).
pub trait PointerQuery: Send + Sync {
    /// The allocation holding `ptr`, or `None` for memory the driver does not know (host).
    fn query(&self, ptr: u64) -> Option<MemInfo>;
    /// Copies `n` bytes between any two memory types, synchronously.
    fn copy(&self, dst: u64, src: u64, n: usize) -> UcsResult<()>;
    /// Starts copying `n` bytes between any two memory types; `None` when the copy is
    /// complete already. By default it is made at once ([`copy`](Self::copy)).
    fn copy_async(&self, dst: u64, src: u64, n: usize) -> UcsResult<Option<Box<dyn PendingCopy>>> {
        self.copy(dst, src, n).map(|()| None)
    }
}

/// A copy in flight ([`copy_async`]). Dropping it waits for the copy, so that the memory
/// it reads and writes may be released right after.
pub trait PendingCopy: Send + std::fmt::Debug {
    /// Whether the bytes have landed; an error when the copy failed.
    fn done(&mut self) -> UcsResult<bool>;
}

/// Set once a driver is loaded: until then every pointer is host memory.
static ACTIVE: AtomicBool = AtomicBool::new(false);
static USE_CACHE: AtomicBool = AtomicBool::new(true);
/// Bumped by [`enable`], [`remember`] and [`forget`] (under `GLOBAL`'s write lock): host
/// pages cached before no longer match. Its low [`EPOCH_BITS`] are never all zero.
static EPOCH: AtomicU64 = AtomicU64::new(1);

struct Global {
    query: Option<Box<dyn PointerQuery>>,
    /// Device and managed allocations by base address.
    ranges: BTreeMap<u64, MemInfo>,
}

static GLOBAL: RwLock<Global> = RwLock::new(Global {
    query: None,
    ranges: BTreeMap::new(),
});

/// Host pages (direct-mapped by page number), each word the page number with the epoch it
/// was seen in above it ([`host_key`]); 0 is empty. One table for every thread: a
/// thread-local one costs a `__tls_get_addr` call per lookup in a shared library (the C
/// ABI), and a host page is written here once, then only read (docs/gpu.md,
/// layers).
const HOST_SLOTS: usize = 256;
static HOST_PAGES: [AtomicU64; HOST_SLOTS] = [const { AtomicU64::new(0) }; HOST_SLOTS];
/// Page numbers below 2^PAGE_BITS (56-bit addresses) are cached; the epoch takes the rest.
const PAGE_BITS: u32 = 44;
const EPOCH_BITS: u32 = 64 - PAGE_BITS;

const PAGE_SHIFT: u32 = 12;

/// The word [`HOST_PAGES`] holds for the page of `p` in the current epoch, with its slot;
/// `None` for an address above what the table keys.
#[inline(always)]
fn host_key(p: u64) -> Option<(u64, usize)> {
    let page = p >> PAGE_SHIFT;
    if page >> PAGE_BITS != 0 {
        return None;
    }
    let epoch = EPOCH.load(Ordering::Relaxed) & ((1 << EPOCH_BITS) - 1);
    Some((page | epoch << PAGE_BITS, page as usize % HOST_SLOTS))
}

/// Whether the page of `p` is a host page seen in this epoch.
#[inline(always)]
fn cached_host(p: u64) -> bool {
    // Never written while the cache is off (`UCX_MEMTYPE_CACHE=n`): `enable` starts a
    // new epoch, so nothing cached before matches.
    host_key(p).is_some_and(|(key, slot)| HOST_PAGES[slot].load(Ordering::Relaxed) == key)
}

/// Starts a new epoch (the caller holds `GLOBAL`'s write lock). When the epoch's bits
/// wrap, the table is emptied, so that no word of an old epoch can match again.
fn next_epoch(_g: &mut Global) {
    let e = EPOCH.fetch_add(1, Ordering::Release).wrapping_add(1);
    if e & ((1 << EPOCH_BITS) - 1) == 0 {
        for w in &HOST_PAGES {
            w.store(0, Ordering::Relaxed);
        }
        EPOCH.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts detecting with `query` (the CUDA driver): from now on pointers may be device
/// memory. `cache` is `UCX_MEMTYPE_CACHE`. Later calls replace the source.
pub fn enable(query: Box<dyn PointerQuery>, cache: bool) {
    let mut g = GLOBAL.write().unwrap_or_else(|e| e.into_inner());
    g.query = Some(query);
    g.ranges.clear();
    USE_CACHE.store(cache, Ordering::Relaxed);
    next_epoch(&mut g);
    ACTIVE.store(true, Ordering::Release);
}

/// Whether any pointer may be other than host memory (a driver is loaded).
#[inline(always)]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// The memory type of the allocation holding `ptr`.
#[inline]
pub fn detect(ptr: *const u8) -> MemInfo {
    if !active() || ptr.is_null() || cached_host(ptr as u64) {
        return MemInfo::HOST;
    }
    detect_slow(ptr as u64)
}

/// Whether `ptr` is known to be host memory without asking the driver or taking a lock:
/// no driver is loaded, or its page is in the host-page table. `false` says only that a
/// full [`detect`] is needed. For callers that must not block or panic (atomic loads
/// only).
#[inline(always)]
pub fn known_host(ptr: *const u8) -> bool {
    !active() || cached_host(ptr as u64)
}

/// Only the type, for callers that need nothing else.
#[inline(always)]
pub fn mem_type(ptr: *const u8) -> MemoryType {
    if !active() || ptr.is_null() || cached_host(ptr as u64) {
        return MemoryType::Host;
    }
    detect_slow(ptr as u64).mem_type
}

thread_local! {
    /// The device or managed range this thread last found in the range cache, and the
    /// epoch it was found in: a rendezvous asks about the same buffer several times per
    /// message, and the read lock and tree walk of each ask were 2.8 % of a GPU ping-pong's
    /// CPU samples on the GPU machine's host (2026-11-27). Any
    /// `remember`, `forget` or `enable` starts a new epoch, which retires it.
    static LAST_RANGE: std::cell::Cell<(u64, MemInfo)> =
        const { std::cell::Cell::new((0, MemInfo::HOST)) };
}

#[inline(never)]
fn detect_slow(p: u64) -> MemInfo {
    let cache = USE_CACHE.load(Ordering::Relaxed);
    if cache {
        let (epoch, info) = LAST_RANGE.with(|c| c.get());
        if epoch == EPOCH.load(Ordering::Acquire) && p >= info.base && p - info.base < info.len {
            return info;
        }
    }
    let key_before = host_key(p);
    let g = GLOBAL.read().unwrap_or_else(|e| e.into_inner());
    if cache {
        if let Some((_, info)) = g.ranges.range(..=p).next_back() {
            if p < info.base + info.len {
                // The epoch cannot move while the read lock is held (writers hold the
                // write lock to start one).
                let epoch = EPOCH.load(Ordering::Acquire);
                LAST_RANGE.with(|c| c.set((epoch, *info)));
                return *info;
            }
        }
    }
    let Some(q) = g.query.as_ref() else {
        return MemInfo::HOST;
    };
    let found = q.query(p);
    drop(g);
    match found {
        Some(info) if info.mem_type != MemoryType::Host => {
            if cache && info.len > 0 {
                remember(info);
            }
            info
        }
        _ => {
            if cache {
                // The key of the epoch before the query: a device allocation remembered
                // meanwhile has started a new one, and this word will not match it.
                if let Some((key, slot)) = key_before {
                    HOST_PAGES[slot].store(key, Ordering::Relaxed);
                }
            }
            MemInfo::HOST
        }
    }
}

/// Records a device or managed allocation (made by Rucx, or learned otherwise).
pub fn remember(info: MemInfo) {
    if info.mem_type == MemoryType::Host || info.len == 0 {
        return;
    }
    let mut g = GLOBAL.write().unwrap_or_else(|e| e.into_inner());
    drop_overlapping(&mut g.ranges, info.base, info.len);
    g.ranges.insert(info.base, info);
    // A page some thread once found unallocated (host, as far as the driver knew) may be
    // part of this allocation now: the host-page cache starts over.
    next_epoch(&mut g);
}

/// Forgets `[base, base+len)` (memory freed): neither cache answers for it again.
pub fn forget(base: u64, len: u64) {
    let mut g = GLOBAL.write().unwrap_or_else(|e| e.into_inner());
    drop_overlapping(&mut g.ranges, base, len.max(1));
    next_epoch(&mut g);
}

fn drop_overlapping(ranges: &mut BTreeMap<u64, MemInfo>, base: u64, len: u64) {
    let end = base.saturating_add(len);
    let dead: Vec<u64> = ranges
        .range(..end)
        .rev()
        .take_while(|(_, i)| i.base + i.len > base || i.base >= base)
        .filter(|(_, i)| i.base < end && i.base + i.len > base)
        .map(|(k, _)| *k)
        .collect();
    for k in dead {
        ranges.remove(&k);
    }
}

/// Copies `n` bytes from `src` to `dst`, each of any memory type (`memcpy` when both are
/// host-accessible, the driver otherwise).
///
/// # Safety
/// `src` is readable and `dst` writable for `n` bytes in their memory types, and they do
/// not overlap.
pub unsafe fn copy(
    dst: *mut u8,
    dst_type: MemoryType,
    src: *const u8,
    src_type: MemoryType,
    n: usize,
) -> UcsResult<()> {
    if n == 0 {
        return Ok(());
    }
    if dst_type.host_accessible() && src_type.host_accessible() {
        // SAFETY: per the contract; both are host memory.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        return Ok(());
    }
    let g = GLOBAL.read().unwrap_or_else(|e| e.into_inner());
    match g.query.as_ref() {
        Some(q) => q.copy(dst as u64, src as u64, n),
        None => Err(Status::Unsupported),
    }
}

/// Starts copying `n` bytes from `src` to `dst`, each of any memory type: `None` when the
/// copy is complete on return (`memcpy` when both are host-accessible), else the copy in
/// flight (on a stream of the driver's).
///
/// # Safety
/// `src` is readable and `dst` writable for `n` bytes in their memory types, they do not
/// overlap, and both stay so until the returned copy reports done or is dropped.
pub unsafe fn copy_async(
    dst: *mut u8,
    dst_type: MemoryType,
    src: *const u8,
    src_type: MemoryType,
    n: usize,
) -> UcsResult<Option<Box<dyn PendingCopy>>> {
    if n == 0 {
        return Ok(None);
    }
    if dst_type.host_accessible() && src_type.host_accessible() {
        // SAFETY: per the contract; both are host memory.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
        return Ok(None);
    }
    let g = GLOBAL.read().unwrap_or_else(|e| e.into_inner());
    match g.query.as_ref() {
        Some(q) => q.copy_async(dst as u64, src as u64, n),
        None => Err(Status::Unsupported),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A fake driver: a table of "device" ranges (really host memory, so copies can check
    /// bytes), counting its queries.
    struct Table {
        ranges: Vec<MemInfo>,
        queries: std::sync::Arc<AtomicU64>,
    }

    impl PointerQuery for Table {
        fn query(&self, ptr: u64) -> Option<MemInfo> {
            self.queries.fetch_add(1, Ordering::Relaxed);
            self.ranges
                .iter()
                .find(|i| ptr >= i.base && ptr < i.base + i.len)
                .copied()
        }
        fn copy(&self, dst: u64, src: u64, n: usize) -> UcsResult<()> {
            // SAFETY: the test's "device" memory is host memory it owns.
            unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst as *mut u8, n) };
            Ok(())
        }
    }

    /// The detection state is global: one test at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn detection_caches_device_ranges_and_host_pages() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let dev = vec![0u8; 1 << 16];
        let host = vec![0u8; 1 << 16];
        let base = dev.as_ptr() as u64;
        let queries = std::sync::Arc::new(AtomicU64::new(0));
        let info = MemInfo {
            mem_type: MemoryType::Cuda,
            device: 1,
            base,
            len: dev.len() as u64,
            buffer_id: 42,
        };
        enable(
            Box::new(Table {
                ranges: vec![info],
                queries: queries.clone(),
            }),
            true,
        );
        assert_eq!(detect(dev[100..].as_ptr()), info);
        let q = queries.load(Ordering::Relaxed);
        // Anywhere in the range is answered from the cache.
        assert_eq!(detect(dev[60000..].as_ptr()).buffer_id, 42);
        assert_eq!(queries.load(Ordering::Relaxed), q);
        // Host: one query for the page, then none.
        assert_eq!(detect(host.as_ptr()), MemInfo::HOST);
        let q = queries.load(Ordering::Relaxed);
        assert_eq!(detect(host.as_ptr()).mem_type, MemoryType::Host);
        assert_eq!(queries.load(Ordering::Relaxed), q);
        // A page found to be host memory that becomes part of a device allocation (a
        // layout's origin probed outside its buffer, then memory allocated there) is
        // device memory from the moment the allocation is remembered.
        let later = MemInfo {
            base: host.as_ptr() as u64,
            len: host.len() as u64,
            buffer_id: 43,
            ..info
        };
        remember(later);
        assert_eq!(detect(host.as_ptr()).buffer_id, 43);
        forget(later.base, later.len);
        // Forgotten: asked again.
        let q = queries.load(Ordering::Relaxed);
        forget(base, dev.len() as u64);
        assert_eq!(detect(dev.as_ptr()).buffer_id, 42);
        assert_eq!(queries.load(Ordering::Relaxed), q + 1);
        // Copies between "device" and host go through the source.
        let mut out = vec![0u8; 16];
        let src: Vec<u8> = (0..16).collect();
        // SAFETY: both buffers are live and 16 bytes long.
        unsafe {
            copy(
                out.as_mut_ptr(),
                MemoryType::Cuda,
                src.as_ptr(),
                MemoryType::Host,
                16,
            )
        }
        .unwrap();
        assert_eq!(out, src);
        // Without the cache every detection asks.
        enable(
            Box::new(Table {
                ranges: vec![info],
                queries: queries.clone(),
            }),
            false,
        );
        let q = queries.load(Ordering::Relaxed);
        detect(host.as_ptr());
        detect(host.as_ptr());
        detect(dev.as_ptr());
        assert_eq!(queries.load(Ordering::Relaxed), q + 3);
        ACTIVE.store(false, Ordering::Release);
        assert_eq!(detect(dev.as_ptr()), MemInfo::HOST, "no driver: all host");
    }

    #[test]
    fn host_pages_of_an_old_epoch_never_match_after_the_epoch_wraps() {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let host = [0u8; 64];
        let queries = std::sync::Arc::new(AtomicU64::new(0));
        enable(
            Box::new(Table {
                ranges: Vec::new(),
                queries: queries.clone(),
            }),
            true,
        );
        let low = |e: u64| e & ((1 << EPOCH_BITS) - 1);
        // A page cached in an epoch whose low bits are 1...
        EPOCH.store(1, Ordering::Relaxed);
        assert_eq!(detect(host.as_ptr()), MemInfo::HOST);
        let q = queries.load(Ordering::Relaxed);
        assert_eq!(detect(host.as_ptr()), MemInfo::HOST);
        assert_eq!(queries.load(Ordering::Relaxed), q, "cached");
        // ...then the epoch runs to the end of its bits and wraps (a forget), to low bits
        // that are 1 again: the old word must not answer.
        EPOCH.store((1 << EPOCH_BITS) - 1, Ordering::Relaxed);
        forget(1 << 40, 1);
        assert_eq!(low(EPOCH.load(Ordering::Relaxed)), 1);
        assert_eq!(detect(host.as_ptr()), MemInfo::HOST);
        assert_eq!(
            queries.load(Ordering::Relaxed),
            q + 1,
            "asked again after the wrap"
        );
        assert_eq!(mem_type(host.as_ptr()), MemoryType::Host);
        assert_eq!(queries.load(Ordering::Relaxed), q + 1, "then cached");
        assert!(known_host(host.as_ptr()));
        forget(1 << 40, 1);
        assert!(
            !known_host(host.as_ptr()),
            "a new epoch: not known until detected again"
        );
        ACTIVE.store(false, Ordering::Release);
    }

    #[test]
    fn overlapping_ranges_replace_each_other() {
        let mut m = BTreeMap::new();
        let r = |base, len, id| MemInfo {
            mem_type: MemoryType::Cuda,
            device: 0,
            base,
            len,
            buffer_id: id,
        };
        m.insert(100, r(100, 100, 1));
        m.insert(300, r(300, 100, 2));
        m.insert(500, r(500, 100, 3));
        drop_overlapping(&mut m, 150, 200);
        assert_eq!(m.keys().copied().collect::<Vec<_>>(), vec![500]);
        drop_overlapping(&mut m, 600, 10);
        assert_eq!(m.len(), 1);
        drop_overlapping(&mut m, 0, 501);
        assert!(m.is_empty());
    }

    #[test]
    fn names_round_trip() {
        for t in [MemoryType::Host, MemoryType::Cuda, MemoryType::CudaManaged] {
            assert_eq!(MemoryType::parse(t.name()), Some(t));
        }
        assert_eq!(MemoryType::parse("rocm"), None);
        assert!(MemoryType::CudaManaged.host_accessible());
        assert!(!MemoryType::Cuda.host_accessible());
    }
}
