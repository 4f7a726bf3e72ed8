//! Tag schemes, tag generators and channels in C (`ucpx_tag_*`, `ucpx_channel_*`;
//! `include/rucx.h`): thin layers over `ucp::tag::scheme` and `ucp/src/channel/`,
//! which say what each call does. Channel sends and receives report as `ucp_tag_send_nbx`
//! and `ucp_tag_recv_nbx` do (request, callback, immediate completion).

use std::ffi::c_void;
use std::sync::Mutex;

use ucp::channel::{ChannelHandle, ChannelOpts};
use ucp::tag::scheme::{Match, TagGen, TagScheme, WrapPolicy};
use ucp::{RecvParams, SendParams};
use ucs::Status;

use crate::ep::CEp;
use crate::ops::Post;
use crate::request::CbKind;
use crate::types::*;
use crate::worker::CWorker;
use crate::{code, guard, status_ptr};

/// `ucpx_tag_scheme_t`: field widths from the top (type, id, counter).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ucpx_tag_scheme_t {
    pub type_bits: u32,
    pub id_bits: u32,
    pub counter_bits: u32,
}

/// # Safety
/// `s` NULL or readable.
unsafe fn scheme(s: *const ucpx_tag_scheme_t) -> Result<TagScheme, Status> {
    if s.is_null() {
        return Err(Status::InvalidParam);
    }
    // SAFETY: per the contract.
    let s = unsafe { *s };
    TagScheme::new(s.type_bits, s.id_bits, s.counter_bits)
}

/// The tag of `(type, id, counter)` in scheme `s`; `UCS_ERR_INVALID_PARAM` when a value
/// does not fit its field or the scheme is invalid.
///
/// # Safety
/// `s` readable, `tag_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_tag_encode(
    s: *const ucpx_tag_scheme_t,
    msg_type: u64,
    id: u64,
    counter: u64,
    tag_p: *mut ucp_tag_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let r = unsafe { scheme(s) }.and_then(|s| s.encode(msg_type, id, counter));
        match r {
            Ok(t) if !tag_p.is_null() => {
                // SAFETY: checked non-NULL; writable per the contract.
                unsafe { *tag_p = t };
                code(Status::Ok)
            }
            Ok(_) => code(Status::InvalidParam),
            Err(e) => code(e),
        }
    })
}

/// The fields of `tag` in scheme `s`; any output may be NULL.
///
/// # Safety
/// `s` readable; the outputs NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_tag_decode(
    s: *const ucpx_tag_scheme_t,
    tag: ucp_tag_t,
    type_p: *mut u64,
    id_p: *mut u64,
    counter_p: *mut u64,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let s = match unsafe { scheme(s) } {
            Ok(s) => s,
            Err(e) => return code(e),
        };
        let (t, i, c) = s.decode(tag);
        for (p, v) in [(type_p, t), (id_p, i), (counter_p, c)] {
            if !p.is_null() {
                // SAFETY: non-NULL outputs are writable per the contract.
                unsafe { *p = v };
            }
        }
        code(Status::Ok)
    })
}

/// The mask a receive posts to match on the type (`UCPX_TAG_MATCH_TYPE`), the type and id
/// (`UCPX_TAG_MATCH_TYPE_ID`) or the whole tag (`UCPX_TAG_MATCH_ALL`).
///
/// # Safety
/// `s` readable, `mask_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_tag_mask(
    s: *const ucpx_tag_scheme_t,
    fields: u32,
    mask_p: *mut ucp_tag_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let s = match unsafe { scheme(s) } {
            Ok(s) => s,
            Err(e) => return code(e),
        };
        let m = match fields {
            1 => Match::Type,
            2 => Match::TypeId,
            3 => Match::All,
            _ => return code(Status::InvalidParam),
        };
        if mask_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { *mask_p = s.mask(m) };
        code(Status::Ok)
    })
}

const GEN_MAGIC: u64 = 0x5275_6378_5461_6747;

/// `ucpx_tag_gen_h`.
struct CTagGen {
    magic: u64,
    gen: Mutex<TagGen>,
}

/// # Safety
/// `p` NULL or a generator of ours (checked by magic), not destroyed.
unsafe fn tag_gen<'a>(p: *mut c_void) -> Option<&'a CTagGen> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let g = unsafe { &*p.cast::<CTagGen>() };
    (g.magic == GEN_MAGIC).then_some(g)
}

/// A generator of the tags of `(msg_type, id)` in scheme `s`, counting from 0; `wait`
/// non-zero: a counter that comes round to an outstanding tag waits (see
/// `ucpx_tag_gen_next`), zero: it is refused with `UCS_ERR_BUSY`.
///
/// # Safety
/// `s` readable, `gen_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_tag_gen_create(
    s: *const ucpx_tag_scheme_t,
    msg_type: u64,
    id: u64,
    wait: i32,
    gen_p: *mut *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if gen_p.is_null() {
            return code(Status::InvalidParam);
        }
        let policy = if wait != 0 {
            WrapPolicy::Wait
        } else {
            WrapPolicy::Error
        };
        // SAFETY: per the contract.
        let g = match unsafe { scheme(s) }.and_then(|s| TagGen::new(s, msg_type, id, policy)) {
            Ok(g) => g,
            Err(e) => return code(e),
        };
        let b = Box::new(CTagGen {
            magic: GEN_MAGIC,
            gen: Mutex::new(g),
        });
        // SAFETY: checked non-NULL; writable per the contract.
        unsafe { *gen_p = Box::into_raw(b).cast() };
        code(Status::Ok)
    })
}

/// The next tag, outstanding until `ucpx_tag_gen_release`. When the counter comes round
/// to a tag still outstanding: `UCS_ERR_BUSY` (refusing generator), or, for a waiting one,
/// progress of `worker` until a callback releases it (`UCS_ERR_NO_RESOURCE` at once when
/// `worker` is NULL).
///
/// # Safety
/// `gen` from `ucpx_tag_gen_create`; `worker` NULL or a live worker; `tag_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_tag_gen_next(
    gen: *mut c_void,
    worker: *mut c_void,
    tag_p: *mut ucp_tag_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let Some(g) = (unsafe { tag_gen(gen) }) else {
            return code(Status::InvalidParam);
        };
        if tag_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: checked by magic (a worker that is not ours would never progress).
        if !worker.is_null() && unsafe { CWorker::from_ptr(worker.cast()) }.is_none() {
            return code(Status::InvalidParam);
        }
        loop {
            let r = g.gen.lock().unwrap_or_else(|e| e.into_inner()).next_tag();
            match r {
                Ok(t) => {
                    // SAFETY: checked non-NULL; writable per the contract.
                    unsafe { *tag_p = t };
                    return code(Status::Ok);
                }
                Err(Status::NoResource) if !worker.is_null() => {
                    // SAFETY: per the contract; progress runs the callbacks that release.
                    unsafe { crate::worker::ucp_worker_progress(worker.cast()) };
                }
                Err(e) => return code(e),
            }
        }
    })
}

/// Marks `tag` matched: its counter value may be handed out again.
/// `UCS_ERR_INVALID_PARAM` when it was not outstanding.
///
/// # Safety
/// `gen` from `ucpx_tag_gen_create`.
#[no_mangle]
pub unsafe extern "C" fn ucpx_tag_gen_release(gen: *mut c_void, tag: ucp_tag_t) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let Some(g) = (unsafe { tag_gen(gen) }) else {
            return code(Status::InvalidParam);
        };
        let ok = g.gen.lock().unwrap_or_else(|e| e.into_inner()).release(tag);
        code(if ok { Status::Ok } else { Status::InvalidParam })
    })
}

/// Frees a generator.
///
/// # Safety
/// `gen` from `ucpx_tag_gen_create`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucpx_tag_gen_destroy(gen: *mut c_void) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        if unsafe { tag_gen(gen) }.is_none() {
            return code(Status::InvalidParam);
        }
        // SAFETY: ours (checked by magic), made by Box::into_raw; poisoned before the drop
        // so a second destroy is refused while the memory is not reused yet.
        unsafe {
            (*gen.cast::<CTagGen>()).magic = 0;
            drop(Box::from_raw(gen.cast::<CTagGen>()));
        }
        code(Status::Ok)
    })
}

/// `ucpx_channel_params_t`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ucpx_channel_params_t {
    /// `UCPX_CHANNEL_PARAM_FIELD_*`: which of the fields below are set.
    pub field_mask: u64,
    pub scheme: ucpx_tag_scheme_t,
    pub msg_type: u64,
    /// Non-zero: a wrapped counter waits (progress) for the receiver; zero: `UCS_ERR_BUSY`.
    pub wait: i32,
}

const CH_SCHEME: u64 = 1;
const CH_TYPE: u64 = 2;
const CH_WAIT: u64 = 4;

const CH_MAGIC: u64 = 0x5275_6378_4368_616e;

/// `ucpx_channel_h`.
struct CChannel {
    magic: u64,
    worker: *const CWorker,
    h: ChannelHandle,
}

/// # Safety
/// `p` NULL or a channel of ours (checked by magic) whose worker is alive.
unsafe fn channel<'a>(p: *mut c_void) -> Option<&'a CChannel> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let c = unsafe { &*p.cast::<CChannel>() };
    (c.magic == CH_MAGIC).then_some(c)
}

/// Opens channel `id` on `ep` (the peer opens the same id on its endpoint to us).
///
/// # Safety
/// `ep` an endpoint of ours; `params` NULL or readable; `ch_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_channel_open(
    ep: *mut c_void,
    id: u64,
    params: *const ucpx_channel_params_t,
    ch_p: *mut *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: checked by magic.
        let Some((e, w)) = (unsafe { CEp::from_ptr(ep.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if ch_p.is_null() {
            return code(Status::InvalidParam);
        }
        let mut o = ChannelOpts::default();
        if !params.is_null() {
            // SAFETY: per the contract.
            let p = unsafe { *params };
            if p.field_mask & CH_SCHEME != 0 {
                match TagScheme::new(p.scheme.type_bits, p.scheme.id_bits, p.scheme.counter_bits) {
                    Ok(s) => o.scheme = s,
                    Err(e) => return code(e),
                }
            }
            if p.field_mask & CH_TYPE != 0 {
                o.msg_type = p.msg_type;
            }
            if p.field_mask & CH_WAIT != 0 {
                o.wrap = if p.wait != 0 {
                    WrapPolicy::Wait
                } else {
                    WrapPolicy::Error
                };
            }
        }
        let h = e.h;
        match w.with(|wk| wk.channel_open(h, id, o)) {
            Ok(ch) => {
                let b = Box::new(CChannel {
                    magic: CH_MAGIC,
                    worker: w,
                    h: ch,
                });
                // SAFETY: checked non-NULL; writable per the contract.
                unsafe { *ch_p = Box::into_raw(b).cast() };
                code(Status::Ok)
            }
            Err(s) => code(s),
        }
    })
}

/// The channel, its worker, the posting of `param` (callback `kind`) and the data of
/// `count` elements at `buffer`: what a channel send and receive start from.
///
/// # Safety
/// `ch` from `ucpx_channel_open`; `param` and the data as for `ucp_tag_send_nbx`.
unsafe fn start<'a>(
    ch: *mut c_void,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
    kind: CbKind,
) -> Result<(ChannelHandle, &'a CWorker, Post, ucp::Data), Status> {
    // SAFETY: per the contract.
    let c = unsafe { channel(ch) }.ok_or(Status::InvalidParam)?;
    // SAFETY: the application passes a readable ucp_request_param_t.
    let post = unsafe { Post::nbx(param, kind) }?;
    // SAFETY: ucp.h's contract: the data stays valid until the operation completes.
    let d = unsafe { crate::dt::data(buffer, count, post.datatype) }?;
    let post = post.with_mem(&d);
    // SAFETY: the channel's worker outlives it (closed before the worker is destroyed).
    let w = unsafe { &*c.worker };
    Ok((c.h, w, post, d))
}

/// Sends `count` elements at `buffer` (`param`'s datatype and memory type, as for
/// `ucp_tag_send_nbx`) as the channel's next message; reports as `ucp_tag_send_nbx`.
///
/// # Safety
/// `ch` from `ucpx_channel_open`; the rest as for `ucp_tag_send_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucpx_channel_send_nbx(
    ch: *mut c_void,
    buffer: *const c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: per the contract.
        match unsafe { start(ch, buffer, count, param, CbKind::Send) } {
            Ok((h, w, post, d)) => {
                let p = SendParams {
                    sync: false,
                    user_data: 0,
                    notify: false,
                    force_imm: post.force_imm,
                    fast_cmpl: false,
                };
                post.run(w, |wk| wk.channel_send(h, &d, p))
            }
            Err(s) => status_ptr(s),
        }
    })
}

/// Receives the channel's next message into `count` elements at `buffer`; reports as
/// `ucp_tag_recv_nbx`.
///
/// # Safety
/// `ch` from `ucpx_channel_open`; the rest as for `ucp_tag_recv_nbx`.
#[no_mangle]
pub unsafe extern "C" fn ucpx_channel_recv_nbx(
    ch: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    param: *const ucp_request_param_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: per the contract.
        match unsafe { start(ch, buffer, count, param, CbKind::TagRecv) } {
            Ok((h, w, post, d)) => {
                let p = RecvParams {
                    user_data: 0,
                    notify: false,
                    force_imm: post.force_imm,
                };
                post.run(w, |wk| wk.channel_recv(h, &d, p).map(Some))
            }
            Err(s) => status_ptr(s),
        }
    })
}

/// Closes a channel: its receives that have not matched complete with
/// `UCS_ERR_CANCELED`; its sends complete as they would. The handle is freed.
///
/// # Safety
/// `ch` from `ucpx_channel_open`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn ucpx_channel_close(ch: *mut c_void) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let Some(c) = (unsafe { channel(ch) }) else {
            return code(Status::InvalidParam);
        };
        // SAFETY: as for ucpx_channel_send_nbx.
        let w = unsafe { &*c.worker };
        let h = c.h;
        let r = w.with(|wk| wk.channel_close(h));
        // SAFETY: ours (checked by magic), made by Box::into_raw; poisoned first.
        unsafe {
            (*ch.cast::<CChannel>()).magic = 0;
            drop(Box::from_raw(ch.cast::<CChannel>()));
        }
        code(r.err().unwrap_or(Status::Ok))
    })
}
