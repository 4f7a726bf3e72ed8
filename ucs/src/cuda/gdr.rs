//! `gdr_copy`: small host → device copies by the CPU through a mapping of GPU memory
//! (NVIDIA's gdrcopy: the `gdrdrv` kernel module, `/dev/gdrdrv`, and `libgdrapi.so.2`,
//! loaded at run time).
//!
//! A driver copy of a few bytes into device memory costs 5–9 µs (a copy queued on a
//! stream and waited for; `contrib/gpu/probe.cu`); gdrcopy pins the allocation's GPU pages
//! (`gdr_pin_buffer`), maps them into this process (`gdr_map`), and the copy becomes CPU
//! stores into that mapping (`gdr_copy_to_mapping`, which ends with a store fence so the
//! data is in device memory before any later launch reads it). [`GdrCache`] keeps one
//! pinned mapping per allocation, keyed by its base and checked against the driver's
//! buffer id: an allocation freed and made again at the same address has another id, so a
//! stale mapping is released and never written through. At most [`MAX_MAPPINGS`] are kept
//! (the least recently used go first).
//!
//! [`copy_to_device`] is what the driver's copy path (`memtype::copy`, through
//! `DriverQuery`) calls for host → device copies of up to [`GDR_COPY_MAX`] bytes: eager
//! messages received into device buffers. [`copy_from_device`] reads device → host copies
//! of up to [`GDR_READ_MAX`] bytes through the same mappings (`gdr_copy_from_mapping`):
//! the sender's side of a small device message, which `ucp` then sends eager instead of by
//! a rendezvous ([`eager_max`]). Reads through the mapping are uncached loads across PCIe,
//! so only small ones go this way; larger copies stay with the driver.
//!
//! No machine here has `/dev/gdrdrv`: [`absent_reason`] says so, and `rucx-info -d` lists
//! `gdr_copy` as absent with it. The cache's logic (page rounding, the offset of the
//! mapping, hits, stale buffers, eviction, refusals) is tested against the `Model` of its
//! tests, a model of the gdrcopy calls that maps the same pages at a second address of one
//! process, and says so.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use crate::memtype::{MemInfo, MemoryType};
use crate::{Status, UcsResult};

/// GPU pages are 64 KiB (`GPU_PAGE_SHIFT` of `gdrapi.h`): pins cover whole pages.
pub const GPU_PAGE: u64 = 1 << 16;
/// Largest host → device copy made through a mapping.
pub const GDR_COPY_MAX: usize = 8192;
/// Largest device → host copy read through a mapping. Uncached reads across PCIe cost far
/// more per byte than the writes; the bound is set from that, not measured: no machine
/// here has gdrdrv.
pub const GDR_READ_MAX: usize = 1024;

/// Pinned mappings kept.
pub const MAX_MAPPINGS: usize = 64;

/// The gdrcopy calls the cache makes (`gdrapi.h`); `mh` is a `gdr_mh_t`.
pub trait GdrApi: Send + std::fmt::Debug {
    /// Pins `[addr, addr+size)` (GPU-page aligned) for mapping (`gdr_pin_buffer`).
    fn pin(&mut self, addr: u64, size: u64) -> Result<u64, Status>;
    /// Maps a pinned range into this process (`gdr_map`).
    fn map(&mut self, mh: u64, size: u64) -> Result<*mut u8, Status>;
    /// The device address the mapping starts at (`gdr_get_info`'s `va`).
    fn va(&mut self, mh: u64) -> Result<u64, Status>;
    fn unmap(&mut self, mh: u64, at: *mut u8, size: u64);
    fn unpin(&mut self, mh: u64);
    /// Copies `n` bytes from `src` to `dst`, inside a mapping of `mh`
    /// (`gdr_copy_to_mapping`).
    ///
    /// # Safety
    /// `dst` lies in a live mapping of `mh` for `n` bytes; `src` is readable for `n`.
    unsafe fn copy_to(
        &mut self,
        mh: u64,
        dst: *mut u8,
        src: *const u8,
        n: usize,
    ) -> Result<(), Status>;
    /// Copies `n` bytes from `src`, inside a mapping of `mh`, to host memory at `dst`
    /// (`gdr_copy_from_mapping`).
    ///
    /// # Safety
    /// `src` lies in a live mapping of `mh` for `n` bytes; `dst` is writable for `n`.
    unsafe fn copy_from(
        &mut self,
        mh: u64,
        dst: *mut u8,
        src: *const u8,
        n: usize,
    ) -> Result<(), Status>;
}

type OpenFn = unsafe extern "C" fn() -> *mut c_void;
type PinFn = unsafe extern "C" fn(*mut c_void, libc::c_ulong, usize, u64, u32, *mut u64) -> c_int;
type UnpinFn = unsafe extern "C" fn(*mut c_void, u64) -> c_int;
type MapFn = unsafe extern "C" fn(*mut c_void, u64, *mut *mut c_void, usize) -> c_int;
type UnmapFn = unsafe extern "C" fn(*mut c_void, u64, *mut c_void, usize) -> c_int;
type InfoFn = unsafe extern "C" fn(*mut c_void, u64, *mut GdrInfo) -> c_int;
/// `gdr_copy_to_mapping(mh, map_d_ptr, h_ptr, size)` and
/// `gdr_copy_from_mapping(mh, h_ptr, map_d_ptr, size)`: destination first in both.
type CopyFn = unsafe extern "C" fn(u64, *mut c_void, *const c_void, usize) -> c_int;

/// `gdr_info_v2_t` (`gdr_info_t` of gdrcopy 2.0–2.3 begins the same way: `va`,
/// `mapped_size`, `page_size`), with room to spare.
#[repr(C)]
#[derive(Default)]
struct GdrInfo {
    va: u64,
    mapped_size: u64,
    page_size: u32,
    rest: [u32; 13],
}

/// libgdrapi, loaded at run time, with its open handle (`gdr_t`).
#[derive(Debug)]
pub struct Lib {
    g: *mut c_void,
    pin: PinFn,
    unpin: UnpinFn,
    map: MapFn,
    unmap: UnmapFn,
    info: InfoFn,
    copy_to: CopyFn,
    copy_from: CopyFn,
}

// SAFETY: the gdr_t handle is used under the global cache's mutex only; libgdrapi's
// calls on one handle may come from any thread.
unsafe impl Send for Lib {}

impl Lib {
    /// Loads libgdrapi and opens the driver where `/dev/gdrdrv` exists; else why not.
    pub fn load() -> Result<Lib, String> {
        if !Path::new("/dev/gdrdrv").exists() {
            return Err("/dev/gdrdrv not found (gdrdrv module not loaded)".into());
        }
        // SAFETY: dlopen with a constant name; never closed, so the pointers stay valid.
        let h = unsafe { libc::dlopen(c"libgdrapi.so.2".as_ptr(), libc::RTLD_NOW) };
        if h.is_null() {
            return Err("/dev/gdrdrv exists, but libgdrapi.so.2 does not load".into());
        }
        let sym = |name: &std::ffi::CStr| {
            // SAFETY: a symbol lookup in a loaded library.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            (!p.is_null())
                .then_some(p)
                .ok_or_else(|| format!("libgdrapi.so.2 lacks {}", name.to_string_lossy()))
        };
        let info = sym(c"gdr_get_info_v2").or_else(|_| sym(c"gdr_get_info"))?;
        let (open, pin, unpin, map, unmap, copy_to, copy_from) = (
            sym(c"gdr_open")?,
            sym(c"gdr_pin_buffer")?,
            sym(c"gdr_unpin_buffer")?,
            sym(c"gdr_map")?,
            sym(c"gdr_unmap")?,
            sym(c"gdr_copy_to_mapping")?,
            sym(c"gdr_copy_from_mapping")?,
        );
        // SAFETY: the C signatures of gdrapi.h (gdr_mh_t is one unsigned long, passed and
        // returned as a u64 on the 64-bit targets Rucx builds for).
        let (open, lib) = unsafe {
            (
                std::mem::transmute::<*mut c_void, OpenFn>(open),
                Lib {
                    g: std::ptr::null_mut(),
                    pin: std::mem::transmute::<*mut c_void, PinFn>(pin),
                    unpin: std::mem::transmute::<*mut c_void, UnpinFn>(unpin),
                    map: std::mem::transmute::<*mut c_void, MapFn>(map),
                    unmap: std::mem::transmute::<*mut c_void, UnmapFn>(unmap),
                    info: std::mem::transmute::<*mut c_void, InfoFn>(info),
                    copy_to: std::mem::transmute::<*mut c_void, CopyFn>(copy_to),
                    copy_from: std::mem::transmute::<*mut c_void, CopyFn>(copy_from),
                },
            )
        };
        // SAFETY: no arguments; returns NULL on failure.
        let g = unsafe { open() };
        if g.is_null() {
            return Err("gdr_open failed (gdrdrv refused the connection)".into());
        }
        Ok(Lib { g, ..lib })
    }
}

/// A gdrcopy return code as a status.
fn rc(r: c_int) -> Result<(), Status> {
    match r {
        0 => Ok(()),
        r => Err(Status::from_errno(r.abs())),
    }
}

impl GdrApi for Lib {
    fn pin(&mut self, addr: u64, size: u64) -> Result<u64, Status> {
        let mut mh = 0u64;
        // SAFETY: an open handle; mh is an out parameter (gdr_mh_t).
        rc(unsafe { (self.pin)(self.g, addr as libc::c_ulong, size as usize, 0, 0, &mut mh) })?;
        Ok(mh)
    }

    fn map(&mut self, mh: u64, size: u64) -> Result<*mut u8, Status> {
        let mut p = std::ptr::null_mut();
        // SAFETY: a pinned handle of this library; p is an out parameter.
        rc(unsafe { (self.map)(self.g, mh, &mut p, size as usize) })?;
        Ok(p.cast())
    }

    fn va(&mut self, mh: u64) -> Result<u64, Status> {
        let mut i = GdrInfo::default();
        // SAFETY: a pinned handle; `i` is larger than either version of the struct.
        rc(unsafe { (self.info)(self.g, mh, &mut i) })?;
        Ok(i.va)
    }

    fn unmap(&mut self, mh: u64, at: *mut u8, size: u64) {
        // SAFETY: a mapping `map` made of this handle, unmapped once.
        let _ = unsafe { (self.unmap)(self.g, mh, at.cast(), size as usize) };
    }

    fn unpin(&mut self, mh: u64) {
        // SAFETY: a pinned handle, unpinned once (after its mapping went).
        let _ = unsafe { (self.unpin)(self.g, mh) };
    }

    unsafe fn copy_to(
        &mut self,
        mh: u64,
        dst: *mut u8,
        src: *const u8,
        n: usize,
    ) -> Result<(), Status> {
        // SAFETY: per the trait's contract.
        rc(unsafe { (self.copy_to)(mh, dst.cast(), src.cast(), n) })
    }

    unsafe fn copy_from(
        &mut self,
        mh: u64,
        dst: *mut u8,
        src: *const u8,
        n: usize,
    ) -> Result<(), Status> {
        // SAFETY: per the trait's contract.
        rc(unsafe { (self.copy_from)(mh, dst.cast(), src.cast(), n) })
    }
}

/// One allocation's pinned, mapped GPU pages.
#[derive(Debug)]
struct Mapping {
    /// The pinned range: the allocation rounded out to GPU pages.
    start: u64,
    size: u64,
    mh: u64,
    /// Where the pages are mapped here, and the device address that corresponds to it.
    host: *mut u8,
    va: u64,
    buffer_id: u64,
    last_use: u64,
}

/// The pinned mappings of device allocations (see the module's documentation).
#[derive(Debug)]
pub struct GdrCache<A: GdrApi> {
    api: A,
    /// By allocation base.
    maps: HashMap<u64, Mapping>,
    tick: u64,
    pub pinned: u64,
    pub hits: u64,
    pub stale: u64,
    pub evicted: u64,
    pub copies: u64,
}

// SAFETY: the raw pointers are addresses of mappings this cache owns; it is used under a
// mutex.
unsafe impl<A: GdrApi> Send for GdrCache<A> {}

impl<A: GdrApi> GdrCache<A> {
    pub fn new(api: A) -> GdrCache<A> {
        GdrCache {
            api,
            maps: HashMap::new(),
            tick: 0,
            pinned: 0,
            hits: 0,
            stale: 0,
            evicted: 0,
            copies: 0,
        }
    }

    /// Mappings open now.
    pub fn mapped(&self) -> usize {
        self.maps.len()
    }

    /// The host address through which `[addr, addr+n)` of the device allocation `info`
    /// is written, pinning and mapping the allocation on first use.
    pub fn host_ptr(&mut self, info: &MemInfo, addr: u64, n: usize) -> UcsResult<*mut u8> {
        if info.mem_type != MemoryType::Cuda || info.len == 0 {
            return Err(Status::Unsupported);
        }
        let end = addr.checked_add(n as u64).ok_or(Status::InvalidParam)?;
        if addr < info.base || end > info.base + info.len {
            return Err(Status::InvalidParam);
        }
        self.tick += 1;
        let stale = self
            .maps
            .get(&info.base)
            .is_some_and(|m| m.buffer_id != info.buffer_id);
        if stale {
            self.stale += 1;
            self.release(info.base);
        }
        if let Some(m) = self.maps.get_mut(&info.base) {
            m.last_use = self.tick;
            self.hits += 1;
            return Ok(m.host.wrapping_add((addr - m.va) as usize));
        }
        // A new allocation overlapping an old mapping: the old one was freed.
        let (lo, hi) = round_out(info.base, info.len);
        let overlapping: Vec<u64> = self
            .maps
            .iter()
            .filter(|(_, m)| m.start < hi && lo < m.start + m.size)
            .map(|(k, _)| *k)
            .collect();
        for k in overlapping {
            self.stale += 1;
            self.release(k);
        }
        if self.maps.len() >= MAX_MAPPINGS {
            if let Some(old) = self
                .maps
                .iter()
                .min_by_key(|(_, m)| m.last_use)
                .map(|(k, _)| *k)
            {
                self.evicted += 1;
                self.release(old);
            }
        }
        let size = hi - lo;
        let mh = self.api.pin(lo, size)?;
        let host = match self.api.map(mh, size) {
            Ok(h) => h,
            Err(e) => {
                self.api.unpin(mh);
                return Err(e);
            }
        };
        let va = match self.api.va(mh) {
            Ok(v) if addr >= v && end <= v + size => v,
            r => {
                self.api.unmap(mh, host, size);
                self.api.unpin(mh);
                return Err(r.err().unwrap_or(Status::IoError));
            }
        };
        self.pinned += 1;
        self.maps.insert(
            info.base,
            Mapping {
                start: lo,
                size,
                mh,
                host,
                va,
                buffer_id: info.buffer_id,
                last_use: self.tick,
            },
        );
        Ok(host.wrapping_add((addr - va) as usize))
    }

    /// Copies `n` bytes from host memory `src` to `dst` in the device allocation `info`.
    ///
    /// # Safety
    /// `src` is readable for `n` bytes; `info` describes the live allocation holding
    /// `dst` (the driver's answer for `dst`).
    pub unsafe fn write(
        &mut self,
        info: &MemInfo,
        dst: u64,
        src: *const u8,
        n: usize,
    ) -> UcsResult<()> {
        let (mh, p) = self.mapped_at(info, dst, n)?;
        // SAFETY: `p` lies in the mapping of `mh` for n bytes (checked by host_ptr against
        // the allocation, which the mapping covers); src per the contract.
        unsafe { self.api.copy_to(mh, p, src, n) }?;
        self.copies += 1;
        Ok(())
    }

    /// Copies `n` bytes from `src` in the device allocation `info` to host memory `dst`.
    ///
    /// # Safety
    /// `dst` is writable for `n` bytes; `info` describes the live allocation holding `src`
    /// (the driver's answer for `src`).
    pub unsafe fn read(
        &mut self,
        info: &MemInfo,
        src: u64,
        dst: *mut u8,
        n: usize,
    ) -> UcsResult<()> {
        let (mh, p) = self.mapped_at(info, src, n)?;
        // SAFETY: `p` lies in the mapping of `mh` for n bytes (as in `write`); dst per the
        // contract.
        unsafe { self.api.copy_from(mh, dst, p, n) }?;
        self.copies += 1;
        Ok(())
    }

    /// The mapping's handle and the host address of `[addr, addr+n)` in it.
    fn mapped_at(&mut self, info: &MemInfo, addr: u64, n: usize) -> UcsResult<(u64, *mut u8)> {
        let p = self.host_ptr(info, addr, n)?;
        let mh = self
            .maps
            .get(&info.base)
            .map(|m| m.mh)
            .ok_or(Status::IoError)?;
        Ok((mh, p))
    }

    fn release(&mut self, base: u64) {
        if let Some(m) = self.maps.remove(&base) {
            self.api.unmap(m.mh, m.host, m.size);
            self.api.unpin(m.mh);
        }
    }
}

impl<A: GdrApi> Drop for GdrCache<A> {
    fn drop(&mut self) {
        let bases: Vec<u64> = self.maps.keys().copied().collect();
        for b in bases {
            self.release(b);
        }
    }
}

/// `[base, base+len)` rounded out to whole GPU pages.
fn round_out(base: u64, len: u64) -> (u64, u64) {
    let lo = base & !(GPU_PAGE - 1);
    let hi = (base + len).div_ceil(GPU_PAGE) * GPU_PAGE;
    (lo, hi)
}

static GLOBAL: OnceLock<Result<Mutex<GdrCache<Lib>>, String>> = OnceLock::new();

fn global() -> &'static Result<Mutex<GdrCache<Lib>>, String> {
    GLOBAL.get_or_init(|| Lib::load().map(|l| Mutex::new(GdrCache::new(l))))
}

/// Why gdrcopy is not used here, or `None` where it is.
pub fn absent_reason() -> Option<String> {
    global().as_ref().err().cloned()
}

/// Whether `UCX_TLS` lets copies go through gdrcopy (set by the context: `gdr_copy` or
/// the `cuda` alias selected).
static ALLOWED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Lets copies use gdrcopy, or not (`UCX_TLS` without `gdr_copy`).
pub fn allow(yes: bool) {
    ALLOWED.store(yes, std::sync::atomic::Ordering::Relaxed);
}

/// Whether copies may go through gdrcopy here (present and allowed).
pub fn usable() -> bool {
    ALLOWED.load(std::sync::atomic::Ordering::Relaxed) && global().is_ok()
}

/// Copies `n` bytes of host memory at `src` into device memory at `dst` (allocation
/// `info`) through gdrcopy: `None` when gdrcopy is absent, not allowed, or the copy is
/// larger than [`GDR_COPY_MAX`] (the caller copies with the driver), else the copy's result.
///
/// # Safety
/// As for [`GdrCache::write`].
pub unsafe fn copy_to_device(
    info: &MemInfo,
    dst: u64,
    src: *const u8,
    n: usize,
) -> Option<UcsResult<()>> {
    // SAFETY: forwarded contract.
    with_cache(n <= GDR_COPY_MAX, |c| unsafe { c.write(info, dst, src, n) })
}

/// Copies `n` bytes of device memory at `src` (allocation `info`) into host memory at
/// `dst` through gdrcopy: `None` when gdrcopy is absent, not allowed, or the copy is larger
/// than [`GDR_READ_MAX`] (the caller copies with the driver), else the copy's result.
///
/// # Safety
/// As for [`GdrCache::read`].
pub unsafe fn copy_from_device(
    info: &MemInfo,
    src: u64,
    dst: *mut u8,
    n: usize,
) -> Option<UcsResult<()>> {
    // SAFETY: forwarded contract.
    with_cache(n <= GDR_READ_MAX, |c| unsafe { c.read(info, src, dst, n) })
}

/// Runs `copy` on the global cache when gdrcopy is present and allowed and the copy is
/// `small`: `None` otherwise, or when gdrdrv cannot pin the memory (the driver's own
/// refusal), so that the caller copies with the driver.
fn with_cache(
    small: bool,
    copy: impl FnOnce(&mut GdrCache<Lib>) -> UcsResult<()>,
) -> Option<UcsResult<()>> {
    if !small || !ALLOWED.load(std::sync::atomic::Ordering::Relaxed) {
        return None;
    }
    let cache = global().as_ref().ok()?;
    let mut c = cache.lock().unwrap_or_else(|e| e.into_inner());
    match copy(&mut c) {
        Err(Status::Unsupported | Status::InvalidParam) => None,
        r => Some(r),
    }
}

/// The largest contiguous device message `ucp` sends eager, its sender reading it through
/// a mapping ([`copy_from_device`]) and its receiver writing it through one: 0 where
/// gdrcopy is absent or not allowed (then device messages between processes of one host go
/// by a rendezvous, one copy by the driver).
pub fn eager_max() -> usize {
    if usable() {
        GDR_READ_MAX
    } else {
        0
    }
}

/// The global cache's counters: pins, hits, stale mappings released, evictions, copies.
pub fn counters() -> Option<[(&'static str, u64); 5]> {
    let c = global().as_ref().ok()?;
    let c = c.lock().unwrap_or_else(|e| e.into_inner());
    Some([
        ("gdr_pinned", c.pinned),
        ("gdr_hits", c.hits),
        ("gdr_stale", c.stale),
        ("gdr_evicted", c.evicted),
        ("gdr_copies", c.copies),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A MODEL of the gdrcopy calls, not gdrcopy: "device memory" is a memfd mapped at one
    /// address (the device address), and `map` maps the same pages at a second address
    /// (the BAR mapping), so a write through the mapping shows at the device address.
    /// Pins must be GPU-page aligned, as gdrdrv requires; `fail_pin` refuses pins.
    #[derive(Debug)]
    struct Model {
        fd: c_int,
        dev: *mut u8,
        len: usize,
        pins: HashMap<u64, (u64, u64)>,
        next: u64,
        maps: Vec<(*mut u8, u64)>,
        fail_pin: bool,
        unpinned: u64,
    }

    // SAFETY: test-only, used from one thread.
    unsafe impl Send for Model {}

    impl Model {
        /// `len` bytes of "device memory", GPU-page aligned.
        fn new(len: usize) -> Model {
            // SAFETY: a fresh anonymous file.
            let fd = unsafe { libc::memfd_create(c"gdr-model".as_ptr(), 0) };
            assert!(fd >= 0);
            // SAFETY: fd is ours.
            assert_eq!(unsafe { libc::ftruncate(fd, len as libc::off_t) }, 0);
            // Reserve twice the size, and place the mapping at a 64 KiB boundary in it.
            // SAFETY: an anonymous reservation.
            let res = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len + GPU_PAGE as usize,
                    libc::PROT_NONE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(res, libc::MAP_FAILED);
            let aligned = (res as u64).div_ceil(GPU_PAGE) * GPU_PAGE;
            // SAFETY: inside the reservation, replaced by the file's pages.
            let dev = unsafe {
                libc::mmap(
                    aligned as *mut c_void,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    fd,
                    0,
                )
            };
            assert_ne!(dev, libc::MAP_FAILED);
            Model {
                fd,
                dev: dev.cast(),
                len,
                pins: HashMap::new(),
                next: 1,
                maps: Vec::new(),
                fail_pin: false,
                unpinned: 0,
            }
        }

        /// Asserts that `[at, at+n)` lies in a live mapping of the pinned handle `mh`, as
        /// gdrcopy's copies require.
        fn check_mapped(&self, mh: u64, at: *mut u8, n: usize) {
            assert!(self.pins.contains_key(&mh));
            let inside = self
                .maps
                .iter()
                .any(|m| at >= m.0 && at.wrapping_add(n) <= m.0.wrapping_add(m.1 as usize));
            assert!(inside, "a copy outside every mapping");
        }

        fn info(&self, off: u64, len: u64, id: u64) -> MemInfo {
            MemInfo {
                mem_type: MemoryType::Cuda,
                device: 0,
                base: self.dev as u64 + off,
                len,
                buffer_id: id,
            }
        }
    }

    impl GdrApi for Model {
        fn pin(&mut self, addr: u64, size: u64) -> Result<u64, Status> {
            let base = self.dev as u64;
            if self.fail_pin
                || !addr.is_multiple_of(GPU_PAGE)
                || !size.is_multiple_of(GPU_PAGE)
                || addr < base
                || addr + size > base + self.len as u64
            {
                return Err(Status::InvalidParam);
            }
            let mh = self.next;
            self.next += 1;
            self.pins.insert(mh, (addr, size));
            Ok(mh)
        }
        fn map(&mut self, mh: u64, size: u64) -> Result<*mut u8, Status> {
            let (addr, psize) = *self.pins.get(&mh).ok_or(Status::InvalidParam)?;
            assert_eq!(size, psize);
            // SAFETY: maps the file's pages of the pinned range at a new address.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size as usize,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    self.fd,
                    (addr - self.dev as u64) as libc::off_t,
                )
            };
            assert_ne!(p, libc::MAP_FAILED);
            self.maps.push((p.cast(), size));
            Ok(p.cast())
        }
        fn va(&mut self, mh: u64) -> Result<u64, Status> {
            self.pins.get(&mh).map(|p| p.0).ok_or(Status::InvalidParam)
        }
        fn unmap(&mut self, _mh: u64, at: *mut u8, size: u64) {
            let i = self.maps.iter().position(|m| m.0 == at).expect("a mapping");
            assert_eq!(self.maps.remove(i).1, size);
            // SAFETY: mapped by `map`, unmapped once.
            unsafe { libc::munmap(at.cast(), size as usize) };
        }
        fn unpin(&mut self, mh: u64) {
            assert!(
                self.pins.remove(&mh).is_some(),
                "unpin of an unknown handle"
            );
            self.unpinned += 1;
        }
        unsafe fn copy_to(
            &mut self,
            mh: u64,
            dst: *mut u8,
            src: *const u8,
            n: usize,
        ) -> Result<(), Status> {
            self.check_mapped(mh, dst, n);
            // SAFETY: inside a live mapping (checked); src per the contract.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
            Ok(())
        }
        unsafe fn copy_from(
            &mut self,
            mh: u64,
            dst: *mut u8,
            src: *const u8,
            n: usize,
        ) -> Result<(), Status> {
            self.check_mapped(mh, src.cast_mut(), n);
            // SAFETY: inside a live mapping (checked); dst per the contract.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
            Ok(())
        }
    }

    fn device_bytes(m: &Model, off: usize, n: usize) -> Vec<u8> {
        // SAFETY: inside the model's device range.
        unsafe { std::slice::from_raw_parts(m.dev.add(off), n) }.to_vec()
    }

    #[test]
    fn writes_land_at_the_device_address_through_a_second_mapping() {
        // Allocations that do not start on a GPU page: pins round out, and the offset of
        // the mapping is the device address minus the pinned start.
        let mut c = GdrCache::new(Model::new(1 << 20));
        let a = c.api.info(100, 70_000, 1);
        for (off, n) in [(0u64, 8usize), (5, 1), (69_990, 10), (4096, 8192)] {
            let data: Vec<u8> = (0..n).map(|i| (i as u64 + off) as u8 ^ 0x5a).collect();
            // SAFETY: data is readable; `a` describes the model's range.
            unsafe { c.write(&a, a.base + off, data.as_ptr(), n) }.unwrap();
            assert_eq!(
                device_bytes(&c.api, 100 + off as usize, n),
                data,
                "at {off}"
            );
        }
        assert_eq!((c.pinned, c.hits, c.copies), (1, 3, 4));
        assert_eq!(c.mapped(), 1);
        let (start, size) = *c.api.pins.values().next().unwrap();
        assert_eq!(start, c.api.dev as u64);
        assert_eq!(
            size,
            2 * GPU_PAGE,
            "70,100 bytes from offset 100 span two GPU pages"
        );
    }

    #[test]
    fn reads_come_from_the_device_address_through_the_mapping() {
        let mut c = GdrCache::new(Model::new(1 << 20));
        let a = c.api.info(300, 5000, 1);
        // SAFETY: inside the model's device range.
        let dev = unsafe { std::slice::from_raw_parts_mut(c.api.dev.add(300), 5000) };
        for (i, b) in dev.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        for (off, n) in [(0usize, 8usize), (1, 1), (4990, 10), (100, GDR_READ_MAX)] {
            let mut out = vec![0u8; n];
            // SAFETY: out is writable; `a` describes the model's range.
            unsafe { c.read(&a, a.base + off as u64, out.as_mut_ptr(), n) }.unwrap();
            assert_eq!(out, device_bytes(&c.api, 300 + off, n), "at {off}");
        }
        // One pin serves reads and writes alike.
        // SAFETY: as above.
        unsafe { c.write(&a, a.base, [0xeeu8; 4].as_ptr(), 4) }.unwrap();
        let mut out = [0u8; 6];
        // SAFETY: as above.
        unsafe { c.read(&a, a.base, out.as_mut_ptr(), 6) }.unwrap();
        assert_eq!(
            out,
            [
                0xee,
                0xee,
                0xee,
                0xee,
                dev_at(&c.api, 304),
                dev_at(&c.api, 305)
            ]
        );
        assert_eq!((c.pinned, c.copies), (1, 6));
        // A freed and re-allocated buffer at the same address is pinned again before it is
        // read, and a read past the allocation is refused.
        let again = c.api.info(300, 5000, 2);
        let mut out = [0u8; 8];
        // SAFETY: as above.
        unsafe { c.read(&again, again.base, out.as_mut_ptr(), 8) }.unwrap();
        assert_eq!((c.pinned, c.stale), (2, 1));
        // SAFETY: as above.
        let r = unsafe { c.read(&again, again.base + 4996, out.as_mut_ptr(), 8) };
        assert_eq!(r, Err(Status::InvalidParam));
    }

    fn dev_at(m: &Model, off: usize) -> u8 {
        device_bytes(m, off, 1)[0]
    }

    #[test]
    fn a_freed_and_reallocated_buffer_is_pinned_again() {
        let mut c = GdrCache::new(Model::new(1 << 20));
        let old = c.api.info(0, 4096, 7);
        // SAFETY: as above.
        unsafe { c.write(&old, old.base, [1u8; 8].as_ptr(), 8) }.unwrap();
        // The same address, another buffer id: the old pin is released first.
        let new = c.api.info(0, 4096, 8);
        // SAFETY: as above.
        unsafe { c.write(&new, new.base + 8, [2u8; 8].as_ptr(), 8) }.unwrap();
        assert_eq!((c.pinned, c.stale, c.api.unpinned), (2, 1, 1));
        assert_eq!(c.mapped(), 1);
        // A larger allocation overlapping the old one at another base: also stale.
        let grown = c.api.info(GPU_PAGE, 3 * GPU_PAGE, 9);
        let other = c.api.info(0, 2 * GPU_PAGE, 10);
        // SAFETY: as above.
        unsafe { c.write(&other, other.base, [3u8; 4].as_ptr(), 4) }.unwrap();
        // SAFETY: as above.
        unsafe { c.write(&grown, grown.base, [4u8; 4].as_ptr(), 4) }.unwrap();
        // Ids 7 and 8 went for a new id at their base, id 10 for an overlapping allocation.
        assert_eq!(c.stale, 3);
        assert_eq!(device_bytes(&c.api, GPU_PAGE as usize, 4), [4; 4]);
        assert_eq!(c.api.pins.len(), c.mapped());
    }

    #[test]
    fn the_least_recently_used_mapping_goes_first() {
        let n = MAX_MAPPINGS + 2;
        let mut c = GdrCache::new(Model::new(n * GPU_PAGE as usize));
        let allocs: Vec<MemInfo> = (0..n as u64)
            .map(|k| c.api.info(k * GPU_PAGE, 64, k + 1))
            .collect();
        for a in &allocs[..MAX_MAPPINGS] {
            // SAFETY: as above.
            unsafe { c.write(a, a.base, [9u8].as_ptr(), 1) }.unwrap();
        }
        // Touch the first one again: the second is now the oldest.
        // SAFETY: as above.
        unsafe { c.write(&allocs[0], allocs[0].base, [9u8].as_ptr(), 1) }.unwrap();
        for a in &allocs[MAX_MAPPINGS..] {
            // SAFETY: as above.
            unsafe { c.write(a, a.base, [9u8].as_ptr(), 1) }.unwrap();
        }
        assert_eq!(c.evicted, 2);
        assert_eq!(c.mapped(), MAX_MAPPINGS);
        assert!(c.maps.contains_key(&allocs[0].base));
        assert!(!c.maps.contains_key(&allocs[1].base));
        assert!(!c.maps.contains_key(&allocs[2].base));
        assert_eq!(c.api.pins.len(), MAX_MAPPINGS);
    }

    #[test]
    fn refusals_leave_nothing_pinned() {
        let mut c = GdrCache::new(Model::new(1 << 20));
        let a = c.api.info(0, 4096, 1);
        // Outside the allocation.
        // SAFETY: as above.
        let r = unsafe { c.write(&a, a.base + 4090, [0u8; 8].as_ptr(), 8) };
        assert_eq!(r, Err(Status::InvalidParam));
        // Not device memory.
        let host = MemInfo::HOST;
        assert_eq!(c.host_ptr(&host, 0, 1), Err(Status::Unsupported));
        // The driver refuses the pin.
        c.api.fail_pin = true;
        // SAFETY: as above.
        let r = unsafe { c.write(&a, a.base, [0u8; 8].as_ptr(), 8) };
        assert_eq!(r, Err(Status::InvalidParam));
        assert_eq!((c.pinned, c.mapped(), c.api.pins.len()), (0, 0, 0));
    }

    #[test]
    fn absent_here_with_the_reason() {
        if Path::new("/dev/gdrdrv").exists() {
            eprintln!("skipped: /dev/gdrdrv exists on this machine");
            return;
        }
        let why = absent_reason().expect("absent without /dev/gdrdrv");
        assert!(why.contains("/dev/gdrdrv"), "{why}");
        let info = MemInfo {
            mem_type: MemoryType::Cuda,
            device: 0,
            base: 0x1000,
            len: 64,
            buffer_id: 1,
        };
        // SAFETY: returns before touching anything (gdrcopy is absent).
        assert!(unsafe { copy_to_device(&info, 0x1000, [0u8].as_ptr(), 1) }.is_none());
        let mut b = [0u8];
        // SAFETY: as above.
        assert!(unsafe { copy_from_device(&info, 0x1000, b.as_mut_ptr(), 1) }.is_none());
        assert_eq!(
            eager_max(),
            0,
            "no device message goes eager without gdrcopy"
        );
    }
}
