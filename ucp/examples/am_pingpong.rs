//! Two workers in one process, one thread, ping-ponging 8-byte active messages over shared
//! memory, each answer sent from inside the handler (as `ucx_perftest -t ucp_am_lat`
//! does). Every step is software, so the time per round trip is the instruction cost of
//! the UCP active-message path. A tool for profiling, not a benchmark against UCX.
//!
//! `cargo run --release -p ucp --example am_pingpong [ITERS]`
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ucp::{AmData, AmEvent, Data, Worker};

mod common;

fn main() {
    let (mut a, mut b, iters) = common::two_workers(1_000_000);
    let ea = a.ep_create(b.address()).unwrap();
    let eb = b.ep_create(a.address()).unwrap();
    let sa = Box::leak(Box::new([0u8; 8]));
    let sb = Box::leak(Box::new([0u8; 8]));
    // SAFETY: the buffers are leaked, so they outlive every operation.
    let (dsa, dsb) = unsafe {
        (
            Data::Contig(ucp::Buf::from_mut_slice(sa)),
            Data::Contig(ucp::Buf::from_mut_slice(sb)),
        )
    };
    let got = Arc::new(AtomicU64::new(0));
    let g = Arc::clone(&got);
    a.am_set_handler(
        0,
        Some(Box::new(move |_: &mut Worker, ev: AmEvent| {
            assert!(matches!(ev.data, AmData::Eager(_)));
            // One thread: a plain increment, as the C version's `got++` (a locked
            // fetch_add cost 2 ns of the round trip).
            g.store(g.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        })),
    );
    b.am_set_handler(
        0,
        Some(Box::new(move |w: &mut Worker, ev: AmEvent| {
            assert!(matches!(ev.data, AmData::Eager(_)));
            // The answer goes out from inside the handler. The first ones may wait for
            // the endpoint's wire-up: the worker finishes them on its own.
            if let Some(id) = w.am_send(eb, 0, &[], &dsb, Default::default()).unwrap() {
                w.request_free(id);
            }
        })),
    );
    let mut round = |n: u64| {
        for _ in 0..n {
            let want = got.load(Ordering::Relaxed) + 1;
            let mut r = a.am_send(ea, 0, &[], &dsa, Default::default()).unwrap();
            while got.load(Ordering::Relaxed) < want || r.is_some() {
                if let Some(id) = r {
                    if a.request_test(id).is_some() {
                        r = None;
                    }
                }
                b.progress();
                a.progress();
            }
        }
    };
    round(10_000);
    if std::env::var_os("PP_NO_TIME").is_some() {
        return;
    }
    let t = Instant::now();
    round(iters);
    let ns = t.elapsed().as_nanos() as f64 / iters as f64;
    println!("{ns:.1} ns per round trip ({iters} iterations)");
}
