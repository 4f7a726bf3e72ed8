//! What the in-process examples share: two workers of one context over shared memory
//! (`UCX_TLS=posix` unless set), and the iteration count from the first argument.

use ucp::{Context, Worker};

/// The two workers and the number of iterations (`default_iters` without an argument).
pub fn two_workers(default_iters: u64) -> (Worker, Worker, u64) {
    std::env::set_var(
        "UCX_TLS",
        std::env::var("UCX_TLS").unwrap_or("posix".into()),
    );
    let iters = std::env::args()
        .nth(1)
        .map_or(default_iters, |s| s.parse().expect("ITERS is a number"));
    let ctx = Context::from_env().unwrap();
    let a = Worker::new(&ctx).unwrap();
    let b = Worker::new(&ctx).unwrap();
    (a, b, iters)
}
