//! `bindings-c` — the C ABI: `libucp.so.0` with UCX 1.13's `ucp_*` symbols, struct layouts,
//! enum values and request model, so that programs compiled against UCX's `ucp.h`
//! (OpenMPI's pml/osc ucx, `ucx_perftest`, Charm++-style machine layers) run on Rucx
//! unmodified. It is a thin shim over the `ucp` crate: handles are boxes around `ucp`
//! objects, requests are C memory with a header in front of the caller's `request_size`
//! bytes, and callbacks are called after `Worker::progress` returns, never while the
//! worker is borrowed (see `docs/c-abi.md`).
//!
//! Every export runs inside [`guard`] (no panic crosses the boundary), checks its pointers
//! and validates `field_mask` bits before reading a field.
//!
//! The modules form floors (`docs/layers.md`): types and datatypes at the bottom, then
//! the request (`request`), then the handles (`context`, `worker`, `ep`), then the exported
//! operations (`ops`, `fast`, `am`, `channel`, `queue`, `memh`, `request_api`).

pub mod types;

mod am;
mod channel;
mod context;
mod dt;
mod ep;
mod ext;
mod fast;
mod memh;
mod ops;
mod queue;
mod request;
mod request_api;
mod ucs_log;
mod ucs_ucm;
mod worker;

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use ucs::Status;

pub use types::{constants, layouts, other_abi, since, Layout};

/// Runs `f`, turning a panic into `default` (STYLE.md §10).
#[inline(always)]
pub(crate) fn guard<R>(default: R, f: impl FnOnce() -> R) -> R {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            eprintln!("[rucx] internal error (panic) caught at the C boundary");
            default
        }
    }
}

/// `ucs_status_t` of a status.
pub(crate) fn code(s: Status) -> types::ucs_status_t {
    types::ucs_status_t::from(s.code())
}

/// `UCS_STATUS_PTR(status)`: a small negative number cast to a pointer (NULL for OK).
pub(crate) fn status_ptr(s: Status) -> *mut c_void {
    (isize::from(s.code())) as *mut c_void
}

/// `UCS_PTR_IS_ERR`: the value is an error code, not a pointer.
pub(crate) fn ptr_is_err(p: *const c_void) -> bool {
    (p as usize) >= (ucs::status::UCS_ERR_LAST as isize as usize)
}

/// Neither NULL nor an error code (`UCS_PTR_IS_ERR`): one comparison, the subtraction
/// sending NULL to the top of the range where the error codes are (an MPI library tests
/// its request once per poll).
#[inline(always)]
pub(crate) fn ptr_is_some(p: *const c_void) -> bool {
    (p as usize).wrapping_sub(1) < (ucs::status::UCS_ERR_LAST as isize as usize).wrapping_sub(1)
}

/// Whether the user asked for the one-line announcement that Rucx's library serves
/// this process (`RUCX_ANNOUNCE=1`, or `UCX_LOG_LEVEL` at info or more verbose).
pub(crate) fn announce_enabled() -> bool {
    if std::env::var("RUCX_ANNOUNCE").is_ok_and(|v| v != "0" && !v.is_empty()) {
        return true;
    }
    matches!(
        std::env::var("UCX_LOG_LEVEL")
            .unwrap_or_default()
            .to_ascii_lowercase()
            .as_str(),
        "info" | "debug" | "trace" | "req" | "data" | "async" | "func" | "poll"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptr_is_some_refuses_null_and_every_error_code() {
        assert!(!ptr_is_some(std::ptr::null()));
        for c in ucs::status::UCS_ERR_LAST..0 {
            let p = status_ptr_code(c);
            assert!(ptr_is_err(p), "{c}");
            assert!(!ptr_is_some(p), "{c}");
        }
        for a in [1usize, 8, 4096, usize::MAX - 100] {
            assert!(ptr_is_some(a as *const c_void), "{a:#x}");
        }
    }

    fn status_ptr_code(c: i8) -> *const c_void {
        isize::from(c) as *const c_void
    }
}
