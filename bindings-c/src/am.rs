//! Active messages: `ucp_worker_set_am_recv_handler`, `ucp_am_send_nbx`,
//! `ucp_am_recv_data_nbx`, `ucp_am_data_release`, and the deprecated
//! `ucp_worker_set_am_handler` / `ucp_am_send_nb` pair (MPICH 4.0).
//!
//! The `ucp` handler installed here only queues the event; the worker's progress calls
//! the application's callback after `Worker::progress` returned and the worker's lock is
//! released (`worker::dispatch_am`), so the callback may call any export (reply, receive
//! rendezvous data, ...). Rendezvous data reaches `ucp_am_recv_data_nbx` and
//! `ucp_am_data_release` as the descriptor the callback was given (`worker::take_desc`).

use std::ffi::{c_uint, c_void};

use ucp::{AmData, AmSendParams};
use ucs::Status;

use crate::ep::CEp;
use crate::ops::Post;
use crate::request::{Cb, CbKind};
use crate::types::*;
use crate::worker::{take_desc, AmCb, AmH, CAm, CAmData, CWorker, Outcome};
use crate::{code, guard, status_ptr};

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
            Ok(p) => p.defer_if_no_imm(),
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
