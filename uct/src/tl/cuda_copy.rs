//! `cuda_copy`: copies between host and device memory within this process, on the
//! interface's own streams (feature `cuda`).
//!
//! It is the worker's memory-type copy engine, not a way to reach peers: `is_reachable`
//! is true only for this process's own address, and `ucp` connects it to itself
//! ([`IfaceFlags::MEMTYPE_COPY`]). A put copies the local iov into the "remote" range, a
//! get the other way; both ranges are addresses of this process (host, pinned, managed or
//! device memory: the driver infers each side from unified addressing). The remote range
//! must lie in the key's region, as for any transport.
//!
//! Up to [`SYNC_MAX`] bytes are copied at once and waited for. Larger copies go on one of
//! [`STREAMS`] streams of the device the copy touches, taken in turn so that operations in
//! flight overlap on the copy engines, each with an event of its own that `progress`
//! polls; `Handler::completion` reports it. Events are kept for reuse.

use std::collections::VecDeque;

use ucs::cuda::{self, Event, StreamSet};
use ucs::memtype::{self, MemoryType};
use ucs::wire::{Reader, Writer};
use ucs::{Status, UcsResult};

use crate::ep::{Comp, Done, EpId, Iov};
use crate::iface::{Handler, Iface, IfaceAttr, IfaceFlags, MemCaps, OpLimits, PerfEstimate};
use crate::md::{BoundsMd, Md, MemH, MemTypes, RemoteKey};

const MAGIC: [u8; 4] = *b"CCPY";
/// Largest copy made synchronously.
pub const SYNC_MAX: usize = 64 << 10;
/// Streams per device.
pub const STREAMS: usize = 4;

/// Whether this transport can run here: a CUDA driver with at least one device.
pub fn probe() -> Result<Vec<String>, String> {
    match cuda::driver() {
        Some(d) => Ok(vec![format!("cuda ({} devices)", d.devices().len())]),
        None => Err(cuda::absent_reason()
            .unwrap_or("no CUDA driver")
            .to_string()),
    }
}

/// The memory domain. Device and managed memory of this process are only recorded (a key
/// names an address range; there is nothing to export). Host memory is page-locked for
/// the driver while registered (`cuMemHostRegister`): `ucp_mem_map` of host memory on a
/// machine with a GPU makes the driver's copies between it and device memory run at the
/// bus's speed, as UCX's `cuda_copy` domain does. The application keeps a mapped region
/// valid until `ucp_mem_unmap`, so this needs no memory hooks; buffers it never maps stay
/// pageable.
#[derive(Debug)]
struct CopyMd {
    bounds: BoundsMd,
}

static MD: CopyMd = CopyMd {
    bounds: BoundsMd::for_device(
        "cuda_cpy",
        MAGIC,
        MemTypes::from_bits_truncate(
            MemTypes::HOST.bits() | MemTypes::CUDA.bits() | MemTypes::CUDA_MANAGED.bits(),
        ),
    ),
};

/// `MemH::key` of a registration that page-locked its host memory (to undo at dereg).
const PINNED: u64 = 1;

impl Md for CopyMd {
    fn name(&self) -> &str {
        self.bounds.name()
    }

    fn reg_mem_types(&self) -> MemTypes {
        self.bounds.reg_mem_types()
    }

    unsafe fn mem_reg(&self, addr: *mut u8, len: usize) -> UcsResult<MemH> {
        // SAFETY: forwarded contract.
        let mut h = unsafe { self.bounds.mem_reg(addr, len)? };
        if len > 0 && memtype::mem_type(addr) == MemoryType::Host {
            if let Some(d) = cuda::driver() {
                // SAFETY: the caller keeps the region mapped until `mem_dereg`.
                match unsafe { d.host_register(addr, len) } {
                    Ok(true) => h.key = PINNED,
                    // Registered by someone else: theirs to undo.
                    Ok(false) => {}
                    // Pinning is a speed-up: the region still works pageable.
                    Err(e) => log::debug!("cuda_copy: pinning {len} bytes failed: {e}"),
                }
            }
        }
        Ok(h)
    }

    fn mem_dereg(&self, memh: &MemH) -> UcsResult<()> {
        if memh.key == PINNED {
            if let Some(d) = cuda::driver() {
                // SAFETY: a range `mem_reg` registered, deregistered once (ucp drops the
                // handle with this call).
                unsafe { d.host_unregister(memh.base as *mut u8)? };
            }
        }
        Ok(())
    }

    fn mkey_pack(&self, memh: &MemH) -> Vec<u8> {
        self.bounds.mkey_pack(memh)
    }

    fn rkey_unpack(&self, buf: &[u8]) -> UcsResult<RemoteKey> {
        self.bounds.rkey_unpack(buf)
    }
}

/// An asynchronous copy in flight.
#[derive(Debug)]
struct Pending {
    dev: usize,
    event: Event,
    comp: Comp,
    /// When it was queued, ns.
    t0: u64,
}

/// The `cuda_copy` interface.
#[derive(Debug)]
pub struct CudaCopyIface {
    attr: IfaceAttr,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    eps: u32,
    /// `STREAMS` streams per device, made on first use, and their events.
    streams: StreamSet,
    pending: VecDeque<Pending>,
    /// Copies made at once and queued on streams, their bytes, and the time from queueing
    /// an asynchronous copy to seeing it done, ns.
    sync_copies: u64,
    async_copies: u64,
    bytes: u64,
    async_ns: u64,
}

impl CudaCopyIface {
    pub fn open() -> UcsResult<CudaCopyIface> {
        let driver = cuda::driver().ok_or(Status::Unsupported)?;
        let dev_addr = Writer::default().u64(ucs::sys::host_id()).buf;
        let iface_addr = Writer::default().u32(std::process::id()).buf;
        let big = OpLimits {
            max_short: 0,
            max_bcopy: 0,
            min_zcopy: 0,
            max_zcopy: usize::MAX,
            max_iov: 64,
            max_hdr: 0,
        };
        let all = MemTypes::HOST | MemTypes::CUDA | MemTypes::CUDA_MANAGED;
        Ok(CudaCopyIface {
            attr: IfaceAttr {
                flags: IfaceFlags::PUT_ZCOPY
                    | IfaceFlags::GET_ZCOPY
                    | IfaceFlags::CONNECT_TO_IFACE
                    | IfaceFlags::MEMTYPE_COPY,
                am: OpLimits::default(),
                put: big,
                get: big,
                perf: PerfEstimate {
                    overhead_ns: 1000.0,
                    latency_ns: 5000.0,
                    bandwidth: 50e9,
                },
                mem: MemCaps {
                    am: MemTypes::empty(),
                    rma_local: all,
                    rma_remote: all,
                },
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
            },
            dev_addr,
            iface_addr,
            eps: 0,
            streams: StreamSet::new(driver, STREAMS),
            pending: VecDeque::new(),
            sync_copies: 0,
            async_copies: 0,
            bytes: 0,
            async_ns: 0,
        })
    }

    /// # Safety
    /// As for `put_zcopy`/`get_zcopy`; `remote_addr` is an address of this process.
    unsafe fn copy(
        &mut self,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
        put: bool,
    ) -> UcsResult<Done> {
        let total: usize = iov.iter().map(|v| v.length).sum();
        rkey.check_range(remote_addr, total as u64)?;
        self.bytes += total as u64;
        if total <= SYNC_MAX {
            // SAFETY: the caller keeps the local buffers valid; the remote range lies in a
            // registered region of this process (checked against the key).
            unsafe { super::copy_in_process(iov, remote_addr, put)? };
            self.sync_copies += 1;
            return Ok(Done::Now);
        }
        // The device the copy touches: the remote range's, else the first local piece's.
        let dev = [remote_addr]
            .into_iter()
            .chain(iov.iter().map(|v| v.buffer as u64))
            .map(|p| memtype::detect(p as *const u8))
            .find(|i| i.mem_type != MemoryType::Host && i.device >= 0)
            .map_or(0, |i| i.device as usize)
            .min(cuda::driver().map_or(0, |d| d.devices().len().saturating_sub(1)));
        let (si, event) = self.streams.take(dev)?;
        let s = self.streams.stream(dev, si);
        let mut at = remote_addr;
        let last = iov.len().saturating_sub(1);
        for (k, v) in iov.iter().enumerate() {
            let (dst, src) = if put {
                (at, v.buffer as u64)
            } else {
                (v.buffer as u64, at)
            };
            // SAFETY: the caller keeps both ranges valid until the completion is reported,
            // which waits for the event recorded after the last piece.
            unsafe {
                if k == last {
                    s.copy_recorded(dst, src, v.length, &event)?;
                } else {
                    s.copy_async(dst, src, v.length)?;
                }
            }
            at += v.length as u64;
        }
        self.async_copies += 1;
        self.pending.push_back(Pending {
            dev,
            event,
            comp,
            t0: ucs::time::now_ns(),
        });
        Ok(Done::Later)
    }
}

impl Iface for CudaCopyIface {
    fn tl_name(&self) -> &str {
        "cuda_copy"
    }
    fn device_name(&self) -> &str {
        "cuda"
    }
    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn md(&self) -> &dyn Md {
        &MD
    }
    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }
    fn is_reachable(&self, dev: &[u8], iface: &[u8]) -> bool {
        dev == self.dev_addr.as_slice() && Reader::new(iface).u32() == Some(std::process::id())
    }
    fn ep_connect(&mut self, dev: &[u8], iface: &[u8]) -> UcsResult<EpId> {
        if !self.is_reachable(dev, iface) {
            return Err(Status::Unreachable);
        }
        self.eps += 1;
        Ok(EpId(self.eps))
    }
    fn ep_destroy(&mut self, _ep: EpId) {}

    unsafe fn put_zcopy(
        &mut self,
        _ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: forwarded contract.
        unsafe { self.copy(iov, remote_addr, rkey, comp, true) }
    }

    unsafe fn get_zcopy(
        &mut self,
        _ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: forwarded contract.
        unsafe { self.copy(iov, remote_addr, rkey, comp, false) }
    }

    fn flush(&mut self, _ep: Option<EpId>, _comp: Comp) -> UcsResult<Done> {
        for p in &self.pending {
            p.event.synchronize()?;
        }
        Ok(Done::Now)
    }

    fn progress(&mut self, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        let mut i = 0;
        while i < self.pending.len() {
            let status = match self.pending[i].event.done() {
                Ok(false) => {
                    i += 1;
                    continue;
                }
                Ok(true) => Status::Ok,
                Err(e) => e,
            };
            let p = self.pending.remove(i).expect("index in range");
            self.async_ns += ucs::time::now_ns().saturating_sub(p.t0);
            self.streams.give_back(p.dev, p.event);
            h.completion(p.comp, status);
            n += 1;
        }
        n
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("copy_sync", self.sync_copies),
            ("copy_async", self.async_copies),
            ("copy_bytes", self.bytes),
            ("copy_async_ns", self.async_ns),
            ("copy_in_flight", self.pending.len() as u64),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Host memory registered with the domain is page-locked until it is deregistered; the
    /// second registration of the same range leaves the first one's pinning alone. Needs a
    /// CUDA driver (run by `contrib/gpu/test.sh`); says so and passes where there is none.
    #[test]
    fn host_memory_is_pinned_while_registered() {
        let Some(d) = cuda::driver() else {
            // Past libtest's capture, so that the skip is seen.
            use std::io::Write as _;
            let why = cuda::absent_reason().unwrap_or("no CUDA driver");
            let _ = writeln!(std::io::stderr(), "SKIPPED: pinning host memory: {why}");
            return;
        };
        let mut v = vec![7u8; 4 << 20];
        let p = v.as_mut_ptr();
        assert!(!d.is_pinned_host(p), "pageable to start with");
        // SAFETY: the vector outlives both registrations.
        let h = unsafe { MD.mem_reg(p, v.len()) }.unwrap();
        assert!(d.is_pinned_host(p), "pinned while registered");
        assert!(
            d.is_pinned_host(p.wrapping_add(v.len() - 1)),
            "to its last byte"
        );
        // SAFETY: as above.
        let again = unsafe { MD.mem_reg(p, v.len()) }.unwrap();
        assert_ne!(again.key, PINNED, "the second registration pins nothing");
        MD.mem_dereg(&again).unwrap();
        assert!(d.is_pinned_host(p), "still pinned by the first");
        MD.mem_dereg(&h).unwrap();
        assert!(!d.is_pinned_host(p), "pageable again after deregistration");
        assert_eq!(v[0], 7);
    }
}
