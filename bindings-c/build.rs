//! Gives the cdylib UCX's soname, so that consumers linked against `libucp.so.0` load it.
fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libucp.so.0");
    println!("cargo:rerun-if-changed=build.rs");
}
