//! `ucs_log_dispatch` (libucs's logging entry point, imported by UCXX's `libucxx.so`) and
//! `ucs_debug_is_error_signal` (imported by UCX's `libucs_signal.so`, which Python's
//! `libucx.load_library()` opens by name: Rucx ships that name too).
//!
//! `ucs_log_dispatch` is C-variadic, which stable Rust cannot define: the exported symbol
//! is a naked function that jumps to the C formatter in `csrc/log_dispatch.c` (built by
//! `build.rs`) with the caller's arguments untouched, and the formatter hands the finished
//! line back to [`rucx_log_line`].

use std::ffi::{c_char, c_int, c_uint, CStr};
use std::io::Write;

extern "C" {
    /// `csrc/log_dispatch.c`: formats the message of a `ucs_log_dispatch` call. Declared
    /// without parameters: only its address is taken here.
    fn rucx_ucs_log_dispatch();
}

/// `void ucs_log_dispatch(const char *file, unsigned line, const char *function,
/// ucs_log_level_t level, ucs_log_component_config_t *comp_conf, const char *format, ...)`:
/// a tail jump to the C formatter, so that the variadic arguments reach it exactly as the
/// caller passed them.
///
/// # Safety
/// Called from C as the declaration above says.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn ucs_log_dispatch() {
    core::arch::naked_asm!("jmp {0}", sym rucx_ucs_log_dispatch);
}

/// As above, for AArch64.
///
/// # Safety
/// Called from C as the declaration above says.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn ucs_log_dispatch() {
    core::arch::naked_asm!("b {0}", sym rucx_ucs_log_dispatch);
}

/// UCX's level names, by `ucs_log_level_t`.
const LEVELS: [&str; 14] = [
    "FATAL", "ERROR", "WARN", "DIAG", "INFO", "DEBUG", "TRACE", "REQ", "DATA", "ASYNC", "FUNC",
    "POLL", "", "PRINT",
];

/// Prints one message of `ucs_log_dispatch` on stderr, in UCX's layout:
/// `[sec.usec] [host:pid] file:line COMPONENT LEVEL message`, one line per line of the
/// message.
///
/// # Safety
/// Every pointer NULL or a NUL-terminated string, valid for the call.
#[no_mangle]
pub unsafe extern "C" fn rucx_log_line(
    file: *const c_char,
    line: c_uint,
    _function: *const c_char,
    level: c_int,
    component: *const c_char,
    message: *const c_char,
) {
    crate::guard((), || {
        let text = |p: *const c_char| {
            if p.is_null() {
                std::borrow::Cow::Borrowed("")
            } else {
                // SAFETY: a NUL-terminated string, by the contract.
                unsafe { CStr::from_ptr(p) }.to_string_lossy()
            }
        };
        let file = text(file);
        let base = file.rsplit('/').next().unwrap_or("");
        let level = usize::try_from(level)
            .ok()
            .and_then(|l| LEVELS.get(l))
            .copied()
            .unwrap_or("");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let host = ucs::sys::hostname();
        let mut err = std::io::stderr().lock();
        for l in text(message).lines() {
            let _ = writeln!(
                err,
                "[{}.{:06}] [{}:{}] {:>17}:{:<4} {:<4} {:<5} {}",
                now.as_secs(),
                now.subsec_micros(),
                host,
                std::process::id(),
                base,
                line,
                text(component),
                level,
                l
            );
        }
    })
}

/// `int ucs_debug_is_error_signal(int signum)`: whether UCX's error handler owns `signum`.
/// Rucx installs no signal handlers, so none.
#[no_mangle]
pub extern "C" fn ucs_debug_is_error_signal(_signum: c_int) -> c_int {
    0
}
