//! Communication calls: tag, stream, RMA and atomics, in their `_nb`, `_nbi` and `_nbx`
//! forms, and the flushes of workers and endpoints and the closing of endpoints, all
//! through [`Post`], which turns a `ucp` result into UCX's return convention: NULL for
//! immediate success, an error code cast to a pointer, or a request.

use std::ffi::{c_int, c_uint, c_void};

use ucp::{
    AtomicOp, Buf, Data, EpHandle, FlushPoll, RecvParams, ReqId, SendParams, StreamRecv, Worker,
};
use ucs::{Status, UcsResult};

use crate::dt::{contig_size, data};
use crate::ep::{CEp, CRkey};
use crate::request::{self, user_ptr, Cb, CbKind};
use crate::request_api::{ucp_request_check_status, ucp_request_free};
use crate::types::*;
use crate::worker::{info_of, CWorker, Outcome, Posted};
use crate::{code, fast, guard, status_ptr};

/// Where an immediately completed receive reports.
#[derive(Clone, Copy, Debug)]
enum RecvInfo {
    None,
    Tag(*mut ucp_tag_recv_info_t),
    Len(*mut usize),
}

/// How to report one posted operation.
#[derive(Debug)]
pub(crate) struct Post {
    cb: Cb,
    user_data: *mut c_void,
    user_req: *mut c_void,
    /// `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`: a request even for an immediate completion.
    no_imm: bool,
    /// `UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL`: complete at once or fail with NO_RESOURCE.
    pub(crate) force_imm: bool,
    /// `UCP_OP_ATTR_FLAG_FAST_CMPL`: the caller waits for local completion next.
    pub(crate) fast_cmpl: bool,
    recv_info: RecvInfo,
    pub(crate) datatype: ucp_datatype_t,
    pub(crate) flags: u32,
    pub(crate) reply_buffer: *mut c_void,
    /// `ucs_memory_type_t` of the buffer, for `ucp_request_query`.
    mem: c_int,
    /// Finished at once, it still returns a request whose callback runs at the next
    /// `ucp_worker_progress` (`ucp_get_nb`: see `Post::legacy_get`).
    defer_imm: bool,
}

impl Post {
    /// A `_nb` call with callback `cb`.
    pub(crate) fn legacy(cb: Cb) -> Post {
        Post {
            cb,
            user_data: std::ptr::null_mut(),
            user_req: std::ptr::null_mut(),
            no_imm: false,
            force_imm: false,
            fast_cmpl: false,
            recv_info: RecvInfo::None,
            datatype: 1 << UCP_DATATYPE_SHIFT,
            flags: 0,
            reply_buffer: std::ptr::null_mut(),
            mem: UCS_MEMORY_TYPE_HOST,
            defer_imm: false,
        }
    }

    /// `ucp_get_nb`: a get that finished inside the call is still reported through its
    /// request and callback, at the next progress. Charm++'s zero-copy layer (AMPI
    /// migration) depends on that: it records an operation after posting it, so an
    /// acknowledgement arriving from inside the call finds nothing and aborts. Over UCX
    /// 1.13 the same AMPI tests pass, so its gets did not complete inside the call there.
    pub(crate) fn legacy_get(cb: Cb) -> Post {
        Post {
            defer_imm: true,
            ..Post::legacy(cb)
        }
    }

    /// With `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`, an operation that finished inside the call
    /// returns its request and calls back at the next progress, not from inside the call.
    /// For `ucp_am_recv_data_nbx`: over UCX a rendezvous message's data never arrives
    /// inside that call, and UCXX relies on it (it files the request it gets back as in
    /// flight, and a callback that ran before would be lost, the request hanging). Rucx
    /// may finish it in the call (a peer's memory mapped here, or data that came along).
    pub(crate) fn defer_if_no_imm(self) -> Post {
        Post {
            defer_imm: self.defer_imm || self.no_imm,
            ..self
        }
    }

    /// A `_nb` receive: its request is returned (and its callback called) even when it
    /// completes at once (UCX posts them with `UCP_OP_ATTR_FLAG_NO_IMM_CMPL`).
    fn legacy_recv(cb: Cb, dt: ucp_datatype_t) -> Post {
        Post {
            no_imm: true,
            datatype: dt,
            ..Post::legacy(cb)
        }
    }

    /// Reads a `ucp_request_param_t`.
    ///
    /// # Safety
    /// `param` readable.
    pub(crate) unsafe fn nbx(
        param: *const ucp_request_param_t,
        kind: CbKind,
    ) -> Result<Post, Status> {
        if param.is_null() {
            return Err(Status::InvalidParam);
        }
        // SAFETY: readable by contract; op_attr_mask checked before the fields it names.
        let p = unsafe { &*param };
        let m = p.op_attr_mask;
        if m & !UCP_OP_ATTRS != 0 {
            return Err(Status::InvalidParam);
        }
        // The buffer's memory type is detected either way; the hint must name one Rucx
        // moves.
        if m & UCP_OP_ATTR_FIELD_MEMORY_TYPE != 0 {
            mem_type_of(p.memory_type)?;
        }
        let cb = if m & UCP_OP_ATTR_FIELD_CALLBACK != 0 && !p.cb.is_null() {
            // SAFETY: the union member the operation uses, a function pointer of that type.
            unsafe { Cb::from_param(kind, p.cb) }
        } else {
            Cb::None
        };
        let field = |b: u32| m & b != 0;
        let recv_info = if field(UCP_OP_ATTR_FIELD_RECV_INFO) && !p.recv_info.is_null() {
            match kind {
                CbKind::TagRecv => RecvInfo::Tag(p.recv_info.cast()),
                _ => RecvInfo::Len(p.recv_info.cast()),
            }
        } else {
            RecvInfo::None
        };
        Ok(Post {
            cb,
            user_data: if field(UCP_OP_ATTR_FIELD_USER_DATA) {
                p.user_data
            } else {
                std::ptr::null_mut()
            },
            user_req: if field(UCP_OP_ATTR_FIELD_REQUEST) {
                p.request
            } else {
                std::ptr::null_mut()
            },
            no_imm: field(UCP_OP_ATTR_FLAG_NO_IMM_CMPL),
            force_imm: field(UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL),
            fast_cmpl: field(UCP_OP_ATTR_FLAG_FAST_CMPL),
            recv_info,
            datatype: if field(UCP_OP_ATTR_FIELD_DATATYPE) {
                p.datatype
            } else {
                1 << UCP_DATATYPE_SHIFT
            },
            flags: if field(UCP_OP_ATTR_FIELD_FLAGS) {
                p.flags
            } else {
                0
            },
            reply_buffer: if field(UCP_OP_ATTR_FIELD_REPLY_BUFFER) {
                p.reply_buffer
            } else {
                std::ptr::null_mut()
            },
            mem: UCS_MEMORY_TYPE_HOST,
            defer_imm: false,
        })
    }

    /// The common case of `ucp_request_param_t`, read without the general parsing: nothing
    /// but a callback, user data, a contiguous datatype and `NO_IMM_CMPL` (what MPI
    /// libraries and `ucx_perftest` pass on the small-message path). Returns the post and the bytes of
    /// `count` elements at `buffer`, or `None` for anything else (then use [`Post::nbx`]).
    ///
    /// # Safety
    /// `param` NULL or readable; the buffer stays valid until the operation completes.
    #[inline(always)]
    unsafe fn plain_contig(
        param: *const ucp_request_param_t,
        kind: CbKind,
        buffer: *const c_void,
        count: usize,
    ) -> Option<(Post, Data)> {
        // (OpenMPI's pml ucx receives with CALLBACK | NO_IMM_CMPL, and MULTI_SEND, a
        // hint, when built against UCX 1.15 or later.) The small-message path's plain
        // parameters, less request memory and FAST_CMPL, which the general parsing takes.
        // SAFETY: per the contract.
        let p = unsafe { fast::plain(param) }?;
        if p.has(UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FLAG_FAST_CMPL) {
            return None;
        }
        let len = p.bytes(buffer, count)?;
        let post = Post {
            cb: p.cb(kind),
            user_data: p.user_data(),
            no_imm: p.no_imm(),
            ..Post::legacy(Cb::None)
        };
        // SAFETY: per the contract.
        let b = unsafe { Buf::from_raw(buffer.cast_mut().cast(), len) };
        let post = post.with_mem(&Data::Contig(b));
        Some((post, Data::Contig(b)))
    }

    /// Records the memory type of `d` (of a contiguous buffer; host otherwise).
    #[inline]
    pub(crate) fn with_mem(mut self, d: &Data) -> Post {
        if let (Data::Contig(b), true) = (d, ucs::memtype::active()) {
            self.mem = ucs_mem_type(b.mem_type());
        }
        self
    }

    /// Posts with `f` (under the worker's lock) and reports as UCX does.
    pub(crate) fn run(
        self,
        w: &CWorker,
        f: impl FnOnce(&mut Worker) -> UcsResult<Option<ReqId>>,
    ) -> ucs_status_ptr_t {
        self.run_out(w, |wk| {
            f(wk).map(|r| match r {
                Some(id) => Outcome::Req(id),
                None => Outcome::Done(ucp_tag_recv_info_t::default()),
            })
        })
    }

    /// As [`Post::run`], for operations that can report what an immediate completion got.
    pub(crate) fn run_out(
        self,
        w: &CWorker,
        f: impl FnOnce(&mut Worker) -> UcsResult<Outcome>,
    ) -> ucs_status_ptr_t {
        // SAFETY: user_req, when set, is the application's request memory with our header's
        // room in front (UCP_OP_ATTR_FIELD_REQUEST's contract).
        let posted = unsafe { w.post(self.user_req, self.cb, self.user_data, self.mem, f) };
        let (s, info) = match posted {
            Posted::Running(req) => return req,
            Posted::Ended(s, info) => (s, info),
        };
        if s != Status::Ok && s != Status::MessageTruncated {
            return status_ptr(s);
        }
        match self.recv_info {
            // SAFETY: the application's writable info/length (RECV_INFO's contract).
            RecvInfo::Tag(p) => unsafe { *p = info },
            // SAFETY: as above.
            RecvInfo::Len(p) => unsafe { *p = info.length },
            RecvInfo::None => {}
        }
        if self.defer_imm {
            // SAFETY: user_req, when set, is the application's request memory with our
            // header's room in front (UCP_OP_ATTR_FIELD_REQUEST's contract).
            let Some(h) =
                (unsafe { request::alloc(&w.reqs, self.user_req, self.cb, self.user_data) })
            else {
                return status_ptr(Status::NoMemory);
            };
            // Completed by the next ucp_worker_progress (`Inner::deferred`).
            w.with_inner(|i| i.deferred.push((h as usize, s, info)));
            return user_ptr(h);
        }
        let want_req = self.no_imm;
        if !want_req && self.user_req.is_null() {
            return if s == Status::Ok {
                std::ptr::null_mut()
            } else {
                status_ptr(s)
            };
        }
        // A request that is complete already: its callback runs now (without the lock).
        let cb = if want_req { self.cb } else { Cb::None };
        // SAFETY: as above.
        let Some(h) = (unsafe { request::alloc(&w.reqs, self.user_req, cb, self.user_data) })
        else {
            return status_ptr(Status::NoMemory);
        };
        // SAFETY: h is live and completed once, here.
        unsafe { request::complete(h, s, info) };
        if want_req {
            user_ptr(h)
        } else if s == Status::Ok {
            std::ptr::null_mut()
        } else {
            status_ptr(s)
        }
    }
}

const fn send_p(sync: bool) -> SendParams {
    SendParams {
        sync,
        user_data: 0,
        notify: false,
        force_imm: false,
        fast_cmpl: false,
    }
}

const RECV_P: RecvParams = RecvParams {
    user_data: 0,
    notify: false,
    force_imm: false,
};

macro_rules! ep_or_ret {
    ($ep:expr) => {
        // SAFETY: the application passes an endpoint of ours (checked by magic).
        match unsafe { CEp::from_ptr($ep) } {
            Some(x) => x,
            None => return status_ptr(Status::InvalidParam),
        }
    };
}

macro_rules! worker_or_ret {
    ($w:expr) => {
        // SAFETY: the application passes a worker of ours (checked by magic).
        match unsafe { CWorker::from_ptr($w.cast()) } {
            Some(x) => x,
            None => return status_ptr(Status::InvalidParam),
        }
    };
}

macro_rules! nbx_or_ret {
    ($p:expr, $k:expr) => {
        // SAFETY: the application passes a readable ucp_request_param_t.
        match unsafe { Post::nbx($p, $k) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        }
    };
}

macro_rules! data_or_ret {
    ($buf:expr, $count:expr, $dt:expr) => {
        // SAFETY: ucp.h's contract: the data stays valid until the operation completes.
        match unsafe { data($buf, $count, $dt) } {
            Ok(d) => d,
            Err(s) => return status_ptr(s),
        }
    };
}

fn tag_send(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    tag: u64,
    post: Post,
    sync: bool,
) -> ucs_status_ptr_t {
    let (e, w) = ep_or_ret!(ep);
    let d = data_or_ret!(buffer, count, post.datatype);
    let post = post.with_mem(&d);
    let h = e.h;
    let p = SendParams {
        force_imm: post.force_imm,
        fast_cmpl: post.fast_cmpl,
        ..send_p(sync)
    };
    post.run(w, |wk| wk.tag_send(h, &d, tag, p))
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nb(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let mut p = Post::legacy(Cb::Send(cb));
        p.datatype = datatype;
        tag_send(ep, buffer, count, tag, p, false)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_sync_nb(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let mut p = Post::legacy(Cb::Send(cb));
        p.datatype = datatype;
        tag_send(ep, buffer, count, tag, p, true)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nbx(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: ucp.h's contract for this call.
        if let Some(pp) = unsafe { fast::plain(param) } {
            // SAFETY: as above.
            if let Some(r) = unsafe { fast::tag_send(ep, buffer, count, tag, &pp) } {
                return r;
            }
        }
        tag_send_general(ep, buffer, count, tag, param)
    })
}

/// `ucp_tag_send_nbx` past its small-message path: out of line, so that the registers and
/// stack this needs are not saved and set up on every call of the small-message path.
#[inline(never)]
fn tag_send_general(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: ucp.h's contract for this call.
    if let Some((post, d)) = unsafe { Post::plain_contig(param, CbKind::Send, buffer, count) } {
        let (e, w) = ep_or_ret!(ep);
        let h = e.h;
        return post.run(w, |wk| wk.tag_send(h, &d, tag, send_p(false)));
    }
    let p = nbx_or_ret!(param, CbKind::Send);
    tag_send(ep, buffer, count, tag, p, false)
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_sync_nbx(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    tag: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let p = nbx_or_ret!(param, CbKind::Send);
        tag_send(ep, buffer, count, tag, p, true)
    })
}

fn tag_recv(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    tag: u64,
    mask: u64,
    post: Post,
) -> ucs_status_ptr_t {
    let w = worker_or_ret!(worker);
    let d = data_or_ret!(buffer, count, post.datatype);
    let post = post.with_mem(&d);
    let p = RecvParams {
        force_imm: post.force_imm,
        ..RECV_P
    };
    post.run(w, |wk| wk.tag_recv(&d, tag, mask, p).map(Some))
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nb(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    cb: ucp_tag_recv_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let p = Post::legacy_recv(Cb::TagRecv(cb), datatype);
        tag_recv(worker, buffer, count, tag, tag_mask, p)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nbx(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: ucp.h's contract for this call.
        if let Some(pp) = unsafe { fast::plain(param) } {
            // SAFETY: as above.
            if let Some(r) = unsafe { fast::tag_recv(worker, buffer, count, tag, tag_mask, &pp) } {
                return r;
            }
        }
        tag_recv_general(worker, buffer, count, tag, tag_mask, param)
    })
}

/// `ucp_tag_recv_nbx` past its small-message path, out of line (as `tag_send_general`).
#[inline(never)]
fn tag_recv_general(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: ucp.h's contract for this call.
    let plain = unsafe { Post::plain_contig(param, CbKind::TagRecv, buffer, count) };
    if let Some((post, d)) = plain {
        let w = worker_or_ret!(worker);
        return post.run(w, |wk| wk.tag_recv(&d, tag, tag_mask, RECV_P).map(Some));
    }
    let p = nbx_or_ret!(param, CbKind::TagRecv);
    tag_recv(worker, buffer, count, tag, tag_mask, p)
}

/// What an `_nbr` call returns for what the nbx path gave: `UCS_OK` for an immediate
/// completion, `UCS_INPROGRESS` when the application's request reports, or the error.
fn nbr_status(r: ucs_status_ptr_t) -> ucs_status_t {
    if r.is_null() {
        code(Status::Ok)
    } else if crate::ptr_is_err(r) {
        r as isize as ucs_status_t
    } else {
        code(Status::InProgress)
    }
}

/// `ucp_tag_send_nb` into a request the application allocated: `req` has
/// `ucp_context_attr_t::request_size` bytes of room in front of it (as
/// `UCP_OP_ATTR_FIELD_REQUEST`). `UCS_OK` when the send completed at once, `UCS_INPROGRESS`
/// when `req` reports its completion (`ucp_request_check_status`), or an error.
///
/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_send_nbr(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    req: *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if req.is_null() {
            return code(Status::InvalidParam);
        }
        let p = Post {
            user_req: req,
            fast_cmpl: true,
            datatype,
            ..Post::legacy(Cb::None)
        };
        nbr_status(tag_send(ep, buffer, count, tag, p, false))
    })
}

/// `ucp_tag_recv_nb` into a request the application allocated (as
/// [`ucp_tag_send_nbr`]): `UCS_OK` when posted, `req` then reports the completion (and,
/// through `ucp_tag_recv_request_test`, the tag and length); or an error.
///
/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_recv_nbr(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    req: *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if req.is_null() {
            return code(Status::InvalidParam);
        }
        let p = Post {
            user_req: req,
            ..Post::legacy_recv(Cb::None, datatype)
        };
        match nbr_status(tag_recv(worker, buffer, count, tag, tag_mask, p)) {
            s if s == code(Status::InProgress) => code(Status::Ok),
            s => s,
        }
    })
}

/// Message handles of `ucp_tag_probe_nb(.., remove = 0)`: found, but not receivable.
static PROBED: u8 = 0;

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_probe_nb(
    worker: *mut c_void,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
    remove: c_int,
    info: *mut ucp_tag_recv_info_t,
) -> *mut c_void {
    guard(std::ptr::null_mut(), || {
        // SAFETY: a worker of ours (checked by magic).
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return std::ptr::null_mut();
        };
        let r = w.with(|wk| wk.tag_probe(tag, tag_mask, remove != 0));
        // Unmatched: let the worker move (UCX's probe does not progress; callers loop with
        // ucp_worker_progress).
        let Some((ti, msg)) = r else {
            return std::ptr::null_mut();
        };
        if !info.is_null() {
            // SAFETY: the caller's writable info.
            unsafe { *info = info_of(Some(ti)) };
        }
        match msg {
            Some(m) => Box::into_raw(Box::new(m)).cast(),
            None => (&PROBED as *const u8).cast_mut().cast(),
        }
    })
}

fn msg_recv(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    message: *mut c_void,
    post: Post,
) -> ucs_status_ptr_t {
    let w = worker_or_ret!(worker);
    if message.is_null() || message == (&PROBED as *const u8).cast_mut().cast() {
        return status_ptr(Status::InvalidParam);
    }
    let d = data_or_ret!(buffer, count, post.datatype);
    // SAFETY: a message handle from ucp_tag_probe_nb(.., remove = 1), used once: made by
    // Box::into_raw there.
    let m = unsafe { *Box::from_raw(message.cast::<ucp::tag::MessageHandle>()) };
    post.run(w, |wk| wk.tag_msg_recv(&d, m, RECV_P).map(Some))
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_msg_recv_nb(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    message: *mut c_void,
    cb: ucp_tag_recv_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        msg_recv(
            worker,
            buffer,
            count,
            message,
            Post::legacy_recv(Cb::TagRecv(cb), datatype),
        )
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_tag_msg_recv_nbx(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    message: *mut c_void,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let p = nbx_or_ret!(param, CbKind::TagRecv);
        msg_recv(worker, buffer, count, message, p)
    })
}

// ---- stream ----

fn stream_send(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    post: Post,
) -> ucs_status_ptr_t {
    let (e, w) = ep_or_ret!(ep);
    let d = data_or_ret!(buffer, count, post.datatype);
    let h = e.h;
    post.run(w, |wk| wk.stream_send(h, &d, send_p(false)))
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_send_nb(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: ucp_send_callback_t,
    _flags: c_uint,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let mut p = Post::legacy(Cb::Send(cb));
        p.datatype = datatype;
        stream_send(ep, buffer, count, p)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_send_nbx(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let p = nbx_or_ret!(param, CbKind::Send);
        stream_send(ep, buffer, count, p)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_nb(
    ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: ucp_stream_recv_callback_t,
    length: *mut usize,
    flags: c_uint,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        if length.is_null() {
            return status_ptr(Status::InvalidParam);
        }
        let mut p = Post::legacy(Cb::Stream(cb));
        p.datatype = datatype;
        p.recv_info = RecvInfo::Len(length);
        stream_recv(
            ep,
            buffer,
            count,
            flags & UCP_STREAM_RECV_FLAG_WAITALL != 0,
            p,
        )
    })
}

/// A stream receive.
fn stream_recv(
    ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    waitall: bool,
    post: Post,
) -> ucs_status_ptr_t {
    let (e, w) = ep_or_ret!(ep);
    let d = data_or_ret!(buffer, count, post.datatype);
    let h = e.h;
    post.run_out(w, |wk| match wk.stream_recv(h, &d, waitall, RECV_P)? {
        StreamRecv::Done(n) => Ok(Outcome::Done(ucp_tag_recv_info_t {
            sender_tag: 0,
            length: n,
        })),
        StreamRecv::Pending(id) => Ok(Outcome::Req(id)),
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_nbx(
    ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    length: *mut usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let mut p = nbx_or_ret!(param, CbKind::Len);
        let waitall = p.flags & UCP_STREAM_RECV_FLAG_WAITALL != 0;
        if !length.is_null() {
            p.recv_info = RecvInfo::Len(length);
        }
        stream_recv(ep, buffer, count, waitall, p)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_recv_data_nb(
    ep: *mut c_void,
    length: *mut usize,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let (e, w) = ep_or_ret!(ep);
        if length.is_null() {
            return status_ptr(Status::InvalidParam);
        }
        let h = e.h;
        w.with_inner(|i| match i.w.stream_recv_data(h) {
            Ok(Some(v)) => {
                let p = v.as_ptr() as *mut c_void;
                // SAFETY: the caller's writable length.
                unsafe { *length = v.len() };
                i.held.insert(p as usize, v);
                p
            }
            Ok(None) => std::ptr::null_mut(),
            Err(s) => status_ptr(s),
        })
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_stream_data_release(ep: *mut c_void, data: *mut c_void) {
    guard((), || {
        // SAFETY: an endpoint of ours (checked by magic).
        let Some((_, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return;
        };
        w.with_inner(|i| {
            if let Some(v) = i.held.remove(&(data as usize)) {
                i.w.am_recycle(v);
            }
        });
    })
}

// ---- RMA ----

#[derive(Clone, Copy, PartialEq, Eq)]
enum Rma {
    Put,
    Get,
}

fn rma(
    ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    post: Post,
    kind: Rma,
) -> ucs_status_ptr_t {
    let (e, w) = ep_or_ret!(ep);
    // SAFETY: a key of ours (checked by magic).
    let Some(k) = (unsafe { CRkey::from_ptr(rkey) }) else {
        return status_ptr(Status::InvalidParam);
    };
    // Contiguous bytes into or out of a region mapped here, with nothing that asks for a
    // request: a copy in the call (an MPI_Put into an MPI_Win_allocate window).
    if let (Some(len), false, true) = (
        contig_size(post.datatype).and_then(|el| count.checked_mul(el)),
        post.no_imm || post.force_imm || post.defer_imm,
        post.user_req.is_null() && (!buffer.is_null() || count == 0),
    ) {
        let h = e.h;
        // SAFETY: ucp.h's contract: `buffer` holds `count` elements of the datatype (a
        // get's writable), valid for the call, which is all this copy needs.
        let local = unsafe { Buf::from_raw(buffer.cast(), len) };
        let r = w.with(|wk| wk.rma_mapped(h, kind == Rma::Get, local, remote_addr, &k.rkey));
        match r {
            Some(Ok(())) => return std::ptr::null_mut(),
            Some(Err(s)) => return status_ptr(s),
            None => {}
        }
    }
    let d = data_or_ret!(buffer, count, post.datatype);
    let h = e.h;
    post.run(w, |wk| match kind {
        Rma::Put => wk.put(h, &d, remote_addr, &k.rkey, send_p(false)),
        Rma::Get => wk.get(h, &d, remote_addr, &k.rkey, send_p(false)),
    })
}

/// `_nbi`: completion is seen through flush, so a running request is released at once.
fn nbi(r: ucs_status_ptr_t) -> ucs_status_t {
    if r.is_null() {
        return code(Status::Ok);
    }
    if crate::ptr_is_err(r) {
        return r as isize as ucs_status_t;
    }
    // SAFETY: a request we just returned.
    unsafe { ucp_request_free(r) };
    code(Status::InProgress)
}

/// `ucp_put_nbi` / `ucp_get_nbi` of contiguous bytes: one call into the worker and no C
/// request, since the application sees the completion through a flush only. A running
/// operation's request is released there and then; one that finished in the call reports
/// its status. (MPICH's `MPI_Get` is a `ucp_get_nbi` and `MPI_Win_flush` a `ucp_ep_flush`:
/// through the general post, a get of 8 bytes took about 1070 instructions on the
/// origin, against UCX 1.13's 350; callgrind, 2026-12-07.)
fn rma_nbi(
    ep: *mut c_void,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    kind: Rma,
) -> ucs_status_t {
    // SAFETY: the application passes an endpoint of ours (checked by magic).
    let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
        return code(Status::InvalidParam);
    };
    // SAFETY: a key of ours (checked by magic).
    let Some(k) = (unsafe { CRkey::from_ptr(rkey) }) else {
        return code(Status::InvalidParam);
    };
    if length > 0 && buffer.is_null() {
        return code(Status::InvalidParam);
    }
    // SAFETY: ucp.h's contract: `buffer` holds `length` bytes (a get's writable), valid
    // until the operation completes, which a flush tells.
    let local = unsafe { Buf::from_raw(buffer.cast(), length) };
    let h = e.h;
    let r = w.with(|wk| {
        if let Some(r) = wk.rma_mapped(h, kind == Rma::Get, local, remote_addr, &k.rkey) {
            return r.map(|()| Status::Ok);
        }
        if let Some(r) = wk.rma_light(h, kind == Rma::Get, local, remote_addr, &k.rkey) {
            return r.map(|()| Status::Ok);
        }
        let d = Data::Contig(local);
        let posted = match kind {
            Rma::Put => wk.put(h, &d, remote_addr, &k.rkey, send_p(false)),
            Rma::Get => wk.get(h, &d, remote_addr, &k.rkey, send_p(false)),
        }?;
        let Some(id) = posted else {
            return Ok(Status::Ok);
        };
        let s = wk.request_status(id);
        wk.request_free(id);
        Ok(s)
    });
    code(r.unwrap_or_else(|s| s))
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbi(
    ep: *mut c_void,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut c_void,
) -> ucs_status_t {
    // SAFETY: forwarded contract.
    let fast =
        unsafe { crate::fast::rma_mapped(ep, buffer.cast_mut(), length, remote_addr, rkey, false) };
    if let Some(s) = fast {
        return s;
    }
    // What the copy above left (a failed endpoint, memory types in play, not mapped) goes
    // the general way, which copies into a mapped region too when it may.
    guard(code(Status::InvalidParam), || {
        rma_nbi(ep, buffer.cast_mut(), length, remote_addr, rkey, Rma::Put)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbi(
    ep: *mut c_void,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut c_void,
) -> ucs_status_t {
    // SAFETY: forwarded contract.
    if let Some(s) = unsafe { crate::fast::rma_mapped(ep, buffer, length, remote_addr, rkey, true) }
    {
        return s;
    }
    guard(code(Status::InvalidParam), || {
        rma_nbi(ep, buffer, length, remote_addr, rkey, Rma::Get)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nb(
    ep: *mut c_void,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        rma(
            ep,
            buffer.cast_mut(),
            length,
            remote_addr,
            rkey,
            Post::legacy(Cb::Send(cb)),
            Rma::Put,
        )
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nb(
    ep: *mut c_void,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        rma(
            ep,
            buffer,
            length,
            remote_addr,
            rkey,
            Post::legacy_get(Cb::Send(cb)),
            Rma::Get,
        )
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_put_nbx(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: forwarded contract.
    let fast = unsafe {
        crate::fast::rma_mapped_nbx(
            ep,
            buffer.cast_mut(),
            count,
            remote_addr,
            rkey,
            param,
            false,
        )
    };
    if let Some(r) = fast {
        return r;
    }
    guard(status_ptr(Status::InvalidParam), || {
        let p = nbx_or_ret!(param, CbKind::Send);
        rma(ep, buffer.cast_mut(), count, remote_addr, rkey, p, Rma::Put)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_nbx(
    ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    // SAFETY: forwarded contract.
    let fast =
        unsafe { crate::fast::rma_mapped_nbx(ep, buffer, count, remote_addr, rkey, param, true) };
    if let Some(r) = fast {
        return r;
    }
    guard(status_ptr(Status::InvalidParam), || {
        let p = nbx_or_ret!(param, CbKind::Send);
        rma(ep, buffer, count, remote_addr, rkey, p, Rma::Get)
    })
}

/// Waits for what a blocking compat call posted.
fn block(ep: *mut c_void, r: ucs_status_ptr_t) -> ucs_status_t {
    if r.is_null() {
        return code(Status::Ok);
    }
    if crate::ptr_is_err(r) {
        return r as isize as ucs_status_t;
    }
    // SAFETY: an endpoint of ours (checked by the call that returned r).
    if let Some((_, w)) = unsafe { CEp::from_ptr(ep) } {
        // SAFETY: r is our live request.
        while unsafe { ucp_request_check_status(r) } == code(Status::InProgress) {
            w.progress();
        }
    }
    // SAFETY: r is our request.
    let s = unsafe { ucp_request_check_status(r) };
    // SAFETY: as above; freed once.
    unsafe { ucp_request_free(r) };
    s
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_put(
    ep: *mut c_void,
    buffer: *const c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let r = rma(
            ep,
            buffer.cast_mut(),
            length,
            remote_addr,
            rkey,
            Post::legacy(Cb::None),
            Rma::Put,
        );
        block(ep, r)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_get(
    ep: *mut c_void,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let r = rma(
            ep,
            buffer,
            length,
            remote_addr,
            rkey,
            Post::legacy(Cb::None),
            Rma::Get,
        );
        block(ep, r)
    })
}

// ---- atomics ----

#[allow(clippy::too_many_arguments)]
fn atomic(
    ep: *mut c_void,
    op: AtomicOp,
    size: usize,
    value: u64,
    compare: u64,
    remote_addr: u64,
    rkey: *mut c_void,
    reply: *mut c_void,
    post: Post,
) -> ucs_status_ptr_t {
    let (e, w) = ep_or_ret!(ep);
    // SAFETY: a key of ours (checked by magic).
    let Some(k) = (unsafe { CRkey::from_ptr(rkey) }) else {
        return status_ptr(Status::InvalidParam);
    };
    let reply = (!reply.is_null())
        // SAFETY: the application's result buffer of `size` bytes, valid until completion.
        .then(|| unsafe { ucp::Buf::from_raw(reply.cast(), size) });
    let h = e.h;
    post.run(w, |wk| {
        wk.atomic(
            h,
            op,
            size,
            value,
            compare,
            remote_addr,
            &k.rkey,
            reply,
            send_p(false),
        )
        .map(Some)
    })
}

/// Whether `size` is an operand size of atomics: UCX's 4 and 8 bytes, and 1 and 2 (which
/// UCX refuses, and OpenMPI's osc/ucx passes for `MPI_Fetch_and_op` of `char`/`short`
/// without checking the answer: done right here rather than left as garbage).
fn atomic_size(size: usize) -> bool {
    ucp::worker::rma::ATOMIC_SIZES.contains(&size)
}

/// Reads a 1-, 2-, 4- or 8-byte operand.
///
/// # Safety
/// `p` readable for `size` bytes.
unsafe fn operand(p: *const c_void, size: usize) -> u64 {
    // SAFETY: per the contract (unaligned reads allowed).
    unsafe {
        match size {
            1 => u64::from(p.cast::<u8>().read()),
            2 => u64::from(p.cast::<u16>().read_unaligned()),
            4 => u64::from(p.cast::<u32>().read_unaligned()),
            _ => p.cast::<u64>().read_unaligned(),
        }
    }
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_op_nbx(
    ep: *mut c_void,
    opcode: c_int,
    buffer: *const c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let p = nbx_or_ret!(param, CbKind::Send);
        let size = contig_size(p.datatype).unwrap_or(0);
        if count != 1 || !atomic_size(size) || buffer.is_null() {
            return status_ptr(Status::InvalidParam);
        }
        // SAFETY: buffer holds one operand of `size` bytes.
        let x = unsafe { operand(buffer, size) };
        let reply = p.reply_buffer;
        let (op, value, compare) = match opcode {
            UCP_ATOMIC_OP_ADD => (AtomicOp::Add, x, 0),
            UCP_ATOMIC_OP_AND => (AtomicOp::And, x, 0),
            UCP_ATOMIC_OP_OR => (AtomicOp::Or, x, 0),
            UCP_ATOMIC_OP_XOR => (AtomicOp::Xor, x, 0),
            UCP_ATOMIC_OP_SWAP if !reply.is_null() => (AtomicOp::Swap, x, 0),
            UCP_ATOMIC_OP_CSWAP if !reply.is_null() => {
                // X (compare) in buffer, Z (new value) in reply_buffer.
                // SAFETY: reply_buffer holds one operand.
                (AtomicOp::Cswap, unsafe { operand(reply, size) }, x)
            }
            _ => return status_ptr(Status::InvalidParam),
        };
        atomic(ep, op, size, value, compare, remote_addr, rkey, reply, p)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_post(
    ep: *mut c_void,
    opcode: c_int,
    value: u64,
    op_size: usize,
    remote_addr: u64,
    rkey: *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let op = match opcode {
            UCP_ATOMIC_POST_OP_ADD => AtomicOp::Add,
            UCP_ATOMIC_POST_OP_AND => AtomicOp::And,
            UCP_ATOMIC_POST_OP_OR => AtomicOp::Or,
            UCP_ATOMIC_POST_OP_XOR => AtomicOp::Xor,
            _ => return code(Status::InvalidParam),
        };
        // Unlike the `_nbi` calls, a posted atomic reports OK (UCX releases the request).
        let s = nbi(atomic(
            ep,
            op,
            op_size,
            value,
            0,
            remote_addr,
            rkey,
            std::ptr::null_mut(),
            Post::legacy(Cb::None),
        ));
        if s == code(Status::InProgress) {
            code(Status::Ok)
        } else {
            s
        }
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn ucp_atomic_fetch_nb(
    ep: *mut c_void,
    opcode: c_int,
    value: u64,
    result: *mut c_void,
    op_size: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        if result.is_null() || !atomic_size(op_size) {
            return status_ptr(Status::InvalidParam);
        }
        // (operand, compare): for CSWAP, `value` is the condition and `*result` on input is
        // the value swapped in (ucp.h: "In the case of CSWAP this is the conditional for the
        // swap"; "the value in result will be swapped into the remote_addr").
        let (op, operand_v, compare) = match opcode {
            UCP_ATOMIC_FETCH_OP_FADD => (AtomicOp::Add, value, 0),
            UCP_ATOMIC_FETCH_OP_SWAP => (AtomicOp::Swap, value, 0),
            UCP_ATOMIC_FETCH_OP_CSWAP => {
                // SAFETY: result holds one operand of `op_size` bytes (checked above).
                (AtomicOp::Cswap, unsafe { operand(result, op_size) }, value)
            }
            UCP_ATOMIC_FETCH_OP_FAND => (AtomicOp::And, value, 0),
            UCP_ATOMIC_FETCH_OP_FOR => (AtomicOp::Or, value, 0),
            UCP_ATOMIC_FETCH_OP_FXOR => (AtomicOp::Xor, value, 0),
            _ => return status_ptr(Status::InvalidParam),
        };
        atomic(
            ep,
            op,
            op_size,
            operand_v,
            compare,
            remote_addr,
            rkey,
            result,
            Post::legacy(Cb::Send(cb)),
        )
    })
}

// ---- blocking atomics (ucp_compat.h) ----

/// Posts an atomic and progresses the endpoint's worker until it completed (the fetching
/// ones with the old remote value in `result`).
#[allow(clippy::too_many_arguments)]
fn atomic_blocking(
    ep: *mut c_void,
    op: AtomicOp,
    size: usize,
    value: u64,
    compare: u64,
    remote_addr: u64,
    rkey: *mut c_void,
    result: *mut c_void,
) -> ucs_status_t {
    let r = atomic(
        ep,
        op,
        size,
        value,
        compare,
        remote_addr,
        rkey,
        result,
        Post::legacy(Cb::None),
    );
    block(ep, r)
}

/// A fetching blocking atomic: `result` must be given.
#[allow(clippy::too_many_arguments)]
fn fetch_blocking(
    ep: *mut c_void,
    op: AtomicOp,
    size: usize,
    value: u64,
    compare: u64,
    remote_addr: u64,
    rkey: *mut c_void,
    result: *mut c_void,
) -> ucs_status_t {
    if result.is_null() {
        return code(Status::InvalidParam);
    }
    // The old value lands in a buffer of ours, copied out on success (the caller's is
    // left alone otherwise, as in UCX).
    let mut old = 0u64;
    let s = atomic_blocking(
        ep,
        op,
        size,
        value,
        compare,
        remote_addr,
        rkey,
        (&raw mut old).cast(),
    );
    if s == code(Status::Ok) {
        // SAFETY: `result` holds one operand of `size` (4 or 8) bytes by contract; the
        // first `size` bytes of `old` are the fetched value.
        unsafe {
            std::ptr::copy_nonoverlapping((&raw const old).cast::<u8>(), result.cast(), size)
        };
    }
    s
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_add32(
    ep: *mut c_void,
    add: u32,
    remote_addr: u64,
    rkey: *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let null = std::ptr::null_mut();
        atomic_blocking(ep, AtomicOp::Add, 4, add.into(), 0, remote_addr, rkey, null)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_add64(
    ep: *mut c_void,
    add: u64,
    remote_addr: u64,
    rkey: *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let null = std::ptr::null_mut();
        atomic_blocking(ep, AtomicOp::Add, 8, add, 0, remote_addr, rkey, null)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_fadd32(
    ep: *mut c_void,
    add: u32,
    remote_addr: u64,
    rkey: *mut c_void,
    result: *mut u32,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let r = result.cast();
        fetch_blocking(ep, AtomicOp::Add, 4, add.into(), 0, remote_addr, rkey, r)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_fadd64(
    ep: *mut c_void,
    add: u64,
    remote_addr: u64,
    rkey: *mut c_void,
    result: *mut u64,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let r = result.cast();
        fetch_blocking(ep, AtomicOp::Add, 8, add, 0, remote_addr, rkey, r)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_swap32(
    ep: *mut c_void,
    swap: u32,
    remote_addr: u64,
    rkey: *mut c_void,
    result: *mut u32,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let r = result.cast();
        fetch_blocking(ep, AtomicOp::Swap, 4, swap.into(), 0, remote_addr, rkey, r)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_swap64(
    ep: *mut c_void,
    swap: u64,
    remote_addr: u64,
    rkey: *mut c_void,
    result: *mut u64,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let r = result.cast();
        fetch_blocking(ep, AtomicOp::Swap, 8, swap, 0, remote_addr, rkey, r)
    })
}

/// Writes `swap` where the remote value equals `compare`; `*result` is the value before.
///
/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_cswap32(
    ep: *mut c_void,
    compare: u32,
    swap: u32,
    remote_addr: u64,
    rkey: *mut c_void,
    result: *mut u32,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let (op, r) = (AtomicOp::Cswap, result.cast());
        fetch_blocking(ep, op, 4, swap.into(), compare.into(), remote_addr, rkey, r)
    })
}

/// As [`ucp_atomic_cswap32`], on 64 bits.
///
/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_atomic_cswap64(
    ep: *mut c_void,
    compare: u64,
    swap: u64,
    remote_addr: u64,
    rkey: *mut c_void,
    result: *mut u64,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        let (op, r) = (AtomicOp::Cswap, result.cast());
        fetch_blocking(ep, op, 8, swap, compare, remote_addr, rkey, r)
    })
}

// ---- flush ----

/// Blocks until a `ucp` request finishes, progressing (and dispatching) meanwhile.
fn wait_id(w: &CWorker, id: ReqId) -> Status {
    loop {
        let s = w.with(|wk| wk.request_status(id));
        if s != Status::InProgress {
            w.with(|wk| wk.request_free(id));
            return s;
        }
        w.progress();
    }
}

/// `ucp_worker_flush` (`ep` `None`) and `ucp_ep_flush`: progress until nothing posted
/// before the call is in flight (`Worker::flush_poll`), with a flush request only where
/// a transport must be asked.
fn flush(w: &CWorker, ep: Option<EpHandle>) -> ucs_status_t {
    loop {
        match w.with(|wk| wk.flush_poll(ep)) {
            FlushPoll::Done(s) => return code(s),
            FlushPoll::InFlight => {
                w.progress();
            }
            FlushPoll::Transport => {
                return match w.with(|wk| wk.flush(ep)) {
                    Ok(id) => code(wait_id(w, id)),
                    Err(s) => code(s),
                }
            }
        }
    }
}

/// `ucp_worker_flush_nb` (`ep` `None`) and `ucp_ep_flush_nb`.
fn flush_nb(w: &CWorker, ep: Option<EpHandle>, cb: ucp_send_callback_t) -> ucs_status_ptr_t {
    // Nothing in flight (`MPI_Win_flush` after puts into a mapped window): NULL, as the
    // general path would return, without building its report.
    if w.with(|wk| wk.flush_idle(ep)) == Ok(true) {
        return std::ptr::null_mut();
    }
    // Something was in flight: the flush request itself (without asking again).
    Post::legacy(Cb::Send(cb)).run(w, |wk| wk.flush(ep).map(Some))
}

/// `ucp_worker_flush_nbx` (`ep` `None`) and `ucp_ep_flush_nbx`.
fn flush_nbx(
    w: &CWorker,
    ep: Option<EpHandle>,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    let p = nbx_or_ret!(param, CbKind::Send);
    p.run(w, |wk| wk.flush_nb(ep))
}

/// # Safety
/// `worker` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush(worker: *mut CWorker) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        flush(w, None)
    })
}

/// # Safety
/// `worker` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nb(
    worker: *mut CWorker,
    _flags: c_uint,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let w = worker_or_ret!(worker);
        flush_nb(w, None, cb)
    })
}

/// # Safety
/// `worker` ours; `param` readable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_flush_nbx(
    worker: *mut CWorker,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let w = worker_or_ret!(worker);
        flush_nbx(w, None, param)
    })
}

/// # Safety
/// `ep` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush(ep: *mut c_void) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return code(Status::InvalidParam);
        };
        flush(w, Some(e.h))
    })
}

/// # Safety
/// `ep` ours.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush_nb(
    ep: *mut c_void,
    _flags: c_uint,
    cb: ucp_send_callback_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let (e, w) = ep_or_ret!(ep);
        flush_nb(w, Some(e.h), cb)
    })
}

/// # Safety
/// `ep` ours; `param` readable.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_flush_nbx(
    ep: *mut c_void,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let (e, w) = ep_or_ret!(ep);
        flush_nbx(w, Some(e.h), param)
    })
}

// ---- closing an endpoint ----

/// Closes `ep`: removes the handle and posts the close.
fn close(e: &CEp, w: &CWorker, post: Post, force: bool) -> ucs_status_ptr_t {
    let h = e.h;
    let p = w.with_inner(|i| i.eps.remove(&h.0));
    let r = if force {
        // Completes at once; what was outstanding reports UCS_ERR_CANCELED from the next
        // progress.
        status_ptr(
            w.with(|wk| wk.ep_close_force(h))
                .err()
                .unwrap_or(Status::Ok),
        )
    } else {
        post.run(w, |wk| wk.ep_close(h).map(Some))
    };
    if let Some(p) = p {
        // SAFETY: removed from the map, so freed once; the application may not use the
        // handle after closing it.
        unsafe { CEp::free(p as *mut CEp) };
    }
    r
}

/// # Safety
/// `ep` ours, not used after.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_close_nb(ep: *mut c_void, mode: c_uint) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return status_ptr(Status::InvalidParam);
        };
        if mode != UCP_EP_CLOSE_MODE_FORCE && mode != UCP_EP_CLOSE_MODE_FLUSH {
            return status_ptr(Status::InvalidParam);
        }
        close(
            e,
            w,
            Post::legacy(Cb::None),
            mode == UCP_EP_CLOSE_MODE_FORCE,
        )
    })
}

/// # Safety
/// `ep` ours; `param` readable.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_close_nbx(
    ep: *mut c_void,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return status_ptr(Status::InvalidParam);
        };
        // SAFETY: forwarded contract.
        match unsafe { Post::nbx(param, CbKind::Send) } {
            Ok(p) if p.flags & !UCP_EP_CLOSE_FLAG_FORCE != 0 => status_ptr(Status::InvalidParam),
            Ok(p) => {
                let force = p.flags & UCP_EP_CLOSE_FLAG_FORCE != 0;
                close(e, w, p, force)
            }
            Err(s) => status_ptr(s),
        }
    })
}

/// # Safety
/// `ep` ours, not used after.
#[no_mangle]
pub unsafe extern "C" fn ucp_disconnect_nb(ep: *mut c_void) -> ucs_status_ptr_t {
    // SAFETY: forwarded.
    unsafe { ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FLUSH) }
}

/// # Safety
/// `ep` ours, not used after.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_destroy(ep: *mut c_void) {
    guard((), || {
        // SAFETY: forwarded contract.
        let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return;
        };
        let h = e.h;
        let p = w.with_inner(|i| i.eps.remove(&h.0));
        if let Ok(id) = w.with(|wk| wk.ep_close(h)) {
            wait_id(w, id);
        }
        if let Some(p) = p {
            // SAFETY: removed from the map: freed once.
            unsafe { CEp::free(p as *mut CEp) };
        }
    })
}
