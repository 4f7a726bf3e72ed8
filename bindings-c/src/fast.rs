//! The small-message path of `ucp_tag_send_nbx` and `ucp_tag_recv_nbx` with plain
//! parameters: a callback, user data, a contiguous datatype, request memory of the
//! application's, `NO_IMM_CMPL` and `FAST_CMPL`, which is what MPI libraries pass
//! (OpenMPI's pml ucx: `MPI_Isend` with a callback, `MPI_Irecv` with a callback and
//! `NO_IMM_CMPL`, blocking `MPI_Send`/`MPI_Recv` with a request on the stack). The general path (`ops::Post`) reads every field of
//! `ucp_request_param_t` and carries the result through one routine for every operation;
//! here each call does only what its case needs: a third fewer instructions per send and
//! a quarter fewer per receive in a message-rate loop (callgrind, 2026-11-26). Anything else —
//! another field, a device buffer, a send that needs a request in the immediate case —
//! returns `None`, untouched, and the caller takes the general path.

use std::ffi::c_void;

use ucp::{Buf, HostBuf, SendParams};
use ucs::Status;

use crate::ep::CEp;
use crate::request::{self, user_ptr, Cb, CbKind, ReqHdr};
use crate::status_ptr;
use crate::types::*;
use crate::worker::{info_of, CWorker};

/// A plain `ucp_request_param_t`: its mask and element size, read at once; the callback,
/// user data and request memory are read from the caller's struct only where a case needs
/// them (an eager send that completes in the call needs none of them).
#[derive(Clone, Copy)]
pub(crate) struct Plain {
    param: *const ucp_request_param_t,
    mask: u32,
    elem: usize,
}

/// The attributes [`plain`] accepts. `MULTI_SEND` is a hint (many operations in flight)
/// that changes nothing here: OpenMPI's pml ucx built against UCX 1.15 or later sets it on
/// every `MPI_Isend` and `MPI_Irecv` (`op_attr_nonblocking`); refusing it sent all of
/// that traffic down the general path (docs/c-abi.md, the small-message path).
const PLAIN: u32 = UCP_OP_ATTR_FIELD_CALLBACK
    | UCP_OP_ATTR_FIELD_USER_DATA
    | UCP_OP_ATTR_FIELD_DATATYPE
    | UCP_OP_ATTR_FIELD_REQUEST
    | UCP_OP_ATTR_FLAG_NO_IMM_CMPL
    | UCP_OP_ATTR_FLAG_FAST_CMPL
    | UCP_OP_ATTR_FLAG_MULTI_SEND;

/// `param` when it is plain, else `None`.
///
/// # Safety
/// `param` NULL or readable, and readable for as long as the returned value is used (the
/// call it was passed to).
#[inline(always)]
pub(crate) unsafe fn plain(param: *const ucp_request_param_t) -> Option<Plain> {
    if param.is_null() {
        return None;
    }
    // SAFETY: readable by contract; op_attr_mask read first.
    let p = unsafe { &*param };
    let mask = p.op_attr_mask;
    if mask & !PLAIN != 0 {
        return None;
    }
    let elem = if mask & UCP_OP_ATTR_FIELD_DATATYPE != 0 {
        crate::dt::contig_size(p.datatype)?
    } else {
        1
    };
    Some(Plain { param, mask, elem })
}

impl Plain {
    /// Whether any of `bits` is set.
    #[inline(always)]
    pub(crate) fn has(&self, bits: u32) -> bool {
        self.mask & bits != 0
    }

    /// `NO_IMM_CMPL`: a request is returned even when the operation finished in the call.
    #[inline(always)]
    pub(crate) fn no_imm(&self) -> bool {
        self.mask & UCP_OP_ATTR_FLAG_NO_IMM_CMPL != 0
    }

    /// `FAST_CMPL`: a blocking send (see `SendParams::fast_cmpl`).
    #[inline(always)]
    fn fast(&self) -> bool {
        self.mask & UCP_OP_ATTR_FLAG_FAST_CMPL != 0
    }

    /// The struct itself, readable for the call this value belongs to.
    #[inline(always)]
    fn fields(&self) -> &ucp_request_param_t {
        // SAFETY: `plain`'s contract: readable while this value is used.
        unsafe { &*self.param }
    }

    /// `UCP_OP_ATTR_FIELD_USER_DATA`, or NULL.
    #[inline(always)]
    pub(crate) fn user_data(&self) -> *mut c_void {
        if self.mask & UCP_OP_ATTR_FIELD_USER_DATA != 0 {
            self.fields().user_data
        } else {
            std::ptr::null_mut()
        }
    }

    /// `UCP_OP_ATTR_FIELD_REQUEST`: the application's request memory (NULL: the pool's).
    #[inline(always)]
    fn user_req(&self) -> *mut c_void {
        if self.mask & UCP_OP_ATTR_FIELD_REQUEST != 0 {
            self.fields().request
        } else {
            std::ptr::null_mut()
        }
    }

    /// The bytes of `count` elements at `buffer`, or `None` (overflow, NULL with data).
    #[inline(always)]
    pub(crate) fn bytes(&self, buffer: *const c_void, count: usize) -> Option<usize> {
        let len = count.checked_mul(self.elem)?;
        if len > 0 && buffer.is_null() {
            return None;
        }
        Some(len)
    }

    /// The contiguous host buffer of `count` elements at `buffer`, or `None` (overflow,
    /// NULL with data, device or managed memory: the general path reports or handles it,
    /// and records the request's memory type). Where a CUDA driver is loaded, host memory
    /// is told from the rest by the memory-type cache (a thread's host pages are one
    /// lookup), not by the driver's mere presence: a GPU node's MPI traffic in host memory
    /// takes this path too (docs/c-abi.md).
    ///
    /// # Safety
    /// ucp.h's contract: the buffer stays valid until the operation completes.
    #[inline(always)]
    unsafe fn buf(&self, buffer: *const c_void, count: usize) -> Option<HostBuf> {
        let len = self.bytes(buffer, count)?;
        // SAFETY: per the contract.
        HostBuf::host_only(unsafe { Buf::from_raw(buffer.cast_mut().cast(), len) })
    }

    /// The callback, of the type `kind` names, or `Cb::None`.
    pub(crate) fn cb(&self, kind: CbKind) -> Cb {
        if self.mask & UCP_OP_ATTR_FIELD_CALLBACK == 0 || self.fields().cb.is_null() {
            Cb::None
        } else {
            // SAFETY: the union member the operation uses, a function pointer of that type.
            unsafe { Cb::from_param(kind, self.fields().cb) }
        }
    }
}

const SEND_P: SendParams = SendParams {
    sync: false,
    user_data: 0,
    notify: false,
    force_imm: false,
    fast_cmpl: false,
};

/// `ucp_tag_send_nbx` with plain parameters, or `None` (nothing done) for the general path.
///
/// # Safety
/// ucp.h's contract for `ucp_tag_send_nbx`.
#[inline(always)]
pub(crate) unsafe fn tag_send(
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    tag: u64,
    p: &Plain,
) -> Option<ucs_status_ptr_t> {
    if p.no_imm() {
        return None;
    }
    // SAFETY: per the contract.
    let b = unsafe { p.buf(buffer, count) }?;
    // SAFETY: an endpoint of ours (checked by magic; the general path reports otherwise).
    let (e, w) = unsafe { CEp::from_ptr(ep) }?;
    let h = e.h;
    let sp = SendParams {
        fast_cmpl: p.fast(),
        ..SEND_P
    };
    let id = match w.with(|wk| wk.tag_send_host(h, b, tag, sp)) {
        // Sent in the call: NULL, and the application's request memory, if it passed
        // some, is left untouched, as UCX's inline send leaves it (OpenMPI's blocking
        // `MPI_Send` passes some and reads it only when a request is returned).
        Ok(None) => return Some(std::ptr::null_mut()),
        Err(s) => return Some(status_ptr(s)),
        Ok(Some(id)) => id,
    };
    Some(subscribe(w, id, p.cb(CbKind::Send), p, false))
}

/// `ucp_tag_recv_nbx` with plain parameters, or `None` (nothing done) for the general path.
///
/// # Safety
/// ucp.h's contract for `ucp_tag_recv_nbx`.
#[inline(always)]
pub(crate) unsafe fn tag_recv(
    worker: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    tag: u64,
    tag_mask: u64,
    p: &Plain,
) -> Option<ucs_status_ptr_t> {
    // SAFETY: per the contract.
    let b = unsafe { p.buf(buffer, count) }?;
    // SAFETY: a worker of ours (checked by magic; the general path reports otherwise).
    let w = unsafe { CWorker::from_ptr(worker.cast()) }?;
    // A receive usually waits: its request header is made first, so that posting and
    // subscribing take the worker once.
    let cb = p.cb(CbKind::TagRecv);
    // SAFETY: the pool's memory, or the application's by UCP_OP_ATTR_FIELD_REQUEST's
    // contract.
    let Some(h) = (unsafe { request::alloc(&w.reqs, p.user_req(), cb, p.user_data()) }) else {
        return Some(status_ptr(Status::NoMemory));
    };
    let r = w.with(|wk| {
        let r = wk.tag_recv_host(b, tag, tag_mask, h as u64);
        if let Ok(id) = r {
            // SAFETY: h is ours; it completes in progress, which needs this worker.
            unsafe { (*h).id = id.0 };
        }
        r
    });
    Some(match r {
        Ok(_) => user_ptr(h),
        Err((s, info)) => finished(w, h, s, info, p, true),
    })
}

/// Hands out request `id` as a C request, or reports it as UCX does when it finished
/// already (as `ops::Post::run_out` does for the general path).
#[inline(always)]
fn subscribe(w: &CWorker, id: ucp::ReqId, cb: Cb, p: &Plain, recv: bool) -> ucs_status_ptr_t {
    // SAFETY: the pool's memory, or the application's by UCP_OP_ATTR_FIELD_REQUEST's
    // contract.
    let Some(h) = (unsafe { request::alloc(&w.reqs, p.user_req(), cb, p.user_data()) }) else {
        w.with(|wk| wk.request_free(id));
        return status_ptr(Status::NoMemory);
    };
    // SAFETY: h is ours and not yet visible to anyone.
    unsafe { (*h).id = id.0 };
    match w.with(|wk| wk.subscribe_or_take(id, h as u64)) {
        Ok(()) => user_ptr(h),
        Err((s, info)) => finished(w, h, s, info, p, recv),
    }
}

/// Reports an operation that finished before it was handed out, with header `h` made for
/// it, as UCX does: under `NO_IMM_CMPL` the request is returned with its callback run now;
/// a request in the application's memory is completed without its callback (the
/// application tests it) and NULL or the error returned; else NULL or the error.
fn finished(
    w: &CWorker,
    h: *mut ReqHdr,
    s: Status,
    info: Option<ucp::tag::TagInfo>,
    p: &Plain,
    recv: bool,
) -> ucs_status_ptr_t {
    let reported = s == Status::Ok || (recv && s == Status::MessageTruncated);
    if !reported {
        discard(w, h, p);
        return status_ptr(s);
    }
    if p.no_imm() {
        // SAFETY: h is live and completed once, here.
        unsafe { request::complete(h, s, info_of(info)) };
        return user_ptr(h);
    }
    if p.user_req().is_null() {
        discard(w, h, p);
    } else {
        // SAFETY: h is live, in the application's memory, completed once, here.
        unsafe {
            (*h).cb = Cb::None;
            request::complete(h, s, info_of(info));
        }
    }
    if s == Status::Ok {
        std::ptr::null_mut()
    } else {
        status_ptr(s)
    }
}

/// Gives back a header that was never handed out: pool memory returns to the pool; the
/// application's memory is left as it was given (it never held a live request).
fn discard(w: &CWorker, h: *mut ReqHdr, p: &Plain) {
    // SAFETY: h came from `alloc` on this worker and nobody else has seen it.
    unsafe { request::discard(&w.reqs, h, !p.user_req().is_null()) };
}

/// `ucp_put_nbi` / `ucp_get_nbi` (`get`) of host memory into or out of a peer's region
/// mapped here (same-host shared memory, `ucp_mem_map`ped by the peer): one copy, done
/// before anything else. It touches no worker state (the mapping lives as long as the
/// key, and a copy needs no completion), so it takes neither the worker's lock nor the
/// panic guard: nothing here can panic (pointer, magic and flag checks, checked
/// arithmetic, the copy, atomic loads of the host-page table). `None`, with nothing done,
/// sends the call down the general path: anything not mapped, an endpoint that failed
/// (reported there), or a buffer not known to be host memory.
///
/// # Safety
/// ucp.h's contract for `ucp_put_nbi` / `ucp_get_nbi`: `buffer` holds `length` bytes (a
/// get's writable) for the call.
#[inline(always)]
pub(crate) unsafe fn rma_mapped(
    ep: *mut c_void,
    buffer: *mut c_void,
    length: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    get: bool,
) -> Option<ucs_status_t> {
    // Where a driver is loaded, a buffer the host-page table does not know yet goes down
    // the general path (its detection may ask the driver, and this path runs without the
    // panic guard); that path's detection enters its page, so the next call stays here.
    if (buffer.is_null() && length != 0) || !ucs::memtype::known_host(buffer.cast()) {
        return None;
    }
    // SAFETY: an endpoint of ours or anything else (checked by magic, quietly).
    let e = unsafe { CEp::from_ptr_quiet(ep) }?;
    if e.failed.load(std::sync::atomic::Ordering::Acquire) {
        return None;
    }
    // SAFETY: as above, for the key.
    let k = unsafe { crate::ep::CRkey::from_ptr(rkey) }?;
    let at = k.rkey.mapped_range(e.h, remote_addr, length)?;
    let local = buffer.cast::<u8>();
    // SAFETY: `at` holds `length` bytes of the peer's region, mapped for as long as the
    // key lives; `local` holds `length` bytes by the contract. `copy` (memmove): the
    // application may pass a pointer into the mapping itself.
    unsafe {
        if get {
            std::ptr::copy(at.cast_const(), local, length);
        } else {
            std::ptr::copy(local.cast_const(), at, length);
        }
    }
    Some(crate::code(Status::Ok))
}

/// [`rma_mapped`] for `ucp_put_nbx` / `ucp_get_nbx` with plain parameters (what MPICH's
/// and OpenSHMEM's ucx layers pass): done in the call, so NULL is returned and no callback
/// runs, as UCX does for an operation that completes at once. `None` for anything else,
/// `NO_IMM_CMPL` included.
///
/// # Safety
/// ucp.h's contract for `ucp_put_nbx` / `ucp_get_nbx`.
#[inline(always)]
pub(crate) unsafe fn rma_mapped_nbx(
    ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    remote_addr: u64,
    rkey: *mut c_void,
    param: *const ucp_request_param_t,
    get: bool,
) -> Option<ucs_status_ptr_t> {
    // SAFETY: `param` readable by the contract.
    let p = unsafe { plain(param) }?;
    if p.no_imm() {
        return None;
    }
    let len = count.checked_mul(p.elem)?;
    // SAFETY: forwarded contract.
    unsafe { rma_mapped(ep, buffer, len, remote_addr, rkey, get) }?;
    Some(std::ptr::null_mut())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ucs::memtype::{MemInfo, MemoryType, PointerQuery};

    /// A stand-in for the CUDA driver: one "device" allocation at an address no host
    /// allocation of this test uses (it is never dereferenced).
    struct OneDeviceRange;
    const DEV_BASE: u64 = 0x7e00_0000_0000;
    const DEV_LEN: u64 = 1 << 20;

    impl PointerQuery for OneDeviceRange {
        fn query(&self, ptr: u64) -> Option<MemInfo> {
            (DEV_BASE..DEV_BASE + DEV_LEN)
                .contains(&ptr)
                .then_some(MemInfo {
                    mem_type: MemoryType::Cuda,
                    device: 0,
                    base: DEV_BASE,
                    len: DEV_LEN,
                    buffer_id: 1,
                })
        }
        fn copy(&self, _dst: u64, _src: u64, _n: usize) -> ucs::UcsResult<()> {
            Err(Status::Unsupported)
        }
    }

    fn param(mask: u32) -> ucp_request_param_t {
        // SAFETY: a C struct of integers and pointers, for which zero is valid.
        let mut p: ucp_request_param_t = unsafe { std::mem::zeroed() };
        p.op_attr_mask = mask;
        p
    }

    #[test]
    fn what_openmpi_passes_is_plain() {
        // OpenMPI 4.1's pml ucx: `MPI_Isend`, `MPI_Irecv` (with `MULTI_SEND` when built
        // against UCX 1.15 or later), blocking `MPI_Send`, `MPI_Recv`.
        let cb = UCP_OP_ATTR_FIELD_CALLBACK;
        for (mask, no_imm, fast) in [
            (cb, false, false),
            (cb | UCP_OP_ATTR_FLAG_MULTI_SEND, false, false),
            (cb | UCP_OP_ATTR_FLAG_NO_IMM_CMPL, true, false),
            (
                cb | UCP_OP_ATTR_FLAG_NO_IMM_CMPL | UCP_OP_ATTR_FLAG_MULTI_SEND,
                true,
                false,
            ),
            (
                cb | UCP_OP_ATTR_FIELD_REQUEST | UCP_OP_ATTR_FLAG_FAST_CMPL,
                false,
                true,
            ),
        ] {
            let p = param(mask);
            // SAFETY: a live parameter struct.
            let plain = unsafe { plain(&p) }.unwrap_or_else(|| panic!("{mask:#x} not plain"));
            assert_eq!((plain.no_imm(), plain.fast()), (no_imm, fast), "{mask:#x}");
        }
        // What this path does not handle goes to the general one.
        for mask in [
            UCP_OP_ATTR_FIELD_MEMORY_TYPE,
            UCP_OP_ATTR_FIELD_MEMH,
            UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
        ] {
            let p = param(cb | mask);
            // SAFETY: as above.
            assert!(unsafe { plain(&p) }.is_none(), "{mask:#x}");
        }
    }

    #[test]
    fn with_a_driver_loaded_host_buffers_stay_on_the_fast_path_and_device_ones_leave_it() {
        ucs::memtype::enable(Box::new(OneDeviceRange), true);
        let none = param(0);
        // SAFETY: a live parameter struct.
        let p = unsafe { plain(&none) }.expect("an empty mask is plain");
        let host = [0u8; 64];
        // SAFETY: only the description is made; nothing is read or written through it.
        unsafe {
            for _ in 0..2 {
                // The second time from the memory-type cache.
                assert!(p.buf(host.as_ptr().cast(), host.len()).is_some());
                assert!(p.buf((DEV_BASE + 64) as *const c_void, 64).is_none());
            }
            // What `rma_mapped` asks (it runs without the panic guard, so it never asks the
            // driver): the host page is known now, the device one never.
            assert!(ucs::memtype::known_host(host.as_ptr()));
            assert!(!ucs::memtype::known_host((DEV_BASE + 64) as *const u8));
            assert!(p.buf(std::ptr::null(), 0).is_some(), "an empty buffer");
            assert!(p.buf(std::ptr::null(), 1).is_none(), "NULL with data");
        }
    }
}
