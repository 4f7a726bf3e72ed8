//! The RMA protocol's state: mapped regions and their handles, remote keys, the order of
//! an endpoint's operations carried by messages, the operations themselves, and the peers'
//! regions mapped here. Below the engine's tables, which hold it (`worker::state`).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use slab::Slab;
use ucs::shm::Segment;
use ucs::{Status, UcsResult};
use uct::{MemH, MemoryType, RemoteKey};

use crate::buf::{AtomicOp, Buf};
use crate::datatype::DataState;
use crate::proto::wire::ShmWindow;
use crate::request::EpHandle;

/// A mapped region (`ucp_mem_h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MemHandle {
    pub(super) slot: u32,
    pub(super) nonce: u64,
}

#[derive(Debug)]
pub(crate) struct MemReg {
    pub(super) nonce: u64,
    pub(super) base: u64,
    pub(super) len: u64,
    pub(super) regs: Vec<(usize, MemH)>,
    /// Memory the worker allocated for the region (`UCP_MEM_MAP_ALLOCATE`).
    pub(super) owned: Option<Owned>,
    /// Its memory type: requests carried by messages copy with the driver into device
    /// memory, and refuse atomics there.
    pub(super) mem: MemoryType,
}

/// Memory a worker allocated: shared memory that same-host peers map (when the posix
/// transport is on), else ordinary heap memory. Shared memory may also come from a
/// [`SharedRegion`] that several workers map.
#[derive(Debug)]
pub(super) enum Owned {
    Shm(Arc<Segment>),
    Heap(Vec<u8>),
    #[cfg(feature = "cuda")]
    Device(ucs::cuda::DeviceAlloc),
}

/// Memory allocated for remote access before, and apart from, any worker (`ucp_mem_map`
/// with allocation is a call on a context): a shared-memory segment, zero-filled and
/// populated, that every worker mapping it with
/// [`Worker::mem_map_region`](crate::Worker::mem_map_region) exposes to its
/// same-host peers as it exposes memory it allocated itself (they map it, and put, get
/// and rendezvous become copies). Freed when the last of the handle and the workers'
/// mappings lets go of it.
#[derive(Clone, Debug)]
pub struct SharedRegion(pub(super) Arc<Segment>);

impl SharedRegion {
    /// Allocates `len` bytes (at least one).
    pub fn new(len: usize) -> std::io::Result<SharedRegion> {
        Segment::create(len.max(1)).map(|s| SharedRegion(Arc::new(s)))
    }

    /// The region's address in this process.
    pub fn base(&self) -> *mut u8 {
        self.0.base()
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A remote key unpacked for one endpoint (`ucp_rkey_h`).
#[derive(Clone, Debug)]
pub struct Rkey {
    pub(super) ep: usize,
    pub(super) slot: u32,
    pub(super) nonce: u64,
    pub(super) base: u64,
    pub(super) len: u64,
    /// The key of the endpoint's memory lane, when the region is reachable through it.
    pub(crate) lane: Option<RemoteKey>,
    /// The key of its memory lane for device memory (the region is device memory).
    pub(crate) lane_dev: Option<RemoteKey>,
    /// The peer's shared-memory region mapped here: put and get become copies.
    pub(super) mapped: Option<Arc<Segment>>,
    /// The endpoint's count of operations carried by messages: a copy through `mapped`
    /// must wait behind them.
    pub(super) order: Order,
}

/// How many RMA operations of an endpoint travel as messages that the target has not
/// confirmed yet (queued, awaiting replies, or puts awaiting their acknowledgement). The
/// worker writes it under its lock; the C shim's mapped-copy path, which runs without the
/// lock, reads it through the endpoint's keys ([`Rkey::mapped_range`]).
#[derive(Clone, Debug, Default)]
pub(crate) struct Order(Arc<AtomicU32>);

impl Order {
    /// Records the endpoint's counts.
    pub(crate) fn note(&self, carried: u32, puts_unacked: u32) {
        self.0
            .store(carried.saturating_add(puts_unacked), Ordering::Release);
    }

    /// Whether an operation that takes effect at once would overtake an earlier one.
    #[inline]
    pub(crate) fn pending(&self) -> bool {
        self.0.load(Ordering::Acquire) != 0
    }
}

impl Rkey {
    /// The remote region's bounds.
    pub fn bounds(&self) -> (u64, u64) {
        (self.base, self.len)
    }

    /// Where remote address `addr` lies in this process, when the peer's region is mapped
    /// here (same-host shared memory): loads and stores there reach the peer's memory
    /// (`ucp_rkey_ptr`). `Err(Unreachable)` when it is not mapped; `Err(InvalidParam)`
    /// outside the region.
    pub fn local_ptr(&self, addr: u64) -> UcsResult<*mut u8> {
        let seg = self.mapped.as_ref().ok_or(Status::Unreachable)?;
        if addr < self.base || addr - self.base >= self.len.max(1) {
            return Err(Status::InvalidParam);
        }
        Ok(seg.base().wrapping_add((addr - self.base) as usize))
    }

    /// Where `len` bytes at remote address `addr` lie in this process, when the key is
    /// endpoint `ep`'s and the peer's region is mapped here and holds them all: what a put
    /// or get of host memory that touches nothing else needs (the mapping lives as long as
    /// the key). `None` otherwise, the general path's to report.
    #[inline]
    pub fn mapped_range(&self, ep: EpHandle, addr: u64, len: usize) -> Option<*mut u8> {
        let seg = self.mapped.as_ref()?;
        if self.order.pending() {
            return None;
        }
        let off = addr.checked_sub(self.base)?;
        let end = off.checked_add(len as u64)?;
        (self.ep == ep.0 as usize && end <= self.len).then(|| seg.base().wrapping_add(off as usize))
    }

    /// Spoils the key's nonce, as a peer forging a key would.
    #[cfg(test)]
    pub(crate) fn forge_nonce_for_test(&mut self) {
        self.nonce ^= 2;
    }

    pub(super) fn check(&self, addr: u64, len: usize) -> UcsResult<()> {
        RemoteKey {
            base: self.base,
            len: self.len,
            key: 0,
        }
        .check_range(addr, len as u64)
    }
}

/// The state of an RMA operation carried by messages.
#[derive(Debug)]
pub(crate) struct RmaOp {
    pub(crate) ep: usize,
    pub(super) kind: RmaKind,
    pub(super) data: DataState,
    pub(super) total: usize,
    /// Bytes sent (put) or requested (get) so far.
    pub(super) offset: usize,
    /// Replies still expected.
    pub(super) replies: u32,
    pub(super) status: Status,
    pub(super) addr: u64,
    pub(super) slot: u32,
    pub(super) nonce: u64,
    /// Where an atomic's old value goes.
    pub(super) reply_buf: Option<Buf>,
    pub(super) atomic: (AtomicOp, u8, u64, u64),
    /// Transport completions still expected (zero-copy lane).
    pub(super) comps: u32,
    /// A device atomic's old value, written by the transport before it completes.
    pub(super) amo_old: Option<Box<u64>>,
    /// Carried by messages (counted in the endpoint's `rma_carried`).
    pub(crate) carried: bool,
}

impl RmaOp {
    /// When the operation completes: a get into a device layout unpacks the bytes that
    /// landed in its scratch buffer.
    pub(crate) fn finish(&mut self) -> UcsResult<()> {
        match self.kind {
            RmaKind::Get => self.data.finish_recv(self.total),
            _ => Ok(()),
        }
    }
}

/// A get posted without a request (`Worker::rma_light`):
/// one message out, one reply back, written to `buf`. `gen` tells a reply meant for an
/// earlier get of the same slot.
#[derive(Debug)]
pub(crate) struct LightGet {
    pub(crate) ep: usize,
    pub(crate) gen: u32,
    pub(super) buf: Buf,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RmaKind {
    Put,
    Get,
    Atomic,
}

/// Peers' shared-memory regions mapped here, by (pid, fd, region nonce).
pub(crate) type MappingCache = rustc_hash::FxHashMap<(u32, u32, u64), Arc<Segment>>;

/// Peers' regions kept mapped at once (see `map_window`).
const MAX_MAPPINGS: usize = 256;

/// The shared-memory window of the worker-allocated region (of `mems`, `shm_regions` of
/// which are shared memory) holding `[lo, hi)`, if any: what a rendezvous key carries so a
/// same-host peer copies without system calls.
pub(crate) fn shm_window(
    mems: &Slab<MemReg>,
    shm_regions: usize,
    lo: u64,
    hi: u64,
) -> Option<ShmWindow> {
    if shm_regions == 0 {
        return None;
    }
    mems.iter().find_map(|(_, m)| match &m.owned {
        Some(Owned::Shm(seg)) if lo >= m.base && hi <= m.base + m.len => Some(ShmWindow {
            pid: std::process::id(),
            fd: seg.fd() as u32,
            nonce: m.nonce,
            seg_len: seg.len() as u64,
            base: m.base,
            len: m.len,
        }),
        _ => None,
    })
}

/// Maps a same-host peer's region, once per region (`mappings` caches them by pid, fd and
/// nonce); `None` when it cannot be (no ptrace rights over the peer, a peer gone, a file
/// shorter than announced). Callers pass only windows of peers on this host (an endpoint
/// with a memory lane, or a shared-memory one).
pub(crate) fn map_window(mappings: &mut MappingCache, w: &ShmWindow) -> Option<Arc<Segment>> {
    if w.pid == 0 || w.pid > i32::MAX as u32 {
        return None;
    }
    let key = (w.pid, w.fd, w.nonce);
    if let Some(m) = mappings.get(&key) {
        if m.len() as u64 == w.seg_len {
            return Some(Arc::clone(m));
        }
    }
    match Segment::attach(w.pid as i32, w.fd, w.seg_len as usize) {
        Ok(seg) => {
            // Regions come and go: a long-lived worker keeps the recent ones (a key still
            // using an evicted mapping holds it alive).
            if mappings.len() >= MAX_MAPPINGS {
                mappings.clear();
            }
            let seg = Arc::new(seg);
            mappings.insert(key, Arc::clone(&seg));
            Some(seg)
        }
        Err(e) => {
            log::debug!("ucp: cannot map the peer's region: {e}");
            None
        }
    }
}
