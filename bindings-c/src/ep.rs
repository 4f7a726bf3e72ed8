//! Endpoints, listeners and remote keys: `ucp_ep_create`, `ucp_ep_query`,
//! `ucp_ep_modify_nb`, `ucp_listener_*`, `ucp_conn_request_query`, `ucp_ep_rkey_unpack`,
//! `ucp_rkey_compare`, `ucp_rkey_destroy`. Flushing and closing an endpoint post requests
//! and are operations (`ops`).
//!
//! Module cycle: an endpoint handle knows its worker, which owns the handle (`worker`
//! makes reply endpoints' handles and frees them all when destroyed); see `worker`.

use std::cmp::Ordering;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::net::SocketAddr;
use std::sync::Mutex;

use ucp::{ConnRequest, EpHandle, Rkey};
use ucs::Status;

use crate::context::{fput, write_name, RKEY_BLOB_MAGIC};
use crate::types::*;
use crate::worker::{read_blob, CWorker, ConnH, ADDR_MAGIC};
use crate::{code, guard, status_ptr};

const EP_MAGIC: u64 = 0x5275_6378_4570_2121;
const RKEY_MAGIC: u64 = 0x5275_6378_526b_7921;
const CONN_MAGIC: u64 = 0x5275_6378_436e_6e21;
const LISTENER_MAGIC: u64 = 0x5275_6378_4c73_6e21;

/// `ucp_ep_h`.
#[derive(Debug)]
pub struct CEp {
    magic: u64,
    pub(crate) worker: *const CWorker,
    pub(crate) h: EpHandle,
    /// The id of the worker it reaches, when known (from its address).
    pub(crate) remote_uuid: Option<u64>,
    pub(crate) err: ucp_err_handler_t,
    pub(crate) user_data: Option<*mut c_void>,
    pub(crate) name: String,
    /// The endpoint failed (set where its failure is reported): the copy path of
    /// `crate::fast::rma_mapped` leaves it to the general path, which says so.
    pub(crate) failed: std::sync::atomic::AtomicBool,
    /// Transport and device names handed out by `ucp_ep_query`, valid until the endpoint
    /// is closed (each kept once; a `CString`'s bytes do not move when the list grows).
    names: Mutex<Vec<CString>>,
}

impl CEp {
    /// # Safety
    /// `p` NULL or an endpoint of ours (checked by magic).
    pub(crate) unsafe fn from_ptr<'a>(p: *const c_void) -> Option<(&'a CEp, &'a CWorker)> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the contract.
        let e = unsafe { &*p.cast::<CEp>() };
        if e.magic != EP_MAGIC {
            return None;
        }
        // SAFETY: an endpoint's worker outlives it.
        let w = unsafe { CWorker::from_ptr(e.worker.cast()) }?;
        Some((e, w))
    }

    /// An endpoint of ours on a worker that is not broken, or `None`; says nothing and
    /// cannot panic (the copy path of `crate::fast::rma_mapped` runs without the guard).
    ///
    /// # Safety
    /// `p` is NULL or an endpoint pointer of ours (checked by magic).
    #[inline(always)]
    pub(crate) unsafe fn from_ptr_quiet<'a>(p: *const c_void) -> Option<&'a CEp> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the contract.
        let e = unsafe { &*p.cast::<CEp>() };
        if e.magic != EP_MAGIC {
            return None;
        }
        // SAFETY: an endpoint's worker outlives it.
        let usable = unsafe { CWorker::usable(e.worker) };
        usable.then_some(e)
    }

    /// The argument of the error handler: `user_data` when set, else the handler's arg.
    pub(crate) fn err_arg(&self) -> *mut c_void {
        self.user_data.unwrap_or(self.err.arg)
    }

    /// A C copy of `s` that lives as long as the endpoint.
    fn keep_name(&self, s: &str) -> *const c_char {
        let mut names = self.names.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = names.iter().find(|c| c.as_bytes() == s.as_bytes()) {
            return c.as_ptr();
        }
        let c = CString::new(s.replace('\0', "")).unwrap_or_default();
        let p = c.as_ptr();
        names.push(c);
        p
    }

    /// Frees a handle.
    ///
    /// # Safety
    /// `p` from `new_handle`, freed once.
    pub(crate) unsafe fn free(p: *mut CEp) {
        // SAFETY: per the contract.
        unsafe {
            (*p).magic = 0;
            drop(Box::from_raw(p));
        }
    }
}

/// The handle of `ep` on `w`, made (and owned by the worker) if the application has none
/// yet, e.g. for the reply endpoint of an active message.
pub(crate) fn handle_of(w: &CWorker, ep: EpHandle) -> *mut c_void {
    w.with_inner(|i| {
        *i.eps.entry(ep.0).or_insert_with(|| {
            Box::into_raw(Box::new(CEp {
                magic: EP_MAGIC,
                worker: w as *const CWorker,
                h: ep,
                remote_uuid: None,
                err: ucp_err_handler_t {
                    cb: None,
                    arg: std::ptr::null_mut(),
                },
                user_data: None,
                name: format!("ep{}", ep.0),
                failed: Default::default(),
                names: Mutex::new(Vec::new()),
            })) as usize
        })
    }) as *mut c_void
}

/// A connection request waiting in the application's hands.
#[derive(Debug)]
pub struct CConnReq {
    magic: u64,
    req: Option<ConnRequest>,
}

impl CConnReq {
    pub(crate) fn new(req: ConnRequest) -> CConnReq {
        CConnReq {
            magic: CONN_MAGIC,
            req: Some(req),
        }
    }
}

/// # Safety
/// `p` NULL or a connection request of ours not consumed yet.
unsafe fn conn_ref<'a>(p: *mut c_void) -> Option<&'a mut CConnReq> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let c = unsafe { &mut *p.cast::<CConnReq>() };
    (c.magic == CONN_MAGIC).then_some(c)
}

/// # Safety
/// `p` a connection request of ours whose request was taken.
unsafe fn conn_free(p: *mut c_void) {
    // SAFETY: made by Box::into_raw in the worker's dispatch; freed once.
    unsafe {
        (*p.cast::<CConnReq>()).magic = 0;
        drop(Box::from_raw(p.cast::<CConnReq>()));
    }
}

/// `ucp_listener_h`.
#[derive(Debug)]
pub struct CListener {
    magic: u64,
    worker: *const CWorker,
    addr: SocketAddr,
}

impl CListener {
    /// # Safety
    /// `p` from `ucp_listener_create`, freed once.
    pub(crate) unsafe fn free(p: *mut CListener) {
        // SAFETY: per the contract.
        unsafe {
            (*p).magic = 0;
            drop(Box::from_raw(p));
        }
    }
}

/// A socket address from C.
///
/// # Safety
/// `a.addr` NULL or readable for `a.addrlen` bytes.
unsafe fn sockaddr(a: &ucs_sock_addr_t) -> Option<SocketAddr> {
    if a.addr.is_null() {
        return None;
    }
    // SAFETY: family is the first field of every sockaddr.
    let fam = i32::from(unsafe { (*a.addr).sa_family });
    match fam {
        libc::AF_INET if a.addrlen as usize >= std::mem::size_of::<libc::sockaddr_in>() => {
            // SAFETY: an AF_INET address of sufficient length.
            let s = unsafe { &*a.addr.cast::<libc::sockaddr_in>() };
            Some(SocketAddr::from((
                u32::from_be(s.sin_addr.s_addr).to_be_bytes(),
                u16::from_be(s.sin_port),
            )))
        }
        libc::AF_INET6 if a.addrlen as usize >= std::mem::size_of::<libc::sockaddr_in6>() => {
            // SAFETY: an AF_INET6 address of sufficient length.
            let s = unsafe { &*a.addr.cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::from((
                s.sin6_addr.s6_addr,
                u16::from_be(s.sin6_port),
            )))
        }
        _ => None,
    }
}

/// Writes a socket address into a `sockaddr_storage`.
fn write_sockaddr(dst: &mut libc::sockaddr_storage, a: SocketAddr) {
    // SAFETY: sockaddr_storage is large and aligned enough for either family; all-zero is
    // a valid value of both.
    unsafe {
        std::ptr::write_bytes(dst as *mut libc::sockaddr_storage, 0, 1);
        match a {
            SocketAddr::V4(v4) => {
                let s = &mut *(dst as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                s.sin_family = libc::AF_INET as libc::sa_family_t;
                s.sin_port = v4.port().to_be();
                s.sin_addr.s_addr = u32::from_be_bytes(v4.ip().octets()).to_be();
            }
            SocketAddr::V6(v6) => {
                let s = &mut *(dst as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                s.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                s.sin6_port = v6.port().to_be();
                s.sin6_addr.s6_addr = v6.ip().octets();
            }
        }
    }
}

/// # Safety
/// `worker` ours; `params` readable; `ep_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_create(
    worker: *mut CWorker,
    params: *const ucp_ep_params_t,
    ep_p: *mut *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if params.is_null() || ep_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable; field_mask first.
        let p = unsafe { &*params };
        if p.field_mask & !UCP_EP_PARAM_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        let has = |b: u64| p.field_mask & b != 0;
        let (res, uuid) = if has(UCP_EP_PARAM_FIELD_REMOTE_ADDRESS) {
            // SAFETY: the application passes an address of ours (framed, checked).
            let Some(body) = (unsafe { read_blob(p.address, ADDR_MAGIC) }) else {
                return code(Status::InvalidParam);
            };
            let uuid = ucp::address::WorkerAddress::decode(body)
                .ok()
                .map(|a| a.uuid);
            (w.with(|wk| wk.ep_create(body)), uuid)
        } else if has(UCP_EP_PARAM_FIELD_CONN_REQUEST) {
            // SAFETY: a connection request of ours.
            let Some(c) = (unsafe { conn_ref(p.conn_request) }) else {
                return code(Status::InvalidParam);
            };
            let Some(req) = c.req.take() else {
                return code(Status::InvalidParam);
            };
            // SAFETY: taken; the request object is done with.
            unsafe { conn_free(p.conn_request) };
            (w.with(|wk| wk.accept(req)), None)
        } else if has(UCP_EP_PARAM_FIELD_SOCK_ADDR) {
            // SAFETY: readable sockaddr by contract.
            let Some(a) = (unsafe { sockaddr(&p.sockaddr) }) else {
                return code(Status::InvalidParam);
            };
            (w.with(|wk| wk.ep_connect_sockaddr(a)), None)
        } else {
            return code(Status::InvalidParam);
        };
        let h = match res {
            Ok(h) => h,
            Err(s) => return code(s),
        };
        let e = handle_of(w, h);
        // SAFETY: just made (or found) in the worker's map; we set its fields before the
        // application sees it.
        let ce = unsafe { &mut *e.cast::<CEp>() };
        ce.remote_uuid = uuid;
        if has(UCP_EP_PARAM_FIELD_ERR_HANDLER) {
            ce.err = p.err_handler;
        }
        if has(UCP_EP_PARAM_FIELD_USER_DATA) {
            ce.user_data = Some(p.user_data);
        }
        // SAFETY: writable (checked non-NULL).
        unsafe { *ep_p = e };
        code(Status::Ok)
    })
}

/// The name, the transports (one `{transport, device}` entry per lane) and the user data of
/// an endpoint. The struct is reached through raw pointers, field by field: a caller built
/// against UCX 1.13's headers passes only the fields up to `remote_sockaddr`, and sets
/// neither bit of the later ones.
///
/// # Safety
/// `ep` ours; `attr` writable for every field its `field_mask` names; with
/// `UCP_EP_ATTR_FIELD_TRANSPORTS`, `transports.entries` writable for `num_entries` entries
/// of `entry_size` bytes.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_query(ep: *mut c_void, attr: *mut ucp_ep_attr_t) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return code(Status::InvalidParam);
        };
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: every caller's struct has field_mask (read first, alone).
        let mask = unsafe { (*attr).field_mask };
        if mask & !UCP_EP_ATTR_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        if mask & (UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR | UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR) != 0 {
            // Socket addresses of endpoints are not tracked (docs/c-abi.md).
            return code(Status::Unsupported);
        }
        if mask & UCP_EP_ATTR_FIELD_TRANSPORTS != 0 {
            // SAFETY: the field exists in the caller's struct (its bit is set).
            let t = unsafe { std::ptr::addr_of!((*attr).transports).read() };
            if t.num_entries > 0 && t.entries.is_null() {
                return code(Status::InvalidParam);
            }
        }
        if mask & UCP_EP_ATTR_FIELD_NAME != 0 {
            // SAFETY: writable by contract; a reference to this field alone.
            write_name(unsafe { &mut (*attr).name }, &e.name);
        }
        if mask & UCP_EP_ATTR_FIELD_TRANSPORTS != 0 {
            let lanes = w.with(|wk| wk.ep_transports(e.h)).unwrap_or_default();
            // SAFETY: as above.
            let t = unsafe { std::ptr::addr_of!((*attr).transports).read() };
            let n = lanes.len().min(t.num_entries as usize);
            let ptr_size = std::mem::size_of::<*const c_char>();
            for (i, (tl, dev)) in lanes.iter().take(n).enumerate() {
                let entry = t.entries.cast::<u8>().wrapping_add(i * t.entry_size);
                // A field is written only where it ends within `entry_size` (the caller's
                // entry may be an older, shorter struct); entries need not be aligned.
                if t.entry_size >= ptr_size {
                    // SAFETY: entry i's first pointer-sized bytes are the caller's (contract).
                    unsafe {
                        entry
                            .cast::<*const c_char>()
                            .write_unaligned(e.keep_name(tl))
                    };
                }
                if t.entry_size >= 2 * ptr_size {
                    // SAFETY: as above, for the second field.
                    unsafe {
                        entry
                            .add(ptr_size)
                            .cast::<*const c_char>()
                            .write_unaligned(e.keep_name(dev))
                    };
                }
            }
            // SAFETY: as above.
            unsafe { std::ptr::addr_of_mut!((*attr).transports.num_entries).write(n as c_uint) };
        }
        if mask & UCP_EP_ATTR_FIELD_USER_DATA != 0 {
            // (Read under the worker's lock, where ucp_ep_modify_nb writes it.)
            let ud = w
                .with_inner(|_| e.user_data)
                .unwrap_or(std::ptr::null_mut());
            // SAFETY: the field exists in the caller's struct (its bit is set).
            unsafe { std::ptr::addr_of_mut!((*attr).user_data).write(ud) };
        }
        code(Status::Ok)
    })
}

/// # Safety
/// `ep` ours; `stream` an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_print_info(ep: *mut c_void, stream: *mut c_void) {
    guard((), || {
        // SAFETY: forwarded contract.
        if let Some((e, w)) = unsafe { CEp::from_ptr(ep) } {
            let s = w
                .with(|wk| wk.ep_proto_info(e.h))
                .unwrap_or_else(|| format!("ep {}: closed\n", e.h.0));
            fput(stream, &s);
        }
    })
}

/// Changes an endpoint's error handler and user data, as UCX does (the peer, the address
/// and the error mode cannot change: UCS_ERR_INVALID_PARAM); completes at once.
///
/// # Safety
/// `ep` ours; `params` readable.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_modify_nb(
    ep: *mut c_void,
    params: *const ucp_ep_params_t,
) -> ucs_status_ptr_t {
    guard(status_ptr(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((_, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return status_ptr(Status::InvalidParam);
        };
        if params.is_null() {
            return status_ptr(Status::InvalidParam);
        }
        // SAFETY: readable by contract; field_mask first.
        let p = unsafe { &*params };
        let fixed = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
            | UCP_EP_PARAM_FIELD_SOCK_ADDR
            | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
            | UCP_EP_PARAM_FIELD_CONN_REQUEST;
        if p.field_mask & !UCP_EP_PARAM_FIELDS != 0 || p.field_mask & fixed != 0 {
            return status_ptr(Status::InvalidParam);
        }
        // Under the worker's lock: error reports read these fields under it too.
        w.with_inner(|_| {
            // SAFETY: ep is a live handle (checked); the lock orders this write with the
            // readers in `CWorker::dispatch`.
            let ce = unsafe { &mut *ep.cast::<CEp>() };
            if p.field_mask & UCP_EP_PARAM_FIELD_ERR_HANDLER != 0 {
                ce.err = p.err_handler;
            }
            if p.field_mask & UCP_EP_PARAM_FIELD_USER_DATA != 0 {
                ce.user_data = Some(p.user_data);
            }
        });
        std::ptr::null_mut()
    })
}

/// The estimated time of a message of `param->message_size` bytes on `ep`, in seconds:
/// the latency of the endpoint's highest-bandwidth lane plus the size over that bandwidth
/// (UCX's formula, with the transports' own estimates).
///
/// # Safety
/// `ep` ours; `param` readable; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_evaluate_perf(
    ep: *mut c_void,
    param: *const ucp_ep_evaluate_perf_param_t,
    attr: *mut ucp_ep_evaluate_perf_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return code(Status::InvalidParam);
        };
        if param.is_null() || attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable and writable by contract.
        let (p, a) = unsafe { (&*param, &mut *attr) };
        if p.field_mask & UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE == 0
            || a.field_mask & UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME == 0
        {
            return code(Status::InvalidParam);
        }
        match w.with(|wk| wk.ep_estimate(e.h, p.message_size)) {
            Some(t) => {
                a.estimated_time = t;
                code(Status::Ok)
            }
            None => code(Status::InvalidParam),
        }
    })
}

/// `ucp_rkey_h`.
#[derive(Debug)]
pub struct CRkey {
    magic: u64,
    pub(crate) rkey: Rkey,
    /// What `ucp_rkey_compare` orders by: the worker and endpoint it was unpacked on (a
    /// Rucx key serves only that endpoint) and the packed key it came from.
    identity: (usize, u32, Box<[u8]>),
}

impl CRkey {
    /// # Safety
    /// `p` NULL or a key of ours.
    pub(crate) unsafe fn from_ptr<'a>(p: *const c_void) -> Option<&'a CRkey> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the contract.
        let r = unsafe { &*p.cast::<CRkey>() };
        (r.magic == RKEY_MAGIC).then_some(r)
    }
}

/// # Safety
/// `ep` ours; `rkey_buffer` from a peer's `ucp_rkey_pack`; `rkey_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_ep_rkey_unpack(
    ep: *mut c_void,
    rkey_buffer: *const c_void,
    rkey_p: *mut *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((e, w)) = (unsafe { CEp::from_ptr(ep) }) else {
            return code(Status::InvalidParam);
        };
        if rkey_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: a packed key of ours (framed; checked).
        let Some(body) = (unsafe { read_blob(rkey_buffer, RKEY_BLOB_MAGIC) }) else {
            return code(Status::InvalidParam);
        };
        let Some((&n, mut rest)) = body.split_first() else {
            return code(Status::InvalidParam);
        };
        // The worker the endpoint reaches: from its address, or (client/server) as the
        // connection learned it.
        let target = e
            .remote_uuid
            .or_else(|| w.with(|wk| wk.ep_remote_worker(e.h)));
        let mut pick: Option<&[u8]> = None;
        for _ in 0..n {
            if rest.len() < 12 {
                return code(Status::InvalidParam);
            }
            let uuid = u64::from_le_bytes(rest[..8].try_into().unwrap_or([0; 8]));
            let len = u32::from_le_bytes(rest[8..12].try_into().unwrap_or([0; 4])) as usize;
            let Some(k) = rest.get(12..12 + len) else {
                return code(Status::InvalidParam);
            };
            if target == Some(uuid) || (target.is_none() && n == 1) {
                pick = Some(k);
            }
            rest = &rest[12 + len..];
        }
        let Some(k) = pick else {
            return code(Status::Unreachable);
        };
        match w.with(|wk| wk.rkey_unpack(e.h, k)) {
            Ok(rkey) => {
                let b = Box::into_raw(Box::new(CRkey {
                    magic: RKEY_MAGIC,
                    rkey,
                    identity: (w as *const CWorker as usize, e.h.0, k.into()),
                }));
                // SAFETY: writable (checked non-NULL).
                unsafe { *rkey_p = b.cast() };
                code(Status::Ok)
            }
            Err(s) => code(s),
        }
    })
}

/// # Safety
/// `rkey` from `ucp_ep_rkey_unpack`, not used after.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_destroy(rkey: *mut c_void) {
    guard((), || {
        // SAFETY: forwarded contract.
        if unsafe { CRkey::from_ptr(rkey) }.is_some() {
            // SAFETY: made by Box::into_raw in ucp_ep_rkey_unpack; magic cleared first.
            unsafe {
                (*rkey.cast::<CRkey>()).magic = 0;
                drop(Box::from_raw(rkey.cast::<CRkey>()));
            }
        }
    })
}

/// Orders two keys: 0 when they are interchangeable (the same region's key unpacked on the
/// same endpoint, any number of times), else -1 or 1, consistently (a total order for
/// sorting). `params->field_mask` must be 0 (no fields yet) and `result` non-NULL, as in
/// UCX.
///
/// # Safety
/// `worker` ours; `rkey1`, `rkey2` keys of ours; `params` readable; `result` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_compare(
    worker: *mut c_void,
    rkey1: *mut c_void,
    rkey2: *mut c_void,
    params: *const ucp_rkey_compare_params_t,
    result: *mut c_int,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract (each checked by magic).
        let (Some(_), Some(a), Some(b)) = (
            unsafe { CWorker::from_ptr(worker) },
            unsafe { CRkey::from_ptr(rkey1) },
            unsafe { CRkey::from_ptr(rkey2) },
        ) else {
            return code(Status::InvalidParam);
        };
        // SAFETY: readable by contract (checked non-NULL first).
        if params.is_null() || result.is_null() || unsafe { (*params).field_mask } != 0 {
            return code(Status::InvalidParam);
        }
        let r = match a.identity.cmp(&b.identity) {
            Ordering::Less => -1,
            Ordering::Equal => 0,
            Ordering::Greater => 1,
        };
        // SAFETY: writable by contract (checked non-NULL).
        unsafe { *result = r };
        code(Status::Ok)
    })
}

/// A local pointer to remote address `raddr` where the peer's region is mapped here
/// (same-host memory a peer allocated with `ucp_mem_map(ALLOCATE)`); UCS_ERR_UNREACHABLE
/// where it is not, as in UCX.
///
/// # Safety
/// `rkey` ours; `addr_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_ptr(
    rkey: *mut c_void,
    raddr: u64,
    addr_p: *mut *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(k) = (unsafe { CRkey::from_ptr(rkey) }) else {
            return code(Status::InvalidParam);
        };
        if addr_p.is_null() {
            return code(Status::InvalidParam);
        }
        match k.rkey.local_ptr(raddr) {
            Ok(p) => {
                // SAFETY: writable by contract (checked non-NULL).
                unsafe { *addr_p = p.cast() };
                code(Status::Ok)
            }
            Err(s) => code(s),
        }
    })
}

/// # Safety
/// `worker` ours; `params` readable; `listener_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_create(
    worker: *mut CWorker,
    params: *const ucp_listener_params_t,
    listener_p: *mut *mut CListener,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if params.is_null() || listener_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable; field_mask first.
        let p = unsafe { &*params };
        if p.field_mask & !UCP_LISTENER_PARAM_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        if p.field_mask & UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER != 0 {
            // The deprecated accept handler (endpoint created by the library) is not
            // provided; the connection handler is (docs/c-abi.md).
            return code(Status::Unsupported);
        }
        if p.field_mask & UCP_LISTENER_PARAM_FIELD_SOCK_ADDR == 0
            || p.field_mask & UCP_LISTENER_PARAM_FIELD_CONN_HANDLER == 0
        {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable sockaddr by contract.
        let Some(a) = (unsafe { sockaddr(&p.sockaddr) }) else {
            return code(Status::InvalidParam);
        };
        let bound = match w.with(|wk| wk.listen(a)) {
            Ok(b) => b,
            Err(s) => return code(s),
        };
        let l = Box::into_raw(Box::new(CListener {
            magic: LISTENER_MAGIC,
            worker: w as *const CWorker,
            addr: bound,
        }));
        let h = ConnH {
            cb: p.conn_handler.cb,
            arg: p.conn_handler.arg,
        };
        w.with_inner(|i| i.listeners.push((l as usize, h, bound)));
        // SAFETY: writable (checked non-NULL).
        unsafe { *listener_p = l };
        code(Status::Ok)
    })
}

/// # Safety
/// `p` NULL or a listener of ours.
unsafe fn listener_ref<'a>(p: *const CListener) -> Option<(&'a CListener, &'a CWorker)> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let l = unsafe { &*p };
    if l.magic != LISTENER_MAGIC {
        return None;
    }
    // SAFETY: a listener's worker outlives it.
    let w = unsafe { CWorker::from_ptr(l.worker.cast()) }?;
    Some((l, w))
}

/// # Safety
/// `listener` ours, not used after.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_destroy(listener: *mut CListener) {
    guard((), || {
        // SAFETY: forwarded contract.
        let Some((_, w)) = (unsafe { listener_ref(listener) }) else {
            return;
        };
        // Connection requests are no longer reported to the application; the socket stays
        // open until the worker is destroyed (the ucp API has no un-listen).
        let found = w.with_inner(|i| {
            let n = i.listeners.len();
            i.listeners.retain(|l| l.0 != listener as usize);
            n != i.listeners.len()
        });
        if found {
            // SAFETY: unlisted above: freed once.
            unsafe { CListener::free(listener) };
        }
    })
}

/// # Safety
/// `listener` ours; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_query(
    listener: *mut CListener,
    attr: *mut ucp_listener_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((l, _)) = (unsafe { listener_ref(listener) }) else {
            return code(Status::InvalidParam);
        };
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: writable by contract.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_LISTENER_ATTR_FIELD_SOCKADDR != 0 {
            return code(Status::InvalidParam);
        }
        if a.field_mask & UCP_LISTENER_ATTR_FIELD_SOCKADDR != 0 {
            write_sockaddr(&mut a.sockaddr, l.addr);
        }
        code(Status::Ok)
    })
}

/// # Safety
/// `listener` ours; `conn_request` a request it reported.
#[no_mangle]
pub unsafe extern "C" fn ucp_listener_reject(
    listener: *mut CListener,
    conn_request: *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some((_, w)) = (unsafe { listener_ref(listener) }) else {
            return code(Status::InvalidParam);
        };
        // SAFETY: forwarded contract.
        let Some(c) = (unsafe { conn_ref(conn_request) }) else {
            return code(Status::InvalidParam);
        };
        let Some(req) = c.req.take() else {
            return code(Status::InvalidParam);
        };
        // SAFETY: taken: the object is done with.
        unsafe { conn_free(conn_request) };
        w.with(|wk| wk.reject(req));
        code(Status::Ok)
    })
}

/// # Safety
/// `conn_request` ours; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_conn_request_query(
    conn_request: *mut c_void,
    attr: *mut ucp_conn_request_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(c) = (unsafe { conn_ref(conn_request) }) else {
            return code(Status::InvalidParam);
        };
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: writable by contract.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_CONN_REQUEST_ATTR_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        if a.field_mask & !UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR != 0 {
            // Client ids are not carried by Rucx's connection handshake.
            return code(Status::Unsupported);
        }
        if let Some(r) = &c.req {
            write_sockaddr(&mut a.client_address, r.client);
        }
        code(Status::Ok)
    })
}
