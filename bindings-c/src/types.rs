//! The C types of UCX 1.19's `ucp.h` that cross the boundary, as `#[repr(C)]` structs, and
//! the enum values and flag bits the shim reads. Written from the facts of UCX's headers
//! (names, values, field order); `tests/abi.rs` compiles a C program against every UCX
//! header set it finds (Debian's 1.13, the 1.22 wheel) and compares every size, offset and
//! value listed in [`layouts`] and [`constants`], minus what [`since`] says a version lacks
//! and [`other_abi`] says it numbers differently.
//!
//! From 1.13 to 1.19 structs only grew at their ends and flags only gained bits, so a
//! program built against 1.13's headers works with these definitions, provided a field
//! added later is read or written only when its `field_mask` bit is set.
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_uint, c_void};

pub type ucs_status_t = c_int;
/// `ucs_status_t` as a C function *returns* it to us: UCX declares the enum packed (one
/// byte), so only the low byte of the return register is defined. Callbacks we call that
/// return a status are typed with this, and widened with `ucs_status_t::from`.
pub type ucs_status_ret_t = i8;
pub type ucs_status_ptr_t = *mut c_void;
pub type ucp_datatype_t = u64;
pub type ucp_tag_t = u64;

pub const fn bit(i: u32) -> u64 {
    1u64 << i
}

/// Bits `0..n` of a field mask.
pub const fn mask(n: u32) -> u64 {
    (1u64 << n) - 1
}

// ucs_thread_mode_t
pub const UCS_THREAD_MODE_SINGLE: c_int = 0;
pub const UCS_THREAD_MODE_SERIALIZED: c_int = 1;
pub const UCS_THREAD_MODE_MULTI: c_int = 2;

// ucs_memory_type_t, numbered as in UCX 1.19 (1.16 and 1.17 inserted RDMA and the ZE
// types before LAST, which moved from 5 to 9).
pub const UCS_MEMORY_TYPE_HOST: c_int = 0;
pub const UCS_MEMORY_TYPE_CUDA: c_int = 1;
pub const UCS_MEMORY_TYPE_CUDA_MANAGED: c_int = 2;
pub const UCS_MEMORY_TYPE_ROCM: c_int = 3;
pub const UCS_MEMORY_TYPE_ROCM_MANAGED: c_int = 4;
pub const UCS_MEMORY_TYPE_RDMA: c_int = 5;
pub const UCS_MEMORY_TYPE_ZE_HOST: c_int = 6;
pub const UCS_MEMORY_TYPE_ZE_DEVICE: c_int = 7;
pub const UCS_MEMORY_TYPE_ZE_MANAGED: c_int = 8;
pub const UCS_MEMORY_TYPE_LAST: c_int = 9;
pub const UCS_MEMORY_TYPE_UNKNOWN: c_int = UCS_MEMORY_TYPE_LAST;
/// `UCS_MEMORY_TYPE_UNKNOWN` in a program built against UCX 1.13's headers (1.19's RDMA).
pub const UCS_MEMORY_TYPE_UNKNOWN_1_13: c_int = 5;
/// `UCS_MEMORY_TYPE_UNKNOWN` in a program built against the headers of UCX 1.21 or later
/// (1.21 inserted GAUDI at 9); no 1.19 type has this number.
pub const UCS_MEMORY_TYPE_UNKNOWN_1_21: c_int = 10;

/// `ucs_memory_type_t` of a Rucx memory type.
pub(crate) fn ucs_mem_type(t: ucs::memtype::MemoryType) -> c_int {
    match t {
        ucs::memtype::MemoryType::Host => UCS_MEMORY_TYPE_HOST,
        ucs::memtype::MemoryType::Cuda => UCS_MEMORY_TYPE_CUDA,
        ucs::memtype::MemoryType::CudaManaged => UCS_MEMORY_TYPE_CUDA_MANAGED,
    }
}

/// A `ucs_memory_type_t` the application passed: `Ok(None)` for unknown (detect it),
/// `Err` for types Rucx does not move (ROCm, ZE). UNKNOWN is 9 in UCX 1.19's numbering, 5
/// for a program built against 1.13's headers and 10 against 1.21's or later: each means
/// "detect" (so 5, 1.19's RDMA, does too; Rucx has no RDMA-device memory to tell apart).
pub(crate) fn mem_type_of(t: c_int) -> Result<Option<ucs::memtype::MemoryType>, ucs::Status> {
    match t {
        UCS_MEMORY_TYPE_HOST => Ok(Some(ucs::memtype::MemoryType::Host)),
        UCS_MEMORY_TYPE_CUDA => Ok(Some(ucs::memtype::MemoryType::Cuda)),
        UCS_MEMORY_TYPE_CUDA_MANAGED => Ok(Some(ucs::memtype::MemoryType::CudaManaged)),
        UCS_MEMORY_TYPE_UNKNOWN | UCS_MEMORY_TYPE_UNKNOWN_1_13 | UCS_MEMORY_TYPE_UNKNOWN_1_21 => {
            Ok(None)
        }
        _ => Err(ucs::Status::Unsupported),
    }
}

// ucp_params_field: bits 0..=8 (FEATURES, REQUEST_SIZE, REQUEST_INIT, REQUEST_CLEANUP,
// TAG_SENDER_MASK, MT_WORKERS_SHARED, ESTIMATED_NUM_EPS, ESTIMATED_NUM_PPN, NAME).
pub const UCP_PARAM_FIELD_FEATURES: u64 = bit(0);
pub const UCP_PARAM_FIELD_REQUEST_SIZE: u64 = bit(1);
pub const UCP_PARAM_FIELD_REQUEST_INIT: u64 = bit(2);
pub const UCP_PARAM_FIELD_REQUEST_CLEANUP: u64 = bit(3);
pub const UCP_PARAM_FIELD_NAME: u64 = bit(8);
pub const UCP_PARAM_FIELDS: u64 = mask(9);

// ucp_feature: TAG, RMA, AMO32, AMO64, WAKEUP, STREAM, AM, EXPORTED_MEMH (1.14).
pub const UCP_FEATURE_EXPORTED_MEMH: u64 = bit(7);
pub const UCP_FEATURES: u64 = mask(8);

// ucp_worker_params_field: bits 0..=8.
pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = bit(0);
pub const UCP_WORKER_PARAM_FIELD_NAME: u64 = bit(6);
pub const UCP_WORKER_PARAM_FIELDS: u64 = mask(9);

// ucp_ep_params_field: bits 0..=8.
pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = bit(0);
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = bit(1);
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = bit(2);
pub const UCP_EP_PARAM_FIELD_USER_DATA: u64 = bit(3);
pub const UCP_EP_PARAM_FIELD_SOCK_ADDR: u64 = bit(4);
pub const UCP_EP_PARAM_FIELD_CONN_REQUEST: u64 = bit(6);
pub const UCP_EP_PARAM_FIELDS: u64 = mask(9);

// ucp_ep_perf_param_field / ucp_ep_perf_attr_field
pub const UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE: u64 = bit(0);
pub const UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME: u64 = bit(0);

// ucp_listener_params_field
pub const UCP_LISTENER_PARAM_FIELD_SOCK_ADDR: u64 = bit(0);
pub const UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER: u64 = bit(1);
pub const UCP_LISTENER_PARAM_FIELD_CONN_HANDLER: u64 = bit(2);
pub const UCP_LISTENER_PARAM_FIELDS: u64 = mask(3);

// ucp_ep_close_mode / flags
pub const UCP_EP_CLOSE_MODE_FORCE: c_uint = 0;
pub const UCP_EP_CLOSE_MODE_FLUSH: c_uint = 1;
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1;

// ucp_mem_map_params_field
pub const UCP_MEM_MAP_PARAM_FIELD_ADDRESS: u64 = bit(0);
pub const UCP_MEM_MAP_PARAM_FIELD_LENGTH: u64 = bit(1);
pub const UCP_MEM_MAP_PARAM_FIELD_FLAGS: u64 = bit(2);
pub const UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE: u64 = bit(4);
pub const UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER: u64 = bit(5);
pub const UCP_MEM_MAP_PARAM_FIELDS: u64 = mask(6);
pub const UCP_MEM_MAP_NONBLOCK: c_uint = 1 << 0;
pub const UCP_MEM_MAP_ALLOCATE: c_uint = 1 << 1;
pub const UCP_MEM_MAP_FIXED: c_uint = 1 << 2;
pub const UCP_MEM_MAP_SYMMETRIC_RKEY: c_uint = 1 << 3;
pub const UCP_MEM_MAP_LOCK: c_uint = 1 << 4;

// ucp_memh_pack_params_field, ucp_memh_pack_flags
pub const UCP_MEMH_PACK_PARAM_FIELD_FLAGS: u64 = bit(0);
pub const UCP_MEMH_PACK_FLAG_EXPORT: u64 = bit(0);

// ucp_mem_attr_field
pub const UCP_MEM_ATTR_FIELD_ADDRESS: u64 = bit(0);
pub const UCP_MEM_ATTR_FIELD_LENGTH: u64 = bit(1);
pub const UCP_MEM_ATTR_FIELD_MEM_TYPE: u64 = bit(2);
pub const UCP_MEM_ATTR_FIELDS: u64 = mask(3);

pub const UCP_MEM_ADVISE_PARAM_FIELDS: u64 = mask(3);

// ucp_lib_attr_field, ucp_context_attr_field, ucp_worker_attr_field
pub const UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL: u64 = bit(0);
/// `ucs_config_print_flags_t`.
pub const UCS_CONFIG_PRINT_CONFIG: u32 = 1 << 0;
pub const UCS_CONFIG_PRINT_HEADER: u32 = 1 << 1;
pub const UCS_CONFIG_PRINT_DOC: u32 = 1 << 2;
pub const UCP_ATTR_FIELD_REQUEST_SIZE: u64 = bit(0);
pub const UCP_ATTR_FIELD_THREAD_MODE: u64 = bit(1);
pub const UCP_ATTR_FIELD_MEMORY_TYPES: u64 = bit(2);
pub const UCP_ATTR_FIELD_NAME: u64 = bit(3);
pub const UCP_ATTR_FIELDS: u64 = mask(4);
pub const UCP_WORKER_ATTR_FIELD_THREAD_MODE: u64 = bit(0);
pub const UCP_WORKER_ATTR_FIELD_ADDRESS: u64 = bit(1);
pub const UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS: u64 = bit(2);
pub const UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER: u64 = bit(3);
pub const UCP_WORKER_ATTR_FIELD_NAME: u64 = bit(4);
pub const UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING: u64 = bit(5);
pub const UCP_WORKER_ATTR_FIELDS: u64 = mask(6);
pub const UCP_WORKER_ADDRESS_ATTR_FIELD_UID: u64 = bit(0);
pub const UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR: u64 = bit(0);
pub const UCP_CONN_REQUEST_ATTR_FIELDS: u64 = mask(2);
pub const UCP_LISTENER_ATTR_FIELD_SOCKADDR: u64 = bit(0);
pub const UCP_EP_ATTR_FIELD_NAME: u64 = bit(0);
pub const UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR: u64 = bit(1);
pub const UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR: u64 = bit(2);
pub const UCP_EP_ATTR_FIELD_TRANSPORTS: u64 = bit(3);
pub const UCP_EP_ATTR_FIELD_USER_DATA: u64 = bit(4);
pub const UCP_EP_ATTR_FIELDS: u64 = mask(5);

// ucp_dt_type
pub const UCP_DATATYPE_CONTIG: u64 = 0;
pub const UCP_DATATYPE_IOV: u64 = 2;
pub const UCP_DATATYPE_GENERIC: u64 = 7;
pub const UCP_DATATYPE_SHIFT: u32 = 3;
pub const UCP_DATATYPE_CLASS_MASK: u64 = mask(UCP_DATATYPE_SHIFT);

// ucp_datatype_attr_field
pub const UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE: u64 = bit(0);
pub const UCP_DATATYPE_ATTR_FIELD_BUFFER: u64 = bit(1);
pub const UCP_DATATYPE_ATTR_FIELD_COUNT: u64 = bit(2);
pub const UCP_DATATYPE_ATTR_FIELDS: u64 = mask(3);

// ucp_am_cb_flags, ucp_send_am_flags, ucp_am_recv_attr_t, ucp_am_handler_param_field
pub const UCP_AM_FLAG_WHOLE_MSG: u32 = 1 << 0;
pub const UCP_AM_FLAG_PERSISTENT_DATA: u32 = 1 << 1;
/// `ucp_am_callback_t`'s flags: the data may be kept (`UCS_INPROGRESS`).
pub const UCP_CB_PARAM_FLAG_DATA: c_uint = 1 << 0;
pub const UCP_AM_SEND_FLAG_REPLY: u32 = 1 << 0;
pub const UCP_AM_SEND_FLAG_EAGER: u32 = 1 << 1;
pub const UCP_AM_SEND_FLAG_RNDV: u32 = 1 << 2;
/// The header need only live until the send call returns (Rucx copies it before returning
/// in every case).
pub const UCP_AM_SEND_FLAG_COPY_HEADER: u32 = 1 << 3;
pub const UCP_AM_RECV_ATTR_FIELD_REPLY_EP: u64 = bit(0);
pub const UCP_AM_RECV_ATTR_FLAG_DATA: u64 = bit(16);
pub const UCP_AM_RECV_ATTR_FLAG_RNDV: u64 = bit(17);
pub const UCP_AM_HANDLER_PARAM_FIELD_ID: u64 = bit(0);
pub const UCP_AM_HANDLER_PARAM_FIELD_FLAGS: u64 = bit(1);
pub const UCP_AM_HANDLER_PARAM_FIELD_CB: u64 = bit(2);
pub const UCP_AM_HANDLER_PARAM_FIELD_ARG: u64 = bit(3);
pub const UCP_AM_HANDLER_PARAM_FIELDS: u64 = mask(4);

// ucp_atomic_post_op_t / ucp_atomic_fetch_op_t / ucp_atomic_op_t
pub const UCP_ATOMIC_POST_OP_ADD: c_int = 0;
pub const UCP_ATOMIC_POST_OP_AND: c_int = 1;
pub const UCP_ATOMIC_POST_OP_OR: c_int = 2;
pub const UCP_ATOMIC_POST_OP_XOR: c_int = 3;
pub const UCP_ATOMIC_FETCH_OP_FADD: c_int = 0;
pub const UCP_ATOMIC_FETCH_OP_SWAP: c_int = 1;
pub const UCP_ATOMIC_FETCH_OP_CSWAP: c_int = 2;
pub const UCP_ATOMIC_FETCH_OP_FAND: c_int = 3;
pub const UCP_ATOMIC_FETCH_OP_FOR: c_int = 4;
pub const UCP_ATOMIC_FETCH_OP_FXOR: c_int = 5;
pub const UCP_ATOMIC_OP_ADD: c_int = 0;
pub const UCP_ATOMIC_OP_SWAP: c_int = 1;
pub const UCP_ATOMIC_OP_CSWAP: c_int = 2;
pub const UCP_ATOMIC_OP_AND: c_int = 3;
pub const UCP_ATOMIC_OP_OR: c_int = 4;
pub const UCP_ATOMIC_OP_XOR: c_int = 5;

pub const UCP_STREAM_RECV_FLAG_WAITALL: c_uint = 1;

// ucp_op_attr_t
pub const UCP_OP_ATTR_FIELD_REQUEST: u32 = 1 << 0;
pub const UCP_OP_ATTR_FIELD_CALLBACK: u32 = 1 << 1;
pub const UCP_OP_ATTR_FIELD_USER_DATA: u32 = 1 << 2;
pub const UCP_OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;
pub const UCP_OP_ATTR_FIELD_REPLY_BUFFER: u32 = 1 << 5;
pub const UCP_OP_ATTR_FIELD_MEMORY_TYPE: u32 = 1 << 6;
pub const UCP_OP_ATTR_FIELD_RECV_INFO: u32 = 1 << 7;
pub const UCP_OP_ATTR_FIELD_MEMH: u32 = 1 << 8;
pub const UCP_OP_ATTR_FLAG_NO_IMM_CMPL: u32 = 1 << 16;
pub const UCP_OP_ATTR_FLAG_FAST_CMPL: u32 = 1 << 17;
pub const UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL: u32 = 1 << 18;
pub const UCP_OP_ATTR_FLAG_MULTI_SEND: u32 = 1 << 19;
pub const UCP_OP_ATTRS: u32 = 0x1ff | (0xf << 16);

// ucp_req_attr_field
pub const UCP_REQUEST_ATTR_FIELD_INFO_STRING: u64 = bit(0);
pub const UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE: u64 = bit(1);
pub const UCP_REQUEST_ATTR_FIELD_STATUS: u64 = bit(2);
pub const UCP_REQUEST_ATTR_FIELD_MEM_TYPE: u64 = bit(3);
pub const UCP_REQUEST_ATTR_FIELDS: u64 = mask(4);

pub const UCP_ENTITY_NAME_MAX: usize = 32;

pub type ucp_request_init_callback_t = Option<unsafe extern "C" fn(*mut c_void)>;
pub type ucp_request_cleanup_callback_t = Option<unsafe extern "C" fn(*mut c_void)>;
pub type ucp_send_callback_t = Option<unsafe extern "C" fn(*mut c_void, ucs_status_t)>;
pub type ucp_send_nbx_callback_t =
    Option<unsafe extern "C" fn(*mut c_void, ucs_status_t, *mut c_void)>;
pub type ucp_tag_recv_callback_t =
    Option<unsafe extern "C" fn(*mut c_void, ucs_status_t, *mut ucp_tag_recv_info_t)>;
pub type ucp_tag_recv_nbx_callback_t = Option<
    unsafe extern "C" fn(*mut c_void, ucs_status_t, *const ucp_tag_recv_info_t, *mut c_void),
>;
pub type ucp_stream_recv_callback_t =
    Option<unsafe extern "C" fn(*mut c_void, ucs_status_t, usize)>;
pub type ucp_stream_recv_nbx_callback_t =
    Option<unsafe extern "C" fn(*mut c_void, ucs_status_t, usize, *mut c_void)>;
pub type ucp_am_recv_data_nbx_callback_t = ucp_stream_recv_nbx_callback_t;
pub type ucp_err_handler_cb_t =
    Option<unsafe extern "C" fn(*mut c_void, *mut c_void, ucs_status_t)>;
pub type ucp_listener_conn_callback_t = Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>;
pub type ucp_listener_accept_callback_t = Option<unsafe extern "C" fn(*mut c_void, *mut c_void)>;
/// The deprecated handler of `ucp_worker_set_am_handler`: `(arg, data, length, reply_ep,
/// flags)`.
pub type ucp_am_callback_t = Option<
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, *mut c_void, c_uint) -> ucs_status_ret_t,
>;
pub type ucp_am_recv_callback_t = Option<
    unsafe extern "C" fn(
        *mut c_void,
        *const c_void,
        usize,
        *mut c_void,
        usize,
        *const ucp_am_recv_param_t,
    ) -> ucs_status_ret_t,
>;

#[repr(C)]
#[derive(Debug)]
pub struct ucp_params_t {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: ucp_request_init_callback_t,
    pub request_cleanup: ucp_request_cleanup_callback_t,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_lib_attr_t {
    pub field_mask: u64,
    pub max_thread_level: c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_context_attr_t {
    pub field_mask: u64,
    pub request_size: usize,
    pub thread_mode: c_int,
    pub memory_types: u64,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
}

#[repr(C)]
#[derive(Debug)]
pub struct ucs_cpu_set_t {
    pub ucs_bits: [u64; 16],
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_worker_params_t {
    pub field_mask: u64,
    pub thread_mode: c_int,
    pub cpu_mask: ucs_cpu_set_t,
    pub events: c_uint,
    pub user_data: *mut c_void,
    pub event_fd: c_int,
    pub flags: u64,
    pub name: *const c_char,
    pub am_alignment: usize,
    pub client_id: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_worker_attr_t {
    pub field_mask: u64,
    pub thread_mode: c_int,
    pub address_flags: u32,
    pub address: *mut c_void,
    pub address_length: usize,
    pub max_am_header: usize,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
    pub max_debug_string: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_worker_address_attr_t {
    pub field_mask: u64,
    pub worker_uid: u64,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ucs_sock_addr_t {
    pub addr: *const libc::sockaddr,
    pub addrlen: libc::socklen_t,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ucp_err_handler_t {
    pub cb: ucp_err_handler_cb_t,
    pub arg: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_ep_params_t {
    pub field_mask: u64,
    pub address: *const c_void,
    pub err_mode: c_int,
    pub err_handler: ucp_err_handler_t,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub sockaddr: ucs_sock_addr_t,
    pub conn_request: *mut c_void,
    pub name: *const c_char,
    pub local_sockaddr: ucs_sock_addr_t,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ucp_transport_entry_t {
    pub transport_name: *const c_char,
    pub device_name: *const c_char,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ucp_transports_t {
    pub entries: *mut ucp_transport_entry_t,
    pub num_entries: c_uint,
    pub entry_size: usize,
}

/// `ucp_ep_attr_t` of UCX 1.19. A caller built against 1.13's headers passes only the
/// first 296 bytes (up to `remote_sockaddr`): `transports` (1.14) and `user_data` (1.18)
/// are touched only through raw pointers, when their bit is set.
#[repr(C)]
#[allow(missing_debug_implementations)] // sockaddr_storage has no Debug
pub struct ucp_ep_attr_t {
    pub field_mask: u64,
    pub name: [c_char; UCP_ENTITY_NAME_MAX],
    pub local_sockaddr: libc::sockaddr_storage,
    pub remote_sockaddr: libc::sockaddr_storage,
    pub transports: ucp_transports_t,
    pub user_data: *mut c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ucp_listener_accept_handler_t {
    pub cb: ucp_listener_accept_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ucp_listener_conn_handler_t {
    pub cb: ucp_listener_conn_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_listener_params_t {
    pub field_mask: u64,
    pub sockaddr: ucs_sock_addr_t,
    pub accept_handler: ucp_listener_accept_handler_t,
    pub conn_handler: ucp_listener_conn_handler_t,
}

#[repr(C)]
#[allow(missing_debug_implementations)] // sockaddr_storage has no Debug
pub struct ucp_listener_attr_t {
    pub field_mask: u64,
    pub sockaddr: libc::sockaddr_storage,
}

#[repr(C)]
#[allow(missing_debug_implementations)] // sockaddr_storage has no Debug
pub struct ucp_conn_request_attr_t {
    pub field_mask: u64,
    pub client_address: libc::sockaddr_storage,
    pub client_id: u64,
}

/// `ucp_mem_map_params_t` of UCX 1.19: `exported_memh_buffer` (1.14) is past the end of
/// a 1.13 caller's struct, read through a raw pointer only when its bit is set.
#[repr(C)]
#[derive(Debug)]
pub struct ucp_mem_map_params_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_int,
    pub exported_memh_buffer: *const c_void,
}

/// The fields of `ucp_mem_map_params_t` that every caller passes (UCX 1.13's whole struct):
/// what `ucp_mem_map` reads through a reference.
#[repr(C)]
#[derive(Debug)]
pub struct ucp_mem_map_params_v113_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub flags: c_uint,
    pub prot: c_uint,
    pub memory_type: c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_memh_pack_params_t {
    pub field_mask: u64,
    pub flags: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_memh_buffer_release_params_t {
    pub field_mask: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_rkey_compare_params_t {
    pub field_mask: u64,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_datatype_attr_t {
    pub field_mask: u64,
    pub packed_size: usize,
    pub buffer: *const c_void,
    pub count: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_mem_attr_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub mem_type: c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_mem_advise_params_t {
    pub field_mask: u64,
    pub address: *mut c_void,
    pub length: usize,
    pub advice: c_int,
}

#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ucp_tag_recv_info_t {
    pub sender_tag: ucp_tag_t,
    pub length: usize,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ucp_dt_iov_t {
    pub buffer: *mut c_void,
    pub length: usize,
}

#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ucp_generic_dt_ops_t {
    pub start_pack: Option<unsafe extern "C" fn(*mut c_void, *const c_void, usize) -> *mut c_void>,
    pub start_unpack: Option<unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void>,
    pub packed_size: Option<unsafe extern "C" fn(*mut c_void) -> usize>,
    pub pack: Option<unsafe extern "C" fn(*mut c_void, usize, *mut c_void, usize) -> usize>,
    pub unpack:
        Option<unsafe extern "C" fn(*mut c_void, usize, *const c_void, usize) -> ucs_status_ret_t>,
    pub finish: Option<unsafe extern "C" fn(*mut c_void)>,
}

/// `ucp_request_param_t`. The callback and `recv_info` unions are kept as raw pointers and
/// read as the member the operation names.
#[repr(C)]
#[derive(Debug)]
pub struct ucp_request_param_t {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: *const c_void,
    pub datatype: ucp_datatype_t,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_int,
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_request_attr_t {
    pub field_mask: u64,
    pub debug_string: *mut c_char,
    pub debug_string_size: usize,
    pub status: ucs_status_t,
    pub mem_type: c_int,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_am_handler_param_t {
    pub field_mask: u64,
    pub id: c_uint,
    pub flags: u32,
    pub cb: ucp_am_recv_callback_t,
    pub arg: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_am_recv_param_t {
    pub recv_attr: u64,
    pub reply_ep: *mut c_void,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_stream_poll_ep_t {
    pub ep: *mut c_void,
    pub user_data: *mut c_void,
    pub flags: c_uint,
    pub reserved: [u8; 16],
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_ep_evaluate_perf_param_t {
    pub field_mask: u64,
    pub message_size: usize,
}

#[repr(C)]
#[derive(Debug)]
pub struct ucp_ep_evaluate_perf_attr_t {
    pub field_mask: u64,
    pub estimated_time: f64,
}

/// One line of the layout table: the C type (as `ucp.h` names it), a field (empty for the
/// whole struct's size), and our size or offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    pub ty: &'static str,
    pub field: &'static str,
    pub value: usize,
}

macro_rules! layout {
    ($v:ident, $t:ident { $($f:ident),* $(,)? }) => {
        $v.push(Layout { ty: stringify!($t), field: "", value: std::mem::size_of::<$t>() });
        $( $v.push(Layout {
            ty: stringify!($t),
            field: stringify!($f),
            value: std::mem::offset_of!($t, $f),
        }); )*
    };
}

/// Sizes and field offsets of every struct the shim reads or writes, for the ABI test.
pub fn layouts() -> Vec<Layout> {
    let mut v = Vec::new();
    layout!(
        v,
        ucp_params_t {
            field_mask,
            features,
            request_size,
            request_init,
            request_cleanup,
            tag_sender_mask,
            mt_workers_shared,
            estimated_num_eps,
            estimated_num_ppn,
            name
        }
    );
    layout!(
        v,
        ucp_lib_attr_t {
            field_mask,
            max_thread_level
        }
    );
    layout!(
        v,
        ucp_context_attr_t {
            field_mask,
            request_size,
            thread_mode,
            memory_types,
            name
        }
    );
    layout!(v, ucs_cpu_set_t { ucs_bits });
    layout!(
        v,
        ucp_worker_params_t {
            field_mask,
            thread_mode,
            cpu_mask,
            events,
            user_data,
            event_fd,
            flags,
            name,
            am_alignment,
            client_id
        }
    );
    layout!(
        v,
        ucp_worker_attr_t {
            field_mask,
            thread_mode,
            address_flags,
            address,
            address_length,
            max_am_header,
            name,
            max_debug_string
        }
    );
    layout!(
        v,
        ucp_worker_address_attr_t {
            field_mask,
            worker_uid
        }
    );
    layout!(v, ucs_sock_addr_t { addr, addrlen });
    layout!(v, ucp_err_handler_t { cb, arg });
    layout!(
        v,
        ucp_ep_params_t {
            field_mask,
            address,
            err_mode,
            err_handler,
            user_data,
            flags,
            sockaddr,
            conn_request,
            name,
            local_sockaddr
        }
    );
    layout!(
        v,
        ucp_transport_entry_t {
            transport_name,
            device_name
        }
    );
    layout!(
        v,
        ucp_transports_t {
            entries,
            num_entries,
            entry_size
        }
    );
    layout!(
        v,
        ucp_ep_attr_t {
            field_mask,
            name,
            local_sockaddr,
            remote_sockaddr,
            transports,
            user_data
        }
    );
    layout!(v, ucp_listener_accept_handler_t { cb, arg });
    layout!(v, ucp_listener_conn_handler_t { cb, arg });
    layout!(
        v,
        ucp_listener_params_t {
            field_mask,
            sockaddr,
            accept_handler,
            conn_handler
        }
    );
    layout!(
        v,
        ucp_listener_attr_t {
            field_mask,
            sockaddr
        }
    );
    layout!(
        v,
        ucp_conn_request_attr_t {
            field_mask,
            client_address,
            client_id
        }
    );
    layout!(
        v,
        ucp_mem_map_params_t {
            field_mask,
            address,
            length,
            flags,
            prot,
            memory_type,
            exported_memh_buffer
        }
    );
    layout!(v, ucp_memh_pack_params_t { field_mask, flags });
    layout!(v, ucp_memh_buffer_release_params_t { field_mask });
    layout!(v, ucp_rkey_compare_params_t { field_mask });
    layout!(
        v,
        ucp_datatype_attr_t {
            field_mask,
            packed_size,
            buffer,
            count
        }
    );
    layout!(
        v,
        ucp_mem_attr_t {
            field_mask,
            address,
            length,
            mem_type
        }
    );
    layout!(
        v,
        ucp_mem_advise_params_t {
            field_mask,
            address,
            length,
            advice
        }
    );
    layout!(v, ucp_tag_recv_info_t { sender_tag, length });
    layout!(v, ucp_dt_iov_t { buffer, length });
    layout!(
        v,
        ucp_generic_dt_ops_t {
            start_pack,
            start_unpack,
            packed_size,
            pack,
            unpack,
            finish
        }
    );
    layout!(
        v,
        ucp_request_param_t {
            op_attr_mask,
            flags,
            request,
            cb,
            datatype,
            user_data,
            reply_buffer,
            memory_type,
            recv_info,
            memh
        }
    );
    layout!(
        v,
        ucp_request_attr_t {
            field_mask,
            debug_string,
            debug_string_size,
            status,
            mem_type
        }
    );
    layout!(
        v,
        ucp_am_handler_param_t {
            field_mask,
            id,
            flags,
            cb,
            arg
        }
    );
    layout!(
        v,
        ucp_am_recv_param_t {
            recv_attr,
            reply_ep
        }
    );
    layout!(
        v,
        ucp_stream_poll_ep_t {
            ep,
            user_data,
            flags,
            reserved
        }
    );
    layout!(
        v,
        ucp_ep_evaluate_perf_param_t {
            field_mask,
            message_size
        }
    );
    layout!(
        v,
        ucp_ep_evaluate_perf_attr_t {
            field_mask,
            estimated_time
        }
    );
    v
}

/// Enum values and flag bits the shim relies on, by their `ucp.h` names, for the ABI test.
pub fn constants() -> Vec<(&'static str, i64)> {
    macro_rules! c {
        ($($n:ident),* $(,)?) => { vec![$((stringify!($n), $n as i64)),*] };
    }
    c![
        UCS_THREAD_MODE_SINGLE,
        UCS_THREAD_MODE_SERIALIZED,
        UCS_THREAD_MODE_MULTI,
        UCS_MEMORY_TYPE_HOST,
        UCS_MEMORY_TYPE_CUDA,
        UCS_MEMORY_TYPE_CUDA_MANAGED,
        UCS_MEMORY_TYPE_ROCM,
        UCS_MEMORY_TYPE_ROCM_MANAGED,
        UCS_MEMORY_TYPE_RDMA,
        UCS_MEMORY_TYPE_ZE_HOST,
        UCS_MEMORY_TYPE_ZE_DEVICE,
        UCS_MEMORY_TYPE_ZE_MANAGED,
        UCS_MEMORY_TYPE_LAST,
        UCS_MEMORY_TYPE_UNKNOWN,
        UCP_FEATURE_EXPORTED_MEMH,
        UCP_PARAM_FIELD_FEATURES,
        UCP_PARAM_FIELD_REQUEST_SIZE,
        UCP_PARAM_FIELD_REQUEST_INIT,
        UCP_PARAM_FIELD_REQUEST_CLEANUP,
        UCP_PARAM_FIELD_NAME,
        UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        UCP_WORKER_PARAM_FIELD_NAME,
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS,
        UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        UCP_EP_PARAM_FIELD_ERR_HANDLER,
        UCP_EP_PARAM_FIELD_USER_DATA,
        UCP_EP_PARAM_FIELD_SOCK_ADDR,
        UCP_EP_PARAM_FIELD_CONN_REQUEST,
        UCP_EP_PERF_PARAM_FIELD_MESSAGE_SIZE,
        UCP_EP_PERF_ATTR_FIELD_ESTIMATED_TIME,
        UCP_LISTENER_PARAM_FIELD_SOCK_ADDR,
        UCP_LISTENER_PARAM_FIELD_ACCEPT_HANDLER,
        UCP_LISTENER_PARAM_FIELD_CONN_HANDLER,
        UCP_EP_CLOSE_MODE_FORCE,
        UCP_EP_CLOSE_MODE_FLUSH,
        UCP_EP_CLOSE_FLAG_FORCE,
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS,
        UCP_MEM_MAP_PARAM_FIELD_LENGTH,
        UCP_MEM_MAP_PARAM_FIELD_FLAGS,
        UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        UCP_MEM_MAP_NONBLOCK,
        UCP_MEM_MAP_ALLOCATE,
        UCP_MEM_MAP_FIXED,
        UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER,
        UCP_MEM_MAP_SYMMETRIC_RKEY,
        UCP_MEM_MAP_LOCK,
        UCP_MEMH_PACK_PARAM_FIELD_FLAGS,
        UCP_MEMH_PACK_FLAG_EXPORT,
        UCP_MEM_ATTR_FIELD_ADDRESS,
        UCP_MEM_ATTR_FIELD_LENGTH,
        UCP_MEM_ATTR_FIELD_MEM_TYPE,
        UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL,
        UCP_ATTR_FIELD_REQUEST_SIZE,
        UCP_ATTR_FIELD_THREAD_MODE,
        UCP_ATTR_FIELD_MEMORY_TYPES,
        UCP_ATTR_FIELD_NAME,
        UCP_WORKER_ATTR_FIELD_THREAD_MODE,
        UCP_WORKER_ATTR_FIELD_ADDRESS,
        UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS,
        UCP_WORKER_ATTR_FIELD_MAX_AM_HEADER,
        UCP_WORKER_ATTR_FIELD_NAME,
        UCP_WORKER_ATTR_FIELD_MAX_INFO_STRING,
        UCP_WORKER_ADDRESS_ATTR_FIELD_UID,
        UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR,
        UCP_LISTENER_ATTR_FIELD_SOCKADDR,
        UCP_EP_ATTR_FIELD_NAME,
        UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR,
        UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR,
        UCP_EP_ATTR_FIELD_TRANSPORTS,
        UCP_EP_ATTR_FIELD_USER_DATA,
        UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE,
        UCP_DATATYPE_ATTR_FIELD_BUFFER,
        UCP_DATATYPE_ATTR_FIELD_COUNT,
        UCP_DATATYPE_CONTIG,
        UCP_DATATYPE_IOV,
        UCP_DATATYPE_GENERIC,
        UCP_DATATYPE_SHIFT,
        UCP_DATATYPE_CLASS_MASK,
        UCP_AM_FLAG_WHOLE_MSG,
        UCP_AM_FLAG_PERSISTENT_DATA,
        UCP_CB_PARAM_FLAG_DATA,
        UCP_AM_SEND_FLAG_REPLY,
        UCP_AM_SEND_FLAG_EAGER,
        UCP_AM_SEND_FLAG_RNDV,
        UCP_AM_SEND_FLAG_COPY_HEADER,
        UCP_AM_RECV_ATTR_FIELD_REPLY_EP,
        UCP_AM_RECV_ATTR_FLAG_DATA,
        UCP_AM_RECV_ATTR_FLAG_RNDV,
        UCP_AM_HANDLER_PARAM_FIELD_ID,
        UCP_AM_HANDLER_PARAM_FIELD_FLAGS,
        UCP_AM_HANDLER_PARAM_FIELD_CB,
        UCP_AM_HANDLER_PARAM_FIELD_ARG,
        UCP_ATOMIC_POST_OP_ADD,
        UCP_ATOMIC_POST_OP_AND,
        UCP_ATOMIC_POST_OP_OR,
        UCP_ATOMIC_POST_OP_XOR,
        UCP_ATOMIC_FETCH_OP_FADD,
        UCP_ATOMIC_FETCH_OP_SWAP,
        UCP_ATOMIC_FETCH_OP_CSWAP,
        UCP_ATOMIC_FETCH_OP_FAND,
        UCP_ATOMIC_FETCH_OP_FOR,
        UCP_ATOMIC_FETCH_OP_FXOR,
        UCP_ATOMIC_OP_ADD,
        UCP_ATOMIC_OP_SWAP,
        UCP_ATOMIC_OP_CSWAP,
        UCP_ATOMIC_OP_AND,
        UCP_ATOMIC_OP_OR,
        UCP_ATOMIC_OP_XOR,
        UCP_STREAM_RECV_FLAG_WAITALL,
        UCP_OP_ATTR_FIELD_REQUEST,
        UCP_OP_ATTR_FIELD_CALLBACK,
        UCP_OP_ATTR_FIELD_USER_DATA,
        UCP_OP_ATTR_FIELD_DATATYPE,
        UCP_OP_ATTR_FIELD_FLAGS,
        UCP_OP_ATTR_FIELD_REPLY_BUFFER,
        UCP_OP_ATTR_FIELD_MEMORY_TYPE,
        UCP_OP_ATTR_FIELD_RECV_INFO,
        UCP_OP_ATTR_FIELD_MEMH,
        UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        UCP_OP_ATTR_FLAG_FAST_CMPL,
        UCP_OP_ATTR_FLAG_FORCE_IMM_CMPL,
        UCP_OP_ATTR_FLAG_MULTI_SEND,
        UCP_REQUEST_ATTR_FIELD_INFO_STRING,
        UCP_REQUEST_ATTR_FIELD_INFO_STRING_SIZE,
        UCP_REQUEST_ATTR_FIELD_STATUS,
        UCP_REQUEST_ATTR_FIELD_MEM_TYPE,
        UCP_ENTITY_NAME_MAX,
    ]
}

/// The UCX minor version (1.x) that introduced a name of [`layouts`], [`constants`] or our
/// headers (a type, constant or function), for the names that came after 1.13 (13 for
/// every other): the ABI tests leave a name out of what they compile against an older UCX
/// header set. A struct's size is named by the type, a field's offset by `type.field`.
pub fn since(name: &str) -> u32 {
    let ty = name.split('.').next().unwrap_or(name);
    match (ty, name) {
        ("ucp_ep_attr_t", "ucp_ep_attr_t.transports") => 14,
        ("ucp_ep_attr_t", "ucp_ep_attr_t.user_data") => 18,
        ("ucp_mem_map_params_t", "ucp_mem_map_params_t.exported_memh_buffer") => 14,
        (
            "ucp_transport_entry_t"
            | "ucp_transports_t"
            | "ucp_memh_pack_params_t"
            | "ucp_memh_buffer_release_params_t"
            | "ucp_datatype_attr_t"
            | "UCP_FEATURE_EXPORTED_MEMH"
            | "UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER"
            | "UCP_MEMH_PACK_PARAM_FIELD_FLAGS"
            | "UCP_MEMH_PACK_FLAG_EXPORT"
            | "UCP_EP_ATTR_FIELD_TRANSPORTS"
            | "UCP_DATATYPE_ATTR_FIELD_PACKED_SIZE"
            | "UCP_DATATYPE_ATTR_FIELD_BUFFER"
            | "UCP_DATATYPE_ATTR_FIELD_COUNT"
            | "UCP_AM_SEND_FLAG_COPY_HEADER"
            | "ucp_memh_pack"
            | "ucp_memh_buffer_release"
            | "ucp_dt_query",
            _,
        ) => 14,
        (
            "ucp_rkey_compare_params_t"
            | "ucp_rkey_compare"
            | "UCP_MEM_MAP_SYMMETRIC_RKEY"
            | "UCS_MEMORY_TYPE_RDMA",
            _,
        ) => 16,
        (
            "UCS_MEMORY_TYPE_ZE_HOST" | "UCS_MEMORY_TYPE_ZE_DEVICE" | "UCS_MEMORY_TYPE_ZE_MANAGED",
            _,
        ) => 17,
        ("UCP_MEM_MAP_LOCK" | "UCP_EP_ATTR_FIELD_USER_DATA", _) => 18,
        _ => 13,
    }
}

/// The value a name of [`layouts`], [`constants`] or our headers has in UCX 1.`minor`'s
/// headers where it differs from the 1.19 ABI Rucx presents (`None` where it is the same,
/// or where the name is younger than that version: see [`since`]). Structs grew at their
/// ends and `UCS_MEMORY_TYPE_LAST` moved as memory types were inserted before it.
pub fn other_abi(name: &str, minor: u32) -> Option<i64> {
    let v = match name {
        "UCS_MEMORY_TYPE_LAST" | "UCS_MEMORY_TYPE_UNKNOWN" => match minor {
            ..=15 => 5,
            16 => 6,
            17..=20 => return None,
            _ => 10,
        },
        "UCS_MEMORY_TYPES_CPU_ACCESSIBLE" if minor <= 16 => 0x11,
        "ucp_ep_attr_t" => match minor {
            ..=13 => 296,
            14..=17 => 320,
            _ => return None,
        },
        "ucp_mem_map_params_t" if minor <= 13 => 40,
        "ucp_params_t" if minor >= 20 => 88,
        "ucp_context_attr_t" if minor >= 20 => 72,
        "ucp_request_param_t" if minor >= 22 => 96,
        "UCP_API_MINOR" if minor != 19 => i64::from(minor),
        "UCP_API_VERSION" if minor != 19 => (1 << 24) | (i64::from(minor) << 16),
        _ => return None,
    };
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_1_13_prefix_of_mem_map_params_is_the_1_19_struct_up_to_memory_type() {
        type Old = ucp_mem_map_params_v113_t;
        type New = ucp_mem_map_params_t;
        assert_eq!(offset_of!(Old, field_mask), offset_of!(New, field_mask));
        assert_eq!(offset_of!(Old, address), offset_of!(New, address));
        assert_eq!(offset_of!(Old, length), offset_of!(New, length));
        assert_eq!(offset_of!(Old, flags), offset_of!(New, flags));
        assert_eq!(offset_of!(Old, prot), offset_of!(New, prot));
        assert_eq!(offset_of!(Old, memory_type), offset_of!(New, memory_type));
        assert_eq!(size_of::<Old>(), offset_of!(New, exported_memh_buffer));
        assert_eq!(
            other_abi("ucp_mem_map_params_t", 13),
            Some(size_of::<Old>() as i64)
        );
    }

    #[test]
    fn every_unknown_memory_type_number_means_detect() {
        for t in [5, 9, 10] {
            assert_eq!(mem_type_of(t), Ok(None), "{t}");
        }
        assert_eq!(
            mem_type_of(UCS_MEMORY_TYPE_HOST),
            Ok(Some(ucs::memtype::MemoryType::Host))
        );
        for t in [UCS_MEMORY_TYPE_ROCM, UCS_MEMORY_TYPE_ZE_DEVICE, 11, -1] {
            assert_eq!(mem_type_of(t), Err(ucs::Status::Unsupported), "{t}");
        }
    }
}
