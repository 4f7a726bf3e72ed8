//! The verbs provider interface: what an RC transport needs of an RDMA HCA, and two
//! implementations of it.
//!
//! * [`model`]: the **software HCA model**, which runs between processes on one host and
//!   keeps the rules a real HCA keeps (memory keys checked against the registered range
//!   and access flags, the RC queue pair state machine, receive-not-ready, QP errors that
//!   flush outstanding work, UMR indirect keys of at most `max_klm` entries, a configurable
//!   key creation cost). It is a model: it is never chosen by default, and always says so.
//! * [`real`]: the provider for RDMA devices, libibverbs and mlx5dv loaded at run time
//!   (cargo feature `verbs`), with its connection manager over UD datagrams. No machine
//!   here has an HCA, so it is written and compiled, its pure parts unit-tested, and
//!   never run; discovery says why `rc_verbs` has no real device here
//!   (`tl::rc_verbs::devices`).
//!
//! The transport over the interface is `tl::rc_verbs`.
//!
//! The interface follows the verbs closely (protection domain implied: one per device),
//! so the transport's logic tested on the model is the logic a real HCA runs.

pub mod model;
pub mod real;
pub mod umr;

use bitflags::bitflags;
use smallvec::SmallVec;

bitflags! {
    /// Access rights of a memory region (`IBV_ACCESS_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Access: u32 {
        const LOCAL_WRITE = 1;
        const REMOTE_WRITE = 2;
        const REMOTE_READ = 4;
        const REMOTE_ATOMIC = 8;
    }
}

/// Every access right: what `rc_verbs` registers its regions and builds its keys with.
pub const ACCESS_ALL: Access = Access::LOCAL_WRITE
    .union(Access::REMOTE_WRITE)
    .union(Access::REMOTE_READ)
    .union(Access::REMOTE_ATOMIC);

/// An RC queue pair's state (`IBV_QPS_*`; SQD and SQE are not modelled).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    /// Ready to receive: connected to its remote QP.
    Rtr = 2,
    /// Ready to send.
    Rts = 3,
    Err = 4,
}

impl QpState {
    pub(crate) fn from_u32(v: u32) -> QpState {
        match v {
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Err,
            _ => QpState::Reset,
        }
    }
}

/// A scatter/gather element: `len` bytes at `addr` of the region `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    pub addr: u64,
    pub len: u32,
    pub lkey: u32,
}

/// What a send work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    Send,
    RdmaWrite,
    RdmaRead,
    /// 8-byte fetch-and-add at `remote_addr`; the old value lands in the first SGE.
    FetchAdd {
        add: u64,
    },
    /// 8-byte compare-and-swap at `remote_addr`; the old value lands in the first SGE.
    CompSwap {
        compare: u64,
        swap: u64,
    },
}

/// A send work request (`ibv_send_wr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendWr {
    pub wr_id: u64,
    pub opcode: Opcode,
    pub sges: SmallVec<[Sge; 4]>,
    /// RDMA and atomics: the peer's address and key.
    pub remote_addr: u64,
    pub rkey: u32,
    /// Report a completion on success (errors are always reported).
    pub signaled: bool,
}

/// A receive work request (`ibv_recv_wr`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecvWr {
    pub wr_id: u64,
    pub sges: SmallVec<[Sge; 4]>,
}

/// A completion's status (`IBV_WC_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WcStatus {
    Success = 0,
    /// A local SGE outside its region, or without the access the operation needs.
    LocProtErr = 1,
    /// The message is longer than the posted receive.
    LocLenErr = 2,
    /// The remote key, range or access was refused by the responder.
    RemAccessErr = 3,
    /// The responder's QP could not take the request (not connected to us, wrong state).
    RemInvReqErr = 4,
    /// No receive was posted at the responder within the retries.
    RnrRetryExcErr = 5,
    /// The responder did not answer (dead, or unreachable) within the retries.
    RetryExcErr = 6,
    /// Flushed: the QP went to the error state before this request ran.
    WrFlushErr = 7,
}

impl WcStatus {
    pub(crate) fn from_u32(v: u32) -> WcStatus {
        match v {
            0 => WcStatus::Success,
            1 => WcStatus::LocProtErr,
            2 => WcStatus::LocLenErr,
            3 => WcStatus::RemAccessErr,
            4 => WcStatus::RemInvReqErr,
            5 => WcStatus::RnrRetryExcErr,
            6 => WcStatus::RetryExcErr,
            _ => WcStatus::WrFlushErr,
        }
    }
}

/// What a completion completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    Atomic = 3,
    Recv = 4,
}

impl WcOpcode {
    pub(crate) fn from_u32(v: u32) -> WcOpcode {
        match v {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            3 => WcOpcode::Atomic,
            _ => WcOpcode::Recv,
        }
    }
}

/// A work completion (`ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    /// Bytes received (receives) or moved.
    pub byte_len: u32,
    pub qpn: u32,
}

/// One entry of a UMR indirect key: `len` bytes at `addr` of region `key` (mlx5's KLM).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Klm {
    pub addr: u64,
    pub len: u64,
    pub key: u32,
}

/// A provider's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// Most entries of one UMR indirect key.
    pub max_klm: usize,
    /// Most SGEs per work request.
    pub max_sge: usize,
    /// Work requests a QP holds (send and receive queues each).
    pub max_qp_wr: usize,
    /// Entries of a completion queue.
    pub max_cqe: usize,
}

/// The address of a remote QP: its device's address and its number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QpAddr {
    pub device: Vec<u8>,
    pub qpn: u32,
}

/// Most private bytes a connection-manager message carries (`rdma_cm`'s limit for an RC
/// connect request).
pub const CM_PRIVATE: usize = 56;

/// What a connection-manager message asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum CmKind {
    /// Connect to the QP in `from` (`rdma_connect`'s request).
    Request = 1,
    /// The request was accepted: `from` is the accepting QP (`rdma_accept`).
    Reply = 2,
    /// The request was refused (`rdma_reject`).
    Reject = 3,
    /// The QP in `from` is gone (`rdma_disconnect`).
    Disconnect = 4,
}

impl CmKind {
    pub(crate) fn from_u32(v: u32) -> Option<CmKind> {
        Some(match v {
            1 => CmKind::Request,
            2 => CmKind::Reply,
            3 => CmKind::Reject,
            4 => CmKind::Disconnect,
            _ => return None,
        })
    }
}

/// A connection-manager message: the QP that sends it and up to [`CM_PRIVATE`] bytes of
/// the transport's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CmMsg {
    pub kind: CmKind,
    pub from: QpAddr,
    pub private: Vec<u8>,
}

/// Why a verb failed (the errno a real verb would return).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VerbsError {
    /// `EINVAL`: a bad handle, state transition or argument.
    Invalid,
    /// `ENOMEM`: a table or queue is full.
    NoMemory,
    /// `EPERM`/`EFAULT`: memory that cannot be registered.
    Fault,
}

impl From<VerbsError> for ucs::Status {
    fn from(e: VerbsError) -> Self {
        match e {
            VerbsError::Invalid => ucs::Status::InvalidParam,
            VerbsError::NoMemory => ucs::Status::NoResource,
            VerbsError::Fault => ucs::Status::InvalidAddr,
        }
    }
}

pub type VResult<T> = Result<T, VerbsError>;

/// The verbs an RC transport uses (one protection domain per device).
pub trait Provider: Send {
    /// The provider's name as `rucx-info -d` lists it (a model says so).
    fn name(&self) -> &str;
    fn caps(&self) -> Caps;
    /// What a peer needs to reach this device (exchanged in the worker address).
    fn device_address(&self) -> Vec<u8>;
    /// Registers `[addr, addr + len)` of this process; returns its key (lkey = rkey).
    fn reg_mr(&mut self, addr: u64, len: u64, access: Access) -> VResult<u32>;
    fn dereg_mr(&mut self, key: u32) -> VResult<()>;
    /// A UMR indirect key over `entries` (each within a region of this device), at most
    /// `caps().max_klm` of them, in order: its addresses run from 0 to the sum of lengths.
    /// `alloc_mkey` and `configure_mkey` in one.
    fn create_mkey(&mut self, entries: &[Klm], access: Access) -> VResult<u32> {
        if entries.is_empty() || entries.len() > self.caps().max_klm {
            return Err(VerbsError::Invalid);
        }
        let k = self.alloc_mkey()?;
        match self.configure_mkey(k, entries, access) {
            Ok(k) => Ok(k),
            Err(e) => {
                let _ = self.destroy_mkey(k);
                Err(e)
            }
        }
    }
    /// An indirect key of up to `caps().max_klm` entries that describes nothing yet
    /// (`mlx5dv_create_mkey`): the expensive step, which a pool takes ahead of need.
    fn alloc_mkey(&mut self) -> VResult<u32>;
    /// Points indirect key `key` (from `alloc_mkey`, configured or not) at `entries`, as
    /// a UMR work request does (`mlx5dv_wr_mr_list`). Returns the key's new number: its
    /// low byte (the key's variant) changes, so that a copy of the old number a peer may
    /// still hold is refused.
    fn configure_mkey(&mut self, key: u32, entries: &[Klm], access: Access) -> VResult<u32>;
    fn destroy_mkey(&mut self, key: u32) -> VResult<()>;
    fn create_cq(&mut self) -> VResult<u32>;
    fn create_qp(&mut self, send_cq: u32, recv_cq: u32) -> VResult<u32>;
    /// Moves a QP to `state`: `Rtr` needs the remote QP's address.
    fn modify_qp(&mut self, qpn: u32, state: QpState, remote: Option<&QpAddr>) -> VResult<()>;
    fn query_qp(&self, qpn: u32) -> VResult<QpState>;
    fn destroy_qp(&mut self, qpn: u32) -> VResult<()>;
    fn post_send(&mut self, qpn: u32, wr: &SendWr) -> VResult<()>;
    fn post_recv(&mut self, qpn: u32, wr: &RecvWr) -> VResult<()>;
    /// Appends up to `max` completions of `cq` to `out`; returns how many.
    fn poll_cq(&mut self, cq: u32, max: usize, out: &mut Vec<Wc>) -> usize;
    /// Sends a connection-manager message to the device at `to_device` (what a connection
    /// manager does for a real device: its connect request, accept, reject, disconnect),
    /// delivered once. A device known to be unreachable gives `Fault`, a full mailbox
    /// `NoMemory`; a request found undeliverable later comes back from `cm_poll` as a
    /// `Reject` from `to_device` carrying the request's own private bytes.
    fn cm_send(&mut self, to_device: &[u8], msg: &CmMsg) -> VResult<()>;
    /// Appends the connection-manager messages that arrived; returns how many.
    fn cm_poll(&mut self, out: &mut Vec<CmMsg>) -> usize;
}
