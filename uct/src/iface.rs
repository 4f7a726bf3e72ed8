//! The interface: one transport on one device, with the endpoints it has opened.
//!
//! An [`Iface`] is driven by one thread at a time. Endpoints are handles ([`EpId`]) into
//! the interface that created them, so the ep operations (`am_short`, `put_zcopy`, ...)
//! are methods of the interface taking the handle. Progress hands every event (a received
//! active message, a completed zero-copy operation, an endpoint that can send again, a
//! failed peer) to a [`Handler`]; the handler cannot call back into the interface, so a
//! protocol layer records what to do and acts after `progress` returns.

use std::os::fd::RawFd;

use bitflags::bitflags;
use ucs::{Status, UcsResult};

use crate::ep::{Comp, Done, EpId, Iov};
use crate::md::{Md, MemTypes, RemoteKey};

/// Active-message ids run from 0 to `AM_ID_MAX - 1`.
pub const AM_ID_MAX: u8 = 64;

bitflags! {
    /// What an interface can do. Every flag set has a working operation behind it (the
    /// conformance suite checks this).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct IfaceFlags: u64 {
        const AM_SHORT = 1 << 0;
        const AM_BCOPY = 1 << 1;
        const AM_ZCOPY = 1 << 2;
        const PUT_ZCOPY = 1 << 3;
        const GET_ZCOPY = 1 << 4;
        /// `pending_add` queues a wake-up token when the endpoint is out of resources.
        const PENDING = 1 << 5;
        /// Endpoints are created from the peer's interface address alone.
        const CONNECT_TO_IFACE = 1 << 6;
        /// `event_fd` + `arm` let a caller sleep until something arrives.
        const EVENT_RECV = 1 << 7;
        /// A dead or disconnected peer is reported through `Handler::ep_error`.
        const ERRHANDLE_PEER_FAILURE = 1 << 8;
        /// Operations on one endpoint complete in the order they were posted.
        const EP_ORDERED = 1 << 9;
        /// Progress offers received active messages through `Handler::am_keep`: a handler
        /// may leave one in place and use it after `progress` returned, until `am_release`.
        const AM_KEEP = 1 << 10;
        /// Copies between memory types within this process: an endpoint to the process's
        /// own interface address, put and get between any two of its addresses. It reaches
        /// no peer; a protocol layer uses it to move data between host and device memory.
        const MEMTYPE_COPY = 1 << 11;
        /// `device_rma`: the interface maps a peer's device memory into this process and
        /// runs the caller's own device work (a kernel, say) on it, on its streams.
        const DEVICE_RMA = 1 << 12;
        /// Put and get are one-sided: the device (or the kernel) moves the bytes without
        /// the peer's CPU, as RDMA and cross-memory attach do. A network transport without
        /// it emulates them over its own messages.
        const RMA_ONE_SIDED = 1 << 13;
        /// UMR gather/scatter: `umr_keys` builds indirect keys over lists of this
        /// process's blocks and `umr_put` writes from such keys into a peer's, so that
        /// noncontiguous data moves with no packing (`umr_max_klm` entries per key).
        const UMR = 1 << 14;
        /// 64-bit fetching atomics executed by the transport (`atomic64_fetch`): the
        /// device (an HCA) applies them to the peer's memory, atomic with respect to the
        /// other atomics of that device, not to the peer CPU's.
        const ATOMIC64 = 1 << 15;
        /// Its progress only delivers what this process queued on it (loopback): it
        /// needs polling only while [`Iface::has_work`] says so, and a worker polling one
        /// other interface keeps its one-interface fast path beside it.
        const ON_DEMAND = 1 << 16;
    }
}

/// A 64-bit atomic operation on a peer's memory, as an HCA executes them (IB's fetch-add
/// and compare-and-swap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amo64 {
    Add(u64),
    /// Stores `swap` if the word equals `compare`.
    Cswap {
        compare: u64,
        swap: u64,
    },
}

/// Limits of one kind of operation (bytes unless noted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpLimits {
    pub max_short: usize,
    pub max_bcopy: usize,
    pub min_zcopy: usize,
    pub max_zcopy: usize,
    /// Most iov entries in one zcopy operation.
    pub max_iov: usize,
    /// Largest header for `am_zcopy`.
    pub max_hdr: usize,
}

/// A performance estimate: sending `n` bytes costs `overhead + n / bandwidth` of CPU time at
/// the sender, and arrives `latency` after that.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PerfEstimate {
    /// CPU time per operation at the initiator, ns.
    pub overhead_ns: f64,
    /// One-way latency, ns.
    pub latency_ns: f64,
    /// Bytes per second.
    pub bandwidth: f64,
}

impl PerfEstimate {
    /// Estimated one-way time for `size` bytes, ns.
    pub fn time_ns(&self, size: usize) -> f64 {
        self.overhead_ns + self.latency_ns + size as f64 * 1e9 / self.bandwidth
    }
}

/// Which memory types each kind of operation accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemCaps {
    /// Buffers of the active-message operations (the sender's data, the receiver's).
    pub am: MemTypes,
    /// The local buffers of put/get.
    pub rma_local: MemTypes,
    /// The remote memory of put/get (what the peer's key may describe).
    pub rma_remote: MemTypes,
}

impl MemCaps {
    /// Transports that copy with the CPU: host and managed memory everywhere.
    pub const HOST: MemCaps = MemCaps {
        am: MemTypes::HOST_ACCESSIBLE,
        rma_local: MemTypes::HOST_ACCESSIBLE,
        rma_remote: MemTypes::HOST_ACCESSIBLE,
    };
}

/// Everything `ucp` needs to know to choose this interface for an operation.
#[derive(Clone, Debug, PartialEq)]
pub struct IfaceAttr {
    pub flags: IfaceFlags,
    pub am: OpLimits,
    pub put: OpLimits,
    pub get: OpLimits,
    pub perf: PerfEstimate,
    /// Memory types per kind of operation.
    pub mem: MemCaps,
    /// Lengths of the blobs returned by `device_address` / `iface_address`.
    pub device_addr_len: usize,
    pub iface_addr_len: usize,
}

/// What moving noncontiguous data costs on an interface with [`IfaceFlags::UMR`], measured
/// on its provider (ns): a UMR transfer costs `wr_ns` per chunk (one RDMA work request),
/// `entry_ns` per (address, length) entry of either side's keys and `byte_ns` per byte;
/// the packed alternative sends `seg`-byte active messages at `send_ns` each.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UmrCost {
    pub wr_ns: f64,
    pub entry_ns: f64,
    pub byte_ns: f64,
    pub send_ns: f64,
    pub seg: usize,
}

/// Receives what `progress` finds. Default methods ignore the event.
pub trait Handler {
    /// An active message with id `id`. `data` is only valid during the call: copy what
    /// must outlive it.
    fn am(&mut self, id: u8, data: &[u8]);
    /// An active message from a transport with `IfaceFlags::AM_KEEP`. Returning true keeps
    /// it: `progress` returns at once, and `data` stays valid and unchanged in place until
    /// the interface's `am_release` (further `progress` calls deliver later messages but
    /// never reuse the kept one's memory). At most one message is kept at a time. The
    /// default handles the message with `am` and keeps nothing.
    fn am_keep(&mut self, id: u8, data: &[u8]) -> bool {
        self.am(id, data);
        false
    }
    /// The zero-copy operation or flush posted with `comp` finished with `status`.
    fn completion(&mut self, comp: Comp, status: Status) {
        let _ = (comp, status);
    }
    /// `ep` has resources again; `token` was given to `pending_add`.
    fn pending(&mut self, ep: EpId, token: u64) {
        let _ = (ep, token);
    }
    /// `ep` failed (peer died, connection reset, malformed data). Reported once.
    fn ep_error(&mut self, ep: EpId, status: Status) {
        let _ = (ep, status);
    }
}

/// A transport interface. See the module documentation for the handle model.
pub trait Iface: Send + std::fmt::Debug {
    /// Transport name as `UCX_TLS` spells it (`posix`, `tcp`, ...).
    fn tl_name(&self) -> &str;
    /// Device name (`memory`, `lo`, `eth0`, ...).
    fn device_name(&self) -> &str;
    fn attr(&self) -> &IfaceAttr;
    fn md(&self) -> &dyn Md;

    /// Identifies the device (host for shared memory, IP for tcp).
    fn device_address(&self) -> &[u8];
    /// Identifies this interface on its device.
    fn iface_address(&self) -> &[u8];
    /// True when an endpoint to that peer interface can be created. Never fails: malformed
    /// addresses are simply unreachable.
    fn is_reachable(&self, device_addr: &[u8], iface_addr: &[u8]) -> bool;

    /// Creates an endpoint to a peer interface (connect-to-iface).
    fn ep_connect(&mut self, device_addr: &[u8], iface_addr: &[u8]) -> UcsResult<EpId>;
    /// Destroys an endpoint. Outstanding operations complete with `Canceled`.
    fn ep_destroy(&mut self, ep: EpId);

    /// Sends `header` (8 bytes, delivered first) and `payload`, both copied before return.
    fn am_short(&mut self, ep: EpId, id: u8, header: u64, payload: &[u8]) -> UcsResult<()> {
        let _ = (ep, id, header, payload);
        Err(Status::Unsupported)
    }

    /// Sends what `pack` writes into the transport's buffer (at most `attr().am.max_bcopy`
    /// bytes); `pack` returns the length written. Returns that length.
    fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> UcsResult<usize> {
        let _ = (ep, id, pack);
        Err(Status::Unsupported)
    }

    /// Sends `header` followed by the bytes of `iov` without copying them first.
    /// Returns `Done::Now` when the buffers may already be reused, or `Done::Later` when
    /// `comp` will be reported to `Handler::completion`.
    ///
    /// # Safety
    /// Every iov entry must point to `length` readable bytes that stay valid and unchanged
    /// until the operation completes (now, or when `comp` is reported).
    unsafe fn am_zcopy(
        &mut self,
        ep: EpId,
        id: u8,
        header: &[u8],
        iov: &[Iov],
        comp: Comp,
    ) -> UcsResult<Done> {
        let _ = (ep, id, header, iov, comp);
        Err(Status::Unsupported)
    }

    /// Writes the bytes of `iov`, in order, to `remote_addr..` in the peer's region `rkey`.
    ///
    /// # Safety
    /// As for `am_zcopy`: the iov buffers stay valid until completion.
    unsafe fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        let _ = (ep, iov, remote_addr, rkey, comp);
        Err(Status::Unsupported)
    }

    /// Reads `remote_addr..` of the peer's region `rkey` into the buffers of `iov`, in order.
    ///
    /// # Safety
    /// Every iov entry must point to `length` writable bytes, not otherwise accessed, that
    /// stay valid until the operation completes.
    unsafe fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        let _ = (ep, iov, remote_addr, rkey, comp);
        Err(Status::Unsupported)
    }

    /// Reads the peer's segments `remote` (`(address, length)` pairs, in order) of region
    /// `rkey` into the buffers of `local`, in order; both describe the same number of
    /// bytes, cut differently. Transports that cannot gather remotely in one operation
    /// return `Unsupported` (the caller then reads segment by segment with `get_zcopy`).
    ///
    /// # Safety
    /// As for `get_zcopy`.
    unsafe fn get_zcopy_iov(
        &mut self,
        ep: EpId,
        local: &[Iov],
        remote: &[(u64, u64)],
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        let _ = (ep, local, remote, rkey, comp);
        Err(Status::Unsupported)
    }

    /// Applies `op` to the 8-byte word at `remote_addr` (aligned) of region `rkey` and
    /// writes the word's old value to `*result` before completing (`Done::Now`, or
    /// `Handler::completion(comp)` later). Transports without [`IfaceFlags::ATOMIC64`]
    /// return `Unsupported`.
    ///
    /// # Safety
    /// `result` is valid for an 8-byte write until the operation completes.
    unsafe fn atomic64_fetch(
        &mut self,
        ep: EpId,
        op: Amo64,
        remote_addr: u64,
        rkey: &RemoteKey,
        result: *mut u64,
        comp: Comp,
    ) -> UcsResult<Done> {
        let _ = (ep, op, remote_addr, rkey, result, comp);
        Err(Status::Unsupported)
    }

    /// Maps `[remote_addr, remote_addr + len)` of the peer's region `rkey` into this
    /// process (on device `local_dev`, or the owning device when negative) and calls
    /// `work(mapped_address, stream)` to queue device work on it on one of the
    /// interface's streams; the operation is done when that work has run (`Done::Now`
    /// when it was waited for here, else `Handler::completion(comp)` later). The mapping
    /// stays open until then. Interfaces with [`IfaceFlags::DEVICE_RMA`] implement it.
    ///
    /// # Safety
    /// The memory `work` touches on this side stays valid until the operation completes.
    #[cfg(feature = "cuda")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn device_rma(
        &mut self,
        ep: EpId,
        remote_addr: u64,
        len: usize,
        rkey: &RemoteKey,
        local_dev: i32,
        work: &mut dyn FnMut(u64, &ucs::cuda::StreamRef) -> UcsResult<()>,
        comp: Comp,
    ) -> UcsResult<Done> {
        let _ = (ep, remote_addr, len, rkey, local_dev, work, comp);
        Err(Status::Unsupported)
    }

    /// The most (address, length) entries of one UMR indirect key; 0 without
    /// [`IfaceFlags::UMR`].
    fn umr_max_klm(&self) -> usize {
        0
    }

    /// One indirect key per `chunk` bytes of the blocks `segs` (this process's memory, in
    /// order), each key's addresses running from 0 over its chunk. The span around the
    /// blocks is registered first (whole buffers, as the UMR protocol asks), and the keys
    /// are kept in the interface's cache under `id` (a name of the layout and where it
    /// lies) and `chunk`: a second call with the same triple builds nothing. Each call is
    /// a use, ended by `umr_release`; the cache destroys the least recently used sets
    /// that are not in use when it is full or the device runs out of keys.
    fn umr_keys(
        &mut self,
        id: (u128, u64, u64),
        segs: &[(u64, u64)],
        chunk: u64,
    ) -> UcsResult<Vec<u32>> {
        let _ = (id, segs, chunk);
        Err(Status::Unsupported)
    }

    /// The costs of UMR transfers and of their packed alternative on this interface,
    /// measured on its provider at first call (`None` without [`IfaceFlags::UMR`]).
    fn umr_cost(&mut self) -> Option<UmrCost> {
        None
    }

    /// Ends one use of the keys `umr_keys` gave for `(id, chunk)`: until every use has
    /// ended, the cache keeps them (a peer may still write through them).
    fn umr_release(&mut self, id: (u128, u64, u64), chunk: u64) {
        let _ = (id, chunk);
    }

    /// Writes chunk `i` of the local keys into the peer's chunk key `remote[i]`, for every
    /// chunk: `chunk` bytes each but the last, `total` in all. Completes as one operation.
    ///
    /// # Safety
    /// The memory under `local` stays valid and unchanged until the operation completes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn umr_put(
        &mut self,
        ep: EpId,
        local: &[u32],
        remote: &[u32],
        chunk: u64,
        total: u64,
        comp: Comp,
    ) -> UcsResult<Done> {
        let _ = (ep, local, remote, chunk, total, comp);
        Err(Status::Unsupported)
    }

    /// Asks to be told (`Handler::pending(ep, token)`) when `ep` can send again. Returns
    /// `Err(Busy)` when it can send right now (retry instead), as UCX does.
    fn pending_add(&mut self, ep: EpId, token: u64) -> UcsResult<()> {
        let _ = (ep, token);
        Err(Status::Unsupported)
    }

    /// Drops the pending tokens of `ep` and returns them in order.
    fn pending_purge(&mut self, ep: EpId) -> Vec<u64> {
        let _ = ep;
        Vec::new()
    }

    /// Completes when every operation posted before it on `ep` (or on every endpoint when
    /// `None`) has completed at the target.
    fn flush(&mut self, ep: Option<EpId>, comp: Comp) -> UcsResult<Done>;

    /// Whether a [`flush`](Self::flush) of `ep` would complete at once (`Ok(Done::Now)`):
    /// nothing posted on it is in flight. Lets a caller skip making a flush request it
    /// would free at once; `false` (the default) is always safe.
    fn ep_idle(&self, ep: EpId) -> bool {
        let _ = ep;
        false
    }

    /// Orders operations posted after it after those posted before it.
    fn fence(&mut self, ep: Option<EpId>) -> UcsResult<()> {
        let _ = ep;
        Ok(())
    }

    /// Makes progress; returns how many events were handed to `h`.
    fn progress(&mut self, h: &mut dyn Handler) -> usize;

    /// Whether `progress` has anything to do (interfaces with `ON_DEMAND`; the others
    /// are always polled).
    fn has_work(&self) -> bool {
        true
    }

    /// Gives back the active message a handler kept (`Handler::am_keep`); its memory may be
    /// reused from now on. Does nothing when no message is kept.
    fn am_release(&mut self) {}

    /// A descriptor that becomes readable when the interface has something to progress
    /// after `arm` succeeded.
    fn event_fd(&self) -> Option<RawFd> {
        None
    }

    /// Prepares for sleeping on `event_fd`. `Err(Busy)` means events are already waiting:
    /// progress instead of sleeping.
    fn arm(&mut self) -> UcsResult<()> {
        Err(Status::Unsupported)
    }

    /// The transport's own counters (as UCX's statistics), by name.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Checks an AM id against `AM_ID_MAX`.
#[inline]
pub fn check_am_id(id: u8) -> UcsResult<()> {
    if id < AM_ID_MAX {
        Ok(())
    } else {
        Err(Status::InvalidParam)
    }
}
