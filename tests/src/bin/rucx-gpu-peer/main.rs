//! A `ucp` peer process for the GPU tests (`tests/tests/gpu.rs`), run on a machine with
//! CUDA devices.
//!
//! `rucx-gpu-peer <a|b> <case>`: prints `ADDR <hex>`, reads the other peer's address on
//! stdin, connects, runs the case and prints `DONE <summary>` (exit 0) or `FAIL <why>`
//! (exit 1). Cases:
//!
//! * `pingpong:<A-MEM>:<B-MEM>:<A-GPU>:<B-GPU>`: every size of `SIZES`, `a` sending from
//!   memory of type A-MEM on its GPU and `b` receiving into B-MEM on its own, `b` sending
//!   it back; both check every byte. MEM is `host`, `cuda`, `cuda-managed` or `cuda-vmm`
//!   (device memory of the virtual memory API, exportable by descriptor, which `cuda_ipc`
//!   shares through a shareable handle instead of a legacy IPC handle).
//! * `ipc_cache`: `a` sends one device buffer three times, then frees it and sends from a
//!   new allocation of the same size (at the same address where the driver reuses it);
//!   `b` checks the data and reports its `cuda_ipc` counters (mappings opened, cache hits,
//!   stale mappings closed).
//! * `queue:<memop|kernel>`: stream-triggered queues on a CUDA stream of GPU 0: each round,
//!   the stream fills a device send buffer (a copy from a host pattern), the round's send
//!   and receive are enqueued, started and waited for on the stream, and the stream copies
//!   the received device buffer back to the host; the host only enqueues and progresses
//!   the worker until the stream is idle. Rounds one at a time, then eight in flight at
//!   once; sizes 8 B, 64 KiB and 4 MiB; every byte checked.
//! * `queue_kill`: `a`'s stream waits on a queue whose receive from `b` never comes; the
//!   test kills `b` after both print `READY`, and `a`'s stream must run on (the completion
//!   counter released with the error): `DONE released <error>`.
//! * `endless`: `a` keeps sending 64 MiB device messages that `b` receives into device
//!   memory; each prints `READY` once traffic flows (the test then kills one), and the
//!   survivor prints `DONE ERR <status>` when its operation fails.
//! * `layouts:<A-MEM>:<B-MEM>:<A-GPU>:<B-GPU>`: noncontiguous data, a different layout
//!   on each side, both ways, every byte checked (see `layouts.rs`).
//! * `layout_ops:<A-MEM>:<B-MEM>:<A-GPU>:<B-GPU>`: layouts through put, get, active
//!   messages and the stream API, every byte checked (see `ops.rs`).
#![allow(unsafe_code)] // describes its buffers to ucp, as an application does

mod layouts;
mod ops;

use std::io::BufRead;
use std::time::{Duration, Instant};

use rucx_tests::{from_hex, to_hex};
use ucp::{Buf, Data, EpHandle, RecvParams, ReqId, SendParams, Worker};
use ucs::cuda::vmm::VmmAlloc;
use ucs::cuda::DeviceAlloc;
use ucs::memtype::MemoryType;
use ucs::Status;

const SIZES: &[usize] = &[
    1,
    8,
    4095,
    8192,
    8300,
    65536,
    100_000,
    262_145,
    1 << 20,
    4 << 20,
    64 << 20,
];

fn byte(seq: u64, i: usize) -> u8 {
    (seq.wrapping_mul(131) as usize ^ i.wrapping_mul(7) ^ (i >> 13)) as u8
}

/// A message buffer of some memory type.
enum Mem {
    Host(Vec<u8>),
    Device(DeviceAlloc),
    Vmm(VmmAlloc),
}

impl Mem {
    fn new(mem: MemoryType, dev: i32, len: usize) -> Result<Mem, String> {
        match mem {
            MemoryType::Host => Ok(Mem::Host(vec![0; len])),
            _ => DeviceAlloc::new(dev, len, mem == MemoryType::CudaManaged)
                .map(Mem::Device)
                .map_err(|e| format!("allocating {len} bytes of {} on GPU {dev}: {e}", mem.name())),
        }
    }

    fn ptr(&mut self) -> *mut u8 {
        match self {
            Mem::Host(v) => v.as_mut_ptr(),
            Mem::Device(a) => a.ptr() as *mut u8,
            Mem::Vmm(a) => a.ptr() as *mut u8,
        }
    }

    fn mem_type(&mut self) -> MemoryType {
        ucs::memtype::mem_type(self.ptr())
    }

    /// The first `n` bytes as `ucp` data.
    fn data(&mut self, n: usize) -> Data {
        // SAFETY: the buffer outlives every operation on it (each case waits for its
        // requests before touching or dropping the buffer).
        Data::Contig(unsafe { Buf::from_raw(self.ptr(), n) })
    }

    fn write(&mut self, src: &[u8]) {
        let t = self.mem_type();
        // SAFETY: the buffer holds at least src.len() bytes; no operation is in flight.
        unsafe { ucs::memtype::copy(self.ptr(), t, src.as_ptr(), MemoryType::Host, src.len()) }
            .expect("fill");
    }

    fn read(&mut self, n: usize) -> Vec<u8> {
        let mut v = vec![0u8; n];
        let t = self.mem_type();
        // SAFETY: as for write.
        unsafe { ucs::memtype::copy(v.as_mut_ptr(), MemoryType::Host, self.ptr(), t, n) }
            .expect("read back");
        v
    }

    fn fill(&mut self, seq: u64, n: usize) {
        let v: Vec<u8> = (0..n).map(|i| byte(seq, i)).collect();
        self.write(&v);
    }

    fn check(&mut self, seq: u64, n: usize) -> Result<(), String> {
        let v = self.read(n);
        match v.iter().enumerate().find(|(i, &b)| b != byte(seq, *i)) {
            None => Ok(()),
            Some((i, b)) => Err(format!(
                "message {seq} ({n} bytes): byte {i} is {b:#x}, expected {:#x}",
                byte(seq, i)
            )),
        }
    }
}

struct Peer {
    w: Worker,
    ep: EpHandle,
}

impl Peer {
    fn wait(&mut self, id: Option<ReqId>, what: &str, limit: Duration) -> Result<(), String> {
        let Some(id) = id else { return Ok(()) };
        let start = Instant::now();
        loop {
            if let Some((s, _)) = self.w.request_test(id) {
                return if s == Status::Ok {
                    Ok(())
                } else {
                    Err(format!("{what}: {s}"))
                };
            }
            self.w.progress();
            if let Some((_, s)) = self.w.poll_ep_error() {
                return Err(format!("{what}: the endpoint failed: {s}"));
            }
            if start.elapsed() > limit {
                return Err(format!("{what}: not done after {limit:?}"));
            }
        }
    }

    /// Waits (60 s at most) for a receive, and returns the length its message had.
    fn wait_len(&mut self, id: ReqId, what: &str) -> Result<Option<usize>, String> {
        let start = Instant::now();
        loop {
            if let Some((s, info)) = self.w.request_test(id) {
                return if s == Status::Ok {
                    Ok(info.map(|i| i.length))
                } else {
                    Err(format!("{what}: {s}"))
                };
            }
            self.w.progress();
            if let Some((_, s)) = self.w.poll_ep_error() {
                return Err(format!("{what}: the endpoint failed: {s}"));
            }
            if start.elapsed() > Duration::from_secs(60) {
                return Err(format!("{what}: not done after 60 s"));
            }
        }
    }

    fn send(&mut self, m: &mut Mem, n: usize, tag: u64) -> Result<(), String> {
        let d = m.data(n);
        let id = self
            .w
            .tag_send(self.ep, &d, tag, SendParams::default())
            .map_err(|e| format!("send {n}: {e}"))?;
        self.wait(id, &format!("send of {n} bytes"), Duration::from_secs(60))
    }

    fn recv(&mut self, m: &mut Mem, n: usize, tag: u64) -> Result<(), String> {
        let d = m.data(n);
        let id = self
            .w
            .tag_recv(&d, tag, u64::MAX, RecvParams::default())
            .map_err(|e| format!("recv {n}: {e}"))?;
        self.wait(
            Some(id),
            &format!("receive of {n} bytes"),
            Duration::from_secs(60),
        )
    }
}

fn parse_mem(s: &str) -> Result<MemoryType, String> {
    MemoryType::parse(s).ok_or_else(|| format!("unknown memory type {s}"))
}

fn pingpong(p: &mut Peer, a: bool, spec: &[&str]) -> Result<String, String> {
    let [am, bm, ad, bd] = spec else {
        return Err("pingpong:<a-mem>:<b-mem>:<a-gpu>:<b-gpu>".into());
    };
    let (mem, dev) = if a { (am, ad) } else { (bm, bd) };
    let dev: i32 = dev.parse().map_err(|_| format!("bad GPU {dev}"))?;
    let max = *SIZES.iter().max().unwrap_or(&0);
    let mut buf = if *mem == "cuda-vmm" {
        Mem::Vmm(VmmAlloc::new(dev, max).map_err(|e| format!("cuMemCreate of {max} bytes: {e}"))?)
    } else {
        Mem::new(parse_mem(mem)?, dev, max)?
    };
    let t0 = Instant::now();
    for (k, &n) in SIZES.iter().enumerate() {
        let seq = k as u64 * 2;
        if a {
            buf.fill(seq, n);
            p.send(&mut buf, n, seq)?;
            buf.write(&vec![0u8; n]);
            p.recv(&mut buf, n, seq + 1)?;
            buf.check(seq, n)?;
        } else {
            p.recv(&mut buf, n, seq)?;
            buf.check(seq, n)?;
            p.send(&mut buf, n, seq + 1)?;
        }
    }
    let st = p.w.stats();
    Ok(format!(
        "{} sizes up to {max} bytes in {:.2} s; rndv_device {}, eager_bcopy {}, rndv_am {}, rndv_staged {}; {:?}",
        SIZES.len(),
        t0.elapsed().as_secs_f64(),
        st.rndv_device,
        st.eager_bcopy,
        st.rndv_am,
        st.rndv_staged,
        p.w.transport_counters()
    ))
}

/// Three 1 MiB device messages from `a` to `b`, then both free their buffers and allocate
/// again, and a fourth. Whichever side makes the copies (the one with the smaller worker id,
/// see `docs/gpu.md`) maps the other's allocation once, serves the next two from its cache,
/// and maps the new allocation for the fourth, closing the stale one where the new
/// allocation came at the old address. Both report whether theirs did, and their
/// `cuda_ipc` counters.
fn ipc_cache(p: &mut Peer, a: bool) -> Result<String, String> {
    const N: usize = 1 << 20;
    let mut m1 = Mem::new(MemoryType::Cuda, 0, N)?;
    let first = m1.ptr() as u64;
    for i in 0..3 {
        if a {
            m1.fill(i, N);
            p.send(&mut m1, N, i)?;
        } else {
            p.recv(&mut m1, N, i)?;
            m1.check(i, N)?;
        }
    }
    drop(m1);
    let mut m2 = Mem::new(MemoryType::Cuda, 0, N)?;
    let same = m2.ptr() as u64 == first;
    if a {
        m2.fill(99, N);
        p.send(&mut m2, N, 3)?;
    } else {
        p.recv(&mut m2, N, 3)?;
        m2.check(99, N)?;
    }
    let mut done = Mem::new(MemoryType::Host, 0, 8)?;
    if a {
        p.recv(&mut done, 8, 100)?;
    } else {
        p.send(&mut done, 8, 100)?;
    }
    let c: Vec<(&str, u64)> =
        p.w.transport_counters()
            .into_iter()
            .filter(|(tl, _)| *tl == "cuda_ipc")
            .flat_map(|(_, c)| c)
            .collect();
    Ok(format!(
        "reallocated at the same address: {same}; counters {c:?}"
    ))
}

/// Progresses until `stream` is idle, for at most `limit`.
fn drain(
    p: &mut Peer,
    stream: &ucs::cuda::StreamRef,
    q: ucp::QueueId,
    limit: Duration,
) -> Result<(), String> {
    let t = Instant::now();
    while !stream.idle().map_err(|e| format!("stream: {e}"))? {
        p.w.progress();
        if t.elapsed() > limit {
            return Err(format!(
                "stream still busy after {limit:?}: {:?}",
                p.w.queue_query(q)
            ));
        }
    }
    Ok(())
}

fn queue(p: &mut Peer, a: bool, spec: &[&str]) -> Result<String, String> {
    use ucp::{QueueParams, QueueStream, TriggerKind};
    let trigger = match spec {
        ["kernel"] => TriggerKind::Kernel,
        ["memop"] | [] => TriggerKind::MemOp,
        _ => return Err("queue:<memop|kernel>".into()),
    };
    let d = ucs::cuda::driver().ok_or("no CUDA driver")?;
    let s = d.stream(0).map_err(|e| format!("stream: {e}"))?;
    let stream = ucs::cuda::StreamRef::of(&s);
    let q =
        p.w.queue_create(QueueParams {
            stream: QueueStream::Cuda { stream, trigger },
            counter_base: u32::MAX - 5, // the counters wrap during the run
        })
        .map_err(|e| format!("queue_create: {e}"))?;
    const SIZES: [usize; 3] = [8, 64 << 10, 4 << 20];
    const DEPTH: usize = 8;
    let max = SIZES[2];
    let mut sends: Vec<Mem> = (0..DEPTH)
        .map(|_| Mem::new(MemoryType::Cuda, 0, max))
        .collect::<Result<_, _>>()?;
    let mut recvs: Vec<Mem> = (0..DEPTH)
        .map(|_| Mem::new(MemoryType::Cuda, 0, max))
        .collect::<Result<_, _>>()?;
    // Pinned host memory: an asynchronous copy from or to pageable memory may block the
    // host until the stream reaches it, and the stream waits for this host to progress.
    let pinned = || ucs::cuda::PinnedBuf::take(max).map_err(|e| format!("pinned: {e}"));
    let mut pats: Vec<ucs::cuda::PinnedBuf> =
        (0..DEPTH).map(|_| pinned()).collect::<Result<_, _>>()?;
    let mut backs: Vec<ucs::cuda::PinnedBuf> =
        (0..DEPTH).map(|_| pinned()).collect::<Result<_, _>>()?;
    let (me, other) = if a { (0u64, 1u64) } else { (1, 0) };
    let mut rounds = 0;
    // Phase 1: one round at a time. Phase 2: DEPTH rounds queued before any runs.
    for (phase, per) in [(0u64, 1usize), (1, DEPTH)] {
        for wave in 0..6u64 {
            for k in 0..per {
                let r = 1000 * phase + 100 * wave + k as u64;
                let n = SIZES[(r % 3) as usize];
                for (i, b) in pats[k].as_mut_slice()[..n].iter_mut().enumerate() {
                    *b = byte(r * 2 + me, i);
                }
                // SAFETY: the pattern and the device buffer outlive the stream's copy
                // (drained below before either changes).
                unsafe {
                    stream.copy(sends[k].ptr() as u64, pats[k].as_slice().as_ptr() as u64, n)
                }
                .map_err(|e| format!("fill: {e}"))?;
                let (sd, rd) = (sends[k].data(n), recvs[k].data(n));
                p.w.enqueue_recv(q, p.ep, &rd, r * 2 + other, u64::MAX)
                    .map_err(|e| format!("enqueue_recv: {e}"))?;
                p.w.enqueue_send(q, p.ep, &sd, r * 2 + me)
                    .map_err(|e| format!("enqueue_send: {e}"))?;
                p.w.enqueue_start(q).map_err(|e| format!("start: {e}"))?;
                p.w.enqueue_wait(q).map_err(|e| format!("wait: {e}"))?;
                let back = backs[k].as_mut_slice().as_mut_ptr() as u64;
                // SAFETY: as above.
                unsafe { stream.copy(back, recvs[k].ptr() as u64, n) }
                    .map_err(|e| format!("read back: {e}"))?;
            }
            drain(p, &stream, q, Duration::from_secs(30))?;
            for (k, back) in backs.iter().enumerate().take(per) {
                let r = 1000 * phase + 100 * wave + k as u64;
                let n = SIZES[(r % 3) as usize];
                let back = back.as_slice();
                if let Some(i) = (0..n).find(|&i| back[i] != byte(r * 2 + other, i)) {
                    return Err(format!("round {r} ({n} bytes): byte {i} wrong"));
                }
                rounds += 1;
            }
        }
    }
    let info = p.w.queue_query(q).map_err(|e| e.to_string())?;
    if info.completed != 2 * rounds || info.failed != 0 {
        return Err(format!("queue at the end: {info:?}"));
    }
    p.w.queue_destroy(q).map_err(|e| format!("destroy: {e}"))?;
    Ok(format!(
        "{rounds} rounds through a {trigger:?}-triggered queue, counters wrapped"
    ))
}

fn queue_kill(p: &mut Peer, a: bool) -> Result<String, String> {
    use ucp::{QueueParams, QueueStream, TriggerKind};
    let mut b8 = Mem::new(MemoryType::Cuda, 0, 8)?;
    if a {
        p.send(&mut b8, 8, 1)?;
        p.recv(&mut b8, 8, 2)?;
    } else {
        p.recv(&mut b8, 8, 1)?;
        p.send(&mut b8, 8, 2)?;
        println!("READY");
        loop {
            p.w.progress();
        }
    }
    let d = ucs::cuda::driver().ok_or("no CUDA driver")?;
    let s = d.stream(0).map_err(|e| format!("stream: {e}"))?;
    let stream = ucs::cuda::StreamRef::of(&s);
    let q =
        p.w.queue_create(QueueParams {
            stream: QueueStream::Cuda {
                stream,
                trigger: TriggerKind::MemOp,
            },
            counter_base: 0,
        })
        .map_err(|e| format!("queue_create: {e}"))?;
    let mut r = Mem::new(MemoryType::Cuda, 0, 1 << 20)?;
    let rd = r.data(1 << 20);
    p.w.enqueue_recv(q, p.ep, &rd, 3, u64::MAX)
        .map_err(|e| e.to_string())?;
    p.w.enqueue_start(q).map_err(|e| e.to_string())?;
    p.w.enqueue_wait(q).map_err(|e| e.to_string())?;
    stream
        .memset(r.ptr() as u64, 0, 8)
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(300) {
        p.w.progress();
    }
    if stream.idle().map_err(|e| e.to_string())? {
        return Err("the stream ran past a wait whose receive never came".into());
    }
    println!("READY");
    let t = Instant::now();
    drain(p, &stream, q, Duration::from_secs(10))?;
    let info = p.w.queue_query(q).map_err(|e| e.to_string())?;
    match (info.error, info.completed) {
        (Some(e), 1) => Ok(format!("released {e} after {} ms", t.elapsed().as_millis())),
        _ => Err(format!("after the peer died: {info:?}")),
    }
}

fn endless(p: &mut Peer, a: bool) -> Result<String, String> {
    const N: usize = 64 << 20;
    let mut buf = Mem::new(MemoryType::Cuda, 0, N)?;
    let mut i = 0u64;
    loop {
        let r = if a {
            p.send(&mut buf, N, i)
        } else {
            p.recv(&mut buf, N, i)
        };
        if let Err(e) = r {
            return Ok(format!("ERR {e}"));
        }
        if i == 2 {
            println!("READY");
        }
        i += 1;
    }
}

/// With `RUCX_PEER_SEGV_TRACE=1`: a crash prints a backtrace (for debugging on machines
/// without a debugger; not async-signal-safe, which a dying process can afford).
fn trace_crashes() {
    if std::env::var_os("RUCX_PEER_SEGV_TRACE").is_none() {
        return;
    }
    extern "C" fn on_segv(sig: libc::c_int) {
        eprintln!(
            "rucx-gpu-peer: signal {sig}\n{}",
            std::backtrace::Backtrace::force_capture()
        );
        std::process::exit(139);
    }
    // SAFETY: installs a handler for fatal signals of this test program.
    unsafe {
        libc::signal(libc::SIGSEGV, on_segv as *const () as libc::sighandler_t);
        libc::signal(libc::SIGBUS, on_segv as *const () as libc::sighandler_t);
    }
}

fn main() {
    trace_crashes();
    ucs::log::init(match std::env::var("UCX_LOG_LEVEL").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        _ => log::LevelFilter::Warn,
    });
    let mut args = std::env::args().skip(1);
    let (Some(role), Some(case)) = (args.next(), args.next()) else {
        println!("FAIL usage: rucx-gpu-peer <a|b> <case>");
        std::process::exit(2);
    };
    let a = role == "a";
    let ctx = ucp::Context::new(ucs::Config::from_env().expect("configuration"));
    let mut w = Worker::new(&ctx).expect("worker");
    println!("ADDR {}", to_hex(w.address()));
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut line)
        .expect("peer address");
    let peer = from_hex(line.trim()).expect("hex address");
    let ep = w.ep_create(&peer).expect("endpoint");
    let mut p = Peer { w, ep };
    let parts: Vec<&str> = case.split(':').collect();
    let r = match parts[0] {
        "pingpong" => pingpong(&mut p, a, &parts[1..]),
        "ipc_cache" => ipc_cache(&mut p, a),
        "endless" => endless(&mut p, a),
        "queue" => queue(&mut p, a, &parts[1..]),
        "queue_kill" => queue_kill(&mut p, a),
        "layouts" => layouts::run(&mut p, a, &parts[1..]),
        "layout_ops" => ops::run(&mut p, a, &parts[1..]),
        other => Err(format!("unknown case {other}")),
    };
    match r {
        Ok(s) => println!("DONE {s}"),
        Err(e) => {
            println!("FAIL {e}");
            std::process::exit(1);
        }
    }
    // Let the peer finish its last receive before this endpoint closes.
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(200) {
        p.w.progress();
    }
}
