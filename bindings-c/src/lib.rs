//! `bindings-c` — the C ABI (`libucp.so.0` with UCX's symbols and layouts).
//!
//! Not written yet: this crate is the subject of the C ABI issue; it needs the `ucp` layer
//! first. It exists now so that the workspace has its final shape.
