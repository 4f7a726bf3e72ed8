//! The exported request calls: `ucp_request_check_status`, `ucp_request_test` and the
//! `_request_test` forms of tag and stream receives, `ucp_request_free`,
//! `ucp_request_release`, `ucp_request_cancel`, `ucp_request_query`, `ucp_request_alloc`.
//! The request itself (its header, pool and completion) is `request`, on the floor below
//! the handles; these calls sit above them, since freeing and cancelling reach the worker.

use std::ffi::{c_char, c_void};

use ucp::ReqId;
use ucs::Status;

use crate::request::{self, hdr_of, status_of, ReqHdr};
use crate::types::*;
use crate::worker::CWorker;
use crate::{code, guard};

/// # Safety
/// `request` is NULL or a request pointer this library returned.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_check_status(request: *mut c_void) -> ucs_status_t {
    // Nothing here can panic (no guard); a request still running is a few loads, as in
    // `ucp_request_test`.
    // SAFETY: forwarded contract.
    let Some(h) = (unsafe { hdr_of(request) }) else {
        return code(Status::InvalidParam);
    };
    // SAFETY: a live header (hdr_of checked the magic).
    let hd = unsafe { &*h };
    if !hd.is_done() {
        return code(Status::InProgress);
    }
    // The code `complete` stored (from a `Status`), ordered by the acquire above.
    hd.status_code()
}

/// # Safety
/// `request` as for [`ucp_request_check_status`]; `info` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_test(
    request: *mut c_void,
    info: *mut ucp_tag_recv_info_t,
) -> ucs_status_t {
    // Nothing here can panic (no guard). An MPI library tests its request once per poll:
    // the test of one still in progress is a few loads (17 -> 13 instructions, 2026-11-28).
    // SAFETY: forwarded contract.
    let Some(h) = (unsafe { hdr_of(request) }) else {
        return code(Status::InvalidParam);
    };
    // SAFETY: a live header (hdr_of checked the magic).
    if unsafe { !(*h).is_done() } {
        return code(Status::InProgress);
    }
    // SAFETY: live (above); `info` as the caller's contract says.
    unsafe { test_done(h, info) }
}

/// [`ucp_request_test`] of a finished request: its status, and `info` filled in.
///
/// # Safety
/// `h` is a live header; `info` NULL or writable.
#[inline(never)]
unsafe fn test_done(h: *mut ReqHdr, info: *mut ucp_tag_recv_info_t) -> ucs_status_t {
    // SAFETY: per the contract.
    let (s, i) = unsafe { status_of(h) };
    if !info.is_null() {
        // SAFETY: the caller's writable info.
        unsafe { *info = i };
    }
    code(s)
}

/// # Safety
/// As for [`ucp_request_test`].
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_request_test(
    request: *mut c_void,
    info: *mut ucp_tag_recv_info_t,
) -> ucs_status_t {
    // SAFETY: forwarded.
    unsafe { ucp_request_test(request, info) }
}

/// # Safety
/// `request` as for [`ucp_request_check_status`]; `length_p` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_request_test(
    request: *mut c_void,
    length_p: *mut usize,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(h) = (unsafe { hdr_of(request) }) else {
            return code(Status::InvalidParam);
        };
        // SAFETY: live (hdr_of checked the magic).
        let (s, i) = unsafe { status_of(h) };
        if s != Status::InProgress && !length_p.is_null() {
            // SAFETY: the caller's writable length.
            unsafe { *length_p = i.length };
        }
        code(s)
    })
}

/// # Safety
/// As for [`ucp_request_check_status`].
#[no_mangle]
pub unsafe extern "C" fn ucp_request_is_completed(request: *mut c_void) -> std::ffi::c_int {
    // SAFETY: forwarded.
    let s = unsafe { ucp_request_check_status(request) };
    std::ffi::c_int::from(s != code(Status::InProgress))
}

/// # Safety
/// `request` is NULL or a request pointer of this library not freed before.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_free(request: *mut c_void) {
    // SAFETY: forwarded contract.
    guard((), || unsafe { request::free(request, false) })
}

/// # Safety
/// As for [`ucp_request_free`].
#[no_mangle]
pub unsafe extern "C" fn ucp_request_release(request: *mut c_void) {
    // SAFETY: forwarded contract.
    guard((), || unsafe { request::free(request, true) })
}

/// # Safety
/// `worker` a worker of ours; `request` a request of ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_cancel(worker: *mut c_void, request: *mut c_void) {
    guard((), || {
        // SAFETY: forwarded contract.
        let Some(h) = (unsafe { hdr_of(request) }) else {
            return;
        };
        // SAFETY: live header.
        let hd = unsafe { &*h };
        if hd.is_done() {
            return;
        }
        // SAFETY: the worker pointer is checked by magic.
        let Some(w) = (unsafe { CWorker::from_ptr(worker) }) else {
            return;
        };
        let id = ReqId(hd.id);
        w.with(|wk| wk.request_cancel(id));
        // A cancelled receive completes now: report it at once, as UCX does.
        w.drain_and_dispatch();
    })
}

/// # Safety
/// `request` a request of ours; `attr` NULL or a writable `ucp_request_attr_t`.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_query(
    request: *mut c_void,
    attr: *mut ucp_request_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let (Some(h), false) = (unsafe { hdr_of(request) }, attr.is_null()) else {
            return code(Status::InvalidParam);
        };
        // SAFETY: attr is non-NULL and writable by contract; field_mask read first.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_REQUEST_ATTR_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        // SAFETY: live (hdr_of checked the magic).
        let (s, _) = unsafe { status_of(h) };
        if a.field_mask & UCP_REQUEST_ATTR_FIELD_STATUS != 0 {
            a.status = code(s);
        }
        if a.field_mask & UCP_REQUEST_ATTR_FIELD_MEM_TYPE != 0 {
            // SAFETY: live header.
            a.mem_type = unsafe { (*h).mem_type };
        }
        if a.field_mask & UCP_REQUEST_ATTR_FIELD_INFO_STRING != 0
            && !a.debug_string.is_null()
            && a.debug_string_size > 0
        {
            // SAFETY: live header.
            let id = unsafe { (*h).id };
            let text = format!("rucx request {id:#x} {}", s.name());
            let n = text.len().min(a.debug_string_size - 1);
            // SAFETY: the application's buffer holds debug_string_size bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(text.as_ptr(), a.debug_string.cast::<u8>(), n);
                *a.debug_string.add(n) = 0 as c_char;
            }
        }
        if a.field_mask & UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE != 0 {
            a.debug_string_size = 64;
        }
        code(Status::Ok)
    })
}

/// Returns NULL, as UCX 1.19's does (its implementation is that one line): a program
/// allocates the memory of an application-owned request itself, with
/// `ucp_context_attr_t::request_size` bytes in front, for `UCP_OP_ATTR_FIELD_REQUEST` and
/// the `_nbr` calls.
///
/// # Safety
/// `worker` a worker of ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_request_alloc(_worker: *mut c_void) -> *mut c_void {
    std::ptr::null_mut()
}
