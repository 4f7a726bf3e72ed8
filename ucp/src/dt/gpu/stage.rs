//! A layout over device memory as the protocols see it when its bytes travel packed: a
//! pack kernel fills a contiguous device scratch buffer before the first byte leaves, and
//! bytes arriving land in the scratch buffer, unpacked by one kernel when the receive
//! completes. The scratch buffer is also what a contiguous device protocol (a `cuda_ipc`
//! get, the staged AM pipeline) reads and writes: "pack → contiguous → unpack".
//!
//! Scratch buffers come from a pool per device (power-of-two classes, up to
//! [`POOL_BYTES`] kept), so a steady stream of messages allocates nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use ucs::cuda::{self, DeviceAlloc, Stream, StreamRef};
use ucs::{Status, UcsResult};

use super::launch::{self, Side};
use super::model::Method;
use crate::buf::LayoutBuf;

/// Device memory kept in the scratch pool (all devices).
pub const POOL_BYTES: usize = 256 << 20;

struct Pool {
    free: Vec<(i32, DeviceAlloc)>,
    kept: usize,
}

fn pool() -> &'static Mutex<Pool> {
    static P: OnceLock<Mutex<Pool>> = OnceLock::new();
    P.get_or_init(|| {
        Mutex::new(Pool {
            free: Vec::new(),
            kept: 0,
        })
    })
}

/// A scratch buffer of at least `len` bytes on `dev`, back to the pool when dropped.
pub(crate) struct Scratch {
    dev: i32,
    mem: Option<DeviceAlloc>,
}

impl Scratch {
    pub(crate) fn take(dev: i32, len: usize) -> UcsResult<Scratch> {
        let class = len.max(4096).next_power_of_two();
        {
            let mut p = pool().lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = p
                .free
                .iter()
                .position(|(d, m)| *d == dev && m.len() == class)
            {
                let (_, m) = p.free.swap_remove(i);
                p.kept -= class;
                return Ok(Scratch { dev, mem: Some(m) });
            }
        }
        Ok(Scratch {
            dev,
            mem: Some(DeviceAlloc::new(dev, class, false)?),
        })
    }

    pub(crate) fn ptr(&self) -> u64 {
        self.mem.as_ref().map_or(0, DeviceAlloc::ptr)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if let Some(m) = self.mem.take() {
            let mut p = pool().lock().unwrap_or_else(|e| e.into_inner());
            if p.kept + m.len() <= POOL_BYTES {
                p.kept += m.len();
                p.free.push((self.dev, m));
            }
        }
    }
}

/// The stream of `dev` that packing and unpacking use (one per device per process).
pub(crate) fn stream(dev: i32) -> UcsResult<StreamRef> {
    static S: OnceLock<Vec<OnceLock<Option<Stream>>>> = OnceLock::new();
    let d = cuda::driver().ok_or(Status::Unsupported)?;
    let all = S.get_or_init(|| d.devices().iter().map(|_| OnceLock::new()).collect());
    all.get(dev as usize)
        .ok_or(Status::InvalidParam)?
        .get_or_init(|| d.stream(dev).ok())
        .as_ref()
        .map(StreamRef::of)
        .ok_or(Status::NoResource)
}

/// Runs `src` → `dst` on `stream` by a kernel, or by copies where no kernel can be
/// compiled (no NVRTC), and waits for it.
pub(crate) fn run_local(stream: &StreamRef, src: &Side, dst: &Side) -> UcsResult<()> {
    if launch::copy(stream, src, dst, Method::Direct).is_err() {
        // No kernel (no NVRTC, or one that did not compile, logged): copies.
        launch::copy(stream, src, dst, Method::PerBlock)?;
    }
    stream.synchronize()
}

/// Packs and unpacks run by this process, and the time the host spent in them (the
/// kernel and the wait for it), for `RUCX_PERFTEST_STATS` and measurements.
static PACKS: [AtomicU64; 4] = [const { AtomicU64::new(0) }; 4];

/// `(packs, ns in packs, unpacks, ns in unpacks)` of this process so far.
pub fn step_times() -> (u64, u64, u64, u64) {
    let l = |i: usize| PACKS[i].load(Ordering::Relaxed);
    (l(0), l(1), l(2), l(3))
}

/// Host time of direct transfers: choosing the method, and queueing the copy.
pub(crate) static DIRECT_NS: [AtomicU64; 3] = [const { AtomicU64::new(0) }; 3];

/// `(direct transfers, ns choosing, ns queueing)` of this process so far.
pub fn direct_times() -> (u64, u64, u64) {
    let l = |i: usize| DIRECT_NS[i].load(Ordering::Relaxed);
    (l(0), l(1), l(2))
}

fn count(unpack: bool, t0: u64) {
    let i = if unpack { 2 } else { 0 };
    PACKS[i].fetch_add(1, Ordering::Relaxed);
    PACKS[i + 1].fetch_add(ucs::time::now_ns().saturating_sub(t0), Ordering::Relaxed);
}

/// A layout over device memory, with its scratch buffer.
pub(crate) struct GpuLayout {
    pub(crate) lb: LayoutBuf,
    pub(crate) dev: i32,
    scratch: Scratch,
    /// The scratch holds the packed bytes (a send, once packed).
    packed: bool,
    /// Bytes were written into the scratch and wait to be unpacked (a receive).
    dirty: bool,
    /// A send whose rendezvous describes the scratch buffer rather than the layout (the
    /// layout's description does not fit one RTS).
    pub(crate) packed_rts: bool,
}

impl GpuLayout {
    /// A send's (`recv` false) or a receive's layout on device `dev`. A receive counts
    /// as written into the scratch buffer until [`direct_done`](Self::direct_done) says
    /// its bytes went straight into the layout.
    pub(crate) fn new(lb: LayoutBuf, dev: i32, recv: bool) -> UcsResult<GpuLayout> {
        let scratch = Scratch::take(dev, lb.dt.size())?;
        Ok(GpuLayout {
            lb,
            dev,
            scratch,
            packed: false,
            dirty: recv,
            packed_rts: false,
        })
    }

    /// The bytes were moved straight into the layout (a direct transfer): nothing to
    /// unpack.
    pub(crate) fn direct_done(&mut self) {
        self.dirty = false;
    }

    pub(crate) fn len(&self) -> usize {
        self.lb.dt.size()
    }

    /// The layout side of a copy (its origin at the user's address).
    pub(crate) fn side(&self) -> Side<'_> {
        Side::Layout {
            addr: self.lb.origin_addr,
            dt: self.lb.dt.canon(),
        }
    }

    fn scratch_side(&self) -> Side<'static> {
        Side::Dense {
            addr: self.scratch.ptr(),
            len: self.len() as u64,
        }
    }

    /// Packs the layout into the scratch buffer (once).
    pub(crate) fn pack_all(&mut self) -> UcsResult<()> {
        if !self.packed {
            let t0 = ucs::time::now_ns();
            let s = stream(self.dev)?;
            run_local(&s, &self.side(), &self.scratch_side())?;
            self.packed = true;
            count(false, t0);
        }
        Ok(())
    }

    /// The scratch buffer's `[off, off + len)` (device memory), clipped to the message.
    pub(crate) fn scratch_range(&self, off: usize, len: usize) -> (u64, usize) {
        let n = len.min(self.len().saturating_sub(off));
        (self.scratch.ptr() + off as u64, n)
    }

    /// Unpacks the `len` bytes a receive wrote into the scratch buffer (once). A message
    /// shorter than the layout fills the layout's first `len` packed bytes only (as MPI
    /// fills a receive of a larger count), piece by piece.
    pub(crate) fn finish_recv(&mut self, len: usize) -> UcsResult<()> {
        if !self.dirty {
            return Ok(());
        }
        self.dirty = false;
        let t0 = ucs::time::now_ns();
        let s = stream(self.dev)?;
        let n = len.min(self.len());
        if n == self.len() {
            run_local(&s, &self.scratch_side(), &self.side())?;
            count(true, t0);
            return Ok(());
        }
        let (span, scratch) = (self.lb.span.addr(), self.scratch.ptr());
        let mut r = Ok(());
        self.lb.walk(0, n, |at, pos, l| {
            if r.is_ok() {
                r = crate::buf::gpu_copy(&s, span + at as u64, scratch + pos as u64, l);
            }
        })?;
        r?;
        s.synchronize()?;
        count(true, t0);
        Ok(())
    }
}
