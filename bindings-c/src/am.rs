//! Active messages: `ucp_worker_set_am_recv_handler`, `ucp_am_send_nbx`,
//! `ucp_am_recv_data_nbx`, `ucp_am_data_release`, and the deprecated
//! `ucp_worker_set_am_handler` / `ucp_am_send_nb` pair (MPICH 4.0).
//!
//! The `ucp` handler we install only queues the event; [`dispatch`] calls the application's
//! callback after `Worker::progress` returned and the worker's lock is released, so the
//! callback may call any export (reply, receive rendezvous data, ...).
//!
//! Eager data is passed in place; with `UCP_AM_FLAG_PERSISTENT_DATA` and a callback
//! returning `UCS_INPROGRESS`, the buffer is kept until `ucp_am_data_release`. Rendezvous
//! data is passed as a descriptor ([`AmDesc`]) for `ucp_am_recv_data_nbx`; one the callback
//! neither receives nor keeps (`UCS_INPROGRESS`) is released when it returns.

use std::ffi::{c_uint, c_void};

use ucp::{AmData, AmRndv, AmSendParams};
use ucs::Status;

use crate::ep::{handle_of, CEp};
use crate::ops::{CbKind, Outcome, Post};
use crate::request::Cb;
use crate::types::*;
use crate::worker::{AmCb, AmH, CAm, CAmData, CWorker};
use crate::{code, guard, status_ptr};

const DESC_MAGIC: u64 = 0x5275_6378_416d_4421;

/// The descriptor of rendezvous AM data.
#[derive(Debug)]
struct AmDesc {
    magic: u64,
    rndv: Option<AmRndv>,
    in_cb: bool,
}

/// Calls the application's handlers for queued messages; returns how many.
pub(crate) fn dispatch(w: &CWorker) -> usize {
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

type RecvCb = unsafe extern "C" fn(
    *mut c_void,
    *const c_void,
    usize,
    *mut c_void,
    usize,
    *const ucp_am_recv_param_t,
) -> ucs_status_ret_t;

type LegacyCb =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void, c_uint) -> ucs_status_ret_t;

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
            let post = Post::internal(Cb::LenNbx(Some(legacy_rndv_done)), ctx.cast());
            // SAFETY: the buffer is the context's, alive until the receive completes.
            let d = ucp::Data::Contig(unsafe { ucp::Buf::from_raw(ptr, len) });
            let rp = ucp::RecvParams::default();
            let r = post.run_out(w, |wk| wk.am_recv_data(r, &d, rp).map(Outcome::Req));
            if r.is_null() {
                // SAFETY: finished in the call: the callback will not run, the context is ours.
                unsafe {
                    legacy_rndv_done(std::ptr::null_mut(), code(Status::Ok), len, ctx.cast())
                };
            } else if crate::ptr_is_err(r) {
                ucs::warn_limited!("ucp: active message of {len} bytes lost: receive failed");
                // SAFETY: made by Box::into_raw above, and the receive never started.
                drop(unsafe { Box::from_raw(ctx) });
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
        // SAFETY: our own request, reported once.
        unsafe { crate::request::ucp_request_free(req) };
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
/// `d` from [`dispatch`], freed once.
unsafe fn free_desc(d: *mut AmDesc) {
    // SAFETY: per the contract.
    unsafe {
        (*d).magic = 0;
        drop(Box::from_raw(d));
    }
}

/// Takes the rendezvous data out of a descriptor; frees the descriptor unless its callback
/// is still running (then `dispatch` frees it).
///
/// # Safety
/// `p` is NULL or a descriptor passed to an AM callback, not yet consumed.
unsafe fn take_desc(p: *mut c_void) -> Option<AmRndv> {
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

/// # Safety
/// `worker` ours; `param` readable.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_set_am_recv_handler(
    worker: *mut CWorker,
    param: *const ucp_am_handler_param_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if param.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable; field_mask first.
        let p = unsafe { &*param };
        if p.field_mask & !UCP_AM_HANDLER_PARAM_FIELDS != 0
            || p.field_mask & UCP_AM_HANDLER_PARAM_FIELD_ID == 0
            || p.id > u32::from(u16::MAX)
        {
            return code(Status::InvalidParam);
        }
        let has = |b: u64| p.field_mask & b != 0;
        let cb = if has(UCP_AM_HANDLER_PARAM_FIELD_CB) {
            p.cb
        } else {
            None
        };
        let h = cb.map(|cb| AmH {
            cb: AmCb::Recv(cb),
            arg: if has(UCP_AM_HANDLER_PARAM_FIELD_ARG) {
                p.arg
            } else {
                std::ptr::null_mut()
            },
            flags: if has(UCP_AM_HANDLER_PARAM_FIELD_FLAGS) {
                p.flags
            } else {
                0
            },
        });
        install(w, p.id as u16, h);
        code(Status::Ok)
    })
}

/// Sets (or, with `None`, removes) the handler of AM id `id`.
fn install(w: &CWorker, id: u16, h: Option<AmH>) {
    let q = w.am_queue.clone();
    w.with_inner(|i| {
        let ix = id as usize;
        if i.am.len() <= ix {
            i.am.resize(ix + 1, None);
        }
        i.am[ix] = h;
        let handler: Option<ucp::AmHandler> = h.map(|_| {
            Box::new(move |wk: &mut ucp::Worker, ev: ucp::AmEvent| {
                // Copied: the application's callback runs after progress returned.
                let data = match ev.data {
                    AmData::Eager(d) => CAmData::Eager(wk.am_buf(d)),
                    AmData::Rndv(r) => CAmData::Rndv(r),
                };
                q.push(CAm {
                    id: ev.id,
                    header: wk.am_buf(ev.header),
                    data,
                    reply_ep: ev.reply_ep,
                });
            }) as ucp::AmHandler
        });
        i.w.am_set_handler(id, handler);
    });
}

/// The deprecated interface (`ucp_am_callback_t`), which MPICH 4.0's ch4 UCX netmod
/// registers at every worker creation: the handler gets each message whole (`flags` may
/// hold `UCP_AM_FLAG_WHOLE_MSG`, which is what it does anyway, and
/// `UCP_AM_FLAG_PERSISTENT_DATA`), with a reply endpoint where the sender asked for one.
/// NULL removes the handler. It shares the id space with `ucp_worker_set_am_recv_handler`.
///
/// # Safety
/// `worker` ours; `cb` NULL or a function of the `ucp_am_callback_t` type.
#[no_mangle]
pub unsafe extern "C" fn ucp_worker_set_am_handler(
    worker: *mut CWorker,
    id: u16,
    cb: ucp_am_callback_t,
    arg: *mut c_void,
    flags: u32,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if flags & !(UCP_AM_FLAG_WHOLE_MSG | UCP_AM_FLAG_PERSISTENT_DATA) != 0 {
            return code(Status::InvalidParam);
        }
        let h = cb.map(|cb| AmH {
            cb: AmCb::Legacy(cb),
            arg,
            flags,
        });
        install(w, id, h);
        code(Status::Ok)
    })
}

#[allow(clippy::too_many_arguments)]
fn am_send(
    ep: *mut c_void,
    id: u32,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    post: Post,
    flags: u32,
) -> ucs_status_ptr_t {
    // SAFETY: an endpoint of ours (checked by magic).
    let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
        return status_ptr(Status::InvalidParam);
    };
    if id > u32::from(u16::MAX) || (header_length > 0 && header.is_null()) {
        return status_ptr(Status::InvalidParam);
    }
    // SAFETY: ucp.h's contract: the data stays valid until completion.
    let d = match unsafe { crate::dt::data(buffer, count, post.datatype) } {
        Ok(d) => d,
        Err(s) => return status_ptr(s),
    };
    let hdr: &[u8] = if header_length == 0 {
        &[]
    } else {
        // SAFETY: header_length readable bytes (the header is copied before returning).
        unsafe { std::slice::from_raw_parts(header.cast::<u8>(), header_length) }
    };
    let p = AmSendParams {
        reply: flags & UCP_AM_SEND_FLAG_REPLY != 0,
        rndv: flags & UCP_AM_SEND_FLAG_RNDV != 0,
        eager: flags & UCP_AM_SEND_FLAG_EAGER != 0,
        user_data: 0,
        notify: false,
    };
    let h = e.h;
    post.run(w, |wk| wk.am_send(h, id as u16, hdr, &d, p))
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_send_nbx(
    ep: *mut c_void,
    id: c_uint,
    header: *const c_void,
    header_length: usize,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let p = match unsafe { Post::nbx(param, CbKind::Send) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        let flags = p.flags;
        am_send(ep, id, header, header_length, buffer, count, p, flags)
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_send_nb(
    ep: *mut c_void,
    id: u16,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    cb: ucp_send_callback_t,
    flags: c_uint,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        let mut p = Post::legacy(Cb::Send(cb));
        p.datatype = datatype;
        am_send(
            ep,
            u32::from(id),
            std::ptr::null(),
            0,
            buffer,
            count,
            p,
            flags,
        )
    })
}

/// # Safety
/// ucp.h's contract for this call.
#[no_mangle]
pub unsafe extern "C" fn ucp_am_recv_data_nbx(
    worker: *mut CWorker,
    data_desc: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return status_ptr(Status::InvalidParam);
        };
        // SAFETY: forwarded contract.
        let p = match unsafe { Post::nbx(param, CbKind::Len) } {
            Ok(p) => p,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: ucp.h's contract: the buffer stays valid until completion.
        let d = match unsafe { crate::dt::data(buffer, count, p.datatype) } {
            Ok(d) => d,
            Err(s) => return status_ptr(s),
        };
        // SAFETY: a descriptor passed to an AM callback (checked by magic).
        let Some(r) = (unsafe { take_desc(data_desc) }) else {
            return status_ptr(Status::InvalidParam);
        };
        let rp = ucp::RecvParams::default();
        p.run_out(w, |wk| wk.am_recv_data(r, &d, rp).map(Outcome::Req))
    })
}

/// # Safety
/// `worker` ours; `data` AM data kept by a callback (or a rendezvous descriptor).
#[no_mangle]
pub unsafe extern "C" fn ucp_am_data_release(worker: *mut CWorker, data: *mut c_void) {
    guard((), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return;
        };
        let kept = w.with_inner(|i| i.held.remove(&(data as usize)).map(|v| i.w.am_recycle(v)));
        if kept.is_some() {
            return;
        }
        // SAFETY: not eager data we hold, so a descriptor by contract (checked by magic).
        if let Some(r) = unsafe { take_desc(data) } {
            w.with(|wk| wk.am_data_release(r));
        }
    })
}
