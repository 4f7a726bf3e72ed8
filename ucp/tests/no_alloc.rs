//! Once warm, posting and completing tag sends and receives allocates nothing: requests
//! come from the worker's slab, matcher entries from its slabs. Counted with a global
//! allocator that counts, over eager sends with and without a request, synchronous sends
//! (acknowledged through the control queue) and receives posted before the message arrives.
#![allow(unsafe_code)] // a counting global allocator, and buffers described to ucp

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use ucp::{Buf, Context, Data, RecvParams, SendParams, Worker};
use ucs::{Config, Status};

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract as ours, passed through.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `p` came from `System.alloc` with `l`.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: `p` came from `System.alloc` with `l`.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn warm_tag_traffic_allocates_nothing() {
    let c = Context::new(Config::from_lookup(|k| (k == "TLS").then(|| "posix".into())).unwrap());
    let mut a = Worker::new(&c).unwrap();
    let mut b = Worker::new(&c).unwrap();
    let ab = a.ep_create(b.address()).unwrap();
    let _ba = b.ep_create(a.address()).unwrap();
    let src = vec![5u8; 1024];
    let mut dst = vec![0u8; 1024];
    // SAFETY: both vectors outlive every request below, each of which is waited for.
    let (sd, rd) = unsafe { (Buf::from_slice(&src), Buf::from_mut_slice(&mut dst)) };

    let one_round = |a: &mut Worker, b: &mut Worker, i: u64| {
        let len = [8usize, 1024][i as usize % 2];
        let sync = i.is_multiple_of(3);
        let r = b
            .tag_recv(&Data::Contig(rd), i, u64::MAX, RecvParams::default())
            .unwrap();
        let s = a
            .tag_send(
                ab,
                &Data::Contig(sd.sub(0, len).unwrap()),
                i,
                SendParams {
                    sync,
                    ..Default::default()
                },
            )
            .unwrap();
        loop {
            a.progress();
            b.progress();
            let sent = s.is_none_or(|s| a.request_status(s) != Status::InProgress);
            if sent && b.request_status(r) != Status::InProgress {
                break;
            }
        }
        if let Some(s) = s {
            assert_eq!(a.wait(s).0, Status::Ok);
        }
        let (st, info) = b.wait(r);
        assert_eq!(st, Status::Ok);
        assert_eq!(info.unwrap().length, len);
    };
    for i in 0..2000 {
        one_round(&mut a, &mut b, i);
    }
    COUNTING.store(true, Ordering::SeqCst);
    for i in 2000..12_000 {
        one_round(&mut a, &mut b, i);
    }
    COUNTING.store(false, Ordering::SeqCst);
    let n = ALLOCS.load(Ordering::SeqCst);
    assert_eq!(n, 0, "{n} allocations in 10 000 warm round trips");
    assert_eq!(dst[..8], [5u8; 8]);
    // The counter itself works.
    COUNTING.store(true, Ordering::SeqCst);
    let b = std::hint::black_box(Box::new(1u64));
    COUNTING.store(false, Ordering::SeqCst);
    drop(b);
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 1);
}
