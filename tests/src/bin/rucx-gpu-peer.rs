//! A `ucp` peer process for the GPU tests (`tests/tests/gpu.rs`), run on a machine with
//! CUDA devices.
//!
//! `rucx-gpu-peer <a|b> <case>`: prints `ADDR <hex>`, reads the other peer's address on
//! stdin, connects, runs the case and prints `DONE <summary>` (exit 0) or `FAIL <why>`
//! (exit 1). Cases:
//!
//! * `pingpong:<A-MEM>:<B-MEM>:<A-GPU>:<B-GPU>`: every size of `SIZES`, `a` sending from
//!   memory of type A-MEM on its GPU and `b` receiving into B-MEM on its own, `b` sending
//!   it back; both check every byte. MEM is `host`, `cuda` or `cuda-managed`.
//! * `ipc_cache`: `a` sends one device buffer three times, then frees it and sends from a
//!   new allocation of the same size (at the same address where the driver reuses it);
//!   `b` checks the data and reports its `cuda_ipc` counters (mappings opened, cache hits,
//!   stale mappings closed).
//! * `endless`: `a` keeps sending 64 MiB device messages that `b` receives into device
//!   memory; each prints `READY` once traffic flows (the test then kills one), and the
//!   survivor prints `DONE ERR <status>` when its operation fails.
#![allow(unsafe_code)] // describes its buffers to ucp, as an application does

use std::io::BufRead;
use std::time::{Duration, Instant};

use rucx_tests::{from_hex, to_hex};
use ucp::{Buf, Data, EpHandle, RecvParams, ReqId, SendParams, Worker};
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
    let mem = parse_mem(mem)?;
    let dev: i32 = dev.parse().map_err(|_| format!("bad GPU {dev}"))?;
    let max = *SIZES.iter().max().unwrap_or(&0);
    let mut buf = Mem::new(mem, dev, max)?;
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
        "{} sizes up to {max} bytes in {:.2} s; rndv_device {}, eager_bcopy {}, rndv_am {}; {:?}",
        SIZES.len(),
        t0.elapsed().as_secs_f64(),
        st.rndv_device,
        st.eager_bcopy,
        st.rndv_am,
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

fn main() {
    ucs::log::init(log::LevelFilter::Warn);
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
