//! Message memory of the UCP and UCT tests, and `rucx-perftest`'s one room for `unsafe`
//! (STYLE.md §6).
//!
//! A non-blocking `ucp` operation uses the caller's memory until it completes, so a
//! [`ucp::Buf`] is made by an `unsafe` constructor whose contract is "valid until every
//! operation on it has completed, and not touched by anyone else meanwhile". A [`Region`]
//! keeps the first half of that promise by construction: it is allocated once for a run
//! and never freed (one the worker mapped, [`Region::mapped`], lives as long as the
//! worker, which outlives the run's operations). The second half is kept by the tests' structure: they fill a send
//! region or check a receive region ([`Region::fill`], [`Region::check`]) only when they
//! have seen every operation on it complete. The one deliberate exception, as in
//! `ucx_perftest`, is a bandwidth test keeping several receives in flight into one shared
//! region (and several sends reading one shared region, which the contract allows). Those
//! receive bytes are written only by `ucp`'s operations — the worker on this thread, or,
//! for a put rendezvous, the peer process through its transport — and read by nobody in
//! this process, so the overlap can cost their contents (which nothing reads unless
//! `--validate`, and then every message in flight has a region of its own) but never
//! soundness here.
//!
//! The same contract covers the UCT tests' zero-copy operations ([`Region::put_zcopy`],
//! [`Region::get_zcopy`]) and registrations ([`Region::register`]): a region is valid for
//! the rest of the process, and the tests change a region's bytes ([`Region::set_u64`])
//! only after the last operation reading them has completed.
//!
//! This module makes a Rust reference to a region's bytes only for a named layout's
//! validation ([`Region::fill_layout`], [`Region::check_layout`]), which the tests call
//! with no operation on the region in flight (as [`Region::fill`]); everything else goes
//! through the raw pointer, so no `&`/`&mut` can alias what `ucp`, `uct` or a peer's
//! transport does with the bytes.

use std::alloc::{alloc_zeroed, Layout};
use std::ptr::NonNull;
use std::sync::Arc;

use ucp::datatype::{DtLayout, LayoutBuf};
use ucp::{Buf, Data};
use ucs::UcsResult;
use uct::{Comp, Done, EpId, Iface, Iov, MemH, MemoryType, RemoteKey};

/// Alignment of message buffers (a page, as `ucx_perftest` allocates them).
const ALIGN: usize = 4096;

/// `len` bytes that live until the process exits.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    /// Host memory, or GPU memory (`-m cuda`, `cuda-managed`): device memory is filled
    /// and checked through a host copy, by the driver.
    mem: MemoryType,
}

/// A buffer's memory type and CUDA device (`-m`, `-a`).
pub type MemSpec = (MemoryType, i32);

/// Why GPU memory of type `mem` cannot be used here, if it cannot.
pub fn gpu_unavailable(mem: MemoryType) -> Option<String> {
    #[cfg(feature = "cuda")]
    if ucs::cuda::driver().is_none() {
        return Some(format!(
            "-m {}: {}",
            mem.name(),
            ucs::cuda::absent_reason().unwrap_or("no CUDA driver")
        ));
    }
    #[cfg(not(feature = "cuda"))]
    return Some(format!(
        "-m {}: this build has no GPU memory support (the `cuda` feature)",
        mem.name()
    ));
    #[cfg(feature = "cuda")]
    None
}

/// Device or managed memory for the rest of the process.
#[cfg(feature = "cuda")]
fn device_alloc(len: usize, mem: MemoryType, dev: i32) -> Result<NonNull<u8>, String> {
    if let Some(why) = gpu_unavailable(mem) {
        return Err(why);
    }
    let a = ucs::cuda::DeviceAlloc::new(dev, len.max(1), mem == MemoryType::CudaManaged).map_err(
        |e| {
            format!(
                "cannot allocate {len} bytes of {} memory on GPU {dev}: {e}",
                mem.name()
            )
        },
    )?;
    let p = a.ptr() as *mut u8;
    // A run's message memory lives until the process exits (as `Region::new`'s).
    std::mem::forget(a);
    NonNull::new(p).ok_or_else(|| "the driver returned a null allocation".to_string())
}

#[cfg(not(feature = "cuda"))]
fn device_alloc(_len: usize, mem: MemoryType, _dev: i32) -> Result<NonNull<u8>, String> {
    Err(gpu_unavailable(mem).unwrap_or_default())
}

/// Memory a run's buffers can take on this machine: `MemAvailable` of `/proc/meminfo`, and
/// with `shm` (worker-mapped buffers are shared-memory files) no more than `/dev/shm` has
/// free. `None` when neither can be read (then nothing is refused).
pub fn available_bytes(shm: bool) -> Option<u64> {
    let mem = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map(|kb| kb * 1024)
    });
    let dev_shm = shm
        .then(|| nix::sys::statvfs::statvfs("/dev/shm").ok())
        .flatten()
        .map(|v| v.blocks_available() * v.fragment_size());
    match (mem, dev_shm) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// `n` bytes for a person: "512 B", "3.0 KiB", "1.5 GiB", "90.9 TiB".
pub fn human(n: u128) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl Region {
    /// Allocates `len` zeroed bytes for the rest of the process (a run's message buffers
    /// are needed until its last operation completes, which is at the run's end).
    pub fn new(len: usize) -> Result<Region, String> {
        if len == 0 {
            return Ok(Region {
                ptr: NonNull::dangling(),
                len: 0,
                mem: MemoryType::Host,
            });
        }
        let err = || format!("cannot allocate a {len}-byte message buffer");
        let layout = Layout::from_size_align(len, ALIGN).map_err(|_| err())?;
        // SAFETY: `layout` has a non-zero size (len > 0 was checked above).
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(err)?;
        Ok(Region {
            ptr,
            len,
            mem: MemoryType::Host,
        })
    }

    /// [`Region::new`] of memory type `mem` on CUDA device `dev` (zero-filled).
    pub fn new_in(len: usize, (mem, dev): MemSpec) -> Result<Region, String> {
        if mem == MemoryType::Host {
            return Region::new(len);
        }
        let r = Region {
            ptr: device_alloc(len, mem, dev)?,
            len,
            mem,
        };
        r.clear(0);
        Ok(r)
    }

    /// [`Region::mapped`] of memory type `mem` on CUDA device `dev`: GPU memory the worker
    /// allocates and registers (`ucp_mem_map` with a memory type), which a same-host peer
    /// maps through its memory lane for device memory.
    pub fn mapped_in(
        worker: &mut ucp::Worker,
        len: usize,
        (mem, dev): MemSpec,
    ) -> Result<Region, String> {
        if mem == MemoryType::Host {
            return Region::mapped(worker, len);
        }
        if let Some(why) = gpu_unavailable(mem) {
            return Err(why);
        }
        let h = worker
            .mem_map_alloc(len.max(1), mem, dev)
            .map_err(|e| format!("cannot map {len} bytes of {} memory: {e}", mem.name()))?;
        let (base, _) = worker.mem_query(h).map_err(|e| e.to_string())?;
        let ptr = NonNull::new(base as *mut u8).ok_or("mem_map returned a null region")?;
        let r = Region { ptr, len, mem };
        r.clear(0);
        Ok(r)
    }

    /// Whether the host may touch the bytes directly.
    fn host(&self) -> bool {
        self.mem.host_accessible()
    }

    /// Copies between the region (at `off`) and host bytes, for device memory.
    fn device_copy(&self, off: usize, host: *mut u8, n: usize, to_region: bool) {
        assert!(off + n <= self.len, "device copy outside the region");
        let at = self.ptr.as_ptr().wrapping_add(off);
        // SAFETY: the range lies inside the live allocation (checked); `host` is n bytes of
        // the caller's; no operation on the region is in flight (the module's contract).
        let r = unsafe {
            if to_region {
                ucs::memtype::copy(at, self.mem, host, MemoryType::Host, n)
            } else {
                ucs::memtype::copy(host, MemoryType::Host, at, self.mem, n)
            }
        };
        if let Err(e) = r {
            panic!(
                "copying {n} bytes of {} memory failed: {e}",
                self.mem.name()
            );
        }
    }

    /// Maps `len` zeroed bytes through `worker` (`mem_map` without a buffer, as
    /// `ucx_perftest` allocates with `ucp_mem_map`): shared memory that a same-host peer's
    /// worker can map, so a rendezvous between two such regions is a plain copy. The
    /// region lives as long as the worker, which the tests keep until their last
    /// operation has completed (`ucp_tests::run` drops both together); it is never
    /// unmapped before.
    pub fn mapped(worker: &mut ucp::Worker, len: usize) -> Result<Region, String> {
        let h = worker
            .mem_map(None, len.max(1))
            .map_err(|e| format!("cannot map a {len}-byte message buffer: {e}"))?;
        let (base, _) = worker.mem_query(h).map_err(|e| e.to_string())?;
        let ptr = NonNull::new(base as *mut u8).ok_or("mem_map returned a null region")?;
        Ok(Region {
            ptr,
            len,
            mem: MemoryType::Host,
        })
    }

    /// The whole region as one `ucp` buffer.
    pub fn buf(&self) -> Buf {
        // SAFETY: the `len` bytes at `ptr` are one live allocation that is never freed
        // (`new`) or that lives as long as the worker that mapped it (`mapped`), so they
        // stay allocated until any operation completes. That nobody else
        // touches them while an operation runs is the tests' part, described in the module
        // documentation (with its one overlap, harmless to this process); this module only
        // reaches the bytes through raw pointers, so no Rust reference aliases them.
        unsafe { Buf::from_raw(self.ptr.as_ptr(), self.len) }
    }

    /// The region as operation data: one contiguous buffer (`parts == None`), or the iov
    /// list of `parts`' lengths laid back to back from the start, as `ucx_perftest` splits
    /// its buffer for `-D iov`. Panics if `parts` add up to more than the region.
    pub fn data(&self, parts: Option<&[usize]>) -> Data {
        self.data_with_gap(parts, 0)
    }

    /// As [`Region::data`], with `gap` bytes between consecutive iov entries (the region
    /// must hold the entries and the gaps).
    pub fn data_with_gap(&self, parts: Option<&[usize]>, gap: usize) -> Data {
        let whole = self.buf();
        match parts {
            None => Data::Contig(whole),
            Some(parts) => {
                let mut off = 0;
                Data::Iov(
                    parts
                        .iter()
                        .map(|&n| {
                            let b = whole.sub(off, n).expect("iov entries inside the region");
                            off += n + gap;
                            b
                        })
                        .collect(),
                )
            }
        }
    }

    /// The region as the buffer of a named layout (`-D milc:16`): the layout addresses
    /// the region from its first byte. Fails if the layout's bytes leave the region.
    pub fn layout_data(&self, dt: &Arc<DtLayout>) -> Result<Data, String> {
        let (lo, hi) = dt.canon().bounds();
        if dt.size() > 0 && (lo < 0 || hi < lo || hi as u64 > self.len as u64) {
            return Err(format!(
                "the layout's bytes [{lo}, {hi}) leave its {}-byte buffer",
                self.len
            ));
        }
        // SAFETY: every byte the layout touches lies in [ptr + lo, ptr + hi), inside the
        // region (checked above), which lives as [`Region::buf`] describes; the tests
        // keep the module's contract for it, as for [`Region::buf`].
        let lb = unsafe { LayoutBuf::new(self.ptr.as_ptr(), Arc::clone(dt)) };
        Ok(Data::Layout(lb))
    }

    /// Runs `f` on the region's bytes. Only while no operation on the region is in
    /// flight (the module's contract), so nothing else touches them meanwhile.
    fn with_bytes_mut<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        if self.len == 0 {
            return f(&mut []);
        }
        if !self.host() {
            let mut v = vec![0u8; self.len];
            self.device_copy(0, v.as_mut_ptr(), self.len, false);
            let r = f(&mut v);
            self.device_copy(0, v.as_mut_ptr(), self.len, true);
            return r;
        }
        // SAFETY: `len` bytes from `ptr` are one live, initialized (zeroed) allocation;
        // the callers hold no operation on the region in flight, and this module makes no
        // other reference to it, so this is the only access while `f` runs.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) };
        f(bytes)
    }

    /// Writes the test pattern for `seed` as the packed bytes of `layout` (so the
    /// message it sends is the pattern). Only while no operation on the region is in
    /// flight.
    pub fn fill_layout(&self, layout: &ucp::dt::Layout, seed: u64) -> Result<(), String> {
        let c = layout.canonical().map_err(|e| e.to_string())?;
        let packed: Vec<u8> = (0..c.size() as usize).map(|i| pattern(i, seed)).collect();
        self.with_bytes_mut(|b| ucp::dt::unpack(c, &packed, b, 0))
            .map(drop)
            .map_err(|s| format!("cannot lay out the test pattern: {s}"))
    }

    /// Whether the packed bytes of `layout` are the pattern for `seed`; the packed offset
    /// of the first that is not, otherwise. Only while no operation on the region is in
    /// flight.
    pub fn check_layout(&self, layout: &ucp::dt::Layout, seed: u64) -> Result<(), usize> {
        let c = layout.canonical().map_err(|_| 0usize)?;
        let mut packed = vec![0u8; c.size() as usize];
        self.with_bytes_mut(|b| ucp::dt::pack(c, b, 0, &mut packed))
            .map_err(|_| 0usize)?;
        match packed
            .iter()
            .enumerate()
            .position(|(i, b)| *b != pattern(i, seed))
        {
            Some(at) => Err(at),
            None => Ok(()),
        }
    }

    /// Reads the 8 bytes at `off` (native endian) with volatile loads: a peer's transport
    /// may write them at any time (`put_lat`'s counter).
    pub fn read_u64_volatile(&self, off: usize) -> u64 {
        assert!(off + 8 <= self.len, "read_u64_volatile outside the region");
        let mut b = [0u8; 8];
        if !self.host() {
            self.device_copy(off, b.as_mut_ptr(), 8, false);
            return u64::from_ne_bytes(b);
        }
        for (i, x) in b.iter_mut().enumerate() {
            // SAFETY: off + i < len, inside the live allocation; a raw volatile read, no
            // reference made.
            *x = unsafe { self.ptr.as_ptr().add(off + i).read_volatile() };
        }
        u64::from_ne_bytes(b)
    }

    /// Registers the region with `iface`'s memory domain, for a peer's puts and gets.
    pub fn register(&self, iface: &dyn Iface) -> UcsResult<MemH> {
        // SAFETY: the region is never freed, so it stays mapped until any deregistration
        // and for the rest of the process; peers may read and write it through the key,
        // which the tests expect (their own accesses are raw, never references).
        unsafe { iface.md().mem_reg(self.ptr.as_ptr(), self.len) }
    }

    fn iov(&self) -> [Iov; 1] {
        [Iov {
            buffer: self.ptr.as_ptr(),
            length: self.len,
        }]
    }

    /// Writes the whole region to `remote_addr..` of the peer's registration `rkey`.
    pub fn put_zcopy(
        &self,
        iface: &mut dyn Iface,
        ep: EpId,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: the region is never freed, so it stays valid until completion; the
        // tests change its bytes only after seeing the operation complete (the module's
        // contract).
        unsafe { iface.put_zcopy(ep, &self.iov(), remote_addr, rkey, comp) }
    }

    /// Reads `remote_addr..` of the peer's registration `rkey` into the whole region.
    pub fn get_zcopy(
        &self,
        iface: &mut dyn Iface,
        ep: EpId,
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: the region is never freed, so it stays valid until completion; nothing
        // in this process reads or writes it while gets are in flight (several gets in
        // flight into it overlap only each other, written by the transport alone, as the
        // module documents for receives).
        unsafe { iface.get_zcopy(ep, &self.iov(), remote_addr, rkey, comp) }
    }

    /// Writes the test pattern for `seed` over the whole region. Only while no operation
    /// on the region is in flight.
    pub fn fill(&self, seed: u64) {
        if !self.host() {
            let mut v: Vec<u8> = (0..self.len).map(|i| pattern(i, seed)).collect();
            self.device_copy(0, v.as_mut_ptr(), self.len, true);
            return;
        }
        for i in 0..self.len {
            // SAFETY: i < len, inside the live allocation; a raw write, no reference made.
            unsafe { self.ptr.as_ptr().add(i).write(pattern(i, seed)) }
        }
    }

    /// Writes `v` (native endian) at `off`, which must leave room for 8 bytes. Only while no
    /// operation on the region is in flight.
    pub fn set_u64(&self, off: usize, v: u64) {
        assert!(off + 8 <= self.len, "set_u64 outside the region");
        if !self.host() {
            let mut b = v.to_ne_bytes();
            self.device_copy(off, b.as_mut_ptr(), 8, true);
            return;
        }
        // SAFETY: the 8 bytes at `off` lie inside the live allocation (checked); an
        // unaligned raw write, no reference made.
        unsafe { self.ptr.as_ptr().add(off).cast::<u64>().write_unaligned(v) }
    }

    /// Sets every byte to `b`. Only while no operation on the region is in flight.
    pub fn clear(&self, b: u8) {
        if !self.host() {
            let mut v = vec![b; self.len];
            self.device_copy(0, v.as_mut_ptr(), self.len, true);
            return;
        }
        // SAFETY: `len` bytes from `ptr` are the live allocation; a raw write.
        unsafe { self.ptr.as_ptr().write_bytes(b, self.len) }
    }

    /// Whether the first `n` bytes hold the pattern for `seed`; the offset of the first
    /// byte that does not, otherwise. Only while no operation on the region is in flight.
    pub fn check(&self, n: usize, seed: u64) -> Result<(), usize> {
        if !self.host() {
            let m = n.min(self.len);
            let mut v = vec![0u8; m];
            self.device_copy(0, v.as_mut_ptr(), m, false);
            if let Some(i) = (0..m).find(|&i| v[i] != pattern(i, seed)) {
                return Err(i);
            }
            return if n > self.len { Err(self.len) } else { Ok(()) };
        }
        for i in 0..n.min(self.len) {
            // SAFETY: i < len, inside the live allocation; a raw read, no reference made.
            let b = unsafe { self.ptr.as_ptr().add(i).read() };
            if b != pattern(i, seed) {
                return Err(i);
            }
        }
        if n > self.len {
            return Err(self.len);
        }
        Ok(())
    }
}

/// Byte `i` of the test message for `seed`: differs between neighbouring offsets, across
/// 256-byte periods and between seeds, so misplaced, stale or mixed-up data shows.
pub fn pattern(i: usize, seed: u64) -> u8 {
    let x = (i as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
    (x >> 56) as u8 ^ (x >> 24) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_and_detect_changes() {
        let r = Region::new(1000).unwrap();
        assert!(r.check(1000, 1).is_err(), "zeroed, not the pattern");
        r.fill(7);
        assert_eq!(r.check(1000, 7), Ok(()));
        assert!(r.check(1000, 8).is_err());
        assert_eq!(r.check(1001, 7), Err(1000));
        r.clear(0);
        assert!(r.check(1000, 7).is_err());
    }

    #[test]
    fn pattern_differs_by_offset_and_seed() {
        let a: Vec<u8> = (0..4096).map(|i| pattern(i, 1)).collect();
        let b: Vec<u8> = (0..4096).map(|i| pattern(i, 2)).collect();
        assert_ne!(a, b);
        assert_ne!(a[..256], a[256..512]);
    }

    #[test]
    fn iov_data_splits_back_to_back() {
        let r = Region::new(30).unwrap();
        match r.data(Some(&[10, 0, 20])) {
            Data::Iov(v) => {
                assert_eq!(v.iter().map(Buf::len).collect::<Vec<_>>(), [10, 0, 20]);
                assert_eq!(v[2].addr() - v[0].addr(), 10);
            }
            d => panic!("{d:?}"),
        }
        assert!(matches!(r.data(None), Data::Contig(b) if b.len() == 30));
        assert!(matches!(Region::new(0).unwrap().data(None), Data::Contig(b) if b.is_empty()));
    }
}
