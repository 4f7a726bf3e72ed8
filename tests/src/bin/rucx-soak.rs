//! Soak: N processes, all to all, every kind of traffic at once, every message checked.
//!
//!     rucx-soak --procs 8 --per 35000         # about 10 million messages (contrib/soak.sh)
//!     rucx-soak --procs 8 --per 60            # the CI version (tests/tests/soak.rs)
//!
//! Without `--rank` this process is the coordinator: it spawns `--procs` ranks of itself,
//! which find each other through files in a scratch directory (worker addresses, packed
//! keys), connect all to all, and send each peer `--per` messages of each kind:
//!
//! - `tag_eager`: 8 B–4 KiB tag messages; `tag_rndv`: 64–260 KiB (rendezvous);
//! - `layout`: a named application layout (`nas_mg_y:16`) received contiguous;
//! - `am`: active messages of up to 1 KiB with their sequence number in the header;
//! - `rma`: a put of 64 bytes into the peer's region (a ring of `RING` slots per source),
//!   a flush, then a tag notice: the receiver checks the slot holds that put, or a later
//!   one into the same slot (the sender may be a ring ahead of the notices read).
//!
//! Tag sends are plain except every `WINDOW`-th of a stream, which is synchronous (and the
//! RMA notices, all synchronous): eager sends complete locally, and a sender that never
//! waits for its receiver grows the receiver's unexpected queue without bound (a receive
//! for one (source, kind) then scans past every other stream's messages: found by the
//! first long run, 95% of the time in `TagMatcher::post_recv`).
//!
//! Every message carries (source, kind, sequence) and a pattern derived from them; the
//! receiver checks the pattern and that each (source, kind) arrives in order (tag messages
//! from one sender with one tag are not overtaken, as in MPI).
//!
//! The traffic runs in two phases: the first `--warm-percent` (10) of every stream, a
//! quiet point (every rank has sent and received all of the first phase, and waits for the
//! others through files before going on), then the rest, and a second quiet point. At both
//! each rank samples its live heap (a counting global allocator), mappings, descriptors and
//! resident memory (after `malloc_trim`, so that glibc's free lists do not count); the
//! coordinator checks them flat: the live heap within 5% plus 256 KiB, resident memory
//! within 5% plus 4 MiB, mappings within 16 and descriptors within 4; and `/dev/shm` as it
//! was.
//! Prints one `SOAK ...` line and exits non-zero on any failure.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ucp::datatype::{DtLayout, LayoutBuf};
use ucp::{
    AmData, AmSendParams, Buf, Context, Data, EpHandle, RecvParams, ReqId, Rkey, SendParams, Worker,
};
use ucs::Status;

/// Counts the heap bytes live in this process: a leak shows here even where the C
/// library's allocator keeps freed memory resident.
struct Live;

static LIVE: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl std::alloc::GlobalAlloc for Live {
    unsafe fn alloc(&self, l: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: std::alloc::Layout) {
        LIVE.fetch_sub(l.size() as i64, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as i64, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: std::alloc::Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(
            new as i64 - l.size() as i64,
            std::sync::atomic::Ordering::Relaxed,
        );
        // SAFETY: the caller's contract, forwarded.
        unsafe { std::alloc::System.realloc(p, l, new) }
    }
}

#[global_allocator]
static ALLOC: Live = Live;

fn live_bytes() -> f64 {
    LIVE.load(std::sync::atomic::Ordering::Relaxed) as f64
}

/// What a rank holds at a quiet point: nothing in flight, every message of the phase
/// sent and received.
#[derive(Clone, Copy)]
struct Quiet {
    rss: f64,
    fds: f64,
    live: f64,
    maps: f64,
}

extern "C" {
    /// glibc: gives the heap's free memory back to the system.
    fn malloc_trim(pad: usize) -> i32;
}

impl Quiet {
    fn now() -> Quiet {
        // Resident memory is measured after the C library's allocator has given back what
        // it holds free, so that it reflects what the process uses, not its free lists.
        // SAFETY: malloc_trim takes no pointer and only releases free heap pages.
        unsafe { malloc_trim(0) };
        Quiet {
            rss: rss_bytes(),
            fds: fd_count(),
            live: live_bytes(),
            maps: std::fs::read_to_string("/proc/self/maps")
                .map_or(f64::NAN, |m| m.lines().count() as f64),
        }
    }
}

const KINDS: [&str; 5] = ["tag_eager", "tag_rndv", "layout", "am", "rma"];
const K_EAGER: usize = 0;
const K_RNDV: usize = 1;
const K_LAYOUT: usize = 2;
const K_AM: usize = 3;
const K_RMA: usize = 4;
/// Tag kind of the RMA notices.
const K_NOTE: usize = 5;
const AM_ID: u16 = 7;
const WINDOW: usize = 4;
/// Bytes of one put (and of its slot in the target's region).
const SLOT: usize = 64;
/// Slots per source in a rank's region.
const RING: usize = 64;

fn arg(name: &str) -> Option<String> {
    let a: Vec<String> = std::env::args().collect();
    a.iter()
        .position(|x| x == name)
        .and_then(|i| a.get(i + 1).cloned())
}

fn num(name: &str, default: usize) -> usize {
    arg(name).and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn main() {
    let r = match arg("--rank") {
        Some(rank) => rank_main(rank.parse().expect("--rank N")),
        None => coordinate(),
    };
    if let Err(e) = r {
        println!("SOAK FAIL {e}");
        std::process::exit(1);
    }
}

fn shm_entries() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn coordinate() -> Result<(), String> {
    let procs = num("--procs", 8);
    let per = num("--per", 60);
    // A directory of this run's own: files left by an earlier run (killed, with a process
    // id since reused) would hand the ranks addresses of dead processes.
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let dir = std::env::temp_dir().join(format!("rucx-soak-{}-{stamp}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let shm_before = shm_entries();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let start = Instant::now();
    let children: Vec<_> = (0..procs)
        .map(|r| {
            Command::new(&exe)
                .args(["--rank", &r.to_string(), "--procs", &procs.to_string()])
                .args(["--per", &per.to_string()])
                .args(["--warm-percent", &num("--warm-percent", 10).to_string()])
                .arg("--dir")
                .arg(&dir)
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| format!("spawning rank {r}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut failures = Vec::new();
    let mut msgs = 0u64;
    let mut worst_rss = 0.0f64;
    let mut worst_fds = 0i64;
    let mut worst_live = 0.0f64;
    let mut worst_maps = 0i64;
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().find(|l| l.starts_with("RANK")).unwrap_or("");
        if std::env::var_os("RUCX_SOAK_VERBOSE").is_some() {
            eprintln!("rank {r}: {line}");
        }
        if !out.status.success() || !line.starts_with("RANK OK") {
            failures.push(format!("rank {r}: {} {}", out.status, text.trim()));
            continue;
        }
        // RANK OK msgs M rss W E fds W E
        let w: Vec<&str> = line.split_whitespace().collect();
        let field = |k: &str, i: usize| -> f64 {
            w.iter()
                .position(|x| *x == k)
                .and_then(|p| w.get(p + i))
                .and_then(|v| v.parse().ok())
                .unwrap_or(f64::NAN)
        };
        msgs += field("msgs", 1) as u64;
        let (rw, re) = (field("rss", 1), field("rss", 2));
        let (fw, fe) = (field("fds", 1), field("fds", 2));
        let (lw, le) = (field("live", 1), field("live", 2));
        let (mw, me) = (field("maps", 1), field("maps", 2));
        worst_rss = worst_rss.max((re - rw) / rw);
        worst_live = worst_live.max(le - lw);
        worst_fds = worst_fds.max((fe - fw) as i64);
        worst_maps = worst_maps.max((me - mw) as i64);
        // Leaks show in the live heap, mappings and descriptors, and in resident memory
        // (measured after `malloc_trim`). (A missing figure, NaN, is never within its
        // bound.)
        let within = |end: f64, bound: f64| end <= bound;
        if !within(le, lw * 1.05 + 256.0 * 1024.0) {
            failures.push(format!("rank {r}: live heap grew {lw} -> {le} bytes"));
        }
        if !within(fe, fw + 4.0) {
            failures.push(format!("rank {r}: descriptors grew {fw} -> {fe}"));
        }
        if !within(me, mw + 16.0) {
            failures.push(format!("rank {r}: mappings grew {mw} -> {me}"));
        }
        if !within(re, rw * 1.05 + 4.0 * 1024.0 * 1024.0) {
            failures.push(format!("rank {r}: resident memory grew {rw} -> {re} bytes"));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    let shm_after = shm_entries();
    if shm_after != shm_before {
        failures.push(format!(
            "/dev/shm changed: {} entries before, {} after",
            shm_before.len(),
            shm_after.len()
        ));
    }
    if !failures.is_empty() {
        return Err(failures.join("; "));
    }
    println!(
        "SOAK OK procs {procs} messages {msgs} secs {:.1} live_growth_bytes {worst_live} \
         fds_growth {worst_fds} maps_growth {worst_maps} rss_growth {:.3}",
        start.elapsed().as_secs_f64(),
        worst_rss
    );
    Ok(())
}

/// The bytes of message `seq` of `kind` from `src`, `n` long.
fn pattern(src: usize, kind: usize, seq: usize, n: usize) -> Vec<u8> {
    let mut x = (src as u64) << 40 ^ (kind as u64) << 32 ^ seq as u64 ^ 0x9e37_79b9_7f4a_7c15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn size_of(kind: usize, seq: usize) -> usize {
    match kind {
        K_EAGER => 8 + (seq * 37) % 4000,
        K_RNDV => (64 << 10) + (seq * 4099) % (196 << 10),
        K_AM => 1 + (seq * 13) % 1024,
        _ => 64,
    }
}

fn tag(src: usize, kind: usize, seq: usize) -> u64 {
    ((kind as u64) << 56) | ((src as u64) << 32) | seq as u64
}

const TAG_MASK: u64 = 0xffff_ffff_0000_0000;

fn rss_bytes() -> f64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<f64>().ok())
        .map_or(f64::NAN, |pages| pages * 4096.0)
}

fn fd_count() -> f64 {
    std::fs::read_dir("/proc/self/fd").map_or(f64::NAN, |d| d.count() as f64)
}

fn wait_files(dir: &Path, prefix: &str, n: usize, w: &mut Worker) -> Result<Vec<Vec<u8>>, String> {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let got: Vec<Option<Vec<u8>>> = (0..n)
            .map(|r| std::fs::read(dir.join(format!("{prefix}.{r}"))).ok())
            .collect();
        if got.iter().all(Option::is_some) {
            return Ok(got.into_iter().flatten().collect());
        }
        if Instant::now() > deadline {
            return Err(format!("peers' {prefix} files did not all appear"));
        }
        for _ in 0..100 {
            w.progress();
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Writes `name` whole or not at all (a peer never reads half a file).
fn publish(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), String> {
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, bytes).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, dir.join(name)).map_err(|e| e.to_string())
}

/// A receive posted for (source, kind): its buffer lives as long as the request.
struct PostedRecv {
    id: ReqId,
    buf: Vec<u8>,
}

/// A send in flight and the buffer it reads.
struct PostedSend {
    id: ReqId,
    _buf: Vec<u8>,
}

/// The put-flush-notice cycle toward one peer.
enum RmaState {
    Idle,
    Put(Option<ReqId>, Vec<u8>),
    Flush(ReqId),
    Note(Option<ReqId>, Vec<u8>),
}

fn rank_main(me: usize) -> Result<(), String> {
    let procs = num("--procs", 8);
    let per = num("--per", 60);
    let warm_pct = num("--warm-percent", 10);
    let dir = PathBuf::from(arg("--dir").ok_or("--dir")?);
    let ctx = Context::from_env().map_err(|e| e.to_string())?;
    let mut w = Worker::new(&ctx).map_err(|e| e.to_string())?;

    // AM arrivals, checked in the handler: (src, seq) in the header, pattern in the data.
    let am_seen = Arc::new(std::sync::Mutex::new((
        vec![0usize; procs],
        Vec::<String>::new(),
    )));
    let seen = Arc::clone(&am_seen);
    w.am_set_handler(
        AM_ID,
        Some(Box::new(move |_w: &mut Worker, ev: ucp::AmEvent<'_>| {
            let mut g = seen.lock().unwrap_or_else(|e| e.into_inner());
            let h = ev.header;
            if h.len() != 16 {
                g.1.push("AM header of the wrong size".into());
                return;
            }
            let src = u64::from_le_bytes(h[..8].try_into().unwrap_or([0; 8])) as usize;
            let seq = u64::from_le_bytes(h[8..].try_into().unwrap_or([0; 8])) as usize;
            let ok_src = src < g.0.len();
            if !ok_src || g.0[src] != seq {
                g.1.push(format!("AM from {src} out of order: seq {seq}"));
                return;
            }
            g.0[src] += 1;
            match ev.data {
                AmData::Eager(d) if d == pattern(src, K_AM, seq, size_of(K_AM, seq)).as_slice() => {
                }
                _ => g.1.push(format!("AM {seq} from {src}: wrong data")),
            }
        })),
    );

    // The region peers put into: one slot per source and sequence number.
    let region = w
        .mem_map(None, procs * RING * SLOT)
        .map_err(|e| e.to_string())?;
    let (base, _) = w.mem_query(region).map_err(|e| e.to_string())?;
    publish(&dir, &format!("addr.{me}"), w.address())?;
    let addrs = wait_files(&dir, "addr", procs, &mut w)?;
    let mut eps: Vec<Option<EpHandle>> = vec![None; procs];
    for (p, a) in addrs.iter().enumerate() {
        if p != me {
            eps[p] = Some(w.ep_create(a).map_err(|e| format!("ep to {p}: {e}"))?);
        }
    }
    let mut key = w.rkey_pack(region).map_err(|e| e.to_string())?;
    key.extend_from_slice(&base.to_le_bytes());
    publish(&dir, &format!("key.{me}"), &key)?;
    let keys = wait_files(&dir, "key", procs, &mut w)?;
    let mut rkeys: Vec<Option<(Rkey, u64)>> = Vec::new();
    for (p, k) in keys.iter().enumerate() {
        match eps[p] {
            Some(ep) if k.len() > 8 => {
                let (blob, b) = k.split_at(k.len() - 8);
                let rk = w
                    .rkey_unpack(ep, blob)
                    .map_err(|e| format!("key of {p}: {e}"))?;
                rkeys.push(Some((
                    rk,
                    u64::from_le_bytes(b.try_into().unwrap_or([0; 8])),
                )));
            }
            _ => rkeys.push(None),
        }
    }

    let nl = ucp::dt::apps::named("nas_mg_y:16").map_err(|e| e.to_string())?;
    let dt = DtLayout::new(&nl.layout).map_err(|e| e.to_string())?;
    let packed_len = dt.size();

    let peers: Vec<usize> = (0..procs).filter(|&p| p != me).collect();
    // Per peer: sends done and in flight per kind; receives expected per (src, kind).
    let mut sent = vec![[0usize; 6]; procs];
    let mut sends: Vec<[VecDeque<PostedSend>; 6]> =
        (0..procs).map(|_| Default::default()).collect();
    let mut got = vec![[0usize; 6]; procs];
    let mut recvs: Vec<[Option<PostedRecv>; 6]> = (0..procs).map(|_| Default::default()).collect();
    let mut rma: Vec<RmaState> = (0..procs).map(|_| RmaState::Idle).collect();
    let mut errors: Vec<String> = Vec::new();
    let total_mine = peers.len() * KINDS.len() * per * 2;
    // Two phases: up to `warm_pct` of each stream, a quiet point where every rank has
    // sent and received everything of the first phase (a barrier through files keeps the
    // second phase from starting anywhere before every rank has measured), then the rest.
    let mut limit = (per * warm_pct / 100).clamp(1, per);
    let mut warm: Option<Quiet> = None;
    let deadline = Instant::now() + Duration::from_secs(3600);
    let sp = SendParams::default();

    loop {
        // Receives: one posted per (source, tag kind).
        for &p in &peers {
            for k in [K_EAGER, K_RNDV, K_LAYOUT, K_NOTE] {
                if got[p][k] >= limit {
                    continue;
                }
                match &recvs[p][k] {
                    None => {
                        let n = match k {
                            K_LAYOUT => packed_len,
                            K_NOTE => 16,
                            _ => size_of(k, got[p][k]),
                        };
                        let mut buf = vec![0u8; n];
                        // SAFETY: `buf` moves into the PostedRecv kept until the receive
                        // completes; the heap block does not move.
                        let d = Data::Contig(unsafe { Buf::from_mut_slice(&mut buf) });
                        let id = w
                            .tag_recv(&d, tag(p, k, 0), TAG_MASK, RecvParams::default())
                            .map_err(|e| e.to_string())?;
                        recvs[p][k] = Some(PostedRecv { id, buf });
                    }
                    Some(r) => {
                        if let Some((s, info)) = w.request_test(r.id) {
                            let r = recvs[p][k].take().ok_or("receive vanished")?;
                            let seq = got[p][k];
                            let want_tag = tag(p, k, seq);
                            if s != Status::Ok {
                                errors.push(format!("{} {seq} from {p}: {s}", KINDS[k.min(4)]));
                            } else if info.map(|i| i.sender_tag) != Some(want_tag) {
                                errors.push(format!(
                                    "kind {k} from {p}: expected seq {seq}, got tag {:?}",
                                    info.map(|i| i.sender_tag & 0xffff_ffff)
                                ));
                            } else {
                                let ok = match k {
                                    K_LAYOUT => {
                                        let src = pattern(p, k, seq, nl.buf_len);
                                        let mut want = vec![0u8; packed_len];
                                        let _ = ucp::dt::pack(dt.canon(), &src, 0, &mut want);
                                        r.buf == want
                                    }
                                    K_NOTE => {
                                        // The peer's put landed before its notice.
                                        let mut slot = [0u8; SLOT];
                                        let at = (p * RING + seq % RING) * SLOT;
                                        let _ = w.mem_read(region, at, &mut slot);
                                        (seq..per)
                                            .step_by(RING)
                                            .any(|s| slot[..] == pattern(p, K_RMA, s, SLOT)[..])
                                    }
                                    _ => r.buf == pattern(p, k, seq, r.buf.len()),
                                };
                                if !ok {
                                    errors.push(format!("kind {k} seq {seq} from {p}: wrong data"));
                                }
                            }
                            got[p][k] += 1;
                        }
                    }
                }
            }
        }
        // Sends: a window per (peer, kind).
        for &p in &peers {
            let ep = eps[p].ok_or("no endpoint")?;
            for k in [K_EAGER, K_RNDV, K_LAYOUT, K_AM] {
                let q = &mut sends[p][k];
                while let Some(s) = q.front() {
                    match w.request_test(s.id) {
                        Some((st, _)) => {
                            if st != Status::Ok {
                                errors.push(format!("send kind {k} to {p}: {st}"));
                            }
                            q.pop_front();
                        }
                        None => break,
                    }
                }
                while sent[p][k] < limit && q.len() < WINDOW {
                    let seq = sent[p][k];
                    let (buf, d) = match k {
                        K_LAYOUT => {
                            let buf = pattern(me, k, seq, nl.buf_len);
                            // SAFETY: `buf` stays in the send queue until the send completes.
                            let d = Data::Layout(unsafe {
                                LayoutBuf::new(buf.as_ptr().cast_mut(), Arc::clone(&dt))
                            });
                            (buf, d)
                        }
                        _ => {
                            let buf = pattern(me, k, seq, size_of(k, seq));
                            // SAFETY: as above.
                            let d = Data::Contig(unsafe { Buf::from_slice(&buf) });
                            (buf, d)
                        }
                    };
                    let r = if k == K_AM {
                        let mut hdr = (me as u64).to_le_bytes().to_vec();
                        hdr.extend_from_slice(&(seq as u64).to_le_bytes());
                        w.am_send(ep, AM_ID, &hdr, &d, AmSendParams::default())
                    } else {
                        // Eager sends complete locally: every WINDOW-th is synchronous, so
                        // a sender runs at most a few windows ahead of its receiver.
                        let sync = SendParams {
                            sync: seq % WINDOW == WINDOW - 1,
                            ..sp
                        };
                        w.tag_send(ep, &d, tag(me, k, seq), sync)
                    }
                    .map_err(|e| format!("send kind {k} to {p}: {e}"))?;
                    if let Some(id) = r {
                        q.push_back(PostedSend { id, _buf: buf });
                    }
                    sent[p][k] += 1;
                }
            }
            // RMA: put, flush, notice, one at a time per peer.
            let (rk, pbase) = rkeys[p].as_ref().ok_or("no key")?;
            let st = std::mem::replace(&mut rma[p], RmaState::Idle);
            rma[p] = match st {
                RmaState::Idle if sent[p][K_RMA] < limit => {
                    let seq = sent[p][K_RMA];
                    let buf = pattern(me, K_RMA, seq, SLOT);
                    // SAFETY: `buf` is kept in the state until the put completes.
                    let d = Data::Contig(unsafe { Buf::from_slice(&buf) });
                    let r = w
                        .put(
                            ep,
                            &d,
                            pbase + ((me * RING + seq % RING) * SLOT) as u64,
                            rk,
                            sp,
                        )
                        .map_err(|e| format!("put to {p}: {e}"))?;
                    RmaState::Put(r, buf)
                }
                RmaState::Put(Some(id), buf) => match w.request_test(id) {
                    None => RmaState::Put(Some(id), buf),
                    Some((s, _)) if s != Status::Ok => return Err(format!("put to {p}: {s}")),
                    Some(_) => RmaState::Put(None, buf),
                },
                RmaState::Put(None, _) => {
                    RmaState::Flush(w.flush(Some(ep)).map_err(|e| e.to_string())?)
                }
                RmaState::Flush(id) => match w.request_test(id) {
                    None => RmaState::Flush(id),
                    Some(_) => {
                        let seq = sent[p][K_RMA];
                        let buf = seq.to_le_bytes().repeat(2);
                        // SAFETY: `buf` is kept in the state until the notice completes.
                        let d = Data::Contig(unsafe { Buf::from_slice(&buf) });
                        let r = w
                            .tag_send(
                                ep,
                                &d,
                                tag(me, K_NOTE, seq),
                                SendParams { sync: true, ..sp },
                            )
                            .map_err(|e| e.to_string())?;
                        RmaState::Note(r, buf)
                    }
                },
                RmaState::Note(Some(id), buf) => match w.request_test(id) {
                    None => RmaState::Note(Some(id), buf),
                    Some(_) => RmaState::Note(None, buf),
                },
                RmaState::Note(None, _) => {
                    sent[p][K_RMA] += 1;
                    RmaState::Idle
                }
                s => s,
            };
        }
        for _ in 0..8 {
            if w.progress() == 0 {
                break;
            }
        }
        if let Some((_, s)) = w.poll_ep_error() {
            return Err(format!("an endpoint failed: {s}"));
        }
        let am_got = {
            let g = am_seen.lock().unwrap_or_else(|e| e.into_inner());
            errors.extend(g.1.iter().cloned());
            g.0.clone()
        };
        am_seen.lock().unwrap_or_else(|e| e.into_inner()).1.clear();
        if !errors.is_empty() {
            return Err(errors.join("; "));
        }
        let sends_idle = peers
            .iter()
            .all(|&p| sends[p].iter().all(VecDeque::is_empty) && matches!(rma[p], RmaState::Idle));
        let phase_done = sends_idle
            && peers.iter().all(|&p| {
                sent[p][..5].iter().all(|&n| n >= limit)
                    && [K_EAGER, K_RNDV, K_LAYOUT, K_NOTE]
                        .iter()
                        .all(|&k| got[p][k] >= limit)
                    && am_got[p] >= limit
            });
        if phase_done {
            let f = w.flush(None).map_err(|e| e.to_string())?;
            w.wait(f);
            let q = Quiet::now();
            if limit == per {
                // Stay until every rank is done: a peer may still be reading from us.
                publish(&dir, &format!("done.{me}"), b"")?;
                wait_files(&dir, "done", procs, &mut w)?;
                let warm = warm.unwrap_or(q);
                println!(
                    "RANK OK msgs {} rss {} {} fds {} {} live {} {} maps {} {}",
                    total_mine / 2,
                    warm.rss,
                    q.rss,
                    warm.fds,
                    q.fds,
                    warm.live,
                    q.live,
                    warm.maps,
                    q.maps
                );
                return Ok(());
            }
            warm = Some(q);
            publish(&dir, &format!("quiet.{me}"), b"")?;
            wait_files(&dir, "quiet", procs, &mut w)?;
            limit = per;
        }
        if Instant::now() > deadline {
            return Err(format!("timed out in the phase up to {limit} of {per}"));
        }
        // Eight processes share two cores in CI: let the others run.
        std::thread::yield_now();
    }
}
