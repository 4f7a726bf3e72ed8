//! The real verbs provider and what decides whether it is offered.
//!
//! * `hca` (cargo feature `verbs`): the provider over libibverbs and mlx5dv, loaded at
//!   run time through `rdma-mummy-sys`. Building it needs cmake and libclang (the stub
//!   library is compiled and its bindings generated); running it needs only an HCA. It is
//!   written, not run: no machine here has an HCA.
//! * [`datagram`]: its connection manager's reliability over UD, pure logic, tested here.
//! * [`ports`]: the active ports `rc_verbs` offers, or why there are none. Without the
//!   feature, libibverbs is still asked (by `dlopen`) so the reason names what is missing.

use std::ffi::{c_int, c_void, CStr};

pub mod datagram;
#[cfg(feature = "verbs")]
pub mod hca;

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const std::ffi::c_char;

/// The names of the RDMA devices libibverbs lists, or why there are none to list.
pub fn devices() -> Result<Vec<String>, String> {
    // SAFETY: dlopen with a constant name; the library stays loaded (never closed), so the
    // function pointers below stay valid.
    let h = unsafe { libc::dlopen(c"libibverbs.so.1".as_ptr(), libc::RTLD_NOW) };
    if h.is_null() {
        return Err("libibverbs.so.1 not found".into());
    }
    // SAFETY: symbol lookups in a loaded library.
    let (gl, fl, gn) = unsafe {
        (
            libc::dlsym(h, c"ibv_get_device_list".as_ptr()),
            libc::dlsym(h, c"ibv_free_device_list".as_ptr()),
            libc::dlsym(h, c"ibv_get_device_name".as_ptr()),
        )
    };
    if gl.is_null() || fl.is_null() || gn.is_null() {
        return Err("libibverbs.so.1 lacks ibv_get_device_list".into());
    }
    // SAFETY: the symbols have these C signatures (infiniband/verbs.h).
    let (gl, fl, gn) = unsafe {
        (
            std::mem::transmute::<*mut c_void, GetDeviceList>(gl),
            std::mem::transmute::<*mut c_void, FreeDeviceList>(fl),
            std::mem::transmute::<*mut c_void, GetDeviceName>(gn),
        )
    };
    let mut n: c_int = 0;
    // SAFETY: an out pointer for the count; the list is freed below.
    let list = unsafe { gl(&mut n) };
    if list.is_null() {
        return Err("ibv_get_device_list failed (no RDMA subsystem here)".into());
    }
    let mut names = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `n` entries of the list ibv_get_device_list returned, not freed yet;
        // each device's name is a NUL-terminated string it owns.
        unsafe {
            let d = *list.add(i);
            let name = gn(d);
            if !name.is_null() {
                names.push(CStr::from_ptr(name).to_string_lossy().into_owned());
            }
        }
    }
    // SAFETY: the list from ibv_get_device_list, freed once.
    unsafe { fl(list) };
    Ok(names)
}

/// The active ports (`device:port`) the real provider opens, or why there are none.
/// Asked once per process.
pub fn ports() -> Result<Vec<String>, String> {
    static R: std::sync::OnceLock<Result<Vec<String>, String>> = std::sync::OnceLock::new();
    R.get_or_init(find_ports).clone()
}

#[cfg(feature = "verbs")]
fn find_ports() -> Result<Vec<String>, String> {
    // The stub's own loader gives no reason when libibverbs is missing; ask dlopen first.
    let _ = devices()?;
    match hca::ports()? {
        p if p.is_empty() => Err("libibverbs lists no active RDMA port".into()),
        p => Ok(p),
    }
}

#[cfg(not(feature = "verbs"))]
fn find_ports() -> Result<Vec<String>, String> {
    match devices()? {
        d if d.is_empty() => Err("libibverbs lists no RDMA device".into()),
        d => Err(format!(
            "RDMA devices {} exist, but this build has no real verbs provider (build with \
             `--features verbs`, which needs cmake and libclang)",
            d.join(", ")
        )),
    }
}

/// Why `rc_verbs` offers no real device here (empty when it does).
pub fn absent_reason() -> String {
    ports().err().unwrap_or_default()
}

/// Opens the real provider on `dev` (one of [`ports`]).
#[cfg(feature = "verbs")]
pub fn open(dev: &str, cfg: &ucs::Config) -> Result<Box<dyn super::Provider>, String> {
    Ok(Box::new(hca::RealHca::open(dev, cfg.ib_gid_index)?))
}

#[cfg(not(feature = "verbs"))]
pub fn open(dev: &str, _cfg: &ucs::Config) -> Result<Box<dyn super::Provider>, String> {
    Err(format!(
        "{dev}: this build has no real verbs provider (feature `verbs`)"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_probe_answers_without_a_device() {
        // Here (CI, the GPU machine) there is no HCA: either no library, or no device,
        // and the reason says which. Where there is one, its ports are named.
        match super::ports() {
            Ok(p) => assert!(!p.is_empty() && p.iter().all(|n| n.contains(':'))),
            Err(r) => {
                assert!(!r.is_empty());
                assert_eq!(super::absent_reason(), r);
                eprintln!("rc_verbs: {r}");
            }
        }
        if let Ok(d) = super::devices() {
            assert!(d.iter().all(|n| !n.is_empty()));
        }
    }
}
