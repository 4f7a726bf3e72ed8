//! Memory of the CUDA virtual memory API (`cuMemCreate` + `cuMemMap`), which has no legacy
//! IPC handle: it is shared between processes through a shareable handle, a POSIX file
//! descriptor (`cuMemExportToShareableHandle`). The exporter keeps the descriptor open; a
//! peer on the same host takes its own copy of it with `pidfd_getfd` (Linux 5.6, and the
//! right to trace the exporter, which processes of one user have unless Yama forbids it),
//! imports it, and maps the allocation into a range of its own.
//!
//! One physical allocation per mapped range is what this handles: the exporter's handle is
//! the allocation mapped at the start of the range the driver reports for a pointer, and
//! the importer maps that range's length of it. An allocation made without
//! `CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR` among its requested handle types cannot be
//! exported; `cuda_ipc` then has no key for it and the data goes by another protocol.

use std::ffi::c_void;

use cudarc::driver::sys as cu;

use super::driver::{check, driver, DevPtr, Driver};
use crate::{Status, UcsResult};

const FD: cu::CUmemAllocationHandleType =
    cu::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;

fn device_prop(dev: i32) -> cu::CUmemAllocationProp {
    // SAFETY: a plain C struct; all-zero is a valid value of every field.
    let mut p: cu::CUmemAllocationProp = unsafe { std::mem::zeroed() };
    p.type_ = cu::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    p.requestedHandleTypes = FD;
    p.location.type_ = cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p
}

fn access(dev: i32) -> cu::CUmemAccessDesc {
    cu::CUmemAccessDesc {
        location: cu::CUmemLocation {
            type_: cu::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: dev,
        },
        flags: cu::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    }
}

/// Maps the physical allocation `h` (of `len` bytes) at a new range readable and writable
/// from device `dev`. The mapping holds its own reference to `h`.
fn map_new(h: cu::CUmemGenericAllocationHandle, len: usize, dev: i32) -> UcsResult<DevPtr> {
    let mut va = 0;
    // SAFETY: out pointer; a current context (the caller's binding).
    check(unsafe { cu::cuMemAddressReserve(&mut va, len, 0, 0, 0) })?;
    // SAFETY: a range just reserved for len bytes, and a live handle of at least len.
    let r = check(unsafe { cu::cuMemMap(va, len, 0, h, 0) }).and_then(|()| {
        let a = access(dev);
        // SAFETY: the range just mapped; one access descriptor.
        check(unsafe { cu::cuMemSetAccess(va, len, &a, 1) })
    });
    if let Err(e) = r {
        // SAFETY: undoes what succeeded above (an unmapped range unmaps as an error).
        unsafe {
            let _ = cu::cuMemUnmap(va, len);
            let _ = cu::cuMemAddressFree(va, len);
        }
        return Err(e);
    }
    Ok(va)
}

impl Driver {
    /// A shareable POSIX descriptor of the virtual-memory allocation mapped at `base`,
    /// owned by the caller.
    pub fn vmm_export(&self, dev: i32, base: DevPtr) -> UcsResult<i32> {
        let _b = self.bind(dev)?;
        let mut h = 0;
        // SAFETY: out pointer; base is an address of this process (the driver checks it).
        check(unsafe { cu::cuMemRetainAllocationHandle(&mut h, base as *mut c_void) })?;
        let mut fd: i32 = -1;
        // SAFETY: a retained handle; for a POSIX descriptor the out parameter is an int.
        let r = check(unsafe {
            cu::cuMemExportToShareableHandle((&mut fd as *mut i32).cast(), h, FD, 0)
        });
        // SAFETY: the reference cuMemRetainAllocationHandle took.
        let _ = unsafe { cu::cuMemRelease(h) };
        r.map(|()| fd)
    }

    /// Maps `len` bytes of the allocation that process `pid` exported as its descriptor
    /// `fd` (`vmm_export`) into this process, for device `dev`.
    pub fn vmm_import(&self, dev: i32, pid: u32, fd: i32, len: usize) -> UcsResult<DevPtr> {
        let local = take_fd(pid, fd)?;
        let _b = self.bind(dev)?;
        let mut h = 0;
        // SAFETY: out pointer; for a POSIX descriptor the OS handle is the descriptor's
        // value passed as a pointer-sized integer.
        let r = check(unsafe {
            cu::cuMemImportFromShareableHandle(&mut h, local as usize as *mut c_void, FD)
        });
        // SAFETY: our copy of the descriptor, closed once (the import holds what it needs).
        unsafe { libc::close(local) };
        r?;
        let va = map_new(h, len, dev);
        // SAFETY: the import's reference; the mapping holds its own.
        let _ = unsafe { cu::cuMemRelease(h) };
        va
    }

    /// Unmaps what `vmm_import` mapped.
    ///
    /// # Safety
    /// `va` and `len` came from [`vmm_import`](Self::vmm_import) on `dev`; nothing uses
    /// the range afterwards.
    pub unsafe fn vmm_close(&self, dev: i32, va: DevPtr, len: usize) {
        if let Ok(_b) = self.bind(dev) {
            // SAFETY: per the contract.
            unsafe {
                let _ = cu::cuMemUnmap(va, len);
                let _ = cu::cuMemAddressFree(va, len);
            }
        }
    }
}

/// This process's copy of descriptor `fd` of process `pid` (`pidfd_getfd`).
fn take_fd(pid: u32, fd: i32) -> UcsResult<i32> {
    let errno = || {
        let e = std::io::Error::last_os_error();
        log::debug!("cuda vmm: taking descriptor {fd} of process {pid}: {e}");
        Status::from_errno(e.raw_os_error().unwrap_or(0))
    };
    // SAFETY: pidfd_open(pid, 0) makes a new descriptor or fails.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if pidfd < 0 {
        return Err(errno());
    }
    // SAFETY: pidfd_getfd(pidfd, fd, 0) duplicates the target's descriptor or fails.
    let local = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd as i32, fd, 0) };
    let e = (local < 0).then(errno);
    // SAFETY: ours, closed once.
    unsafe { libc::close(pidfd as i32) };
    match e {
        Some(e) => Err(e),
        None => Ok(local as i32),
    }
}

/// Device memory from the virtual memory API, exportable by descriptor (what PyTorch's
/// expandable segments and NCCL allocate), freed when dropped; known to the memory-type
/// detector while it lives. For tests and the perftest.
#[derive(Debug)]
pub struct VmmAlloc {
    ptr: DevPtr,
    len: usize,
    dev: i32,
    handle: cu::CUmemGenericAllocationHandle,
}

impl VmmAlloc {
    /// At least `len` bytes (rounded up to the allocation granularity) on device `dev`.
    pub fn new(dev: i32, len: usize) -> UcsResult<VmmAlloc> {
        let d = driver().ok_or(Status::Unsupported)?;
        let _b = d.bind(dev)?;
        let prop = device_prop(dev);
        let mut gran = 0usize;
        // SAFETY: out pointer; a valid property struct.
        check(unsafe {
            cu::cuMemGetAllocationGranularity(
                &mut gran,
                &prop,
                cu::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
            )
        })?;
        let len = len.max(1).div_ceil(gran.max(1)) * gran.max(1);
        let mut h = 0;
        // SAFETY: out pointer; a valid property struct and a granular size.
        check(unsafe { cu::cuMemCreate(&mut h, len, &prop, 0) })?;
        let ptr = match map_new(h, len, dev) {
            Ok(p) => p,
            Err(e) => {
                // SAFETY: the handle just created, released once.
                let _ = unsafe { cu::cuMemRelease(h) };
                return Err(e);
            }
        };
        if let Some(info) = d.pointer(ptr) {
            crate::memtype::remember(info);
        }
        Ok(VmmAlloc {
            ptr,
            len,
            dev,
            handle: h,
        })
    }

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

impl Drop for VmmAlloc {
    fn drop(&mut self) {
        crate::memtype::forget(self.ptr, self.len as u64);
        if let Some(d) = driver() {
            if let Ok(_b) = d.bind(self.dev) {
                // SAFETY: mapped and created by `new`, undone once.
                unsafe {
                    let _ = cu::cuMemUnmap(self.ptr, self.len);
                    let _ = cu::cuMemAddressFree(self.ptr, self.len);
                    let _ = cu::cuMemRelease(self.handle);
                }
            }
        }
    }
}
