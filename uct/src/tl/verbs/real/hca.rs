//! The real verbs provider: an RDMA device through libibverbs, with mlx5's UMR, all loaded
//! at run time (`rdma-mummy-sys`: a static stub that `dlopen`s libibverbs, librdmacm and
//! libmlx5 when first called; `mlx5dv_create_mkey`/`mlx5dv_destroy_mkey`, which the stub
//! does not cover, are looked up by name in libmlx5).
//!
//! **Written, not run**: no machine this project has reached has an HCA, so this code has
//! only been compiled and its pure parts (addresses, opcode and status translation, the
//! attribute sets of each QP transition) unit-tested. The transport logic above it is the
//! one tested on the software HCA model.
//!
//! How the provider interface maps onto the verbs:
//! * one protection domain per opened port (`device:port`, as UCX names them);
//! * a memory region's key as the interface knows it is its **rkey**; the lkey an SGE needs
//!   is looked up from it when a work request is posted;
//! * GPU memory registers through DMA-BUF (`cuMemGetHandleForAddressRange`, then
//!   `ibv_reg_dmabuf_mr`); memory the CUDA driver does not know registers with `ibv_reg_mr`;
//! * UMR: indirect mkeys (`mlx5dv_create_mkey` with `MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT`)
//!   are configured by a `mlx5dv_wr_mr_list` work request on a QP of their own, connected
//!   to itself, and waited for. A configured mkey keeps its number (the model changes the
//!   variant byte; the interface allows both). Devices without mlx5dv offer no UMR
//!   (`max_klm` 0);
//! * ordering: a request that follows an RDMA READ or an atomic on its QP is fenced
//!   (`IBV_SEND_FENCE`), so a QP's requests take effect in the order posted, as the model
//!   executes them and as `rc_verbs` (`EP_ORDERED`) promises;
//! * the connection manager is a UD QP per port carrying [`datagram`]s,
//!   made reliable there (acknowledged, retransmitted, deduplicated).

use std::collections::HashMap;
use std::ffi::{c_int, c_void, CStr, CString};
use std::ptr::null_mut;

use rdma_mummy_sys as ib;

use super::datagram::{self, Reliable};
use crate::tl::verbs::{
    Access, Caps, CmMsg, Klm, Opcode, Provider, QpAddr, QpState, RecvWr, SendWr, VResult,
    VerbsError, Wc, WcOpcode, WcStatus,
};

/// `IBV_LINK_LAYER_ETHERNET` (a macro in verbs.h).
const LINK_LAYER_ETHERNET: u8 = 2;
/// The queue key of connection-manager datagrams.
const CM_QKEY: u32 = 0x5243_4d31;
/// Connection-manager receive and send buffers, each with room for a GRH.
const CM_RX: usize = 64;
const CM_TX: usize = 64;
const GRH: usize = 40;
const CM_SLOT: usize = GRH + 256;
/// Work-request ids of the connection manager's own QP.
const CM_RECV_BIT: u64 = 1 << 63;
/// The limits this provider asks for, whatever more the device allows.
const WANT_QP_WR: usize = 256;
const WANT_SGE: usize = 16;
const WANT_CQE: usize = 16384;
/// The UMR entries asked for; mlx5 places the entry list inline in the work request, so
/// the UMR QP's inline size bounds it (16 bytes an entry): 64 when the device allows
/// 1 KiB inline, else 32.
const UMR_KLM: [usize; 2] = [64, 32];
/// RC QP timing: 4.096 µs × 2^14 ≈ 67 ms per retry, 7 retries; receiver-not-ready
/// retried forever (7), as UCX's defaults.
const QP_TIMEOUT: u8 = 14;
const QP_RETRY: u8 = 7;
const QP_RNR_RETRY: u8 = 7;
const QP_MIN_RNR_TIMER: u8 = 12;

fn err_of(rc: c_int) -> VerbsError {
    let e = if rc < 0 {
        -rc
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    };
    match e {
        libc::ENOMEM | libc::EAGAIN | libc::ENOSPC => VerbsError::NoMemory,
        libc::EPERM | libc::EFAULT | libc::EACCES => VerbsError::Fault,
        _ => VerbsError::Invalid,
    }
}

fn check(rc: c_int) -> VResult<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(err_of(rc))
    }
}

/// What a peer needs to reach a port: its LID (InfiniBand) or GID (RoCE, or routed IB),
/// and the connection manager's UD QP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAddr {
    pub port: u8,
    pub lid: u16,
    pub gid: [u8; 16],
    /// The GRH is needed (Ethernet link layer).
    pub global: bool,
    pub mtu: u8,
    pub cm_qpn: u32,
}

impl PortAddr {
    const VERSION: u8 = 1;
    const LEN: usize = 1 + 1 + 2 + 16 + 1 + 1 + 4;

    pub fn encode(&self) -> Vec<u8> {
        ucs::wire::Writer::with_capacity(Self::LEN)
            .u8(Self::VERSION)
            .u8(self.port)
            .u16(self.lid)
            .bytes(&self.gid)
            .u8(self.global as u8)
            .u8(self.mtu)
            .u32(self.cm_qpn)
            .buf
    }

    pub fn decode(b: &[u8]) -> Option<PortAddr> {
        let mut r = ucs::wire::Reader::new(b);
        if r.u8()? != Self::VERSION {
            return None;
        }
        let port = r.u8()?;
        let lid = r.u16()?;
        let gid = r.bytes(16)?.try_into().ok()?;
        let global = match r.u8()? {
            0 => false,
            1 => true,
            _ => return None,
        };
        let mtu = r.u8()?;
        let cm_qpn = r.u32()?;
        (r.is_empty() && (1..=5).contains(&mtu)).then_some(PortAddr {
            port,
            lid,
            gid,
            global,
            mtu,
            cm_qpn,
        })
    }
}

/// `IBV_ACCESS_*` of an [`Access`] (the same bits).
pub fn access_flags(a: Access) -> u32 {
    let mut f = 0;
    for (ours, theirs) in [
        (
            Access::LOCAL_WRITE,
            ib::ibv_access_flags::IBV_ACCESS_LOCAL_WRITE,
        ),
        (
            Access::REMOTE_WRITE,
            ib::ibv_access_flags::IBV_ACCESS_REMOTE_WRITE,
        ),
        (
            Access::REMOTE_READ,
            ib::ibv_access_flags::IBV_ACCESS_REMOTE_READ,
        ),
        (
            Access::REMOTE_ATOMIC,
            ib::ibv_access_flags::IBV_ACCESS_REMOTE_ATOMIC,
        ),
    ] {
        if a.contains(ours) {
            f |= theirs.0;
        }
    }
    f
}

/// A completion's status as the interface knows it. Statuses the interface does not name
/// are remote or general failures: `RemInvReqErr`, which fails the endpoint with a reset.
pub fn wc_status(s: ib::ibv_wc_status::Type) -> WcStatus {
    use ib::ibv_wc_status as w;
    match s {
        w::IBV_WC_SUCCESS => WcStatus::Success,
        w::IBV_WC_LOC_PROT_ERR => WcStatus::LocProtErr,
        w::IBV_WC_LOC_LEN_ERR => WcStatus::LocLenErr,
        w::IBV_WC_REM_ACCESS_ERR => WcStatus::RemAccessErr,
        w::IBV_WC_RNR_RETRY_EXC_ERR => WcStatus::RnrRetryExcErr,
        w::IBV_WC_RETRY_EXC_ERR => WcStatus::RetryExcErr,
        w::IBV_WC_WR_FLUSH_ERR => WcStatus::WrFlushErr,
        _ => WcStatus::RemInvReqErr,
    }
}

/// A completion's opcode as the interface knows it (meaningful on success only, as in
/// verbs).
pub fn wc_opcode(o: ib::ibv_wc_opcode::Type) -> WcOpcode {
    use ib::ibv_wc_opcode as w;
    match o {
        w::IBV_WC_SEND => WcOpcode::Send,
        w::IBV_WC_RDMA_WRITE => WcOpcode::RdmaWrite,
        w::IBV_WC_RDMA_READ => WcOpcode::RdmaRead,
        w::IBV_WC_COMP_SWAP | w::IBV_WC_FETCH_ADD => WcOpcode::Atomic,
        _ => WcOpcode::Recv,
    }
}

/// The work-request opcode and, for RDMA and atomics, the remote part of a send.
pub fn send_opcode(op: Opcode) -> ib::ibv_wr_opcode::Type {
    use ib::ibv_wr_opcode as w;
    match op {
        Opcode::Send => w::IBV_WR_SEND,
        Opcode::RdmaWrite => w::IBV_WR_RDMA_WRITE,
        Opcode::RdmaRead => w::IBV_WR_RDMA_READ,
        Opcode::FetchAdd { .. } => w::IBV_WR_ATOMIC_FETCH_AND_ADD,
        Opcode::CompSwap { .. } => w::IBV_WR_ATOMIC_CMP_AND_SWP,
    }
}

/// The attributes and mask of an RC QP's transition to `state` (`remote` for Rtr).
pub fn rc_transition(
    state: QpState,
    port: u8,
    sgid_index: u8,
    local_mtu: u8,
    rd_atomic: u8,
    remote: Option<(&PortAddr, u32)>,
) -> VResult<(ib::ibv_qp_attr, u32)> {
    use ib::ibv_qp_attr_mask as m;
    // SAFETY: ibv_qp_attr is a plain C struct of integers and nested plain structs; all
    // zeroes is a valid (empty) value.
    let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
    let mask = match state {
        QpState::Reset => {
            a.qp_state = ib::ibv_qp_state::IBV_QPS_RESET;
            m::IBV_QP_STATE
        }
        QpState::Init => {
            a.qp_state = ib::ibv_qp_state::IBV_QPS_INIT;
            a.pkey_index = 0;
            a.port_num = port;
            a.qp_access_flags = access_flags(
                Access::LOCAL_WRITE
                    | Access::REMOTE_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_ATOMIC,
            );
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS
        }
        QpState::Rtr => {
            let (peer, qpn) = remote.ok_or(VerbsError::Invalid)?;
            a.qp_state = ib::ibv_qp_state::IBV_QPS_RTR;
            a.path_mtu = u32::from(local_mtu.min(peer.mtu));
            a.dest_qp_num = qpn;
            a.rq_psn = 0;
            a.max_dest_rd_atomic = rd_atomic;
            a.min_rnr_timer = QP_MIN_RNR_TIMER;
            a.ah_attr = ah_attr(peer, port, sgid_index);
            m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER
        }
        QpState::Rts => {
            a.qp_state = ib::ibv_qp_state::IBV_QPS_RTS;
            a.sq_psn = 0;
            a.timeout = QP_TIMEOUT;
            a.retry_cnt = QP_RETRY;
            a.rnr_retry = QP_RNR_RETRY;
            a.max_rd_atomic = rd_atomic;
            m::IBV_QP_STATE
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_MAX_QP_RD_ATOMIC
        }
        QpState::Err => {
            a.qp_state = ib::ibv_qp_state::IBV_QPS_ERR;
            m::IBV_QP_STATE
        }
    };
    Ok((a, mask.0))
}

/// The address vector that reaches `peer` from `port`.
pub fn ah_attr(peer: &PortAddr, port: u8, sgid_index: u8) -> ib::ibv_ah_attr {
    // SAFETY: a plain C struct (a union of byte arrays inside); all zeroes is valid.
    let mut ah: ib::ibv_ah_attr = unsafe { std::mem::zeroed() };
    ah.dlid = peer.lid;
    ah.port_num = port;
    if peer.global {
        ah.is_global = 1;
        ah.grh.dgid.raw = peer.gid;
        ah.grh.sgid_index = sgid_index;
        ah.grh.hop_limit = 64;
    }
    ah
}

/// The device's name and port from `mlx5_0:1`.
pub fn parse_device(dev: &str) -> Option<(&str, u8)> {
    let (name, port) = dev.rsplit_once(':')?;
    let port: u8 = port.parse().ok()?;
    (!name.is_empty() && port >= 1).then_some((name, port))
}

/// The devices and active ports libibverbs lists, as `name:port`.
pub fn ports() -> Result<Vec<String>, String> {
    let mut n: c_int = 0;
    // SAFETY: an out pointer; the list is freed below. The stub returns NULL when
    // libibverbs cannot be loaded.
    let list = unsafe { ib::ibv_get_device_list(&mut n) };
    if list.is_null() {
        return Err(format!(
            "ibv_get_device_list failed ({})",
            std::io::Error::last_os_error()
        ));
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: `n` entries of the list, not freed yet.
        let dev = unsafe { *list.add(i) };
        // SAFETY: a device of the list; its name is a string it owns.
        let name = unsafe { CStr::from_ptr(ib::ibv_get_device_name(dev)) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: a device of the list; the context is closed below.
        let ctx = unsafe { ib::ibv_open_device(dev) };
        if ctx.is_null() {
            continue;
        }
        // SAFETY: plain C struct, written by the call.
        let mut da: ib::ibv_device_attr = unsafe { std::mem::zeroed() };
        // SAFETY: an open context and an out pointer.
        if unsafe { ib::ibv_query_device(ctx, &mut da) } == 0 {
            for port in 1..=da.phys_port_cnt {
                // SAFETY: plain C struct, written by the call.
                let mut pa: ib::ibv_port_attr = unsafe { std::mem::zeroed() };
                // SAFETY: an open context, a port it has, an out pointer.
                if unsafe { ib::ibv_query_port(ctx, port, &mut pa) } == 0
                    && pa.state == ib::ibv_port_state::IBV_PORT_ACTIVE
                {
                    out.push(format!("{name}:{port}"));
                }
            }
        }
        // SAFETY: opened above, closed once.
        unsafe { ib::ibv_close_device(ctx) };
    }
    // SAFETY: the list from ibv_get_device_list, freed once.
    unsafe { ib::ibv_free_device_list(list) };
    Ok(out)
}

type CreateMkey = unsafe extern "C" fn(*mut ib::mlx5dv_mkey_init_attr) -> *mut ib::mlx5dv_mkey;
type DestroyMkey = unsafe extern "C" fn(*mut ib::mlx5dv_mkey) -> c_int;

/// `mlx5dv_create_mkey` and `mlx5dv_destroy_mkey` from libmlx5, if it is there.
fn mlx5_mkey_fns() -> Option<(CreateMkey, DestroyMkey)> {
    let lib = CString::new("libmlx5.so.1").ok()?;
    // SAFETY: dlopen of a library by name; never closed, so the pointers stay valid.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW) };
    if h.is_null() {
        return None;
    }
    // SAFETY: symbol lookups in a loaded library.
    let (c, d) = unsafe {
        (
            libc::dlsym(h, c"mlx5dv_create_mkey".as_ptr()),
            libc::dlsym(h, c"mlx5dv_destroy_mkey".as_ptr()),
        )
    };
    if c.is_null() || d.is_null() {
        return None;
    }
    // SAFETY: the C signatures of mlx5dv.h.
    Some(unsafe {
        (
            std::mem::transmute::<*mut c_void, CreateMkey>(c),
            std::mem::transmute::<*mut c_void, DestroyMkey>(d),
        )
    })
}

enum Region {
    Mr {
        mr: *mut ib::ibv_mr,
        lkey: u32,
    },
    Mkey {
        mkey: *mut ib::mlx5dv_mkey,
        lkey: u32,
    },
}

impl Region {
    fn lkey(&self) -> u32 {
        match self {
            Region::Mr { lkey, .. } | Region::Mkey { lkey, .. } => *lkey,
        }
    }
}

/// The UMR machinery: the QP that carries mkey configuration requests (connected to
/// itself) and the mkey functions.
struct Umr {
    create: CreateMkey,
    destroy: DestroyMkey,
    cq: *mut ib::ibv_cq,
    qp: *mut ib::ibv_qp,
    max_klm: usize,
}

/// The connection manager's UD QP and its buffers.
struct Cm {
    cq: *mut ib::ibv_cq,
    qp: *mut ib::ibv_qp,
    buf: Box<[u8]>,
    mr: *mut ib::ibv_mr,
    tx_free: Vec<usize>,
    ahs: HashMap<Vec<u8>, *mut ib::ibv_ah>,
    rel: Reliable,
    inbox: Vec<CmMsg>,
}

/// An opened port of a real RDMA device.
pub struct RealHca {
    name: String,
    ctx: *mut ib::ibv_context,
    pd: *mut ib::ibv_pd,
    me: PortAddr,
    sgid_index: u8,
    rd_atomic: u8,
    caps: Caps,
    addr: Vec<u8>,
    regions: HashMap<u32, Region>,
    cqs: Vec<*mut ib::ibv_cq>,
    qps: HashMap<u32, *mut ib::ibv_qp>,
    /// QPs whose last posted request was an RDMA READ or an atomic: the next request is
    /// fenced (`IBV_SEND_FENCE`), so that it cannot take effect before them.
    after_read: std::collections::HashSet<u32>,
    umr: Option<Umr>,
    cm: Option<Cm>,
}

// SAFETY: the verbs objects behind these pointers may be used from any thread (libibverbs
// is thread-safe); the provider is only ever used under the transport's lock.
unsafe impl Send for RealHca {}

impl std::fmt::Debug for RealHca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RealHca({})", self.name)
    }
}

impl RealHca {
    /// Opens `dev` (`name:port`); `gid_index` is `UCX_IB_GID_INDEX` (`None`: auto).
    pub fn open(dev: &str, gid_index: Option<u8>) -> Result<RealHca, String> {
        let (name, port) = parse_device(dev).ok_or(format!("{dev}: not device:port"))?;
        let mut n: c_int = 0;
        // SAFETY: an out pointer; freed below.
        let list = unsafe { ib::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return Err("ibv_get_device_list failed".into());
        }
        let mut ctx = null_mut();
        for i in 0..n.max(0) as usize {
            // SAFETY: `n` entries of the list, not freed yet; names owned by the devices.
            unsafe {
                let d = *list.add(i);
                if CStr::from_ptr(ib::ibv_get_device_name(d)).to_bytes() == name.as_bytes() {
                    ctx = ib::ibv_open_device(d);
                    break;
                }
            }
        }
        // SAFETY: freed once; the opened context does not depend on the list.
        unsafe { ib::ibv_free_device_list(list) };
        if ctx.is_null() {
            return Err(format!("{name}: no such device, or it cannot be opened"));
        }
        let mut h = RealHca {
            name: dev.to_string(),
            ctx,
            pd: null_mut(),
            me: PortAddr {
                port,
                lid: 0,
                gid: [0; 16],
                global: false,
                mtu: 3,
                cm_qpn: 0,
            },
            sgid_index: 0,
            rd_atomic: 1,
            caps: Caps {
                max_klm: 0,
                max_sge: 1,
                max_qp_wr: 1,
                max_cqe: 1,
            },
            addr: Vec::new(),
            regions: HashMap::new(),
            cqs: Vec::new(),
            qps: HashMap::new(),
            after_read: std::collections::HashSet::new(),
            umr: None,
            cm: None,
        };
        // From here on, `Drop` releases whatever was made.
        h.setup(gid_index)?;
        Ok(h)
    }

    fn setup(&mut self, gid_index: Option<u8>) -> Result<(), String> {
        let port = self.me.port;
        // SAFETY: plain C structs, written by the calls.
        let (mut da, mut pa): (ib::ibv_device_attr, ib::ibv_port_attr) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: an open context and out pointers.
        let (rd, rp) = unsafe {
            (
                ib::ibv_query_device(self.ctx, &mut da),
                ib::ibv_query_port(self.ctx, port, &mut pa),
            )
        };
        if rd != 0 || rp != 0 {
            return Err(format!("{}: cannot query the device or port", self.name));
        }
        if pa.state != ib::ibv_port_state::IBV_PORT_ACTIVE {
            return Err(format!("{}: port not active", self.name));
        }
        self.caps = Caps {
            max_klm: 0,
            max_sge: (da.max_sge.max(1) as usize).min(WANT_SGE),
            max_qp_wr: (da.max_qp_wr.max(1) as usize).min(WANT_QP_WR),
            max_cqe: (da.max_cqe.max(1) as usize).min(WANT_CQE),
        };
        self.rd_atomic = da.max_qp_rd_atom.clamp(1, 16) as u8;
        self.me.lid = pa.lid;
        self.me.mtu = pa.active_mtu as u8;
        self.me.global = pa.link_layer == LINK_LAYER_ETHERNET;
        self.sgid_index = gid_index.unwrap_or_else(|| self.auto_gid_index(port, pa.gid_tbl_len));
        // SAFETY: plain C union of bytes, written by the call.
        let mut gid: ib::ibv_gid = unsafe { std::mem::zeroed() };
        // SAFETY: an open context, its port, an out pointer.
        if unsafe { ib::ibv_query_gid(self.ctx, port, c_int::from(self.sgid_index), &mut gid) } != 0
        {
            return Err(format!(
                "{}: cannot read GID {}",
                self.name, self.sgid_index
            ));
        }
        // SAFETY: the union's byte view is always valid.
        self.me.gid = unsafe { gid.raw };
        // SAFETY: an open context.
        self.pd = unsafe { ib::ibv_alloc_pd(self.ctx) };
        if self.pd.is_null() {
            return Err(format!("{}: ibv_alloc_pd failed", self.name));
        }
        self.open_cm()
            .map_err(|e| format!("{}: connection manager QP: {e:?}", self.name))?;
        self.addr = self.me.encode();
        let me = ucs::time::now_ns() ^ (u64::from(std::process::id()) << 32);
        if let Some(cm) = self.cm.as_mut() {
            cm.rel = Reliable::new(me, self.addr.clone());
        }
        // UMR where mlx5dv is; without it the transport uses packing.
        match self.open_umr() {
            Ok(()) => {}
            Err(e) => log::debug!("{}: no UMR: {e}", self.name),
        }
        Ok(())
    }

    /// The GID index when `UCX_IB_GID_INDEX` is auto: 0 on InfiniBand, else the first
    /// RoCE v2 entry (routable), else 0.
    fn auto_gid_index(&self, port: u8, tbl_len: c_int) -> u8 {
        if !self.me.global {
            return 0;
        }
        for i in 0..tbl_len.clamp(0, 255) as u32 {
            // SAFETY: plain C struct, written by the call.
            let mut e: ib::ibv_gid_entry = unsafe { std::mem::zeroed() };
            // SAFETY: an open context, its port, an index below the table's length.
            let rc = unsafe { ib::ibv_query_gid_ex(self.ctx, u32::from(port), i, &mut e, 0) };
            if rc == 0 && e.gid_type == ib::IBV_GID_TYPE_ROCE_V2 {
                return i as u8;
            }
        }
        0
    }

    fn new_cq(&mut self, n: usize) -> VResult<*mut ib::ibv_cq> {
        // SAFETY: an open context; no channel, vector 0.
        let cq = unsafe { ib::ibv_create_cq(self.ctx, n as c_int, null_mut(), null_mut(), 0) };
        if cq.is_null() {
            return Err(err_of(0));
        }
        Ok(cq)
    }

    fn new_qp(
        &mut self,
        kind: ib::ibv_qp_type::Type,
        send_cq: *mut ib::ibv_cq,
        recv_cq: *mut ib::ibv_cq,
        wr: usize,
        sge: usize,
    ) -> VResult<*mut ib::ibv_qp> {
        // SAFETY: plain C struct; zeroes are valid.
        let mut a: ib::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        a.send_cq = send_cq;
        a.recv_cq = recv_cq;
        a.qp_type = kind;
        a.cap.max_send_wr = wr as u32;
        a.cap.max_recv_wr = wr as u32;
        a.cap.max_send_sge = sge as u32;
        a.cap.max_recv_sge = sge as u32;
        // SAFETY: our protection domain and an initialized attribute set.
        let qp = unsafe { ib::ibv_create_qp(self.pd, &mut a) };
        if qp.is_null() {
            return Err(err_of(0));
        }
        Ok(qp)
    }

    fn modify(&self, qp: *mut ib::ibv_qp, a: &mut ib::ibv_qp_attr, mask: u32) -> VResult<()> {
        // SAFETY: a QP of ours and an attribute set matching the mask.
        check(unsafe { ib::ibv_modify_qp(qp, a, mask as c_int) })
    }

    /// The UD QP of the connection manager, with its receives posted.
    fn open_cm(&mut self) -> VResult<()> {
        use ib::ibv_qp_attr_mask as m;
        let cq = self.new_cq(CM_RX + CM_TX)?;
        let qp = match self.new_qp(ib::ibv_qp_type::IBV_QPT_UD, cq, cq, CM_RX.max(CM_TX), 1) {
            Ok(q) => q,
            Err(e) => {
                // SAFETY: created above, unused.
                unsafe { ib::ibv_destroy_cq(cq) };
                return Err(e);
            }
        };
        let mut buf = vec![0u8; (CM_RX + CM_TX) * CM_SLOT].into_boxed_slice();
        // SAFETY: our PD and a buffer this struct owns for as long as the MR exists
        // (deregistered in `Drop` before the buffer goes).
        let mr = unsafe {
            ib::ibv_reg_mr(
                self.pd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                access_flags(Access::LOCAL_WRITE) as c_int,
            )
        };
        self.cm = Some(Cm {
            cq,
            qp,
            buf,
            mr,
            tx_free: (CM_RX..CM_RX + CM_TX).collect(),
            ahs: HashMap::new(),
            rel: Reliable::new(0, Vec::new()),
            inbox: Vec::new(),
        });
        if mr.is_null() {
            return Err(err_of(0));
        }
        // SAFETY: plain C struct; zeroes are valid.
        let mut a: ib::ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = ib::ibv_qp_state::IBV_QPS_INIT;
        a.port_num = self.me.port;
        a.qkey = CM_QKEY;
        self.modify(
            qp,
            &mut a,
            (m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_QKEY).0,
        )?;
        a.qp_state = ib::ibv_qp_state::IBV_QPS_RTR;
        self.modify(qp, &mut a, m::IBV_QP_STATE.0)?;
        a.qp_state = ib::ibv_qp_state::IBV_QPS_RTS;
        a.sq_psn = 0;
        self.modify(qp, &mut a, (m::IBV_QP_STATE | m::IBV_QP_SQ_PSN).0)?;
        for slot in 0..CM_RX {
            self.cm_post_recv(slot)?;
        }
        // SAFETY: a QP we created; its number is a plain field.
        self.me.cm_qpn = unsafe { (*qp).qp_num };
        Ok(())
    }

    fn cm_post_recv(&mut self, slot: usize) -> VResult<()> {
        let cm = self.cm.as_mut().ok_or(VerbsError::Invalid)?;
        // SAFETY: the registered MR's key.
        let lkey = unsafe { (*cm.mr).lkey };
        let mut sge = ib::ibv_sge {
            addr: cm.buf.as_ptr() as u64 + (slot * CM_SLOT) as u64,
            length: CM_SLOT as u32,
            lkey,
        };
        let mut wr = ib::ibv_recv_wr {
            wr_id: CM_RECV_BIT | slot as u64,
            next: null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        let mut bad = null_mut();
        // SAFETY: our UD QP; the SGE lies in the registered buffer, which outlives the QP.
        check(unsafe { ib::ibv_post_recv(cm.qp, &mut wr, &mut bad) })
    }

    /// Puts one datagram on the wire, after reaping completions (which frees send slots).
    fn cm_transmit(&mut self, out: &datagram::Out) -> VResult<()> {
        self.cm_reap();
        self.cm_transmit_raw(out)
    }

    /// Reaps the connection manager's completions: sends free their slots, receives are
    /// handed to the reliability layer (acknowledgements go out, messages to the inbox).
    fn cm_reap(&mut self) {
        let mut acks = Vec::new();
        let mut reposts = Vec::new();
        {
            let Some(cm) = self.cm.as_mut() else {
                return;
            };
            // SAFETY: plain C structs, written by the poll.
            let mut wcs: [ib::ibv_wc; 16] = unsafe { std::mem::zeroed() };
            loop {
                // SAFETY: our CQ and room for 16 completions.
                let n = unsafe { ib::ibv_poll_cq(cm.cq, 16, wcs.as_mut_ptr()) };
                if n <= 0 {
                    break;
                }
                for wc in &wcs[..n as usize] {
                    let slot = (wc.wr_id & !CM_RECV_BIT) as usize;
                    if wc.wr_id & CM_RECV_BIT == 0 {
                        cm.tx_free.push(slot);
                        continue;
                    }
                    reposts.push(slot);
                    if wc.status != ib::ibv_wc_status::IBV_WC_SUCCESS {
                        continue;
                    }
                    let len = (wc.byte_len as usize).clamp(GRH, CM_SLOT);
                    let b = &cm.buf[slot * CM_SLOT + GRH..slot * CM_SLOT + len];
                    let (msg, ack) = cm.rel.receive(b);
                    cm.inbox.extend(msg);
                    acks.extend(ack);
                }
            }
        }
        for slot in reposts {
            if let Err(e) = self.cm_post_recv(slot) {
                log::warn!(
                    "{}: connection manager receive not re-posted: {e:?}",
                    self.name
                );
            }
        }
        for a in acks {
            let _ = self.cm_transmit_raw(&a);
        }
    }

    /// Puts one datagram on the wire (`NoMemory` when every send slot is in flight).
    fn cm_transmit_raw(&mut self, out: &datagram::Out) -> VResult<()> {
        let peer = PortAddr::decode(&out.to).ok_or(VerbsError::Fault)?;
        let (port, sgid, pd) = (self.me.port, self.sgid_index, self.pd);
        let cm = self.cm.as_mut().ok_or(VerbsError::Invalid)?;
        let ah = match cm.ahs.get(&out.to) {
            Some(a) => *a,
            None => {
                let mut attr = ah_attr(&peer, port, sgid);
                // SAFETY: our PD and an address vector.
                let a = unsafe { ib::ibv_create_ah(pd, &mut attr) };
                if a.is_null() {
                    return Err(VerbsError::Fault);
                }
                cm.ahs.insert(out.to.clone(), a);
                a
            }
        };
        let slot = cm.tx_free.pop().ok_or(VerbsError::NoMemory)?;
        let n = out.bytes.len().min(CM_SLOT);
        cm.buf[slot * CM_SLOT..slot * CM_SLOT + n].copy_from_slice(&out.bytes[..n]);
        // SAFETY: the registered MR's key.
        let lkey = unsafe { (*cm.mr).lkey };
        let mut sge = ib::ibv_sge {
            addr: cm.buf.as_ptr() as u64 + (slot * CM_SLOT) as u64,
            length: n as u32,
            lkey,
        };
        // SAFETY: plain C struct (pointers null, integers 0); filled below.
        let mut wr: ib::ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = slot as u64;
        wr.sg_list = &mut sge;
        wr.num_sge = 1;
        wr.opcode = ib::ibv_wr_opcode::IBV_WR_SEND;
        wr.send_flags = ib::ibv_send_flags::IBV_SEND_SIGNALED.0;
        wr.wr.ud = ib::ud_t {
            ah,
            remote_qpn: peer.cm_qpn,
            remote_qkey: CM_QKEY,
        };
        let mut bad = null_mut();
        // SAFETY: our UD QP; the SGE lies in the registered buffer; the slot stays taken
        // until its completion is reaped.
        let rc = unsafe { ib::ibv_post_send(cm.qp, &mut wr, &mut bad) };
        if rc != 0 {
            cm.tx_free.push(slot);
            return Err(err_of(rc));
        }
        Ok(())
    }

    /// The UMR QP (connected to itself) and the mkey functions; `max_klm` set on success.
    fn open_umr(&mut self) -> Result<(), String> {
        let (create, destroy) = mlx5_mkey_fns().ok_or("libmlx5 has no mlx5dv_create_mkey")?;
        let cq = self.new_cq(64).map_err(|e| format!("UMR CQ: {e:?}"))?;
        let mut made = None;
        for klm in UMR_KLM {
            // SAFETY: plain C structs; zeroes are valid.
            let (mut a, mut ma): (ib::ibv_qp_init_attr_ex, ib::mlx5dv_qp_init_attr) =
                unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
            a.send_cq = cq;
            a.recv_cq = cq;
            a.qp_type = ib::ibv_qp_type::IBV_QPT_RC;
            a.cap.max_send_wr = 64;
            a.cap.max_recv_wr = 1;
            a.cap.max_send_sge = 1;
            a.cap.max_recv_sge = 1;
            a.cap.max_inline_data = (16 * klm) as u32;
            a.comp_mask = (ib::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD
                | ib::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
                .0;
            a.pd = self.pd;
            a.send_ops_flags = ib::ibv_qp_create_send_ops_flags::IBV_QP_EX_WITH_SEND.0 as u64;
            ma.comp_mask =
                ib::mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS.0 as u64;
            ma.send_ops_flags =
                ib::mlx5dv_qp_create_send_ops_flags::MLX5DV_QP_EX_WITH_MR_LIST.0 as u64;
            // SAFETY: an open context and initialized attribute sets.
            let qp = unsafe { ib::mlx5dv_create_qp(self.ctx, &mut a, &mut ma) };
            if !qp.is_null() {
                made = Some((qp, klm));
                break;
            }
        }
        let Some((qp, klm)) = made else {
            // SAFETY: created above, unused.
            unsafe { ib::ibv_destroy_cq(cq) };
            return Err("mlx5dv_create_qp with MR lists failed".into());
        };
        self.umr = Some(Umr {
            create,
            destroy,
            cq,
            qp,
            max_klm: klm,
        });
        // SAFETY: a QP we created.
        let qpn = unsafe { (*qp).qp_num };
        let me = self.me;
        for st in [QpState::Init, QpState::Rtr, QpState::Rts] {
            let (mut a, mask) = rc_transition(
                st,
                me.port,
                self.sgid_index,
                me.mtu,
                self.rd_atomic,
                Some((&me, qpn)),
            )
            .map_err(|e| format!("{e:?}"))?;
            self.modify(qp, &mut a, mask)
                .map_err(|e| format!("UMR QP to {st:?}: {e:?}"))?;
        }
        self.caps.max_klm = klm;
        Ok(())
    }

    fn lkey(&self, key: u32) -> u32 {
        self.regions.get(&key).map_or(key, Region::lkey)
    }

    /// The verbs' SGEs of `sges`, each key translated to the region's lkey.
    fn ib_sges(&self, sges: &[crate::tl::verbs::Sge]) -> smallvec::SmallVec<[ib::ibv_sge; 4]> {
        sges.iter()
            .map(|s| ib::ibv_sge {
                addr: s.addr,
                length: s.len,
                lkey: self.lkey(s.lkey),
            })
            .collect()
    }

    fn qp(&self, qpn: u32) -> VResult<*mut ib::ibv_qp> {
        self.qps.get(&qpn).copied().ok_or(VerbsError::Invalid)
    }

    /// A GPU region through DMA-BUF, when the CUDA driver knows `addr`.
    #[cfg(feature = "cuda")]
    fn reg_device(&mut self, addr: u64, len: u64, flags: u32) -> Option<VResult<*mut ib::ibv_mr>> {
        use std::os::fd::AsRawFd;
        let d = ucs::cuda::driver()?;
        d.pointer(addr)?;
        let (fd, offset) = match d.dmabuf(addr, len as usize) {
            Ok(x) => x,
            Err(_) => return Some(Err(VerbsError::Fault)),
        };
        // SAFETY: our PD; the descriptor is a DMA-BUF of the range, `offset` is `addr`'s
        // place in it and `addr` the I/O address peers use. The MR holds its own reference
        // to the buffer, so the descriptor closes when this returns.
        let mr = unsafe {
            ib::ibv_reg_dmabuf_mr(
                self.pd,
                offset,
                len as usize,
                addr,
                fd.as_raw_fd(),
                flags as c_int,
            )
        };
        Some(if mr.is_null() {
            Err(VerbsError::Fault)
        } else {
            Ok(mr)
        })
    }

    #[cfg(not(feature = "cuda"))]
    fn reg_device(&mut self, _: u64, _: u64, _: u32) -> Option<VResult<*mut ib::ibv_mr>> {
        None
    }
}

impl Provider for RealHca {
    fn name(&self) -> &str {
        &self.name
    }

    fn caps(&self) -> Caps {
        self.caps
    }

    fn device_address(&self) -> Vec<u8> {
        self.addr.clone()
    }

    fn reg_mr(&mut self, addr: u64, len: u64, access: Access) -> VResult<u32> {
        if len == 0 || addr.checked_add(len).is_none() {
            return Err(VerbsError::Invalid);
        }
        let flags = access_flags(access);
        let mr = match self.reg_device(addr, len, flags) {
            Some(r) => r?,
            None => {
                // SAFETY: our PD; registration pins the caller's range, which the
                // interface's contract keeps mapped until `dereg_mr`.
                let mr = unsafe {
                    ib::ibv_reg_mr(self.pd, addr as *mut c_void, len as usize, flags as c_int)
                };
                if mr.is_null() {
                    return Err(err_of(0));
                }
                mr
            }
        };
        // SAFETY: a region just registered.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        self.regions.insert(rkey, Region::Mr { mr, lkey });
        Ok(rkey)
    }

    fn dereg_mr(&mut self, key: u32) -> VResult<()> {
        match self.regions.remove(&key) {
            // SAFETY: a region of ours, deregistered once.
            Some(Region::Mr { mr, .. }) => check(unsafe { ib::ibv_dereg_mr(mr) }),
            Some(r) => {
                self.regions.insert(key, r);
                Err(VerbsError::Invalid)
            }
            None => Err(VerbsError::Invalid),
        }
    }

    fn alloc_mkey(&mut self) -> VResult<u32> {
        let u = self.umr.as_ref().ok_or(VerbsError::Invalid)?;
        let mut a = ib::mlx5dv_mkey_init_attr {
            pd: self.pd,
            create_flags: ib::mlx5dv_mkey_init_attr_flags::MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT.0,
            max_entries: u.max_klm as u16,
        };
        // SAFETY: mlx5dv_create_mkey with an initialized attribute set on our PD.
        let k = unsafe { (u.create)(&mut a) };
        if k.is_null() {
            return Err(err_of(0));
        }
        // SAFETY: a key just created.
        let (lkey, rkey) = unsafe { ((*k).lkey, (*k).rkey) };
        self.regions.insert(rkey, Region::Mkey { mkey: k, lkey });
        Ok(rkey)
    }

    fn configure_mkey(&mut self, key: u32, entries: &[Klm], access: Access) -> VResult<u32> {
        let max = self.caps.max_klm;
        if entries.is_empty() || entries.len() > max {
            return Err(VerbsError::Invalid);
        }
        let mut sges = Vec::with_capacity(entries.len());
        for e in entries {
            let length = u32::try_from(e.len).map_err(|_| VerbsError::Invalid)?;
            sges.push(ib::ibv_sge {
                addr: e.addr,
                length,
                lkey: self.lkey(e.key),
            });
        }
        let Some(Region::Mkey { mkey, .. }) = self.regions.get(&key) else {
            return Err(VerbsError::Invalid);
        };
        let mkey = *mkey;
        let u = self.umr.as_ref().ok_or(VerbsError::Invalid)?;
        // SAFETY: the UMR QP was created with extended send operations and MR lists, so
        // both casts give valid pointers; the work request is built and posted between
        // wr_start and wr_complete, its entry list copied inline before wr_complete
        // returns; the mkey is ours and indirect with room for `max` entries.
        let rc = unsafe {
            let qpx = ib::ibv_qp_to_qp_ex(u.qp);
            let mqp = ib::mlx5dv_qp_ex_from_ibv_qp_ex(qpx);
            ib::ibv_wr_start(qpx);
            (*qpx).wr_id = u64::from(key);
            (*qpx).wr_flags =
                (ib::ibv_send_flags::IBV_SEND_INLINE | ib::ibv_send_flags::IBV_SEND_SIGNALED).0;
            ib::mlx5dv_wr_mr_list(
                mqp,
                mkey,
                access_flags(access),
                sges.len() as u16,
                sges.as_mut_ptr(),
            );
            ib::ibv_wr_complete(qpx)
        };
        check(rc)?;
        // Wait for it: a key is used by the next work request a peer may send.
        let t0 = ucs::time::now_ns();
        loop {
            // SAFETY: plain C struct, written by the poll.
            let mut wc: ib::ibv_wc = unsafe { std::mem::zeroed() };
            // SAFETY: the UMR CQ and room for one completion.
            let n = unsafe { ib::ibv_poll_cq(u.cq, 1, &mut wc) };
            if n > 0 {
                return if wc.status == ib::ibv_wc_status::IBV_WC_SUCCESS {
                    Ok(key)
                } else {
                    log::debug!("{}: UMR completion status {}", self.name, wc.status);
                    Err(VerbsError::Invalid)
                };
            }
            if n < 0 || ucs::time::now_ns() - t0 > 1_000_000_000 {
                return Err(VerbsError::Invalid);
            }
            std::hint::spin_loop();
        }
    }

    fn destroy_mkey(&mut self, key: u32) -> VResult<()> {
        match (self.regions.remove(&key), self.umr.as_ref()) {
            // SAFETY: a key of ours, destroyed once.
            (Some(Region::Mkey { mkey, .. }), Some(u)) => check(unsafe { (u.destroy)(mkey) }),
            (Some(r), _) => {
                self.regions.insert(key, r);
                Err(VerbsError::Invalid)
            }
            (None, _) => Err(VerbsError::Invalid),
        }
    }

    fn create_cq(&mut self) -> VResult<u32> {
        let cq = self.new_cq(self.caps.max_cqe)?;
        self.cqs.push(cq);
        Ok(self.cqs.len() as u32 - 1)
    }

    fn create_qp(&mut self, send_cq: u32, recv_cq: u32) -> VResult<u32> {
        let s = *self.cqs.get(send_cq as usize).ok_or(VerbsError::Invalid)?;
        let r = *self.cqs.get(recv_cq as usize).ok_or(VerbsError::Invalid)?;
        let qp = self.new_qp(
            ib::ibv_qp_type::IBV_QPT_RC,
            s,
            r,
            self.caps.max_qp_wr,
            self.caps.max_sge,
        )?;
        // SAFETY: a QP we created.
        let qpn = unsafe { (*qp).qp_num };
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    fn modify_qp(&mut self, qpn: u32, state: QpState, remote: Option<&QpAddr>) -> VResult<()> {
        let qp = self.qp(qpn)?;
        let peer = match remote {
            Some(r) => Some((
                PortAddr::decode(&r.device).ok_or(VerbsError::Invalid)?,
                r.qpn,
            )),
            None => None,
        };
        let (mut a, mask) = rc_transition(
            state,
            self.me.port,
            self.sgid_index,
            self.me.mtu,
            self.rd_atomic,
            peer.as_ref().map(|(p, q)| (p, *q)),
        )?;
        self.modify(qp, &mut a, mask)
    }

    fn query_qp(&self, qpn: u32) -> VResult<QpState> {
        let qp = self.qp(qpn)?;
        // SAFETY: plain C structs, written by the call.
        let (mut a, mut ia): (ib::ibv_qp_attr, ib::ibv_qp_init_attr) =
            unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // SAFETY: a QP of ours and out pointers.
        check(unsafe {
            ib::ibv_query_qp(
                qp,
                &mut a,
                ib::ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int,
                &mut ia,
            )
        })?;
        use ib::ibv_qp_state as s;
        Ok(match a.qp_state {
            s::IBV_QPS_INIT => QpState::Init,
            s::IBV_QPS_RTR => QpState::Rtr,
            s::IBV_QPS_RTS => QpState::Rts,
            s::IBV_QPS_RESET => QpState::Reset,
            _ => QpState::Err,
        })
    }

    fn destroy_qp(&mut self, qpn: u32) -> VResult<()> {
        let qp = self.qps.remove(&qpn).ok_or(VerbsError::Invalid)?;
        self.after_read.remove(&qpn);
        // SAFETY: a QP of ours, destroyed once.
        check(unsafe { ib::ibv_destroy_qp(qp) })
    }

    fn post_send(&mut self, qpn: u32, wr: &SendWr) -> VResult<()> {
        let qp = self.qp(qpn)?;
        let mut sges = self.ib_sges(&wr.sges);
        // SAFETY: plain C struct (pointers null, integers 0); filled below.
        let mut w: ib::ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = wr.wr_id;
        w.sg_list = if sges.is_empty() {
            null_mut()
        } else {
            sges.as_mut_ptr()
        };
        w.num_sge = sges.len() as c_int;
        w.opcode = send_opcode(wr.opcode);
        if wr.signaled {
            w.send_flags |= ib::ibv_send_flags::IBV_SEND_SIGNALED.0;
        }
        let reads = !matches!(wr.opcode, Opcode::Send | Opcode::RdmaWrite);
        if self.after_read.contains(&qpn) {
            w.send_flags |= ib::ibv_send_flags::IBV_SEND_FENCE.0;
        }
        match wr.opcode {
            Opcode::Send => {}
            Opcode::RdmaWrite | Opcode::RdmaRead => {
                w.wr.rdma = ib::rdma_t {
                    remote_addr: wr.remote_addr,
                    rkey: wr.rkey,
                };
            }
            Opcode::FetchAdd { add } => {
                w.wr.atomic = ib::atomic_t {
                    remote_addr: wr.remote_addr,
                    compare_add: add,
                    swap: 0,
                    rkey: wr.rkey,
                };
            }
            Opcode::CompSwap { compare, swap } => {
                w.wr.atomic = ib::atomic_t {
                    remote_addr: wr.remote_addr,
                    compare_add: compare,
                    swap,
                    rkey: wr.rkey,
                };
            }
        }
        let mut bad = null_mut();
        // SAFETY: a QP of ours; the SGEs live until the call returns (the HCA reads the
        // descriptors when posted; the buffers are the caller's, registered).
        check(unsafe { ib::ibv_post_send(qp, &mut w, &mut bad) })?;
        if reads {
            self.after_read.insert(qpn);
        } else {
            self.after_read.remove(&qpn);
        }
        Ok(())
    }

    fn post_recv(&mut self, qpn: u32, wr: &RecvWr) -> VResult<()> {
        let qp = self.qp(qpn)?;
        let mut sges = self.ib_sges(&wr.sges);
        let mut w = ib::ibv_recv_wr {
            wr_id: wr.wr_id,
            next: null_mut(),
            sg_list: sges.as_mut_ptr(),
            num_sge: sges.len() as c_int,
        };
        let mut bad = null_mut();
        // SAFETY: a QP of ours; the SGEs describe registered buffers of the caller.
        check(unsafe { ib::ibv_post_recv(qp, &mut w, &mut bad) })
    }

    fn poll_cq(&mut self, cq: u32, max: usize, out: &mut Vec<Wc>) -> usize {
        let Some(&c) = self.cqs.get(cq as usize) else {
            return 0;
        };
        // SAFETY: plain C structs, written by the poll.
        let mut wcs: [ib::ibv_wc; 32] = unsafe { std::mem::zeroed() };
        let want = max.min(wcs.len()) as c_int;
        // SAFETY: a CQ of ours and room for `want` completions.
        let n = unsafe { ib::ibv_poll_cq(c, want, wcs.as_mut_ptr()) };
        for w in &wcs[..n.max(0) as usize] {
            out.push(Wc {
                wr_id: w.wr_id,
                status: wc_status(w.status),
                opcode: wc_opcode(w.opcode),
                byte_len: w.byte_len,
                qpn: w.qp_num,
            });
        }
        n.max(0) as usize
    }

    fn cm_send(&mut self, to_device: &[u8], msg: &CmMsg) -> VResult<()> {
        PortAddr::decode(to_device).ok_or(VerbsError::Fault)?;
        let now = ucs::time::now_ns();
        let out = self
            .cm
            .as_mut()
            .ok_or(VerbsError::Invalid)?
            .rel
            .send(to_device, msg, now)
            .ok_or(VerbsError::Invalid)?;
        // A datagram that cannot go now goes with the retransmissions.
        match self.cm_transmit(&out) {
            Ok(()) | Err(VerbsError::NoMemory) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn cm_poll(&mut self, out: &mut Vec<CmMsg>) -> usize {
        self.cm_reap();
        let now = ucs::time::now_ns();
        let Some(cm) = self.cm.as_mut() else {
            return 0;
        };
        let (resend, lost) = cm.rel.due(now);
        cm.inbox.extend(lost);
        let n = cm.inbox.len();
        out.append(&mut cm.inbox);
        for r in resend {
            let _ = self.cm_transmit_raw(&r);
        }
        n
    }
}

impl Drop for RealHca {
    fn drop(&mut self) {
        // SAFETY: every object below was created by this provider and is destroyed once,
        // dependents first (QPs and keys before CQs and the PD, the PD before the context).
        unsafe {
            for (_, qp) in self.qps.drain() {
                ib::ibv_destroy_qp(qp);
            }
            let destroy = self.umr.as_ref().map(|u| u.destroy);
            for (_, r) in self.regions.drain() {
                match r {
                    Region::Mr { mr, .. } => {
                        ib::ibv_dereg_mr(mr);
                    }
                    Region::Mkey { mkey, .. } => {
                        if let Some(d) = destroy {
                            d(mkey);
                        }
                    }
                }
            }
            if let Some(u) = self.umr.take() {
                ib::ibv_destroy_qp(u.qp);
                ib::ibv_destroy_cq(u.cq);
            }
            if let Some(cm) = self.cm.take() {
                ib::ibv_destroy_qp(cm.qp);
                for (_, ah) in cm.ahs {
                    ib::ibv_destroy_ah(ah);
                }
                if !cm.mr.is_null() {
                    ib::ibv_dereg_mr(cm.mr);
                }
                ib::ibv_destroy_cq(cm.cq);
            }
            for cq in self.cqs.drain(..) {
                ib::ibv_destroy_cq(cq);
            }
            if !self.pd.is_null() {
                ib::ibv_dealloc_pd(self.pd);
            }
            ib::ibv_close_device(self.ctx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_addresses_round_trip_and_refuse_garbage() {
        let a = PortAddr {
            port: 1,
            lid: 0x1234,
            gid: [7; 16],
            global: true,
            mtu: 5,
            cm_qpn: 0xabcdef,
        };
        let b = a.encode();
        assert_eq!(b.len(), PortAddr::LEN);
        assert_eq!(PortAddr::decode(&b), Some(a));
        for cut in 0..b.len() {
            assert_eq!(PortAddr::decode(&b[..cut]), None);
        }
        let mut bad = b.clone();
        bad[0] = 2;
        assert_eq!(PortAddr::decode(&bad), None, "another version");
        let mut bad = b;
        bad[PortAddr::LEN - 5] = 9;
        assert_eq!(PortAddr::decode(&bad), None, "no such MTU");
    }

    #[test]
    fn verbs_constants_match_the_interface() {
        assert_eq!(access_flags(Access::all()), 0xf);
        assert_eq!(access_flags(Access::REMOTE_READ), 4);
        assert_eq!(
            wc_status(ib::ibv_wc_status::IBV_WC_SUCCESS),
            WcStatus::Success
        );
        assert_eq!(
            wc_status(ib::ibv_wc_status::IBV_WC_RETRY_EXC_ERR),
            WcStatus::RetryExcErr
        );
        assert_eq!(
            wc_status(ib::ibv_wc_status::IBV_WC_RNR_RETRY_EXC_ERR),
            WcStatus::RnrRetryExcErr
        );
        assert_eq!(
            wc_status(ib::ibv_wc_status::IBV_WC_WR_FLUSH_ERR),
            WcStatus::WrFlushErr
        );
        assert_eq!(
            wc_status(ib::ibv_wc_status::IBV_WC_GENERAL_ERR),
            WcStatus::RemInvReqErr
        );
        assert_eq!(
            wc_opcode(ib::ibv_wc_opcode::IBV_WC_FETCH_ADD),
            WcOpcode::Atomic
        );
        assert_eq!(wc_opcode(ib::ibv_wc_opcode::IBV_WC_RECV), WcOpcode::Recv);
        assert_eq!(
            send_opcode(Opcode::CompSwap {
                compare: 1,
                swap: 2
            }),
            ib::ibv_wr_opcode::IBV_WR_ATOMIC_CMP_AND_SWP
        );
        assert_eq!(
            send_opcode(Opcode::RdmaRead),
            ib::ibv_wr_opcode::IBV_WR_RDMA_READ
        );
    }

    #[test]
    fn qp_transitions_set_what_each_state_needs() {
        use ib::ibv_qp_attr_mask as m;
        let peer = PortAddr {
            port: 1,
            lid: 9,
            gid: [1; 16],
            global: false,
            mtu: 3,
            cm_qpn: 1,
        };
        let (a, mask) = rc_transition(QpState::Init, 1, 0, 5, 16, None).unwrap();
        assert_eq!(a.qp_state, ib::ibv_qp_state::IBV_QPS_INIT);
        assert_eq!(a.qp_access_flags, 0xf);
        assert_eq!(mask & m::IBV_QP_PORT.0, m::IBV_QP_PORT.0);
        assert!(
            rc_transition(QpState::Rtr, 1, 0, 5, 16, None).is_err(),
            "Rtr needs a peer"
        );
        let (a, mask) = rc_transition(QpState::Rtr, 1, 0, 5, 16, Some((&peer, 77))).unwrap();
        assert_eq!(a.dest_qp_num, 77);
        assert_eq!(a.path_mtu, 3, "the smaller MTU of the two");
        assert_eq!(a.ah_attr.dlid, 9);
        assert_eq!(a.ah_attr.is_global, 0, "InfiniBand within a subnet: no GRH");
        for f in [
            m::IBV_QP_AV,
            m::IBV_QP_DEST_QPN,
            m::IBV_QP_MAX_DEST_RD_ATOMIC,
        ] {
            assert_eq!(mask & f.0, f.0);
        }
        let roce = PortAddr {
            global: true,
            ..peer
        };
        let (a, _) = rc_transition(QpState::Rtr, 1, 3, 5, 16, Some((&roce, 77))).unwrap();
        assert_eq!(a.ah_attr.is_global, 1);
        assert_eq!(a.ah_attr.grh.sgid_index, 3);
        // SAFETY: the union's byte view is always valid.
        assert_eq!(unsafe { a.ah_attr.grh.dgid.raw }, [1; 16]);
        let (a, mask) = rc_transition(QpState::Rts, 1, 0, 5, 16, None).unwrap();
        assert_eq!((a.retry_cnt, a.rnr_retry), (QP_RETRY, QP_RNR_RETRY));
        assert_eq!(mask & m::IBV_QP_SQ_PSN.0, m::IBV_QP_SQ_PSN.0);
        let (a, mask) = rc_transition(QpState::Err, 1, 0, 5, 16, None).unwrap();
        assert_eq!(
            (a.qp_state, mask),
            (ib::ibv_qp_state::IBV_QPS_ERR, m::IBV_QP_STATE.0)
        );
    }

    #[test]
    fn device_names_parse() {
        assert_eq!(parse_device("mlx5_0:1"), Some(("mlx5_0", 1)));
        assert_eq!(parse_device("rocep1s0f0:2"), Some(("rocep1s0f0", 2)));
        assert_eq!(parse_device("mlx5_0"), None);
        assert_eq!(parse_device("mlx5_0:0"), None);
        assert_eq!(parse_device(":1"), None);
    }

    #[test]
    fn no_device_here_says_so() {
        // No machine here has an HCA: either the library or the devices are missing,
        // and opening any name fails with a reason instead of crashing.
        match ports() {
            Ok(p) if !p.is_empty() => eprintln!("RDMA ports here: {p:?}"),
            Ok(_) => eprintln!("libibverbs lists no active port"),
            Err(e) => eprintln!("{e}"),
        }
        let e = RealHca::open("nonexistent_0:1", None).unwrap_err();
        assert!(!e.is_empty());
    }
}
