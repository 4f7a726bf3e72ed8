//! The few `libucs` and `libucm` functions that real consumers of `libucp.so.0` call
//! (OpenMPI 4.1's pml/osc/spml/atomic ucx and its common ucx library; Charm++'s UCX machine
//! layer), exported from this library. `libucs.so.0`, `libucm.so.0` and `libuct.so.0` are
//! shipped as other names of this same file (`bindings-c/gen-pc.sh`; the loader sees one
//! object, whichever name it was asked for), so those programs run where no UCX is
//! installed. Written from the declarations in UCX's `ucs/type/status.h` and
//! `ucm/api/ucm.h`.
//!
//! Rucx installs no memory hooks (nothing it keeps is keyed by a host address that an
//! `munmap` would make stale), so the memory-event functions have nothing to do: events an
//! application declares external are accepted and reported as such, native events are not
//! offered.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use ucs::Status;

use crate::types::*;

/// `ucs_status_string`: the text of a status code.
#[no_mangle]
pub extern "C" fn ucs_status_string(status: ucs_status_ret_t) -> *const c_char {
    crate::ext::ucpx_status_string(status)
}

/// Events the application reports itself (`ucm_set_external_event`).
static EXTERNAL: AtomicI32 = AtomicI32::new(0);

/// `ucm_set_external_event`: the application will report `events` itself (OpenMPI reports
/// memory releases with `ucm_vm_munmap`).
#[no_mangle]
pub extern "C" fn ucm_set_external_event(events: c_int) {
    EXTERNAL.fetch_or(events, Ordering::AcqRel);
}

/// `ucm_test_events`: whether native event handlers for `events` work. Rucx installs none,
/// so any event is `UCS_ERR_UNSUPPORTED`.
#[no_mangle]
pub extern "C" fn ucm_test_events(events: c_int) -> ucs_status_ret_t {
    if events == 0 {
        Status::Ok.code()
    } else {
        Status::Unsupported.code()
    }
}

/// `ucm_test_external_events`: whether `events` were declared external (and so are
/// reported by the application).
#[no_mangle]
pub extern "C" fn ucm_test_external_events(events: c_int) -> ucs_status_ret_t {
    if events & !EXTERNAL.load(Ordering::Acquire) == 0 {
        Status::Ok.code()
    } else {
        Status::Unsupported.code()
    }
}

/// `ucm_vm_munmap`: the application tells that `[addr, addr + length)` is being released.
/// Nothing Rucx keeps depends on it.
#[no_mangle]
pub extern "C" fn ucm_vm_munmap(_addr: *mut c_void, _length: usize) {}
