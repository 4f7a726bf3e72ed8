//! A stream that writes a counter the host watches, and waits for a counter the host
//! writes: the GPU half of stream-triggered communication.
//!
//! Two ways to do each, selectable because the paper this follows measured them apart
//! (`docs/queues.md`):
//! * stream memory operations, `cuStreamWriteValue32` / `cuStreamWaitValue32` (the wait is
//!   `CU_STREAM_WAIT_VALUE_GEQ`, a cyclic comparison: `(int32_t)(*addr - value) >= 0`, so
//!   counters may wrap);
//! * one-thread kernels doing the same (the "shader" variant): a system-scope fence and a
//!   store, and a spin on a system-scope load with the same cyclic comparison. They are
//!   hand-written PTX, loaded by the driver's JIT once per device, so no compiler is
//!   needed.

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::driver::sys as cu;

use super::driver::{check, check_ready, driver, DevPtr, Event, Stream};
use crate::{Status, UcsResult};

/// A CUDA stream the application owns (`CUstream` / `cudaStream_t`), used without owning
/// it.
#[derive(Debug, Clone, Copy)]
pub struct StreamRef {
    raw: cu::CUstream,
    dev: i32,
}

// SAFETY: a stream handle may be used from any thread; the driver serializes.
unsafe impl Send for StreamRef {}
// SAFETY: as above; a StreamRef only queues operations on the stream.
unsafe impl Sync for StreamRef {}

/// The trigger kernels. sm_80 and later (the driver JIT-compiles the PTX for the device).
const PTX: &str = r#"
.version 7.0
.target sm_80
.address_size 64

.visible .entry rucx_trigger_write(
    .param .u64 rucx_trigger_write_p,
    .param .u32 rucx_trigger_write_v
)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [rucx_trigger_write_p];
    ld.param.u32 %r1, [rucx_trigger_write_v];
    cvta.to.global.u64 %rd2, %rd1;
    fence.sc.sys;
    st.relaxed.sys.global.u32 [%rd2], %r1;
    ret;
}

.visible .entry rucx_trigger_wait(
    .param .u64 rucx_trigger_wait_p,
    .param .u32 rucx_trigger_wait_v
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [rucx_trigger_wait_p];
    ld.param.u32 %r1, [rucx_trigger_wait_v];
    cvta.to.global.u64 %rd2, %rd1;
$L_spin:
    ld.relaxed.sys.global.u32 %r2, [%rd2];
    sub.s32 %r3, %r2, %r1;
    setp.lt.s32 %p1, %r3, 0;
    @%p1 bra $L_spin;
    fence.sc.sys;
    ret;
}
"#;

/// The loaded trigger kernels of one device.
#[derive(Debug, Clone, Copy)]
struct Kernels {
    write: cu::CUfunction,
    wait: cu::CUfunction,
}

// SAFETY: function handles of a module loaded for the process's life; the driver
// serializes their use.
unsafe impl Send for Kernels {}
// SAFETY: as above.
unsafe impl Sync for Kernels {}

/// Per device, the kernels once loaded (`Err`: the device's JIT refused them).
static KERNELS: OnceLock<Vec<OnceLock<Result<Kernels, Status>>>> = OnceLock::new();

fn kernels(dev: i32) -> UcsResult<Kernels> {
    let d = driver().ok_or(Status::Unsupported)?;
    let all = KERNELS.get_or_init(|| d.devices().iter().map(|_| OnceLock::new()).collect());
    let slot = all
        .get(usize::try_from(dev).map_err(|_| Status::InvalidParam)?)
        .ok_or(Status::InvalidParam)?;
    *slot.get_or_init(|| {
        let _b = d.bind(dev)?;
        let src = std::ffi::CString::new(PTX).map_err(|_| Status::InvalidParam)?;
        let mut m = std::ptr::null_mut();
        // SAFETY: out pointer; a NUL-terminated PTX image; a current context. The module
        // stays loaded for the process's life.
        check(unsafe { cu::cuModuleLoadData(&mut m, src.as_ptr().cast()) }).inspect_err(|e| {
            log::warn!("cuda: the trigger kernels do not load on device {dev}: {e}")
        })?;
        let (mut write, mut wait) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: out pointers; names of entries of the module just loaded.
        unsafe {
            check(cu::cuModuleGetFunction(
                &mut write,
                m,
                c"rucx_trigger_write".as_ptr(),
            ))?;
            check(cu::cuModuleGetFunction(
                &mut wait,
                m,
                c"rucx_trigger_wait".as_ptr(),
            ))?;
        }
        Ok(Kernels { write, wait })
    })
}

impl StreamRef {
    /// Refers to `raw`, a stream of this process (0: the legacy default stream of the
    /// current context, or of device 0 when none is current).
    ///
    /// # Safety
    /// `raw` is 0 or a live `CUstream`, and stays live while the `StreamRef` is used.
    pub unsafe fn from_raw(raw: usize) -> UcsResult<StreamRef> {
        let d = driver().ok_or(Status::Unsupported)?;
        let raw = raw as cu::CUstream;
        let mut ctx = std::ptr::null_mut();
        if raw.is_null() {
            // SAFETY: out pointer.
            let _ = unsafe { cu::cuCtxGetCurrent(&mut ctx) };
            if ctx.is_null() {
                return Ok(StreamRef { raw, dev: 0 });
            }
        } else {
            // SAFETY: out pointer; a live stream per the contract.
            check(unsafe { cu::cuStreamGetCtx(raw, &mut ctx) })?;
        }
        // SAFETY: a context of this process, popped below.
        check(unsafe { cu::cuCtxPushCurrent_v2(ctx) })?;
        let mut cudev = 0;
        // SAFETY: out pointer; the context is current.
        let r = check(unsafe { cu::cuCtxGetDevice(&mut cudev) });
        let mut old = std::ptr::null_mut();
        // SAFETY: pops what was pushed above.
        let _ = unsafe { cu::cuCtxPopCurrent_v2(&mut old) };
        r?;
        let dev = d
            .devices()
            .iter()
            .position(|x| {
                let mut h: cu::CUdevice = 0;
                // SAFETY: out pointer; an ordinal below the device count.
                let r = unsafe { cu::cuDeviceGet(&mut h, x.ordinal) };
                r == cu::CUresult::CUDA_SUCCESS && h == cudev
            })
            .ok_or(Status::InvalidParam)?;
        Ok(StreamRef {
            raw,
            dev: dev as i32,
        })
    }

    /// A stream Rucx made ([`Stream`]).
    pub fn of(s: &Stream) -> StreamRef {
        StreamRef {
            raw: s.stream,
            dev: s.dev,
        }
    }

    pub fn raw(&self) -> usize {
        self.raw as usize
    }

    /// The device the stream belongs to.
    pub fn device(&self) -> i32 {
        self.dev
    }

    /// Queues a write of `value` to `addr` (device-visible memory: mapped pinned host
    /// memory for a host watcher), after everything queued before it, with a memory
    /// barrier so that their writes are visible first.
    pub fn write_value(&self, addr: DevPtr, value: u32) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: a live stream; the driver checks that `addr` is device-visible.
        check(unsafe {
            cu::cuStreamWriteValue32_v2(
                self.raw,
                addr,
                value,
                cu::CUstreamWriteValue_flags::CU_STREAM_WRITE_VALUE_DEFAULT as u32,
            )
        })
    }

    /// Queues a wait: work queued after it runs once `(int32_t)(*addr - value) >= 0`.
    pub fn wait_value(&self, addr: DevPtr, value: u32) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: as in `write_value`.
        check(unsafe {
            cu::cuStreamWaitValue32_v2(
                self.raw,
                addr,
                value,
                cu::CUstreamWaitValue_flags::CU_STREAM_WAIT_VALUE_GEQ as u32,
            )
        })
    }

    /// [`write_value`](Self::write_value) by a one-thread kernel.
    pub fn kernel_write(&self, addr: DevPtr, value: u32) -> UcsResult<()> {
        let k = kernels(self.dev)?;
        self.launch(k.write, addr, value)
    }

    /// [`wait_value`](Self::wait_value) by a one-thread kernel that spins on the value.
    pub fn kernel_wait(&self, addr: DevPtr, value: u32) -> UcsResult<()> {
        let k = kernels(self.dev)?;
        self.launch(k.wait, addr, value)
    }

    fn launch(&self, f: cu::CUfunction, addr: DevPtr, value: u32) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        let (mut a, mut v) = (addr, value);
        let mut params: [*mut c_void; 2] = [
            std::ptr::addr_of_mut!(a).cast(),
            std::ptr::addr_of_mut!(v).cast(),
        ];
        // SAFETY: a kernel of this device's module taking (u64, u32); the parameter array
        // points at locals that live across the call (the driver copies them at launch).
        check(unsafe {
            cu::cuLaunchKernel(
                f,
                1,
                1,
                1,
                1,
                1,
                1,
                0,
                self.raw,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    /// Queues a fill of `n` bytes at `p` (device memory) with `byte`.
    pub fn memset(&self, p: DevPtr, byte: u8, n: usize) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: a live stream; the driver checks the range is device memory.
        check(unsafe { cu::cuMemsetD8Async(p, byte, n, self.raw) })
    }

    /// Queues a copy of `n` bytes (any memory types).
    ///
    /// # Safety
    /// Both ranges stay valid until the stream has run the copy.
    pub unsafe fn copy(&self, dst: DevPtr, src: DevPtr, n: usize) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: per the contract; a live stream.
        check(unsafe { cu::cuMemcpyAsync(dst, src, n, self.raw) })
    }

    /// Queues a 2D copy: `height` rows of `width` bytes, row `i` from `src + i * spitch`
    /// to `dst + i * dpitch` (any memory types, unified addressing).
    ///
    /// # Safety
    /// Both ranges stay valid until the stream has run the copy.
    pub unsafe fn copy_2d(
        &self,
        dst: DevPtr,
        dpitch: usize,
        src: DevPtr,
        spitch: usize,
        width: usize,
        height: usize,
    ) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        let p = cu::CUDA_MEMCPY2D {
            srcXInBytes: 0,
            srcY: 0,
            srcMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            srcHost: std::ptr::null(),
            srcDevice: src,
            srcArray: std::ptr::null_mut(),
            srcPitch: spitch,
            dstXInBytes: 0,
            dstY: 0,
            dstMemoryType: cu::CUmemorytype::CU_MEMORYTYPE_UNIFIED,
            dstHost: std::ptr::null_mut(),
            dstDevice: dst,
            dstArray: std::ptr::null_mut(),
            dstPitch: dpitch,
            WidthInBytes: width,
            Height: height,
        };
        // SAFETY: per the contract; the descriptor lives across the call (the driver
        // copies it).
        check(unsafe { cu::cuMemcpy2DAsync_v2(&p, self.raw) })
    }

    /// Records `ev` on the stream: it reports done once everything queued before has run.
    pub fn record(&self, ev: &Event) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: a live event of this device and a live stream.
        check(unsafe { cu::cuEventRecord(ev.raw(), self.raw) })
    }

    /// Queues kernel `f` on `grid` × `block` threads with `params` (pointers to each
    /// argument, in order).
    ///
    /// # Safety
    /// `f` is a function of a module loaded on this stream's device whose parameters are
    /// exactly what `params` points at; whatever memory the kernel touches stays valid
    /// until the stream has run it.
    pub unsafe fn launch_kernel(
        &self,
        f: &Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        params: &mut [*mut c_void],
    ) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: per the contract (the driver copies the arguments at launch).
        check(unsafe {
            cu::cuLaunchKernel(
                f.0,
                grid.0,
                grid.1,
                grid.2,
                block.0,
                block.1,
                block.2,
                0,
                self.raw,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        })
    }

    /// Whether everything queued on the stream has finished.
    pub fn idle(&self) -> UcsResult<bool> {
        // SAFETY: a live stream.
        check_ready(unsafe { cu::cuStreamQuery(self.raw) })
    }

    /// Waits until the stream is idle.
    pub fn synchronize(&self) -> UcsResult<()> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        // SAFETY: a live stream.
        check(unsafe { cu::cuStreamSynchronize(self.raw) })
    }
}

/// A module of device code (PTX, compiled by the driver's JIT), loaded on one device for
/// the process's life.
#[derive(Debug)]
pub struct Module {
    m: cu::CUmodule,
    dev: i32,
}

// SAFETY: a module handle may be used from any thread; the driver serializes.
unsafe impl Send for Module {}
// SAFETY: as above; a Module is only read after loading.
unsafe impl Sync for Module {}

/// A kernel of a [`Module`].
#[derive(Debug, Clone, Copy)]
pub struct Function(cu::CUfunction);

// SAFETY: as for Module.
unsafe impl Send for Function {}
// SAFETY: as for Module.
unsafe impl Sync for Function {}

impl Module {
    /// Loads `ptx` on device `dev`.
    pub fn load_ptx(dev: i32, ptx: &str) -> UcsResult<Module> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(dev)?;
        let src = std::ffi::CString::new(ptx).map_err(|_| Status::InvalidParam)?;
        let mut m = std::ptr::null_mut();
        // SAFETY: out pointer; a NUL-terminated image; a current context.
        check(unsafe { cu::cuModuleLoadData(&mut m, src.as_ptr().cast()) })?;
        Ok(Module { m, dev })
    }

    /// The kernel named `name`.
    pub fn function(&self, name: &str) -> UcsResult<Function> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(self.dev)?;
        let n = std::ffi::CString::new(name).map_err(|_| Status::InvalidParam)?;
        let mut f = std::ptr::null_mut();
        // SAFETY: out pointer; a live module; a NUL-terminated name.
        check(unsafe { cu::cuModuleGetFunction(&mut f, self.m, n.as_ptr()) })?;
        Ok(Function(f))
    }
}
