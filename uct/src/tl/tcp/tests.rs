//! In-process tests: two tcp interfaces on loopback, and hand-written peers that break the
//! protocol.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use super::*;
use ucs::testing::Netns;

const DEADLINE: Duration = Duration::from_secs(20);

#[derive(Default, Debug)]
struct Ev {
    ams: Vec<(u8, Vec<u8>)>,
    comps: Vec<(Comp, Status)>,
    pending: Vec<(EpId, u64)>,
    errors: Vec<(EpId, Status)>,
}

impl Handler for Ev {
    fn am(&mut self, id: u8, data: &[u8]) {
        self.ams.push((id, data.to_vec()));
    }
    fn completion(&mut self, comp: Comp, status: Status) {
        self.comps.push((comp, status));
    }
    fn pending(&mut self, ep: EpId, token: u64) {
        self.pending.push((ep, token));
    }
    fn ep_error(&mut self, ep: EpId, status: Status) {
        self.errors.push((ep, status));
    }
}

impl Ev {
    fn comp(&self, c: Comp) -> Option<Status> {
        self.comps.iter().find(|(x, _)| *x == c).map(|(_, s)| *s)
    }
}

fn cfg_with(vars: &[(&str, &str)]) -> Config {
    let vars: Vec<(String, String)> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Config::from_lookup(move |n| vars.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
        .expect("test config")
}

fn open_lo() -> TcpIface {
    TcpIface::open(&Config::default(), "lo").expect("open tcp on lo")
}

struct Pair {
    a: TcpIface,
    b: TcpIface,
    ea: Ev,
    eb: Ev,
    ep: EpId,
}

impl Pair {
    fn new() -> Pair {
        Pair::with(open_lo(), open_lo())
    }

    fn with(mut a: TcpIface, b: TcpIface) -> Pair {
        assert!(a.is_reachable(b.device_address(), b.iface_address()));
        let ep = a
            .ep_connect(b.device_address(), b.iface_address())
            .expect("ep_connect");
        Pair {
            a,
            b,
            ea: Ev::default(),
            eb: Ev::default(),
            ep,
        }
    }

    fn progress(&mut self) {
        self.a.progress(&mut self.ea);
        self.b.progress(&mut self.eb);
    }

    fn until(&mut self, what: &str, f: impl Fn(&Pair) -> bool) {
        let start = Instant::now();
        while !f(self) {
            self.progress();
            assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        }
    }

    /// Posts with `op`, progressing while it says `NoResource`.
    fn retry<T>(&mut self, mut op: impl FnMut(&mut TcpIface) -> UcsResult<T>) -> UcsResult<T> {
        let start = Instant::now();
        loop {
            match op(&mut self.a) {
                Err(Status::NoResource) => {
                    self.progress();
                    assert!(start.elapsed() < DEADLINE, "no resources for too long");
                }
                r => return r,
            }
        }
    }

    fn wait_comp(&mut self, done: Done, c: Comp) -> Status {
        if done == Done::Now {
            return Status::Ok;
        }
        self.until("a completion", |p| p.ea.comp(c).is_some());
        self.ea.comp(c).unwrap_or(Status::Ok)
    }

    /// Registers `buf` at b and hands back the key a unpacked.
    fn reg_at_b(&self, buf: &mut [u8]) -> (MemH, RemoteKey) {
        // SAFETY: the tests keep `buf` alive and registered while peers use the key.
        let mh = unsafe { self.b.md().mem_reg(buf.as_mut_ptr(), buf.len()) }.unwrap();
        let rk = self
            .a
            .md()
            .rkey_unpack(&self.b.md().mkey_pack(&mh))
            .unwrap();
        (mh, rk)
    }
}

use crate::md::MemH;

/// The send queue of the connection `ep` uses.
fn txq(i: &TcpIface, ep: EpId) -> &TxQueue {
    &i.conns[i.eps[ep.index()].conn].tx
}

fn some_id() -> IfaceId {
    IfaceId {
        ip: [127, 0, 0, 1],
        port: 9,
        nonce: 7,
    }
}

fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn devices_list_loopback_and_honour_net_devices() {
    let all = devices(&Config::default()).unwrap();
    assert!(all.iter().any(|d| d == "lo"), "{all:?}");
    let none = devices(&cfg_with(&[("NET_DEVICES", "^lo")])).unwrap();
    assert!(!none.iter().any(|d| d == "lo"));
    let only = devices(&cfg_with(&[("NET_DEVICES", "lo")])).unwrap();
    assert_eq!(only, vec!["lo".to_string()]);
    assert!(matches!(
        TcpIface::open(&Config::default(), "no-such-dev0"),
        Err(OpenError::NoDevice { .. })
    ));
}

#[test]
fn addresses_are_checked() {
    let a = open_lo();
    let dev = a.device_address().to_vec();
    let ifa = a.iface_address().to_vec();
    assert_eq!(dev, [127, 0, 0, 1]);
    assert_eq!(ifa.len(), a.attr().iface_addr_len);
    assert!(a.is_reachable(&dev, &ifa));
    assert!(!a.is_reachable(&dev[..3], &ifa));
    assert!(!a.is_reachable(&dev, &ifa[..ifa.len() - 1]));
    assert!(!a.is_reachable(&[0, 0, 0, 0], &ifa));
    assert!(!a.is_reachable(&[224, 0, 0, 1], &ifa));
    let mut zero_port = ifa.clone();
    zero_port[..2].fill(0);
    assert!(!a.is_reachable(&dev, &zero_port));
    // A peer whose frames are smaller than ours cannot take our largest messages.
    let mut small = ifa.clone();
    small[2..6].copy_from_slice(&64u32.to_le_bytes());
    assert!(!a.is_reachable(&dev, &small));
    let mut a = a;
    assert_eq!(a.ep_connect(&dev[..2], &ifa), Err(Status::InvalidAddr));
    assert_eq!(a.ep_connect(&dev, &small), Err(Status::Unreachable));
}

#[test]
fn port_range_is_honoured() {
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let free = probe.local_addr().unwrap().port();
    drop(probe);
    let range = format!("{free}-{}", free.saturating_add(20));
    let a = TcpIface::open(&cfg_with(&[("TCP_PORT_RANGE", &range)]), "lo").unwrap();
    assert!((free..=free.saturating_add(20)).contains(&a.port()));
}

#[test]
fn am_short_bcopy_zcopy_arrive_in_order() {
    let mut p = Pair::new();
    let ep = p.ep;
    let attr = p.a.attr().clone();
    p.retry(|a| a.am_short(ep, 3, 0x1122_3344_5566_7788, b"hello"))
        .unwrap();
    let big_short = pattern(1, attr.am.max_short);
    p.retry(|a| a.am_short(ep, 3, 7, &big_short)).unwrap();
    assert_eq!(
        p.a.am_short(ep, 3, 0, &vec![0; attr.am.max_short + 1]),
        Err(Status::InvalidParam)
    );
    assert_eq!(p.a.am_short(ep, 64, 0, b""), Err(Status::InvalidParam));
    let bc = pattern(2, 1000);
    let n = p
        .retry(|a| {
            a.am_bcopy(ep, 4, &mut |b| {
                b[..bc.len()].copy_from_slice(&bc);
                bc.len()
            })
        })
        .unwrap();
    assert_eq!(n, 1000);
    let max_bc = pattern(3, attr.am.max_bcopy);
    p.retry(|a| {
        a.am_bcopy(ep, 4, &mut |b| {
            assert_eq!(b.len(), max_bc.len());
            b.copy_from_slice(&max_bc);
            b.len()
        })
    })
    .unwrap();
    let hdr = *b"zc-head!";
    let body = pattern(4, attr.am.max_zcopy);
    let iov: Vec<Iov> = body
        .chunks(body.len() / 3 + 1)
        .map(Iov::from_slice)
        .collect();
    // SAFETY: body outlives the operation (we wait for its completion).
    let d = p
        .retry(|a| unsafe { a.am_zcopy(ep, 5, &hdr, &iov, 77) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 77), Status::Ok);
    // SAFETY: as above; too many entries and too much data are refused up front.
    unsafe {
        let many = vec![Iov::from_slice(&body[..1]); attr.am.max_iov + 1];
        assert_eq!(
            p.a.am_zcopy(ep, 5, &hdr, &many, 1),
            Err(Status::InvalidParam)
        );
        let over = [Iov::from_slice(&body), Iov::from_slice(&body[..1])];
        assert_eq!(
            p.a.am_zcopy(ep, 5, &hdr, &over, 1),
            Err(Status::InvalidParam)
        );
    }
    p.until("five messages", |p| p.eb.ams.len() >= 5);
    let ams = &p.eb.ams;
    assert_eq!(ams.len(), 5);
    assert_eq!(ams[0].0, 3);
    assert_eq!(ams[0].1[..8], 0x1122_3344_5566_7788u64.to_le_bytes());
    assert_eq!(&ams[0].1[8..], b"hello");
    assert_eq!(ams[1].1[..8], 7u64.to_le_bytes());
    assert_eq!(ams[1].1[8..], big_short[..]);
    assert_eq!((ams[2].0, &ams[2].1), (4, &bc));
    assert_eq!(ams[3].1, max_bc);
    assert_eq!(ams[4].0, 5);
    assert_eq!(&ams[4].1[..8], &hdr);
    assert_eq!(ams[4].1[8..], body[..]);
    assert!(p.ea.errors.is_empty() && p.eb.errors.is_empty());
}

#[test]
fn many_small_messages_keep_order() {
    let mut p = Pair::new();
    let ep = p.ep;
    let n = 20_000u32;
    for i in 0..n {
        let pl = i.to_le_bytes();
        p.retry(|a| a.am_short(ep, 1, u64::from(i), &pl)).unwrap();
        if i % 64 == 0 {
            p.progress();
        }
    }
    p.until("all messages", |p| p.eb.ams.len() == n as usize);
    for (i, (_, d)) in p.eb.ams.iter().enumerate() {
        assert_eq!(d[..8], (i as u64).to_le_bytes());
        assert_eq!(d[8..], (i as u32).to_le_bytes());
    }
}

#[test]
fn put_and_get_with_iovs_and_fragments() {
    let mut p = Pair::new();
    let ep = p.ep;
    let seg = p.a.seg;
    let frame = seg * wire::PUT_FRAME_SEGS;
    let mut region = vec![0u8; 4 * frame + 4096];
    let (mh, rk) = p.reg_at_b(&mut region);
    // A small put of three pieces.
    let src = pattern(9, 300);
    let iov: Vec<Iov> = src.chunks(100).map(Iov::from_slice).collect();
    // SAFETY: src outlives the operation (completion awaited).
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh.base + 10, &rk, 1) })
        .unwrap();
    assert_eq!(d, Done::Later);
    assert_eq!(p.wait_comp(d, 1), Status::Ok);
    assert_eq!(region[10..310], src[..]);
    assert_eq!(region[9], 0);
    assert_eq!(region[310], 0);
    // A put over several frames, with entries straddling frame boundaries.
    let big = pattern(5, 3 * frame + 777);
    let iov: Vec<Iov> = big.chunks(frame / 3 + 11).map(Iov::from_slice).collect();
    // SAFETY: big outlives the operation (completion awaited).
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh.base + 1000, &rk, 2) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 2), Status::Ok);
    assert_eq!(region[1000..1000 + big.len()], big[..]);
    // Read it back through a get of many uneven entries.
    let mut dst = vec![0u8; big.len()];
    let mut iov = Vec::new();
    let mut rest = dst.as_mut_slice();
    let mut k = 0;
    while !rest.is_empty() {
        let l = (1 + (k * 7919) % 5000).min(rest.len());
        let (x, y) = rest.split_at_mut(l);
        iov.push(Iov::from_mut_slice(x));
        rest = y;
        k += 1;
    }
    // SAFETY: dst outlives the operation and is untouched until completion.
    let d = p
        .retry(|a| unsafe { a.get_zcopy(ep, &iov, mh.base + 1000, &rk, 3) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 3), Status::Ok);
    assert_eq!(dst, big);
    // Zero-length put and get complete too.
    // SAFETY: empty lists.
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &[], mh.base, &rk, 4) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 4), Status::Ok);
    // SAFETY: empty lists.
    let d = p
        .retry(|a| unsafe { a.get_zcopy(ep, &[], mh.base, &rk, 5) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 5), Status::Ok);
    b_dereg(&p, &mh);
}

#[test]
fn large_puts_are_read_straight_into_their_target() {
    let mut p = Pair::new();
    let ep = p.ep;
    let n = 8 << 20;
    let mut region = vec![0u8; n + 64];
    let (mh, rk) = p.reg_at_b(&mut region);
    for (k, off) in [0usize, 1, 4095].into_iter().enumerate() {
        let src = pattern(k as u8 + 3, n - off);
        // Uneven entries, so fragments and entries do not line up.
        let iov: Vec<Iov> = src.chunks(100_003).map(Iov::from_slice).collect();
        // SAFETY: src outlives the operation (completion awaited).
        let d = p
            .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh.base + off as u64, &rk, k as u64) })
            .unwrap();
        assert_eq!(p.wait_comp(d, k as u64), Status::Ok);
        assert_eq!(region[off..off + src.len()], src[..], "put {k}");
        assert!(region[off + src.len()..].iter().all(|&b| b == 0));
    }
    // Most of the payload skipped the receive buffer (what arrived with the headers of a
    // frame did not).
    let direct = p.b.sh.direct_bytes;
    assert!(
        direct > (3 * n as u64) / 2,
        "only {direct} of {} bytes were read into place",
        3 * n
    );
    b_dereg(&p, &mh);
}

#[test]
fn a_put_whose_target_goes_away_midway_is_refused_and_the_connection_lives_on() {
    let mut p = Pair::new();
    let ep = p.ep;
    let n = 32 << 20;
    let mut region = vec![0u8; n];
    let (mh, rk) = p.reg_at_b(&mut region);
    let src = pattern(7, n);
    let iov = [Iov::from_slice(&src)];
    // SAFETY: src outlives the operation (completion awaited).
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh.base, &rk, 1) })
        .unwrap();
    p.until("a put read into place", |p| {
        p.b.conns.iter().any(|(_, c)| c.direct.is_some())
    });
    b_dereg(&p, &mh);
    assert_eq!(p.wait_comp(d, 1), Status::InvalidParam);
    // The target was written in order up to the deregistration, and not after it.
    let landed = region.iter().zip(&src).take_while(|(a, b)| a == b).count();
    assert!(
        landed < n,
        "the whole put landed despite the deregistration"
    );
    assert!(
        region[landed..].iter().all(|&b| b == 0),
        "bytes landed after the deregistration"
    );
    // A long put under a key the target never gave out is read, dropped and refused.
    let bogus = RemoteKey {
        key: rk.key + 999,
        ..rk
    };
    let iov = [Iov::from_slice(&src)];
    // SAFETY: src outlives the operation.
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh.base, &bogus, 3) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 3), Status::InvalidParam);
    // The connection carries on: a put into another registration arrives whole.
    let mut other = vec![0u8; 1 << 20];
    let (mh2, rk2) = p.reg_at_b(&mut other);
    let src2 = pattern(8, other.len());
    let iov = [Iov::from_slice(&src2)];
    // SAFETY: src2 outlives the operation.
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh2.base, &rk2, 2) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 2), Status::Ok);
    assert_eq!(other, src2);
    assert!(p.ea.errors.is_empty() && p.eb.errors.is_empty());
    b_dereg(&p, &mh2);
}

fn b_dereg(p: &Pair, mh: &MemH) {
    p.b.md().mem_dereg(mh).unwrap();
}

#[test]
fn out_of_bounds_put_and_get_are_refused() {
    let mut p = Pair::new();
    let ep = p.ep;
    let mut region = vec![0u8; 4096];
    let (mh, rk) = p.reg_at_b(&mut region);
    let src = vec![0xeeu8; 64];
    let iov = [Iov::from_slice(&src)];
    // The initiator refuses what its remote key does not cover.
    // SAFETY: src outlives every call below (completions awaited).
    unsafe {
        assert_eq!(
            p.a.put_zcopy(ep, &iov, mh.base + 4096 - 32, &rk, 1),
            Err(Status::InvalidParam)
        );
        let mut d = [0u8; 64];
        let giov = [Iov::from_mut_slice(&mut d)];
        assert_eq!(
            p.a.get_zcopy(ep, &giov, mh.base - 1, &rk, 1),
            Err(Status::InvalidParam)
        );
    }
    // A forged key that claims more than was registered: the target refuses.
    let forged = RemoteKey {
        len: rk.len + 1_000_000,
        ..rk
    };
    // SAFETY: src outlives the operation.
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh.base + 4096 - 32, &forged, 2) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 2), Status::InvalidParam);
    assert!(region.iter().all(|&b| b == 0), "refused put wrote");
    // An unknown registration id.
    let bogus = RemoteKey {
        key: rk.key + 12345,
        ..rk
    };
    let mut dst = vec![0x55u8; 64];
    let giov = [Iov::from_mut_slice(&mut dst)];
    // SAFETY: dst outlives the operation.
    let d = p
        .retry(|a| unsafe { a.get_zcopy(ep, &giov, mh.base, &bogus, 3) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 3), Status::InvalidParam);
    assert!(dst.iter().all(|&b| b == 0x55), "refused get wrote");
    // A multi-fragment get whose second half is out of range fails as a whole, and the
    // valid part does not leak past the refusal.
    let seg = p.a.seg;
    let mut region2 = vec![7u8; seg + 100];
    let (mh2, rk2) = p.reg_at_b(&mut region2);
    let wide = RemoteKey {
        len: rk2.len * 4,
        ..rk2
    };
    let mut dst = vec![0u8; 2 * seg];
    let giov = [Iov::from_mut_slice(&mut dst)];
    // SAFETY: dst outlives the operation.
    let d = p
        .retry(|a| unsafe { a.get_zcopy(ep, &giov, mh2.base, &wide, 4) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 4), Status::InvalidParam);
    assert!(dst[seg..].iter().all(|&b| b == 0));
    // The endpoint keeps working after refusals.
    let ok = pattern(1, 32);
    let iov = [Iov::from_slice(&ok)];
    // SAFETY: ok outlives the operation.
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh.base, &rk, 5) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 5), Status::Ok);
    assert_eq!(region[..32], ok[..]);
    assert!(p.ea.errors.is_empty());
    b_dereg(&p, &mh);
    b_dereg(&p, &mh2);
}

#[test]
fn flush_completes_after_outstanding_operations() {
    let mut p = Pair::new();
    let ep = p.ep;
    p.until("connection up", |p| txq(&p.a, ep).is_empty());
    assert_eq!(p.a.flush(Some(ep), 1), Ok(Done::Now));
    assert_eq!(p.a.flush(None, 2), Ok(Done::Now));
    let mut region = vec![0u8; 256];
    let (mh, rk) = p.reg_at_b(&mut region);
    let src = pattern(3, 256);
    let iov = [Iov::from_slice(&src)];
    // SAFETY: src outlives the operation.
    let d = unsafe { p.a.put_zcopy(ep, &iov, mh.base, &rk, 10) }.unwrap();
    assert_eq!(d, Done::Later);
    assert_eq!(p.a.flush(Some(ep), 11), Ok(Done::Later));
    assert_eq!(p.a.flush(None, 12), Ok(Done::Later));
    p.until("flushes", |p| {
        p.ea.comp(11).is_some() && p.ea.comp(12).is_some()
    });
    // The put completed before (or with) the flushes that followed it.
    let pos = |c| p.ea.comps.iter().position(|(x, _)| *x == c).unwrap();
    assert!(pos(10) < pos(11) && pos(10) < pos(12));
    assert!(p.ea.comps.iter().all(|(_, s)| *s == Status::Ok));
    assert_eq!(region, src);
    assert_eq!(p.a.flush(Some(ep), 13), Ok(Done::Now));
    assert_eq!(p.a.flush(Some(EpId(999)), 14), Err(Status::InvalidParam));
    b_dereg(&p, &mh);
}

/// Sends max-size bcopy messages while b does not progress, until the endpoint pushes back.
fn fill(p: &mut Pair) -> usize {
    let ep = p.ep;
    let mut sent = 0;
    let start = Instant::now();
    loop {
        match p.a.am_bcopy(ep, 2, &mut |b| {
            b.fill(0xab);
            b.len()
        }) {
            Ok(_) => sent += 1,
            Err(Status::NoResource) => return sent,
            Err(e) => panic!("am_bcopy: {e}"),
        }
        p.a.progress(&mut p.ea);
        assert!(start.elapsed() < DEADLINE, "never ran out of resources");
    }
}

#[test]
fn pending_queue_wakes_when_the_socket_drains() {
    let mut p = Pair::new();
    let ep = p.ep;
    assert_eq!(p.a.pending_add(ep, 1), Err(Status::Busy));
    let sent = fill(&mut p);
    assert!(sent > 0);
    assert_eq!(p.a.am_short(ep, 1, 0, b""), Err(Status::NoResource));
    p.a.pending_add(ep, 7).unwrap();
    p.a.pending_add(ep, 8).unwrap();
    for _ in 0..100 {
        p.a.progress(&mut p.ea);
    }
    assert!(p.ea.pending.is_empty(), "woken while still full");
    assert_eq!(p.a.arm(), Ok(()));
    p.until("pending callbacks", |p| p.ea.pending.len() == 2);
    assert_eq!(p.ea.pending, vec![(ep, 7), (ep, 8)]);
    p.retry(|a| a.am_short(ep, 1, 0, b"after")).unwrap();
    p.until("every message", |p| p.eb.ams.len() == sent + 1);
    assert_eq!(p.eb.ams[sent].1[8..], *b"after");
    // Purge hands back tokens in order.
    fill(&mut p);
    p.a.pending_add(ep, 20).unwrap();
    p.a.pending_add(ep, 21).unwrap();
    assert_eq!(p.a.pending_purge(ep), vec![20, 21]);
    assert_eq!(p.a.sh.pending_total, 0);
}

#[test]
fn am_zcopy_completes_later_when_the_socket_is_full() {
    let mut p = Pair::new();
    let ep = p.ep;
    // Fill the socket but not the queue: stop as soon as something is queued.
    let start = Instant::now();
    let mut sent = 0;
    p.retry(|a| a.am_short(ep, 1, 0, b"")).unwrap();
    p.until("connection up", |p| p.eb.ams.len() == 1);
    while txq(&p.a, ep).is_empty() {
        p.a.am_bcopy(ep, 2, &mut |b| {
            b.fill(1);
            b.len()
        })
        .unwrap();
        sent += 1;
        assert!(start.elapsed() < DEADLINE);
    }
    let body = pattern(8, 5000);
    let iov = [
        Iov::from_slice(&body[..2000]),
        Iov::from_slice(&body[2000..]),
    ];
    // SAFETY: body outlives the operation (completion awaited).
    let d = unsafe { p.a.am_zcopy(ep, 6, b"hdr", &iov, 42) }.unwrap();
    assert_eq!(d, Done::Later);
    assert_eq!(p.wait_comp(d, 42), Status::Ok);
    p.until("every message", |p| p.eb.ams.len() == sent + 2);
    let last = &p.eb.ams[sent + 1];
    assert_eq!(last.0, 6);
    assert_eq!(&last.1[..3], b"hdr");
    assert_eq!(last.1[3..], body[..]);
}

#[test]
fn peer_reset_fails_outstanding_operations() {
    let mut p = Pair::new();
    let ep = p.ep;
    let mut region = vec![0u8; 1024];
    let (mh, rk) = p.reg_at_b(&mut region);
    // One round trip so both sides are connected and b has accepted.
    p.retry(|a| a.am_short(ep, 1, 0, b"x")).unwrap();
    p.until("first message", |p| p.eb.ams.len() == 1);
    let src = pattern(1, 1024);
    let iov = [Iov::from_slice(&src)];
    // Outstanding at the moment b goes away: a put, a get and a flush.
    // SAFETY: src outlives the operation.
    let d = unsafe { p.a.put_zcopy(ep, &iov, mh.base, &rk, 1) }.unwrap();
    assert_eq!(d, Done::Later);
    let mut dst = vec![0u8; 64];
    let giov = [Iov::from_mut_slice(&mut dst)];
    // SAFETY: dst outlives the operation.
    let d = unsafe { p.a.get_zcopy(ep, &giov, mh.base, &rk, 2) }.unwrap();
    assert_eq!(d, Done::Later);
    assert_eq!(p.a.flush(Some(ep), 3), Ok(Done::Later));
    let Pair {
        mut a, b, mut ea, ..
    } = p;
    drop(b);
    let start = Instant::now();
    while ea.errors.is_empty() || ea.comps.len() < 3 {
        a.progress(&mut ea);
        assert!(
            start.elapsed() < DEADLINE,
            "no error after the peer went away"
        );
    }
    for _ in 0..10 {
        a.progress(&mut ea);
    }
    assert_eq!(ea.errors, vec![(ep, Status::ConnectionReset)]);
    for c in 1..=3 {
        assert_eq!(ea.comp(c), Some(Status::ConnectionReset), "op {c}");
    }
    assert_eq!(ea.comps.len(), 3);
    assert_eq!(a.am_short(ep, 1, 0, b"x"), Err(Status::ConnectionReset));
    assert_eq!(a.am_bcopy(ep, 1, &mut |_| 0), Err(Status::ConnectionReset));
    assert_eq!(a.flush(Some(ep), 4), Err(Status::ConnectionReset));
    // Pending senders learn of the failure by retrying.
    assert_eq!(a.pending_add(ep, 5), Err(Status::Busy));
    a.ep_destroy(ep);
    assert_eq!(a.am_short(ep, 1, 0, b"x"), Err(Status::InvalidParam));
    // The registration table is per process: b's registration outlives b.
    TcpMd::new().mem_dereg(&mh).unwrap();
    drop(region);
}

#[test]
fn sends_to_a_dead_peer_fail_the_endpoint() {
    let mut p = Pair::new();
    let ep = p.ep;
    p.retry(|a| a.am_short(ep, 1, 0, b"x")).unwrap();
    p.until("first message", |p| p.eb.ams.len() == 1);
    let Pair {
        mut a, b, mut ea, ..
    } = p;
    drop(b);
    let start = Instant::now();
    let err = loop {
        match a.am_bcopy(ep, 1, &mut |b| {
            b[..100].fill(3);
            100
        }) {
            Ok(_) | Err(Status::NoResource) => {}
            Err(e) => break e,
        }
        a.progress(&mut ea);
        assert!(start.elapsed() < DEADLINE, "sends never failed");
    };
    assert_eq!(err, Status::ConnectionReset);
    a.progress(&mut ea);
    assert_eq!(ea.errors, vec![(ep, Status::ConnectionReset)]);
}

#[test]
fn ep_destroy_cancels_outstanding_operations() {
    let mut p = Pair::new();
    let ep = p.ep;
    let mut region = vec![0u8; 64];
    let (mh, rk) = p.reg_at_b(&mut region);
    let src = [1u8; 64];
    let iov = [Iov::from_slice(&src)];
    // SAFETY: src outlives the operation.
    unsafe { p.a.put_zcopy(ep, &iov, mh.base, &rk, 9) }.unwrap();
    p.a.ep_destroy(ep);
    p.a.progress(&mut p.ea);
    assert_eq!(p.ea.comps, vec![(9, Status::Canceled)]);
    assert!(p.ea.errors.is_empty());
    p.a.ep_destroy(ep);
    b_dereg(&p, &mh);
}

#[test]
fn event_fd_wakes_a_sleeping_receiver() {
    let mut p = Pair::new();
    let ep = p.ep;
    p.retry(|a| a.am_short(ep, 1, 0, b"warm")).unwrap();
    p.until("first message", |p| p.eb.ams.len() == 1);
    let fd = p.b.event_fd().unwrap();
    let start = Instant::now();
    while p.b.arm() == Err(Status::Busy) {
        p.progress();
        assert!(start.elapsed() < DEADLINE);
    }
    // Nothing is waiting: the descriptor does not wake us.
    for _ in 0..3 {
        p.b.progress(&mut p.eb);
    }
    assert!(!ucs::wakeup::wait_readable(fd, 50).unwrap());
    p.a.am_short(ep, 1, 0, b"wake").unwrap();
    assert!(ucs::wakeup::wait_readable(fd, 10_000).unwrap());
    p.until("the message", |p| p.eb.ams.len() == 2);
    assert_eq!(p.eb.ams[1].1[8..], *b"wake");
}

/// Connects a raw socket to `iface`, writes `bytes`, and checks that `iface` closes the
/// connection (while still serving others).
fn expect_closed_after(bytes: &[u8]) {
    let mut b = open_lo();
    let mut eb = Ev::default();
    let mut s = TcpStream::connect(("127.0.0.1", b.port())).unwrap();
    s.write_all(bytes).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
    let start = Instant::now();
    loop {
        b.progress(&mut eb);
        let mut x = [0u8; 16];
        match s.read(&mut x) {
            Ok(0) => break,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Ok(_) => panic!("unexpected answer"),
            Err(_) => {}
        }
        assert!(
            start.elapsed() < DEADLINE,
            "malformed stream was not closed"
        );
    }
    assert!(eb.ams.is_empty(), "{:?}", eb.ams);
    assert_eq!(b.conns.len(), 0);
    // The interface still works.
    let mut p = Pair::with(open_lo(), b);
    let ep = p.ep;
    p.retry(|a| a.am_short(ep, 1, 5, b"ok")).unwrap();
    p.until("a good message", |p| p.eb.ams.len() == 1);
}

fn fake_iface_addr(port: u16, seg: usize) -> Vec<u8> {
    Writer::default().u16(port).u32(seg as u32).u64(1).buf
}

fn am_frame(id: u8, len: u32, body: &[u8]) -> Vec<u8> {
    let mut v = vec![2, id, 0, 0];
    v.extend_from_slice(&len.to_le_bytes());
    v.extend_from_slice(body);
    v
}

#[test]
fn malformed_streams_close_the_connection() {
    let mut bad_magic = wire::hello(&some_id());
    bad_magic[8] = b'X';
    expect_closed_after(&bad_magic);
    // No hello at all.
    expect_closed_after(&am_frame(1, 1, b"a"));
    let hello = wire::hello(&some_id());
    // AM id out of range.
    expect_closed_after(&[hello.clone(), am_frame(64, 1, b"a")].concat());
    // A length over the limit, refused from the header alone.
    expect_closed_after(&[hello.clone(), am_frame(1, u32::MAX, b"")].concat());
    // An unknown type, and an answer type on a request stream.
    expect_closed_after(&[hello.clone(), vec![99, 0, 0, 0, 0, 0, 0, 0]].concat());
    expect_closed_after(&[hello.clone(), vec![4, 0, 0, 0, 8, 0, 0, 0], vec![0; 8]].concat());
    // A second hello.
    expect_closed_after(&[hello.clone(), hello.clone()].concat());
}

#[test]
fn random_garbage_never_breaks_an_interface() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut b = open_lo();
    let mut eb = Ev::default();
    for round in 0..40 {
        let mut s = TcpStream::connect(("127.0.0.1", b.port())).unwrap();
        let mut junk = vec![0u8; rng.gen_range(1..4000)];
        rng.fill(&mut junk[..]);
        if round % 2 == 0 {
            junk.splice(0..0, wire::hello(&some_id()));
        }
        let _ = s.write_all(&junk);
        for _ in 0..50 {
            b.progress(&mut eb);
        }
    }
    let mut p = Pair::with(open_lo(), b);
    let ep = p.ep;
    p.retry(|a| a.am_short(ep, 1, 5, b"ok")).unwrap();
    p.until("a good message", |p| {
        p.eb.ams.iter().any(|(_, d)| d[8..] == *b"ok")
    });
}

#[test]
fn a_peer_that_answers_garbage_fails_the_endpoint() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let mut a = open_lo();
    let mut ea = Ev::default();
    let ifa = fake_iface_addr(port, a.seg);
    let ep = a.ep_connect(&[127, 0, 0, 1], &ifa).unwrap();
    let (mut s, _) = l.accept().unwrap();
    // An answer to a request never made.
    let mut ack = [0u8; 16];
    wire::put_ack(&mut ack, 0, Status::Ok);
    s.write_all(&ack).unwrap();
    let start = Instant::now();
    while ea.errors.is_empty() {
        a.progress(&mut ea);
        assert!(start.elapsed() < DEADLINE);
    }
    assert_eq!(ea.errors, vec![(ep, Status::IoError)]);
    // What the peer received first is our hello, naming our interface.
    let mut h = [0u8; 32];
    s.read_exact(&mut h).unwrap();
    assert_eq!(h[..], wire::hello(&a.me)[..]);
}

#[test]
fn connecting_to_a_closed_port_fails() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let mut a = open_lo();
    let mut ea = Ev::default();
    let ifa = fake_iface_addr(port, a.seg);
    match a.ep_connect(&[127, 0, 0, 1], &ifa) {
        Err(st) => assert_eq!(st, Status::Unreachable),
        Ok(ep) => {
            let start = Instant::now();
            while ea.errors.is_empty() {
                a.progress(&mut ea);
                assert!(start.elapsed() < DEADLINE);
            }
            assert_eq!(ea.errors, vec![(ep, Status::Unreachable)]);
        }
    }
}

#[test]
fn both_directions_and_many_endpoints() {
    let mut a = open_lo();
    let mut b = open_lo();
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    let ab: Vec<EpId> = (0..4)
        .map(|_| a.ep_connect(b.device_address(), b.iface_address()).unwrap())
        .collect();
    let ba = b.ep_connect(a.device_address(), a.iface_address()).unwrap();
    for (k, &ep) in ab.iter().enumerate() {
        a.am_short(ep, k as u8, k as u64, b"ab").unwrap();
    }
    b.am_short(ba, 9, 9, b"ba").unwrap();
    let start = Instant::now();
    while eb.ams.len() < 4 || ea.ams.is_empty() {
        a.progress(&mut ea);
        b.progress(&mut eb);
        assert!(start.elapsed() < DEADLINE);
    }
    let mut ids: Vec<u8> = eb.ams.iter().map(|(id, _)| *id).collect();
    ids.sort_unstable();
    assert_eq!(ids, vec![0, 1, 2, 3]);
    assert_eq!(ea.ams[0].0, 9);
    assert_eq!(a.flush(None, 1), Ok(Done::Now));
}

/// Progresses both until `f` holds.
fn drive(
    a: &mut TcpIface,
    ea: &mut Ev,
    b: &mut TcpIface,
    eb: &mut Ev,
    what: &str,
    f: impl Fn(&Ev, &Ev) -> bool,
) {
    let start = Instant::now();
    while !f(ea, eb) {
        a.progress(ea);
        b.progress(eb);
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
    }
}

fn settle(a: &mut TcpIface, ea: &mut Ev, b: &mut TcpIface, eb: &mut Ev) {
    for _ in 0..200 {
        a.progress(ea);
        b.progress(eb);
    }
}

#[test]
fn ping_pong_shares_one_connection() {
    let (mut a, mut b) = (open_lo(), open_lo());
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    // Both connect before either has seen the other.
    let ab = a.ep_connect(b.device_address(), b.iface_address()).unwrap();
    let ba = b.ep_connect(a.device_address(), a.iface_address()).unwrap();
    assert_eq!((a.conns.len(), b.conns.len()), (1, 1));
    for i in 0..20u64 {
        a.am_short(ab, 1, i, b"ping").unwrap();
        drive(&mut a, &mut ea, &mut b, &mut eb, "ping", |_, eb| {
            eb.ams.len() == i as usize + 1
        });
        b.am_short(ba, 2, i, b"pong").unwrap();
        drive(&mut a, &mut ea, &mut b, &mut eb, "pong", |ea, _| {
            ea.ams.len() == i as usize + 1
        });
    }
    settle(&mut a, &mut ea, &mut b, &mut eb);
    // b answered on the connection a sent on and closed its own.
    assert_eq!((a.conns.len(), b.conns.len()), (1, 1));
    assert!(ea.errors.is_empty() && eb.errors.is_empty());
    assert_eq!(ea.ams[19].1[8..], *b"pong");
}

#[test]
fn simultaneous_first_sends_settle_on_one_connection() {
    let (mut a, mut b) = (open_lo(), open_lo());
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    let ab = a.ep_connect(b.device_address(), b.iface_address()).unwrap();
    let ba = b.ep_connect(a.device_address(), a.iface_address()).unwrap();
    let (ida, idb) = (a.me, b.me);
    let start = Instant::now();
    // Let both hellos arrive, so both sides see two connections when they first send.
    while !(a.peers.get(&idb).is_some_and(|p| p.acc.is_some())
        && b.peers.get(&ida).is_some_and(|p| p.acc.is_some()))
    {
        a.progress(&mut ea);
        b.progress(&mut eb);
        assert!(start.elapsed() < DEADLINE);
    }
    a.am_short(ab, 1, 1, b"from a").unwrap();
    b.am_short(ba, 1, 2, b"from b").unwrap();
    drive(&mut a, &mut ea, &mut b, &mut eb, "both", |ea, eb| {
        ea.ams.len() == 1 && eb.ams.len() == 1
    });
    settle(&mut a, &mut ea, &mut b, &mut eb);
    assert_eq!((a.conns.len(), b.conns.len()), (1, 1));
    for k in 0..100u64 {
        a.am_short(ab, 1, k, b"a").unwrap();
        b.am_short(ba, 1, k, b"b").unwrap();
    }
    drive(&mut a, &mut ea, &mut b, &mut eb, "all", |ea, eb| {
        ea.ams.len() == 101 && eb.ams.len() == 101
    });
    for (k, (_, d)) in eb.ams[1..].iter().enumerate() {
        assert_eq!(d[..8], (k as u64).to_le_bytes());
    }
    assert!(ea.errors.is_empty() && eb.errors.is_empty());
}

#[test]
fn endpoints_come_and_go_on_a_shared_connection() {
    let (mut a, mut b) = (open_lo(), open_lo());
    let (mut ea, mut eb) = (Ev::default(), Ev::default());
    let ab = a.ep_connect(b.device_address(), b.iface_address()).unwrap();
    a.am_short(ab, 1, 0, b"hi").unwrap();
    drive(&mut a, &mut ea, &mut b, &mut eb, "hi", |_, eb| {
        eb.ams.len() == 1
    });
    // b connects back after hearing from a: it shares a's connection at once.
    let ba = b.ep_connect(a.device_address(), a.iface_address()).unwrap();
    assert_eq!(b.conns.len(), 1);
    b.am_short(ba, 1, 0, b"back").unwrap();
    drive(&mut a, &mut ea, &mut b, &mut eb, "back", |ea, _| {
        ea.ams.len() == 1
    });
    // Destroying b's endpoint leaves a's traffic alone, and a new one reuses the connection.
    b.ep_destroy(ba);
    a.am_short(ab, 1, 1, b"still").unwrap();
    drive(&mut a, &mut ea, &mut b, &mut eb, "still", |_, eb| {
        eb.ams.len() == 2
    });
    let ba2 = b.ep_connect(a.device_address(), a.iface_address()).unwrap();
    // Destroying a's endpoint leaves b's new one working.
    a.ep_destroy(ab);
    b.am_short(ba2, 1, 0, b"again").unwrap();
    drive(&mut a, &mut ea, &mut b, &mut eb, "again", |ea, _| {
        ea.ams.len() == 2
    });
    assert_eq!((a.conns.len(), b.conns.len()), (1, 1));
    assert!(ea.errors.is_empty() && eb.errors.is_empty());
}

#[test]
fn an_interface_can_talk_to_itself() {
    let mut a = open_lo();
    let mut ea = Ev::default();
    let (dev, ifa) = (a.device_address().to_vec(), a.iface_address().to_vec());
    let ep = a.ep_connect(&dev, &ifa).unwrap();
    a.am_short(ep, 3, 9, b"me").unwrap();
    let mut region = vec![0u8; 128];
    // SAFETY: region outlives its registration (deregistered below).
    let mh = unsafe { a.md().mem_reg(region.as_mut_ptr(), region.len()) }.unwrap();
    let rk = a.md().rkey_unpack(&a.md().mkey_pack(&mh)).unwrap();
    let src = pattern(4, 128);
    let iov = [Iov::from_slice(&src)];
    // SAFETY: src outlives the operation (completion awaited).
    unsafe { a.put_zcopy(ep, &iov, mh.base, &rk, 1) }.unwrap();
    let start = Instant::now();
    while ea.ams.is_empty() || ea.comp(1).is_none() {
        a.progress(&mut ea);
        assert!(start.elapsed() < DEADLINE);
    }
    assert_eq!(ea.ams[0].1[8..], *b"me");
    assert_eq!(ea.comp(1), Some(Status::Ok));
    assert_eq!(region, src);
    a.md().mem_dereg(&mh).unwrap();
}

#[test]
fn large_get_is_requested_a_window_at_a_time() {
    let mut p = Pair::new();
    let ep = p.ep;
    let size = 3 * GET_WINDOW + 12345;
    let mut region = pattern(6, size);
    let (mh, rk) = p.reg_at_b(&mut region);
    let mut dst = vec![0u8; size];
    let (x, y) = dst.split_at_mut(size / 3);
    let iov = [Iov::from_mut_slice(x), Iov::from_mut_slice(y)];
    // SAFETY: dst outlives the operation (completion awaited).
    let d = p
        .retry(|a| unsafe { a.get_zcopy(ep, &iov, mh.base, &rk, 1) })
        .unwrap();
    // Later operations wait until the whole get is requested.
    assert_eq!(p.a.am_short(ep, 1, 0, b""), Err(Status::NoResource));
    let ci = p.a.eps[ep.index()].conn;
    assert!(p.a.conns[ci].get_inflight <= GET_WINDOW);
    assert_eq!(p.wait_comp(d, 1), Status::Ok);
    assert!(dst == region, "get data differs");
    assert_eq!(p.a.conns[ci].get_inflight, 0);
    // And a put as large, read back.
    let src = pattern(7, size);
    let iov = [Iov::from_slice(&src)];
    // SAFETY: src outlives the operation (completion awaited).
    let d = p
        .retry(|a| unsafe { a.put_zcopy(ep, &iov, mh.base, &rk, 2) })
        .unwrap();
    assert_eq!(p.wait_comp(d, 2), Status::Ok);
    assert!(region == src, "put data differs");
    p.b.md().mem_dereg(&mh).unwrap();
}

#[test]
fn a_peer_that_never_reads_its_answers_is_disconnected() {
    let mut b = open_lo();
    let mut eb = Ev::default();
    let seg = b.seg;
    let mut region = vec![1u8; seg];
    // SAFETY: region outlives its registration (deregistered below).
    let mh = unsafe { b.md().mem_reg(region.as_mut_ptr(), region.len()) }.unwrap();
    let mut s = TcpStream::connect(("127.0.0.1", b.port())).unwrap();
    let mut reqs = wire::hello(&some_id());
    let n = TX_HARD_CAP / seg + 64;
    for k in 0..n {
        let mut g = [0u8; 32];
        wire::get_req(&mut g, k as u32, seg as u32, mh.key, mh.base);
        reqs.extend_from_slice(&g);
    }
    s.write_all(&reqs).unwrap();
    let start = Instant::now();
    loop {
        b.progress(&mut eb);
        if b.conns.is_empty() && start.elapsed() > Duration::from_millis(10) {
            break;
        }
        if let Some(c) = b.conns.iter().next() {
            // Never more than one answer past the cap.
            assert!(c.1.tx.owned() <= TX_HARD_CAP + 2 * seg);
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the connection was never closed"
        );
    }
    b.md().mem_dereg(&mh).unwrap();
    drop(region);
}

/// Keepalive is on for every connection, with the configured timing, so a peer host that
/// vanishes without a reset is still detected (the probes themselves are the kernel's);
/// TCP_USER_TIMEOUT is left off, since it would also end a connection whose peer is alive
/// but not reading (`a_peer_that_does_not_read_is_not_taken_for_dead`).
#[test]
fn connections_carry_keepalive_and_no_user_timeout() {
    use std::os::fd::AsRawFd;
    let mut p = Pair::new();
    let payload = [1u8; 8];
    let ep = p.ep;
    p.retry(|i| i.am_short(ep, 1, 0, &payload)).unwrap();
    p.until("the accepted connection", |p| !p.b.conns.is_empty());
    for (name, i) in [("connecting", &p.a), ("accepting", &p.b)] {
        for (_, c) in i.conns.iter() {
            let fd = c.fd.as_raw_fd();
            let get = |l, n| sock::get_int_opt(fd, l, n).unwrap();
            assert_eq!(get(libc::SOL_SOCKET, libc::SO_KEEPALIVE), 1, "{name}");
            assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE), 10, "{name}");
            assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL), 2, "{name}");
            assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_KEEPCNT), 3, "{name}");
            assert_eq!(get(libc::IPPROTO_TCP, libc::TCP_USER_TIMEOUT), 0, "{name}");
        }
    }
    assert_eq!(
        p.a.silence.as_ref().map(|s| s.timeout_ns),
        Some(6_000_000_000),
        "no acknowledgment for KEEPINTVL x KEEPCNT while data waits"
    );
    let off = cfg_with(&[("TCP_KEEPIDLE", "inf")]);
    let mut q = Pair::with(
        TcpIface::open(&off, "lo").unwrap(),
        TcpIface::open(&off, "lo").unwrap(),
    );
    let ep = q.ep;
    q.retry(|i| i.am_short(ep, 1, 0, &payload)).unwrap();
    for (_, c) in q.a.conns.iter() {
        let fd = c.fd.as_raw_fd();
        assert_eq!(
            sock::get_int_opt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE).unwrap(),
            0
        );
    }
    assert!(
        q.a.silence.is_none(),
        "'inf' turns the dead-peer check off too"
    );
}

/// Dead-peer timing for the tests below: keepalive after 1 s idle, probes 1 s apart, two
/// of them; so an idle peer is given up after about 3 s, and one that leaves data
/// unacknowledged after 2 s (KEEPINTVL x KEEPCNT); checked every 20 ms.
fn quick_dead_peer_cfg() -> Config {
    cfg_with(&[
        ("TCP_KEEPIDLE", "1s"),
        ("TCP_KEEPINTVL", "1s"),
        ("TCP_KEEPCNT", "2"),
        ("ERROR_CHECK_INTERVAL", "20ms"),
    ])
}

/// A peer whose process does not read for longer than the dead-peer timeout, while we
/// keep its socket full (its window closed, the kernel probing it), is alive: its kernel
/// answers the probes, and the connection stays. (With TCP_USER_TIMEOUT at the same 3 s,
/// Linux 5.11 and later end such a connection.) Then it reads, and gets every message.
#[test]
fn a_peer_that_does_not_read_is_not_taken_for_dead() {
    use std::os::fd::AsRawFd;
    let cfg = quick_dead_peer_cfg();
    let mut p = Pair::with(
        TcpIface::open(&cfg, "lo").unwrap(),
        TcpIface::open(&cfg, "lo").unwrap(),
    );
    let ep = p.ep;
    let payload = vec![7u8; 4000];
    // One message through, so that the connection is up and b knows it.
    p.retry(|i| i.am_short(ep, 2, 0, &payload)).unwrap();
    p.until("the first message", |p| p.eb.ams.len() == 1);
    // Fill the sockets while b does not progress.
    let mut sent = 1;
    let start = Instant::now();
    loop {
        match p.a.am_short(ep, 2, sent, &payload) {
            Ok(()) => sent += 1,
            Err(Status::NoResource) => break,
            Err(e) => panic!("am_short: {e}"),
        }
        p.a.progress(&mut p.ea);
        assert!(start.elapsed() < DEADLINE, "the sockets never filled");
    }
    // b stays out for 4 s, twice the timeout and more than the old user timeout.
    let hold = Instant::now();
    let mut closed_window = false;
    while hold.elapsed() < Duration::from_secs(4) {
        p.a.progress(&mut p.ea);
        std::thread::sleep(Duration::from_millis(1));
        if let Some((_, c)) = p.a.conns.iter().next() {
            closed_window |= sock::tcp_state(c.fd.as_raw_fd()).is_ok_and(|s| s.notsent > 0);
        }
    }
    assert!(
        closed_window,
        "the kernel never held unsent data: the window never closed"
    );
    assert!(p.ea.errors.is_empty(), "{:?}", p.ea.errors);
    p.until("every message", |p| p.eb.ams.len() as u64 == sent);
    assert!(p.ea.errors.is_empty() && p.eb.errors.is_empty());
    for (i, (id, data)) in p.eb.ams.iter().enumerate() {
        assert_eq!((*id, data.len()), (2, 8 + payload.len()), "message {i}");
        assert_eq!(u64::from_le_bytes(data[..8].try_into().unwrap()), i as u64);
    }
}

/// A peer host that stops answering (its link cut: no reset, no close) is found: over a
/// connection where data waits for it by the dead-peer check, after KEEPINTVL x KEEPCNT
/// (2 s) without an acknowledgment and not before; over an idle one by the kernel's
/// keepalive (about 3 s). Both endpoints fail with `EndpointTimeout`, and a send on them
/// fails at once. Needs `ip netns` (root); says SKIPPED otherwise.
#[test]
fn a_peer_host_that_stops_answering_is_found() {
    let net = match Netns::new() {
        Ok(n) => n,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: network namespaces cannot be made here ({e})"
            );
            return;
        }
    };
    let cfg = quick_dead_peer_cfg();
    let dev = net.dev;
    let b = net.run(1, || {
        [
            TcpIface::open(&cfg, dev).expect("tcp on the veth"),
            TcpIface::open(&cfg, dev).expect("tcp on the veth"),
        ]
    });
    // Everything on a's side, connecting included, happens inside a's namespace.
    let (busy_at, idle_at) = net.run(0, || {
        let [b1, b2] = b;
        let open = || TcpIface::open(&cfg, dev).expect("tcp on the veth");
        let mut busy = Pair::with(open(), b1);
        let mut idle = Pair::with(open(), b2);
        let payload = [3u8; 2000];
        for p in [&mut busy, &mut idle] {
            let ep = p.ep;
            p.retry(|i| i.am_short(ep, 4, 0, &payload)).unwrap();
            p.until("a message across the link", |p| p.eb.ams.len() == 1);
        }
        net.cut(1);
        let cut = Instant::now();
        // Data for the peer after the cut: it stays unacknowledged.
        let ep = busy.ep;
        busy.a.am_short(ep, 4, 1, &payload).unwrap();
        let (mut busy_at, mut idle_at) = (None, None);
        while busy_at.is_none() || idle_at.is_none() {
            busy.a.progress(&mut busy.ea);
            idle.a.progress(&mut idle.ea);
            if busy_at.is_none() && !busy.ea.errors.is_empty() {
                busy_at = Some(cut.elapsed());
            }
            if idle_at.is_none() && !idle.ea.errors.is_empty() {
                idle_at = Some(cut.elapsed());
            }
            assert!(
                cut.elapsed() < DEADLINE,
                "a peer behind a cut link was not found (busy: {busy_at:?}, idle: {idle_at:?})"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(busy.ea.errors, vec![(busy.ep, Status::EndpointTimeout)]);
        assert_eq!(idle.ea.errors, vec![(idle.ep, Status::EndpointTimeout)]);
        for p in [&mut busy, &mut idle] {
            let ep = p.ep;
            assert!(p.a.am_short(ep, 4, 2, &payload).is_err());
        }
        (busy_at.unwrap(), idle_at.unwrap())
    });
    let _ = writeln!(
        std::io::stderr(),
        "peer behind a cut link found after {busy_at:?} with data waiting, {idle_at:?} idle"
    );
    assert!(
        busy_at >= Duration::from_secs(2),
        "taken for dead before KEEPINTVL x KEEPCNT: {busy_at:?}"
    );
}
