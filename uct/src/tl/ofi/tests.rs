//! Deferred work through libfabric's `sockets` provider (the same `FI_QUEUE_WORK` call as
//! `cxi`, run in the provider's software), between two real processes. Skipped, with the
//! reason, where libfabric or its `sockets` provider is missing.

use super::*;
use crate::test_util::{hex, pattern, unhex};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

fn params() -> Params {
    Params {
        provider: Some("sockets".into()),
        node: Some("127.0.0.1".into()),
    }
}

/// The endpoint, or `None` after saying why the test is skipped.
fn open_or_skip(test: &str) -> Option<TriggeredEp> {
    match TriggeredEp::open(&params()) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("skipped: {test} (libfabric sockets provider: {e})");
            None
        }
    }
}

/// Polls until `done` has `n` operations, or panics after 10 s.
fn wait_done(t: &mut TriggeredEp, n: u64) -> Done {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let d = t.progress();
        if d.total() >= n {
            return d;
        }
        assert!(Instant::now() < until, "timed out: {d:?} of {n}");
        std::thread::sleep(Duration::from_micros(50));
    }
}

const NAME: &str = "tl::ofi::tests::deferred_tagged_messages_between_two_processes";
const SIZES: [usize; 3] = [8, 4096, 300 << 10];

/// The child: receives posted before anything arrives, released by its own trigger.
fn child() {
    let mut t = TriggeredEp::open(&params()).unwrap();
    let mut out = std::io::stdout();
    writeln!(out, "ADDR {}", hex(&t.address().unwrap())).unwrap();
    let mut bufs: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0u8; n]).collect();
    for (i, b) in bufs.iter_mut().enumerate() {
        // Tags 10, 11, 12 in the high bits, any low byte (the ignore mask).
        // SAFETY: the buffers live until the child exits, after the receives completed.
        unsafe {
            t.post_recv(1, b.as_mut_ptr(), b.len(), (10 + i as u64) << 8, 0xff)
                .unwrap()
        };
    }
    t.trigger_add(1).unwrap();
    let stdin = std::io::stdin();
    for line in stdin.lock().lines() {
        let line = line.unwrap();
        let f: Vec<&str> = line.split_whitespace().collect();
        match f[0] {
            "DONE" => writeln!(out, "DONE {}", t.progress().total()).unwrap(),
            "CHECK" => {
                let d = wait_done(&mut t, 3);
                assert_eq!(d.failed, 0);
                for (i, b) in bufs.iter().enumerate() {
                    assert_eq!(*b, pattern(SIZES[i], i as u8), "message {i}");
                }
                writeln!(out, "OK").unwrap();
            }
            _ => break,
        }
    }
}

struct Peer {
    child: Child,
    stdin: ChildStdin,
    out: BufReader<ChildStdout>,
}

impl Peer {
    fn ask(&mut self, cmd: &str) -> String {
        writeln!(self.stdin, "{cmd}").unwrap();
        let mut s = String::new();
        self.out.read_line(&mut s).unwrap();
        s.trim().to_string()
    }
}

#[test]
fn deferred_tagged_messages_between_two_processes() {
    if std::env::var_os("RUCX_OFI_CHILD").is_some() {
        child();
        return;
    }
    let Some(mut t) = open_or_skip("deferred tagged messages between two processes") else {
        return;
    };
    let mut c = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
        .env("RUCX_OFI_CHILD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut p = Peer {
        stdin: c.stdin.take().unwrap(),
        out: BufReader::new(c.stdout.take().unwrap()),
        child: c,
    };
    // The child's test harness prints its own words first, on the same line.
    let addr = loop {
        let mut line = String::new();
        assert!(p.out.read_line(&mut line).unwrap() > 0, "the child ended");
        if let Some(i) = line.find("ADDR ") {
            break unhex(line[i + 5..].trim());
        }
    };
    let peer = t.insert_peer(&addr).unwrap();
    let msgs: Vec<Vec<u8>> = SIZES
        .iter()
        .enumerate()
        .map(|(i, &n)| pattern(n, i as u8))
        .collect();
    // Two sends on the first release, one on the second.
    for (i, m) in msgs.iter().enumerate() {
        let th = if i < 2 { 1 } else { 2 };
        // SAFETY: `msgs` lives until the end of the test, after the sends completed.
        unsafe {
            t.post_send(th, peer, m.as_ptr(), m.len(), ((10 + i as u64) << 8) | 7)
                .unwrap()
        };
    }
    assert_eq!(t.posted(), 3);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(t.progress().total(), 0, "nothing runs before its trigger");
    assert_eq!(p.ask("DONE"), "DONE 0");

    t.trigger_add(1).unwrap();
    let d = wait_done(&mut t, 2);
    assert_eq!(d, Done { ok: 2, failed: 0 });
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        t.progress().total(),
        2,
        "the third send waits for the second release"
    );

    t.trigger_add(1).unwrap();
    assert_eq!(wait_done(&mut t, 3), Done { ok: 3, failed: 0 });
    assert_eq!(t.triggered(), 2);
    assert_eq!(p.ask("CHECK"), "OK");
    drop(p.stdin);
    assert!(p.child.wait().unwrap().success());
}

/// A stream's counters ([`Counters`], what `cuStreamWriteValue32`/`WaitValue32` use) drive
/// the provider through the host bridge, across the 32-bit wrap.
#[test]
fn the_bridge_carries_stream_counters_across_the_wrap() {
    let Some(mut a) = open_or_skip("the bridge") else {
        return;
    };
    let mut b = TriggeredEp::open(&params()).unwrap();
    let peer = a.insert_peer(&b.address().unwrap()).unwrap();
    let base = u32::MAX - 1;
    let c = Counters::new(base, false).unwrap();
    let mut br = Bridge::new(base);
    let rounds = 4u32;
    let mut rx = vec![[0u8; 64]; rounds as usize];
    let tx: Vec<[u8; 64]> = (0..rounds).map(|r| [r as u8 + 1; 64]).collect();
    for r in 0..rounds {
        // The stream's r-th start writes base + r + 1.
        let th = br.threshold(base.wrapping_add(r + 1));
        assert_eq!(th, u64::from(r + 1));
        // SAFETY: `rx` and `tx` outlive every operation (checked complete below).
        unsafe {
            b.post_recv(0, rx[r as usize].as_mut_ptr(), 64, u64::from(r), 0)
                .unwrap();
            a.post_send(th, peer, tx[r as usize].as_ptr(), 64, u64::from(r))
                .unwrap();
        }
    }
    for r in 0..rounds {
        // What a stream's write of the trigger counter does.
        c.trigger()
            .store(base.wrapping_add(r + 1), Ordering::Release);
        let want = br.completion_value(u64::from(r + 1));
        let until = Instant::now() + Duration::from_secs(10);
        while !crate::trigger::reached(c.completion().load(Ordering::Acquire), want) {
            a.bridge(&mut br, &c).unwrap();
            b.progress();
            assert!(Instant::now() < until, "round {r} never completed");
        }
        assert_eq!(
            c.completion().load(Ordering::Acquire),
            want,
            "exactly one more per release"
        );
    }
    assert_eq!(c.completion().load(Ordering::Acquire), base.wrapping_add(4)); // wrapped
    assert_eq!(wait_done(&mut b, 4u64).failed, 0);
    for r in 0..rounds as usize {
        assert_eq!(rx[r], tx[r]);
    }
}

#[test]
fn a_count_marker_and_abort_release_every_waiter() {
    let Some(mut t) = open_or_skip("count marker and abort") else {
        return;
    };
    t.post_count(1, 1).unwrap();
    let mut sink = [0u8; 8];
    // SAFETY: `sink` outlives `t` (declared before it is dropped at the end).
    unsafe { t.post_recv(1, sink.as_mut_ptr(), 8, 99, 0).unwrap() };
    assert_eq!(t.progress().total(), 0);
    t.trigger_add(1).unwrap();
    assert_eq!(
        wait_done(&mut t, 1).ok,
        1,
        "the marker counts once triggered"
    );
    // No peer sends tag 99: the receive never completes on its own.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(t.progress().total(), 1);
    t.abort();
    let d = t.progress();
    assert_eq!(d, Done { ok: 1, failed: 1 });
    assert_eq!(t.error(), Some(Status::Canceled));
    drop(t);
}

/// A dead peer: a send posted to it is refused at once; one posted before it died is,
/// through `sockets`, usually dropped by the provider without a completion or an error
/// (nothing came in 15 s when this was measured), so its owner writes it off with
/// `abort`, and nothing waiting on the count hangs. The provider may also have written it
/// to the socket before the peer's end closed and completed it: either way it is counted
/// exactly once.
#[test]
fn a_dead_peer_is_refused_at_post_or_written_off_by_abort() {
    let Some(mut a) = open_or_skip("a dead peer") else {
        return;
    };
    let m = [1u8; 64];
    let b = TriggeredEp::open(&params()).unwrap();
    let peer = a.insert_peer(&b.address().unwrap()).unwrap();
    drop(b);
    // SAFETY: `m` outlives `a`, which is dropped explicitly at the end.
    let r = unsafe { a.post_send(1, peer, m.as_ptr(), 64, 5) };
    assert!(r.is_err(), "a send to a dead peer was taken: {r:?}");
    assert_eq!(a.posted(), 0);

    let b = TriggeredEp::open(&params()).unwrap();
    let peer = a.insert_peer(&b.address().unwrap()).unwrap();
    // SAFETY: as above.
    unsafe { a.post_send(1, peer, m.as_ptr(), 64, 5).unwrap() };
    drop(b);
    a.trigger_add(1).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    // The counts are cumulative.
    let early = a.progress();
    a.abort();
    let late = a.progress();
    assert_eq!(late.total(), 1, "{early:?}, then {late:?}");
    if early.total() == 0 {
        // Written off.
        assert_eq!(late, Done { ok: 0, failed: 1 });
        assert_eq!(a.error(), Some(Status::Canceled));
    } else {
        // Completed by the provider first: the abort had nothing left to write off.
        assert_eq!(late, early);
    }
    drop(a);
}

#[test]
fn bad_input_is_refused() {
    let Some(mut t) = open_or_skip("bad input") else {
        return;
    };
    assert_eq!(t.insert_peer(&[]), Err(Status::InvalidAddr));
    assert_eq!(
        t.insert_peer(&[2, 0]),
        Err(Status::InvalidAddr),
        "shorter than an address"
    );
    assert!(
        matches!(t.cxi_counters(), Err(Status::Unsupported)),
        "sockets has no cxi extension"
    );
    let e = TriggeredEp::open(&Params {
        provider: Some("no-such-provider".into()),
        node: None,
    })
    .err()
    .unwrap();
    assert_eq!(e.status, Status::NoDevice);
    assert!(e.why.contains("no-such-provider"), "{e}");
}

#[test]
fn cxi_is_offered_only_where_present() {
    match TriggeredEp::open(&Params::default()) {
        Ok(t) => {
            assert_eq!(t.provider(), "cxi");
            assert!(t.cxi_counters().is_ok());
        }
        Err(e) => {
            assert_eq!(e.status, Status::NoDevice);
            eprintln!("skipped: the cxi queue itself ({e})");
        }
    }
}

/// A CUDA stream drives the provider's queue through the host bridge, with the counters
/// in pinned host memory mapped into the GPU: the stream's write of the trigger releases
/// the deferred send, and the stream waits on the completion counter until the bridge
/// has copied the provider's count there. Runs where a GPU and the `sockets` provider are
/// (the GPU machine, `contrib/gpu/test.sh`); says why it is skipped elsewhere.
#[cfg(feature = "cuda")]
#[test]
fn a_cuda_stream_drives_the_provider_through_the_bridge() {
    use ucs::cuda::StreamRef;
    let Some(d) = ucs::cuda::driver() else {
        eprintln!("skipped: a CUDA stream through the bridge (no CUDA driver here)");
        return;
    };
    let Some(mut a) = open_or_skip("a CUDA stream through the bridge") else {
        return;
    };
    let mut b = TriggeredEp::open(&params()).unwrap();
    let peer = a.insert_peer(&b.address().unwrap()).unwrap();
    let base = u32::MAX - 2;
    let c = Counters::new(base, true).unwrap();
    // A second pair: its trigger counter is the flag the stream writes after its wait.
    let flag = Counters::new(0, true).unwrap();
    let (trig, comp) = c.device_ptrs().unwrap();
    let (flag_dev, _) = flag.device_ptrs().unwrap();
    let s = d.stream(0).unwrap();
    let stream = StreamRef::of(&s);
    let mut br = Bridge::new(base);
    let rounds = 5u32;
    let tx: Vec<[u8; 256]> = (0..rounds).map(|r| [r as u8 + 9; 256]).collect();
    let mut rx = vec![[0u8; 256]; rounds as usize];
    for r in 0..rounds {
        let start = base.wrapping_add(r + 1);
        // SAFETY: `tx` and `rx` outlive every operation (all complete below).
        unsafe {
            b.post_recv(0, rx[r as usize].as_mut_ptr(), 256, u64::from(r), 0)
                .unwrap();
            a.post_send(
                br.threshold(start),
                peer,
                tx[r as usize].as_ptr(),
                256,
                u64::from(r),
            )
            .unwrap();
        }
        stream.write_value(trig, start).unwrap();
        stream.wait_value(comp, start).unwrap();
        stream.write_value(flag_dev, r + 1).unwrap();
    }
    // Without the bridge the provider never sees the stream's trigger: the stream stays
    // at its first wait.
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(a.progress().total(), 0);
    assert_eq!(
        flag.trigger().load(Ordering::Acquire),
        0,
        "the stream passed its wait"
    );
    let until = Instant::now() + Duration::from_secs(20);
    while flag.trigger().load(Ordering::Acquire) != rounds {
        a.bridge(&mut br, &c).unwrap();
        b.progress();
        assert!(Instant::now() < until, "the stream never finished: {a:?}");
    }
    stream.synchronize().unwrap();
    assert_eq!(
        c.completion().load(Ordering::Acquire),
        base.wrapping_add(rounds)
    );
    assert_eq!(wait_done(&mut b, u64::from(rounds)).failed, 0);
    for r in 0..rounds as usize {
        assert_eq!(rx[r], tx[r]);
    }
    eprintln!("a CUDA stream drove {rounds} deferred sends through the bridge");
}
