//! Configuration, context and memory mapping: `ucp_config_*`, `ucp_init_version`,
//! `ucp_cleanup`, `ucp_context_query`, `ucp_mem_map` and friends, `ucp_rkey_pack`.
//!
//! Module cycle: a context lists its workers and maps its memory on each of them, and a
//! worker knows its context (its request pool, its regions); see `worker`.
//!
//! UCX maps memory on the context, which every worker of it can then use; a Rucx region
//! belongs to one worker. So a `ucp_mem_h` is mapped on every worker of the context (and
//! on workers created later), and its packed key carries one key per worker, tagged with
//! the worker's id; `ucp_ep_rkey_unpack` picks the key of the worker the endpoint
//! reaches.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::sync::{Arc, Mutex};

use ucp::{Buf, Context, MemHandle, SharedRegion};
use ucs::Status;

use crate::request::{Pool, HDR};
use crate::types::*;
use crate::worker::CWorker;
use crate::{announce_enabled, code, guard};

const CONFIG_MAGIC: u64 = 0x5275_6378_436f_6e66;
const CONTEXT_MAGIC: u64 = 0x5275_6378_4374_7821;
const MEM_MAGIC: u64 = 0x5275_6378_4d65_6d21;
pub(crate) const RKEY_BLOB_MAGIC: u32 = 0x4b52_5852; // "RXRK"

/// `ucp_config_t`: the environment prefix and the values set by `ucp_config_modify`.
#[derive(Debug)]
pub struct CConfig {
    magic: u64,
    prefix: String,
    /// Values set by `ucp_config_modify`, by name without `UCX_`: Rucx's options and UCX's
    /// that Rucx accepts ([`ucs::config::UCX_ONLY`]).
    overrides: Vec<(String, String)>,
    /// Keys neither knows, kept and printed back as UCX does (`KEY=VALUE`), and named in
    /// a warning when a context is made from this configuration.
    cached: Vec<(String, String)>,
}

impl CConfig {
    fn lookup(&self, name: &str) -> Option<String> {
        if let Some((_, v)) = self.overrides.iter().rev().find(|(n, _)| n == name) {
            return Some(v.clone());
        }
        if !self.prefix.is_empty() {
            if let Ok(v) = std::env::var(format!("UCX_{}{name}", self.prefix)) {
                return Some(v);
            }
        }
        std::env::var(format!("UCX_{name}")).ok()
    }

    fn build(&self) -> Result<ucs::Config, ucs::config::ConfigError> {
        ucs::Config::from_lookup(|n| self.lookup(n))
    }
}

/// `ucp_context_h`.
#[derive(Debug)]
pub struct CContext {
    magic: u64,
    pub(crate) ctx: Arc<Context>,
    pub(crate) pool: Pool,
    pub(crate) name: String,
    /// Live workers (`*const CWorker`) and mapped regions (`*const CMem`). Lock order:
    /// `mems`, then `workers`, then a worker, then a region's `regs`.
    pub(crate) workers: Mutex<Vec<usize>>,
    pub(crate) mems: Mutex<Vec<usize>>,
    /// A worker made for a key packed before the application had one (`early_worker`),
    /// not yet handed out: the application's first `ucp_worker_create` gets it. Listed
    /// in `workers` too. Locked after `workers`.
    pub(crate) early: Mutex<Option<usize>>,
}

impl CContext {
    /// # Safety
    /// `p` is NULL or a pointer this library returned as a context (checked by magic).
    pub(crate) unsafe fn from_ptr<'a>(p: *const c_void) -> Option<&'a CContext> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the contract, p is one of our live contexts.
        let c = unsafe { &*p.cast::<CContext>() };
        (c.magic == CONTEXT_MAGIC).then_some(c)
    }
}

/// `ucp_mem_h`: a region and its mapping on each worker.
#[derive(Debug)]
pub struct CMem {
    magic: u64,
    pub(crate) base: u64,
    pub(crate) len: usize,
    /// Memory we allocated (`UCP_MEM_MAP_ALLOCATE`) with mmap, to munmap.
    owned: bool,
    /// Memory we allocated as shared memory (`UCP_MEM_MAP_ALLOCATE` with the posix
    /// transport on): every worker maps it as memory it allocated, so same-host peers
    /// map it in turn (freed when this and the workers' mappings are gone).
    shm: Option<SharedRegion>,
    /// GPU memory we allocated (`UCP_MEM_MAP_ALLOCATE` with a CUDA memory type).
    #[cfg(feature = "cuda")]
    _dev: Option<ucs::cuda::DeviceAlloc>,
    pub(crate) regs: Mutex<Vec<(usize, MemHandle)>>,
    /// Its context (`*const CContext`, which outlives its regions), set when published.
    ctx: usize,
}

impl CMem {
    /// # Safety
    /// `p` is NULL or a `ucp_mem_h` of ours.
    pub(crate) unsafe fn from_ptr<'a>(p: *const c_void) -> Option<&'a CMem> {
        if p.is_null() {
            return None;
        }
        // SAFETY: per the contract.
        let m = unsafe { &*p.cast::<CMem>() };
        (m.magic == MEM_MAGIC).then_some(m)
    }

    /// Maps the region on worker `w`.
    pub(crate) fn map_on(&self, w: &CWorker) -> Result<(), Status> {
        let h = match &self.shm {
            Some(r) => w.with(|wk| wk.mem_map_region(r))?,
            None => {
                // SAFETY: the region stays valid until ucp_mem_unmap, which unmaps it
                // from every worker first (the contract of ucp_mem_map).
                let buf = unsafe { Buf::from_raw(self.base as *mut u8, self.len) };
                w.with(|wk| wk.mem_map(Some(buf), self.len))?
            }
        };
        self.regs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((w as *const CWorker as usize, h));
        Ok(())
    }
}

fn cstr(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the application passes NUL-terminated strings.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Copies `s` into a fixed C name field, NUL-terminated.
pub(crate) fn write_name(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, b) in dst.iter_mut().zip(s.as_bytes()[..n].iter()) {
        *d = *b as c_char;
    }
    if let Some(d) = dst.get_mut(n) {
        *d = 0;
    }
}

/// Writes text to a C `FILE *`.
pub(crate) fn fput(stream: *mut c_void, s: &str) {
    if stream.is_null() {
        return;
    }
    // SAFETY: the application passes an open FILE *; fwrite reads s.len() bytes of s.
    unsafe { libc::fwrite(s.as_ptr().cast(), 1, s.len(), stream.cast::<libc::FILE>()) };
}

/// # Safety
/// `env_prefix` and `filename` NULL or C strings; `config_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_read(
    env_prefix: *const c_char,
    filename: *const c_char,
    config_p: *mut *mut CConfig,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if config_p.is_null() {
            return code(Status::InvalidParam);
        }
        if !filename.is_null() {
            // Configuration files are not read by Rucx (docs/c-abi.md).
            return code(Status::Unsupported);
        }
        let mut prefix = cstr(env_prefix).unwrap_or_default();
        if !prefix.is_empty() && !prefix.ends_with('_') {
            prefix.push('_');
        }
        let c = CConfig {
            magic: CONFIG_MAGIC,
            prefix,
            overrides: Vec::new(),
            cached: Vec::new(),
        };
        if let Err(e) = c.build() {
            eprintln!("[rucx] {e}");
            return code(Status::InvalidParam);
        }
        // SAFETY: config_p is writable (checked non-NULL).
        unsafe { *config_p = Box::into_raw(Box::new(c)) };
        code(Status::Ok)
    })
}

unsafe fn config_ref<'a>(p: *const CConfig) -> Option<&'a mut CConfig> {
    if p.is_null() {
        return None;
    }
    // SAFETY: the caller passes a config of ours (checked by magic).
    let c = unsafe { &mut *p.cast_mut() };
    (c.magic == CONFIG_MAGIC).then_some(c)
}

/// # Safety
/// `config` NULL or from `ucp_config_read`, not released before.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_release(config: *mut CConfig) {
    guard((), || {
        // SAFETY: forwarded contract.
        if let Some(c) = unsafe { config_ref(config) } {
            c.magic = 0;
            // SAFETY: made by Box::into_raw in ucp_config_read, released once.
            drop(unsafe { Box::from_raw(config) });
        }
    })
}

/// # Safety
/// `config` from `ucp_config_read`; `name`, `value` C strings.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_modify(
    config: *mut CConfig,
    name: *const c_char,
    value: *const c_char,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let (Some(c), Some(n), Some(v)) = (unsafe { config_ref(config) }, cstr(name), cstr(value))
        else {
            return code(Status::InvalidParam);
        };
        let n = n.strip_prefix("UCX_").unwrap_or(&n).to_string();
        if ucs::config::TABLE.iter().any(|t| t.name == n) {
            c.overrides.push((n, v));
            if let Err(e) = c.build() {
                c.overrides.pop();
                log::error!("{e}");
                return code(Status::InvalidParam);
            }
            return code(Status::Ok);
        }
        if let Some(o) = ucs::config::UcxOnly::find(&n) {
            if let Err(why) = o.check(&v) {
                log::error!("invalid value for {n}: '{v}': {why}");
                return code(Status::InvalidParam);
            }
            c.overrides.push((n, v));
            return code(Status::Ok);
        }
        // As UCX: a key no component knows is kept, printed back, and reported when a
        // context is made from this configuration.
        c.cached.retain(|(k, _)| *k != n);
        c.cached.push((n, v));
        code(Status::Ok)
    })
}

/// # Safety
/// `config` from `ucp_config_read`; `stream` an open `FILE *`; `title` NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn ucp_config_print(
    config: *const CConfig,
    stream: *mut c_void,
    title: *const c_char,
    print_flags: c_int,
) {
    guard((), || {
        // SAFETY: forwarded contract.
        let Some(c) = (unsafe { config_ref(config) }) else {
            return;
        };
        let Ok(cfg) = c.build() else { return };
        let flags = print_flags as u32;
        let mut s = String::new();
        // As UCX: a header only where asked for; with UCS_CONFIG_PRINT_CONFIG alone, every
        // line is `NAME=value` (UCXX and UCX-Py split each line at its '=').
        if flags & UCS_CONFIG_PRINT_HEADER != 0 {
            let t = cstr(title).unwrap_or_else(|| "UCX configuration".to_string());
            s.push_str(&format!("#\n# {t}\n#\n"));
        }
        let doc = flags & UCS_CONFIG_PRINT_DOC != 0;
        for v in ucs::config::TABLE {
            let val = cfg
                .value_of(v.name)
                .unwrap_or_else(|| v.default.to_string());
            if doc {
                s.push_str(&format!("#\n# {}\n#\n", v.doc));
            }
            s.push_str(&format!("UCX_{}={val}\n", v.name));
        }
        for o in ucs::config::UCX_ONLY {
            let val = c.lookup(o.name).unwrap_or_else(|| o.default.to_string());
            if doc {
                s.push_str(&format!("#\n# {}\n#\n", o.doc));
            }
            s.push_str(&format!("UCX_{}={val}\n", o.name));
        }
        for (k, v) in &c.cached {
            s.push_str(&format!("{k}={v}\n"));
        }
        fput(stream, &s);
    })
}

/// # Safety
/// Pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_get_version(
    major: *mut c_uint,
    minor: *mut c_uint,
    release: *mut c_uint,
) {
    guard((), || {
        let (a, b, c) = UCX_VERSION;
        for (p, v) in [(major, a), (minor, b), (release, c)] {
            if !p.is_null() {
                // SAFETY: the caller's writable unsigned.
                unsafe { *p = v };
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn ucp_get_version_string() -> *const c_char {
    c"1.19.0 (Rucx)".as_ptr()
}

/// The UCX version whose `ucp.h` contract this library keeps (`ucp_get_version`): 1.19,
/// the ABI UCXX requires. Programs built against 1.13's headers keep working: 1.14 to 1.19
/// only appended fields and bits (docs/c-abi.md).
pub(crate) const UCX_VERSION: (c_uint, c_uint, c_uint) = (1, 19, 0);

/// # Safety
/// `attr` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_lib_query(attr: *mut ucp_lib_attr_t) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: non-NULL, writable by contract.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL != 0 {
            return code(Status::InvalidParam);
        }
        if a.field_mask & UCP_LIB_ATTR_FIELD_MAX_THREAD_LEVEL != 0 {
            a.max_thread_level = UCS_THREAD_MODE_MULTI;
        }
        code(Status::Ok)
    })
}

/// # Safety
/// `params` readable; `config` NULL or from `ucp_config_read`; `context_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_init_version(
    api_major: c_uint,
    _api_minor: c_uint,
    params: *const ucp_params_t,
    config: *const CConfig,
    context_p: *mut *mut CContext,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        if params.is_null() || context_p.is_null() || api_major != 1 {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable by contract; field_mask checked before any other field.
        let p = unsafe { &*params };
        if p.field_mask & !UCP_PARAM_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        let has = |b: u64| p.field_mask & b != 0;
        if has(UCP_PARAM_FIELD_FEATURES) && p.features & !UCP_FEATURES != 0 {
            return code(Status::InvalidParam);
        }
        let req_size = if has(UCP_PARAM_FIELD_REQUEST_SIZE) {
            p.request_size
        } else {
            0
        };
        let init = if has(UCP_PARAM_FIELD_REQUEST_INIT) {
            p.request_init
        } else {
            None
        };
        let cleanup = if has(UCP_PARAM_FIELD_REQUEST_CLEANUP) {
            p.request_cleanup
        } else {
            None
        };
        let name = if has(UCP_PARAM_FIELD_NAME) {
            cstr(p.name)
        } else {
            None
        }
        .unwrap_or_else(|| format!("rucx-{}", std::process::id()));
        let default_cfg = CConfig {
            magic: CONFIG_MAGIC,
            prefix: String::new(),
            overrides: Vec::new(),
            cached: Vec::new(),
        };
        let cfg = if config.is_null() {
            &default_cfg
        } else {
            // SAFETY: forwarded contract.
            match unsafe { config_ref(config) } {
                Some(c) => &*c,
                None => return code(Status::InvalidParam),
            }
        };
        let unknown: Vec<String> = cfg.cached.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let cfg = match cfg.build() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("[rucx] {e}");
                return code(Status::InvalidParam);
            }
        };
        ucs::log::init(cfg.log_level.to_filter());
        if !unknown.is_empty() {
            log::warn!("invalid configurations: {}", unknown.join(","));
        }
        let Some(pool) = Pool::new(req_size, init, cleanup) else {
            return code(Status::InvalidParam);
        };
        let ctx = Context::new(cfg);
        if announce_enabled() {
            let tls: Vec<String> = ctx
                .resources()
                .iter()
                .map(|r| format!("{}/{}", r.tl, r.device))
                .collect();
            // One write(2), so that lines of processes sharing a stderr do not interleave.
            let line = format!(
                "[rucx] libucp.so.0 (Rucx {}) serving pid {}: ucp_init, transports {}\n",
                env!("CARGO_PKG_VERSION"),
                std::process::id(),
                tls.join(",")
            );
            use std::io::Write as _;
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        let c = CContext {
            magic: CONTEXT_MAGIC,
            ctx,
            pool,
            name,
            workers: Mutex::new(Vec::new()),
            mems: Mutex::new(Vec::new()),
            early: Mutex::new(None),
        };
        // SAFETY: context_p writable (checked non-NULL).
        unsafe { *context_p = Box::into_raw(Box::new(c)) };
        code(Status::Ok)
    })
}

/// # Safety
/// `context` from `ucp_init_version`, with its workers destroyed.
#[no_mangle]
pub unsafe extern "C" fn ucp_cleanup(context: *mut CContext) {
    guard((), || {
        // SAFETY: forwarded contract.
        let Some(c) = (unsafe { CContext::from_ptr(context.cast()) }) else {
            return;
        };
        // A worker made for an early key that the application never asked for.
        let early = c.early.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = early {
            // SAFETY: made by `early_worker`, never handed out, so destroyed once, here.
            unsafe { crate::worker::ucp_worker_destroy(w as *mut CWorker) };
        }
        // SAFETY: our context, made by Box::into_raw; the magic is cleared before the free
        // so that a second cleanup is refused.
        unsafe {
            (*context).magic = 0;
            drop(Box::from_raw(context));
        }
    })
}

/// # Safety
/// `context` ours; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_context_query(
    context: *mut CContext,
    attr: *mut ucp_context_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(c) = (unsafe { CContext::from_ptr(context.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: writable by contract.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_ATTR_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        if a.field_mask & UCP_ATTR_FIELD_REQUEST_SIZE != 0 {
            a.request_size = HDR;
        }
        if a.field_mask & UCP_ATTR_FIELD_THREAD_MODE != 0 {
            a.thread_mode = UCS_THREAD_MODE_MULTI;
        }
        if a.field_mask & UCP_ATTR_FIELD_MEMORY_TYPES != 0 {
            a.memory_types = 1 << UCS_MEMORY_TYPE_HOST;
            if ucs::memtype::active() {
                a.memory_types |= (1 << UCS_MEMORY_TYPE_CUDA) | (1 << UCS_MEMORY_TYPE_CUDA_MANAGED);
            }
        }
        if a.field_mask & UCP_ATTR_FIELD_NAME != 0 {
            write_name(&mut a.name, &c.name);
        }
        code(Status::Ok)
    })
}

/// # Safety
/// `context` ours; `stream` an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_context_print_info(context: *const CContext, stream: *mut c_void) {
    guard((), || {
        // SAFETY: forwarded contract.
        let Some(c) = (unsafe { CContext::from_ptr(context.cast()) }) else {
            return;
        };
        fput(stream, &c.ctx.info_text());
    })
}

/// # Safety
/// `context` ours; `params` readable; `memh_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_map(
    context: *mut CContext,
    params: *const ucp_mem_map_params_t,
    memh_p: *mut *mut CMem,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(c) = (unsafe { CContext::from_ptr(context.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if params.is_null() || memh_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable by contract up to memory_type (UCX 1.13's struct, all a caller
        // built against its headers passes); field_mask first.
        let p = unsafe { &*params.cast::<ucp_mem_map_params_v113_t>() };
        if p.field_mask & !UCP_MEM_MAP_PARAM_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        let has = |b: u64| p.field_mask & b != 0;
        if has(UCP_MEM_MAP_PARAM_FIELD_EXPORTED_MEMH_BUFFER) {
            // SAFETY: the field is in the caller's struct (its bit is set).
            let b = unsafe { std::ptr::addr_of!((*params).exported_memh_buffer).read() };
            if !b.is_null() {
                // Importing an exported handle is not supported (docs/c-abi.md); with
                // ALLOCATE the request makes no sense, as UCX says.
                let alloc =
                    has(UCP_MEM_MAP_PARAM_FIELD_FLAGS) && p.flags & UCP_MEM_MAP_ALLOCATE != 0;
                return code(if alloc {
                    Status::InvalidParam
                } else {
                    Status::Unsupported
                });
            }
        }
        if !has(UCP_MEM_MAP_PARAM_FIELD_LENGTH) {
            return code(Status::InvalidParam);
        }
        if p.length == 0 {
            // As UCX: an empty region is a valid handle (with its address, or NULL), which
            // packs a key through which only empty operations are in range. Nothing is
            // allocated for it, whatever the flags say.
            let base = if has(UCP_MEM_MAP_PARAM_FIELD_ADDRESS) {
                p.address as u64
            } else {
                0
            };
            let mem = Box::new(CMem {
                magic: MEM_MAGIC,
                base,
                len: 0,
                owned: false,
                shm: None,
                #[cfg(feature = "cuda")]
                _dev: None,
                regs: Mutex::new(Vec::new()),
                ctx: 0,
            });
            return publish(c, mem, memh_p);
        }
        let mem_type = if has(UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE) {
            match mem_type_of(p.memory_type) {
                Ok(t) => t,
                Err(s) => return code(s),
            }
        } else {
            None
        };
        let flags = if has(UCP_MEM_MAP_PARAM_FIELD_FLAGS) {
            p.flags
        } else {
            0
        };
        // (SYMMETRIC_RKEY is a hint; LOCK asks for the pages up front, not with NONBLOCK.)
        if flags & UCP_MEM_MAP_NONBLOCK != 0 && flags & UCP_MEM_MAP_LOCK != 0 {
            return code(Status::InvalidParam);
        }
        // GPU memory to allocate: on the current device's primary context (device 0
        // where none is current).
        let gpu = mem_type.filter(|t| *t != ucs::memtype::MemoryType::Host);
        if let (Some(t), true) = (gpu, flags & UCP_MEM_MAP_ALLOCATE != 0) {
            if flags & UCP_MEM_MAP_FIXED != 0 {
                return code(Status::InvalidParam);
            }
            return match alloc_gpu(c, t, p.length) {
                Ok(m) => publish(c, m, memh_p),
                Err(s) => code(s),
            };
        }
        let addr = if has(UCP_MEM_MAP_PARAM_FIELD_ADDRESS) {
            p.address
        } else {
            std::ptr::null_mut()
        };
        let len = p.length;
        log::debug!("ucp_mem_map: {len} bytes at {addr:?}, flags {flags:#x}");
        // An allocation at no fixed address, with the posix transport on, is shared
        // memory: what a worker's own allocations are (docs/c-abi.md).
        let shm = if flags & UCP_MEM_MAP_ALLOCATE != 0
            && flags & UCP_MEM_MAP_FIXED == 0
            && c.ctx.resources().iter().any(|r| r.tl == "posix")
        {
            match SharedRegion::new(len) {
                Ok(r) => Some(r),
                Err(e) => {
                    log::debug!("ucp_mem_map: no shared memory ({e}), allocating privately");
                    None
                }
            }
        } else {
            None
        };
        let (base, owned) = if let Some(r) = &shm {
            (r.base() as u64, false)
        } else if flags & UCP_MEM_MAP_ALLOCATE != 0 {
            let fixed = flags & UCP_MEM_MAP_FIXED != 0;
            // Without NONBLOCK, UCX's contract is a mapping populated up front: the pages
            // are faulted in here, not on first use (and a peer reading the memory before
            // anyone writes it reads real pages, not the kernel's shared zero page).
            let populate = if flags & UCP_MEM_MAP_NONBLOCK == 0 {
                libc::MAP_POPULATE
            } else {
                0
            };
            // SAFETY: an anonymous private mapping; the address is only a hint unless
            // FIXED was asked for, and then MAP_FIXED_NOREPLACE refuses to clobber.
            let m = unsafe {
                libc::mmap(
                    addr,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE
                        | libc::MAP_ANONYMOUS
                        | populate
                        | if fixed { libc::MAP_FIXED_NOREPLACE } else { 0 },
                    -1,
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return code(Status::NoMemory);
            }
            (m as u64, true)
        } else {
            if addr.is_null() {
                return code(Status::InvalidParam);
            }
            (addr as u64, false)
        };
        if flags & UCP_MEM_MAP_LOCK != 0 {
            lock_pages(base, len, owned || shm.is_some());
        }
        let mem = Box::new(CMem {
            magic: MEM_MAGIC,
            base,
            len,
            owned,
            shm,
            #[cfg(feature = "cuda")]
            _dev: None,
            regs: Mutex::new(Vec::new()),
            ctx: 0,
        });
        publish(c, mem, memh_p)
    })
}

/// GPU memory of type `t` for `ucp_mem_map` with `UCP_MEM_MAP_ALLOCATE`.
#[cfg(feature = "cuda")]
fn alloc_gpu(_c: &CContext, t: ucs::memtype::MemoryType, len: usize) -> Result<Box<CMem>, Status> {
    let a = ucs::cuda::DeviceAlloc::new(0, len, t == ucs::memtype::MemoryType::CudaManaged)?;
    Ok(Box::new(CMem {
        magic: MEM_MAGIC,
        base: a.ptr(),
        len,
        owned: false,
        shm: None,
        _dev: Some(a),
        regs: Mutex::new(Vec::new()),
        ctx: 0,
    }))
}

#[cfg(not(feature = "cuda"))]
fn alloc_gpu(
    _c: &CContext,
    _t: ucs::memtype::MemoryType,
    _len: usize,
) -> Result<Box<CMem>, Status> {
    Err(Status::Unsupported)
}

/// Maps `mem` on every worker of the context and hands it to the application.
fn publish(c: &CContext, mut mem: Box<CMem>, memh_p: *mut *mut CMem) -> ucs_status_t {
    mem.ctx = c as *const CContext as usize;
    {
        let mut mems = c.mems.lock().unwrap_or_else(|e| e.into_inner());
        let workers = c.workers.lock().unwrap_or_else(|e| e.into_inner());
        for &w in workers.iter() {
            // SAFETY: workers in the list are live (removed before destruction).
            let w = unsafe { &*(w as *const CWorker) };
            if let Err(s) = mem.map_on(w) {
                drop(workers);
                drop(mems);
                unmap(*mem);
                return code(s);
            }
        }
        drop(workers);
        let raw = Box::into_raw(mem);
        mems.push(raw as usize);
        // SAFETY: memh_p writable (checked non-NULL by the caller).
        unsafe { *memh_p = raw };
        code(Status::Ok)
    }
}

/// Unmaps a region from its workers and frees what we allocated.
fn unmap(mem: CMem) {
    let regs = std::mem::take(&mut *mem.regs.lock().unwrap_or_else(|e| e.into_inner()));
    for (w, h) in regs {
        // SAFETY: a worker unmaps its regions' handles before it is destroyed (the entry
        // is removed from `regs` then), so a listed worker is live.
        let w = unsafe { &*(w as *const CWorker) };
        let _ = w.with(|wk| wk.mem_unmap(h));
    }
    if mem.owned {
        // SAFETY: mapped by us in ucp_mem_map with this length.
        unsafe { libc::munmap(mem.base as *mut c_void, mem.len) };
    }
}

/// # Safety
/// `context` ours; `memh` from `ucp_mem_map` on it, not unmapped before.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_unmap(context: *mut CContext, memh: *mut CMem) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let (Some(c), Some(_)) = (unsafe { CContext::from_ptr(context.cast()) }, unsafe {
            CMem::from_ptr(memh.cast())
        }) else {
            return code(Status::InvalidParam);
        };
        let mut mems = c.mems.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = mems.iter().position(|&m| m == memh as usize) else {
            return code(Status::InvalidParam);
        };
        mems.swap_remove(i);
        drop(mems);
        // SAFETY: made by Box::into_raw in ucp_mem_map; removed from the list, so freed
        // once. The magic is cleared for later misuse to be refused.
        let mut b = unsafe { Box::from_raw(memh) };
        b.magic = 0;
        unmap(*b);
        code(Status::Ok)
    })
}

/// # Safety
/// `memh` ours; `attr` writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_query(
    memh: *const CMem,
    attr: *mut ucp_mem_attr_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let Some(m) = (unsafe { CMem::from_ptr(memh.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if attr.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: writable by contract.
        let a = unsafe { &mut *attr };
        if a.field_mask & !UCP_MEM_ATTR_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        if a.field_mask & UCP_MEM_ATTR_FIELD_ADDRESS != 0 {
            a.address = m.base as *mut c_void;
        }
        if a.field_mask & UCP_MEM_ATTR_FIELD_LENGTH != 0 {
            a.length = m.len;
        }
        if a.field_mask & UCP_MEM_ATTR_FIELD_MEM_TYPE != 0 {
            a.mem_type = ucs_mem_type(ucs::memtype::mem_type(m.base as *const u8));
        }
        code(Status::Ok)
    })
}

/// # Safety
/// `context`, `memh` ours; `params` readable.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_advise(
    context: *mut CContext,
    memh: *mut CMem,
    params: *const ucp_mem_advise_params_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let (Some(_), Some(_)) = (unsafe { CContext::from_ptr(context.cast()) }, unsafe {
            CMem::from_ptr(memh.cast())
        }) else {
            return code(Status::InvalidParam);
        };
        if params.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: readable by contract.
        if unsafe { (*params).field_mask } & !UCP_MEM_ADVISE_PARAM_FIELDS != 0 {
            return code(Status::InvalidParam);
        }
        // Advice is a hint; Rucx maps eagerly, so there is nothing to do.
        code(Status::Ok)
    })
}

/// # Safety
/// `context`, `memh` ours; out pointers writable.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_pack(
    context: *mut CContext,
    memh: *mut CMem,
    rkey_buffer_p: *mut *mut c_void,
    size_p: *mut usize,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: forwarded contract.
        let (Some(_), Some(m)) = (unsafe { CContext::from_ptr(context.cast()) }, unsafe {
            CMem::from_ptr(memh.cast())
        }) else {
            return code(Status::InvalidParam);
        };
        if rkey_buffer_p.is_null() || size_p.is_null() {
            return code(Status::InvalidParam);
        }
        let blob = match rkey_blob(m) {
            Ok(b) => b,
            Err(s) => return code(s),
        };
        let p = malloc_copy(&blob);
        if p.is_null() {
            return code(Status::NoMemory);
        }
        // SAFETY: both writable (checked non-NULL).
        unsafe {
            *rkey_buffer_p = p;
            *size_p = blob.len();
        }
        code(Status::Ok)
    })
}

/// The packed key of a region (`ucp_rkey_pack`, `ucp_memh_pack`). Blob: magic u32, body
/// length u32, entry count u8, then per worker: worker id u64, key length u32, key.
pub(crate) fn rkey_blob(m: &CMem) -> Result<Vec<u8>, Status> {
    if m.regs.lock().unwrap_or_else(|e| e.into_inner()).is_empty() && m.ctx != 0 {
        // SAFETY: a region's context outlives it.
        early_worker(unsafe { &*(m.ctx as *const CContext) })?;
    }
    let regs = m.regs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut body = Vec::with_capacity(256 * regs.len());
    let mut n = 0u8;
    for (w, h) in regs {
        // SAFETY: listed workers are live (see `unmap`).
        let w = unsafe { &*(w as *const CWorker) };
        let k = w.with(|wk| wk.rkey_pack(h))?;
        body.extend_from_slice(&w.uuid.to_le_bytes());
        body.extend_from_slice(&(k.len() as u32).to_le_bytes());
        body.extend_from_slice(&k);
        n = n.saturating_add(1);
    }
    let mut blob = Vec::with_capacity(9 + body.len());
    blob.extend_from_slice(&RKEY_BLOB_MAGIC.to_le_bytes());
    blob.extend_from_slice(&((body.len() + 1) as u32).to_le_bytes());
    blob.push(n);
    blob.extend_from_slice(&body);
    Ok(blob)
}

/// A key packed before the context has a worker names none, and no peer could use it:
/// UCX registers memory on the context, a Rucx region belongs to a worker. So the context
/// makes its worker then (thread-safe, `UCS_THREAD_MODE_MULTI`, since the application has
/// not said how it will use it), maps its regions on it, and hands it to the
/// application's first `ucp_worker_create`; keys packed meanwhile name that worker.
/// Nothing happens when the context has a worker already.
fn early_worker(c: &CContext) -> Result<(), Status> {
    let mems = c.mems.lock().unwrap_or_else(|e| e.into_inner());
    let mut workers = c.workers.lock().unwrap_or_else(|e| e.into_inner());
    if !workers.is_empty() {
        return Ok(());
    }
    let w = crate::worker::new_cworker(c, UCS_THREAD_MODE_MULTI, None)?;
    for &m in mems.iter() {
        // SAFETY: listed regions are live (removed under this lock before freeing).
        let m = unsafe { &*(m as *const CMem) };
        m.map_on(&w)?;
    }
    let raw = Box::into_raw(w) as usize;
    workers.push(raw);
    *c.early.lock().unwrap_or_else(|e| e.into_inner()) = Some(raw);
    log::debug!("ucp: a key was packed before any worker existed: made the context's worker");
    Ok(())
}

/// A `malloc`ed copy of `b` (freed with `free` by the matching release call).
pub(crate) fn malloc_copy(b: &[u8]) -> *mut c_void {
    // SAFETY: malloc of at least one byte; the copy writes b.len() bytes into it.
    unsafe {
        let p = libc::malloc(b.len().max(1));
        if !p.is_null() {
            std::ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), b.len());
        }
        p
    }
}

/// # Safety
/// `rkey_buffer` NULL or from `ucp_rkey_pack`.
#[no_mangle]
pub unsafe extern "C" fn ucp_rkey_buffer_release(rkey_buffer: *mut c_void) {
    // SAFETY: allocated with malloc by ucp_rkey_pack (free(NULL) is a no-op).
    guard((), || unsafe { libc::free(rkey_buffer) })
}

/// # Safety
/// `mem_size` a C string, `context` ours, `stream` an open `FILE *`.
#[no_mangle]
pub unsafe extern "C" fn ucp_mem_print_info(
    mem_size: *const c_char,
    context: *mut CContext,
    stream: *mut c_void,
) {
    guard((), || {
        // SAFETY: forwarded contract.
        if unsafe { CContext::from_ptr(context.cast()) }.is_none() {
            return;
        }
        let s = cstr(mem_size).unwrap_or_default();
        fput(
            stream,
            &format!("# Rucx maps {s} of host memory on every worker of the context\n"),
        );
    })
}

/// `UCP_MEM_MAP_LOCK`: the pages of `[base, base + len)` present from now on. Memory the
/// library allocated (`ours`) is also pinned with `mlock`, best effort (`RLIMIT_MEMLOCK`
/// may refuse; its `munmap` unlocks it). The application's memory is populated only: an
/// `munlock` at unmap could undo the application's own `mlock` of the same pages, and
/// Rucx's host-memory transports need no pinning (verbs registration pins by itself).
fn lock_pages(base: u64, len: usize, ours: bool) {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .unwrap_or(4096)
        .max(1);
    let start = (base as usize) & !(page - 1);
    let end = (base as usize).saturating_add(len).saturating_add(page - 1) & !(page - 1);
    let (p, n) = (start as *mut c_void, end - start);
    // SAFETY: the range is memory the caller maps (ucp_mem_map's contract) or we
    // allocated; madvise and mlock change no contents.
    let populated = unsafe {
        libc::madvise(p, n, libc::MADV_POPULATE_WRITE) == 0
            || libc::madvise(p, n, libc::MADV_POPULATE_READ) == 0
    };
    if !populated {
        // Kernels before 5.14: read one byte per page.
        for a in (start..end).step_by(page) {
            // SAFETY: inside the mapped range (see above).
            unsafe { std::ptr::read_volatile(a.max(base as usize) as *const u8) };
        }
    }
    // SAFETY: as above.
    if ours && unsafe { libc::mlock(p, n) } != 0 {
        log::debug!(
            "ucp_mem_map: mlock of {n} bytes refused ({}); the pages are populated",
            std::io::Error::last_os_error()
        );
    }
}
