//! Two interfaces of one process on the software HCA model (each its own device): the
//! connection manager, cancellation, and the UMR key cache. Between processes, the
//! conformance suite (`tests/tests/uct_conformance.rs`) and the `ucp` suites run it.
use super::*;

#[derive(Default)]
struct Ev {
    ams: Vec<(u8, Vec<u8>)>,
    done: Vec<(Comp, Status)>,
    errors: Vec<(EpId, Status)>,
}

impl Handler for Ev {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.ams.push((id, data.to_vec()));
    }
    fn completion(&mut self, comp: Comp, status: Status) {
        self.done.push((comp, status));
    }
    fn ep_error(&mut self, ep: EpId, status: Status) {
        self.errors.push((ep, status));
    }
}

fn open() -> RcIface {
    RcIface::open(&Config::default(), MODEL_DEVICE).expect("open the model")
}

/// Progresses both until `done` holds (at most 5 s).
fn until(
    a: &mut RcIface,
    ea: &mut Ev,
    b: &mut RcIface,
    eb: &mut Ev,
    done: impl Fn(&RcIface, &Ev, &Ev) -> bool,
) {
    let t0 = std::time::Instant::now();
    while !done(a, ea, eb) {
        a.progress(ea);
        b.progress(eb);
        assert!(t0.elapsed().as_secs() < 5, "no progress");
    }
}

#[test]
fn connects_sends_writes_reads_and_flushes() {
    let (mut a, mut b) = (open(), open());
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    let ep = a.ep_connect(b.device_address(), b.iface_address()).unwrap();
    // Not connected until the peer accepted.
    assert_eq!(a.am_short(ep, 3, 7, b"x"), Err(Status::NoResource));
    until(&mut a, &mut ea, &mut b, &mut eb, |a, _, _| a.ep_idle(ep));
    a.am_short(ep, 3, 0x1122, b"hello").unwrap();
    until(&mut a, &mut ea, &mut b, &mut eb, |_, _, eb| {
        !eb.ams.is_empty()
    });
    assert_eq!(eb.ams[0].0, 3);
    assert_eq!(&eb.ams[0].1[..8], &0x1122u64.to_le_bytes());
    assert_eq!(&eb.ams[0].1[8..], b"hello");
    // RDMA WRITE of three pieces into b's region, READ back.
    let mut region = vec![0u8; 4096];
    // SAFETY: `region` outlives its registration (deregistered below).
    let mh = unsafe { b.md().mem_reg(region.as_mut_ptr(), region.len()) }.unwrap();
    let rk = a.md().rkey_unpack(&b.md().mkey_pack(&mh)).unwrap();
    let src: Vec<u8> = (0..300u32).map(|i| i as u8).collect();
    let iov = [
        Iov::from_slice(&src[..100]),
        Iov::from_slice(&src[100..101]),
        Iov::from_slice(&src[101..]),
    ];
    // SAFETY: `src` outlives the operation (waited for below).
    let d = unsafe { a.put_zcopy(ep, &iov, mh.base + 1000, &rk, 11) }.unwrap();
    assert_eq!(d, Done::Later);
    until(&mut a, &mut ea, &mut b, &mut eb, |_, ea, _| {
        !ea.done.is_empty()
    });
    assert_eq!(ea.done.pop(), Some((11, Status::Ok)));
    assert_eq!(&region[1000..1300], &src[..]);
    let mut back = vec![0u8; 300];
    let iov = [Iov::from_mut_slice(&mut back)];
    // SAFETY: `back` outlives the operation (waited for below).
    unsafe { a.get_zcopy(ep, &iov, mh.base + 1000, &rk, 12) }.unwrap();
    assert_eq!(a.flush(Some(ep), 13), Ok(Done::Later));
    until(&mut a, &mut ea, &mut b, &mut eb, |_, ea, _| {
        ea.done.len() == 2
    });
    assert_eq!(ea.done, vec![(12, Status::Ok), (13, Status::Ok)]);
    assert_eq!(back, src);
    // Outside the key's range: refused before anything is posted.
    // SAFETY: nothing is posted.
    let r = unsafe { a.get_zcopy(ep, &iov, mh.base + 4000, &rk, 14) };
    assert_eq!(r, Err(Status::InvalidParam));
    b.md().mem_dereg(&mh).unwrap();
    let c = a.counters();
    assert!(
        c.contains(&("connects", 1)) && c.contains(&("rdma_writes", 1)),
        "{c:?}"
    );
}

#[test]
fn fetch_add_and_compare_swap_run_on_the_hca() {
    let (mut a, mut b) = (open(), open());
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    assert!(a.attr().flags.contains(IfaceFlags::ATOMIC64));
    let ep = a.ep_connect(b.device_address(), b.iface_address()).unwrap();
    until(&mut a, &mut ea, &mut b, &mut eb, |a, _, _| a.ep_idle(ep));
    let mut region = vec![0u64; 8];
    region[2] = 40;
    let len = region.len() * 8;
    // SAFETY: `region` outlives its registration (deregistered below).
    let mh = unsafe { b.md().mem_reg(region.as_mut_ptr().cast(), len) }.unwrap();
    let rk = a.md().rkey_unpack(&b.md().mkey_pack(&mh)).unwrap();
    let word = mh.base + 16;
    let mut old = [0u64; 4];
    use crate::iface::Amo64;
    let ops = [
        (Amo64::Add(2), 40),
        (
            Amo64::Cswap {
                compare: 42,
                swap: 7,
            },
            42,
        ),
        (
            Amo64::Cswap {
                compare: 42,
                swap: 9,
            },
            7,
        ),
        (Amo64::Add(u64::MAX), 7),
    ];
    for (i, (op, _)) in ops.iter().enumerate() {
        // SAFETY: `old` outlives the operation (waited for below).
        let d = unsafe { a.atomic64_fetch(ep, *op, word, &rk, &mut old[i], 20 + i as u64) };
        assert_eq!(d, Ok(Done::Later));
        until(&mut a, &mut ea, &mut b, &mut eb, |_, ea, _| {
            ea.done.len() == i + 1
        });
    }
    assert!(
        ea.done.iter().all(|(_, st)| *st == Status::Ok),
        "{:?}",
        ea.done
    );
    let want: Vec<u64> = ops.iter().map(|(_, w)| *w).collect();
    assert_eq!(old.to_vec(), want, "old values in order");
    assert_eq!(region[2], 6, "40 + 2, swapped to 7, not to 9, minus 1");
    // Misaligned, outside the key, or a null result: refused before anything is posted.
    let mut r = 0u64;
    for (at, res) in [
        (word + 4, &mut r as *mut u64),
        (mh.base + len as u64, &mut r),
        (word, std::ptr::null_mut()),
    ] {
        // SAFETY: nothing is posted.
        let e = unsafe { a.atomic64_fetch(ep, Amo64::Add(1), at, &rk, res, 30) };
        assert_eq!(e, Err(Status::InvalidParam));
    }
    assert!(a.counters().contains(&("atomics", 4)));
    b.md().mem_dereg(&mh).unwrap();
}

/// An HCA's send queue holds unsignalled requests until a later signalled one completes:
/// operations signal at least every 64 requests, and what the queue (256 on the model)
/// cannot take waits in the endpoint's backlog, in order, while later operations are
/// refused (`NoResource`) until it drained. An operation of more requests than the
/// queue holds goes in parts.
#[test]
fn operations_respect_the_send_queue() {
    let (mut a, mut b) = (open(), open());
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    let ep = a.ep_connect(b.device_address(), b.iface_address()).unwrap();
    until(&mut a, &mut ea, &mut b, &mut eb, |a, _, _| a.ep_idle(ep));
    let mut region: Vec<u8> = (0..131072u32).map(|i| (i * 7 + i / 256) as u8).collect();
    // SAFETY: `region` outlives its registration (deregistered below).
    let mh = unsafe { b.md().mem_reg(region.as_mut_ptr(), region.len()) }.unwrap();
    let rk = a.md().rkey_unpack(&b.md().mkey_pack(&mh)).unwrap();
    // A gather of n segments of 16 bytes, 128 apart: one work request each.
    let segs = |n: u64, from: u64| -> Vec<(u64, u64)> {
        (0..n).map(|k| (mh.base + from + k * 128, 16)).collect()
    };
    let sizes = [100u64, 100, 100, 100, 700];
    let mut dst: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n as usize * 16]).collect();
    let post = |a: &mut RcIface, dst: &mut Vec<Vec<u8>>, i: usize| {
        let l = [Iov::from_mut_slice(&mut dst[i])];
        // SAFETY: `dst` outlives the operations (waited for below).
        unsafe { a.get_zcopy_iov(ep, &l, &segs(sizes[i], i as u64 * 16), &rk, i as u64) }
    };
    assert_eq!(post(&mut a, &mut dst, 0), Ok(Done::Later));
    assert_eq!(post(&mut a, &mut dst, 1), Ok(Done::Later));
    // 56 of the third's requests fit the queue, 44 wait in the backlog.
    assert_eq!(post(&mut a, &mut dst, 2), Ok(Done::Later));
    assert!(!a.ep_idle(ep));
    assert_eq!(
        post(&mut a, &mut dst, 3),
        Err(Status::NoResource),
        "behind a backlog"
    );
    until(&mut a, &mut ea, &mut b, &mut eb, |_, ea, _| {
        ea.done.len() == 3
    });
    assert_eq!(post(&mut a, &mut dst, 3), Ok(Done::Later));
    // 700 requests: more than the queue holds, in parts as completions come.
    until(&mut a, &mut ea, &mut b, &mut eb, |_, ea, _| {
        ea.done.len() == 4
    });
    assert_eq!(post(&mut a, &mut dst, 4), Ok(Done::Later));
    until(&mut a, &mut ea, &mut b, &mut eb, |_, ea, _| {
        ea.done.len() == 5
    });
    let comps: Vec<(u64, Status)> = (0..5).map(|i| (i, Status::Ok)).collect();
    assert_eq!(ea.done, comps);
    for (i, d) in dst.iter().enumerate() {
        let want: Vec<u8> = segs(sizes[i], i as u64 * 16)
            .iter()
            .flat_map(|&(at, n)| {
                let o = (at - mh.base) as usize;
                region[o..o + n as usize].to_vec()
            })
            .collect();
        assert!(*d == want, "gather {i}");
    }
    assert_eq!(
        a.flush(Some(ep), 9),
        Ok(Done::Now),
        "nothing left in flight"
    );
    b.md().mem_dereg(&mh).unwrap();
}

#[test]
fn a_request_to_a_stale_interface_address_is_rejected() {
    let (mut a, mut b) = (open(), open());
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    // b's device, an interface nonce that is not b's.
    let stale = Writer::default().u64(b.nonce ^ 1).buf;
    let ep = a.ep_connect(b.device_address(), &stale).unwrap();
    until(&mut a, &mut ea, &mut b, &mut eb, |_, ea, _| {
        !ea.errors.is_empty()
    });
    assert_eq!(ea.errors, vec![(ep, Status::Unreachable)]);
    assert_eq!(a.am_short(ep, 1, 0, b""), Err(Status::Unreachable));
    assert!(b.passive.is_empty());
}

#[test]
fn destroying_an_endpoint_cancels_what_waits_behind_a_receiver_not_ready() {
    let (mut a, mut b) = (open(), open());
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    let ep = a.ep_connect(b.device_address(), b.iface_address()).unwrap();
    until(&mut a, &mut ea, &mut b, &mut eb, |a, _, _| a.ep_idle(ep));
    // b stops progressing: its posted receives fill, then SENDs wait at the HCA.
    let mut sent = 0;
    while a.am_short(ep, 1, sent, b"").is_ok() {
        sent += 1;
        a.progress(&mut ea);
    }
    assert_eq!(sent as usize, RX_PER_QP + TX_SLOTS);
    let mut region = vec![0u8; 64];
    // SAFETY: `region` outlives its registration.
    let mh = unsafe { b.md().mem_reg(region.as_mut_ptr(), 64) }.unwrap();
    let rk = a.md().rkey_unpack(&b.md().mkey_pack(&mh)).unwrap();
    let src = [7u8; 8];
    // SAFETY: the operation is canceled before `src` goes away.
    unsafe { a.put_zcopy(ep, &[Iov::from_slice(&src)], mh.base, &rk, 21) }.unwrap();
    a.ep_destroy(ep);
    a.progress(&mut ea);
    assert_eq!(ea.done, vec![(21, Status::Canceled)]);
    assert_eq!(
        region,
        vec![0u8; 64],
        "a write behind the blocked SENDs ran"
    );
    assert_eq!(a.tx_free.len(), TX_SLOTS, "send slots not returned");
    assert_eq!(a.flush(None, 22), Ok(Done::Now));
    // b's accepted QP goes on its peer's disconnect, after the messages it received.
    until(&mut a, &mut ea, &mut b, &mut eb, |_, _, eb| {
        eb.ams.len() == RX_PER_QP
    });
    until(&mut a, &mut ea, &mut b, &mut eb, |_, _, _| true);
    for _ in 0..64 {
        b.progress(&mut eb);
    }
    assert!(b.passive.is_empty());
    b.md().mem_dereg(&mh).unwrap();
}

#[test]
fn umr_key_sets_are_cached_kept_while_in_use_and_evicted_when_keys_run_out() {
    let mut a = open();
    let max_klm = a.umr_max_klm() as u64;
    // 4096 blocks of 8 bytes 16 bytes apart: a chunk of 8 * (max_klm - 1) bytes, so
    // about 4096 / 63 = 66 keys a set.
    let mut buf = vec![0u8; 16 * 4096 * 80];
    let set = |i: usize, buf: &mut [u8]| -> Vec<(u64, u64)> {
        let base = buf.as_mut_ptr() as u64 + (i * 16 * 4096) as u64;
        (0..4096u64).map(|j| (base + 16 * j, 8)).collect()
    };
    let chunk = 8 * (max_klm - 1);
    let s0 = set(0, &mut buf);
    let k0 = a.umr_keys((1, 0, 32768), &s0, chunk).unwrap();
    assert_eq!(k0.len() as u64, (4096 * 8u64).div_ceil(chunk));
    assert_eq!(
        a.umr_keys((1, 0, 32768), &s0, chunk).unwrap(),
        k0,
        "a hit builds nothing"
    );
    assert_eq!(a.counters.umr_hits, 1);
    let configured = a.counters.mkeys_configured;
    // Set 0 stays in use (two uses, one ended); the others are released at once.
    a.umr_release((1, 0, 32768), chunk);
    let mut built = 1;
    for i in 1..70 {
        let s = set(i, &mut buf);
        match a.umr_keys((1, i as u64, 32768), &s, chunk) {
            Ok(_) => {
                a.umr_release((1, i as u64, 32768), chunk);
                built += 1;
            }
            Err(e) => panic!("set {i}: {e}"),
        }
    }
    // More sets than the device holds keys for: the unused ones were evicted, never
    // the one in use.
    assert!(
        built as u64 * k0.len() as u64 > MAX_KEYS_HINT,
        "{built} sets"
    );
    assert_eq!(
        a.umr_keys((1, 0, 32768), &s0, chunk).unwrap(),
        k0,
        "the set in use survived"
    );
    assert!(a.counters.mkeys_configured > configured);
    // The pool grew on demand, and evicted sets gave their keys back to it.
    assert!(a.counters.mkeys_created > 0);
    // A set that cannot fit while everything is in use: an error, nothing leaked.
    let all_used: Vec<_> = a.umr.keys().copied().collect();
    for k in &all_used {
        a.umr.get_mut(k).unwrap().uses += 1;
    }
    let big: Vec<(u64, u64)> = (0..60_000u64)
        .map(|j| (buf.as_ptr() as u64 + 16 * j, 8))
        .collect();
    assert!(a.umr_keys((2, 0, 480_000), &big, chunk).is_err());
    assert!(!a.umr.contains_key(&(2, 0, 480_000, chunk)));
}

/// Keys of the model's device (`model::MAX_MR` less its regions): a bound the test
/// above must exceed to exercise eviction.
const MAX_KEYS_HINT: u64 = 4000;

#[test]
fn umr_costs_are_measured_on_the_provider() {
    let mut a = open();
    let c = a.umr_cost().expect("measured");
    assert!(c.wr_ns > 0.0 && c.send_ns > 0.0, "{c:?}");
    assert!(c.entry_ns >= 0.0 && c.byte_ns >= 0.0, "{c:?}");
    assert_eq!(c.seg, SEG);
    // Measured once.
    assert_eq!(a.umr_cost(), Some(c));
}
