//! The cost of one `progress` call that finds nothing, on a worker with a wired
//! shared-memory endpoint: the length of every polling loop's turn. A message that lands
//! while the loop runs waits, on average, half a turn to be seen.
//!
//! `cargo run --release -p ucp --example empty_progress [ITERS]`; compared with UCX by
//! `contrib/bench/inproc-pingpong.sh`.

use std::time::Instant;

mod common;

fn main() {
    let (mut a, b, iters) = common::two_workers(10_000_000);
    let _ep = a.ep_create(b.address()).unwrap();
    for _ in 0..10_000 {
        a.progress();
    }
    let t = Instant::now();
    let mut n = 0;
    for _ in 0..iters {
        n += a.progress();
    }
    assert_eq!(n, 0, "nothing was sent, yet progress reported events");
    let ns = t.elapsed().as_nanos() as f64 / iters as f64;
    println!("{ns:.2} ns per empty progress ({iters} calls)");
}
