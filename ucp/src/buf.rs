//! User memory that an operation reads or writes after the call that posted it returns.
//!
//! This module is `ucp`'s one room for `unsafe` (STYLE.md §6-7). A non-blocking send or
//! receive keeps using the caller's buffer until its request completes, which no Rust
//! borrow can express across `progress()` calls or the C boundary. So the borrow is
//! replaced by a contract made once, where the buffer is described: [`Buf::from_raw`]
//! (and its slice forms) is `unsafe`, and its `# Safety` section is the promise
//! "valid until the completion is seen". Everything after that, in the protocols, is safe
//! code calling the checked accessors here. The zero-copy transport calls, whose own
//! contract is the same promise, are made here too.

use std::fmt;
use std::sync::Arc;

use ucs::{Status, UcsResult};
use uct::{Comp, Done, EpId, Iface, Iov, Md, MemH, MemoryType, RemoteKey};

use crate::dt::{Canon, Cursor, DtLayout};

/// Pinned host bytes that a copy to or from device memory fills or drains in the
/// background: a fragment of the staged rendezvous (`proto::rndv::stage`). While the copy is in
/// flight nothing else touches the bytes (the accessors say `None`), and dropping waits for
/// it, so the bounce goes back to its pool only once the copy engine is done with it.
#[derive(Debug)]
pub(crate) struct Staged {
    /// Declared before `buf`: dropped first, it waits for the copy.
    copy: Option<Box<dyn ucs::memtype::PendingCopy>>,
    buf: Bounce,
}

impl Staged {
    /// `len` bytes, pinned where a driver gives them.
    pub(crate) fn new(len: usize) -> Staged {
        Staged {
            copy: None,
            buf: Bounce::for_device(len),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.buf.as_slice().len()
    }

    /// Starts copying the `len()` bytes at `off` of device buffer `src` in.
    pub(crate) fn load(&mut self, src: &Buf, off: usize) -> UcsResult<()> {
        self.start(src, off, true)
    }

    /// Starts copying the bytes out into `[off, off + len())` of device buffer `dst`.
    pub(crate) fn store(&mut self, dst: &Buf, off: usize) -> UcsResult<()> {
        self.start(dst, off, false)
    }

    /// Starts the copy between the bounce and `[off, off + len())` of device buffer `dev`:
    /// into the bounce when `inward`, out of it otherwise.
    fn start(&mut self, dev: &Buf, off: usize, inward: bool) -> UcsResult<()> {
        let n = self.len();
        let part = dev.sub(off, n).ok_or(ucs::Status::InvalidParam)?;
        if self.copy.is_some() {
            return Err(ucs::Status::Busy);
        }
        let bounce = self.buf.as_mut_slice().as_mut_ptr();
        let (dst, dst_type, src, src_type) = if inward {
            (bounce, MemoryType::Host, part.ptr, MemoryType::Cuda)
        } else {
            (part.ptr, MemoryType::Cuda, bounce, MemoryType::Host)
        };
        // SAFETY: `part` lies in `dev`, whose constructor's contract keeps it valid (and, for
        // a send, unwritten; for a receive, untouched by others) until the operation
        // completes, and an operation holding a `Staged` completes only after its copy is
        // done or it is dropped (which waits); the bounce's `n` bytes are owned here and
        // not touched until the copy is done.
        self.copy = unsafe { ucs::memtype::copy_async(dst, dst_type, src, src_type, n)? };
        Ok(())
    }

    /// Whether a copy is in flight.
    pub(crate) fn in_flight(&self) -> bool {
        self.copy.is_some()
    }

    /// Whether no copy is in flight any more (one that finished is let go); an error when
    /// it failed.
    pub(crate) fn landed(&mut self) -> UcsResult<bool> {
        let Some(c) = self.copy.as_mut() else {
            return Ok(true);
        };
        if c.done()? {
            self.copy = None;
            return Ok(true);
        }
        Ok(false)
    }

    /// The bytes, unless a copy is in flight.
    pub(crate) fn bytes(&self) -> Option<&[u8]> {
        self.copy.is_none().then(|| self.buf.as_slice())
    }

    pub(crate) fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        if self.copy.is_some() {
            return None;
        }
        Some(self.buf.as_mut_slice())
    }
}

/// A receive's bounce buffer: pinned when it is to be copied into device memory (the
/// driver copies from pinned memory at the bus's speed, from pageable memory at a
/// fraction of it, and the pool saves allocating it for every message).
#[derive(Debug)]
pub(crate) enum Bounce {
    Heap(Vec<u8>),
    #[cfg(feature = "cuda")]
    Pinned(ucs::cuda::PinnedBuf),
}

impl Bounce {
    /// `total` bytes to be copied into device memory afterwards.
    pub(crate) fn for_device(total: usize) -> Bounce {
        #[cfg(feature = "cuda")]
        if let Ok(p) = ucs::cuda::PinnedBuf::take(total) {
            return Bounce::Pinned(p);
        }
        Bounce::Heap(vec![0u8; total])
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        match self {
            Bounce::Heap(v) => v,
            #[cfg(feature = "cuda")]
            Bounce::Pinned(p) => p.as_slice(),
        }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        match self {
            Bounce::Heap(v) => v,
            #[cfg(feature = "cuda")]
            Bounce::Pinned(p) => p.as_mut_slice(),
        }
    }

    pub(crate) fn is_pinned(&self) -> bool {
        !matches!(self, Bounce::Heap(_))
    }
}

/// A region of user memory: `len` bytes at `ptr`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Buf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: a Buf is an address and a length; the constructor's contract (the region stays
// valid and is not accessed by others until the operation completes) is what makes using it
// from the worker's thread sound, whichever thread described it.
unsafe impl Send for Buf {}
// SAFETY: as for Send; shared references only copy the address and length.
unsafe impl Sync for Buf {}

impl fmt::Debug for Buf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buf({:p}, {})", self.ptr, self.len)
    }
}

/// A [`Buf`] the CPU can read and write, checked once: the small-message send and
/// receive take it, so that a send or receive of the C ABI asks the memory-type cache once
/// (in the shim, which also records the request's memory type), not again in the worker.
/// Where a CUDA driver is loaded, each ask is a lookup (docs/c-abi.md).
#[derive(Clone, Copy, Debug)]
pub struct HostBuf(Buf);

impl HostBuf {
    /// `b` when the CPU can reach it directly: host or managed memory.
    #[inline(always)]
    pub fn accessible(b: Buf) -> Option<HostBuf> {
        b.host_accessible().then_some(HostBuf(b))
    }

    /// `b` when it is host memory: not device memory, and not managed memory either. An
    /// empty region always is.
    #[inline(always)]
    pub fn host_only(b: Buf) -> Option<HostBuf> {
        (b.len == 0 || !ucs::memtype::active() || b.mem_type() == MemoryType::Host)
            .then_some(HostBuf(b))
    }

    /// The region.
    #[inline(always)]
    pub fn buf(self) -> Buf {
        self.0
    }
}

impl Buf {
    /// The empty buffer.
    pub const EMPTY: Buf = Buf {
        ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
        len: 0,
    };

    /// Describes `len` bytes at `ptr`.
    ///
    /// # Safety
    /// Until every operation this buffer is handed to has completed (its request reported
    /// complete, or cancelled and reported), the `len` bytes at `ptr` must stay allocated;
    /// a buffer given to a send must not be written by anyone else, and one given to a
    /// receive must not be read or written by anyone else. `ptr` may be null only when `len`
    /// is 0. A buffer given to `Worker::mem_map` must stay valid until `mem_unmap`, and
    /// peers may read and write it through their remote keys meanwhile.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Buf {
        if len == 0 {
            return Buf::EMPTY;
        }
        Buf { ptr, len }
    }

    /// Describes a slice that a send will read.
    ///
    /// # Safety
    /// As for [`Buf::from_raw`]: the slice's memory outlives the operation and is not
    /// written while it runs.
    pub unsafe fn from_slice(s: &[u8]) -> Buf {
        // SAFETY: forwarded to the caller.
        unsafe { Buf::from_raw(s.as_ptr().cast_mut(), s.len()) }
    }

    /// Describes a slice that a receive will write.
    ///
    /// # Safety
    /// As for [`Buf::from_raw`]: the slice's memory outlives the operation and nobody else
    /// touches it while it runs.
    pub unsafe fn from_mut_slice(s: &mut [u8]) -> Buf {
        // SAFETY: forwarded to the caller.
        unsafe { Buf::from_raw(s.as_mut_ptr(), s.len()) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address, for remote keys and iov lists sent to a peer.
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }

    /// The part `[off, off+len)`; `None` when it does not lie inside.
    pub fn sub(&self, off: usize, len: usize) -> Option<Buf> {
        let end = off.checked_add(len)?;
        if end > self.len {
            return None;
        }
        if len == 0 {
            return Some(Buf::EMPTY);
        }
        Some(Buf {
            // wrapping_add: no unsafe needed to compute an address inside the region.
            ptr: self.ptr.wrapping_add(off),
            len,
        })
    }

    /// The memory type of the region (host unless a CUDA driver is in use).
    #[inline]
    pub fn mem_type(&self) -> MemoryType {
        ucs::memtype::mem_type(self.ptr)
    }

    /// Whether the host can read and write the region directly (host or managed memory);
    /// one flag load where no CUDA driver is loaded.
    #[inline(always)]
    pub fn host_accessible(&self) -> bool {
        !ucs::memtype::active() || self.mem_type().host_accessible()
    }

    /// As [`read_at`](Self::read_at), for a region of device memory: the driver copies.
    pub fn read_device(&self, off: usize, dst: &mut [u8]) -> UcsResult<()> {
        assert!(
            off <= self.len && dst.len() <= self.len - off,
            "read outside Buf"
        );
        // SAFETY: the range is inside the region, which the constructor's contract keeps
        // valid (device memory here) and unwritten by others; dst is a distinct host slice.
        unsafe {
            ucs::memtype::copy(
                dst.as_mut_ptr(),
                MemoryType::Host,
                self.ptr.wrapping_add(off),
                MemoryType::Cuda,
                dst.len(),
            )
        }
    }

    /// As [`write_at`](Self::write_at), for a region of device memory: the driver copies.
    pub fn write_device(&self, off: usize, src: &[u8]) -> UcsResult<()> {
        assert!(
            off <= self.len && src.len() <= self.len - off,
            "write outside Buf"
        );
        // SAFETY: the range is inside the region, which the constructor's contract keeps
        // valid and reserved for this operation; src is a distinct host slice.
        unsafe {
            ucs::memtype::copy(
                self.ptr.wrapping_add(off),
                MemoryType::Cuda,
                src.as_ptr(),
                MemoryType::Host,
                src.len(),
            )
        }
    }

    /// Copies `dst.len()` bytes from offset `off` into `dst`. Panics when the range is
    /// outside the buffer: callers check lengths against [`Buf::len`] first.
    #[inline]
    pub fn read_at(&self, off: usize, dst: &mut [u8]) {
        assert!(
            off <= self.len && dst.len() <= self.len - off,
            "read outside Buf"
        );
        if dst.is_empty() {
            return;
        }
        // SAFETY: the range is inside the region (checked above), which the constructor's
        // contract keeps valid and unwritten by others; dst is a distinct Rust slice, and
        // the slice made here does not outlive this call.
        let s = unsafe { std::slice::from_raw_parts(self.ptr.add(off), dst.len()) };
        // A few bytes (an 8-byte put) are moved inline, not through a `memcpy` call.
        ucs::wire::copy(dst, s);
    }

    /// Copies `src` to offset `off`; the few bytes of a short message are moved inline
    /// (`ucs::wire::copy`), not through a `memcpy` call. Panics when the range is outside
    /// the buffer.
    #[inline(always)]
    pub fn write_at(&self, off: usize, src: &[u8]) {
        assert!(
            off <= self.len && src.len() <= self.len - off,
            "write outside Buf"
        );
        // SAFETY: the range is inside the region (checked above), which the constructor's
        // contract keeps valid and reserved for this operation; src is a distinct Rust
        // slice, and the slice made here does not outlive this call.
        let d = unsafe { std::slice::from_raw_parts_mut(self.ptr.add(off), src.len()) };
        ucs::wire::copy(d, src);
    }

    /// Runs `f` on the region as a slice (for sends that hand it to a transport).
    #[inline(always)]
    pub(crate) fn with_slice<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        // SAFETY: the constructor's contract keeps `len` bytes at `ptr` valid and unwritten
        // by others while the operation runs (and `ptr` non-null and aligned for u8 when
        // `len` is 0, see EMPTY); the slice does not outlive this call.
        let s = unsafe { std::slice::from_raw_parts(self.ptr, self.len) };
        f(s)
    }

    /// Runs `f` on the region as a mutable slice (for receives that unpack into it).
    #[inline]
    pub(crate) fn with_mut_slice<R>(&self, f: impl FnOnce(&mut [u8]) -> R) -> R {
        // SAFETY: the constructor's contract reserves the region for the operation it was
        // given to (a receive: nobody else reads or writes it); the slice does not outlive
        // this call, and the worker creates no other slice of it meanwhile.
        let s = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        f(s)
    }

    /// The region as a transport iov entry.
    pub(crate) fn iov(&self) -> Iov {
        Iov {
            buffer: self.ptr,
            length: self.len,
        }
    }
}

/// A layout applied to a buffer: the origin (MPI's `buf`) and the memory its data spans.
#[derive(Clone, Debug)]
pub struct LayoutBuf {
    pub(crate) dt: Arc<DtLayout>,
    /// `[origin + lo, origin + hi)`.
    pub(crate) span: Buf,
    /// The layout rebased to the span: its offsets count from the span's first byte.
    pub(crate) local: Arc<Canon>,
    pub(crate) origin_addr: u64,
}

impl LayoutBuf {
    /// Describes the data of `dt` laid out from `origin` (the layout's offsets are
    /// relative to it, as MPI's are to `buf`).
    ///
    /// # Safety
    /// As for [`Buf::from_raw`], for every byte the layout touches: `[origin + lo,
    /// origin + hi)` where `(lo, hi)` are the layout's true bounds.
    pub unsafe fn new(origin: *mut u8, dt: Arc<DtLayout>) -> LayoutBuf {
        let (lo, hi) = dt.canon().bounds();
        let start = (origin as i64).wrapping_add(lo) as u64;
        // SAFETY: forwarded to the caller.
        let span = unsafe { Buf::from_raw(start as *mut u8, (hi - lo) as usize) };
        let local = Arc::clone(dt.local());
        LayoutBuf {
            dt,
            span,
            local,
            origin_addr: origin as u64,
        }
    }

    pub fn layout(&self) -> &Arc<DtLayout> {
        &self.dt
    }

    /// Whether the layout's bytes fill its span (no holes): only then is the span viewed
    /// as one slice. The holes of a layout with gaps (the memory between a vector's blocks,
    /// or between the entries of an iov list sent as one) were never handed to us, so
    /// their bytes are reached piece by piece through raw copies instead ([`walk`]).
    ///
    /// [`walk`]: LayoutBuf::walk
    pub(crate) fn dense(&self) -> bool {
        self.dt.size() == self.span.len()
    }

    /// Calls `f(offset_in_span, position, len)` for each piece of packed bytes
    /// `[off, off + n)`, in order (segments generated in batches).
    pub(crate) fn walk(
        &self,
        off: usize,
        n: usize,
        mut f: impl FnMut(usize, usize, usize),
    ) -> Result<(), Status> {
        let bad = Status::InvalidParam;
        let mut cur = Cursor::new(&self.local, off as u64).map_err(|_| bad)?;
        let mut segs = Vec::with_capacity(256);
        let mut pos = 0;
        while pos < n {
            if cur.fill(&mut segs, 256, (n - pos) as u64) == 0 {
                return Err(bad);
            }
            for g in &segs {
                let at = usize::try_from(g.offset).map_err(|_| bad)?;
                f(at, pos, g.len as usize);
                pos += g.len as usize;
            }
        }
        Ok(())
    }

    /// The origin's address (what a peer adds the layout's offsets to).
    pub fn origin_addr(&self) -> u64 {
        self.origin_addr
    }
}

/// Reads `remote_addr..` of the peer's region into `local` (zero copy).
///
/// Sound because every entry of `local` was built from [`Buf`]s of a live operation (their
/// contract keeps them valid until completion), and the worker keeps that operation alive
/// until `comp` is reported or `Done::Now` is returned.
pub(crate) fn get_zcopy(
    iface: &mut dyn Iface,
    ep: EpId,
    local: &[Iov],
    remote_addr: u64,
    rkey: &RemoteKey,
    comp: Comp,
) -> UcsResult<Done> {
    // SAFETY: see the function documentation: the iov entries come from Bufs of an
    // operation that stays alive until this completion is seen.
    unsafe { iface.get_zcopy(ep, local, remote_addr, rkey, comp) }
}

/// Reads the peer's segments `remote` into `local` (zero copy, remote gather). Same
/// soundness argument as [`get_zcopy`].
pub(crate) fn get_zcopy_iov(
    iface: &mut dyn Iface,
    ep: EpId,
    local: &[Iov],
    remote: &[(u64, u64)],
    rkey: &RemoteKey,
    comp: Comp,
) -> UcsResult<Done> {
    // SAFETY: the iov entries come from Bufs of an operation that stays alive until this
    // completion is seen.
    unsafe { iface.get_zcopy_iov(ep, local, remote, rkey, comp) }
}

/// Writes the bytes of `local` to `remote_addr..` of the peer's region (zero copy). Same
/// soundness argument as [`get_zcopy`]: the entries come from Bufs of a live send.
pub(crate) fn put_zcopy(
    iface: &mut dyn Iface,
    ep: EpId,
    local: &[Iov],
    remote_addr: u64,
    rkey: &RemoteKey,
    comp: Comp,
) -> UcsResult<Done> {
    // SAFETY: the iov entries come from Bufs of a send that stays alive until this
    // completion is seen (the worker holds the request until then), or from a receive's
    // bounce buffer, which its request owns until then, toward that receive's own buffer.
    unsafe { iface.put_zcopy(ep, local, remote_addr, rkey, comp) }
}

/// A 64-bit atomic executed by the transport (`Iface::atomic64_fetch`), whose old value
/// lands in `old`: a box the operation's request owns until this completion is seen.
pub(crate) fn atomic64_fetch(
    iface: &mut dyn Iface,
    ep: EpId,
    op: uct::Amo64,
    remote_addr: u64,
    rkey: &RemoteKey,
    old: &mut Box<u64>,
    comp: Comp,
) -> UcsResult<Done> {
    let at: *mut u64 = &mut **old;
    // SAFETY: the box's heap word does not move when the box does, and the request that
    // owns the box stays alive until the transport reports this completion.
    unsafe { iface.atomic64_fetch(ep, op, remote_addr, rkey, at, comp) }
}

/// Writes each chunk of the local UMR keys into the peer's chunk keys (`Iface::umr_put`).
/// The local keys lie over the Bufs of a send that stays alive until this completion is
/// seen (`proto::umr` builds them from the send's own layout).
pub(crate) fn umr_put(
    iface: &mut dyn Iface,
    ep: EpId,
    local: &[u32],
    remote: &[u32],
    chunk: u64,
    total: u64,
    comp: Comp,
) -> UcsResult<Done> {
    // SAFETY: the memory under `local` is a live send's buffer, kept valid and unchanged
    // by its request until this operation's completion.
    unsafe { iface.umr_put(ep, local, remote, chunk, total, comp) }
}

/// Sends `header` and the bytes of `iov` as an active message without copying them first.
/// Same soundness argument as [`get_zcopy`].
pub(crate) fn am_zcopy(
    iface: &mut dyn Iface,
    ep: EpId,
    id: u8,
    header: &[u8],
    iov: &[Iov],
    comp: Comp,
) -> UcsResult<Done> {
    // SAFETY: the iov entries come from Bufs of an operation that stays alive until this
    // completion is seen (the worker holds the request until then).
    unsafe { iface.am_zcopy(ep, id, header, iov, comp) }
}

/// Registers `[addr, addr+len)`, the span of a send's segments, for a rendezvous get.
///
/// Sound because the span's segments are [`Buf`]s of a live send, valid until the
/// receiver's acknowledgement, and the worker deregisters before completing that send. The
/// span may include gaps between segments; the domains used for rendezvous (self, cma)
/// serve only peers of the same user, which could read this memory anyway.
pub(crate) fn register_span(md: &dyn Md, addr: u64, len: usize) -> UcsResult<MemH> {
    // SAFETY: see above: the region stays mapped until `mem_dereg`, which the worker calls
    // before the send's request completes.
    unsafe { md.mem_reg(addr as *mut u8, len) }
}

/// Copies `len` bytes from address `src` to address `dst` of this process: one piece of
/// a rendezvous through shared memory, between a live operation's buffer and a same-host
/// peer's region mapped here.
///
/// Callers (`proto::rndv::mapped`) pass only ranges inside a live operation's [`Buf`]s (their
/// contract keeps them valid and, for a receive, untouched by anyone else until it
/// completes) or inside a peer's window checked against a mapping they hold for the call.
/// The peer may touch its bytes concurrently, as with any remote access; no reference to
/// them is made, and the ranges may even overlap (a copy that behaves as `memmove`).
pub(crate) fn copy_raw(src: u64, dst: u64, len: usize) {
    // SAFETY: see above: both ranges are live (a checked mapping or a live Buf).
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) }
}

/// `count` pieces of `len` bytes, piece `i` from `src + i * src_stride` to
/// `dst + i * dst_stride`: [`copy_raw`] in a loop, with the same contract for every piece.
///
/// A strided copy whose destination spans more than half the last-level cache stores
/// around the cache (non-temporal stores, the source prefetched a few pieces ahead): its
/// lines would be evicted before anyone read them, and a store that misses would first read
/// the line it overwrites. A smaller one stays in the cache, where the peer of a ping-pong
/// reads it next (streaming a 2 MiB span was 1.4x slower on a 32 MiB-L3 EPYC, 1.3x faster
/// on the 2-core Xeon VM of 2026-11-23: docs/ucp.md). One contiguous
/// piece is left to `memmove`, which makes that choice itself.
pub(crate) fn copy_strided(
    src: u64,
    src_stride: i64,
    dst: u64,
    dst_stride: i64,
    len: usize,
    count: u64,
) {
    #[cfg(target_arch = "x86_64")]
    if count > 1
        && count.saturating_mul(dst_stride.unsigned_abs()) > stream_min()
        && len.is_multiple_of(64)
        && dst.is_multiple_of(16)
        && dst_stride.rem_euclid(16) == 0
    {
        stream_strided(src, src_stride, dst, dst_stride, len, count);
        return;
    }
    let (mut s, mut d) = (src, dst);
    for _ in 0..count {
        // SAFETY: see `copy_raw`: the caller checked every piece's range.
        unsafe { std::ptr::copy(s as *const u8, d as *mut u8, len) };
        s = s.wrapping_add(src_stride as u64);
        d = d.wrapping_add(dst_stride as u64);
    }
}

/// Destination span above which [`copy_strided`] stores around the cache: half the
/// last-level cache.
fn stream_min() -> u64 {
    (ucs::sys::llc_size() / 2) as u64
}

/// [`copy_strided`] with non-temporal stores (16-byte aligned destination pieces whose
/// length is a multiple of 64).
#[cfg(target_arch = "x86_64")]
fn stream_strided(src: u64, src_stride: i64, dst: u64, dst_stride: i64, len: usize, count: u64) {
    use std::arch::x86_64::_MM_HINT_T0;
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_prefetch, _mm_sfence, _mm_stream_si128};
    const AHEAD: i64 = 8;
    let (mut s, mut d) = (src, dst);
    for _ in 0..count {
        let next = s.wrapping_add((AHEAD * src_stride) as u64);
        for line in (0..len).step_by(64) {
            // SAFETY: a prefetch is a hint: it never faults, whatever the address.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line as u64) as *const i8) };
        }
        for k in (0..len).step_by(16) {
            let (from, to) = (s + k as u64, d + k as u64);
            // SAFETY: see `copy_raw`: both 16-byte ranges lie inside the checked pieces;
            // the destination is 16-byte aligned (checked by the caller), the source load
            // is unaligned. SSE2 is part of x86_64.
            unsafe {
                _mm_stream_si128(to as *mut __m128i, _mm_loadu_si128(from as *const __m128i))
            };
        }
        s = s.wrapping_add(src_stride as u64);
        d = d.wrapping_add(dst_stride as u64);
    }
    // SAFETY: orders the non-temporal stores before whatever this thread does next (the
    // FIN or ACK that tells the peer the data is in place).
    unsafe { _mm_sfence() };
}

/// The iov list `bufs` (`count` entries of `len` bytes, entry `i` at `origin + i *
/// stride`, as [`crate::datatype::regular_iov`] found them) described by `dt`, that
/// vector's compiled layout.
///
/// Sound because the layout touches exactly the bytes of `bufs` (the caller built `dt`
/// from the same `count`, `len` and `stride`), which the `Buf` contract keeps valid. The
/// gaps between entries lie inside the layout's span but were never handed to us: a layout
/// with holes is only ever reached piece by piece (`LayoutBuf::dense` is false for it), so
/// no slice covers them.
pub(crate) fn layout_over_iov(origin: u64, dt: Arc<DtLayout>) -> LayoutBuf {
    // SAFETY: see above: every byte the layout touches is a byte of a live Buf.
    unsafe { LayoutBuf::new(origin as *mut u8, dt) }
}

/// Copies `src` to address `addr` of this process: the target side of a remote put.
///
/// Callers (the RMA request handler) pass only ranges that lie inside a region mapped with
/// `Worker::mem_map`, whose memory stays valid until `mem_unmap` (the `Buf` contract for
/// mapped memory, or the worker's own allocation).
pub(crate) fn write_raw(addr: u64, src: &[u8]) {
    // SAFETY: see above: the range was checked against a live mapped region.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), addr as *mut u8, src.len()) }
}

/// Runs `f` on `len` bytes at `addr` of a peer's shared memory mapped into this process.
///
/// Callers pass only ranges checked against the remote key's bounds inside a mapping the
/// worker holds (the mapping stays until the worker is dropped). The peer may touch the
/// same bytes concurrently, as with any RMA; the slice does not outlive the call.
pub(crate) fn with_raw_mut<R>(addr: u64, len: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    if len == 0 {
        return f(&mut []);
    }
    // SAFETY: see above: a live mapping holds the checked range.
    f(unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) })
}

/// As [`with_raw_mut`], for reading.
pub(crate) fn with_raw<R>(addr: u64, len: usize, f: impl FnOnce(&[u8]) -> R) -> R {
    if len == 0 {
        return f(&[]);
    }
    // SAFETY: see `with_raw_mut`.
    f(unsafe { std::slice::from_raw_parts(addr as *const u8, len) })
}

/// A received active message that its transport left in place (`uct::Handler::am_keep`):
/// where its bytes are, for reading them after the transport's `progress` returned.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeptBytes {
    addr: usize,
    len: usize,
}

impl KeptBytes {
    pub(crate) fn new(b: &[u8]) -> KeptBytes {
        KeptBytes {
            addr: b.as_ptr() as usize,
            len: b.len(),
        }
    }
}

/// Runs `f` on the bytes of a kept active message.
///
/// The caller (the worker's AM dispatch) passes only the message its interface kept in the
/// same `progress` call, before asking that interface to `am_release` it: the `AM_KEEP`
/// contract keeps the bytes in place and unchanged until then. The interfaces live as long
/// as the worker, and a worker dropped while `f` runs leaks them instead of unmapping their
/// memory (`Worker`'s `Drop`); the slice does not outlive the call.
#[inline(always)]
pub(crate) fn with_kept<R>(k: KeptBytes, f: impl FnOnce(&[u8]) -> R) -> R {
    if k.len == 0 {
        return f(&[]);
    }
    // SAFETY: see above: the transport keeps the message in place until am_release, which
    // comes after `f` returns.
    f(unsafe { std::slice::from_raw_parts(k.addr as *const u8, k.len) })
}

/// Copies from address `addr` of this process into `dst`: the target side of a remote get.
/// Same contract as [`write_raw`].
/// [`write_raw`] into a region of device memory: the driver copies.
pub(crate) fn write_raw_device(addr: u64, src: &[u8]) -> UcsResult<()> {
    // SAFETY: as for write_raw: the range was checked against a live region of this worker
    // (device memory here).
    unsafe {
        ucs::memtype::copy(
            addr as *mut u8,
            MemoryType::Cuda,
            src.as_ptr(),
            MemoryType::Host,
            src.len(),
        )
    }
}

/// [`read_raw`] from a region of device memory: the driver copies.
pub(crate) fn read_raw_device(addr: u64, dst: &mut [u8]) -> UcsResult<()> {
    // SAFETY: as for read_raw.
    unsafe {
        ucs::memtype::copy(
            dst.as_mut_ptr(),
            MemoryType::Host,
            addr as *const u8,
            MemoryType::Cuda,
            dst.len(),
        )
    }
}

pub(crate) fn read_raw(addr: u64, dst: &mut [u8]) {
    // SAFETY: the range was checked against a live mapped region.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len()) }
}

/// Atomic operations (`ucp_atomic_op_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum AtomicOp {
    Add = 0,
    And = 1,
    Or = 2,
    Xor = 3,
    Swap = 4,
    Cswap = 5,
}

impl AtomicOp {
    pub(crate) fn from_u8(v: u8) -> Option<AtomicOp> {
        Some(match v {
            0 => AtomicOp::Add,
            1 => AtomicOp::And,
            2 => AtomicOp::Or,
            3 => AtomicOp::Xor,
            4 => AtomicOp::Swap,
            5 => AtomicOp::Cswap,
            _ => return None,
        })
    }
}

/// The operand sizes of atomics, in bytes.
pub const ATOMIC_SIZES: [usize; 4] = [1, 2, 4, 8];

/// Performs an atomic operation on the aligned 1-, 2-, 4- or 8-byte word at `addr`;
/// returns the previous value, zero-extended. Same contract as [`write_raw`]; the caller
/// checked alignment and size.
pub(crate) fn atomic_raw(addr: u64, size: u8, op: AtomicOp, value: u64, compare: u64) -> u64 {
    use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64, AtomicU8, Ordering::SeqCst};
    use AtomicOp as A;
    // The operation on an atomic of type `$a` over integers of type `$t`.
    macro_rules! rmw {
        ($a:ty, $t:ty) => {{
            // SAFETY: a live mapped region holds this aligned word of `size` bytes
            // (checked by the caller); other processes reach it only through this
            // worker's atomics.
            let a = unsafe { <$a>::from_ptr(addr as *mut $t) };
            let (v, c) = (value as $t, compare as $t);
            u64::from(match op {
                A::Add => a.fetch_add(v, SeqCst),
                A::And => a.fetch_and(v, SeqCst),
                A::Or => a.fetch_or(v, SeqCst),
                A::Xor => a.fetch_xor(v, SeqCst),
                A::Swap => a.swap(v, SeqCst),
                A::Cswap => match a.compare_exchange(c, v, SeqCst, SeqCst) {
                    Ok(x) | Err(x) => x,
                },
            })
        }};
    }
    match size {
        1 => rmw!(AtomicU8, u8),
        2 => rmw!(AtomicU16, u16),
        4 => rmw!(AtomicU32, u32),
        _ => rmw!(AtomicU64, u64),
    }
}

/// Queues kernel `f` on `stream` with 64-bit arguments `args` (addresses and counts), over
/// user memory of a posted operation or memory Rucx allocated. The caller waits for the
/// stream (an event, or a synchronize) before it completes the operation or frees the
/// memory, so the kernel only touches memory under the contract of [`Buf::from_raw`].
#[cfg(feature = "cuda")]
pub(crate) fn gpu_launch(
    stream: &ucs::cuda::StreamRef,
    f: &ucs::cuda::Function,
    grid: u32,
    block: u32,
    args: &mut [u64],
) -> UcsResult<()> {
    let mut params: smallvec::SmallVec<[*mut std::ffi::c_void; 6]> =
        args.iter_mut().map(|a| (a as *mut u64).cast()).collect();
    // SAFETY: the generated kernels take exactly `args.len()` 64-bit parameters (pointers
    // and counts); the memory they reach is kept valid as described above.
    unsafe { stream.launch_kernel(f, (grid, 1, 1), (block, 1, 1), &mut params) }
}

/// Queues a copy of `n` bytes on `stream`, under the contract of [`gpu_launch`].
#[cfg(feature = "cuda")]
pub(crate) fn gpu_copy(
    stream: &ucs::cuda::StreamRef,
    dst: u64,
    src: u64,
    n: usize,
) -> UcsResult<()> {
    // SAFETY: as for `gpu_launch`.
    unsafe { stream.copy(dst, src, n) }
}

/// Queues a 2D copy on `stream`, under the contract of [`gpu_launch`].
#[cfg(feature = "cuda")]
pub(crate) fn gpu_copy_2d(
    stream: &ucs::cuda::StreamRef,
    (dst, dpitch): (u64, usize),
    (src, spitch): (u64, usize),
    width: usize,
    height: usize,
) -> UcsResult<()> {
    // SAFETY: as for `gpu_launch`.
    unsafe { stream.copy_2d(dst, dpitch, src, spitch, width, height) }
}

/// `Iface::device_rma` for the memory of a posted operation (`local` side of `work`),
/// under the contract of [`Buf::from_raw`]: the operation completes only after the
/// transport reported this one done.
#[cfg(feature = "cuda")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn device_rma(
    iface: &mut dyn Iface,
    ep: EpId,
    remote_addr: u64,
    len: usize,
    rkey: &RemoteKey,
    local_dev: i32,
    work: &mut dyn FnMut(u64, &ucs::cuda::StreamRef) -> UcsResult<()>,
    comp: Comp,
) -> UcsResult<Done> {
    // SAFETY: as described above.
    unsafe { iface.device_rma(ep, remote_addr, len, rkey, local_dev, work, comp) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streaming copy (taken only for spans above half the last-level cache, so no
    /// other test reaches it) moves the same bytes as the plain loop and leaves the gaps.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn streaming_strided_copy_matches_the_plain_loop() {
        let (len, count, stride) = (128usize, 64u64, 256i64);
        let src: Vec<u8> = (0..count as usize * stride as usize)
            .map(|i| (i * 7 + 3) as u8)
            .collect();
        // 16-byte aligned destinations, as the streaming path requires.
        let mut a = vec![0u128; count as usize * stride as usize / 16];
        let mut b = vec![0u128; count as usize * stride as usize / 16];
        let (pa, pb) = (a.as_mut_ptr() as u64, b.as_mut_ptr() as u64);
        stream_strided(src.as_ptr() as u64, stride, pa, stride, len, count);
        let (mut s, mut d) = (src.as_ptr() as u64, pb);
        for _ in 0..count {
            copy_raw(s, d, len);
            s += stride as u64;
            d += stride as u64;
        }
        let bytes = |v: &[u128]| v.iter().flat_map(|w| w.to_le_bytes()).collect::<Vec<u8>>();
        let (ba, bb) = (bytes(&a), bytes(&b));
        assert_eq!(ba, bb);
        assert_eq!(&ba[..len], &src[..len]);
        assert!(ba[len..stride as usize].iter().all(|&x| x == 0));
    }

    #[test]
    fn sub_read_write_stay_inside() {
        let mut v = vec![0u8; 16];
        // SAFETY: v outlives b and is only accessed through b here.
        let b = unsafe { Buf::from_mut_slice(&mut v) };
        b.write_at(4, &[1, 2, 3]);
        let mut out = [0u8; 3];
        b.read_at(4, &mut out);
        assert_eq!(out, [1, 2, 3]);
        assert!(b.sub(10, 7).is_none());
        assert_eq!(b.sub(4, 3).unwrap().len(), 3);
        assert_eq!(b.sub(16, 0), Some(Buf::EMPTY));
        assert!(b.sub(usize::MAX, 2).is_none());
        assert_eq!(v[4..7], [1, 2, 3]);
    }

    #[test]
    #[should_panic(expected = "write outside Buf")]
    fn write_outside_panics_before_touching_memory() {
        let mut v = vec![0u8; 4];
        // SAFETY: v outlives b.
        let b = unsafe { Buf::from_mut_slice(&mut v) };
        b.write_at(2, &[0; 3]);
    }
}
