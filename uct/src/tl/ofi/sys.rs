//! libfabric's ABI, as far as the deferred-work queue needs it, and the library loaded at
//! run time (`libfabric.so.1`; nothing here links against it).
//!
//! Facts from libfabric's public headers (`rdma/fabric.h`, `fi_domain.h`, `fi_eq.h`,
//! `fi_endpoint.h`, `fi_cm.h`, `fi_tagged.h`, `fi_trigger.h`; ABI 1.x, unchanged from 1.17
//! to 2.x in every prefix used here). Only five calls are exported functions (`fi_getinfo`,
//! `fi_freeinfo`, `fi_dupinfo`, `fi_fabric`, `fi_version`, plus `fi_strerror`); every other
//! call of the API is a header inline that goes through the object's table of operations,
//! so the tables are declared here up to the last entry used, and called the same way.
//! Structures that libfabric allocates (`fi_info` and its attributes) are only read or
//! written in their leading fields, which never moved; the library allocates them at its
//! own size (`fi_dupinfo(NULL)`).

use std::ffi::{c_char, c_int, c_void};

pub type FiAddr = u64;
pub const FI_ADDR_UNSPEC: FiAddr = u64::MAX;

// Capabilities and modes (`fabric.h`).
pub const FI_TAGGED: u64 = 1 << 3;
pub const FI_RECV: u64 = 1 << 10;
pub const FI_SEND: u64 = 1 << 11;
pub const FI_TRANSMIT: u64 = FI_SEND;
pub const FI_TRIGGER: u64 = 1 << 20;
pub const FI_SELECTIVE_COMPLETION: u64 = 1 << 59;

pub const FI_MR_VIRT_ADDR: c_int = 1 << 4;
pub const FI_MR_ALLOCATED: c_int = 1 << 5;
pub const FI_MR_PROV_KEY: c_int = 1 << 6;
pub const FI_MR_ENDPOINT: c_int = 1 << 9;

/// `enum fi_ep_type`: `FI_EP_RDM`.
pub const FI_EP_RDM: u32 = 3;
/// `enum fi_av_type`: `FI_AV_TABLE`.
pub const FI_AV_TABLE: u32 = 2;
/// `enum fi_cq_format`: `FI_CQ_FORMAT_CONTEXT` (entries are one `void *op_context`).
pub const FI_CQ_FORMAT_CONTEXT: u32 = 1;
/// `enum fi_wait_obj`: `FI_WAIT_NONE` (we poll).
pub const FI_WAIT_NONE: u32 = 0;

// Control commands (`fabric.h`, the anonymous enum after `struct fi_mr_map_raw`).
pub const FI_ENABLE: c_int = 6;
pub const FI_QUEUE_WORK: c_int = 11;
pub const FI_FLUSH_WORK: c_int = 13;

/// `enum fi_op_type` (`fi_trigger.h`).
pub const FI_OP_TRECV: u32 = 2;
pub const FI_OP_TSEND: u32 = 3;
pub const FI_OP_CNTR_ADD: u32 = 10;

/// `FI_EAGAIN` and friends are negated errno values.
pub const FI_EAGAIN: isize = libc::EAGAIN as isize;
pub const FI_EAVAIL: isize = 259;
pub const FI_ENODATA: c_int = libc::ENODATA;

#[repr(C)]
pub struct Fid {
    pub fclass: usize,
    pub context: *mut c_void,
    pub ops: *const FiOps,
}

#[repr(C)]
pub struct FiOps {
    pub size: usize,
    pub close: unsafe extern "C" fn(*mut Fid) -> c_int,
    pub bind: unsafe extern "C" fn(*mut Fid, *mut Fid, u64) -> c_int,
    pub control: unsafe extern "C" fn(*mut Fid, c_int, *mut c_void) -> c_int,
    pub ops_open:
        unsafe extern "C" fn(*mut Fid, *const c_char, u64, *mut *mut c_void, *mut c_void) -> c_int,
}

#[repr(C)]
pub struct FiInfo {
    pub next: *mut FiInfo,
    pub caps: u64,
    pub mode: u64,
    pub addr_format: u32,
    pub src_addrlen: usize,
    pub dest_addrlen: usize,
    pub src_addr: *mut c_void,
    pub dest_addr: *mut c_void,
    pub handle: *mut Fid,
    pub tx_attr: *mut c_void,
    pub rx_attr: *mut c_void,
    pub ep_attr: *mut FiEpAttr,
    pub domain_attr: *mut FiDomainAttr,
    pub fabric_attr: *mut FiFabricAttr,
    pub nic: *mut c_void,
}

/// `struct fi_ep_attr`, its first field (the rest is the library's).
#[repr(C)]
pub struct FiEpAttr {
    pub type_: u32,
}

/// `struct fi_domain_attr`, up to `mr_mode`.
#[repr(C)]
pub struct FiDomainAttr {
    pub domain: *mut c_void,
    pub name: *mut c_char,
    pub threading: u32,
    pub control_progress: u32,
    pub data_progress: u32,
    pub resource_mgmt: u32,
    pub av_type: u32,
    pub mr_mode: c_int,
}

#[repr(C)]
pub struct FiFabricAttr {
    pub fabric: *mut c_void,
    pub name: *mut c_char,
    pub prov_name: *mut c_char,
    pub prov_version: u32,
    pub api_version: u32,
}

#[repr(C)]
pub struct FidFabric {
    pub fid: Fid,
    pub ops: *const FiOpsFabric,
}

#[repr(C)]
pub struct FiOpsFabric {
    pub size: usize,
    pub domain: unsafe extern "C" fn(
        *mut FidFabric,
        *mut FiInfo,
        *mut *mut FidDomain,
        *mut c_void,
    ) -> c_int,
}

#[repr(C)]
pub struct FidDomain {
    pub fid: Fid,
    pub ops: *const FiOpsDomain,
}

#[repr(C)]
pub struct FiOpsDomain {
    pub size: usize,
    pub av_open:
        unsafe extern "C" fn(*mut FidDomain, *mut FiAvAttr, *mut *mut FidAv, *mut c_void) -> c_int,
    pub cq_open:
        unsafe extern "C" fn(*mut FidDomain, *mut FiCqAttr, *mut *mut FidCq, *mut c_void) -> c_int,
    pub endpoint:
        unsafe extern "C" fn(*mut FidDomain, *mut FiInfo, *mut *mut FidEp, *mut c_void) -> c_int,
    pub scalable_ep: *const c_void,
    pub cntr_open: unsafe extern "C" fn(
        *mut FidDomain,
        *mut FiCntrAttr,
        *mut *mut FidCntr,
        *mut c_void,
    ) -> c_int,
}

#[repr(C)]
pub struct FiAvAttr {
    pub type_: u32,
    pub rx_ctx_bits: c_int,
    pub count: usize,
    pub ep_per_node: usize,
    pub name: *const c_char,
    pub map_addr: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct FidAv {
    pub fid: Fid,
    pub ops: *const FiOpsAv,
}

#[repr(C)]
pub struct FiOpsAv {
    pub size: usize,
    pub insert: unsafe extern "C" fn(
        *mut FidAv,
        *const c_void,
        usize,
        *mut FiAddr,
        u64,
        *mut c_void,
    ) -> c_int,
}

#[repr(C)]
pub struct FiCqAttr {
    pub size: usize,
    pub flags: u64,
    pub format: u32,
    pub wait_obj: u32,
    pub signaling_vector: c_int,
    pub wait_cond: u32,
    pub wait_set: *mut c_void,
}

#[repr(C)]
pub struct FidCq {
    pub fid: Fid,
    pub ops: *const FiOpsCq,
}

#[repr(C)]
pub struct FiOpsCq {
    pub size: usize,
    pub read: unsafe extern "C" fn(*mut FidCq, *mut c_void, usize) -> isize,
    pub readfrom: *const c_void,
    pub readerr: unsafe extern "C" fn(*mut FidCq, *mut FiCqErrEntry, u64) -> isize,
}

/// `struct fi_cq_err_entry` as of ABI 1.5 (1.20 appended `src_addr`; `pad` leaves room for
/// it and any later field, since the library writes at its own size).
#[repr(C)]
pub struct FiCqErrEntry {
    pub op_context: *mut c_void,
    pub flags: u64,
    pub len: usize,
    pub buf: *mut c_void,
    pub data: u64,
    pub tag: u64,
    pub olen: usize,
    pub err: c_int,
    pub prov_errno: c_int,
    pub err_data: *mut c_void,
    pub err_data_size: usize,
    pub pad: [u64; 8],
}

#[repr(C)]
pub struct FiCntrAttr {
    pub events: u32,
    pub wait_obj: u32,
    pub wait_set: *mut c_void,
    pub flags: u64,
}

#[repr(C)]
pub struct FidCntr {
    pub fid: Fid,
    pub ops: *const FiOpsCntr,
}

#[repr(C)]
pub struct FiOpsCntr {
    pub size: usize,
    pub read: unsafe extern "C" fn(*mut FidCntr) -> u64,
    pub readerr: unsafe extern "C" fn(*mut FidCntr) -> u64,
    pub add: unsafe extern "C" fn(*mut FidCntr, u64) -> c_int,
    pub set: unsafe extern "C" fn(*mut FidCntr, u64) -> c_int,
}

#[repr(C)]
pub struct FidEp {
    pub fid: Fid,
    pub ops: *const c_void,
    pub cm: *const FiOpsCm,
    pub msg: *const c_void,
    pub rma: *const c_void,
    pub tagged: *const c_void,
}

#[repr(C)]
pub struct FiOpsCm {
    pub size: usize,
    pub setname: *const c_void,
    pub getname: unsafe extern "C" fn(*mut Fid, *mut c_void, *mut usize) -> c_int,
}

#[repr(C)]
pub struct FiMsgTagged {
    pub msg_iov: *const libc::iovec,
    pub desc: *mut *mut c_void,
    pub iov_count: usize,
    pub addr: FiAddr,
    pub tag: u64,
    pub ignore: u64,
    pub context: *mut c_void,
    pub data: u64,
}

#[repr(C)]
pub struct FiOpTagged {
    pub ep: *mut FidEp,
    pub msg: FiMsgTagged,
    pub flags: u64,
}

#[repr(C)]
pub struct FiOpCntr {
    pub cntr: *mut FidCntr,
    pub value: u64,
}

/// `struct fi_context2`: eight pointers the provider may use while it owns the operation.
#[repr(C)]
pub struct FiContext2 {
    pub internal: [*mut c_void; 8],
}

/// `struct fi_deferred_work`. The operation's context must be `&context` (the sockets
/// provider refuses anything else), and the whole structure must stay in place until the
/// work completes (sockets keeps pointers into it; cxi copies it).
#[repr(C)]
pub struct FiDeferredWork {
    pub context: FiContext2,
    pub threshold: u64,
    pub triggering_cntr: *mut FidCntr,
    pub completion_cntr: *mut FidCntr,
    pub op_type: u32,
    /// A pointer to `FiOpTagged` or `FiOpCntr`, by `op_type`.
    pub op: *mut c_void,
}

pub type GetInfo = unsafe extern "C" fn(
    u32,
    *const c_char,
    *const c_char,
    u64,
    *const FiInfo,
    *mut *mut FiInfo,
) -> c_int;
pub type FreeInfo = unsafe extern "C" fn(*mut FiInfo);
pub type DupInfo = unsafe extern "C" fn(*const FiInfo) -> *mut FiInfo;
pub type Fabric =
    unsafe extern "C" fn(*mut FiFabricAttr, *mut *mut FidFabric, *mut c_void) -> c_int;
pub type Version = unsafe extern "C" fn() -> u32;
pub type StrError = unsafe extern "C" fn(c_int) -> *const c_char;

/// The library's exported calls.
pub struct Lib {
    pub getinfo: GetInfo,
    pub freeinfo: FreeInfo,
    pub dupinfo: DupInfo,
    pub fabric: Fabric,
    pub version: Version,
    pub strerror: StrError,
}

/// `libfabric.so.1`, loaded once per process (it stays loaded: providers may have started
/// threads or registered exit handlers that an unload would pull the code from under), or
/// why it cannot be.
pub fn lib() -> Result<&'static Lib, String> {
    static LIB: std::sync::OnceLock<Result<Lib, String>> = std::sync::OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(Clone::clone)
}

fn load() -> Result<Lib, String> {
    // SAFETY: dlopen with a constant name.
    let h = unsafe { libc::dlopen(c"libfabric.so.1".as_ptr(), libc::RTLD_NOW) };
    if h.is_null() {
        return Err("libfabric.so.1 not found".into());
    }
    let sym = |name: &std::ffi::CStr| {
        // SAFETY: a symbol lookup in a library loaded above and never unloaded.
        let p = unsafe { libc::dlsym(h, name.as_ptr()) };
        if p.is_null() {
            Err(format!("libfabric.so.1 lacks {}", name.to_string_lossy()))
        } else {
            Ok(p)
        }
    };
    let (gi, fi, di, fa, ve, se) = (
        sym(c"fi_getinfo")?,
        sym(c"fi_freeinfo")?,
        sym(c"fi_dupinfo")?,
        sym(c"fi_fabric")?,
        sym(c"fi_version")?,
        sym(c"fi_strerror")?,
    );
    // SAFETY: each symbol has the C signature of its type (`rdma/fabric.h`).
    unsafe {
        Ok(Lib {
            getinfo: std::mem::transmute::<*mut c_void, GetInfo>(gi),
            freeinfo: std::mem::transmute::<*mut c_void, FreeInfo>(fi),
            dupinfo: std::mem::transmute::<*mut c_void, DupInfo>(di),
            fabric: std::mem::transmute::<*mut c_void, Fabric>(fa),
            version: std::mem::transmute::<*mut c_void, Version>(ve),
            strerror: std::mem::transmute::<*mut c_void, StrError>(se),
        })
    }
}

impl Lib {
    /// The text of a libfabric return code (negative errno or `FI_E*`).
    pub fn error(&self, rc: c_int) -> String {
        // SAFETY: fi_strerror takes any value and returns a static string.
        let s = unsafe { (self.strerror)(-rc) };
        if s.is_null() {
            format!("libfabric error {rc}")
        } else {
            // SAFETY: a NUL-terminated static string.
            unsafe { std::ffi::CStr::from_ptr(s) }
                .to_string_lossy()
                .into_owned()
        }
    }
}
