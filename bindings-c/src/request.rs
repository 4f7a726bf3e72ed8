//! C requests: UCX's request model. A request is one allocation — our [`ReqHdr`] followed
//! by the `request_size` bytes the application asked for in `ucp_params_t` — and the
//! pointer handed out is the start of the application's bytes. `request_init` runs when
//! the memory is first allocated, `request_cleanup` when the context's pool is destroyed.
//! Requests the application allocated (`UCP_OP_ATTR_FIELD_REQUEST`) have the header in the
//! `ucp_context_attr_t::request_size` bytes in front of the pointer they pass.
//!
//! The state word is atomic: the thread that completes a request (inside
//! `ucp_worker_progress`) and the thread that frees or tests it may differ.
//!
//! The floor below the handles (`docs/layers.md`): it names none of them. The request
//! memory of a worker is a [`ReqSource`] that the worker holds (its context's pool, and
//! its own free list in front of it); a header keeps the address of the source it came
//! from, so that [`complete`] and [`free`] give its memory back without knowing the
//! worker. The exported `ucp_request_*` calls are in `request_api`.

use std::alloc::Layout;
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use ucs::Status;

use crate::code;
use crate::types::*;

const MAGIC_LIVE: u64 = 0x5275_6378_5265_7121;
const MAGIC_FREE: u64 = 0x5275_6378_4672_6565;

/// Completed: status and info are final.
const F_DONE: u32 = 1;
/// The application freed it (`ucp_request_free`); release once completed.
const F_RELEASED: u32 = 2;
/// Its callback is running.
const F_IN_CB: u32 = 4;
/// Memory owned by the application.
const F_USER: u32 = 8;
/// Released with the deprecated `ucp_request_release`, which keeps the callback.
const F_KEEP_CB: u32 = 16;
/// Its worker is not in `UCS_THREAD_MODE_MULTI`: the application serializes every call on
/// the worker and its requests, so the flags change with plain loads and stores (as UCX's
/// request flags do) instead of locked read-modify-writes, three of which every request
/// otherwise pays.
const F_SERIAL: u32 = 32;

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

    /// Completed: the status and info are final (acquire: they are visible).
    #[inline(always)]
    pub(crate) fn is_done(&self) -> bool {
        self.flags.load(Ordering::Acquire) & F_DONE != 0
    }

    /// The `ucs_status_t` that [`complete`] stored; meaningful once [`is_done`](Self::is_done)
    /// said so (its acquire orders this load).
    #[inline(always)]
    pub(crate) fn status_code(&self) -> ucs_status_t {
        self.status.load(Ordering::Relaxed)
    }
}

/// Which member of `ucp_request_param_t::cb` an operation uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CbKind {
    Send,
    TagRecv,
    /// Stream receive and AM data receive: `(req, status, length, user_data)`.
    Len,
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
    pub(crate) unsafe fn from_param(kind: CbKind, f: *const c_void) -> Cb {
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
    /// The request memory of the worker it was posted on, for [`release`].
    source: *const ReqSource,
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

/// The request memory of one worker: its context's pool and, in front of it for a worker
/// whose application serializes its calls (any thread mode but `UCS_THREAD_MODE_MULTI`), a
/// free list of its own. Every header keeps the address of the source it came from, for
/// [`release`]. A struct the worker holds, not a trait it implements: rustc exports from
/// the rlib whatever the `#[inline]` methods of a trait impl call, and the small-message
/// path then reached the pool's out-of-line path through the GOT.
#[derive(Debug)]
pub(crate) struct ReqSource {
    /// The worker is not in `UCS_THREAD_MODE_MULTI`: its requests get [`F_SERIAL`], and
    /// memory released on it goes on `free`.
    serial: bool,
    /// Request memory freed on this worker, reused by its next operations without the
    /// context pool's lock (serial mode only, where the application makes one call on the
    /// worker at a time; UCX too keeps its requests per worker). Handed back to the pool
    /// when the worker is destroyed ([`give_back`](Self::give_back)). A list threaded
    /// through the freed headers themselves (`ReqHdr::id` holds the next), so that taking
    /// and giving back is two loads and a store.
    free: Cell<*mut ReqHdr>,
    /// The context's pool.
    pool: *const Pool,
}

impl ReqSource {
    /// The request memory of a worker of the context whose pool is `pool`.
    ///
    /// # Safety
    /// `pool` outlives the source (a context outlives its workers: `ucp_cleanup` comes
    /// after `ucp_worker_destroy`).
    pub(crate) unsafe fn new(pool: &Pool, serial: bool) -> ReqSource {
        ReqSource {
            serial,
            free: Cell::new(std::ptr::null_mut()),
            pool,
        }
    }

    fn pool(&self) -> &Pool {
        // SAFETY: `new`'s contract.
        unsafe { &*self.pool }
    }

    /// Request memory for an operation on this worker: its own free list first. Inlined
    /// with [`alloc`] into each post (a receive in an MPI window: 234 -> 218 instructions,
    /// callgrind, 2026-11-27); the pool's lock stays out of line.
    #[inline(always)]
    fn get(&self) -> Option<*mut ReqHdr> {
        if self.serial {
            if let Some(h) = self.take_listed() {
                return Some(h);
            }
        }
        self.get_pool()
    }

    /// [`get`](Self::get) from the context's pool (its lock), out of line.
    #[inline(never)]
    fn get_pool(&self) -> Option<*mut ReqHdr> {
        self.pool().get()
    }

    /// The next header of the free list, if any.
    #[inline(always)]
    fn take_listed(&self) -> Option<*mut ReqHdr> {
        let h = self.free.get();
        if h.is_null() {
            return None;
        }
        // SAFETY: the list holds only released headers of this source's pool, each put
        // there once by `put`, which wrote the next one's address into its `id`; nothing
        // else touches a released header.
        self.free.set(unsafe { (*h).id } as *mut ReqHdr);
        Some(h)
    }

    /// Takes back request memory released on this worker.
    ///
    /// # Safety
    /// `h` came from this source's `get`, is released, and is not used again until handed
    /// out anew.
    #[inline]
    unsafe fn put(&self, h: *mut ReqHdr) {
        if self.serial {
            // SAFETY: per the contract, the header's memory is ours and unused until `get`
            // hands it out again.
            unsafe { (*h).id = self.free.get() as u64 };
            self.free.set(h);
        } else {
            self.pool().put(h);
        }
    }

    /// Hands the free list back to the pool (its worker is being destroyed).
    pub(crate) fn give_back(&self) {
        while let Some(h) = self.take_listed() {
            self.pool().put(h);
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

/// A new request for an operation posted on the worker whose request memory is `src`: in
/// the application's memory when it passed some, else in the worker's.
///
/// # Safety
/// `user_req`, when not NULL, points `HDR` bytes past writable memory the application
/// reserved for the request header.
#[inline(always)]
pub(crate) unsafe fn alloc(
    src: &ReqSource,
    user_req: *mut c_void,
    cb: Cb,
    user_data: *mut c_void,
) -> Option<*mut ReqHdr> {
    let serial = if src.serial { F_SERIAL } else { 0 };
    let (h, flags) = if user_req.is_null() {
        (src.get()?, serial)
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
            source: src,
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
/// `h` came from `alloc` on `src` (with application memory exactly when `user`) and nobody
/// else has seen it.
pub(crate) unsafe fn discard(src: &ReqSource, h: *mut ReqHdr, user: bool) {
    // SAFETY: per the contract.
    unsafe { (*h).magic.store(MAGIC_FREE, Ordering::Release) };
    if !user {
        // SAFETY: per the contract, memory of `src` that nobody else has seen.
        unsafe { src.put(h) };
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
        // SAFETY: a request is released before its worker, which holds its source, is
        // destroyed (as in UCX, whose requests are memory of their worker's pool); the
        // memory came from that source (`alloc`).
        unsafe { (*hd.source).put(h) };
    }
}

/// The status a live request reports, and its info once completed.
///
/// # Safety
/// `h` is a live header.
pub(crate) unsafe fn status_of(h: *mut ReqHdr) -> (Status, ucp_tag_recv_info_t) {
    // SAFETY: per the contract.
    let hd = unsafe { &*h };
    if hd.flags.load(Ordering::Acquire) & F_DONE == 0 {
        return (Status::InProgress, ucp_tag_recv_info_t::default());
    }
    let s = Status::from_code(hd.status.load(Ordering::Relaxed) as i8).unwrap_or(Status::IoError);
    (s, hd.info)
}

/// `ucp_request_free` (`keep_cb` false) / `ucp_request_release` (true).
///
/// # Safety
/// `req` is NULL, an error code or a request pointer of this library (checked by magic).
pub(crate) unsafe fn free(req: *mut c_void, keep_cb: bool) {
    // SAFETY: per the contract.
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
