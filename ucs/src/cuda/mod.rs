//! The CUDA driver API, loaded at run time (feature `cuda`, through `cudarc` with dynamic
//! loading: building needs no CUDA toolkit, running needs `libcuda.so` only where GPUs are
//! used). [`driver()`] loads it once; without a driver library, or when `cuInit` fails, or
//! with no device, it is `None` and [`absent_reason`] says why.
//!
//! Everything here works on the devices' primary contexts (the runtime API's too), made
//! current only for the call and restored afterwards ([`Driver::bind`]), so an application
//! that uses CUDA keeps the context it had.
//!
//! The floors of `cuda/`: `driver` (the driver, devices, streams, events) at the bottom;
//! `memops`, `vmm`, `gdr` and `nvrtc` above it; this module, which re-exports them and adds
//! the pools and memory-type detection built on them, on top.

use crate::memtype::{MemInfo, PendingCopy, PointerQuery};
use crate::{Status, UcsResult};

mod driver;
pub mod gdr;
mod memops;
pub mod nvrtc;
pub mod vmm;
pub use driver::{absent_reason, driver, Bound, DevPtr, Device, Driver, Event, Stream};
pub use memops::{Function, Module, StreamRef};

/// Streams of every device, made on first use up to `per_device` each and taken in turn,
/// with a pool of events: operations in flight overlap on the copy engines, each marked by
/// an event of its own (`cuda_copy`, `cuda_ipc`).
#[derive(Debug)]
pub struct StreamSet {
    per_device: usize,
    streams: Vec<Vec<Stream>>,
    next: Vec<usize>,
    events: Vec<Vec<Event>>,
}

impl StreamSet {
    pub fn new(driver: &Driver, per_device: usize) -> StreamSet {
        let n = driver.devices().len();
        StreamSet {
            per_device: per_device.max(1),
            streams: (0..n).map(|_| Vec::new()).collect(),
            next: vec![0; n],
            events: (0..n).map(|_| Vec::new()).collect(),
        }
    }

    /// The next stream of device `dev` (by index, for [`stream`](Self::stream)) and an
    /// event of that device to record after the operation.
    pub fn take(&mut self, dev: usize) -> UcsResult<(usize, Event)> {
        let d = driver().ok_or(Status::Unsupported)?;
        let streams = self.streams.get_mut(dev).ok_or(Status::InvalidParam)?;
        if streams.len() < self.per_device {
            streams.push(d.stream(dev as i32)?);
        }
        let si = self.next[dev] % streams.len();
        self.next[dev] = self.next[dev].wrapping_add(1);
        let ev = match self.events[dev].pop() {
            Some(e) => e,
            None => Event::new(dev as i32)?,
        };
        Ok((si, ev))
    }

    /// Stream `si` of device `dev`, as [`take`](Self::take) named it.
    pub fn stream(&self, dev: usize, si: usize) -> &Stream {
        &self.streams[dev][si]
    }

    /// An event whose operation is done, kept for reuse.
    pub fn give_back(&mut self, dev: usize, ev: Event) {
        self.events[dev].push(ev);
    }

    /// Waits until every stream is idle.
    pub fn synchronize(&self) -> UcsResult<()> {
        for s in self.streams.iter().flatten() {
            s.synchronize()?;
        }
        Ok(())
    }
}

/// Smallest pinned buffer the pool hands out; sizes are powers of two from here.
const PINNED_MIN: usize = 64 << 10;
/// Bytes of free pinned buffers the pool keeps; more are given back to the driver.
pub const PINNED_KEEP: usize = 256 << 20;

/// Pinned host memory (page-locked, mapped for every device) from the process's pool:
/// copies between it and device memory run at the bus's speed, and the pool saves the
/// milliseconds a `cuMemHostAlloc` of a large buffer costs. Back to the pool when dropped.
#[derive(Debug)]
pub struct PinnedBuf {
    ptr: *mut u8,
    cap: usize,
    len: usize,
}

// SAFETY: owned memory, like a Vec<u8>.
unsafe impl Send for PinnedBuf {}

/// Free pinned buffers by size class (index = log2(cap / PINNED_MIN)), and their bytes.
static PINNED: std::sync::Mutex<(Vec<Vec<usize>>, usize)> = std::sync::Mutex::new((Vec::new(), 0));

impl PinnedBuf {
    /// `len` bytes of pinned memory (contents unspecified), from the pool when it has a
    /// buffer of the size class, else newly allocated.
    pub fn take(len: usize) -> UcsResult<PinnedBuf> {
        let d = driver().ok_or(Status::Unsupported)?;
        let cap = len
            .max(PINNED_MIN)
            .checked_next_power_of_two()
            .ok_or(Status::NoMemory)?;
        let class = (cap / PINNED_MIN).trailing_zeros() as usize;
        {
            let mut g = PINNED.lock().unwrap_or_else(|e| e.into_inner());
            let cached = g.0.get_mut(class).and_then(Vec::pop);
            if let Some(p) = cached {
                g.1 -= cap;
                return Ok(PinnedBuf {
                    ptr: p as *mut u8,
                    cap,
                    len,
                });
            }
        }
        Ok(PinnedBuf {
            ptr: d.host_alloc(cap)?,
            cap,
            len,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `cap >= len` bytes owned by this buffer (pinned memory is host memory).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as above.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for PinnedBuf {
    fn drop(&mut self) {
        let class = (self.cap / PINNED_MIN).trailing_zeros() as usize;
        let mut g = PINNED.lock().unwrap_or_else(|e| e.into_inner());
        if g.1 + self.cap <= PINNED_KEEP {
            if g.0.len() <= class {
                g.0.resize_with(class + 1, Vec::new);
            }
            g.0[class].push(self.ptr as usize);
            g.1 += self.cap;
            return;
        }
        drop(g);
        if let Some(d) = driver() {
            // SAFETY: from `host_alloc`, not used after this.
            unsafe { d.host_free(self.ptr) };
        }
    }
}

/// The driver as the memory-type detector's source.
#[derive(Debug)]
pub struct DriverQuery(pub &'static Driver);

impl PointerQuery for DriverQuery {
    fn query(&self, ptr: u64) -> Option<MemInfo> {
        self.0.pointer(ptr)
    }
    fn copy(&self, dst: u64, src: u64, n: usize) -> UcsResult<()> {
        // A small copy from host memory into device memory: CPU stores through gdrcopy's
        // mapping where gdrdrv exists, instead of a driver copy waited for.
        if n <= gdr::GDR_COPY_MAX && gdr::usable() && self.0.pointer(src).is_none() {
            if let Some(info) = self.0.pointer(dst) {
                // SAFETY: `memtype::copy`'s contract: src is readable for n bytes; info is
                // the driver's answer for dst.
                if let Some(r) = unsafe { gdr::copy_to_device(&info, dst, src as *const u8, n) } {
                    return r;
                }
            }
        }
        // A small copy from device memory into host memory: CPU loads through the mapping
        // (the sender's side of a small device message sent eager, `gdr::eager_max`).
        if n <= gdr::GDR_READ_MAX && gdr::usable() && self.0.pointer(dst).is_none() {
            if let Some(info) = self.0.pointer(src) {
                // SAFETY: `memtype::copy`'s contract: dst is writable for n bytes; info is
                // the driver's answer for src.
                if let Some(r) = unsafe { gdr::copy_from_device(&info, src, dst as *mut u8, n) } {
                    return r;
                }
            }
        }
        self.0.copy(dst, src, n)
    }

    fn copy_async(&self, dst: u64, src: u64, n: usize) -> UcsResult<Option<Box<dyn PendingCopy>>> {
        let dev = self
            .0
            .device_of(dst)
            .or_else(|| self.0.device_of(src))
            .unwrap_or(0) as usize;
        let mut g = ASYNC.lock().unwrap_or_else(|e| e.into_inner());
        let set = g.get_or_insert_with(|| StreamSet::new(self.0, ASYNC_STREAMS));
        let (si, ev) = set.take(dev)?;
        // SAFETY: `memtype::copy_async`'s contract keeps both ranges valid until the
        // returned copy is done or dropped, and dropping it waits for the event.
        unsafe { set.stream(dev, si).copy_recorded(dst, src, n, &ev)? };
        Ok(Some(Box::new(AsyncCopy { dev, ev: Some(ev) })))
    }
}

/// Streams per device of the detector's asynchronous copies (`memtype::copy_async`).
const ASYNC_STREAMS: usize = 2;

/// The streams of `memtype::copy_async`, made on its first use, and their events.
static ASYNC: std::sync::Mutex<Option<StreamSet>> = std::sync::Mutex::new(None);

/// A copy of `memtype::copy_async` in flight: its event; dropping waits for it.
#[derive(Debug)]
struct AsyncCopy {
    dev: usize,
    ev: Option<Event>,
}

impl PendingCopy for AsyncCopy {
    fn done(&mut self) -> UcsResult<bool> {
        match &self.ev {
            Some(e) => e.done(),
            None => Ok(true),
        }
    }
}

impl Drop for AsyncCopy {
    fn drop(&mut self) {
        if let Some(ev) = self.ev.take() {
            let _ = ev.synchronize();
            let mut g = ASYNC.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(set) = g.as_mut() {
                set.give_back(self.dev, ev);
            }
        }
    }
}

/// Loads the driver and, when there is one, starts memory-type detection with it
/// (`cache`: `UCX_MEMTYPE_CACHE`). Returns whether GPU memory can be used.
pub fn enable_detection(cache: bool) -> bool {
    match driver() {
        Some(d) => {
            if !crate::memtype::active() {
                crate::memtype::enable(Box::new(DriverQuery(d)), cache);
            }
            true
        }
        None => false,
    }
}

/// Device or managed memory owned by Rucx, freed when dropped; known to the memory-type
/// detector while it lives.
#[derive(Debug)]
pub struct DeviceAlloc {
    ptr: DevPtr,
    len: usize,
}

impl DeviceAlloc {
    /// Allocates `len` bytes (at least one) on device `dev`: managed memory when `managed`.
    pub fn new(dev: i32, len: usize, managed: bool) -> UcsResult<DeviceAlloc> {
        let d = driver().ok_or(Status::Unsupported)?;
        let ptr = if managed {
            d.alloc_managed(dev, len)?
        } else {
            d.alloc(dev, len)?
        };
        if let Some(info) = d.pointer(ptr) {
            crate::memtype::remember(info);
        }
        Ok(DeviceAlloc { ptr, len })
    }

    /// The allocation's address.
    pub fn ptr(&self) -> DevPtr {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for DeviceAlloc {
    fn drop(&mut self) {
        crate::memtype::forget(self.ptr, self.len.max(1) as u64);
        if let Some(d) = driver() {
            // SAFETY: allocated by `new` with this driver, freed once.
            let _ = unsafe { d.free(self.ptr) };
        }
    }
}
