//! Faces: the nearest-neighbour pattern of "Stream-triggered MPI" (after CORAL-2 Nekbone),
//! on GPUs, between processes. Run through `contrib/bench/faces.sh`.
//!
//! `rucx-faces --ptx faces.ptx --grid PX,PY,PZ [--gpus G] [--n N] [--work W] [--iters I]
//! [--rounds R]` starts PX·PY·PZ processes (itself again, one per rank, on GPU `rank % G`).
//! Each rank owns an N³ block of 32-bit integers in device memory and exchanges with every
//! neighbour that exists (faces, edges and corners: up to 26; none across the outer
//! boundary). One iteration, as in the paper's Faces:
//! 1. kernels pack each neighbour's box (face, edge or corner) of the block;
//! 2. each packed box goes to its neighbour, and the neighbour's comes back, while
//! 3. a kernel does the interior work (W steps of an integer recurrence on every point);
//! 4. kernels add each received box into the block.
//!
//! Variants, each checked against a CPU reference (bit for bit) before it is timed:
//! * `baseline`: the pack kernels, a stream synchronize, tag receives and sends, the
//!   interior kernel, wait for all, the unpack kernels;
//! * `st-memop`: the receives and sends enqueued on a queue bound to the stream, released
//!   by one start (a stream memory operation) after the pack kernels, the interior kernel,
//!   and one stream wait before the unpack kernels; the host never synchronizes, it
//!   enqueues up to two iterations ahead and progresses the worker;
//! * `st-kernel`: the same with trigger kernels instead of stream memory operations;
//! * `st-mixed`: the start by a stream memory operation, the wait by a kernel;
//! * `st-thread`: `st-memop` with a progress thread driving the worker while the main
//!   thread only enqueues;
//! * `st-posted`: `st-memop` with each iteration's receives posted at once during the
//!   iteration before, after its start (`enqueue_recv_posted`), into the other of two
//!   receive buffers, as the paper's Faces pre-posts its receives; `st-posted-thread`:
//!   the same with a progress thread.
//!
//! Every variant receives iteration `i` into receive buffer set `i % 2`.
//!
//! Rank 0 prints, per variant, the median time per iteration over the rounds and its ratio
//! to the baseline.
#![allow(unsafe_code)] // describes device buffers to ucp and passes kernel arguments

use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rucx_tests::{from_hex, to_hex};
use ucp::{
    Buf, Data, EpHandle, QueueId, QueueParams, QueueStream, RecvParams, ReqId, SendParams,
    TriggerKind, Worker,
};
use ucs::cuda::{DeviceAlloc, Function, Module, StreamRef};

type R<T> = Result<T, String>;

#[derive(Clone, Debug)]
struct Opts {
    ptx: PathBuf,
    grid: [usize; 3],
    gpus: usize,
    n: usize,
    work: u32,
    iters: usize,
    rounds: usize,
    check_iters: usize,
}

fn parse() -> R<Opts> {
    let mut o = Opts {
        ptx: PathBuf::new(),
        grid: [2, 1, 1],
        gpus: 1,
        n: 64,
        work: 50,
        iters: 200,
        rounds: 3,
        check_iters: 4,
    };
    let a: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < a.len() {
        let v = a.get(i + 1).ok_or(format!("{} needs a value", a[i]))?;
        let num = |v: &str| v.parse::<usize>().map_err(|_| format!("bad number {v}"));
        match a[i].as_str() {
            "--ptx" => o.ptx = PathBuf::from(v),
            "--grid" => {
                let g: Vec<usize> = v.split(',').map(num).collect::<R<_>>()?;
                o.grid = g.try_into().map_err(|_| "--grid PX,PY,PZ")?;
            }
            "--gpus" => o.gpus = num(v)?.max(1),
            "--n" => o.n = num(v)?.max(2),
            "--work" => o.work = num(v)? as u32,
            "--iters" => o.iters = num(v)?.max(1),
            "--rounds" => o.rounds = num(v)?.max(1),
            other => return Err(format!("unknown option {other}")),
        }
        i += 2;
    }
    Ok(o)
}

/// A neighbour: its rank, our direction to it, and the box of our block it concerns.
#[derive(Clone, Copy, Debug)]
struct Nb {
    rank: usize,
    dir: [i32; 3],
    lo: [usize; 3],
    ext: [usize; 3],
}

impl Nb {
    fn count(&self) -> usize {
        self.ext.iter().product()
    }
}

fn dir_index(d: [i32; 3]) -> u64 {
    ((d[0] + 1) * 9 + (d[1] + 1) * 3 + (d[2] + 1)) as u64
}

fn coords(r: usize, g: [usize; 3]) -> [usize; 3] {
    [r % g[0], (r / g[0]) % g[1], r / (g[0] * g[1])]
}

fn neighbours(r: usize, g: [usize; 3], n: usize) -> Vec<Nb> {
    let c = coords(r, g);
    let mut v = Vec::new();
    for dz in -1..=1i32 {
        for dy in -1..=1i32 {
            for dx in -1..=1i32 {
                let d = [dx, dy, dz];
                if d == [0, 0, 0] {
                    continue;
                }
                let mut nc = [0usize; 3];
                let mut ok = true;
                let (mut lo, mut ext) = ([0usize; 3], [n; 3]);
                for k in 0..3 {
                    let x = c[k] as i64 + d[k] as i64;
                    if x < 0 || x >= g[k] as i64 {
                        ok = false;
                    }
                    nc[k] = x.max(0) as usize;
                    match d[k] {
                        -1 => (lo[k], ext[k]) = (0, 1),
                        1 => (lo[k], ext[k]) = (n - 1, 1),
                        _ => {}
                    }
                }
                if ok {
                    v.push(Nb {
                        rank: nc[0] + g[0] * (nc[1] + g[1] * nc[2]),
                        dir: d,
                        lo,
                        ext,
                    });
                }
            }
        }
    }
    v
}

fn initial(r: usize, n: usize) -> Vec<u32> {
    (0..n * n * n)
        .map(|i| (r as u32).wrapping_mul(1_000_003) ^ (i as u32).wrapping_mul(2_654_435_761))
        .collect()
}

fn step(v: u32, work: u32) -> u32 {
    (0..work).fold(v, |v, _| {
        v.wrapping_mul(1_664_525).wrapping_add(1_013_904_223)
    })
}

fn boxed(u: &[u32], n: usize, nb: &Nb) -> Vec<u32> {
    let mut out = Vec::with_capacity(nb.count());
    for z in 0..nb.ext[2] {
        for y in 0..nb.ext[1] {
            for x in 0..nb.ext[0] {
                out.push(u[((nb.lo[2] + z) * n + nb.lo[1] + y) * n + nb.lo[0] + x]);
            }
        }
    }
    out
}

/// The CPU reference: every rank's block after `iters` iterations; returns rank `me`'s.
fn reference(o: &Opts, me: usize, iters: usize) -> Vec<u32> {
    let np: usize = o.grid.iter().product();
    let n = o.n;
    let mut u: Vec<Vec<u32>> = (0..np).map(|r| initial(r, n)).collect();
    let nbs: Vec<Vec<Nb>> = (0..np).map(|r| neighbours(r, o.grid, n)).collect();
    for _ in 0..iters {
        let packs: Vec<Vec<Vec<u32>>> = (0..np)
            .map(|r| nbs[r].iter().map(|nb| boxed(&u[r], n, nb)).collect())
            .collect();
        for r in 0..np {
            for v in u[r].iter_mut() {
                *v = step(*v, o.work);
            }
            for nb in &nbs[r] {
                let back = [-nb.dir[0], -nb.dir[1], -nb.dir[2]];
                let k = nbs[nb.rank]
                    .iter()
                    .position(|x| x.dir == back)
                    .expect("neighbours are mutual");
                let src = &packs[nb.rank][k];
                let mut i = 0;
                for z in 0..nb.ext[2] {
                    for y in 0..nb.ext[1] {
                        for x in 0..nb.ext[0] {
                            let at = ((nb.lo[2] + z) * n + nb.lo[1] + y) * n + nb.lo[0] + x;
                            u[r][at] = u[r][at].wrapping_add(src[i]);
                            i += 1;
                        }
                    }
                }
            }
        }
    }
    std::mem::take(&mut u[me])
}

/// Host-side timeline of one run (`RUCX_FACES_TRACE=1`): per iteration, when its
/// communication was posted (the baseline) or its first operation fired (ST), and when its
/// last operation finished.
#[derive(Default)]
struct Trace {
    per: u64,
    /// Operations of the queue fired and finished before the run.
    origin: u64,
    posted: Vec<Instant>,
    done: Vec<Instant>,
}

impl Trace {
    fn observe(&mut self, fired: u64, completed: u64) {
        let now = Instant::now();
        let (fired, completed) = (
            fired.saturating_sub(self.origin),
            completed.saturating_sub(self.origin),
        );
        while self.per > 0 && fired > self.per * self.posted.len() as u64 {
            self.posted.push(now);
        }
        while self.per > 0 && completed >= self.per * (self.done.len() as u64 + 1) {
            self.done.push(now);
        }
    }

    /// Medians of posted → done (the exchange as the host sees it) and of done → the next
    /// iteration's post (the GPU work and the stream's hand-offs between exchanges), µs.
    fn summary(&self) -> (f64, f64) {
        let med = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
        };
        let mut period: Vec<f64> = self
            .posted
            .windows(2)
            .map(|w| (w[1] - w[0]).as_secs_f64() * 1e6)
            .collect();
        if !period.is_empty() {
            period.sort_by(|a, b| a.total_cmp(b));
            let n = period.len();
            let mean = period.iter().sum::<f64>() / n as f64;
            println!(
                "trace period: mean {mean:.2} µs, p10 {:.2}, median {:.2}, p90 {:.2}, p99 {:.2}, max {:.2}",
                period[n / 10],
                period[n / 2],
                period[n * 9 / 10],
                period[n * 99 / 100],
                period[n - 1]
            );
        }
        let n = self.posted.len().min(self.done.len());
        let comm = (0..n)
            .map(|i| (self.done[i] - self.posted[i]).as_secs_f64() * 1e6)
            .collect();
        let gap = (0..n.saturating_sub(1))
            .map(|i| (self.posted[i + 1] - self.done[i]).as_secs_f64() * 1e6)
            .collect();
        (med(comm), med(gap))
    }
}

struct Kernels {
    pack: Function,
    unpack: Function,
    interior: Function,
}

struct Rank {
    o: Opts,
    me: usize,
    w: Arc<Mutex<Worker>>,
    eps: Vec<EpHandle>,
    nbs: Vec<Nb>,
    u: DeviceAlloc,
    sends: Vec<DeviceAlloc>,
    /// Two sets of receive buffers: iteration `i` receives into set `i % 2`.
    recvs: [Vec<DeviceAlloc>; 2],
    stream: StreamRef,
    _s: ucs::cuda::Stream,
    k: Kernels,
    trace: Option<std::cell::RefCell<Trace>>,
    /// One queue per trigger kind, made at start-up.
    queues: Vec<(TriggerKind, QueueId)>,
}

fn lock(w: &Mutex<Worker>) -> std::sync::MutexGuard<'_, Worker> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

fn dev_data(a: &DeviceAlloc, n: usize) -> Data {
    // SAFETY: the allocation lives as long as the rank, beyond every operation on it.
    Data::Contig(unsafe { Buf::from_raw(a.ptr() as *mut u8, n) })
}

fn tag(it: usize, d: [i32; 3]) -> u64 {
    ((it as u64) << 8) | dir_index(d)
}

impl Rank {
    fn launch_box(&self, f: &Function, buf: &DeviceAlloc, nb: &Nb) -> R<()> {
        let (mut u, mut b) = (self.u.ptr(), buf.ptr());
        let mut a: [i32; 7] = [
            self.o.n as i32,
            nb.lo[0] as i32,
            nb.lo[1] as i32,
            nb.lo[2] as i32,
            nb.ext[0] as i32,
            nb.ext[1] as i32,
            nb.ext[2] as i32,
        ];
        let mut p: Vec<*mut c_void> = vec![
            std::ptr::addr_of_mut!(u).cast(),
            std::ptr::addr_of_mut!(b).cast(),
        ];
        p.extend(a.iter_mut().map(|x| std::ptr::from_mut(x).cast::<c_void>()));
        let blocks = nb.count().div_ceil(256) as u32;
        // SAFETY: faces_pack/unpack take (u32*, u32*, int n, 3 ints lo, 3 ints ext); the
        // block and the buffer live as long as the rank.
        unsafe {
            self.stream
                .launch_kernel(f, (blocks, 1, 1), (256, 1, 1), &mut p)
        }
        .map_err(|e| format!("kernel launch: {e}"))
    }

    fn interior(&self) -> R<()> {
        let total = self.o.n.pow(3);
        let (mut u, mut t, mut w) = (self.u.ptr(), total as i32, self.o.work as i32);
        let mut p: [*mut c_void; 3] = [
            std::ptr::addr_of_mut!(u).cast(),
            std::ptr::addr_of_mut!(t).cast(),
            std::ptr::addr_of_mut!(w).cast(),
        ];
        let blocks = total.div_ceil(256) as u32;
        // SAFETY: faces_interior takes (u32*, int total, int work); the block lives as long
        // as the rank.
        unsafe {
            self.stream
                .launch_kernel(&self.k.interior, (blocks, 1, 1), (256, 1, 1), &mut p)
        }
        .map_err(|e| format!("kernel launch: {e}"))
    }

    /// `poll` runs after each launch: a host that runs ahead of its stream keeps
    /// progressing the worker between launches (a launch costs microseconds, and a trigger
    /// that lands meanwhile waits for the next progress call).
    fn packs(&self, poll: &dyn Fn()) -> R<()> {
        for (i, nb) in self.nbs.iter().enumerate() {
            self.launch_box(&self.k.pack, &self.sends[i], nb)?;
            poll();
        }
        Ok(())
    }

    fn unpacks(&self, it: usize, poll: &dyn Fn()) -> R<()> {
        for (i, nb) in self.nbs.iter().enumerate() {
            self.launch_box(&self.k.unpack, &self.recvs[it % 2][i], nb)?;
            poll();
        }
        Ok(())
    }

    fn reset(&self) -> R<()> {
        let init = initial(self.me, self.o.n);
        // SAFETY: `init` lives until the stream is synchronized below.
        unsafe {
            self.stream
                .copy(self.u.ptr(), init.as_ptr() as u64, init.len() * 4)
        }
        .map_err(|e| e.to_string())?;
        self.stream.synchronize().map_err(|e| e.to_string())
    }

    fn read_back(&self) -> R<Vec<u32>> {
        let mut v = vec![0u32; self.o.n.pow(3)];
        // SAFETY: `v` lives until the stream is synchronized below.
        unsafe {
            self.stream
                .copy(v.as_mut_ptr() as u64, self.u.ptr(), v.len() * 4)
        }
        .map_err(|e| e.to_string())?;
        self.stream.synchronize().map_err(|e| e.to_string())?;
        Ok(v)
    }

    fn wait_all(&self, ids: &[ReqId]) -> R<()> {
        let mut w = lock(&self.w);
        for &id in ids {
            let t = Instant::now();
            loop {
                if let Some((s, _)) = w.request_test(id) {
                    if s != ucs::Status::Ok {
                        return Err(format!("operation failed: {s}"));
                    }
                    break;
                }
                w.progress();
                if t.elapsed() > Duration::from_secs(30) {
                    return Err("operation not done after 30 s".into());
                }
            }
        }
        Ok(())
    }

    /// All ranks meet (a gather to rank 0 and a release from it).
    fn barrier(&self, seq: u64) -> R<()> {
        let tag = (1u64 << 62) | seq;
        let np = self.eps.len();
        let mut ids = Vec::new();
        let mut w = lock(&self.w);
        if self.me == 0 {
            for _ in 1..np {
                ids.push(
                    w.tag_recv(
                        &Data::Contig(Buf::EMPTY),
                        tag,
                        u64::MAX,
                        RecvParams::default(),
                    )
                    .map_err(|e| e.to_string())?,
                );
            }
        } else {
            ids.extend(
                w.tag_send(
                    self.eps[0],
                    &Data::Contig(Buf::EMPTY),
                    tag,
                    SendParams::default(),
                )
                .map_err(|e| e.to_string())?,
            );
        }
        drop(w);
        self.wait_all(&ids)?;
        ids.clear();
        let mut w = lock(&self.w);
        let tag = tag | (1 << 61);
        if self.me == 0 {
            for r in 1..np {
                ids.extend(
                    w.tag_send(
                        self.eps[r],
                        &Data::Contig(Buf::EMPTY),
                        tag,
                        SendParams::default(),
                    )
                    .map_err(|e| e.to_string())?,
                );
            }
        } else {
            ids.push(
                w.tag_recv(
                    &Data::Contig(Buf::EMPTY),
                    tag,
                    u64::MAX,
                    RecvParams::default(),
                )
                .map_err(|e| e.to_string())?,
            );
        }
        drop(w);
        self.wait_all(&ids)
    }

    fn baseline(&self, iters: usize, it0: usize) -> R<()> {
        for it in it0..it0 + iters {
            self.packs(&|| ())?;
            self.stream.synchronize().map_err(|e| e.to_string())?;
            if let Some(t) = &self.trace {
                t.borrow_mut().posted.push(Instant::now());
            }
            let mut ids = Vec::new();
            {
                let mut w = lock(&self.w);
                for (i, nb) in self.nbs.iter().enumerate() {
                    let back = [-nb.dir[0], -nb.dir[1], -nb.dir[2]];
                    let d = dev_data(&self.recvs[it % 2][i], nb.count() * 4);
                    ids.push(
                        w.tag_recv(&d, tag(it, back), u64::MAX, RecvParams::default())
                            .map_err(|e| e.to_string())?,
                    );
                }
                for (i, nb) in self.nbs.iter().enumerate() {
                    let d = dev_data(&self.sends[i], nb.count() * 4);
                    ids.extend(
                        w.tag_send(
                            self.eps[nb.rank],
                            &d,
                            tag(it, nb.dir),
                            SendParams::default(),
                        )
                        .map_err(|e| e.to_string())?,
                    );
                }
            }
            // The interior work overlaps the exchange.
            self.interior()?;
            self.wait_all(&ids)?;
            if let Some(t) = &self.trace {
                t.borrow_mut().done.push(Instant::now());
            }
            self.unpacks(it, &|| ())?;
        }
        self.stream.synchronize().map_err(|e| e.to_string())
    }

    /// Posts iteration `it`'s receives at once on queue `q` (`st-posted`).
    fn post_recvs(&self, w: &mut Worker, q: QueueId, it: usize) -> R<()> {
        for (i, nb) in self.nbs.iter().enumerate() {
            let back = [-nb.dir[0], -nb.dir[1], -nb.dir[2]];
            let d = dev_data(&self.recvs[it % 2][i], nb.count() * 4);
            w.enqueue_recv_posted(q, self.eps[nb.rank], &d, tag(it, back), u64::MAX)
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// A run of a stream-triggered variant on the rank's queue for `kind` (made once, so
    /// that its pinned counters are not allocated inside the timing), progressed by this
    /// thread or by `pt`; `posted`: receives posted an iteration ahead.
    fn st(
        &self,
        iters: usize,
        it0: usize,
        kind: TriggerKind,
        pt: Option<&ucp::ProgressThread>,
        posted: bool,
    ) -> R<()> {
        let thread = pt.is_some();
        let q = self
            .queues
            .iter()
            .find(|(k, _)| *k == kind)
            .map(|&(_, q)| q)
            .ok_or("no queue of that kind")?;
        let per = 2 * self.nbs.len() as u32;
        // How many iterations the host may enqueue beyond the last finished one
        // (`RUCX_FACES_AHEAD`, default 2).
        let ahead: u32 = std::env::var("RUCX_FACES_AHEAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2);
        let origin = lock(&self.w)
            .queue_query(q)
            .map_err(|e| e.to_string())?
            .completed;
        if let Some(t) = &self.trace {
            let mut t = t.borrow_mut();
            t.per = u64::from(per);
            t.origin = u64::from(origin);
        }
        let poll = || {
            if !thread {
                let mut w = lock(&self.w);
                w.progress();
                self.observe(&w, q);
            }
        };
        // The worker, locked: ahead of the progress thread when there is one.
        let take = || match pt {
            Some(pt) => pt.lock(),
            None => lock(&self.w),
        };
        let (counters, base) = lock(&self.w)
            .queue_counters_shared(q)
            .ok_or("queue counters")?;
        let r = (|| -> R<()> {
            if posted {
                self.post_recvs(&mut take(), q, it0)?;
            }
            for (k, it) in (it0..it0 + iters).enumerate() {
                if !posted {
                    let mut w = take();
                    for (i, nb) in self.nbs.iter().enumerate() {
                        let back = [-nb.dir[0], -nb.dir[1], -nb.dir[2]];
                        let d = dev_data(&self.recvs[it % 2][i], nb.count() * 4);
                        w.enqueue_recv(q, self.eps[nb.rank], &d, tag(it, back), u64::MAX)
                            .map_err(|e| e.to_string())?;
                    }
                }
                self.packs(&poll)?;
                let (start, wait) = {
                    let mut w = take();
                    for (i, nb) in self.nbs.iter().enumerate() {
                        let d = dev_data(&self.sends[i], nb.count() * 4);
                        w.enqueue_send(q, self.eps[nb.rank], &d, tag(it, nb.dir))
                            .map_err(|e| e.to_string())?;
                    }
                    let ops = (
                        w.enqueue_start_deferred(q).map_err(|e| e.to_string())?,
                        w.enqueue_wait_deferred(q).map_err(|e| e.to_string())?,
                    );
                    // The next iteration's receives, counted with its start; they may
                    // take their data at once, into the other buffer set.
                    if posted && k + 1 < iters {
                        self.post_recvs(&mut w, q, it + 1)?;
                    }
                    ops
                };
                // The stream calls, with the worker let go; the interior work between them
                // overlaps the exchange.
                if let Some(start) = start {
                    start.issue().map_err(|e| format!("start: {e}"))?;
                }
                poll();
                self.interior()?;
                poll();
                wait.issue().map_err(|e| format!("wait: {e}"))?;
                self.unpacks(it, &poll)?;
                // Run at most `ahead` iterations ahead of the stream.
                let want = per * (k as u32 + 1).saturating_sub(ahead);
                self.progress_until(q, origin.wrapping_add(want), thread, &counters, base)?;
            }
            let all = origin.wrapping_add(per * iters as u32);
            self.progress_until(q, all, thread, &counters, base)?;
            let t = Instant::now();
            while !self.stream.idle().map_err(|e| e.to_string())? {
                if !thread {
                    lock(&self.w).progress();
                }
                if t.elapsed() > Duration::from_secs(30) {
                    return Err("stream not idle after 30 s".into());
                }
            }
            Ok(())
        })();
        let info = lock(&self.w).queue_query(q).map_err(|e| e.to_string())?;
        r?;
        if info.failed > 0 {
            return Err(format!("queue: {info:?}"));
        }
        Ok(())
    }

    /// Records the run's timeline when tracing (nothing is asked of the worker otherwise).
    fn observe(&self, w: &Worker, q: QueueId) {
        let Some(t) = &self.trace else { return };
        if let Ok(i) = w.queue_query(q) {
            let done = u64::from(i.completed);
            t.borrow_mut().observe(done + i.running as u64, done);
        }
    }

    /// Progresses (or, with a progress thread, watches the completion counter without
    /// the worker) until `done` operations of the queue finished.
    fn progress_until(
        &self,
        q: QueueId,
        done: u32,
        thread: bool,
        counters: &uct::trigger::Counters,
        base: u32,
    ) -> R<()> {
        let t = Instant::now();
        loop {
            if thread {
                let c = counters
                    .completion()
                    .load(std::sync::atomic::Ordering::Acquire)
                    .wrapping_sub(base);
                if uct::trigger::reached(c, done) {
                    return Ok(());
                }
                std::hint::spin_loop();
            } else {
                let mut w = lock(&self.w);
                let c = w.queue_query(q).map_err(|e| e.to_string())?;
                self.observe(&w, q);
                if uct::trigger::reached(c.completed, done) {
                    return Ok(());
                }
                if c.failed > 0 {
                    return Err(format!("queue: {c:?}"));
                }
                w.progress();
            }
            if t.elapsed() > Duration::from_secs(30) {
                return Err(format!("queue stalled at {done} operations"));
            }
        }
    }

    /// The progress thread a variant needs, started before its timing.
    fn prepare(&self, v: &str) -> Option<ucp::ProgressThread> {
        v.ends_with("-thread")
            .then(|| ucp::ProgressThread::spawn(Arc::clone(&self.w)))
    }

    fn run(&self, v: &str, iters: usize, it0: usize, pt: Option<&ucp::ProgressThread>) -> R<()> {
        match v {
            "baseline" => self.baseline(iters, it0),
            "st-memop" => self.st(iters, it0, TriggerKind::MemOp, None, false),
            "st-kernel" => self.st(iters, it0, TriggerKind::Kernel, None, false),
            "st-mixed" => self.st(iters, it0, TriggerKind::Mixed, None, false),
            "st-thread" => self.st(iters, it0, TriggerKind::MemOp, pt, false),
            "st-posted" => self.st(iters, it0, TriggerKind::MemOp, None, true),
            "st-posted-thread" => self.st(iters, it0, TriggerKind::MemOp, pt, true),
            _ => Err(format!("unknown variant {v}")),
        }
    }
}

const VARIANTS: [&str; 7] = [
    "baseline",
    "st-memop",
    "st-kernel",
    "st-mixed",
    "st-thread",
    "st-posted",
    "st-posted-thread",
];

fn rank_main(o: Opts, me: usize, dir: PathBuf) -> R<()> {
    let np: usize = o.grid.iter().product();
    let dev = (me % o.gpus) as i32;
    let d = ucs::cuda::driver().ok_or("no CUDA driver")?;
    if d.devices().len() < o.gpus {
        return Err(format!(
            "{} GPUs asked for, {} here",
            o.gpus,
            d.devices().len()
        ));
    }
    let ptx = std::fs::read_to_string(&o.ptx).map_err(|e| format!("{}: {e}", o.ptx.display()))?;
    let m = Module::load_ptx(dev, &ptx).map_err(|e| format!("loading the PTX: {e}"))?;
    let f = |n: &str| m.function(n).map_err(|e| format!("{n}: {e}"));
    let k = Kernels {
        pack: f("faces_pack")?,
        unpack: f("faces_unpack")?,
        interior: f("faces_interior")?,
    };
    let ctx = ucp::Context::new(ucs::Config::from_env().map_err(|e| e.to_string())?);
    let mut w = Worker::new(&ctx).map_err(|e| e.to_string())?;
    // Addresses through files: write ours, read everyone's.
    let tmp = dir.join(format!("addr.{me}.tmp"));
    std::fs::write(&tmp, to_hex(w.address())).map_err(|e| e.to_string())?;
    std::fs::rename(&tmp, dir.join(format!("addr.{me}"))).map_err(|e| e.to_string())?;
    let mut eps = Vec::new();
    for r in 0..np {
        let p = dir.join(format!("addr.{r}"));
        let t = Instant::now();
        let hex = loop {
            if let Ok(s) = std::fs::read_to_string(&p) {
                break s;
            }
            if t.elapsed() > Duration::from_secs(60) {
                return Err(format!("no address from rank {r}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let a = from_hex(hex.trim()).ok_or("bad address")?;
        eps.push(w.ep_create(&a).map_err(|e| e.to_string())?);
    }
    let nbs = neighbours(me, o.grid, o.n);
    let alloc = |n: usize| DeviceAlloc::new(dev, n, false).map_err(|e| e.to_string());
    let sends = nbs
        .iter()
        .map(|nb| alloc(nb.count() * 4))
        .collect::<R<Vec<_>>>()?;
    let recv_set = || {
        nbs.iter()
            .map(|nb| alloc(nb.count() * 4))
            .collect::<R<Vec<_>>>()
    };
    let recvs = [recv_set()?, recv_set()?];
    let s = d.stream(dev).map_err(|e| e.to_string())?;
    let rank = Rank {
        u: alloc(o.n.pow(3) * 4)?,
        o: o.clone(),
        me,
        w: Arc::new(Mutex::new(w)),
        eps,
        nbs,
        sends,
        recvs,
        stream: StreamRef::of(&s),
        _s: s,
        k,
        trace: std::env::var_os("RUCX_FACES_TRACE").map(|_| Default::default()),
        queues: Vec::new(),
    };
    let mut rank = rank;
    for kind in [TriggerKind::MemOp, TriggerKind::Kernel, TriggerKind::Mixed] {
        let q = lock(&rank.w)
            .queue_create(QueueParams {
                stream: QueueStream::Cuda {
                    stream: rank.stream,
                    trigger: kind,
                },
                counter_base: 0,
            })
            .map_err(|e| format!("queue: {e}"))?;
        rank.queues.push((kind, q));
    }
    let rank = rank;
    let mut bar = 0u64;
    let mut barrier = |r: &Rank| {
        bar += 1;
        r.barrier(bar)
    };
    barrier(&rank)?;
    // Correctness first: every variant from the same start, against the reference.
    let want = reference(&o, me, o.check_iters);
    for v in VARIANTS {
        rank.reset()?;
        barrier(&rank)?;
        let pt = rank.prepare(v);
        rank.run(v, o.check_iters, 0, pt.as_ref())?;
        drop(pt);
        let got = rank.read_back()?;
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            return Err(format!("{v}: element {i} differs from the CPU reference"));
        }
        barrier(&rank)?;
    }
    if me == 0 {
        println!(
            "check: all {} variants equal the CPU reference after {} iterations",
            VARIANTS.len(),
            o.check_iters
        );
    }
    // Then the timings, variants interleaved in each round.
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); VARIANTS.len()];
    let mut it0 = 1000;
    for _ in 0..o.rounds {
        for (vi, v) in VARIANTS.iter().enumerate() {
            let pt = rank.prepare(v);
            rank.run(v, 10, it0, pt.as_ref())?; // warm-up
            it0 += 10;
            barrier(&rank)?;
            if let Some(t) = &rank.trace {
                *t.borrow_mut() = Trace::default();
            }
            let t = Instant::now();
            rank.run(v, o.iters, it0, pt.as_ref())?;
            barrier(&rank)?;
            times[vi].push(t.elapsed().as_secs_f64() * 1e6 / o.iters as f64);
            if let (Some(_), 0, true) = (&rank.trace, me, v.starts_with("st-posted")) {
                // Its receives run from the iteration before: "posted" has no one instant.
                println!("trace {v:10} not traced (receives posted an iteration ahead)");
            } else if let (Some(t), 0) = (&rank.trace, me) {
                let (comm, gap) = t.borrow().summary();
                println!(
                    "trace {v:10} posted → done {comm:7.2} µs, done → next posted {gap:7.2} µs"
                );
            }
            it0 += o.iters;
        }
    }
    if me == 0 {
        let med = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        let base = med(&mut times[0].clone());
        for (vi, v) in VARIANTS.iter().enumerate() {
            let mut t = times[vi].clone();
            let m = med(&mut t);
            println!(
                "{v:10} {m:9.2} µs/iteration (rounds: {}) {:.3}× baseline",
                times[vi]
                    .iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                m / base
            );
        }
    }
    for &(_, q) in &rank.queues {
        lock(&rank.w)
            .queue_destroy(q)
            .map_err(|e| format!("queue destroy: {e}"))?;
    }
    // Leave together, so nobody's endpoints close under a neighbour still working.
    barrier(&rank)?;
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(100) {
        lock(&rank.w).progress();
    }
    Ok(())
}

fn main() {
    ucs::log::init(log::LevelFilter::Warn);
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("rucx-faces: {e}");
            std::process::exit(2);
        }
    };
    if let (Ok(me), Ok(dir)) = (
        std::env::var("RUCX_FACES_RANK"),
        std::env::var("RUCX_FACES_DIR"),
    ) {
        let me: usize = me.parse().unwrap_or(0);
        if let Err(e) = rank_main(o, me, PathBuf::from(dir)) {
            println!("rank {me}: FAIL {e}");
            std::process::exit(1);
        }
        return;
    }
    if ucs::cuda::driver().is_none() {
        println!(
            "SKIPPED: no GPU ({})",
            ucs::cuda::absent_reason().unwrap_or("no CUDA driver")
        );
        return;
    }
    let np: usize = o.grid.iter().product();
    let dir = std::env::temp_dir().join(format!("rucx-faces-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    println!(
        "faces: grid {:?} ({np} processes) on {} GPU(s), block {}³, work {}, {} iterations × {} rounds",
        o.grid, o.gpus, o.n, o.work, o.iters, o.rounds
    );
    let exe = std::env::current_exe().expect("own path");
    let kids: Vec<_> = (0..np)
        .map(|r| {
            std::process::Command::new(&exe)
                .args(std::env::args().skip(1))
                .env("RUCX_FACES_RANK", r.to_string())
                .env("RUCX_FACES_DIR", &dir)
                .spawn()
                .expect("spawn a rank")
        })
        .collect();
    let mut ok = true;
    for mut k in kids {
        ok &= k.wait().map(|s| s.success()).unwrap_or(false);
    }
    let _ = std::fs::remove_dir_all(&dir);
    if !ok {
        println!("faces: FAILED");
        std::process::exit(1);
    }
}
