//! The driver itself: loading it ([`driver()`], [`absent_reason`]), its devices and their
//! primary contexts ([`Driver::bind`]), memory, and the streams and events the rest of
//! [`crate::cuda`] queues work on. The floor of `cuda/`: it names none of its siblings.

use std::ffi::{c_void, CStr};
use std::sync::OnceLock;

use cudarc::driver::sys as cu;

use crate::memtype::{MemInfo, MemoryType};
use crate::{Status, UcsResult};

/// A device pointer (the driver's `CUdeviceptr`; unified addressing: also a host address
/// for pinned and managed memory).
pub type DevPtr = u64;

/// A CUDA device.
#[derive(Debug)]
pub struct Device {
    pub ordinal: i32,
    pub name: String,
    pub total_mem: usize,
    /// Ordinals of the devices this one can access directly (peer access).
    pub peers: Vec<i32>,
    /// PCI bus id (`0000:19:00.0`).
    pub pci_bus_id: String,
    /// Compute capability (major, minor): what generated kernels are compiled for.
    pub cc: (i32, i32),
    ctx: Ctx,
}

/// A retained primary context.
#[derive(Debug, Clone, Copy)]
struct Ctx(cu::CUcontext);
// SAFETY: a CUDA context handle may be used from any thread (the driver serializes access);
// we never dereference it.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

/// The loaded driver and its devices.
#[derive(Debug)]
pub struct Driver {
    devices: Vec<Device>,
    /// Per device, the stream [`Driver::copy`] uses: the driver's synchronous copies are
    /// not all synchronous (device to device, and from pageable host memory, return before
    /// the data has landed), so copies go on this stream and are waited for.
    copy_streams: Vec<OnceLock<Option<Stream>>>,
}

static DRIVER: OnceLock<Result<Driver, String>> = OnceLock::new();

/// The driver, loaded on first use; `None` when there is none (see [`absent_reason`]).
pub fn driver() -> Option<&'static Driver> {
    DRIVER.get_or_init(load).as_ref().ok()
}

/// Why [`driver`] is `None`.
pub fn absent_reason() -> Option<&'static str> {
    DRIVER.get_or_init(load).as_ref().err().map(String::as_str)
}

pub(super) fn check(r: cu::CUresult) -> UcsResult<()> {
    if r == cu::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        log::debug!("cuda: {r:?}");
        Err(match r {
            cu::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Status::NoMemory,
            cu::CUresult::CUDA_ERROR_INVALID_VALUE => Status::InvalidParam,
            cu::CUresult::CUDA_ERROR_NOT_READY => Status::InProgress,
            _ => Status::IoError,
        })
    }
}

/// [`check`] for a query (`cuEventQuery`, `cuStreamQuery`): `Ok(false)` while the work
/// is not done yet.
#[inline]
pub(super) fn check_ready(r: cu::CUresult) -> UcsResult<bool> {
    match check(r) {
        Ok(()) => Ok(true),
        Err(Status::InProgress) => Ok(false),
        Err(e) => Err(e),
    }
}

fn load() -> Result<Driver, String> {
    // SAFETY: probing for the library opens nothing else; `culib()` below panics without
    // it, so it is reached only after this check.
    if !unsafe { cu::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so) found".into());
    }
    // SAFETY: the library is present; cuInit may be called any number of times.
    let r = unsafe { cu::cuInit(0) };
    if r != cu::CUresult::CUDA_SUCCESS {
        return Err(format!("cuInit failed: {r:?}"));
    }
    let mut n = 0;
    // SAFETY: n is a valid out pointer.
    check(unsafe { cu::cuDeviceGetCount(&mut n) }).map_err(|_| "cuDeviceGetCount failed")?;
    if n == 0 {
        return Err("the CUDA driver sees no device".into());
    }
    let mut devices = Vec::new();
    for i in 0..n {
        let mut d = 0;
        // SAFETY: i < device count; d is an out pointer.
        check(unsafe { cu::cuDeviceGet(&mut d, i) }).map_err(|_| "cuDeviceGet failed")?;
        let mut name = [0 as std::ffi::c_char; 256];
        // SAFETY: the buffer holds 256 bytes; the driver NUL-terminates.
        let _ = unsafe { cu::cuDeviceGetName(name.as_mut_ptr(), 256, d) };
        // SAFETY: NUL-terminated by the driver (zeroed before).
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut mem = 0usize;
        // SAFETY: out pointer.
        let _ = unsafe { cu::cuDeviceTotalMem_v2(&mut mem, d) };
        let mut bus = [0 as std::ffi::c_char; 64];
        // SAFETY: 64-byte buffer, NUL-terminated by the driver.
        let _ = unsafe { cu::cuDeviceGetPCIBusId(bus.as_mut_ptr(), 64, d) };
        // SAFETY: as above.
        let pci_bus_id = unsafe { CStr::from_ptr(bus.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let mut ctx = std::ptr::null_mut();
        // SAFETY: out pointer; the primary context is retained for the process's life.
        check(unsafe { cu::cuDevicePrimaryCtxRetain(&mut ctx, d) })
            .map_err(|_| format!("cannot retain the primary context of device {i}"))?;
        let mut peers = Vec::new();
        for j in 0..n {
            if j == i {
                continue;
            }
            let (mut dj, mut can) = (0, 0);
            // SAFETY: out pointers; j < count.
            unsafe {
                let _ = cu::cuDeviceGet(&mut dj, j);
                let _ = cu::cuDeviceCanAccessPeer(&mut can, d, dj);
            }
            if can != 0 {
                peers.push(j);
            }
        }
        let (mut major, mut minor) = (0, 0);
        // SAFETY: out pointers; a valid device.
        unsafe {
            use cu::CUdevice_attribute as A;
            let _ = cu::cuDeviceGetAttribute(
                &mut major,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                d,
            );
            let _ = cu::cuDeviceGetAttribute(
                &mut minor,
                A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                d,
            );
        }
        devices.push(Device {
            ordinal: i,
            name,
            total_mem: mem,
            peers,
            pci_bus_id,
            cc: (major, minor),
            ctx: Ctx(ctx),
        });
    }
    let copy_streams = devices.iter().map(|_| OnceLock::new()).collect();
    Ok(Driver {
        devices,
        copy_streams,
    })
}

/// The context made current by [`Driver::bind`], restored when dropped.
#[derive(Debug)]
pub struct Bound {
    pushed: bool,
}

impl Drop for Bound {
    fn drop(&mut self) {
        if self.pushed {
            let mut old = std::ptr::null_mut();
            // SAFETY: pops the context `bind` pushed on this thread.
            let _ = unsafe { cu::cuCtxPopCurrent_v2(&mut old) };
        }
    }
}

/// Pointer attributes asked for by [`Driver::pointer`].
const ATTRS: [cu::CUpointer_attribute; 6] = [
    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_RANGE_SIZE,
    cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_BUFFER_ID,
];

impl Driver {
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Makes `dev`'s primary context current on this thread: until the guard drops when
    /// the thread had another one current (the application's), for good when it had none
    /// (as the runtime API does on first use), and nothing to do when it is current
    /// already.
    pub fn bind(&self, dev: i32) -> UcsResult<Bound> {
        let d = self
            .devices
            .get(usize::try_from(dev).map_err(|_| Status::InvalidParam)?)
            .ok_or(Status::InvalidParam)?;
        let mut cur = std::ptr::null_mut();
        // SAFETY: out pointer.
        let _ = unsafe { cu::cuCtxGetCurrent(&mut cur) };
        if cur == d.ctx.0 {
            return Ok(Bound { pushed: false });
        }
        if cur.is_null() {
            // SAFETY: a retained primary context.
            check(unsafe { cu::cuCtxSetCurrent(d.ctx.0) })?;
            return Ok(Bound { pushed: false });
        }
        // SAFETY: a retained primary context; popped by the guard.
        check(unsafe { cu::cuCtxPushCurrent_v2(d.ctx.0) })?;
        Ok(Bound { pushed: true })
    }

    /// What the driver knows of the allocation holding `ptr`; `None` for memory it does not
    /// manage (pageable host memory) or that it reports as host memory (pinned).
    pub fn pointer(&self, ptr: DevPtr) -> Option<MemInfo> {
        let (mut mt, mut managed, mut ord) = (0u32, 0u32, -2i32);
        let (mut start, mut size, mut id) = (0u64, 0usize, 0u64);
        let mut vals: [*mut c_void; 6] = [
            (&mut mt as *mut u32).cast(),
            (&mut managed as *mut u32).cast(),
            (&mut ord as *mut i32).cast(),
            (&mut start as *mut u64).cast(),
            (&mut size as *mut usize).cast(),
            (&mut id as *mut u64).cast(),
        ];
        let mut attrs = ATTRS;
        // SAFETY: six attributes, six out pointers of the sizes the driver writes
        // (unsigned int, unsigned int, int, CUdeviceptr, size_t, unsigned long long).
        let r =
            unsafe { cu::cuPointerGetAttributes(6, attrs.as_mut_ptr(), vals.as_mut_ptr(), ptr) };
        if r != cu::CUresult::CUDA_SUCCESS {
            return None;
        }
        let mem_type = if managed != 0 {
            MemoryType::CudaManaged
        } else if mt == cu::CUmemorytype::CU_MEMORYTYPE_DEVICE as u32 {
            MemoryType::Cuda
        } else {
            return None;
        };
        Some(MemInfo {
            mem_type,
            device: ord,
            base: start,
            len: size as u64,
            buffer_id: id,
        })
    }

    /// Copies `n` bytes between any two addresses of the unified address space (the driver
    /// infers each side's memory type), and returns once they have landed.
    pub fn copy(&self, dst: DevPtr, src: DevPtr, n: usize) -> UcsResult<()> {
        let dev = self
            .device_of(dst)
            .or_else(|| self.device_of(src))
            .unwrap_or(0);
        let s = self
            .copy_streams
            .get(dev as usize)
            .ok_or(Status::InvalidParam)?
            .get_or_init(|| self.stream(dev).ok())
            .as_ref()
            .ok_or(Status::NoResource)?;
        // SAFETY: the caller's contract (see `memtype::copy`): both ranges are valid for n
        // bytes in their memory types until this returns, which it does after the copy.
        unsafe { s.copy_async(dst, src, n)? };
        s.synchronize()
    }

    /// [`copy`](Self::copy) on a stream of `dev`, for a caller that knows the device (a
    /// peer mapping opened on it): no pointer query, no event, the copy and its wait.
    ///
    /// # Safety
    /// Both ranges are valid for `n` bytes until this returns, and reachable from `dev`.
    pub unsafe fn copy_on(&self, dev: i32, dst: DevPtr, src: DevPtr, n: usize) -> UcsResult<()> {
        let s = self
            .copy_streams
            .get(usize::try_from(dev).map_err(|_| Status::InvalidParam)?)
            .ok_or(Status::InvalidParam)?
            .get_or_init(|| self.stream(dev).ok())
            .as_ref()
            .ok_or(Status::NoResource)?;
        let _b = self.bind(dev)?;
        // SAFETY: per the contract; a stream of dev's context, which is current.
        check(unsafe { cu::cuMemcpyAsync(dst, src, n, s.stream) })?;
        s.synchronize()
    }

    /// Lets kernels of `dev` reach memory allocated on `peer` in this process (a no-op
    /// when already enabled).
    pub fn enable_peer(&self, dev: i32, peer: i32) -> UcsResult<()> {
        let pc = self
            .devices
            .get(peer as usize)
            .ok_or(Status::InvalidParam)?
            .ctx
            .0;
        let _b = self.bind(dev)?;
        // SAFETY: a retained primary context of another device; flags must be 0.
        match unsafe { cu::cuCtxEnablePeerAccess(pc, 0) } {
            cu::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => Ok(()),
            r => check(r),
        }
    }

    pub(super) fn device_of(&self, p: DevPtr) -> Option<i32> {
        self.pointer(p).map(|i| i.device).filter(|d| *d >= 0)
    }

    /// Allocates `n` bytes of device memory on `dev`.
    pub fn alloc(&self, dev: i32, n: usize) -> UcsResult<DevPtr> {
        let _b = self.bind(dev)?;
        let mut p = 0;
        // SAFETY: out pointer; a current context.
        check(unsafe { cu::cuMemAlloc_v2(&mut p, n.max(1)) })?;
        Ok(p)
    }

    /// Allocates `n` bytes of managed memory, preferring `dev`.
    pub fn alloc_managed(&self, dev: i32, n: usize) -> UcsResult<DevPtr> {
        let _b = self.bind(dev)?;
        let mut p = 0;
        // SAFETY: out pointer; a current context.
        check(unsafe {
            cu::cuMemAllocManaged(
                &mut p,
                n.max(1),
                cu::CUmemAttach_flags::CU_MEM_ATTACH_GLOBAL as u32,
            )
        })?;
        Ok(p)
    }

    /// Frees memory from [`alloc`](Self::alloc) or [`alloc_managed`](Self::alloc_managed).
    ///
    /// # Safety
    /// `p` came from those calls and is not used afterwards.
    pub unsafe fn free(&self, p: DevPtr) -> UcsResult<()> {
        let dev = self.device_of(p).unwrap_or(0);
        let _b = self.bind(dev)?;
        // SAFETY: per the contract.
        check(unsafe { cu::cuMemFree_v2(p) })
    }

    /// Allocates `n` bytes of pinned host memory, mapped for every device.
    pub fn host_alloc(&self, n: usize) -> UcsResult<*mut u8> {
        let _b = self.bind(0)?;
        let mut p = std::ptr::null_mut();
        // SAFETY: out pointer; a current context.
        check(unsafe {
            cu::cuMemHostAlloc(
                &mut p,
                n.max(1),
                cu::CU_MEMHOSTALLOC_PORTABLE | cu::CU_MEMHOSTALLOC_DEVICEMAP,
            )
        })?;
        Ok(p.cast())
    }

    /// Page-locks `n` bytes of the application's host memory at `p` and maps them for every
    /// device (`cuMemHostRegister`, portable): the driver's copies between them and device
    /// memory then run at the bus's speed instead of through its own staging. `Ok(false)`:
    /// the range (or part of it) was registered already, by someone else, so nothing was
    /// done and there is nothing to undo.
    ///
    /// # Safety
    /// The range stays mapped until [`host_unregister`](Self::host_unregister).
    pub unsafe fn host_register(&self, p: *mut u8, n: usize) -> UcsResult<bool> {
        let _b = self.bind(0)?;
        // SAFETY: per the contract; a current context.
        let r = unsafe { cu::cuMemHostRegister_v2(p.cast(), n, cu::CU_MEMHOSTREGISTER_PORTABLE) };
        match r {
            cu::CUresult::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED => Ok(false),
            r => check(r).map(|()| true),
        }
    }

    /// Whether the driver holds the host memory at `p` page-locked (allocated pinned, or
    /// registered).
    pub fn is_pinned_host(&self, p: *const u8) -> bool {
        let mut mt = 0u32;
        // SAFETY: one attribute whose value is an unsigned int, written to `mt`.
        let r = unsafe {
            cu::cuPointerGetAttribute(
                (&mut mt as *mut u32).cast(),
                cu::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                p as DevPtr,
            )
        };
        r == cu::CUresult::CUDA_SUCCESS && mt == cu::CUmemorytype::CU_MEMORYTYPE_HOST as u32
    }

    /// Undoes [`host_register`](Self::host_register) of the range starting at `p`.
    ///
    /// # Safety
    /// `p` is the start of a range this process registered, not unregistered since.
    pub unsafe fn host_unregister(&self, p: *mut u8) -> UcsResult<()> {
        let _b = self.bind(0)?;
        // SAFETY: per the contract.
        check(unsafe { cu::cuMemHostUnregister(p.cast()) })
    }

    /// The device address of pinned host memory from [`host_alloc`](Self::host_alloc)
    /// (with unified addressing, the host address itself), for device code and stream
    /// memory operations.
    pub fn host_device_ptr(&self, p: *mut u8) -> UcsResult<DevPtr> {
        let _b = self.bind(0)?;
        let mut d = 0;
        // SAFETY: out pointer; `p` is mapped pinned memory (the driver checks).
        check(unsafe { cu::cuMemHostGetDevicePointer_v2(&mut d, p.cast(), 0) })?;
        Ok(d)
    }

    /// # Safety
    /// `p` came from [`host_alloc`](Self::host_alloc) and is not used afterwards.
    pub unsafe fn host_free(&self, p: *mut u8) {
        // SAFETY: per the contract.
        let _ = unsafe { cu::cuMemFreeHost(p.cast()) };
    }

    /// Sets `n` bytes at `p` (any memory type) to `byte`.
    pub fn memset(&self, p: DevPtr, byte: u8, n: usize) -> UcsResult<()> {
        let dev = self.device_of(p).unwrap_or(0);
        let _b = self.bind(dev)?;
        // SAFETY: the caller owns the n bytes at p.
        check(unsafe { cu::cuMemsetD8_v2(p, byte, n) })?;
        // SAFETY: a current context.
        check(unsafe { cu::cuCtxSynchronize() })
    }

    /// The legacy IPC handle of the allocation holding `p` (`cuIpcGetMemHandle`).
    pub fn ipc_handle(&self, p: DevPtr) -> UcsResult<[u8; 64]> {
        let dev = self.device_of(p).ok_or(Status::InvalidParam)?;
        let _b = self.bind(dev)?;
        let mut h = cu::CUipcMemHandle { reserved: [0; 64] };
        // SAFETY: out pointer; p is device memory of the current context's device.
        check(unsafe { cu::cuIpcGetMemHandle(&mut h, p) })?;
        Ok(h.reserved.map(|c| c as u8))
    }

    /// Maps a peer process's allocation into this process, on device `dev`.
    pub fn ipc_open(&self, dev: i32, handle: &[u8; 64]) -> UcsResult<DevPtr> {
        let _b = self.bind(dev)?;
        let h = cu::CUipcMemHandle {
            reserved: handle.map(|b| b as std::ffi::c_char),
        };
        let mut p = 0;
        // SAFETY: out pointer; a handle a peer exported (the driver validates it).
        check(unsafe {
            cu::cuIpcOpenMemHandle_v2(
                &mut p,
                h,
                cu::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32,
            )
        })?;
        Ok(p)
    }

    /// # Safety
    /// `p` came from [`ipc_open`](Self::ipc_open) on `dev` and is not used afterwards.
    pub unsafe fn ipc_close(&self, dev: i32, p: DevPtr) {
        if let Ok(_b) = self.bind(dev) {
            // SAFETY: per the contract.
            let _ = unsafe { cu::cuIpcCloseMemHandle(p) };
        }
    }

    /// A DMA-BUF file descriptor for device memory `[p, p + n)`, the route by which an RDMA
    /// device registers GPU memory (`ibv_reg_dmabuf_mr`): the exported range is `[p, p + n)`
    /// widened to whole host pages within the allocation, and the second value is `p`'s
    /// offset in it. Fails (`Unsupported`) where the driver cannot export DMA-BUFs (the
    /// proprietary kernel module before 515, or no kernel support).
    pub fn dmabuf(&self, p: DevPtr, n: usize) -> UcsResult<(std::os::fd::OwnedFd, u64)> {
        use std::os::fd::FromRawFd;
        let info = self.pointer(p).ok_or(Status::InvalidParam)?;
        let end = p.checked_add(n as u64).ok_or(Status::InvalidParam)?;
        if n == 0 || info.device < 0 || end > info.base + info.len {
            return Err(Status::InvalidParam);
        }
        let page = crate::sys::page_size() as u64;
        let start = (p & !(page - 1)).max(info.base);
        let stop = end
            .div_ceil(page)
            .saturating_mul(page)
            .min(info.base + info.len);
        let _b = self.bind(info.device)?;
        let mut fd: std::ffi::c_int = -1;
        // SAFETY: an out pointer for an int (the DMA-BUF handle type's handle); the range
        // lies in one allocation of the current context's device.
        let r = unsafe {
            cu::cuMemGetHandleForAddressRange(
                (&mut fd as *mut std::ffi::c_int).cast(),
                start,
                (stop - start) as usize,
                cu::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
                0,
            )
        };
        if r != cu::CUresult::CUDA_SUCCESS || fd < 0 {
            log::debug!("cuMemGetHandleForAddressRange: {r:?}");
            return Err(Status::Unsupported);
        }
        // SAFETY: a descriptor the driver just created for us, owned from here on.
        Ok((unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }, p - start))
    }

    /// A new non-blocking stream on `dev`.
    pub fn stream(&self, dev: i32) -> UcsResult<Stream> {
        let _b = self.bind(dev)?;
        let mut s = std::ptr::null_mut();
        // SAFETY: out pointer; a current context.
        check(unsafe {
            cu::cuStreamCreate(&mut s, cu::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
        })?;
        let mut e = std::ptr::null_mut();
        // SAFETY: out pointer.
        check(unsafe {
            cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        Ok(Stream {
            dev,
            stream: s,
            event: e,
        })
    }
}

/// A stream of one device with one event to mark how far it got.
#[derive(Debug)]
pub struct Stream {
    pub dev: i32,
    pub(super) stream: cu::CUstream,
    event: cu::CUevent,
}

// SAFETY: stream and event handles may be used from any thread; the driver serializes.
unsafe impl Send for Stream {}
// SAFETY: as above; shared use (the driver's copy streams) only queues copies and waits for
// the stream, and a wait that also covers another thread's copies is harmless. A stream
// whose event is polled (`done`) is owned by one interface, not shared.
unsafe impl Sync for Stream {}

impl Stream {
    /// Queues a copy of `n` bytes (any memory types) and marks the stream's event after it.
    ///
    /// # Safety
    /// Both ranges stay valid until [`done`](Self::done) returns true.
    pub unsafe fn copy_async(&self, dst: DevPtr, src: DevPtr, n: usize) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: per the contract; handles of this device.
        check(unsafe { cu::cuMemcpyAsync(dst, src, n, self.stream) })?;
        // SAFETY: as above.
        check(unsafe { cu::cuEventRecord(self.event, self.stream) })
    }

    /// Queues a copy of `n` bytes (any memory types) and records `ev` after it, leaving the
    /// stream's own event alone: several operations in flight on one stream, each with its
    /// event.
    ///
    /// # Safety
    /// Both ranges stay valid until `ev` reports done.
    pub unsafe fn copy_recorded(
        &self,
        dst: DevPtr,
        src: DevPtr,
        n: usize,
        ev: &Event,
    ) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: per the contract; handles of this device.
        check(unsafe { cu::cuMemcpyAsync(dst, src, n, self.stream) })?;
        // SAFETY: a live event of this device and a live stream.
        check(unsafe { cu::cuEventRecord(ev.0, self.stream) })
    }

    /// Whether everything queued before the last `copy_async` has finished.
    pub fn done(&self) -> UcsResult<bool> {
        // SAFETY: a live event.
        check_ready(unsafe { cu::cuEventQuery(self.event) })
    }

    /// Waits until the stream is idle.
    pub fn synchronize(&self) -> UcsResult<()> {
        // SAFETY: a live stream.
        check(unsafe { cu::cuStreamSynchronize(self.stream) })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: handles made in `Driver::stream`, destroyed once.
        unsafe {
            let _ = cu::cuStreamSynchronize(self.stream);
            let _ = cu::cuEventDestroy_v2(self.event);
            let _ = cu::cuStreamDestroy_v2(self.stream);
        }
    }
}

/// An event that marks how far a stream got (timing disabled).
#[derive(Debug)]
pub struct Event(cu::CUevent);

// SAFETY: an event handle may be used from any thread; the driver serializes.
unsafe impl Send for Event {}

impl Event {
    pub(crate) fn raw(&self) -> cu::CUevent {
        self.0
    }

    /// A new event of device `dev`.
    pub fn new(dev: i32) -> UcsResult<Event> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(dev)?;
        let mut e = std::ptr::null_mut();
        // SAFETY: out pointer; a current context.
        check(unsafe {
            cu::cuEventCreate(&mut e, cu::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32)
        })?;
        Ok(Event(e))
    }

    /// Whether the work queued before its last record has finished.
    pub fn done(&self) -> UcsResult<bool> {
        // SAFETY: a live event.
        check_ready(unsafe { cu::cuEventQuery(self.0) })
    }

    /// Waits for the work queued before its last record.
    pub fn synchronize(&self) -> UcsResult<()> {
        // SAFETY: a live event.
        check(unsafe { cu::cuEventSynchronize(self.0) })
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: made in `Event::new`, destroyed once.
        let _ = unsafe { cu::cuEventDestroy_v2(self.0) };
    }
}
