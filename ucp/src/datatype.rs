//! The data of one operation: contiguous, an iov list, or a generic datatype whose pack and
//! unpack callbacks the user supplies (`ucp_dt_create_generic`, as OpenMPI uses it).
//!
//! [`Data`] is what the user describes. The protocols turn it into a `DataState` when an
//! operation starts: it packs any window of the message into a transport buffer and unpacks
//! fragments arriving at any offset, and, for contiguous and iov data, lists the regions
//! for zero-copy transfers. The iov walk remembers where the last access ended, so the
//! fragments of one message, taken in order, cost O(1) each.

use std::sync::Arc;

use smallvec::SmallVec;
use ucs::{Status, UcsResult};
use uct::{Iov, MemoryType};

pub use crate::buf::LayoutBuf;
use crate::buf::{self, Buf};
pub use crate::dt::DtLayout;
use crate::dt::{Cursor, Layout, Segment};

/// User callbacks of a generic datatype. `start_pack`/`start_unpack` begin an operation
/// on `count` elements at `addr`; the returned state is dropped when the operation ends
/// (UCX's `finish`).
pub trait GenericDt: Send + Sync {
    fn start_pack(&self, addr: u64, count: usize) -> Box<dyn PackState>;
    fn start_unpack(&self, addr: u64, count: usize) -> Box<dyn UnpackState>;
}

/// The state of one generic pack.
pub trait PackState: Send {
    /// Bytes the packed message has.
    fn packed_size(&self) -> usize;
    /// Packs the bytes from `offset` of the packed stream into `dst`; returns how many.
    fn pack(&mut self, offset: usize, dst: &mut [u8]) -> usize;
}

/// The state of one generic unpack.
pub trait UnpackState: Send {
    /// Bytes the receive can take.
    fn packed_size(&self) -> usize;
    /// Unpacks `src`, which starts at `offset` of the packed stream.
    fn unpack(&mut self, offset: usize, src: &[u8]) -> Result<(), Status>;
}

/// What an operation sends from or receives into.
#[derive(Clone)]
pub enum Data {
    /// One contiguous buffer.
    Contig(Buf),
    /// The concatenation of the buffers, in order.
    Iov(SmallVec<[Buf; 4]>),
    /// A structured layout (vector, indexed, subarray, struct, ...) over a buffer.
    Layout(LayoutBuf),
    /// `count` elements at `addr`, packed and unpacked by the datatype's callbacks.
    Generic {
        dt: Arc<dyn GenericDt>,
        addr: u64,
        count: usize,
    },
}

impl std::fmt::Debug for Data {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Data::Contig(b) => write!(f, "Contig({b:?})"),
            Data::Iov(v) => write!(f, "Iov({} entries)", v.len()),
            Data::Layout(l) => write!(f, "Layout({} bytes, {:#x})", l.dt.size(), l.dt.hash()),
            Data::Generic { addr, count, .. } => write!(f, "Generic({addr:#x}, {count})"),
        }
    }
}

impl Data {
    /// The datatype class, as protocol selection sees it.
    pub fn class(&self) -> DtClass {
        match self {
            Data::Contig(_) => DtClass::Contig,
            Data::Iov(_) => DtClass::Iov,
            Data::Layout(_) => DtClass::Layout,
            Data::Generic { .. } => DtClass::Generic,
        }
    }

    /// Starts a send: the state that packs this data.
    #[inline]
    pub(crate) fn start_pack(&self) -> DataState {
        match self {
            Data::Contig(b) if b.host_accessible() => DataState::Contig(*b),
            _ => self.start_pack_other(),
        }
    }

    #[inline(never)]
    fn start_pack_other(&self) -> DataState {
        match self {
            Data::Contig(b) => contig_state(*b),
            Data::Iov(v) => DataState::iov(v.clone()),
            Data::Layout(l) => layout_state(l, false),
            Data::Generic { dt, addr, count } => {
                let st = dt.start_pack(*addr, *count);
                let len = st.packed_size();
                DataState::Pack(st, len)
            }
        }
    }

    /// Starts a receive: the state that unpacks into this data.
    #[inline]
    pub(crate) fn start_unpack(&self) -> DataState {
        match self {
            Data::Contig(b) if b.host_accessible() => DataState::Contig(*b),
            _ => self.start_unpack_other(),
        }
    }

    #[inline(never)]
    fn start_unpack_other(&self) -> DataState {
        match self {
            Data::Contig(b) => contig_state(*b),
            Data::Iov(v) => DataState::iov(v.clone()),
            Data::Layout(l) => layout_state(l, true),
            Data::Generic { dt, addr, count } => {
                let st = dt.start_unpack(*addr, *count);
                let len = st.packed_size();
                DataState::Unpack(st, len)
            }
        }
    }
}

/// The state of a contiguous buffer: `Device` when the host cannot touch it.
fn contig_state(b: Buf) -> DataState {
    if b.host_accessible() {
        DataState::Contig(b)
    } else {
        DataState::Device(b)
    }
}

/// The state of a layout: over device memory, with a scratch buffer for packed bytes
/// ([`GpuLayout`](crate::dt::gpu::stage::GpuLayout)).
fn layout_state(l: &LayoutBuf, recv: bool) -> DataState {
    #[cfg(feature = "cuda")]
    if !l.span.host_accessible() {
        let dev = ucs::memtype::detect(l.span.addr() as *const u8)
            .device
            .max(0);
        match crate::dt::gpu::stage::GpuLayout::new(l.clone(), dev, recv) {
            Ok(g) => return DataState::DeviceLayout(Box::new(g)),
            Err(s) => log::warn!("ucp: no scratch buffer for a device layout: {s}"),
        }
    }
    let _ = recv;
    DataState::Layout(l.clone())
}

/// The datatype classes protocols are chosen for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DtClass {
    Contig,
    Iov,
    /// A structured layout: addressable like an iov, packed with strided loops.
    Layout,
    Generic,
}

/// Fewest entries for which an iov list is checked for a constant shape (below it the
/// list is cheap to walk as it is).
pub const REGULAR_IOV_MIN: usize = 16;

/// An iov list's shape when it is a vector: at least [`REGULAR_IOV_MIN`] entries, all
/// `len > 0` bytes, entry `i` at `origin + i * stride` with `stride > len` (ascending, with
/// gaps: `stride == len` would be one contiguous buffer) — what an MPI vector type or
/// `ucx_perftest -D iov -i GAP` hands in. Returns `(origin, count, len, stride)`.
pub fn regular_iov(bufs: &[Buf]) -> Option<(u64, usize, usize, usize)> {
    if bufs.len() < REGULAR_IOV_MIN {
        return None;
    }
    let len = bufs[0].len();
    let origin = bufs[0].addr();
    let stride = bufs[1].addr().checked_sub(origin)?;
    if len == 0 || stride <= len as u64 || stride > i64::MAX as u64 / bufs.len() as u64 {
        return None;
    }
    // Checked in chunks with no early exit inside one, so the loop runs branch-free
    // (a long list is scanned on every send and receive).
    let mut expect = origin;
    for chunk in bufs.chunks(64) {
        let mut bad = 0u64;
        for b in chunk {
            bad |= (b.len() ^ len) as u64 | (b.addr() ^ expect);
            expect = expect.wrapping_add(stride);
        }
        if bad != 0 {
            return None;
        }
    }
    Some((origin, bufs.len(), len, stride as usize))
}

/// Compiled vectors of iov lists seen by [`as_vector`], by (count, length, stride).
pub(crate) type VectorCache = std::collections::HashMap<(usize, usize, usize), Arc<DtLayout>>;

/// `data` as a layout when it is an iov list shaped like a vector ([`regular_iov`]): it
/// then travels as a compact layout the peer memoizes, and is copied with strided loops
/// instead of entry by entry. The compiled vector is cached (`cache`, a few dozen shapes).
#[inline]
pub(crate) fn as_vector(cache: &mut VectorCache, data: &Data) -> Option<Data> {
    match data {
        Data::Iov(v) => iov_as_vector(cache, v),
        _ => None,
    }
}

#[inline(never)]
fn iov_as_vector(cache: &mut VectorCache, v: &[crate::Buf]) -> Option<Data> {
    let Some((origin, count, len, stride)) = regular_iov(v) else {
        return device_iov_layout(v);
    };
    let key = (count, len, stride);
    let dt = match cache.get(&key) {
        Some(d) => Arc::clone(d),
        None => {
            let vector =
                Layout::hvector(count as u64, 1, stride as i64, &Layout::bytes(len as u64)).ok()?;
            let d = DtLayout::new(&vector).ok()?;
            if cache.len() >= 64 {
                cache.clear();
            }
            cache.insert(key, Arc::clone(&d));
            d
        }
    };
    Some(Data::Layout(buf::layout_over_iov(origin, dt)))
}

/// An iov list of device memory within one allocation, as a layout (`hindexed` from its
/// first entry): it then moves by kernels (`proto::rndv::gpu`), not by one copy per entry.
fn device_iov_layout(v: &[crate::Buf]) -> Option<Data> {
    if v.len() < 2 || !ucs::memtype::active() || v.iter().any(|b| b.host_accessible()) {
        return None;
    }
    let first = ucs::memtype::detect(v[0].addr() as *const u8);
    let (lo, hi) = (first.base, first.base.checked_add(first.len)?);
    if first.mem_type != MemoryType::Cuda
        || v.iter()
            .any(|b| b.addr() < lo || b.addr().saturating_add(b.len() as u64) > hi)
    {
        return None;
    }
    let origin = v[0].addr();
    let lens: Vec<u64> = v.iter().map(|b| b.len() as u64).collect();
    let displs: Vec<i64> = v
        .iter()
        .map(|b| b.addr().wrapping_sub(origin) as i64)
        .collect();
    let l = Layout::hindexed(&lens, &displs, &Layout::bytes(1)).ok()?;
    let d = DtLayout::new(&l).ok()?;
    Some(Data::Layout(buf::layout_over_iov(origin, d)))
}

/// A started operation's data.
pub(crate) enum DataState {
    Contig(Buf),
    /// A contiguous buffer of device memory (not host-accessible): packed and unpacked by
    /// the driver, and sent zero-copy only through a memory lane for device memory
    /// ([`DataState::device_iov`]).
    Device(Buf),
    /// Boxed: it is several times the size of the others, and every request carries a
    /// `DataState` (contiguous data, the common case, should not pay for moving it).
    Iov(Box<IovWalk>),
    Layout(LayoutBuf),
    /// A layout over device memory: packed and unpacked by kernels through a scratch
    /// buffer, or moved by one kernel straight between the two sides' layouts.
    #[cfg(feature = "cuda")]
    DeviceLayout(Box<crate::dt::gpu::stage::GpuLayout>),
    Pack(Box<dyn PackState>, usize),
    Unpack(Box<dyn UnpackState>, usize),
}

impl std::fmt::Debug for DataState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DataState({} bytes)", self.len())
    }
}

/// An iov list with the position of the last access.
pub(crate) struct IovWalk {
    bufs: SmallVec<[Buf; 4]>,
    total: usize,
    /// Index of the entry where the last access ended, and that entry's start offset.
    idx: usize,
    start: usize,
}

impl DataState {
    fn iov(bufs: SmallVec<[Buf; 4]>) -> DataState {
        let total = bufs.iter().map(Buf::len).sum();
        DataState::Iov(Box::new(IovWalk {
            bufs,
            total,
            idx: 0,
            start: 0,
        }))
    }

    /// Bytes of the message (send) or the capacity (receive).
    pub(crate) fn len(&self) -> usize {
        match self {
            DataState::Contig(b) | DataState::Device(b) => b.len(),
            DataState::Iov(w) => w.total,
            DataState::Layout(l) => l.dt.size(),
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(g) => g.len(),
            DataState::Pack(_, n) | DataState::Unpack(_, n) => *n,
        }
    }

    /// Packs `[off, off + dst.len())` of the message into `dst` (clipped to the message);
    /// returns the bytes written.
    pub(crate) fn pack(&mut self, off: usize, dst: &mut [u8]) -> usize {
        let n = dst.len().min(self.len().saturating_sub(off));
        if n == 0 {
            return 0;
        }
        match self {
            DataState::Contig(b) => b.read_at(off, &mut dst[..n]),
            DataState::Device(b) => {
                if let Err(s) = b.read_device(off, &mut dst[..n]) {
                    log::warn!("ucp: reading device memory failed: {s}");
                    return 0;
                }
            }
            DataState::Iov(w) => {
                let mut bad = false;
                w.walk(off, n, |b, boff, pos, len| {
                    if b.host_accessible() {
                        b.read_at(boff, &mut dst[pos..pos + len]);
                    } else {
                        bad |= b.read_device(boff, &mut dst[pos..pos + len]).is_err();
                    }
                });
                if bad {
                    return 0;
                }
            }
            DataState::Layout(l) if !l.span.host_accessible() => return 0,
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(g) => {
                let r = g.pack_all().and_then(|()| {
                    let (p, _) = g.scratch_range(off, n);
                    crate::buf::read_raw_device(p, &mut dst[..n])
                });
                if let Err(s) = r {
                    log::warn!("ucp: packing a device layout failed: {s}");
                    return 0;
                }
            }
            DataState::Layout(l) if l.dense() => {
                let c = &l.local;
                let r = l
                    .span
                    .with_slice(|s| crate::dt::pack_range(c, s, 0, off as u64, &mut dst[..n]));
                if r.is_err() {
                    return 0;
                }
            }
            DataState::Layout(l) => {
                let span = l.span;
                let r = l.walk(off, n, |at, pos, len| {
                    span.read_at(at, &mut dst[pos..pos + len])
                });
                if r.is_err() {
                    return 0;
                }
            }
            DataState::Pack(st, _) => return st.pack(off, &mut dst[..n]).min(n),
            DataState::Unpack(..) => return 0,
        }
        n
    }

    /// Unpacks `src`, which starts at `off` of the message. Bytes past the capacity are an
    /// error (`MessageTruncated`); the bytes that fit are still written.
    pub(crate) fn unpack(&mut self, off: usize, src: &[u8]) -> Result<(), Status> {
        let room = self.len().saturating_sub(off);
        let n = src.len().min(room);
        if n == 0 {
            // Past the end (the rest of a truncated message): nothing to write.
            return if src.is_empty() {
                Ok(())
            } else {
                Err(Status::MessageTruncated)
            };
        }
        match self {
            DataState::Contig(b) => b.write_at(off, &src[..n]),
            DataState::Device(b) => b.write_device(off, &src[..n])?,
            DataState::Iov(w) => {
                let mut r = Ok(());
                w.walk(off, n, |b, boff, pos, len| {
                    if b.host_accessible() {
                        b.write_at(boff, &src[pos..pos + len]);
                    } else if let Err(s) = b.write_device(boff, &src[pos..pos + len]) {
                        r = Err(s);
                    }
                });
                r?
            }
            // Layouts over device memory are unpacked by GPU kernels (`DeviceLayout`).
            DataState::Layout(l) if !l.span.host_accessible() => return Err(Status::Unsupported),
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(g) => {
                let (p, _) = g.scratch_range(off, n);
                crate::buf::write_raw_device(p, &src[..n])?
            }
            DataState::Layout(l) if l.dense() => {
                let c = &l.local;
                l.span
                    .with_mut_slice(|d| crate::dt::unpack_range(c, off as u64, &src[..n], d, 0))?
            }
            DataState::Layout(l) => {
                let span = l.span;
                l.walk(off, n, |at, pos, len| {
                    span.write_at(at, &src[pos..pos + len])
                })?
            }
            DataState::Unpack(st, _) => st.unpack(off, &src[..n])?,
            DataState::Pack(..) => return Err(Status::InvalidParam),
        }
        if n < src.len() {
            Err(Status::MessageTruncated)
        } else {
            Ok(())
        }
    }

    /// The regions of `[off, off+len)` for a zero-copy transfer; `None` for generic data,
    /// which has no addressable layout.
    pub(crate) fn iovs(&mut self, off: usize, len: usize) -> Option<SmallVec<[Iov; 8]>> {
        let len = len.min(self.len().saturating_sub(off));
        let mut out = SmallVec::new();
        match self {
            DataState::Contig(b) => out.push(b.sub(off, len)?.iov()),
            // Only a memory lane for device memory may touch it (`device_iov`).
            DataState::Device(_) => return None,
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(_) => return None,
            DataState::Iov(w) => w.walk(off, len, |b, boff, _, l| {
                if let Some(s) = b.sub(boff, l) {
                    out.push(s.iov());
                }
            }),
            DataState::Layout(l) => {
                let mut segs = Vec::new();
                Cursor::new(&l.local, off as u64)
                    .ok()?
                    .fill(&mut segs, usize::MAX, len as u64);
                for g in segs {
                    out.push(l.span.sub(segment_pos(l, g)?, g.len as usize)?.iov());
                }
            }
            DataState::Pack(..) | DataState::Unpack(..) => return None,
        }
        Some(out)
    }
}

impl DataState {
    /// The device memory of `[off, off+len)` as one iov, for a memory lane that accepts
    /// device memory; `None` for host data (use [`iovs`](Self::iovs)).
    pub(crate) fn device_iov(&self, off: usize, len: usize) -> Option<Iov> {
        match self {
            DataState::Device(b) => Some(b.sub(off, len.min(b.len().saturating_sub(off)))?.iov()),
            // The packed bytes: a send's once packed (`prepare_device`), where a
            // receive's land to be unpacked.
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(g) => {
                let (p, n) = g.scratch_range(off, len);
                Some(Iov {
                    buffer: p as *mut u8,
                    length: n,
                })
            }
            _ => None,
        }
    }

    /// Whether every byte of the data is host-accessible (memory copies and host memory
    /// lanes may touch it).
    pub(crate) fn host_only(&self) -> bool {
        if !ucs::memtype::active() {
            return true;
        }
        match self {
            DataState::Contig(_) | DataState::Pack(..) | DataState::Unpack(..) => true,
            DataState::Device(_) => false,
            DataState::Iov(w) => w.bufs.iter().all(Buf::host_accessible),
            DataState::Layout(l) => l.span.host_accessible(),
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(_) => false,
        }
    }

    /// The layout of layout data (over host or device memory).
    pub(crate) fn layout(&self) -> Option<&LayoutBuf> {
        match self {
            DataState::Layout(l) => Some(l),
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(g) => Some(&g.lb),
            _ => None,
        }
    }

    /// A device layout whose description does not fit one RTS: from now on its RTS
    /// describes its scratch buffer (packed by a kernel), so it still goes through the
    /// memory lane for device memory. False for other data.
    pub(crate) fn send_packed(&mut self) -> bool {
        match self {
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(g) => {
                g.packed_rts = true;
                true
            }
            _ => false,
        }
    }

    /// Before a send's bytes are read from [`device_iov`](Self::device_iov): packs a
    /// device layout into its scratch buffer.
    pub(crate) fn prepare_device(&mut self) -> UcsResult<()> {
        match self {
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(g) => g.pack_all(),
            _ => Ok(()),
        }
    }

    /// When a receive of a `len`-byte message completes: unpacks what landed in a device
    /// layout's scratch buffer.
    pub(crate) fn finish_recv(&mut self, len: usize) -> UcsResult<()> {
        match self {
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(g) => g.finish_recv(len),
            _ => {
                let _ = len;
                Ok(())
            }
        }
    }

    /// The memory type protocols are chosen for.
    pub(crate) fn mem_type(&self) -> uct::MemoryType {
        match self {
            DataState::Device(_) => uct::MemoryType::Cuda,
            #[cfg(feature = "cuda")]
            DataState::DeviceLayout(_) => uct::MemoryType::Cuda,
            _ => uct::MemoryType::Host,
        }
    }
}

/// Where segment `g` of the rebased layout starts in the span.
fn segment_pos(_l: &LayoutBuf, g: Segment) -> Option<usize> {
    usize::try_from(g.offset).ok()
}

impl IovWalk {
    /// Calls `f(buf, offset_in_buf, position_in_window, len)` for each piece of
    /// `[off, off+len)`, in order.
    fn walk(&mut self, off: usize, len: usize, mut f: impl FnMut(&Buf, usize, usize, usize)) {
        if off < self.start {
            self.idx = 0;
            self.start = 0;
        }
        let mut pos = 0;
        while pos < len && self.idx < self.bufs.len() {
            let b = self.bufs[self.idx];
            let cur = off + pos;
            if cur >= self.start + b.len() {
                self.start += b.len();
                self.idx += 1;
                continue;
            }
            let boff = cur - self.start;
            let take = (b.len() - boff).min(len - pos);
            f(&b, boff, pos, take);
            pos += take;
        }
    }
}

#[cfg(test)]
#[allow(unsafe_code)] // tests describe their buffers as user code does
mod tests {
    use super::*;

    fn bufs(v: &mut [Vec<u8>]) -> SmallVec<[Buf; 4]> {
        // SAFETY: the vectors outlive the Bufs within each test.
        v.iter_mut()
            .map(|x| unsafe { Buf::from_mut_slice(x) })
            .collect()
    }

    #[test]
    fn iov_pack_any_window_and_unpack_in_fragments() {
        let mut src = vec![vec![1u8, 2, 3], vec![], vec![4, 5], vec![6, 7, 8, 9]];
        let mut s = Data::Iov(bufs(&mut src)).start_pack();
        assert_eq!(s.len(), 9);
        let mut out = [0u8; 4];
        assert_eq!(s.pack(2, &mut out), 4);
        assert_eq!(out, [3, 4, 5, 6]);
        assert_eq!(s.pack(0, &mut out[..2]), 2);
        assert_eq!(out[..2], [1, 2]);
        assert_eq!(s.pack(7, &mut out), 2);
        assert_eq!(out[..2], [8, 9]);

        let mut dst = vec![vec![0u8; 4], vec![0u8; 5]];
        let mut r = Data::Iov(bufs(&mut dst)).start_unpack();
        r.unpack(0, &[1, 2, 3]).unwrap();
        r.unpack(3, &[4, 5, 6]).unwrap();
        assert_eq!(r.unpack(6, &[7, 8, 9, 10]), Err(Status::MessageTruncated));
        let io = r.iovs(2, 4).unwrap();
        assert_eq!(io.len(), 2);
        assert_eq!(io[0].length + io[1].length, 4);
        drop(r);
        assert_eq!(dst, vec![vec![1, 2, 3, 4], vec![5, 6, 7, 8, 9]]);
    }

    #[test]
    fn regular_iov_is_recognised_exactly() {
        let mut v = vec![0u8; 64 * 40];
        let base = v.as_mut_ptr() as u64;
        // SAFETY: v outlives every Buf made here.
        let at = |off: usize, len: usize| unsafe {
            Buf::from_raw((base as usize + off) as *mut u8, len)
        };
        let list = |n: usize, len: usize, stride: usize| -> SmallVec<[Buf; 4]> {
            (0..n).map(|i| at(i * stride, len)).collect()
        };
        assert_eq!(regular_iov(&list(20, 48, 64)), Some((base, 20, 48, 64)));
        assert_eq!(regular_iov(&list(40, 1, 64)), Some((base, 40, 1, 64)));
        // Too short a list; no gap (one buffer); overlapping or descending entries.
        assert_eq!(regular_iov(&list(REGULAR_IOV_MIN - 1, 48, 64)), None);
        assert_eq!(regular_iov(&list(20, 64, 64)), None);
        assert_eq!(regular_iov(&list(20, 0, 64)), None);
        let mut l = list(20, 48, 64);
        l.reverse();
        assert_eq!(regular_iov(&l), None);
        // One entry off in length or place.
        let mut l = list(20, 48, 64);
        l[7] = at(7 * 64, 47);
        assert_eq!(regular_iov(&l), None);
        let mut l = list(20, 48, 64);
        l[19] = at(19 * 64 + 1, 48);
        assert_eq!(regular_iov(&l), None);
        drop(v);
    }

    struct Doubler;
    struct P(Vec<u8>);
    impl PackState for P {
        fn packed_size(&self) -> usize {
            self.0.len() * 2
        }
        fn pack(&mut self, off: usize, dst: &mut [u8]) -> usize {
            for (i, d) in dst.iter_mut().enumerate() {
                *d = self.0[(off + i) / 2];
            }
            dst.len()
        }
    }
    struct U(usize, std::sync::Arc<std::sync::Mutex<Vec<(usize, usize)>>>);
    impl UnpackState for U {
        fn packed_size(&self) -> usize {
            self.0
        }
        fn unpack(&mut self, off: usize, src: &[u8]) -> Result<(), Status> {
            self.1.lock().unwrap().push((off, src.len()));
            Ok(())
        }
    }
    impl GenericDt for Doubler {
        fn start_pack(&self, _addr: u64, count: usize) -> Box<dyn PackState> {
            Box::new(P((0..count as u8).collect()))
        }
        fn start_unpack(&self, _addr: u64, count: usize) -> Box<dyn UnpackState> {
            Box::new(U(count, Default::default()))
        }
    }

    #[test]
    fn generic_pack_and_truncating_unpack() {
        let d = Data::Generic {
            dt: Arc::new(Doubler),
            addr: 0,
            count: 3,
        };
        let mut s = d.start_pack();
        assert_eq!(s.len(), 6);
        let mut out = [0u8; 8];
        assert_eq!(s.pack(1, &mut out), 5);
        assert_eq!(out[..5], [0, 1, 1, 2, 2]);
        assert!(s.iovs(0, 6).is_none());
        let mut r = d.start_unpack();
        assert_eq!(r.len(), 3);
        assert_eq!(r.unpack(2, &[9, 9]), Err(Status::MessageTruncated));
    }
}
