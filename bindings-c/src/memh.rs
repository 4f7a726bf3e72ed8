//! Memory handles, UCX 1.14's calls: `ucp_memh_pack` (without `UCP_MEMH_PACK_FLAG_EXPORT`
//! the bytes `ucp_rkey_pack` gives; exporting a handle to another process is not
//! supported) and `ucp_memh_buffer_release`; and the pages of `ucp_mem_map` with
//! `UCP_MEM_MAP_LOCK`.

use std::ffi::c_void;

use ucs::Status;

use crate::context::{malloc_copy, rkey_blob, CMem};
use crate::types::*;
use crate::{code, guard};

/// # Safety
/// `memh` ours; `params` readable; out pointers writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_memh_pack(
    memh: *mut c_void,
    params: *const ucp_memh_pack_params_t,
    buffer_p: *mut *mut c_void,
    buffer_size_p: *mut usize,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract (checked by magic).
        let Some(m) = (unsafe { CMem::from_ptr(memh) }) else {
            return code(Status::InvalidParam);
        };
        if params.is_null() || buffer_p.is_null() || buffer_size_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable by contract; field_mask first.
        let p = unsafe { &*params };
        if p.field_mask & !UCP_MEMH_PACK_PARAM_FIELD_FLAGS != 0 {
            return code(Status::InvalidParam);
        }
        let flags = if p.field_mask & UCP_MEMH_PACK_PARAM_FIELD_FLAGS != 0 {
            p.flags
        } else {
            0
        };
        if flags & !UCP_MEMH_PACK_FLAG_EXPORT != 0 {
            return code(Status::InvalidParam);
        }
        if flags & UCP_MEMH_PACK_FLAG_EXPORT != 0 {
            // A handle another process maps as its own (ucp_mem_map with
            // exported_memh_buffer): not supported (docs/c-abi.md).
            return code(Status::Unsupported);
        }
        let blob = match rkey_blob(m) {
            Ok(b) => b,
            Err(s) => return code(s),
        };
        let b = malloc_copy(&blob);
        if b.is_null() {
            return code(Status::NoMemory);
        }
        // SAFETY: both writable (checked non-NULL).
        unsafe {
            *buffer_p = b;
            *buffer_size_p = blob.len();
        }
        code(Status::Ok)
    })
}

/// # Safety
/// `buffer` NULL or from `ucp_memh_pack`, released once; `params` NULL or readable.
#[no_mangle]
pub unsafe extern "C" fn ucp_memh_buffer_release(
    buffer: *mut c_void,
    params: *const ucp_memh_buffer_release_params_t,
) {
    guard((), || {
        // (No fields are defined: the parameters carry nothing to act on, and a release
        // has no status to refuse them with.)
        let _ = params;
        // SAFETY: allocated with malloc by ucp_memh_pack (free(NULL) is a no-op).
        unsafe { libc::free(buffer) }
    })
}

/// `UCP_MEM_MAP_LOCK`: the pages of `[base, base + len)` present from now on. Memory the
/// library allocated (`ours`) is also pinned with `mlock`, best effort (`RLIMIT_MEMLOCK`
/// may refuse; its `munmap` unlocks it). The application's memory is populated only: an
/// `munlock` at unmap could undo the application's own `mlock` of the same pages, and
/// Rucx's host-memory transports need no pinning (verbs registration pins by itself).
pub(crate) fn lock_pages(base: u64, len: usize, ours: bool) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let start = (base as usize) & !(page - 1);
    let end = (base as usize).saturating_add(len).saturating_add(page - 1) & !(page - 1);
    let (p, n) = (start as *mut c_void, end - start);
    // SAFETY: the range is memory the caller maps (ucp_mem_map's contract) or we
    // allocated; madvise and mlock change no contents.
    let populated = unsafe {
        libc::madvise(p, n, libc::MADV_POPULATE_WRITE) == 0
            || libc::madvise(p, n, libc::MADV_POPULATE_READ) == 0
    };
    if !populated {
        // Kernels before 5.14: read one byte per page.
        for a in (start..end).step_by(page) {
            // SAFETY: inside the mapped range (see above).
            unsafe { std::ptr::read_volatile(a.max(base as usize) as *const u8) };
        }
    }
    // SAFETY: as above.
    if ours && unsafe { libc::mlock(p, n) } != 0 {
        log::debug!(
            "ucp_mem_map: mlock of {n} bytes refused ({}); the pages are populated",
            std::io::Error::last_os_error()
        );
    }
}
