//! Layout copies on a GPU stream: with `stage`, the part of [`dt::gpu`](super) that touches
//! a device.
//!
//! `copy` moves the packed bytes of one side ([`Side`]: a layout at an address, or dense
//! bytes) into the other's by a [`Method`]: a generated kernel ([`Method::Direct`], also
//! what packing and unpacking are), one 2D copy, or one copy per piece. Compiled kernels
//! are kept per device for the process's life, keyed by the pair of shapes and the word;
//! plans (the generic kernel's piece lists) are kept in device memory per device and pair
//! of layouts, the least recently used dropped beyond [`PLAN_CACHE`]. Without NVRTC the
//! kernel methods fail with `Unsupported` and callers fall back to copies.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use ucs::cuda::{self, nvrtc, DeviceAlloc, Function, Module, StreamRef};
use ucs::{Status, UcsResult};

use super::kernel::{self, BLOCK_THREADS};
use super::model::{self, Case, Choice, Costs, Method, Relation};
use super::{pair_word, Piece, Plan, Shape};
use crate::buf;
use crate::dt::{Canon, Segment};

/// Plans kept in device memory per process.
pub const PLAN_CACHE: usize = 64;
/// Most blocks a kernel is launched with (a grid-stride loop covers the rest).
const GRID_CAP: u32 = 4096;

/// One side of a copy.
#[derive(Clone, Copy, Debug)]
pub enum Side<'a> {
    /// A layout whose origin (offset 0) is at `addr`.
    Layout { addr: u64, dt: &'a Canon },
    /// `len` contiguous bytes at `addr`.
    Dense { addr: u64, len: u64 },
}

impl Side<'_> {
    pub fn size(&self) -> u64 {
        match self {
            Side::Layout { dt, .. } => dt.size(),
            Side::Dense { len, .. } => *len,
        }
    }

    /// The shape, and the address of its first byte.
    fn shape(&self) -> Option<(Shape, u64)> {
        match *self {
            Side::Layout { addr, dt } => {
                let s = Shape::of(dt)?;
                let first = addr.wrapping_add(s.offset as u64);
                Some((s, first))
            }
            Side::Dense { addr, len } => Some((Shape::dense(len), addr)),
        }
    }

    fn segments(&self) -> UcsResult<Vec<Segment>> {
        match self {
            Side::Layout { dt, .. } => dt
                .segments(super::MAX_PLAN_PIECES)
                .map_err(|_| Status::ExceedsLimit),
            Side::Dense { len, .. } => Ok(vec![Segment::new(0, *len)]),
        }
    }

    /// The address of the lowest byte of data (a layout's origin may lie outside its
    /// buffer).
    pub fn first_byte(&self) -> u64 {
        match self {
            Side::Layout { addr, dt } => addr.wrapping_add(dt.bounds().0 as u64),
            Side::Dense { addr, .. } => *addr,
        }
    }

    fn origin(&self) -> u64 {
        match self {
            Side::Layout { addr, .. } | Side::Dense { addr, .. } => *addr,
        }
    }

    /// What names this side's description in the plan cache.
    fn key(&self) -> (u128, u64) {
        match self {
            Side::Layout { dt, .. } => (dt.hash128(), 0),
            Side::Dense { len, .. } => (0, *len),
        }
    }
}

struct Compiled {
    _module: Module,
    f: Function,
}

struct DevPlan {
    mem: DeviceAlloc,
    n: u64,
    last_use: u64,
}

type PlanKey = (i32, (u128, u64), (u128, u64));

#[derive(Default)]
struct Cache {
    strided: HashMap<(i32, Shape, Shape, u32), Arc<Compiled>>,
    plan_fn: HashMap<i32, Arc<Compiled>>,
    plans: HashMap<PlanKey, DevPlan>,
    tick: u64,
    compiled: u64,
    plans_built: u64,
}

fn cache() -> &'static Mutex<Cache> {
    static C: OnceLock<Mutex<Cache>> = OnceLock::new();
    C.get_or_init(Default::default)
}

fn lock() -> std::sync::MutexGuard<'static, Cache> {
    cache().lock().unwrap_or_else(|p| p.into_inner())
}

fn compile(dev: i32, src: &str, name: &str) -> UcsResult<Arc<Compiled>> {
    let d = cuda::driver().ok_or(Status::Unsupported)?;
    let cc = d
        .devices()
        .get(dev as usize)
        .ok_or(Status::InvalidParam)?
        .cc;
    let ptx = nvrtc::compile_verbose(src, cc).map_err(|(s, log)| {
        log::warn!("ucp: compiling a layout kernel failed: {log}");
        s
    })?;
    let module = Module::load_ptx(dev, &ptx)?;
    let f = module.function(name)?;
    Ok(Arc::new(Compiled { _module: module, f }))
}

/// Kernels compiled so far in this process (for tests and statistics).
pub fn kernels_compiled() -> u64 {
    lock().compiled
}

/// Plans built and copied to a device so far in this process (cache misses).
pub fn plans_built() -> u64 {
    lock().plans_built
}

fn strided_fn(dev: i32, src: &Shape, dst: &Shape, word: u32) -> UcsResult<Arc<Compiled>> {
    let key = (dev, src.clone(), dst.clone(), word);
    if let Some(c) = lock().strided.get(&key) {
        return Ok(c.clone());
    }
    let c = compile(dev, &kernel::strided(src, dst, word), kernel::STRIDED_NAME)?;
    let mut g = lock();
    g.compiled += 1;
    Ok(g.strided.entry(key).or_insert(c).clone())
}

fn plan_fn(dev: i32) -> UcsResult<Arc<Compiled>> {
    if let Some(c) = lock().plan_fn.get(&dev) {
        return Ok(c.clone());
    }
    let c = compile(dev, kernel::PLAN_SOURCE, kernel::PLAN_NAME)?;
    let mut g = lock();
    g.compiled += 1;
    Ok(g.plan_fn.entry(dev).or_insert(c).clone())
}

/// The device address and length of the plan for `src` → `dst` on `dev`, built and copied
/// to the device on first use.
fn device_plan(dev: i32, src: &Side, dst: &Side) -> UcsResult<(u64, u64)> {
    let key = (dev, src.key(), dst.key());
    {
        let mut g = lock();
        g.tick += 1;
        let t = g.tick;
        if let Some(p) = g.plans.get_mut(&key) {
            p.last_use = t;
            return Ok((p.mem.ptr(), p.n));
        }
    }
    let plan =
        Plan::from_segments(&src.segments()?, &dst.segments()?).ok_or(Status::InvalidParam)?;
    let n = plan.pieces.len();
    let bytes = n * std::mem::size_of::<Piece>();
    let mem = DeviceAlloc::new(dev, bytes.max(1), false)?;
    if n > 0 {
        let d = cuda::driver().ok_or(Status::Unsupported)?;
        d.copy(mem.ptr(), plan.pieces.as_ptr() as u64, bytes)?;
    }
    let mut g = lock();
    g.plans_built += 1;
    if g.plans.len() >= PLAN_CACHE {
        if let Some(old) = g
            .plans
            .iter()
            .min_by_key(|(_, p)| p.last_use)
            .map(|(k, _)| *k)
        {
            // Freeing device memory waits for the kernels that may still read it.
            g.plans.remove(&old);
        }
    }
    let t = g.tick;
    let p = g.plans.entry(key).or_insert(DevPlan {
        mem,
        n: n as u64,
        last_use: t,
    });
    Ok((p.mem.ptr(), p.n))
}

/// Queues on `stream` the move of `src`'s packed bytes into `dst`'s by `method`. The two
/// sides hold the same number of bytes; both are reachable from the stream's device, and
/// are memory of a posted operation or Rucx's own, kept until the stream has run this
/// (the contract of `buf::gpu_launch`).
pub(crate) fn copy(stream: &StreamRef, src: &Side, dst: &Side, method: Method) -> UcsResult<()> {
    if src.size() != dst.size() {
        return Err(Status::MessageTruncated);
    }
    if src.size() == 0 {
        return Ok(());
    }
    let dev = stream.device();
    match method {
        Method::Direct | Method::PackUnpack => {
            if let (Some((ss, sa)), Some((ds, da))) = (src.shape(), dst.shape()) {
                let word = pair_word(&ss, sa, &ds, da);
                let f = strided_fn(dev, &ss, &ds, word)?;
                let n = ss.size() / word as u64;
                let grid = kernel::grid_for(n, GRID_CAP);
                return buf::gpu_launch(stream, &f.f, grid, BLOCK_THREADS, &mut [sa, da, n]);
            }
            let f = plan_fn(dev)?;
            let (p, np) = device_plan(dev, src, dst)?;
            // A warp per piece.
            let grid = kernel::grid_for(np.saturating_mul(32), GRID_CAP);
            buf::gpu_launch(
                stream,
                &f.f,
                grid,
                BLOCK_THREADS,
                &mut [src.origin(), dst.origin(), p, np],
            )
        }
        Method::CopyEngine => {
            let (w, h, sp, dp, sa, da) = box_of(src, dst).ok_or(Status::Unsupported)?;
            buf::gpu_copy_2d(stream, (da, dp), (sa, sp), w, h)
        }
        Method::PerBlock => {
            let plan = Plan::from_segments(&src.segments()?, &dst.segments()?)
                .ok_or(Status::InvalidParam)?;
            let (so, dso) = (src.origin(), dst.origin());
            for p in &plan.pieces {
                buf::gpu_copy(
                    stream,
                    dso.wrapping_add(p.dst as u64),
                    so.wrapping_add(p.src as u64),
                    p.len as usize,
                )?;
            }
            Ok(())
        }
    }
}

/// `(width, rows, src pitch, dst pitch, src first byte, dst first byte)` when the pair is
/// one 2D copy: each side dense or one level of blocks of the same width.
fn box_of(src: &Side, dst: &Side) -> Option<(usize, usize, usize, usize, u64, u64)> {
    let (ss, sa) = src.shape()?;
    let (ds, da) = dst.shape()?;
    let row = |s: &Shape| -> Option<(u64, u64, Option<i64>)> {
        match s.levels.as_slice() {
            [] => Some((s.block, 1, None)),
            [(c, st)] if *st > 0 => Some((s.block, *c, Some(*st))),
            _ => None,
        }
    };
    let (sw, sh, sst) = row(&ss)?;
    let (dw, dh, dst_) = row(&ds)?;
    // A dense side is cut into rows of the other side's width.
    let (w, h) = match (sst, dst_) {
        (Some(_), Some(_)) if sw == dw && sh == dh => (sw, sh),
        (Some(_), None) => (sw, sh),
        (None, Some(_)) => (dw, dh),
        (None, None) => (sw, 1),
        _ => return None,
    };
    let sp = sst.map_or(w, |s| s as u64);
    let dp = dst_.map_or(w, |s| s as u64);
    Some((w as usize, h as usize, sp as usize, dp as usize, sa, da))
}

/// The rows of the 2D copy for this pair, when there is one.
pub fn box_rows(src: &Side, dst: &Side) -> Option<u64> {
    box_of(src, dst).map(|b| b.1 as u64)
}

/// The model's case for this pair.
pub fn case(relation: Relation, src: &Side, dst: &Side) -> Case {
    let pieces = match (src.shape(), dst.shape()) {
        (Some((a, _)), Some((b, _))) => a.blocks().max(b.blocks()),
        _ => match (src, dst) {
            (Side::Layout { dt, .. }, Side::Dense { .. })
            | (Side::Dense { .. }, Side::Layout { dt, .. }) => dt.pieces(),
            (Side::Layout { dt: a, .. }, Side::Layout { dt: b, .. }) => a.pieces() + b.pieces(),
            _ => 1,
        },
    };
    let word = match (src.shape(), dst.shape()) {
        (Some((a, sa)), Some((b, da))) => pair_word(&a, sa, &b, da),
        _ => 4,
    };
    Case {
        relation,
        bytes: src.size(),
        pieces,
        word,
        box_rows: box_rows(src, dst),
    }
}

/// The cost terms of `dev` for `relation`: calibrated ones when `rucx-info --calibrate`
/// left them in the cache file ([`costs_file`]), else the defaults. The file is read once
/// per process and resolved per device then, so a transfer asks with no allocation.
pub fn costs(dev: i32, relation: Relation) -> Costs {
    const RELATIONS: [Relation; 3] = [Relation::SameGpu, Relation::PeerGpu, Relation::Staged];
    static PER_DEVICE: OnceLock<Vec<[Costs; 3]>> = OnceLock::new();
    let table = PER_DEVICE.get_or_init(|| {
        let file = load_costs().unwrap_or_default();
        let names: Vec<String> = cuda::driver()
            .map(|d| d.devices().iter().map(|x| x.name.clone()).collect())
            .unwrap_or_default();
        names
            .into_iter()
            .map(|n| {
                RELATIONS.map(|r| {
                    file.get(&(n.clone(), format!("{r:?}")))
                        .copied()
                        .unwrap_or_else(|| Costs::default_for(r))
                })
            })
            .collect()
    });
    let i = RELATIONS.iter().position(|r| *r == relation).unwrap_or(0);
    table
        .get(dev as usize)
        .map_or_else(|| Costs::default_for(relation), |c| c[i])
}

/// Where calibrated costs are kept: `$RUCX_GPU_MODEL`, else
/// `$XDG_CACHE_HOME/rucx/gpu-model.txt` (or `~/.cache/rucx/gpu-model.txt`).
pub fn costs_file() -> Option<std::path::PathBuf> {
    if let Ok(p) = std::env::var("RUCX_GPU_MODEL") {
        return Some(p.into());
    }
    let base = std::env::var("XDG_CACHE_HOME")
        .ok()
        .or_else(|| std::env::var("HOME").ok().map(|h| format!("{h}/.cache")))?;
    Some(format!("{base}/rucx/gpu-model.txt").into())
}

/// One line per GPU and relation: `name<TAB>relation<TAB>launch copy row kernel local copy_bw`.
fn load_costs() -> Option<HashMap<(String, String), Costs>> {
    let text = std::fs::read_to_string(costs_file()?).ok()?;
    let mut m = HashMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let f: Vec<&str> = line.split('\t').collect();
        if f.len() != 3 {
            continue;
        }
        let v: Vec<f64> = f[2]
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        if let [launch_us, copy_us, row_us, kernel_gbps, local_gbps, copy_gbps] = v[..] {
            m.insert(
                (f[0].to_string(), f[1].to_string()),
                Costs {
                    launch_us,
                    copy_us,
                    row_us,
                    kernel_gbps,
                    local_gbps,
                    copy_gbps,
                },
            );
        }
    }
    Some(m)
}

/// Host and total time of packing and unpacking one layout on `dev` in this process
/// (`rucx-info --layout SPEC` on a GPU machine): `[(pack launch, pack with its wait),
/// (unpack launch, unpack with its wait)]`, medians of `n` runs, µs. The launch figure is
/// the host time of queueing the kernel (plan lookup and `cuLaunchKernel`).
pub fn time_layout(dev: i32, dt: &Canon, n: usize) -> UcsResult<[(f64, f64); 2]> {
    let d = cuda::driver().ok_or(Status::Unsupported)?;
    let (lo, hi) = dt.bounds();
    let span = (hi - lo).max(1) as usize;
    let buf = DeviceAlloc::new(dev, span, false)?;
    let dense = DeviceAlloc::new(dev, dt.size().max(1) as usize, false)?;
    let s = d.stream(dev)?;
    let sr = StreamRef::of(&s);
    let layout = Side::Layout {
        addr: buf.ptr().wrapping_sub(lo as u64),
        dt,
    };
    let packed = Side::Dense {
        addr: dense.ptr(),
        len: dt.size(),
    };
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let mut out = [(0.0, 0.0); 2];
    for (k, (src, dst)) in [(&layout, &packed), (&packed, &layout)]
        .into_iter()
        .enumerate()
    {
        // The buffers are ours and outlive every synchronize below.
        copy(&sr, src, dst, Method::Direct)?;
        sr.synchronize()?;
        let (mut launch, mut total) = (Vec::with_capacity(n), Vec::with_capacity(n));
        for _ in 0..n.max(1) {
            let t0 = ucs::time::now_ns();
            copy(&sr, src, dst, Method::Direct)?;
            let t1 = ucs::time::now_ns();
            sr.synchronize()?;
            let t2 = ucs::time::now_ns();
            launch.push((t1 - t0) as f64 / 1e3);
            total.push((t2 - t0) as f64 / 1e3);
        }
        out[k] = (median(&mut launch), median(&mut total));
    }
    Ok(out)
}

/// The methods that apply to this pair, and the model's choice among them (logged at
/// debug level with every prediction: `UCX_LOG_LEVEL=debug` or `RUST_LOG=ucp=debug`).
pub fn choose(
    dev: i32,
    relation: Relation,
    src: &Side,
    dst: &Side,
    allowed: &[Method],
) -> Option<Choice> {
    let c = case(relation, src, dst);
    let k = costs(dev, relation);
    let choice = model::pick(&k, &c, allowed)?;
    log::debug!(
        "ucp: gpu layout {} B, {} pieces, {:?}: {choice}",
        c.bytes,
        c.pieces,
        relation
    );
    Some(choice)
}

/// Measures the cost terms of `dev` (and, with `peer`, of the relation to that GPU) and
/// returns them; `write` also stores them in [`costs_file`] for later processes.
pub fn calibrate(dev: i32, peer: Option<i32>, write: bool) -> UcsResult<Vec<(Relation, Costs)>> {
    let d = cuda::driver().ok_or(Status::Unsupported)?;
    let big = 64usize << 20;
    let a = DeviceAlloc::new(dev, big, false)?;
    let b = DeviceAlloc::new(dev, big, false)?;
    let s = d.stream(dev)?;
    let sr = StreamRef::of(&s);
    // Median of `n` timings of `f` followed by a stream synchronize, µs.
    let time = |n: usize, f: &mut dyn FnMut() -> UcsResult<()>| -> UcsResult<f64> {
        let mut v = Vec::with_capacity(n);
        f()?;
        sr.synchronize()?;
        for _ in 0..n {
            let t0 = ucs::time::now_ns();
            f()?;
            sr.synchronize()?;
            v.push((ucs::time::now_ns() - t0) as f64 / 1e3);
        }
        v.sort_by(f64::total_cmp);
        Ok(v[n / 2])
    };
    let measure = |src: u64, dst: u64| -> UcsResult<Costs> {
        let s16 = Side::Dense { addr: src, len: 16 };
        let d16 = Side::Dense { addr: dst, len: 16 };
        // The buffers are ours and outlive the synchronize in `time`.
        let launch_us = time(21, &mut || copy(&sr, &s16, &d16, Method::Direct))?;
        let copy_us = time(21, &mut || buf::gpu_copy(&sr, dst, src, 8))?;
        let rows = 4096usize;
        let t2d = time(11, &mut || {
            buf::gpu_copy_2d(&sr, (dst, 64), (src, 64), 16, rows)
        })?;
        let row_us = ((t2d - copy_us) / rows as f64).max(0.0);
        let sb = Side::Dense {
            addr: src,
            len: big as u64,
        };
        let db = Side::Dense {
            addr: dst,
            len: big as u64,
        };
        let tk = time(5, &mut || copy(&sr, &sb, &db, Method::Direct))?;
        let tc = time(5, &mut || buf::gpu_copy(&sr, dst, src, big))?;
        Ok(Costs {
            launch_us,
            copy_us,
            row_us,
            kernel_gbps: big as f64 / 1e3 / (tk - launch_us).max(1e-3),
            local_gbps: big as f64 / 1e3 / (tk - launch_us).max(1e-3),
            copy_gbps: big as f64 / 1e3 / (tc - copy_us).max(1e-3),
        })
    };
    let same = measure(a.ptr(), b.ptr())?;
    let mut out = vec![(Relation::SameGpu, same)];
    if let Some(p) = peer {
        d.enable_peer(dev, p)?;
        let c = DeviceAlloc::new(p, big, false)?;
        let mut peer_costs = measure(a.ptr(), c.ptr())?;
        peer_costs.local_gbps = same.local_gbps;
        out.push((Relation::PeerGpu, peer_costs));
    }
    if write {
        if let Some(path) = costs_file() {
            let name = &d.devices()[dev as usize].name;
            let mut text = std::fs::read_to_string(&path).unwrap_or_default();
            let mut lines: Vec<String> = text
                .lines()
                .filter(|l| {
                    !l.starts_with(&format!("{name}\t"))
                        || !out.iter().any(|(r, _)| l.contains(&format!("\t{r:?}\t")))
                })
                .map(str::to_string)
                .collect();
            for (r, k) in &out {
                lines.push(format!(
                    "{name}\t{r:?}\t{:.3} {:.3} {:.5} {:.1} {:.1} {:.1}",
                    k.launch_us, k.copy_us, k.row_us, k.kernel_gbps, k.local_gbps, k.copy_gbps
                ));
            }
            text = lines.join("\n") + "\n";
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            std::fs::write(&path, text).map_err(|_| Status::IoError)?;
        }
    }
    Ok(out)
}
