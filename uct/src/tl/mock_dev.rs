//! `mock_dev`: a model of a memory lane for device memory, for testing protocol selection
//! and lanes on machines without a GPU (feature `mock`; offered only when `UCX_TLS` names
//! it). It is what `cuda_ipc` is to `ucp`, within one process: put and get reach a peer's
//! "device memory" (registered as such) and take local buffers of any memory type, and
//! every byte moves through `ucs::memtype::copy` (the driver, or a test's stand-in for it).
//! It is a model and says so in its name; it never moves data between processes.

use ucs::wire::{Reader, Writer};
use ucs::{Status, UcsResult};

use crate::ep::{Comp, Done, EpId, Iov};
use crate::iface::{Handler, Iface, IfaceAttr, IfaceFlags, MemCaps, OpLimits, PerfEstimate};
use crate::md::{BoundsMd, Md, MemTypes, RemoteKey};

const MAGIC: [u8; 4] = *b"MDEV";

/// Registers the "device memory" of this process only.
static MD: BoundsMd = BoundsMd::for_device("mock_dev", MAGIC, MemTypes::CUDA);

/// The model's interface.
#[derive(Debug)]
pub struct MockDevIface {
    attr: IfaceAttr,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    eps: usize,
    /// Operations made, for tests.
    pub ops: u64,
}

impl MockDevIface {
    pub fn open() -> MockDevIface {
        let dev_addr = Writer::default().u64(ucs::sys::host_id()).buf;
        let iface_addr = Writer::default().u32(std::process::id()).buf;
        let big = OpLimits {
            max_zcopy: usize::MAX,
            max_iov: 16,
            ..OpLimits::default()
        };
        MockDevIface {
            attr: IfaceAttr {
                flags: IfaceFlags::PUT_ZCOPY | IfaceFlags::GET_ZCOPY | IfaceFlags::CONNECT_TO_IFACE,
                am: OpLimits::default(),
                put: big,
                get: big,
                perf: PerfEstimate {
                    overhead_ns: 1000.0,
                    latency_ns: 5000.0,
                    bandwidth: 300e9,
                },
                mem: MemCaps {
                    am: MemTypes::empty(),
                    rma_local: MemTypes::HOST | MemTypes::CUDA | MemTypes::CUDA_MANAGED,
                    rma_remote: MemTypes::CUDA,
                },
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
            },
            dev_addr,
            iface_addr,
            eps: 0,
            ops: 0,
        }
    }

    /// # Safety
    /// As for `put_zcopy`/`get_zcopy`.
    unsafe fn rma(
        &mut self,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        put: bool,
    ) -> UcsResult<Done> {
        let total: usize = iov.iter().map(|v| v.length).sum();
        rkey.check_range(remote_addr, total as u64)?;
        // SAFETY: the caller keeps the local buffers valid; the remote range lies in a
        // registered region of this process (checked against the key).
        unsafe { super::copy_in_process(iov, remote_addr, put)? };
        self.ops += 1;
        Ok(Done::Now)
    }
}

impl Iface for MockDevIface {
    fn tl_name(&self) -> &str {
        "mock_dev"
    }
    fn device_name(&self) -> &str {
        "model"
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
        Ok(EpId(self.eps as u32))
    }
    fn ep_destroy(&mut self, _ep: EpId) {}

    unsafe fn put_zcopy(
        &mut self,
        _ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(iov, remote_addr, rkey, true) }
    }

    unsafe fn get_zcopy(
        &mut self,
        _ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: forwarded contract.
        unsafe { self.rma(iov, remote_addr, rkey, false) }
    }

    fn flush(&mut self, _ep: Option<EpId>, _comp: Comp) -> UcsResult<Done> {
        Ok(Done::Now)
    }

    fn progress(&mut self, _h: &mut dyn Handler) -> usize {
        0
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("ops", self.ops)]
    }
}
