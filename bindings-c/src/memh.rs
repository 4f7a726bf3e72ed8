//! Memory handles, UCX 1.14's calls: `ucp_memh_pack` (without `UCP_MEMH_PACK_FLAG_EXPORT`
//! the bytes `ucp_rkey_pack` gives; exporting a handle to another process is not
//! supported) and `ucp_memh_buffer_release`. The handle itself (`CMem`) and the calls of
//! UCX 1.13 that map and pack it are the context's (`context`).

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
