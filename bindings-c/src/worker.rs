//! `ucp_worker_h`: the Rust [`Worker`] behind a mutex, and the dispatch of everything that
//! calls back into the application.
//!
//! Module cycle: `context`, `worker` and `ep` are the three handles of the C API and
//! name each other as their objects do: a context lists its workers and maps its memory
//! on each, a worker knows its context and owns its endpoints' handles, an endpoint
//! knows its worker.
//!
//! The mutex is taken by every export that touches the worker and is never held while
//! application code runs: `ucp_worker_progress` progresses the worker, moves the finished
//! requests, endpoint errors, connection requests and arrived active messages out of it,
//! unlocks, and only then calls the callbacks. A callback may therefore call any export,
//! on the same worker too (post, free, receive AM data, even progress).
//!
//! Active messages reach the application's handlers here too ([`dispatch_am`]): the `ucp`
//! handler that `am` installs only queues the event. Eager data is passed in place; with
//! `UCP_AM_FLAG_PERSISTENT_DATA` and a callback returning `UCS_INPROGRESS`, the buffer is
//! kept until `ucp_am_data_release`. Rendezvous data is passed as a descriptor
//! ([`AmDesc`]) for `ucp_am_recv_data_nbx`; one the callback neither receives nor keeps
//! (`UCS_INPROGRESS`) is released when it returns.

use std::cell::{RefCell, RefMut};
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_int, c_uint, c_void, CStr};
use std::sync::{Arc, Mutex, MutexGuard};

use ucp::{AmRndv, ConnRequest, EpHandle, ReqId, Worker};
use ucs::{Status, UcsResult};

use crate::context::{fput, malloc_copy, write_name, CContext};
use crate::ep::{handle_of, CEp};
use crate::request::{self, user_ptr, Cb, ReqHdr, ReqSource};
use crate::types::*;
use crate::{code, guard};

const WORKER_MAGIC: u64 = 0x5275_6378_576b_7221;
/// Worker addresses we hand out: magic u32, body length u32, the `ucp` address.
pub(crate) const ADDR_MAGIC: u32 = 0x4452_5852; // "RXRD"
/// Longest address or key blob accepted from the application.
pub(crate) const MAX_BLOB: usize = 1 << 20;

/// An AM handler the application registered.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AmH {
    pub(crate) cb: AmCb,
    pub(crate) arg: *mut c_void,
    pub(crate) flags: u32,
}

/// Which interface an AM handler has.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AmCb {
    /// `ucp_worker_set_am_recv_handler`'s `ucp_am_recv_callback_t`.
    Recv(RecvCb),
    /// The deprecated `ucp_worker_set_am_handler`'s `ucp_am_callback_t`.
    Legacy(LegacyCb),
}

/// `ucp_am_recv_callback_t`.
type RecvCb = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    usize,
    *mut c_void,
    usize,
    *const ucp_am_recv_param_t,
) -> ucs_status_ret_t;

/// `ucp_am_callback_t`.
type LegacyCb =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void, c_uint) -> ucs_status_ret_t;

/// A listener's connection handler.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnH {
    pub(crate) cb: ucp_listener_conn_callback_t,
    pub(crate) arg: *mut c_void,
}

/// Something to tell the application, collected under the lock.
#[derive(Debug)]
pub(crate) enum Event {
    Req(usize, Status, ucp_tag_recv_info_t),
    EpErr(EpHandle, Status),
    Conn(ConnRequest),
}

/// What posting an operation gave on `ucp`'s side (the closure of [`CWorker::post`]).
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Completed at once, with this info (receives).
    Done(ucp_tag_recv_info_t),
    /// Running.
    Req(ReqId),
}

/// What [`CWorker::post`] made of an operation.
#[derive(Debug)]
pub(crate) enum Posted {
    /// Still running: the request pointer for the application, subscribed to the
    /// operation's completion.
    Running(*mut c_void),
    /// Ended in the call, or never started: its status and what a receive got.
    Ended(Status, ucp_tag_recv_info_t),
}

/// State behind the worker's lock.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) w: Worker,
    /// Endpoint handles (`*mut CEp`) by `ucp` endpoint.
    pub(crate) eps: HashMap<u32, usize>,
    pub(crate) am: Vec<Option<AmH>>,
    /// Eager AM data the application kept (`UCS_INPROGRESS`), and stream data handed out
    /// by `ucp_stream_recv_data_nb`, by address, until released.
    pub(crate) held: HashMap<usize, Vec<u8>>,
    /// Listeners (`*const CListener`), their handlers and bound addresses.
    pub(crate) listeners: Vec<(usize, ConnH, std::net::SocketAddr)>,
    /// Events collected and not yet dispatched (reused buffer).
    pub(crate) events: Vec<Event>,
    /// Requests that finished inside the call that posted them but report it at the next
    /// progress, as UCX's do (`Post::defer_imm`): request header and status.
    pub(crate) deferred: Vec<(usize, Status, ucp_tag_recv_info_t)>,
    /// The buffer `progress` takes finished requests into, all at once and without a copy
    /// (it and the worker's queue trade places).
    pub(crate) done: Vec<ucp::Completion>,
}

/// `ucp_worker_h`.
#[derive(Debug)]
pub struct CWorker {
    magic: u64,
    ctx: *const CContext,
    inner: State,
    pub(crate) uuid: u64,
    pub(crate) thread_mode: c_int,
    pub(crate) name: String,
    /// Active messages queued by the `ucp` handler, dispatched after progress.
    pub(crate) am_queue: Arc<AmQueue>,
    /// Request memory of this worker: its context's pool, and its own free list in front
    /// of it in SINGLE and SERIALIZED mode.
    pub(crate) reqs: ReqSource,
    /// Wakes the worker from any thread without its lock (`ucp_worker_signal`).
    signaler: ucp::Signaler,
    /// A panic unwound through the worker's state (caught at the C boundary): whatever it
    /// left is not trusted, and every later call on the worker fails.
    broken: std::sync::atomic::AtomicBool,
    /// The worker's thread shares its CPU (`ucp::Worker::cpu_shared`, copied after each
    /// full progress call; SINGLE and SERIALIZED mode): `ucp_worker_progress` then answers
    /// an empty poll before it enters the message path (`poll_idle`).
    idle_first: std::cell::Cell<bool>,
}

/// An active message copied out of `ucp`'s handler for the application's: the header and
/// eager data in buffers of the worker's pool.
#[derive(Debug)]
pub(crate) struct CAm {
    pub(crate) id: u16,
    pub(crate) header: Vec<u8>,
    pub(crate) data: CAmData,
    pub(crate) reply_ep: Option<EpHandle>,
}

#[derive(Debug)]
pub(crate) enum CAmData {
    Eager(Vec<u8>),
    Rndv(AmRndv),
}

/// Active messages waiting for the application's handlers, with their number readable
/// without the lock (an idle `ucp_worker_progress` then takes no second lock).
#[derive(Debug, Default)]
pub(crate) struct AmQueue {
    q: Mutex<VecDeque<CAm>>,
    len: std::sync::atomic::AtomicUsize,
}

impl AmQueue {
    pub(crate) fn push(&self, ev: CAm) {
        let mut q = lock(&self.q);
        q.push_back(ev);
        self.len
            .store(q.len(), std::sync::atomic::Ordering::Release);
    }

    pub(crate) fn pop(&self) -> Option<CAm> {
        if self.is_empty() {
            return None;
        }
        let mut q = lock(&self.q);
        let ev = q.pop_front();
        self.len
            .store(q.len(), std::sync::atomic::Ordering::Release);
        ev
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len.load(std::sync::atomic::Ordering::Acquire) == 0
    }
}

/// The worker's state, behind what its thread mode asks for (ucp.h): in SINGLE and
/// SERIALIZED mode the application makes one call on the worker at a time, so a
/// `RefCell` suffices (an uncontended mutex costs two atomic operations per call, ~6 ns
/// each pair here, several times per message); in MULTI mode a mutex. Application
/// callbacks run outside either, so a call they make on the worker is not re-entrant.
#[derive(Debug)]
enum State {
    Serial(RefCell<Inner>),
    Multi(Mutex<Inner>),
}

enum StateGuard<'a> {
    Serial(RefMut<'a, Inner>),
    Multi(MutexGuard<'a, Inner>),
}

impl State {
    fn new(inner: Inner, thread_mode: c_int) -> State {
        if thread_mode == UCS_THREAD_MODE_MULTI {
            State::Multi(Mutex::new(inner))
        } else {
            State::Serial(RefCell::new(inner))
        }
    }

    #[inline]
    fn lock(&self) -> StateGuard<'_> {
        match self {
            State::Serial(c) => StateGuard::Serial(c.borrow_mut()),
            State::Multi(m) => StateGuard::Multi(lock(m)),
        }
    }
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = Inner;
    #[inline]
    fn deref(&self) -> &Inner {
        match self {
            StateGuard::Serial(g) => g,
            StateGuard::Multi(g) => g,
        }
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Inner {
        match self {
            StateGuard::Serial(g) => g,
            StateGuard::Multi(g) => g,
        }
    }
}

// SAFETY: the raw pointers are to the context (which outlives its workers and is Sync)
// and to application data that the application lets us pass back to it. The mutable
// state is behind a mutex in MULTI mode; in SINGLE and SERIALIZED mode ucp.h makes the
// application serialize its calls on the worker (as UCX itself, which takes no lock in
// those modes, relies on), so the `RefCell` is never used by two threads at once. The
// `Cell`s (the free list of `reqs`, `idle_first`) are written in those modes only; in
// MULTI mode they keep their initial values and are only read. `reqs` points at the
// context's request pool, which is Sync.
unsafe impl Send for CWorker {}
// SAFETY: as above.
unsafe impl Sync for CWorker {}
// SAFETY: Inner's raw pointers are application-owned callback arguments passed back
// verbatim; Inner is only reached through CWorker's state guard.
unsafe impl Send for Inner {}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl CWorker {
    /// # Safety
    /// `p` is NULL or a worker pointer of ours (checked by magic).
    pub(crate) unsafe fn from_ptr<'a>(p: *const c_void) -> Option<&'a CWorker> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the contract.
        let w = unsafe { &*p.cast::<CWorker>() };
        if w.magic != WORKER_MAGIC {
            return None;
        }
        if w.broken.load(std::sync::atomic::Ordering::Acquire) {
            Self::refuse_broken();
            return None;
        }
        Some(w)
    }

    /// Whether `p` is a worker of ours that is not broken, without a word either way.
    ///
    /// # Safety
    /// `p` is NULL or a worker pointer of ours (checked by magic).
    #[inline(always)]
    pub(crate) unsafe fn usable(p: *const CWorker) -> bool {
        // SAFETY: per the contract.
        !p.is_null()
            && unsafe {
                (*p).magic == WORKER_MAGIC
                    && !(*p).broken.load(std::sync::atomic::Ordering::Acquire)
            }
    }

    /// Says once per process that calls on a broken worker fail.
    #[cold]
    fn refuse_broken() {
        use std::io::Write;
        static SAID: std::sync::Once = std::sync::Once::new();
        // Cannot panic (a failed write to stderr is ignored): `ucp_worker_progress` calls
        // this without a guard.
        SAID.call_once(|| {
            let _ = writeln!(
                std::io::stderr(),
                "[rucx] a worker hit an internal error earlier (a panic caught at the C \
                 boundary); every call on it now fails with UCS_ERR_INVALID_PARAM"
            );
        });
    }

    pub(crate) fn ctx(&self) -> &CContext {
        // SAFETY: the context outlives its workers (ucp_cleanup comes after
        // ucp_worker_destroy).
        unsafe { &*self.ctx }
    }

    /// Runs `f` on the worker, locked. (Each mode reaches the worker directly, not through
    /// the guard enum, which would match the mode again on every access; `f` is called
    /// from one place, so that it is inlined once rather than judged too big to copy into
    /// both arms: the receive of `fast.rs` was a call until then, 2026-11-27.)
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut Worker) -> R) -> R {
        self.guarded(|| {
            let mut serial;
            let mut multi;
            let w = match &self.inner {
                State::Serial(c) => {
                    serial = c.borrow_mut();
                    &mut serial.w
                }
                State::Multi(m) => {
                    multi = lock(m);
                    &mut multi.w
                }
            };
            let r = f(w);
            w.wake_if_asleep();
            r
        })
    }

    /// Runs `f`; a panic in it marks this worker broken on its way to the C boundary. The
    /// unwinding machinery costs nothing while nothing panics (a drop guard asking
    /// `thread::panicking()` cost four instructions on every call: a pair of MPI messages
    /// 1240 -> 1229 instructions, 2026-11-28).
    #[inline(always)]
    fn guarded<R>(&self, f: impl FnOnce() -> R) -> R {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(v) => v,
            Err(p) => self.broken_by(p),
        }
    }

    /// Marks this worker broken and goes on unwinding `p`, a panic caught in it.
    #[cold]
    #[inline(never)]
    fn broken_by(&self, p: Box<dyn std::any::Any + Send>) -> ! {
        self.broken
            .store(true, std::sync::atomic::Ordering::Release);
        std::panic::resume_unwind(p)
    }

    /// Runs `f` on the locked state.
    pub(crate) fn with_inner<R>(&self, f: impl FnOnce(&mut Inner) -> R) -> R {
        self.guarded(|| f(&mut self.inner.lock()))
    }

    /// Posts an operation with `f` under the lock. One still running gets a request header
    /// (in `user_req`'s memory when it is not NULL, else the pool's) that reports to `cb`
    /// with `user_data` and records memory type `mem`, subscribed to the completion; one
    /// that ended in the call is handed back as it ended, with no header (`ops::Post`
    /// turns either into UCX's return convention).
    ///
    /// # Safety
    /// `user_req` is NULL or points `request::HDR` bytes past writable memory the
    /// application reserved for the request header (`UCP_OP_ATTR_FIELD_REQUEST`).
    #[inline(always)]
    pub(crate) unsafe fn post(
        &self,
        user_req: *mut c_void,
        cb: Cb,
        user_data: *mut c_void,
        mem: c_int,
        f: impl FnOnce(&mut Worker) -> UcsResult<Outcome>,
    ) -> Posted {
        self.with(|wk| {
            let id = match f(wk) {
                Err(s) => return Posted::Ended(s, ucp_tag_recv_info_t::default()),
                Ok(Outcome::Done(info)) => return Posted::Ended(Status::Ok, info),
                Ok(Outcome::Req(id)) => id,
            };
            let s = wk.request_status(id);
            if s != Status::InProgress {
                let info = info_of(wk.request_info(id));
                wk.request_free(id);
                return Posted::Ended(s, info);
            }
            // SAFETY: user_req as the contract says.
            let Some(h) = (unsafe { request::alloc(&self.reqs, user_req, cb, user_data) }) else {
                wk.request_free(id);
                return Posted::Ended(Status::NoMemory, ucp_tag_recv_info_t::default());
            };
            // SAFETY: h is ours and not yet visible to anyone.
            unsafe {
                (*h).id = id.0;
                (*h).mem_type = mem;
            }
            match wk.request_subscribe(id, h as u64) {
                Status::InProgress => Posted::Running(user_ptr(h)),
                s => {
                    // Cannot happen (checked above under the same lock); report it anyway.
                    wk.request_free(id);
                    Posted::Ended(s, ucp_tag_recv_info_t::default())
                }
            }
        })
    }

    /// `ucp_worker_progress`: progress, then report.
    pub(crate) fn progress(&self) -> usize {
        self.guarded(|| self.progress_once())
    }

    /// `ucp_worker_progress` past its empty-poll check: [`progress`](Self::progress),
    /// guarded at the C boundary.
    #[inline(never)]
    fn progress_c(&self) -> std::ffi::c_uint {
        guard(0, || {
            self.progress().min(std::ffi::c_uint::MAX as usize) as std::ffi::c_uint
        })
    }

    /// [`progress`](Self::progress)'s work. A call with nothing to tell the application
    /// takes one lock and returns; the reporting is out of line, so that an empty poll
    /// pays neither its registers nor its stack frame (an MPI library polls about a hundred
    /// times before it yields the CPU).
    #[inline(always)]
    fn progress_once(&self) -> usize {
        let (n, quiet) = match &self.inner {
            State::Serial(c) => {
                let mut g = c.borrow_mut();
                let n = g.w.progress();
                self.idle_first.set(g.w.cpu_shared());
                (n, self.quiet(&g))
            }
            State::Multi(m) => {
                let mut g = lock(m);
                let n = g.w.progress();
                (n, self.quiet(&g))
            }
        };
        if quiet {
            return n;
        }
        self.report(n)
    }

    /// Whether nothing waits to be told to the application.
    #[inline(always)]
    fn quiet(&self, g: &Inner) -> bool {
        !g.w.has_reports() && self.shim_quiet(&g.deferred)
    }

    /// The shim's own part of [`quiet`](Self::quiet): no active message and no deferred
    /// completion queued (`poll_idle` asks it beside the worker's part).
    #[inline(always)]
    fn shim_quiet(&self, deferred: &[(usize, Status, ucp_tag_recv_info_t)]) -> bool {
        self.am_queue.is_empty() && deferred.is_empty()
    }

    /// `ucp_worker_progress` when it finds nothing, in SINGLE and SERIALIZED mode: true
    /// when there was nothing to report and the worker's poll was empty
    /// (`Worker::progress_idle`); false, having changed nothing, when
    /// [`progress`](Self::progress) must run. It takes no frame for the message path and
    /// cannot panic, so it needs no guard: an MPI library polls about a hundred times
    /// before it yields the CPU, and on a core two ranks share that loop decides when the
    /// peer runs (docs/ucp.md, an empty poll while the CPU is shared).
    #[inline(always)]
    fn poll_idle(&self) -> bool {
        let State::Serial(c) = &self.inner else {
            return false;
        };
        let Ok(mut g) = c.try_borrow_mut() else {
            return false;
        };
        let Inner { w, deferred, .. } = &mut *g;
        w.progress_idle(|| self.shim_quiet(deferred))
    }

    /// Completes and reports what a progress call finished; `n` is what it counted.
    #[inline(never)]
    fn report(&self, n: usize) -> usize {
        let (mut busy, reports) = match &self.inner {
            State::Serial(c) => self.complete_one_by_one(c),
            State::Multi(_) => self.complete_batched(),
        };
        if reports {
            let events = collect(&mut self.inner.lock());
            busy |= !events.is_empty();
            self.dispatch(events);
        }
        let am = if self.am_queue.is_empty() {
            0
        } else {
            dispatch_am(self)
        };
        n + usize::from(busy) + am
    }

    /// Completes the finished requests in SINGLE and SERIALIZED mode, each taken under a
    /// borrow of its own and completed outside it (a callback may call into this worker),
    /// until none is left, what the callbacks finish included: a borrow is a flag, so
    /// there is nothing to batch (in the in-process tag ping-pong, `report` went from 211
    /// to 141 instructions per message, 2026-11-28). Returns whether any
    /// finished, and whether the rarer reports wait.
    #[inline(always)]
    fn complete_one_by_one(&self, c: &RefCell<Inner>) -> (bool, bool) {
        let mut busy = false;
        loop {
            let next = {
                let mut g = c.borrow_mut();
                match g.w.take_completion() {
                    Some(done) => Ok(done),
                    None => Err(g.w.has_reports() || !g.deferred.is_empty()),
                }
            };
            match next {
                Ok(done) => {
                    busy = true;
                    // SAFETY: user_data is the header of a live request of this
                    // worker: it was subscribed with its address and is completed once,
                    // here.
                    unsafe {
                        request::complete(
                            done.user_data as *mut ReqHdr,
                            done.status,
                            info_of(done.info),
                        )
                    };
                }
                Err(reports) => return (busy, reports),
            }
        }
    }

    /// Completes the finished requests in MULTI mode: all those waiting taken under one
    /// lock and completed outside it (a callback may call into this worker); what the
    /// callbacks finish is taken by the next lock, until none is left. Returns whether any
    /// finished, and whether the rarer reports wait.
    fn complete_batched(&self) -> (bool, bool) {
        let mut done = {
            let mut g = self.inner.lock();
            let mut done = std::mem::take(&mut g.done);
            g.w.take_completions(&mut done);
            done
        };
        let mut busy = false;
        let reports = loop {
            busy |= !done.is_empty();
            for c in &done {
                // SAFETY: user_data is the header of a live request of this worker: it
                // was subscribed with its address and is completed once, here.
                unsafe { request::complete(c.user_data as *mut ReqHdr, c.status, info_of(c.info)) };
            }
            done.clear();
            let mut g = self.inner.lock();
            if g.w.has_completions() {
                g.w.take_completions(&mut done);
                continue;
            }
            g.done = done;
            break g.w.has_reports() || !g.deferred.is_empty();
        };
        (busy, reports)
    }

    /// Reports what finished without progressing (after a cancel).
    pub(crate) fn drain_and_dispatch(&self) {
        let events = collect(&mut self.inner.lock());
        self.dispatch(events);
    }

    fn dispatch(&self, mut events: Vec<Event>) {
        for e in events.drain(..) {
            match e {
                Event::Req(h, s, info) => {
                    // SAFETY: h is the header of a live request of this worker: it was
                    // subscribed with its address and is completed once, here.
                    unsafe { request::complete(h as *mut ReqHdr, s, info) };
                }
                Event::EpErr(ep, s) => {
                    // The handler and its argument are read under the lock
                    // (`ucp_ep_modify_nb` changes them under it).
                    let found = self.with_inner(|i| {
                        i.eps.get(&ep.0).copied().map(|p| {
                            // SAFETY: endpoints in the map are live.
                            let e = unsafe { &*(p as *const CEp) };
                            e.failed.store(true, std::sync::atomic::Ordering::Release);
                            (p, e.err.cb, e.err_arg())
                        })
                    });
                    match found {
                        Some((p, Some(cb), arg)) => {
                            // SAFETY: the application's error handler, as ucp.h specifies.
                            unsafe { cb(arg, p as *mut c_void, code(s)) };
                        }
                        Some((_, None, _)) if s == Status::EndpointTimeout => unhandled_timeout(ep),
                        _ => {}
                    }
                }
                Event::Conn(req) => {
                    // The handler of the listener that accepted it.
                    let at = req.listener;
                    let h =
                        self.with_inner(|i| i.listeners.iter().find(|l| l.2 == at).map(|l| l.1));
                    match h.and_then(|h| h.cb.map(|cb| (cb, h.arg))) {
                        Some((cb, arg)) => {
                            let b = Box::into_raw(Box::new(crate::ep::CConnReq::new(req)));
                            // SAFETY: the application's connection handler; it must pass the
                            // request to ucp_ep_create or ucp_listener_reject.
                            unsafe { cb(b.cast(), arg) };
                        }
                        None => self.with(|w| w.reject(req)),
                    }
                }
            }
        }
        // Give the buffer back for the next call (unless a callback's call took it).
        self.with_inner(|i| {
            if i.events.capacity() < events.capacity() {
                i.events = events;
            }
        });
    }
}

// ---- active messages to the application's handlers ----

const DESC_MAGIC: u64 = 0x5275_6378_416d_4421;

/// The descriptor of rendezvous AM data.
#[derive(Debug)]
struct AmDesc {
    magic: u64,
    rndv: Option<AmRndv>,
    in_cb: bool,
}

/// Calls the application's handlers for queued active messages; returns how many.
fn dispatch_am(w: &CWorker) -> usize {
    let mut n = 0;
    loop {
        let ev = w.am_queue.pop();
        let Some(ev) = ev else { break };
        n += 1;
        let h = w.with_inner(|i| i.am.get(ev.id as usize).copied().flatten());
        let Some(AmH { cb, arg, flags }) = h else {
            // No handler: drop the message (and let a rendezvous sender complete).
            match ev.data {
                CAmData::Eager(v) => w.with(|wk| wk.am_recycle(v)),
                CAmData::Rndv(r) => w.with(|wk| wk.am_data_release(r)),
            }
            w.with(|wk| wk.am_recycle(ev.header));
            continue;
        };
        let reply_ep = ev
            .reply_ep
            .map_or(std::ptr::null_mut(), |r| handle_of(w, r));
        let hdr = ev.header;
        match cb {
            AmCb::Recv(cb) => recv_handler(w, cb, arg, flags, &hdr, ev.data, reply_ep),
            AmCb::Legacy(cb) => legacy_handler(w, cb, arg, ev.data, reply_ep),
        }
        w.with(|wk| wk.am_recycle(hdr));
    }
    n
}

/// A message for a handler of `ucp_worker_set_am_recv_handler`.
fn recv_handler(
    w: &CWorker,
    cb: RecvCb,
    arg: *mut c_void,
    flags: u32,
    hdr: &[u8],
    data: CAmData,
    reply_ep: *mut c_void,
) {
    let mut param = ucp_am_recv_param_t {
        recv_attr: 0,
        reply_ep: std::ptr::null_mut(),
    };
    if !reply_ep.is_null() {
        param.recv_attr |= UCP_AM_RECV_ATTR_FIELD_REPLY_EP;
        param.reply_ep = reply_ep;
    }
    let hdr_ptr = if hdr.is_empty() {
        std::ptr::null()
    } else {
        hdr.as_ptr().cast::<c_void>()
    };
    match data {
        CAmData::Eager(mut v) => {
            let persistent = flags & UCP_AM_FLAG_PERSISTENT_DATA != 0;
            if persistent {
                param.recv_attr |= UCP_AM_RECV_ATTR_FLAG_DATA;
            }
            let p = v.as_mut_ptr().cast::<c_void>();
            // SAFETY: the application's AM callback, called as ucp.h specifies; the
            // header and data are valid for the call (and the data after it when kept).
            let s = ucs_status_t::from(unsafe { cb(arg, hdr_ptr, hdr.len(), p, v.len(), &param) });
            if persistent && s == code(Status::InProgress) {
                w.with_inner(|i| {
                    i.held.insert(p as usize, v);
                });
            } else {
                w.with(|wk| wk.am_recycle(v));
            }
        }
        CAmData::Rndv(r) => {
            param.recv_attr |= UCP_AM_RECV_ATTR_FLAG_RNDV;
            let len = r.len();
            let d = Box::into_raw(Box::new(AmDesc {
                magic: DESC_MAGIC,
                rndv: Some(r),
                in_cb: true,
            }));
            // SAFETY: as above; the descriptor is ours, for ucp_am_recv_data_nbx.
            let s =
                ucs_status_t::from(unsafe { cb(arg, hdr_ptr, hdr.len(), d.cast(), len, &param) });
            // SAFETY: d is live: only we free it while in_cb is set.
            let desc = unsafe { &mut *d };
            desc.in_cb = false;
            // Kept (`UCS_INPROGRESS`): freed by ucp_am_recv_data_nbx or
            // ucp_am_data_release.
            if desc.rndv.is_none() || s != code(Status::InProgress) {
                if let Some(r) = desc.rndv.take() {
                    w.with(|wk| wk.am_data_release(r));
                }
                // SAFETY: made by Box::into_raw above; not kept, so freed once here.
                unsafe { free_desc(d) };
            }
        }
    }
}

/// A message for a handler of the deprecated `ucp_worker_set_am_handler`, which always
/// gets the whole message: eager data in place, rendezvous data received first into a
/// buffer of the library's ([`legacy_rndv_done`] then calls the handler). Either may be
/// kept by returning `UCS_INPROGRESS` (`UCP_CB_PARAM_FLAG_DATA` says so) until
/// `ucp_am_data_release`.
fn legacy_handler(
    w: &CWorker,
    cb: LegacyCb,
    arg: *mut c_void,
    data: CAmData,
    reply_ep: *mut c_void,
) {
    match data {
        CAmData::Eager(v) => call_legacy(w, cb, arg, v, reply_ep),
        CAmData::Rndv(r) => {
            let len = r.len();
            let mut buf = Vec::new();
            if buf.try_reserve_exact(len).is_err() {
                ucs::warn_limited!("ucp: active message of {len} bytes dropped: no memory for it");
                w.with(|wk| wk.am_data_release(r));
                return;
            }
            buf.resize(len, 0);
            let ptr = buf.as_mut_ptr();
            let ctx = Box::into_raw(Box::new(LegacyRndv {
                w: std::ptr::from_ref(w),
                cb,
                arg,
                buf,
                reply_ep,
            }));
            // SAFETY: the buffer is the context's, alive until the receive completes.
            let d = ucp::Data::Contig(unsafe { ucp::Buf::from_raw(ptr, len) });
            let rp = ucp::RecvParams::default();
            let cb = Cb::LenNbx(Some(legacy_rndv_done));
            // SAFETY: no application request memory (NULL): the header is the pool's.
            let posted = unsafe {
                w.post(
                    std::ptr::null_mut(),
                    cb,
                    ctx.cast(),
                    UCS_MEMORY_TYPE_HOST,
                    |wk| wk.am_recv_data(r, &d, rp).map(Outcome::Req),
                )
            };
            match posted {
                // Its callback takes it from here.
                Posted::Running(_) => {}
                Posted::Ended(Status::Ok, _) => {
                    // SAFETY: finished in the call: the callback will not run, the context
                    // is ours.
                    unsafe {
                        legacy_rndv_done(std::ptr::null_mut(), code(Status::Ok), len, ctx.cast())
                    };
                }
                Posted::Ended(..) => {
                    ucs::warn_limited!("ucp: active message of {len} bytes lost: receive failed");
                    // SAFETY: made by Box::into_raw above, and the receive never started.
                    drop(unsafe { Box::from_raw(ctx) });
                }
            }
        }
    }
}

/// Rendezvous data on its way to a deprecated AM handler.
struct LegacyRndv {
    w: *const CWorker,
    cb: LegacyCb,
    arg: *mut c_void,
    buf: Vec<u8>,
    reply_ep: *mut c_void,
}

/// The receive for a deprecated AM handler finished: the handler gets the data.
///
/// # Safety
/// `ctx` from [`legacy_handler`], passed once; `req` NULL or the receive's request.
unsafe extern "C" fn legacy_rndv_done(
    req: *mut c_void,
    status: ucs_status_t,
    _len: usize,
    ctx: *mut c_void,
) {
    // SAFETY: per the contract.
    let c = unsafe { Box::from_raw(ctx.cast::<LegacyRndv>()) };
    if !req.is_null() {
        // SAFETY: our own request (from `CWorker::post`), freed once.
        unsafe { request::free(req, false) };
    }
    // SAFETY: the worker outlives its requests (destroying it completes them first).
    let w = unsafe { &*c.w };
    if status != code(Status::Ok) {
        ucs::warn_limited!("ucp: active message lost: its data did not arrive ({status})");
        return;
    }
    call_legacy(w, c.cb, c.arg, c.buf, c.reply_ep);
}

/// Calls a deprecated AM handler with the whole message in `v`.
fn call_legacy(w: &CWorker, cb: LegacyCb, arg: *mut c_void, mut v: Vec<u8>, reply_ep: *mut c_void) {
    let p = v.as_mut_ptr().cast::<c_void>();
    // SAFETY: the application's callback, called as ucp.h's ucp_am_callback_t; the data
    // is valid for the call, and after it if kept.
    let s = ucs_status_t::from(unsafe { cb(arg, p, v.len(), reply_ep, UCP_CB_PARAM_FLAG_DATA) });
    if s == code(Status::InProgress) {
        w.with_inner(|i| {
            i.held.insert(p as usize, v);
        });
    } else {
        w.with(|wk| wk.am_recycle(v));
    }
}

/// # Safety
/// `d` from [`dispatch_am`], freed once.
unsafe fn free_desc(d: *mut AmDesc) {
    // SAFETY: per the contract.
    unsafe {
        (*d).magic = 0;
        drop(Box::from_raw(d));
    }
}

/// Takes the rendezvous data out of a descriptor; frees the descriptor unless its callback
/// is still running (then `dispatch_am` frees it).
///
/// # Safety
/// `p` is NULL or a descriptor passed to an AM callback, not yet consumed.
pub(crate) unsafe fn take_desc(p: *mut c_void) -> Option<AmRndv> {
    if p.is_null() {
        return None;
    }
    let d = p.cast::<AmDesc>();
    // SAFETY: per the contract (checked by magic).
    let desc = unsafe { &mut *d };
    if desc.magic != DESC_MAGIC {
        return None;
    }
    let r = desc.rndv.take();
    if !desc.in_cb {
        // SAFETY: kept past its callback: the application's consumption ends it.
        unsafe { free_desc(d) };
    }
    r
}

/// A receive's tag and length as `ucp.h` reports them.
pub(crate) fn info_of(i: Option<ucp::tag::TagInfo>) -> ucp_tag_recv_info_t {
    i.map_or_else(ucp_tag_recv_info_t::default, |i| ucp_tag_recv_info_t {
        sender_tag: i.sender_tag,
        length: i.length,
    })
}

/// A peer whose host stopped answering (`UCS_ERR_ENDPOINT_TIMEOUT`: a cut link, a host
/// gone), on an endpoint the application gave no error handler, as MPI libraries create
/// theirs: the error is fatal, as an error nobody handles is in UCX's transports. The
/// requests bound to the endpoint have failed already, but a tagged receive is bound to
/// none, so a process waiting for the peer's messages would wait for ever (docs/ucp.md,
/// peer failure).
#[cold]
fn unhandled_timeout(ep: EpHandle) -> ! {
    log::error!(
        "ucp: endpoint {}: the peer's host stopped answering (endpoint timeout) and no \
         error handler is installed: aborting",
        ep.0
    );
    std::process::abort()
}

/// Moves what is to be reported out of the worker.
fn collect(g: &mut Inner) -> Vec<Event> {
    let mut ev = std::mem::take(&mut g.events);
    for (h, s, info) in g.deferred.drain(..) {
        ev.push(Event::Req(h, s, info));
    }
    while let Some(c) = g.w.take_completion() {
        ev.push(Event::Req(c.user_data as usize, c.status, info_of(c.info)));
    }
    while let Some((ep, s)) = g.w.poll_ep_error() {
        ev.push(Event::EpErr(ep, s));
    }
    if !g.listeners.is_empty() {
        while let Some(r) = g.w.poll_conn_request() {
            ev.push(Event::Conn(r));
        }
    }
    ev
}

/// # Safety
/// `context` ours; `params` readable; `worker_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_create(
    context: *mut CContext,
    params: *const ucp_worker_params_t,
    worker_p: *mut *mut CWorker,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(c) = (unsafe { CContext::from_ptr(context.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if params.is_null() || worker_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable by contract; field_mask first.
        let p = unsafe { &*params };
        if p.field_mask & !UCP_WORKER_PARAM_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        let thread_mode = if p.field_mask & UCP_WORKER_PARAM_FIELD_THREAD_MODE != 0 {
            if !(UCS_THREAD_MODE_SINGLE..=UCS_THREAD_MODE_MULTI).contains(&p.thread_mode) {
                return code(Status::InvalidParam);
            }
            p.thread_mode
        } else {
            UCS_THREAD_MODE_SINGLE
        };
        let name =
            (p.field_mask & UCP_WORKER_PARAM_FIELD_NAME != 0 && !p.name.is_null()).then(|| {
                // SAFETY: a C string by contract.
                unsafe { CStr::from_ptr(p.name) }
                    .to_string_lossy()
                    .into_owned()
            });
        // The worker a key packed before this call made (`context::early_worker`): it is
        // this one, already listed and mapped.
        let early = lock(&c.early).take();
        if let Some(raw) = early {
            // SAFETY: writable (checked non-NULL).
            unsafe { *worker_p = raw as *mut CWorker };
            return code(Status::Ok);
        }
        let cw = match new_cworker(c, thread_mode, name) {
            Ok(w) => w,
            Err(s) => return code(s),
        };
        // Map the context's regions on the new worker, then publish it.
        let mems = lock(&c.mems);
        for &m in mems.iter() {
            // SAFETY: listed regions are live (removed under this lock before freeing).
            let m = unsafe { &*(m as *const crate::context::CMem) };
            if let Err(s) = m.map_on(&cw) {
                return code(s);
            }
        }
        let raw = Box::into_raw(cw);
        lock(&c.workers).push(raw as usize);
        drop(mems);
        // SAFETY: writable (checked non-NULL).
        unsafe { *worker_p = raw };
        code(Status::Ok)
    })
}

/// A worker of context `c`, not yet listed in it.
pub(crate) fn new_cworker(
    c: &CContext,
    thread_mode: c_int,
    name: Option<String>,
) -> Result<Box<CWorker>, Status> {
    let w = Worker::new(&c.ctx).map_err(|e| {
        eprintln!("[rucx] ucp_worker_create: {e}");
        Status::from(e)
    })?;
    let uuid = ucp::address::WorkerAddress::decode(w.address())
        .map(|a| a.uuid)
        .unwrap_or(0);
    let signaler = w.signaler();
    Ok(Box::new(CWorker {
        magic: WORKER_MAGIC,
        ctx: c as *const CContext,
        inner: State::new(
            Inner {
                w,
                eps: HashMap::new(),
                am: Vec::new(),
                held: HashMap::new(),
                deferred: Vec::new(),
                done: Vec::new(),
                listeners: Vec::new(),
                events: Vec::with_capacity(64),
            },
            thread_mode,
        ),
        uuid,
        thread_mode,
        name: name.unwrap_or_else(|| format!("rucx:{}", std::process::id())),
        am_queue: Arc::new(AmQueue::default()),
        // SAFETY: the context outlives its workers (ucp_cleanup comes after
        // ucp_worker_destroy).
        reqs: unsafe { ReqSource::new(&c.pool, thread_mode != UCS_THREAD_MODE_MULTI) },
        idle_first: std::cell::Cell::new(false),
        signaler,
        broken: std::sync::atomic::AtomicBool::new(false),
    }))
}

/// # Safety
/// `worker` ours, not used after.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_destroy(worker: *mut CWorker) {
    guard((), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return;
        };
        let c = w.ctx();
        if std::env::var_os("RUCX_STATS").is_some_and(|v| v == "1") {
            // The worker's protocol counters, for finding out what a program's traffic
            // took (UCX's statistics are the model: `UCX_STATS_DEST`).
            let (st, tls) = w.with(|wk| (wk.stats(), wk.transport_counters()));
            let line: Vec<String> = st
                .counters()
                .into_iter()
                .chain(tls.into_iter().flat_map(|(_, c)| c))
                .filter(|(_, v)| *v > 0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            // One write, so that lines of processes sharing a stderr do not interleave.
            let msg = format!(
                "[rucx {}] worker statistics: {}\n",
                std::process::id(),
                line.join(", ")
            );
            let _ = std::io::Write::write_all(&mut std::io::stderr(), msg.as_bytes());
        }
        {
            let mems = lock(&c.mems);
            lock(&c.workers).retain(|&p| p != worker as usize);
            for &m in mems.iter() {
                // SAFETY: listed regions are live.
                let m = unsafe { &*(m as *const crate::context::CMem) };
                let mut regs = lock(&m.regs);
                regs.retain(|(p, h)| {
                    if *p == worker as usize {
                        let _ = w.with(|wk| wk.mem_unmap(*h));
                        false
                    } else {
                        true
                    }
                });
            }
        }
        let eps: Vec<usize> = w.with_inner(|i| i.eps.drain().map(|(_, p)| p).collect());
        for p in eps {
            // SAFETY: the worker owns the endpoint handles still in its map; each is freed
            // once (drained from the map).
            unsafe { CEp::free(p as *mut CEp) };
        }
        let listeners: Vec<usize> = w.with_inner(|i| i.listeners.drain(..).map(|l| l.0).collect());
        for l in listeners {
            // SAFETY: as for endpoints.
            unsafe { crate::ep::CListener::free(l as *mut crate::ep::CListener) };
        }
        w.reqs.give_back();
        // SAFETY: made by Box::into_raw in ucp_worker_create, unlisted above; the magic is
        // cleared so that a second destroy is refused.
        unsafe {
            (*worker).magic = 0;
            drop(Box::from_raw(worker));
        }
    })
}

/// # Safety
/// `worker` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_progress(worker: *mut CWorker) -> std::ffi::c_uint {
    // No guard here: this part cannot panic, and without a landing pad an empty poll needs
    // no stack frame (docs/ucp.md); the rest is guarded in `progress_c`.
    // SAFETY: forwarded contract.
    let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
        return 0;
    };
    if w.idle_first.get() && w.poll_idle() {
        return 0;
    }
    w.progress_c()
}

/// # Safety
/// `worker` ours; out pointers writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_address(
    worker: *mut CWorker,
    address_p: *mut *mut c_void,
    address_length_p: *mut usize,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if address_p.is_null() || address_length_p.is_null() {
            return code(Status::InvalidParam);
        }
        let blob = address_blob(w);
        let p = malloc_copy(&blob);
        if p.is_null() {
            return code(Status::NoMemory);
        }
        // SAFETY: writable (checked non-NULL).
        unsafe {
            *address_p = p;
            *address_length_p = blob.len();
        }
        code(Status::Ok)
    })
}

fn address_blob(w: &CWorker) -> Vec<u8> {
    w.with(|wk| {
        let a = wk.address();
        let mut v = Vec::with_capacity(8 + a.len());
        v.extend_from_slice(&ADDR_MAGIC.to_le_bytes());
        v.extend_from_slice(&(a.len() as u32).to_le_bytes());
        v.extend_from_slice(a);
        v
    })
}

/// Reads a framed blob (magic, length, body) the application passes by pointer only.
///
/// # Safety
/// `p` points at a blob made by this library (8 header bytes, then the body).
pub(crate) unsafe fn read_blob<'a>(p: *const c_void, magic: u32) -> Option<&'a [u8]> {
    if p.is_null() {
        return None;
    }
    let mut hdr = [0u8; 8];
    // SAFETY: per the contract, 8 header bytes are readable.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), hdr.as_mut_ptr(), 8) };
    let m = u32::from_le_bytes([hdr[0], hdr[1], hdr[2], hdr[3]]);
    let len = u32::from_le_bytes([hdr[4], hdr[5], hdr[6], hdr[7]]) as usize;
    if m != magic || len > MAX_BLOB {
        return None;
    }
    // SAFETY: per the contract, the body of `len` bytes follows the header.
    Some(unsafe { std::slice::from_raw_parts(p.cast::<u8>().add(8), len) })
}

/// # Safety
/// `address` from `ucp_worker_get_address`/`ucp_worker_query`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_release_address(_worker: *mut CWorker, address: *mut c_void) {
    // SAFETY: malloc'ed by us (free(NULL) is a no-op).
    guard((), || unsafe { libc::free(address) })
}

/// # Safety
/// `address` one of ours; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_address_query(
    address: *mut c_void,
    attr: *mut ucp_worker_address_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: forwarded contract.
        let Some(body) = (unsafe { read_blob(address, ADDR_MAGIC) }) else {
            return code(Status::InvalidParam);
        };
        // SAFETY: writable by contract.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_WORKER_ADDRESS_ATTR_FIELD_UID != 0 {
            return code(Status::InvalidParam);
        }
        match ucp::address::WorkerAddress::decode(body) {
            Ok(d) => {
                if a.field_mask & UCP_WORKER_ADDRESS_ATTR_FIELD_UID != 0 {
                    a.worker_uid = d.uuid;
                }
                code(Status::Ok)
            }
            Err(s) => code(s),
        }
    })
}

/// # Safety
/// `worker` ours; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_query(
    worker: *mut CWorker,
    attr: *mut ucp_worker_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: writable by contract.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_WORKER_ATTR_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        let has = |b: u64| a.field_mask & b != 0;
        if has(UCP_WORKER_ATTR_FIELD_THREAD_MODE) {
            a.thread_mode = w.thread_mode;
        }
        if has(UCP_WORKER_ATTR_FIELD_ADDRESS) {
            let blob = address_blob(w);
            let p = malloc_copy(&blob);
            if p.is_null() {
                return code(Status::NoMemory);
            }
            a.address = p;
            a.address_length = blob.len();
        }
        if has(UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER) {
            a.max_am_header = ucp::worker::am::MAX_AM_HEADER;
        }
        if has(UCP_WORKER_ATTR_FIELD_NAME) {
            write_name(&mut a.name, &w.name);
        }
        if has(UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING) {
            a.max_debug_string = 128;
        }
        code(Status::Ok)
    })
}

/// # Safety
/// `worker` ours; `stream` an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_print_info(worker: *mut CWorker, stream: *mut c_void) {
    guard((), || {
        // SAFETY: forwarded contract.
        if let Some(w) = unsafe { CWorker::from_ptr(worker.cast()) } {
            let s = w.with(|wk| {
                format!(
                    "#\n# UCP worker '{}' (Rucx)\n#   transports: {}\n",
                    w.name,
                    wk.transports().join(", ")
                )
            });
            fput(stream, &s);
        }
    })
}

/// # Safety
/// `worker` ours; `fd` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_get_efd(worker: *mut CWorker, fd: *mut c_int) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if fd.is_null() {
            return code(Status::InvalidParam);
        }
        match w.with(|wk| wk.event_fd()) {
            Some(f) => {
                // SAFETY: writable (checked non-NULL).
                unsafe { *fd = f };
                code(Status::Ok)
            }
            None => code(Status::Unsupported),
        }
    })
}

fn has_pending(w: &CWorker) -> bool {
    !w.am_queue.is_empty() || w.with_inner(|i| !i.deferred.is_empty())
}

/// # Safety
/// `worker` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_arm(worker: *mut CWorker) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if has_pending(w) {
            return code(Status::Busy);
        }
        match w.with(|wk| wk.arm()) {
            Ok(()) => code(Status::Ok),
            Err(s) => code(s),
        }
    })
}

/// # Safety
/// `worker` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait(worker: *mut CWorker) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if has_pending(w) {
            return code(Status::Ok);
        }
        // Without the lock while sleeping: arm, then wait on the descriptor.
        match w.with(|wk| wk.arm().map(|()| wk.event_fd())) {
            Ok(Some(fd)) => {
                let mut pfd = libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd.
                unsafe { libc::poll(&mut pfd, 1, -1) };
                code(Status::Ok)
            }
            Ok(None) | Err(Status::Busy) => code(Status::Ok),
            Err(s) => code(s),
        }
    })
}

/// # Safety
/// `worker` ours; `address` readable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_wait_mem(worker: *mut CWorker, _address: *mut c_void) {
    guard((), || {
        // UCX may return from here spuriously; progressing once keeps RMA emulated by
        // messages moving while the caller polls memory.
        // SAFETY: forwarded contract.
        if let Some(w) = unsafe { CWorker::from_ptr(worker.cast()) } {
            w.progress();
        }
        std::hint::spin_loop();
    })
}

/// # Safety
/// `worker` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_signal(worker: *mut CWorker) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        // From any thread: the signal needs no lock (ucp.h: "thread safe").
        match w.signaler.signal() {
            Ok(()) => code(Status::Ok),
            Err(s) => code(s),
        }
    })
}

/// # Safety
/// `worker` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_fence(worker: *mut CWorker) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        match w.with(|wk| wk.fence(None)) {
            Ok(()) => code(Status::Ok),
            Err(s) => code(s),
        }
    })
}

/// Endpoints whose stream has data to receive, each reported once per arrival of data
/// while none waited (as UCX's ready list); returns how many were written, or an error.
///
/// # Safety
/// `worker` ours; `poll_eps` writable for `max_eps` entries.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_worker_poll(
    worker: *mut CWorker,
    poll_eps: *mut ucp_stream_poll_ep_t,
    max_eps: usize,
    flags: std::ffi::c_uint,
) -> isize {
    guard(code(Status::InvalidParam) as isize, || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam) as isize;
        };
        if flags != 0 || (poll_eps.is_null() && max_eps > 0) {
            return code(Status::InvalidParam) as isize;
        }
        let ready = w.with(|wk| wk.stream_poll(max_eps));
        for (k, h) in ready.iter().enumerate() {
            let ep = crate::ep::handle_of(w, *h);
            // SAFETY: handles from `handle_of` are live endpoints of this worker.
            let user_data =
                unsafe { (*ep.cast::<CEp>()).user_data }.unwrap_or(std::ptr::null_mut());
            // SAFETY: k < max_eps (stream_poll returns at most that many); writable by
            // contract.
            unsafe {
                poll_eps.add(k).write(ucp_stream_poll_ep_t {
                    ep,
                    user_data,
                    flags: 0,
                    reserved: [0; 16],
                });
            }
        }
        ready.len() as isize
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::ucp_init_version;

    /// A panic caught at the C boundary while a worker's state was borrowed leaves the
    /// worker unusable: later calls on it fail instead of trusting the state the panic
    /// left.
    #[test]
    fn a_panic_inside_the_worker_breaks_it_for_good() {
        let params = ucp_params_t {
            field_mask: UCP_PARAM_FIELD_FEATURES,
            features: 1, // UCP_FEATURE_TAG
            request_size: 0,
            request_init: None,
            request_cleanup: None,
            tag_sender_mask: 0,
            mt_workers_shared: 0,
            estimated_num_eps: 0,
            estimated_num_ppn: 0,
            name: std::ptr::null(),
        };
        let mut ctx = std::ptr::null_mut();
        // SAFETY: valid params and out pointer.
        let s = unsafe { ucp_init_version(1, 13, &params, std::ptr::null(), &mut ctx) };
        assert_eq!(s, code(Status::Ok));
        // SAFETY: a zeroed worker_params_t with no fields set is valid.
        let wp: ucp_worker_params_t = unsafe { std::mem::zeroed() };
        let mut w = std::ptr::null_mut();
        // SAFETY: our context, readable params, writable out pointer.
        let s = unsafe { ucp_worker_create(ctx.cast(), &wp, &mut w) };
        assert_eq!(s, code(Status::Ok));
        // SAFETY: the worker just made.
        let cw = unsafe { CWorker::from_ptr(w.cast()) }.expect("a live worker");
        assert!(cw.progress() < usize::MAX);
        let r = crate::guard(-1, || cw.with(|_| -> i32 { panic!("a bug, for the test") }));
        assert_eq!(r, -1, "the panic was caught at the boundary");
        // SAFETY: still our worker's memory (not destroyed), now refused.
        assert!(unsafe { CWorker::from_ptr(w.cast()) }.is_none());
        // SAFETY: as above.
        assert_eq!(unsafe { ucp_worker_progress(w) }, 0);
        let mut fd = 0;
        // SAFETY: as above; fd writable.
        let s = unsafe { ucp_worker_get_efd(w, &mut fd) };
        assert_eq!(s, code(Status::InvalidParam));
    }
}
