//! Gives the cdylib UCX's soname, so that consumers linked against `libucp.so.0` load it,
//! and compiles the one piece of C in it: the variadic formatter behind `ucs_log_dispatch`
//! (`csrc/log_dispatch.c`, see `src/ucs_log.rs`).
fn main() {
    cc::Build::new()
        .file("csrc/log_dispatch.c")
        .warnings(true)
        .compile("rucx_log_dispatch");
    println!("cargo:rerun-if-changed=csrc/log_dispatch.c");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucp.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
