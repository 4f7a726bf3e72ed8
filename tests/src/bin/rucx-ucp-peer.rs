//! A `ucp` peer process for the two-process tag tests (`tests/tests/ucp_tag.rs`).
//!
//! `rucx-ucp-peer <a|b> <scenario>`: prints `ADDR <hex>` (its worker address), reads the
//! other peer's address as one hex line on stdin, creates an endpoint to it, runs the
//! scenario (`a` sends first, `b` receives first), and prints `DONE <summary>` (exit 0) or
//! `FAIL <why>` (exit 1). Transports come from `UCX_TLS` / `UCX_NET_DEVICES`.
#![allow(unsafe_code)] // describes its buffers to ucp, as an application does

use std::io::BufRead;
use std::time::{Duration, Instant};

use rucx_tests::{from_hex, to_hex};
use smallvec::SmallVec;
use ucp::{Buf, Data, EpHandle, RecvParams, ReqId, SendParams, Worker};
use ucs::Status;

/// Message sizes crossing every protocol switch point of shm and tcp, up to 64 MiB.
const SIZES: &[usize] = &[
    0,
    1,
    7,
    8,
    63,
    64,
    1000,
    4095,
    4096,
    8183,
    8184,
    8185,
    8191,
    8192,
    8193,
    8231,
    8232,
    8233,
    8240,
    8241,
    16383,
    16384,
    16385,
    65519,
    65520,
    65521,
    65535,
    65536,
    65537,
    100_000,
    131_072,
    262_144,
    1 << 20,
    4 << 20,
    16 << 20,
    64 << 20,
];

const FIN: u64 = u64::MAX - 1;

fn byte(seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(131) as usize ^ i.wrapping_mul(7)) as u8
}

fn fill(seq: u64, n: usize) -> Vec<u8> {
    (0..n).map(|i| byte(seq, i)).collect()
}

fn check(seq: u64, d: &[u8]) -> Result<(), String> {
    match d.iter().enumerate().find(|(i, &b)| b != byte(seq, *i)) {
        None => Ok(()),
        Some((i, b)) => Err(format!(
            "message {seq} ({} bytes): byte {i} is {b:#x}, expected {:#x}",
            d.len(),
            byte(seq, i)
        )),
    }
}

fn contig(v: &[u8]) -> Data {
    // SAFETY: every caller keeps the vector alive and unchanged until the request completes.
    Data::Contig(unsafe { Buf::from_slice(v) })
}

fn contig_mut(v: &mut [u8]) -> Data {
    // SAFETY: every caller keeps the vector alive and untouched until the request completes.
    Data::Contig(unsafe { Buf::from_mut_slice(v) })
}

struct Peer {
    w: Worker,
    ep: EpHandle,
    deadline: Instant,
}

type R<T> = Result<T, String>;

impl Peer {
    fn progress(&mut self) -> R<()> {
        self.w.progress();
        if let Some((_, s)) = self.w.poll_ep_error() {
            return Err(format!("endpoint failed: {s}"));
        }
        if Instant::now() > self.deadline {
            return Err("scenario timed out".into());
        }
        Ok(())
    }

    fn wait(&mut self, id: ReqId) -> R<(Status, Option<ucp::tag::TagInfo>)> {
        while self.w.request_status(id) == Status::InProgress {
            self.progress()?;
        }
        let info = self.w.request_info(id);
        let s = self.w.request_status(id);
        self.w.request_free(id);
        Ok((s, info))
    }

    fn wait_ok(&mut self, id: Option<ReqId>, what: &str) -> R<()> {
        if let Some(id) = id {
            let (s, _) = self.wait(id)?;
            if s != Status::Ok {
                return Err(format!("{what}: {s}"));
            }
        }
        Ok(())
    }

    fn send(&mut self, data: &[u8], tag: u64, sync: bool) -> R<()> {
        let p = SendParams {
            sync,
            ..Default::default()
        };
        let id = self
            .w
            .tag_send(self.ep, &contig(data), tag, p)
            .map_err(|e| format!("send {tag}: {e}"))?;
        self.wait_ok(id, &format!("send tag {tag} ({} bytes)", data.len()))
    }

    fn recv(&mut self, n: usize, tag: u64) -> R<Vec<u8>> {
        let mut v = vec![0u8; n];
        let id = self
            .w
            .tag_recv(&contig_mut(&mut v), tag, u64::MAX, RecvParams::default())
            .map_err(|e| e.to_string())?;
        let (s, info) = self.wait(id)?;
        if s != Status::Ok {
            return Err(format!("recv tag {tag}: {s}"));
        }
        let len = info.map_or(0, |i| i.length);
        if len != n {
            return Err(format!("recv tag {tag}: {len} bytes, expected {n}"));
        }
        Ok(v)
    }

    /// Ends a scenario: `b` tells `a` it is done once everything it owes has been sent.
    fn finish(&mut self, role: &str) -> R<()> {
        if role == "a" {
            self.recv(0, FIN)?;
        } else {
            let f = self.w.flush(Some(self.ep)).map_err(|e| e.to_string())?;
            self.wait_ok(Some(f), "flush")?;
            // Not synchronous: `a` exits as soon as it has this message, and an
            // acknowledgement would find it gone.
            self.send(&[], FIN, false)?;
        }
        Ok(())
    }
}

fn pingpong(p: &mut Peer, role: &str) -> R<String> {
    let mut seq = 0u64;
    for &n in SIZES {
        for sync in [false, true] {
            seq += 1;
            if role == "a" {
                let m = fill(seq, n);
                p.send(&m, seq, sync)?;
                let back = p.recv(n, seq)?;
                check(seq, &back)?;
            } else {
                let m = p.recv(n, seq)?;
                check(seq, &m)?;
                p.send(&m, seq, sync)?;
            }
        }
    }
    p.finish(role)?;
    Ok(format!("{seq} round trips"))
}

/// All sizes back to back with one tag: received in order, mostly unexpected.
fn stream(p: &mut Peer, role: &str) -> R<String> {
    if role == "a" {
        let msgs: Vec<Vec<u8>> = SIZES
            .iter()
            .enumerate()
            .map(|(i, &n)| fill(i as u64, n))
            .collect();
        let mut reqs = Vec::new();
        for m in &msgs {
            reqs.push(
                p.w.tag_send(p.ep, &contig(m), 7, SendParams::default())
                    .map_err(|e| e.to_string())?,
            );
        }
        for r in reqs {
            p.wait_ok(r, "stream send")?;
        }
    } else {
        // Let the messages arrive before any receive is posted.
        let t = Instant::now();
        while p.w.unexpected_len() < 5 && t.elapsed() < Duration::from_secs(5) {
            p.progress()?;
        }
        let mut bufs: Vec<Vec<u8>> = SIZES.iter().map(|&n| vec![0u8; n]).collect();
        let reqs: Vec<ReqId> = bufs
            .iter_mut()
            .map(|b| {
                p.w.tag_recv(&contig_mut(b), 7, u64::MAX, RecvParams::default())
            })
            .collect::<Result<_, _>>()
            .map_err(|e| e.to_string())?;
        for (i, r) in reqs.into_iter().enumerate() {
            let (s, info) = p.wait(r)?;
            if s != Status::Ok || info.map(|i| i.length) != Some(SIZES[i]) {
                return Err(format!("stream message {i}: {s}, {info:?}"));
            }
            check(i as u64, &bufs[i])?;
        }
    }
    p.finish(role)?;
    Ok(format!("{} messages in order", SIZES.len()))
}

fn outstanding(p: &mut Peer, role: &str) -> R<String> {
    const N: u64 = 10_000;
    if role == "a" {
        let msgs: Vec<Vec<u8>> = (0..N).map(|i| fill(i, 256)).collect();
        let mut reqs = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            reqs.push(
                p.w.tag_send(p.ep, &contig(m), i as u64, SendParams::default())
                    .map_err(|e| e.to_string())?,
            );
        }
        let pending = reqs.iter().filter(|r| r.is_some()).count();
        for r in reqs {
            p.wait_ok(r, "send")?;
        }
        p.finish(role)?;
        Ok(format!("{N} sends, {pending} needed a request"))
    } else {
        let mut bufs = vec![vec![0u8; 256]; N as usize];
        // Posted in reverse tag order: each arrival searches the expected queue.
        let mut reqs = Vec::new();
        for (i, b) in bufs.iter_mut().enumerate().rev() {
            reqs.push((
                i,
                p.w.tag_recv(&contig_mut(b), i as u64, u64::MAX, RecvParams::default())
                    .map_err(|e| e.to_string())?,
            ));
        }
        for (i, r) in reqs {
            let (s, _) = p.wait(r)?;
            if s != Status::Ok {
                return Err(format!("recv {i}: {s}"));
            }
        }
        for (i, b) in bufs.iter().enumerate() {
            check(i as u64, b)?;
        }
        p.finish(role)?;
        Ok(format!("{N} receives"))
    }
}

/// A storm of unexpected messages, taken with wildcards, probes and probed receives.
fn storm(p: &mut Peer, role: &str) -> R<String> {
    const N: u64 = 3000;
    // Tag layout: kind (8 bits) << 32 | seq. Every 100th message is a large (rendezvous) one.
    let size = |i: u64| {
        if i % 100 == 99 {
            300_000
        } else {
            (i as usize * 37) % 9000
        }
    };
    let tag = |i: u64| ((i % 3) << 32) | i;
    if role == "a" {
        let msgs: Vec<Vec<u8>> = (0..N).map(|i| fill(i, size(i))).collect();
        let mut reqs = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            reqs.push(
                p.w.tag_send(p.ep, &contig(m), tag(i as u64), SendParams::default())
                    .map_err(|e| e.to_string())?,
            );
        }
        for r in reqs {
            p.wait_ok(r, "storm send")?;
        }
        p.finish(role)?;
        return Ok(format!("{N} sent"));
    }
    while (p.w.unexpected_len() as u64) < N {
        p.progress()?;
    }
    let mut got = 0u64;
    // Kind 0 by probe + probed receive (oldest first), kind 1 by a masked wildcard, kind 2
    // by a full wildcard after the others are gone.
    while let Some((info, msg)) = p.w.tag_probe(0, 0xff << 32, true) {
        let mut b = vec![0u8; info.length];
        let r =
            p.w.tag_msg_recv(
                &contig_mut(&mut b),
                msg.ok_or("no handle")?,
                RecvParams::default(),
            )
            .map_err(|e| e.to_string())?;
        p.wait_ok(Some(r), "probed recv")?;
        let seq = info.sender_tag & 0xffff_ffff;
        if seq % 3 != 0 {
            return Err(format!(
                "probe for kind 0 returned tag {:#x}",
                info.sender_tag
            ));
        }
        check(seq, &b)?;
        got += 1;
    }
    for mask in [0xffu64 << 32, 0] {
        loop {
            let want = if mask == 0 { 0 } else { 1u64 << 32 };
            let Some((info, _)) = p.w.tag_probe(want, mask, false) else {
                break;
            };
            let mut b = vec![0u8; info.length];
            let r =
                p.w.tag_recv(&contig_mut(&mut b), want, mask, RecvParams::default())
                    .map_err(|e| e.to_string())?;
            let (s, ri) = p.wait(r)?;
            let ri = ri.ok_or("no info")?;
            if s != Status::Ok || ri.sender_tag != info.sender_tag {
                return Err(format!("wildcard recv: {s}, {ri:?} vs probe {info:?}"));
            }
            check(ri.sender_tag & 0xffff_ffff, &b)?;
            got += 1;
        }
    }
    if got != N {
        return Err(format!("received {got} of {N}"));
    }
    p.finish(role)?;
    Ok(format!("{N} unexpected messages"))
}

/// Cancel, truncation (eager and rendezvous), and a probe that finds nothing.
fn misc(p: &mut Peer, role: &str) -> R<String> {
    let sizes = [100usize, 20_000, 2 << 20];
    if role == "a" {
        for (i, &n) in sizes.iter().enumerate() {
            let m = fill(i as u64, n);
            p.send(&m, 2000 + i as u64, false)?;
        }
        p.finish(role)?;
        return Ok("sent".into());
    }
    let mut b = vec![0u8; 8];
    let r =
        p.w.tag_recv(&contig_mut(&mut b), 1000, u64::MAX, RecvParams::default())
            .map_err(|e| e.to_string())?;
    p.w.request_cancel(r);
    let (s, _) = p.wait(r)?;
    if s != Status::Canceled {
        return Err(format!("cancelled receive ended with {s}"));
    }
    if p.w.tag_probe(1000, u64::MAX, false).is_some() {
        return Err("probe found a message that was never sent".into());
    }
    for (i, &n) in sizes.iter().enumerate() {
        let mut small = vec![0u8; n / 2];
        let r =
            p.w.tag_recv(
                &contig_mut(&mut small),
                2000 + i as u64,
                u64::MAX,
                RecvParams::default(),
            )
            .map_err(|e| e.to_string())?;
        let (s, info) = p.wait(r)?;
        if s != Status::MessageTruncated || info.map(|x| x.length) != Some(n) {
            return Err(format!("truncated receive of {n}: {s}, {info:?}"));
        }
    }
    p.finish(role)?;
    Ok("cancel, probe, truncation".into())
}

/// Iov on both sides, with different shapes, over every protocol.
fn iov(p: &mut Peer, role: &str) -> R<String> {
    let totals = [10usize, 5000, 70_000, 3 << 20];
    for (k, &total) in totals.iter().enumerate() {
        let seq = 500 + k as u64;
        let whole = fill(seq, total);
        if role == "a" {
            let cuts = [0, total / 7, total / 3, total / 2, total];
            // SAFETY: `whole` outlives the send, which is waited for below.
            let v: SmallVec<[Buf; 4]> = cuts
                .windows(2)
                .map(|c| unsafe { Buf::from_slice(&whole[c[0]..c[1]]) })
                .collect();
            let id =
                p.w.tag_send(p.ep, &Data::Iov(v), seq, SendParams::default())
                    .map_err(|e| e.to_string())?;
            p.wait_ok(id, "iov send")?;
        } else {
            let mut parts = [vec![0u8; total / 4], vec![0u8; total - total / 4]];
            let [x, y] = &mut parts;
            // SAFETY: `parts` outlives the receive, which is waited for below.
            let v: SmallVec<[Buf; 4]> = unsafe {
                [Buf::from_mut_slice(x), Buf::from_mut_slice(y)]
                    .into_iter()
                    .collect()
            };
            let id =
                p.w.tag_recv(&Data::Iov(v), seq, u64::MAX, RecvParams::default())
                    .map_err(|e| e.to_string())?;
            p.wait_ok(Some(id), "iov recv")?;
            check(seq, &parts.concat())?;
        }
    }
    p.finish(role)?;
    Ok(format!("{} iov transfers", totals.len()))
}

/// Rendezvous transfers without end, for the peer-failure tests: the test kills one side
/// and the other must end in an error. Prints `READY` once traffic flows; returns the
/// error as `Ok("ERR ...")`.
fn endless(p: &mut Peer, role: &str) -> R<String> {
    const N: usize = 8 << 20;
    p.deadline = Instant::now() + Duration::from_secs(600);
    let mut buf = fill(1, N);
    let mut i = 0u64;
    loop {
        let r = if role == "a" {
            p.send(&buf, 1, false)
        } else {
            p.recv(N, 1).map(|v| buf = v)
        };
        if let Err(e) = r {
            return Ok(format!("ERR {e}"));
        }
        i += 1;
        if i == 2 {
            println!("READY");
        }
    }
}

fn run(role: &str, scenario: &str) -> R<String> {
    let ctx = ucp::Context::from_env().map_err(|e| e.to_string())?;
    let w = Worker::new(&ctx).map_err(|e| e.to_string())?;
    println!("ADDR {}", to_hex(w.address()));
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let addr = from_hex(line.trim()).ok_or("bad peer address")?;
    let mut p = Peer {
        w,
        ep: EpHandle(0),
        deadline: Instant::now() + Duration::from_secs(60),
    };
    p.ep =
        p.w.ep_create(&addr)
            .map_err(|e| format!("ep_create: {e}"))?;
    match scenario {
        "pingpong" => pingpong(&mut p, role),
        "stream" => stream(&mut p, role),
        "outstanding" => outstanding(&mut p, role),
        "storm" => storm(&mut p, role),
        "misc" => misc(&mut p, role),
        "iov" => iov(&mut p, role),
        "endless" => endless(&mut p, role),
        s => Err(format!("unknown scenario {s}")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 || (args[1] != "a" && args[1] != "b") {
        println!("FAIL usage: rucx-ucp-peer <a|b> <scenario>");
        std::process::exit(2);
    }
    match run(&args[1], &args[2]) {
        Ok(s) => println!("DONE {s}"),
        Err(e) => {
            println!("FAIL {e}");
            std::process::exit(1);
        }
    }
}
