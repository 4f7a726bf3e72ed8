//! C requests: UCX's request model. A request is one allocation — our [`ReqHdr`] followed
//! by the `request_size` bytes the application asked for in `ucp_params_t` — and the
//! pointer handed out is the start of the application's bytes. `request_init` runs when
//! the memory is first allocated, `request_cleanup` when the context's pool is destroyed.
//! Requests the application allocated (`UCP_OP_ATTR_FIELD_REQUEST`) have the header in the
//! `ucp_context_attr_t::request_size` bytes in front of the pointer they pass.
//!
//! The state word is atomic: the thread that completes a request (inside
//! `ucp_worker_progress`) and the thread that frees or tests it may differ.

use std::alloc::Layout;
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use ucp::ReqId;
use ucs::Status;

use crate::types::*;
use crate::worker::CWorker;
use crate::{code, guard};

const MAGIC_LIVE: u64 = 0x5275_6378_5265_7121;
const MAGIC_FREE: u64 = 0x5275_6378_4672_6565;

/// Completed: status and info are final.
pub(crate) const F_DONE: u32 = 1;
/// The application freed it (`ucp_request_free`); release once completed.
pub(crate) const F_RELEASED: u32 = 2;
/// Its callback is running.
pub(crate) const F_IN_CB: u32 = 4;
/// Memory owned by the application.
pub(crate) const F_USER: u32 = 8;
/// Released with the deprecated `ucp_request_release`, which keeps the callback.
pub(crate) const F_KEEP_CB: u32 = 16;
/// Its worker is not in `UCS_THREAD_MODE_MULTI`: the application serializes every call on
/// the worker and its requests, so the flags change with plain loads and stores (as UCX's
/// request flags do) instead of locked read-modify-writes, three of which every request
/// otherwise pays.
pub(crate) const F_SERIAL: u32 = 32;

impl ReqHdr {
    /// Sets `bits` in the flags; returns the flags before.
    #[inline(always)]
    fn flags_or(&self, bits: u32) -> u32 {
        let prev = self.flags.load(Ordering::Acquire);
        if prev & F_SERIAL != 0 {
            self.flags.store(prev | bits, Ordering::Release);
            prev
        } else {
            self.flags.fetch_or(bits, Ordering::AcqRel)
        }
    }

    /// Clears `bits` in the flags; returns the flags before.
    #[inline(always)]
    fn flags_clear(&self, bits: u32) -> u32 {
        let prev = self.flags.load(Ordering::Acquire);
        if prev & F_SERIAL != 0 {
            self.flags.store(prev & !bits, Ordering::Release);
            prev
        } else {
            self.flags.fetch_and(!bits, Ordering::AcqRel)
        }
    }
}

/// What to call on completion.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Cb {
    None,
    Send(ucp_send_callback_t),
    SendNbx(ucp_send_nbx_callback_t),
    TagRecv(ucp_tag_recv_callback_t),
    TagRecvNbx(ucp_tag_recv_nbx_callback_t),
    Stream(ucp_stream_recv_callback_t),
    /// Stream and AM data receives of the nbx API: `(req, status, length, user_data)`.
    LenNbx(ucp_stream_recv_nbx_callback_t),
}

impl Cb {
    /// The callback of an nbx call of `kind` from `ucp_request_param_t::cb`.
    ///
    /// # Safety
    /// `f` is a non-NULL function pointer of the type `kind` names (the union member the
    /// operation uses).
    pub(crate) unsafe fn from_param(kind: crate::ops::CbKind, f: *const c_void) -> Cb {
        use crate::ops::CbKind;
        // SAFETY: per the contract.
        unsafe {
            match kind {
                CbKind::Send => {
                    Cb::SendNbx(std::mem::transmute::<*const c_void, ucp_send_nbx_callback_t>(f))
                }
                CbKind::TagRecv => Cb::TagRecvNbx(std::mem::transmute::<
                    *const c_void,
                    ucp_tag_recv_nbx_callback_t,
                >(f)),
                CbKind::Len => Cb::LenNbx(std::mem::transmute::<
                    *const c_void,
                    ucp_stream_recv_nbx_callback_t,
                >(f)),
            }
        }
    }
}

/// The library's part of a request, in front of the application's bytes.
#[repr(C, align(16))]
#[derive(Debug)]
pub(crate) struct ReqHdr {
    magic: AtomicU64,
    flags: AtomicU32,
    status: AtomicI32,
    pub(crate) id: u64,
    pub(crate) cb: Cb,
    pub(crate) user_data: *mut c_void,
    pub(crate) worker: *const CWorker,
    pub(crate) info: ucp_tag_recv_info_t,
    /// `ucs_memory_type_t` of the operation's buffer (`ucp_request_query`).
    pub(crate) mem_type: std::ffi::c_int,
}

/// Bytes in front of a request pointer (`ucp_context_attr_t::request_size`).
pub(crate) const HDR: usize = std::mem::size_of::<ReqHdr>();

/// The pool of request memory of one context.
#[derive(Debug)]
pub(crate) struct Pool {
    free: Mutex<Vec<usize>>,
    layout: Layout,
    init: ucp_request_init_callback_t,
    cleanup: ucp_request_cleanup_callback_t,
    /// Every allocation, for cleanup at destruction.
    all: Mutex<Vec<usize>>,
}

impl Pool {
    pub(crate) fn new(
        user_size: usize,
        init: ucp_request_init_callback_t,
        cleanup: ucp_request_cleanup_callback_t,
    ) -> Option<Pool> {
        let layout = Layout::from_size_align(HDR.checked_add(user_size)?, 16).ok()?;
        Some(Pool {
            free: Mutex::new(Vec::new()),
            layout,
            init,
            cleanup,
            all: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn get(&self) -> Option<*mut ReqHdr> {
        if let Some(p) = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Some(p as *mut ReqHdr);
        }
        self.grow()
    }

    #[cold]
    fn grow(&self) -> Option<*mut ReqHdr> {
        // SAFETY: the layout has a non-zero size (HDR > 0).
        let p = unsafe { std::alloc::alloc_zeroed(self.layout) };
        if p.is_null() {
            return None;
        }
        self.all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(p as usize);
        if let Some(init) = self.init {
            // SAFETY: the application's callback gets its own bytes, HDR into the
            // allocation, which are `request_size` long.
            unsafe { init(p.add(HDR).cast()) };
        }
        Some(p.cast())
    }

    pub(crate) fn put(&self, h: *mut ReqHdr) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(h as usize);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        let all = std::mem::take(self.all.get_mut().unwrap_or_else(|e| e.into_inner()));
        for p in all {
            let p = p as *mut u8;
            if let Some(c) = self.cleanup {
                // SAFETY: as in `grow`; the memory is still allocated.
                unsafe { c(p.add(HDR).cast()) };
            }
            // SAFETY: allocated in `grow` with this layout, freed once (taken from `all`).
            unsafe { std::alloc::dealloc(p, self.layout) };
        }
    }
}

/// The header of a request pointer the application passes, or `None` when it is not a
/// live request of ours (NULL, an error code, a freed request).
///
/// # Safety
/// `req` is NULL, an error code, or a pointer this library returned as a request (or an
/// application-allocated request with our header in front).
pub(crate) unsafe fn hdr_of(req: *mut c_void) -> Option<*mut ReqHdr> {
    if !crate::ptr_is_some(req) {
        return None;
    }
    // SAFETY: per the contract, HDR bytes in front of `req` are our header.
    let h = unsafe { req.cast::<u8>().sub(HDR) }.cast::<ReqHdr>();
    // SAFETY: as above; the magic is read atomically.
    let m = unsafe { (*h).magic.load(Ordering::Acquire) };
    (m == MAGIC_LIVE).then_some(h)
}

/// The application pointer of a header.
pub(crate) fn user_ptr(h: *mut ReqHdr) -> *mut c_void {
    // SAFETY: every header is followed by the application's bytes (possibly 0 of them).
    unsafe { h.cast::<u8>().add(HDR).cast() }
}

/// A new request for an operation posted on `w`: from the application's memory when it
/// passed some, else from the context's pool.
///
/// # Safety
/// `user_req`, when not NULL, points `HDR` bytes past writable memory the application
/// reserved for the request header.
#[inline(always)]
pub(crate) unsafe fn alloc(
    w: &CWorker,
    user_req: *mut c_void,
    cb: Cb,
    user_data: *mut c_void,
) -> Option<*mut ReqHdr> {
    let serial = if w.thread_mode != UCS_THREAD_MODE_MULTI {
        F_SERIAL
    } else {
        0
    };
    let (h, flags) = if user_req.is_null() {
        (w.req_get()?, serial)
    } else {
        // SAFETY: per the contract.
        (
            unsafe { user_req.cast::<u8>().sub(HDR) }.cast::<ReqHdr>(),
            F_USER | serial,
        )
    };
    // SAFETY: h is HDR writable, 16-aligned bytes (pool layout; the application's
    // allocation by contract); the request is not yet visible to anyone else.
    unsafe {
        h.write(ReqHdr {
            magic: AtomicU64::new(MAGIC_LIVE),
            flags: AtomicU32::new(flags),
            status: AtomicI32::new(code(Status::InProgress)),
            id: 0,
            cb,
            user_data,
            worker: w as *const CWorker,
            info: ucp_tag_recv_info_t::default(),
            mem_type: UCS_MEMORY_TYPE_HOST,
        })
    };
    Some(h)
}

/// Gives back a header from [`alloc`] that was never handed out: marked dead, and pool
/// memory (`user` false) returned to the pool.
///
/// # Safety
/// `h` came from `alloc` on `w` (with application memory exactly when `user`) and nobody
/// else has seen it.
pub(crate) unsafe fn discard(w: &CWorker, h: *mut ReqHdr, user: bool) {
    // SAFETY: per the contract.
    unsafe { (*h).magic.store(MAGIC_FREE, Ordering::Release) };
    if !user {
        // SAFETY: per the contract, pool memory of `w` that nobody else has seen.
        unsafe { w.req_put(h) };
    }
}

/// Completes a request: records the status and info, calls its callback, and releases it
/// when the application freed it already. A request freed (`ucp_request_free`) before it
/// completed is released without its callback (`ucp.h`: "no further notifications or
/// callbacks will be invoked"): the application may have recycled whatever the callback
/// would touch, as OpenMPI's `MPI_Request_free` does. The deprecated
/// `ucp_request_release` keeps the callback, as in UCX. Called with no worker lock held.
///
/// # Safety
/// `h` is a live header whose operation has finished and which is completed only once.
pub(crate) unsafe fn complete(h: *mut ReqHdr, status: Status, info: ucp_tag_recv_info_t) {
    // SAFETY: per the contract, h is live; the plain fields are written before F_DONE is
    // published with release ordering.
    let hd = unsafe { &mut *h };
    hd.info = info;
    hd.status.store(code(status), Ordering::Relaxed);
    let prev = hd.flags_or(F_DONE | F_IN_CB);
    if prev & (F_RELEASED | F_KEEP_CB) == F_RELEASED {
        // SAFETY: completed now and freed before: nobody else releases it (`free` saw it
        // running), and this is the one completion.
        unsafe { release(h) };
        return;
    }
    let req = user_ptr(h);
    let st = code(status);
    let ud = hd.user_data;
    let mut info_copy = info;
    // SAFETY: the callbacks are the application's, called as `ucp.h` specifies, with the
    // request pointer and arguments of the matching type.
    unsafe {
        match hd.cb {
            Cb::None => {}
            Cb::Send(Some(f)) => f(req, st),
            Cb::SendNbx(Some(f)) => f(req, st, ud),
            Cb::TagRecv(Some(f)) => f(req, st, &mut info_copy),
            Cb::TagRecvNbx(Some(f)) => f(req, st, &info_copy, ud),
            Cb::Stream(Some(f)) => f(req, st, info.length),
            Cb::LenNbx(Some(f)) => f(req, st, info.length, ud),
            _ => {}
        }
    }
    // SAFETY: still live: only this function releases a request whose F_IN_CB is set.
    let prev = unsafe { (*h).flags_clear(F_IN_CB) };
    if prev & F_RELEASED != 0 {
        // SAFETY: completed and released; this is the one release.
        unsafe { release(h) };
    }
}

/// Returns a request's memory to its worker (or, for the application's memory, marks it
/// dead).
///
/// # Safety
/// `h` is live, completed, released, and not used again.
unsafe fn release(h: *mut ReqHdr) {
    // SAFETY: per the contract.
    let hd = unsafe { &*h };
    hd.magic.store(MAGIC_FREE, Ordering::Release);
    if hd.flags.load(Ordering::Acquire) & F_USER == 0 {
        // SAFETY: a request is released before its worker is destroyed (as in UCX, whose
        // requests are memory of their worker's pool).
        unsafe { (*hd.worker).req_put(h) };
    }
}

/// The status a live request reports.
fn status_of(h: *mut ReqHdr) -> (Status, ucp_tag_recv_info_t) {
    // SAFETY: callers pass live headers.
    let hd = unsafe { &*h };
    if hd.flags.load(Ordering::Acquire) & F_DONE == 0 {
        return (Status::InProgress, ucp_tag_recv_info_t::default());
    }
    let s = Status::from_code(hd.status.load(Ordering::Relaxed) as i8).unwrap_or(Status::IoError);
    (s, hd.info)
}

/// `ucp_request_free` (`keep_cb` false) / `ucp_request_release` (true).
fn free(req: *mut c_void, keep_cb: bool) {
    // SAFETY: the application passes a request pointer of ours (checked by magic).
    let Some(h) = (unsafe { hdr_of(req) }) else {
        return;
    };
    let set = if keep_cb {
        F_RELEASED | F_KEEP_CB
    } else {
        F_RELEASED
    };
    // SAFETY: live header.
    let prev = unsafe { (*h).flags_or(set) };
    if prev & F_RELEASED != 0 {
        return;
    }
    if prev & F_DONE != 0 && prev & F_IN_CB == 0 {
        // SAFETY: completed, not in its callback, released now by us only.
        unsafe { release(h) };
    }
}

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
    if hd.flags.load(Ordering::Acquire) & F_DONE == 0 {
        return code(Status::InProgress);
    }
    // The code `complete` stored (from a `Status`), ordered by the acquire above.
    hd.status.load(Ordering::Relaxed)
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
    if unsafe { (*h).flags.load(Ordering::Acquire) } & F_DONE == 0 {
        return code(Status::InProgress);
    }
    test_done(h, info)
}

/// [`ucp_request_test`] of a finished request: its status, and `info` filled in.
#[inline(never)]
fn test_done(h: *mut ReqHdr, info: *mut ucp_tag_recv_info_t) -> ucs_status_t {
    let (s, i) = status_of(h);
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
        let (s, i) = status_of(h);
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
    guard((), || free(request, false))
}

/// # Safety
/// As for [`ucp_request_free`].
#[no_mangle]
pub unsafe extern "C" fn ucp_request_release(request: *mut c_void) {
    guard((), || free(request, true))
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
        if hd.flags.load(Ordering::Acquire) & F_DONE != 0 {
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
        let (s, _) = status_of(h);
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
