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
    /// An error reported for this peer's endpoint (those of an earlier peer, already
    /// given up, are passed over).
    fn ep_failed(&mut self) -> Option<Status> {
        while let Some((ep, s)) = self.w.poll_ep_error() {
            if ep == self.ep {
                return Some(s);
            }
        }
        None
    }

    fn progress(&mut self) -> R<()> {
        self.w.progress();
        if let Some(s) = self.ep_failed() {
            return Err(format!("endpoint failed: {s}"));
        }
        if Instant::now() > self.deadline {
            return Err("scenario timed out".into());
        }
        Ok(())
    }

    fn wait(&mut self, id: ReqId) -> R<(Status, Option<ucp::tag::TagInfo>)> {
        let start = Instant::now();
        let mut dumped = false;
        while self.w.request_status(id) == Status::InProgress {
            if !dumped && start.elapsed() > Duration::from_secs(10) {
                // A diagnosis for whoever reads the test log.
                dumped = true;
                eprintln!("request {:#x} waiting 10 s:\n{}", id.0, self.w.dump_state());
            }
            self.w.progress();
            // A peer that closes right after its last message: the message may complete
            // this request in the same progress call that reports the closed connection.
            if self.w.request_status(id) != Status::InProgress {
                break;
            }
            if let Some(s) = self.ep_failed() {
                return Err(format!("endpoint failed: {s}"));
            }
            if Instant::now() > self.deadline {
                return Err("scenario timed out".into());
            }
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
            // Close as an application should: what is queued (FIN included) reaches the
            // transport before this process exits.
            let c = self.w.ep_close(self.ep).map_err(|e| e.to_string())?;
            self.wait_ok(Some(c), "close")?;
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
                p.send(&m, seq, sync)
                    .map_err(|e| format!("send {seq}: {e}"))?;
                let back = p.recv(n, seq).map_err(|e| format!("recv {seq}: {e}"))?;
                check(seq, &back)?;
            } else {
                let m = p.recv(n, seq)?;
                check(seq, &m)?;
                p.send(&m, seq, sync)?;
            }
        }
    }
    p.finish(role).map_err(|e| format!("finish: {e}"))?;
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

/// Active messages of every size class, eager and rendezvous, with a reply for each;
/// `b` checks header and data.
fn am(p: &mut Peer, role: &str) -> R<String> {
    use std::sync::{Arc, Mutex};
    use ucp::{AmData, AmEvent, AmSendParams};
    let sizes: Vec<usize> = SIZES.iter().copied().filter(|&n| n <= 16 << 20).collect();
    if role == "a" {
        let replies = Arc::new(Mutex::new(0usize));
        let r2 = Arc::clone(&replies);
        p.w.am_set_handler(
            2,
            Some(Box::new(move |_w: &mut Worker, _ev: AmEvent| {
                *r2.lock().unwrap() += 1;
            })),
        );
        for (i, &n) in sizes.iter().enumerate() {
            let m = fill(i as u64, n);
            let hdr = (i as u64).to_le_bytes();
            let params = AmSendParams {
                reply: true,
                ..Default::default()
            };
            let id =
                p.w.am_send(p.ep, 1, &hdr, &contig(&m), params)
                    .map_err(|e| format!("am_send {n}: {e}"))?;
            p.wait_ok(id, "am send")?;
        }
        while *replies.lock().unwrap() < sizes.len() {
            p.progress()?;
        }
        p.finish(role)?;
        return Ok(format!("{} active messages, all replied", sizes.len()));
    }
    // b: the handler checks eager data at once and starts rendezvous receives.
    type Pending = Vec<(ReqId, u64, Box<[u8]>)>;
    let pending: Arc<Mutex<Pending>> = Default::default();
    let errors: Arc<Mutex<Vec<String>>> = Default::default();
    let count = Arc::new(Mutex::new(0usize));
    {
        let (pending, errors, count) = (
            Arc::clone(&pending),
            Arc::clone(&errors),
            Arc::clone(&count),
        );
        p.w.am_set_handler(
            1,
            Some(Box::new(move |w: &mut Worker, ev: AmEvent| {
                let seq = u64::from_le_bytes(ev.header[..8].try_into().unwrap_or([0; 8]));
                if let Some(ep) = ev.reply_ep {
                    if let Err(e) = w.am_send(
                        ep,
                        2,
                        &[],
                        &Data::Contig(Buf::EMPTY),
                        AmSendParams::default(),
                    ) {
                        errors.lock().unwrap().push(format!("reply: {e}"));
                    }
                }
                match ev.data {
                    AmData::Eager(d) => {
                        if let Err(e) = check(seq, d) {
                            errors.lock().unwrap().push(e);
                        }
                        *count.lock().unwrap() += 1;
                    }
                    AmData::Rndv(r) => {
                        let mut b = vec![0u8; r.len()].into_boxed_slice();
                        // SAFETY: the box is kept in `pending` until the receive completes.
                        let data = Data::Contig(unsafe { Buf::from_mut_slice(&mut b) });
                        match w.am_recv_data(r, &data, RecvParams::default()) {
                            Ok(id) => pending.lock().unwrap().push((id, seq, b)),
                            Err(e) => errors.lock().unwrap().push(format!("recv_data: {e}")),
                        }
                    }
                }
            })),
        );
    }
    loop {
        p.progress()?;
        let mut pd = pending.lock().unwrap();
        let mut i = 0;
        while i < pd.len() {
            let st = p.w.request_status(pd[i].0);
            if st == Status::InProgress {
                i += 1;
                continue;
            }
            let (id, seq, b) = pd.swap_remove(i);
            p.w.request_free(id);
            if st != Status::Ok {
                return Err(format!("am rendezvous receive {seq}: {st}"));
            }
            check(seq, &b)?;
            *count.lock().unwrap() += 1;
        }
        drop(pd);
        if let Some(e) = errors.lock().unwrap().first() {
            return Err(e.clone());
        }
        if *count.lock().unwrap() == sizes.len() {
            break;
        }
    }
    p.finish(role)?;
    Ok(format!("{} active messages checked", sizes.len()))
}

/// Sends `blob` to the other side as tag `tag` (for remote keys and addresses).
fn send_blob(p: &mut Peer, blob: &[u8], tag: u64) -> R<()> {
    p.send(blob, tag, false)
}

fn recv_blob(p: &mut Peer, tag: u64) -> R<Vec<u8>> {
    let mut b = vec![0u8; 4096];
    let id =
        p.w.tag_recv(&contig_mut(&mut b), tag, u64::MAX, RecvParams::default())
            .map_err(|e| e.to_string())?;
    let (s, info) = p.wait(id)?;
    if s != Status::Ok {
        return Err(format!("blob {tag}: {s}"));
    }
    b.truncate(info.map_or(0, |i| i.length));
    Ok(b)
}

/// put/get across sizes and iov shapes into `b`'s mapped region, checked by reading back
/// and by `b` itself; an out-of-bounds put is refused.
fn rma(p: &mut Peer, role: &str) -> R<String> {
    const REGION: usize = 8 << 20;
    if role == "b" {
        let h = p.w.mem_map(None, REGION).map_err(|e| e.to_string())?;
        let blob = p.w.rkey_pack(h).map_err(|e| e.to_string())?;
        send_blob(p, &blob, 10)?;
        // a says which pattern it left where.
        let last = recv_blob(p, 11)?;
        let (off, n) = (
            u64::from_le_bytes(last[..8].try_into().unwrap()) as usize,
            u64::from_le_bytes(last[8..16].try_into().unwrap()) as usize,
        );
        let mut v = vec![0u8; n];
        p.w.mem_read(h, off, &mut v).map_err(|e| e.to_string())?;
        check(77, &v)?;
        p.finish(role)?;
        return Ok("region checked".into());
    }
    let blob = recv_blob(p, 10)?;
    let rk = p.w.rkey_unpack(p.ep, &blob).map_err(|e| e.to_string())?;
    let (base, len) = rk.bounds();
    let sp = SendParams::default();
    let mut ops = 0;
    for &n in SIZES.iter().filter(|&&n| n <= 4 << 20) {
        for shape in [1usize, 3] {
            let seq = n as u64 * 10 + shape as u64;
            let src = fill(seq, n);
            let off = (n % 4096) as u64;
            let cuts: Vec<usize> = (0..=shape).map(|k| n * k / shape).collect();
            // SAFETY: `src` outlives the put, waited for below.
            let v: SmallVec<[Buf; 4]> = cuts
                .windows(2)
                .map(|c| unsafe { Buf::from_slice(&src[c[0]..c[1]]) })
                .collect();
            let id =
                p.w.put(p.ep, &Data::Iov(v), base + off, &rk, sp)
                    .map_err(|e| format!("put {n}: {e}"))?;
            p.wait_ok(id, "put")?;
            let mut back = vec![0u8; n];
            let id =
                p.w.get(p.ep, &contig_mut(&mut back), base + off, &rk, sp)
                    .map_err(|e| format!("get {n}: {e}"))?;
            p.wait_ok(id, "get")?;
            check(seq, &back).map_err(|e| format!("get after put of {n} (shape {shape}): {e}"))?;
            ops += 2;
        }
    }
    if p.w.put(p.ep, &contig(&[0u8; 16]), base + len - 8, &rk, sp) != Err(Status::InvalidParam) {
        return Err("out-of-bounds put was not refused".into());
    }
    let last = fill(77, 100_000);
    let id =
        p.w.put(p.ep, &contig(&last), base + 12345, &rk, sp)
            .map_err(|e| e.to_string())?;
    p.wait_ok(id, "last put")?;
    let f = p.w.flush(Some(p.ep)).map_err(|e| e.to_string())?;
    p.wait_ok(Some(f), "flush")?;
    let mut note = 12345u64.to_le_bytes().to_vec();
    note.extend_from_slice(&100_000u64.to_le_bytes());
    send_blob(p, &note, 11)?;
    p.finish(role)?;
    Ok(format!("{ops} put/get"))
}

/// Stream bytes in random chunks both sides (seeded: both know the sizes).
fn stream_bytes(p: &mut Peer, role: &str) -> R<String> {
    use ucp::StreamRecv;
    const TOTAL: usize = 8 << 20;
    let src = fill(5, TOTAL);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = |max: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        1 + (seed as usize) % max
    };
    if role == "a" {
        let mut off = 0;
        let mut reqs = Vec::new();
        while off < TOTAL {
            let n = next(300_000).min(TOTAL - off);
            reqs.push(
                p.w.stream_send(p.ep, &contig(&src[off..off + n]), SendParams::default())
                    .map_err(|e| e.to_string())?,
            );
            off += n;
        }
        for r in reqs {
            p.wait_ok(r, "stream send")?;
        }
        p.finish(role)?;
        return Ok("stream sent".into());
    }
    let mut got = Vec::with_capacity(TOTAL);
    while got.len() < TOTAL {
        let n = next(200_000).min(TOTAL - got.len());
        let mut b = vec![0u8; n];
        match p
            .w
            .stream_recv(p.ep, &contig_mut(&mut b), false, RecvParams::default())
            .map_err(|e| e.to_string())?
        {
            StreamRecv::Done(m) => got.extend_from_slice(&b[..m]),
            StreamRecv::Pending(r) => {
                let (s, info) = p.wait(r)?;
                if s != Status::Ok {
                    return Err(format!("stream recv: {s}"));
                }
                got.extend_from_slice(&b[..info.map_or(0, |i| i.length)]);
            }
        }
    }
    if got != src {
        return Err("stream bytes differ".into());
    }
    p.finish(role)?;
    Ok(format!("{TOTAL} stream bytes in order"))
}

/// Every named application layout (small parameters), both directions: sent with its
/// layout, received once with the same layout and once contiguous (mismatched), checked
/// against the packed bytes computed locally.
fn layouts(p: &mut Peer, role: &str) -> R<String> {
    use std::sync::Arc;
    use ucp::datatype::{DtLayout, LayoutBuf};
    use ucp::dt::apps;
    let specs = [
        "milc_su3_zd:4",
        "nas_mg_x:16",
        "nas_mg_y:16",
        "nas_mg_z:16",
        "wrf_x_vec:8,5",
        "wrf_y_vec:8,5",
        "wrf_x_sa:8,5",
        "wrf_y_sa:8,5",
        "specfem3d_cm:c1",
        "stencil3d_face:32x32x32,y,2",
        "stencil3d_face:64",
    ];
    let mut n = 0;
    for (k, spec) in specs.iter().enumerate() {
        let nl = apps::named(spec).map_err(|e| format!("{spec}: {e}"))?;
        let dt = DtLayout::new(&nl.layout).map_err(|e| format!("{spec}: {e}"))?;
        let size = dt.size();
        for dir in 0..2u64 {
            let sender = (dir == 0) == (role == "a");
            let seq = 1000 + 10 * k as u64 + dir;
            let src = fill(seq, nl.buf_len);
            // What the layout selects from `src`, packed.
            let mut packed = vec![0u8; size];
            ucp::dt::pack(dt.canon(), &src, 0, &mut packed).map_err(|e| format!("{spec}: {e}"))?;
            if sender {
                for tag in [seq, seq + 100] {
                    // SAFETY: `src` outlives the send, waited for below.
                    let d = Data::Layout(unsafe {
                        LayoutBuf::new(src.as_ptr().cast_mut(), Arc::clone(&dt))
                    });
                    let id =
                        p.w.tag_send(p.ep, &d, tag, SendParams::default())
                            .map_err(|e| e.to_string())?;
                    p.wait_ok(id, spec)?;
                }
            } else {
                let mut same = vec![0u8; nl.buf_len];
                // SAFETY: `same` outlives the receive, waited for below.
                let d = Data::Layout(unsafe { LayoutBuf::new(same.as_mut_ptr(), Arc::clone(&dt)) });
                let id =
                    p.w.tag_recv(&d, seq, u64::MAX, RecvParams::default())
                        .map_err(|e| e.to_string())?;
                p.wait_ok(Some(id), spec)?;
                let mut again = vec![0u8; size];
                ucp::dt::pack(dt.canon(), &same, 0, &mut again).map_err(|e| e.to_string())?;
                if again != packed {
                    return Err(format!("{spec}: layout-to-layout data differs"));
                }
                let flat = p.recv(size, seq + 100)?;
                if flat != packed {
                    return Err(format!("{spec}: layout-to-contiguous data differs"));
                }
            }
            n += 1;
        }
    }
    p.finish(role)?;
    Ok(format!("{n} layout transfers ({} layouts)", specs.len()))
}

/// Stream-triggered queues with host triggers: each round enqueues, on both sides, a
/// receive and a send of every kind (eager, rendezvous, an iov list, a vector layout
/// received as a layout), then one start and one wait; every byte checked.
fn queue(p: &mut Peer, role: &str) -> R<String> {
    use std::sync::Arc;
    use ucp::datatype::{DtLayout, LayoutBuf};
    use ucp::dt::Layout;
    use ucp::QueueParams;
    const ROUNDS: u64 = 20;
    let q =
        p.w.queue_create(QueueParams::default())
            .map_err(|e| e.to_string())?;
    let vec_layout = Layout::vector(64, 3, 7, &Layout::bytes(8)).map_err(|e| e.to_string())?;
    let dt = DtLayout::new(&vec_layout).map_err(|e| e.to_string())?;
    let span = 8 * (63 * 7 + 3);
    let sizes = [64usize, 256 << 10];
    let (me, other) = if role == "a" { (0u64, 1u64) } else { (1, 0) };
    for r in 0..ROUNDS {
        let seq = |who: u64, k: u64| 10_000 * who + 100 * r + k;
        let outs: Vec<Vec<u8>> = (0..4)
            .map(|k| fill(seq(me, k), if k < 2 { sizes[k as usize] } else { span }))
            .collect();
        let mut ins: Vec<Vec<u8>> = (0..4)
            .map(|k| vec![0u8; if k < 2 { sizes[k as usize] } else { span }])
            .collect();
        for (k, b) in ins.iter_mut().enumerate() {
            let d = match k {
                // SAFETY: `ins` outlives the queue's wait below.
                0 | 1 => Data::Contig(unsafe { Buf::from_mut_slice(b) }),
                2 => {
                    let (h, t) = b.split_at_mut(span / 3);
                    // SAFETY: as above.
                    Data::Iov(
                        unsafe { [Buf::from_mut_slice(h), Buf::from_mut_slice(t)] }
                            .into_iter()
                            .collect(),
                    )
                }
                // SAFETY: as above; the layout's span is the buffer.
                _ => Data::Layout(unsafe { LayoutBuf::new(b.as_mut_ptr(), Arc::clone(&dt)) }),
            };
            p.w.enqueue_recv(q, p.ep, &d, seq(other, k as u64), u64::MAX)
                .map_err(|e| e.to_string())?;
        }
        for (k, b) in outs.iter().enumerate() {
            let d = match k {
                0..=2 => contig(b),
                _ => {
                    // SAFETY: `outs` outlives the queue's wait below.
                    Data::Layout(unsafe { LayoutBuf::new(b.as_ptr().cast_mut(), Arc::clone(&dt)) })
                }
            };
            p.w.enqueue_send(q, p.ep, &d, seq(me, k as u64))
                .map_err(|e| e.to_string())?;
        }
        p.w.enqueue_start(q).map_err(|e| e.to_string())?;
        p.w.enqueue_wait(q).map_err(|e| format!("round {r}: {e}"))?;
        for (k, got) in ins.iter().take(3).enumerate() {
            check(seq(other, k as u64), got)?;
        }
        // The layout's bytes, and only those, arrived.
        let want = fill(seq(other, 3), span);
        let mut a = vec![0u8; dt.size()];
        let mut b = vec![0u8; dt.size()];
        ucp::dt::pack(dt.canon(), &want, 0, &mut a).map_err(|e| e.to_string())?;
        ucp::dt::pack(dt.canon(), &ins[3], 0, &mut b).map_err(|e| e.to_string())?;
        if a != b {
            return Err(format!("round {r}: layout data differs"));
        }
    }
    let info = p.w.queue_query(q).map_err(|e| e.to_string())?;
    if info.completed != 8 * ROUNDS as u32 || info.failed != 0 || info.pending != 0 {
        return Err(format!("queue state at the end: {info:?}"));
    }
    p.w.queue_destroy(q).map_err(|e| e.to_string())?;
    p.finish(role)?;
    Ok(format!("{ROUNDS} rounds of 8 enqueued operations"))
}

/// A queue whose peer dies (the test kills `b` after both print `READY`): `a` has a
/// receive from `b` and a rendezvous-sized send to it running; its host wait must come
/// back with an error, both operations counted done (the receive failed; the send failed
/// too, or had completed already where the protocol buffers on the receiver's side, as
/// shared-memory put rendezvous may). Reports `DONE released <error>`.
fn queue_kill(p: &mut Peer, role: &str) -> R<String> {
    use ucp::QueueParams;
    // Wire up with one round trip, so that both sides are connected before the kill.
    if role == "a" {
        p.send(&[1u8; 8], 5, false)?;
        p.recv(8, 6)?;
    } else {
        p.recv(8, 5)?;
        p.send(&[1u8; 8], 6, false)?;
        println!("READY");
        loop {
            p.progress()?;
        }
    }
    let q =
        p.w.queue_create(QueueParams::default())
            .map_err(|e| e.to_string())?;
    let mut inb = vec![0u8; 4096];
    let out = vec![7u8; 1 << 20];
    p.w.enqueue_recv(q, p.ep, &contig_mut(&mut inb), 9, u64::MAX)
        .map_err(|e| e.to_string())?;
    p.w.enqueue_send(q, p.ep, &contig(&out), 10)
        .map_err(|e| e.to_string())?;
    p.w.enqueue_start(q).map_err(|e| e.to_string())?;
    for _ in 0..1000 {
        p.w.progress();
    }
    println!("READY");
    let t = Instant::now();
    let r = p.w.enqueue_wait(q);
    let info = p.w.queue_query(q).map_err(|e| e.to_string())?;
    if info.completed != 2 || info.failed == 0 {
        return Err(format!("after the peer died: {info:?} ({r:?})"));
    }
    match r {
        Err(e) => Ok(format!("released {e} after {} ms", t.elapsed().as_millis())),
        Ok(_) => Err("the wait succeeded with a dead peer".into()),
    }
}

/// Rendezvous transfers without end, for the peer-failure tests: the test kills one side
/// and the other must end in an error. Prints `READY` once traffic flows; returns the
/// error as `Ok("ERR ...")`.
/// Tags of the third peer's traffic (`RUCX_THIRD`, `echo`).
const THIRD_TAG: u64 = 77;
const THIRD_BIG: u64 = 79;
const THIRD_STOP: u64 = 78;
/// Round trips with the third peer after the first one died.
const THIRD_TRIPS: usize = 100;

/// The third peer: answers the wire-up round trip, then `THIRD_TRIPS` 8-byte round trips
/// and one of 1 MiB, then waits for the stop.
fn echo(p: &mut Peer) -> R<String> {
    p.deadline = Instant::now() + Duration::from_secs(120);
    for _ in 0..=THIRD_TRIPS {
        let v = p.recv(8, THIRD_TAG)?;
        p.send(&v, THIRD_TAG, false)?;
    }
    let v = p.recv(1 << 20, THIRD_BIG)?;
    p.send(&v, THIRD_BIG, false)?;
    p.recv(0, THIRD_STOP)?;
    Ok("echoed".into())
}

/// After the first peer died: `THIRD_TRIPS` round trips and a 1 MiB one with the third,
/// over the endpoint made before, every byte checked.
fn serve_third(p: &mut Peer, third: EpHandle) -> R<()> {
    p.ep = third;
    p.deadline = Instant::now() + Duration::from_secs(60);
    for i in 0..THIRD_TRIPS as u64 {
        let v = i.to_le_bytes();
        p.send(&v, THIRD_TAG, false)?;
        if p.recv(8, THIRD_TAG)? != v {
            return Err(format!("third peer: round trip {i} came back wrong"));
        }
    }
    let big = fill(3, 1 << 20);
    p.send(&big, THIRD_BIG, false)?;
    if p.recv(1 << 20, THIRD_BIG)? != big {
        return Err("third peer: the 1 MiB round trip came back wrong".into());
    }
    p.send(&[], THIRD_STOP, false)
}

fn endless(p: &mut Peer, role: &str, kind: &str, third: Option<EpHandle>) -> R<String> {
    use ucp::{AmEvent, AmSendParams, AtomicOp, StreamRecv};
    const N: usize = 8 << 20;
    p.deadline = Instant::now() + Duration::from_secs(600);
    let mut buf = fill(1, N);
    let sp = SendParams::default();
    // One-sided kinds: b maps a region and hands a its key; b then only progresses.
    let rk = if matches!(kind, "put" | "get" | "atomic") {
        if role == "b" {
            let h = p.w.mem_map(None, N).map_err(|e| e.to_string())?;
            let blob = p.w.rkey_pack(h).map_err(|e| e.to_string())?;
            send_blob(p, &blob, 10)?;
            None
        } else {
            let blob = recv_blob(p, 10)?;
            Some(p.w.rkey_unpack(p.ep, &blob).map_err(|e| e.to_string())?)
        }
    } else {
        None
    };
    if kind == "am" && role == "b" {
        p.w.am_set_handler(
            1,
            Some(Box::new(|w: &mut Worker, ev: AmEvent| {
                if let ucp::AmData::Rndv(r) = ev.data {
                    w.am_data_release(r);
                }
            })),
        );
    }
    // Layouts: a named application layout (133 KiB of 1 KiB rows, a rendezvous: UMR or
    // packed over rc_verbs), received packed.
    let nl = ucp::dt::apps::named("nas_mg_y:128").map_err(|e| e.to_string())?;
    let dt = ucp::datatype::DtLayout::new(&nl.layout).map_err(|e| e.to_string())?;
    let src = fill(2, nl.buf_len);
    let mut i = 0u64;
    let mut old = [0u8; 8];
    loop {
        let r: R<()> = match (kind, role) {
            ("tag", "a") => p.send(&buf, 1, false),
            ("tag", _) => p.recv(N, 1).map(|v| buf = v),
            // Eager: sends complete locally, so the sender learns of the death from the
            // endpoint's failure (its next send is refused).
            ("eager", "a") => p.send(&buf[..1024], 1, false),
            ("eager", _) => p.recv(1024, 1).map(|_| ()),
            ("layout", "a") => {
                // SAFETY: `src` outlives the send, waited for here.
                let d = Data::Layout(unsafe {
                    ucp::datatype::LayoutBuf::new(
                        src.as_ptr().cast_mut(),
                        std::sync::Arc::clone(&dt),
                    )
                });
                p.w.tag_send(p.ep, &d, 1, sp)
                    .map_err(|e| e.to_string())
                    .and_then(|id| p.wait_ok(id, "layout"))
            }
            ("layout", _) => p.recv(dt.size(), 1).map(|_| ()),
            ("am", "a") => {
                p.w.am_send(p.ep, 1, &[1], &contig(&buf), AmSendParams::default())
                    .map_err(|e| e.to_string())
                    .and_then(|id| p.wait_ok(id, "am"))
            }
            ("stream", "a") => {
                p.w.stream_send(p.ep, &contig(&buf[..65536]), sp)
                    .map_err(|e| e.to_string())
                    .and_then(|id| p.wait_ok(id, "stream"))
            }
            ("stream", _) => {
                match p
                    .w
                    .stream_recv(p.ep, &contig_mut(&mut buf), false, RecvParams::default())
                {
                    Ok(StreamRecv::Done(_)) => Ok(()),
                    Ok(StreamRecv::Pending(id)) => p.wait_ok(Some(id), "stream recv"),
                    Err(e) => Err(e.to_string()),
                }
            }
            ("put" | "get" | "atomic", "a") => {
                let rk = rk.as_ref().ok_or("no key")?;
                let base = rk.bounds().0;
                let id = match kind {
                    "put" => p.w.put(p.ep, &contig(&buf), base, rk, sp),
                    "get" => p.w.get(p.ep, &contig_mut(&mut buf), base, rk, sp),
                    _ => {
                        // SAFETY: `old` outlives the atomic, waited for below.
                        let ob = unsafe { Buf::from_mut_slice(&mut old) };
                        p.w.atomic(p.ep, AtomicOp::Add, 8, 1, 0, base, rk, Some(ob), sp)
                            .map(Some)
                    }
                };
                // A put or get into a same-host peer's mapped memory completes at once,
                // without the worker: progress as an application between operations does,
                // which is where a dead peer is noticed.
                id.map_err(|e| e.to_string())
                    .and_then(|id| p.wait_ok(id, kind))
                    .and_then(|()| p.progress())
            }
            // The passive side of one-sided and AM traffic only progresses.
            _ => p.progress(),
        };
        if let Err(e) = r {
            let Some(t) = third else {
                return Ok(format!("ERR {e}"));
            };
            // The error, at once (its time is measured), then the other peer is served.
            println!("DOWN ERR {e}");
            serve_third(p, t)?;
            return Ok(format!(
                "ERR {e}; then the third peer: {THIRD_TRIPS} round trips and 1 MiB"
            ));
        }
        i += 1;
        if i == 2 {
            println!("READY");
        }
    }
}

/// Atomics under contention: `t` listens and maps a word; each `c` connects, gets the key,
/// and adds with fetch-add and compare-and-swap loops; `t` checks the total.
fn atomics(role: &str, w: Worker) -> R<String> {
    use ucp::AtomicOp;
    const PER: u64 = 300;
    let mut p = Peer {
        w,
        ep: EpHandle(0),
        deadline: Instant::now() + Duration::from_secs(60),
    };
    let clients: usize = std::env::var("RUCX_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(4);
    if role == "t" {
        let at =
            p.w.listen("127.0.0.1:0".parse().unwrap())
                .map_err(|e| e.to_string())?;
        println!("PORT {}", at.port());
        let h = p.w.mem_map(None, 64).map_err(|e| e.to_string())?;
        let blob = p.w.rkey_pack(h).map_err(|e| e.to_string())?;
        let mut eps = Vec::new();
        while eps.len() < clients {
            p.progress().ok();
            if let Some(req) = p.w.poll_conn_request() {
                eps.push(p.w.accept(req).map_err(|e| e.to_string())?);
            }
            if Instant::now() > p.deadline {
                return Err("clients did not connect".into());
            }
        }
        for &ep in &eps {
            p.ep = ep;
            send_blob(&mut p, &blob, 10)?;
        }
        // One "done" per client.
        for _ in 0..clients {
            recv_blob(&mut p, 12)?;
        }
        let mut v = [0u8; 8];
        p.w.mem_read(h, 8, &mut v).map_err(|e| e.to_string())?;
        let total = u64::from_ne_bytes(v);
        let want = clients as u64 * PER * 2;
        if total != want {
            return Err(format!("counter is {total}, expected {want}"));
        }
        for &ep in &eps {
            p.ep = ep;
            p.send(&[], FIN, false)?;
        }
        return Ok(format!("counter {total} after {clients} clients"));
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    let port: u16 = line.trim().parse().map_err(|_| "bad port")?;
    p.ep =
        p.w.ep_connect_sockaddr(std::net::SocketAddr::from(([127, 0, 0, 1], port)))
            .map_err(|e| format!("connect: {e}"))?;
    let blob = recv_blob(&mut p, 10)?;
    let rk = p.w.rkey_unpack(p.ep, &blob).map_err(|e| e.to_string())?;
    let word = rk.bounds().0 + 8;
    let sp = SendParams::default();
    let mut old = [0u8; 8];
    for _ in 0..PER {
        // SAFETY: `old` outlives each atomic, waited for at once.
        let ob = unsafe { Buf::from_mut_slice(&mut old) };
        let id =
            p.w.atomic(p.ep, AtomicOp::Add, 8, 1, 0, word, &rk, Some(ob), sp)
                .map_err(|e| e.to_string())?;
        p.wait_ok(Some(id), "fetch-add")?;
        // Compare-and-swap increment: retry until our compare wins.
        let mut seen = u64::from_ne_bytes(old) + 1;
        loop {
            // SAFETY: as above.
            let ob = unsafe { Buf::from_mut_slice(&mut old) };
            let id =
                p.w.atomic(
                    p.ep,
                    AtomicOp::Cswap,
                    8,
                    seen + 1,
                    seen,
                    word,
                    &rk,
                    Some(ob),
                    sp,
                )
                .map_err(|e| e.to_string())?;
            p.wait_ok(Some(id), "cswap")?;
            let got = u64::from_ne_bytes(old);
            if got == seen {
                break;
            }
            seen = got;
        }
    }
    send_blob(&mut p, b"done", 12)?;
    p.recv(0, FIN)?;
    Ok(format!(
        "{} atomic increments, {} on the device",
        PER * 2,
        p.w.stats().amo_device
    ))
}

fn run(role: &str, scenario: &str) -> R<String> {
    let ctx = ucp::Context::from_env().map_err(|e| e.to_string())?;
    ucs::log::init(ctx.config().log_level.to_filter());
    let w = Worker::new(&ctx).map_err(|e| e.to_string())?;
    if scenario == "atomics" {
        return atomics(role, w);
    }
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
    // A third peer (`RUCX_THIRD`): its address is the next line; one round trip wires it
    // up before the scenario starts (`endless` serves it after its first peer died).
    let third = if std::env::var_os("RUCX_THIRD").is_some() {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        let t = from_hex(line.trim()).ok_or("bad third address")?;
        let t =
            p.w.ep_create(&t)
                .map_err(|e| format!("ep_create third: {e}"))?;
        let first = std::mem::replace(&mut p.ep, t);
        p.send(&[7u8; 8], THIRD_TAG, false)?;
        p.recv(8, THIRD_TAG)?;
        p.ep = first;
        Some(t)
    } else {
        None
    };
    match scenario {
        "pingpong" => pingpong(&mut p, role),
        "stream" => stream(&mut p, role),
        "outstanding" => outstanding(&mut p, role),
        "storm" => storm(&mut p, role),
        "misc" => misc(&mut p, role),
        "iov" => iov(&mut p, role),
        "am" => am(&mut p, role),
        "rma" => rma(&mut p, role),
        "stream_bytes" => stream_bytes(&mut p, role),
        "layouts" => layouts(&mut p, role),
        s if s.starts_with("endless") => endless(
            &mut p,
            role,
            s.strip_prefix("endless_").unwrap_or("tag"),
            third,
        ),
        "echo" => echo(&mut p),
        "queue" => queue(&mut p, role),
        "queue_kill" => queue_kill(&mut p, role),
        s => Err(format!("unknown scenario {s}")),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 || !["a", "b", "t", "c"].contains(&args[1].as_str()) {
        println!("FAIL usage: rucx-ucp-peer <a|b|t|c> <scenario>");
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
