//! The real verbs provider's presence: libibverbs loaded at run time (`dlopen`), asked for
//! its devices (`ibv_get_device_list`). The provider over it (with mlx5dv's UMR, through
//! `rdma-mummy-sys`) is not built yet; this says what a machine has, for discovery and
//! `rucx-info -d`.

use std::ffi::{c_int, c_void, CStr};

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

/// Why `rc_verbs` is absent here without the model (it always is: the real provider is
/// not built yet). Asked once per process.
pub fn absent_reason() -> String {
    static R: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    R.get_or_init(reason).clone()
}

fn reason() -> String {
    match devices() {
        Err(why) => why,
        Ok(d) if d.is_empty() => "libibverbs lists no RDMA device".into(),
        Ok(d) => format!(
            "RDMA devices {} exist, but Rucx has no real verbs provider yet (rc_verbs runs on \
             the software HCA model only, with RUCX_SOFTHCA=1)",
            d.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_probe_answers_without_a_device() {
        // Here (CI, the GPU machine) there is no HCA: either no library, or no device.
        let r = super::absent_reason();
        assert!(!r.is_empty());
        eprintln!("rc_verbs: {r}");
        if let Ok(d) = super::devices() {
            assert!(d.iter().all(|n| !n.is_empty()));
        }
    }
}
