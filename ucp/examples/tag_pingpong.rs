//! Two workers in one process, one thread, ping-ponging 8-byte tag messages over shared
//! memory: every step is software (no cross-core wait), so the time per round trip is the
//! instruction cost of the UCP tag path (two sends, two receives, the progress calls).
//! A tool for profiling (`valgrind --tool=callgrind`), not a benchmark against UCX.
//!
//! `cargo run --release -p ucp --example tag_pingpong [ITERS]`
#![allow(unsafe_code)]

use std::time::Instant;

use ucp::{Data, RecvParams, SendParams};
use ucs::Status;

mod common;

fn main() {
    let (mut a, mut b, iters) = common::two_workers(1_000_000);
    let ea = a.ep_create(b.address()).unwrap();
    let eb = b.ep_create(a.address()).unwrap();
    let mut sa = [0u8; 8];
    let mut ra = [0u8; 8];
    let mut sb = [0u8; 8];
    let mut rb = [0u8; 8];
    // SAFETY: the buffers outlive every operation (each is waited for below).
    let (dsa, dra, dsb, drb) = unsafe {
        (
            Data::Contig(ucp::Buf::from_mut_slice(&mut sa)),
            Data::Contig(ucp::Buf::from_mut_slice(&mut ra)),
            Data::Contig(ucp::Buf::from_mut_slice(&mut sb)),
            Data::Contig(ucp::Buf::from_mut_slice(&mut rb)),
        )
    };
    let mut round = |n: u64| {
        for _ in 0..n {
            let r = b.tag_recv(&drb, 1, !0, RecvParams::default()).unwrap();
            if let Some(s) = a.tag_send(ea, &dsa, 1, SendParams::default()).unwrap() {
                while a.request_status(s) == Status::InProgress {
                    a.progress();
                    b.progress();
                }
                a.request_free(s);
            }
            while b.request_test(r).is_none() {
                b.progress();
                a.progress();
            }
            let r = a.tag_recv(&dra, 2, !0, RecvParams::default()).unwrap();
            if let Some(s) = b.tag_send(eb, &dsb, 2, SendParams::default()).unwrap() {
                while b.request_status(s) == Status::InProgress {
                    a.progress();
                    b.progress();
                }
                b.request_free(s);
            }
            while a.request_test(r).is_none() {
                a.progress();
                b.progress();
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
