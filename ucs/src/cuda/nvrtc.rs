//! NVRTC, the CUDA run-time compiler, loaded at run time: CUDA C source in, PTX out (the
//! driver's JIT turns it into machine code when a [`Module`](super::Module) loads it).
//!
//! Only the eight entry points used here are looked up, by name, so any NVRTC from CUDA 11
//! on serves (cudarc's own NVRTC table insists on every symbol of the version it was
//! built for, which a newer or older library may not have). The library is searched as
//! `RUCX_NVRTC_LIB` (a path), then `libnvrtc.so.13`, `.12`, `.11`, `libnvrtc.so`, then the
//! same names under `$CUDA_HOME/lib64` and `/usr/local/cuda/lib64`. Without it,
//! [`compile`] fails with `Unsupported` and [`absent_reason`] says why; the callers fall
//! back to what needs no compiler.

use std::ffi::{c_char, c_int, CStr, CString};
use std::sync::OnceLock;

use crate::{Status, UcsResult};

type Prog = *mut std::ffi::c_void;
type Res = c_int;

struct Lib {
    _lib: libloading::Library,
    path: String,
    version: (i32, i32),
    create: unsafe extern "C" fn(
        *mut Prog,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Res,
    compile: unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> Res,
    destroy: unsafe extern "C" fn(*mut Prog) -> Res,
    ptx_size: unsafe extern "C" fn(Prog, *mut usize) -> Res,
    ptx: unsafe extern "C" fn(Prog, *mut c_char) -> Res,
    log_size: unsafe extern "C" fn(Prog, *mut usize) -> Res,
    log: unsafe extern "C" fn(Prog, *mut c_char) -> Res,
}

static LIB: OnceLock<Result<Lib, String>> = OnceLock::new();

fn candidates() -> Vec<String> {
    let names = [
        "libnvrtc.so.13",
        "libnvrtc.so.12",
        "libnvrtc.so.11.2",
        "libnvrtc.so",
    ];
    let mut v: Vec<String> = std::env::var("RUCX_NVRTC_LIB").into_iter().collect();
    v.extend(names.iter().map(|n| n.to_string()));
    let mut dirs: Vec<String> = std::env::var("CUDA_HOME")
        .into_iter()
        .map(|h| format!("{h}/lib64"))
        .collect();
    dirs.push("/usr/local/cuda/lib64".into());
    for d in dirs {
        v.extend(names.iter().map(|n| format!("{d}/{n}")));
    }
    v
}

fn load() -> Result<Lib, String> {
    let tried = candidates();
    for path in &tried {
        // SAFETY: loading NVRTC runs its initializers only, which have no preconditions.
        let Ok(lib) = (unsafe { libloading::Library::new(path) }) else {
            continue;
        };
        // SAFETY: each symbol is looked up with the signature NVRTC's header declares for
        // it (stable since CUDA 9); the library stays loaded in `_lib` as long as the
        // pointers are used.
        let l = unsafe {
            let version: libloading::Symbol<unsafe extern "C" fn(*mut c_int, *mut c_int) -> Res> =
                match lib.get(b"nvrtcVersion\0") {
                    Ok(s) => s,
                    Err(_) => continue,
                };
            let (mut maj, mut min) = (0, 0);
            version(&mut maj, &mut min);
            macro_rules! sym {
                ($n:literal) => {
                    match lib.get($n) {
                        Ok(s) => *s,
                        Err(e) => return Err(format!("{path}: {e}")),
                    }
                };
            }
            Lib {
                create: sym!(b"nvrtcCreateProgram\0"),
                compile: sym!(b"nvrtcCompileProgram\0"),
                destroy: sym!(b"nvrtcDestroyProgram\0"),
                ptx_size: sym!(b"nvrtcGetPTXSize\0"),
                ptx: sym!(b"nvrtcGetPTX\0"),
                log_size: sym!(b"nvrtcGetProgramLogSize\0"),
                log: sym!(b"nvrtcGetProgramLog\0"),
                version: (maj, min),
                path: path.clone(),
                _lib: lib,
            }
        };
        return Ok(l);
    }
    Err(
        "no NVRTC library found (tried RUCX_NVRTC_LIB, libnvrtc.so.13/.12/.11.2/.so, \
         $CUDA_HOME/lib64, /usr/local/cuda/lib64): GPU datatype kernels are not compiled, \
         and device layouts go by copies"
            .to_string(),
    )
}

fn lib() -> UcsResult<&'static Lib> {
    LIB.get_or_init(load)
        .as_ref()
        .map_err(|_| Status::Unsupported)
}

/// Why NVRTC is not available, or `None` when it is.
pub fn absent_reason() -> Option<&'static str> {
    LIB.get_or_init(load).as_ref().err().map(String::as_str)
}

/// The loaded library's path and version, when there is one.
pub fn describe() -> Option<(String, (i32, i32))> {
    LIB.get_or_init(load)
        .as_ref()
        .ok()
        .map(|l| (l.path.clone(), l.version))
}

/// Compiles `src` (CUDA C, kernels declared `extern "C"`) for compute capability `cc`;
/// returns the PTX. A compile error is `InvalidParam`, with NVRTC's log in the debug log
/// and in the error message returned by [`compile_verbose`].
pub fn compile(src: &str, cc: (i32, i32)) -> UcsResult<String> {
    compile_verbose(src, cc).map_err(|(s, log)| {
        log::debug!("nvrtc: {log}");
        s
    })
}

/// As [`compile`], with NVRTC's log on failure.
pub fn compile_verbose(src: &str, cc: (i32, i32)) -> Result<String, (Status, String)> {
    let l = lib().map_err(|s| (s, absent_reason().unwrap_or("").to_string()))?;
    let bad = |m: &str| (Status::InvalidParam, m.to_string());
    let csrc = CString::new(src).map_err(|_| bad("source holds a NUL byte"))?;
    let name = CString::new("rucx_dt.cu").map_err(|_| bad("name"))?;
    let mut prog: Prog = std::ptr::null_mut();
    // SAFETY: out pointer; NUL-terminated strings; no headers.
    let r = unsafe {
        (l.create)(
            &mut prog,
            csrc.as_ptr(),
            name.as_ptr(),
            0,
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err((Status::NoMemory, format!("nvrtcCreateProgram: {r}")));
    }
    let arch = CString::new(format!("--gpu-architecture=compute_{}{}", cc.0, cc.1))
        .map_err(|_| bad("arch"))?;
    let opts = [arch.as_ptr(), c"-default-device".as_ptr()];
    let out = (|| {
        // SAFETY: a live program; `opts` holds NUL-terminated strings.
        let r = unsafe { (l.compile)(prog, opts.len() as c_int, opts.as_ptr()) };
        if r != 0 {
            let mut n = 0usize;
            // SAFETY: a live program; out pointer.
            unsafe { (l.log_size)(prog, &mut n) };
            let mut buf = vec![0 as c_char; n.max(1)];
            // SAFETY: the buffer holds the size NVRTC asked for.
            unsafe { (l.log)(prog, buf.as_mut_ptr()) };
            // SAFETY: NUL-terminated by NVRTC (zeroed before).
            let log = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy();
            return Err((
                Status::InvalidParam,
                format!("nvrtc compile error {r}: {log}"),
            ));
        }
        let mut n = 0usize;
        // SAFETY: a compiled program; out pointer.
        if unsafe { (l.ptx_size)(prog, &mut n) } != 0 || n == 0 {
            return Err(bad("nvrtcGetPTXSize failed"));
        }
        let mut buf = vec![0u8; n];
        // SAFETY: the buffer holds the size NVRTC gave.
        if unsafe { (l.ptx)(prog, buf.as_mut_ptr().cast()) } != 0 {
            return Err(bad("nvrtcGetPTX failed"));
        }
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        buf.truncate(end);
        String::from_utf8(buf).map_err(|_| bad("PTX is not text"))
    })();
    // SAFETY: created above, destroyed once.
    unsafe { (l.destroy)(&mut prog) };
    out
}
