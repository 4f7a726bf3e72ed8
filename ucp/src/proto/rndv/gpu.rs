//! The one-shot direct transfer of device data described by layouts (the GPU counterpart
//! of the UMR paper's HCA gather/scatter and of FALCON-X's zero-copy): when both buffers
//! are device memory of one host and at least one side is a layout, one process maps the
//! other's buffer through the memory lane for device memory (`Iface::device_rma`, which
//! `cuda_ipc` offers) and one kernel moves the bytes from the sender's layout straight
//! into the receiver's. No pack buffer, no staging.
//!
//! Who runs it follows the rule of every device copy of a pair (`rndv::send::pushes_device`):
//! the side with the smaller worker id. A receiver that is not it asks the sender to push
//! (`RTR_SPLIT_LAYOUT` at offset 0 with a device key, or `RTR_PUT` for a contiguous
//! receive buffer). The layouts meet through the memoized layout exchange (the RTS names
//! the sender's layout by hash); the mappings are `cuda_ipc`'s, cached per peer and buffer
//! id and invalidated with it; the compiled kernels are cached per pair of shapes
//! (`dt::gpu::launch`).
//!
//! The method (one kernel, one 2D copy, or one copy per piece) is the model's pick
//! (`dt::gpu::model`), over the relation of the two GPUs seen through the mapping.

use ucs::memtype::{self, MemoryType};
use ucs::UcsResult;
use uct::{Done, Iface, IfaceFlags, OpenIface, RemoteKey};

use super::segs::register_key;
use crate::datatype::DataState;
use crate::dt::gpu::launch::{self, Side};
use crate::dt::gpu::model::{Method, Relation};
use crate::dt::Canon;
use crate::proto::wire::{RemoteSeg, RndvKey};
use crate::request::ReqId;
use crate::worker::op::{Op, PutTarget, SendOp};
use crate::worker::state::{Core, Ctrl, Lane};

/// This process's side of a device transfer: a device layout, or contiguous device
/// memory; with its device.
fn local_side(d: &DataState) -> Option<(Side<'_>, i32)> {
    match d {
        DataState::DeviceLayout(g) => Some((g.side(), g.dev)),
        DataState::Device(b) => {
            let info = memtype::detect(b.addr() as *const u8);
            (info.mem_type == MemoryType::Cuda).then_some((
                Side::Dense {
                    addr: b.addr(),
                    len: b.len() as u64,
                },
                info.device,
            ))
        }
        _ => None,
    }
}

/// The peer's side: its layout placed at `origin`, or one contiguous segment; and the
/// remote range that holds it (what is mapped).
enum Remote<'a> {
    Layout { origin: u64, dt: &'a Canon },
    Dense { addr: u64, len: u64 },
}

impl Remote<'_> {
    fn range(&self) -> (u64, usize) {
        match self {
            Remote::Layout { origin, dt } => {
                let (lo, hi) = dt.bounds();
                (origin.wrapping_add(lo as u64), (hi - lo) as usize)
            }
            Remote::Dense { addr, len } => (*addr, *len as usize),
        }
    }

    /// The side as seen through the mapping of its range at `mapped`.
    fn mapped(&self, mapped: u64) -> Side<'_> {
        match self {
            Remote::Layout { dt, .. } => Side::Layout {
                addr: mapped.wrapping_sub(dt.bounds().0 as u64),
                dt,
            },
            Remote::Dense { len, .. } => Side::Dense {
                addr: mapped,
                len: *len,
            },
        }
    }

    fn is_layout(&self) -> bool {
        matches!(self, Remote::Layout { .. })
    }
}

/// The method `RUCX_GPU_DT_METHOD` forces (`direct`, `copy-engine`, `per-block`,
/// `pack-unpack`; for tests and measurements), instead of the model's pick. A forced 2D
/// copy applies only to pairs that are one box (the model picks for the others);
/// `pack-unpack` turns the direct transfer off (the scratch buffers and the contiguous
/// device protocol carry the data).
pub(crate) fn forced() -> Option<Method> {
    static F: std::sync::OnceLock<Option<Method>> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        let v = std::env::var("RUCX_GPU_DT_METHOD").ok()?;
        let m = match v.as_str() {
            "direct" => Method::Direct,
            "copy-engine" => Method::CopyEngine,
            "per-block" => Method::PerBlock,
            "pack-unpack" => Method::PackUnpack,
            _ => {
                log::warn!("ucp: RUCX_GPU_DT_METHOD={v} is not a method; the model picks");
                return None;
            }
        };
        Some(m)
    })
}

/// Queues `src` → `dst` on `stream` by the model's pick among the methods that apply
/// (a kernel where NVRTC compiles one, else copies).
fn run(stream: &ucs::cuda::StreamRef, local_dev: i32, src: &Side, dst: &Side) -> UcsResult<()> {
    // Asked of each side's first byte: a layout's origin may lie outside its buffer,
    // in memory that is not allocated (or another allocation), and must not be probed.
    let peer_dev = [src, dst]
        .iter()
        .map(|s| memtype::detect(s.first_byte() as *const u8).device)
        .find(|d| *d >= 0 && *d != local_dev);
    let relation = if peer_dev.is_some() {
        Relation::PeerGpu
    } else {
        Relation::SameGpu
    };
    let allowed = [Method::Direct, Method::CopyEngine, Method::PerBlock];
    let t0 = ucs::time::now_ns();
    let method = match forced() {
        Some(m) if m != Method::CopyEngine || launch::box_rows(src, dst).is_some() => m,
        _ => launch::choose(local_dev, relation, src, dst, &allowed)
            .map_or(Method::Direct, |c| c.method),
    };
    let t1 = ucs::time::now_ns();
    let r = launch::copy(stream, src, dst, method);
    {
        use crate::dt::gpu::stage::DIRECT_NS;
        use std::sync::atomic::Ordering::Relaxed;
        DIRECT_NS[0].fetch_add(1, Relaxed);
        DIRECT_NS[1].fetch_add(t1.saturating_sub(t0), Relaxed);
        DIRECT_NS[2].fetch_add(ucs::time::now_ns().saturating_sub(t1), Relaxed);
    }
    match r {
        // No kernel (no NVRTC, or one that did not compile, logged): copies.
        Err(e) if method == Method::Direct => {
            ucs::warn_limited!("ucp: a layout kernel could not run ({e}); copying piece by piece");
            launch::copy(stream, src, dst, Method::PerBlock)
        }
        r => r,
    }
}

/// Tries the direct transfer for device get rendezvous `id`, whose sender's data is its
/// `layout` (origin, hash) or its segments `segs`, readable through `lane` with key `rk`.
/// True when it took the request (done, failed, queued, or the sender asked to push);
/// false leaves it to the copy protocols. A transfer done (or failed) at once ends with
/// `finish_get`, the receiver's end of a get.
#[allow(clippy::too_many_arguments)]
pub(crate) fn direct_get(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    id: ReqId,
    lane: Lane,
    (ep, sreq): (usize, u64),
    rk: &RemoteKey,
    layout: Option<(u64, u128)>,
    segs: &[RemoteSeg],
    finish_get: impl FnOnce(&mut Core, ReqId),
) -> bool {
    if !core.info[lane.iface]
        .attr
        .flags
        .contains(IfaceFlags::DEVICE_RMA)
        || forced() == Some(Method::PackUnpack)
    {
        return false;
    }
    let dt = match layout {
        Some((_, hash)) => match core.cached_layout(ep, hash) {
            Some(d) => Some(d),
            None => return false,
        },
        None => None,
    };
    let remote = match (&dt, layout, segs) {
        (Some(d), Some((origin, _)), _) => Remote::Layout {
            origin,
            dt: d.canon(),
        },
        (None, _, [g]) => Remote::Dense {
            addr: g.addr,
            len: g.len,
        },
        _ => return false,
    };
    let copier = core.eps.get(ep).is_some_and(|e| core.uuid < e.remote_uuid);
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return false;
    };
    let Some((local, local_dev)) = local_side(&r.data) else {
        return false;
    };
    let local_is_layout = matches!(local, Side::Layout { .. });
    if !local_is_layout && !remote.is_layout() {
        // Contiguous on both sides: the contiguous device protocol.
        return false;
    }
    if local.size() != r.expect as u64 || remote_size(&remote) != r.expect as u64 {
        // A receive larger than the message (or a truncation): the copy protocols.
        return false;
    }
    if !copier {
        return ask_push_layout(ifaces, core, id, ep, sreq, lane);
    }
    let (addr, len) = remote.range();
    let iface = &mut ifaces[lane.iface];
    let mut work = |mapped: u64, stream: &ucs::cuda::StreamRef| {
        run(stream, local_dev, &remote.mapped(mapped), &local)
    };
    // The receive's memory is kept until it completes, which waits for the operation
    // (`Done::Later` counts as an outstanding get).
    let res = crate::buf::device_rma(
        iface.as_mut(),
        lane.ep,
        addr,
        len,
        rk,
        local_dev,
        &mut work,
        id.0,
    );
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return true;
    };
    if let DataState::DeviceLayout(g) = &mut r.data {
        g.direct_done();
    }
    core.stats.rndv_device_direct += 1;
    match res {
        Ok(Done::Now) => finish_get(core, id),
        Ok(Done::Later) => r.rndv().gets += 1,
        Err(s) => {
            r.status = s;
            finish_get(core, id);
        }
    }
    true
}

fn remote_size(r: &Remote) -> u64 {
    match r {
        Remote::Layout { dt, .. } => dt.size(),
        Remote::Dense { len, .. } => *len,
    }
}

/// Asks the sender of device rendezvous `id` to move the data into our buffer itself:
/// `RTR_SPLIT_LAYOUT` at offset 0 with our layout and a device key of its span, or
/// `RTR_PUT` for a contiguous buffer. False when our memory cannot be registered.
fn ask_push_layout(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    id: ReqId,
    ep: usize,
    sreq: u64,
    lane: Lane,
) -> bool {
    let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) else {
        return false;
    };
    // A layout too large for one control message goes before it in parts (`send_ctrl`)
    // where `UCX_RNDV_LAYOUT_PARTS` allows (auto: yes, this is device memory) and the AM
    // lane keeps the order; otherwise it is received packed.
    let Some(am) = core.eps.get(ep).map(|e| &core.info[e.am.iface].attr) else {
        return false;
    };
    let seg_max = am.am.max_bcopy;
    let parts = core.layout_parts.unwrap_or(true) && am.flags.contains(IfaceFlags::EP_ORDERED);
    let (lo, len, origin, layout) = match &r.data {
        DataState::DeviceLayout(g) => (
            g.lb.span.addr(),
            g.lb.span.len(),
            g.lb.origin_addr,
            Some((g.lb.dt.encoded().to_vec(), g.lb.dt.hash())),
        ),
        DataState::Device(b) => (b.addr(), b.len(), b.addr(), None),
        _ => return false,
    };
    if !parts && layout.as_ref().is_some_and(|(l, _)| 64 + l.len() > seg_max) {
        return false;
    }
    let Ok((m, rkey)) = register_key(ifaces[lane.iface].md(), lo, len, None, true) else {
        return false;
    };
    if let DataState::DeviceLayout(g) = &mut r.data {
        g.direct_done();
    }
    r.rndv().memh = Some((lane.iface, m));
    let c = match layout {
        Some((layout, hash)) => Ctrl::RtrSplitLayout {
            sreq,
            rreq: id.0,
            offset: 0,
            rkey,
            origin,
            layout,
            hash,
        },
        None => Ctrl::RtrPut {
            sreq,
            rreq: id.0,
            rkey,
            segs: {
                let mut v = crate::proto::wire::Segs::new();
                v.push(RemoteSeg {
                    addr: lo,
                    len: len as u64,
                });
                v
            },
        },
    };
    core.queue_ctrl(ep, c);
    true
}

/// The sender's half: writes send `s` into the receiver's device memory `put` (its
/// layout, or one segment) with one kernel through `iface`'s mapping, when one side is a
/// layout. `None` leaves it to the copy protocols; `Some(n)`: `n` completions to wait for.
pub(crate) fn direct_put(
    iface: &mut dyn Iface,
    ep: uct::EpId,
    s: &mut SendOp,
    put: &PutTarget,
    key: &RndvKey,
    id: ReqId,
) -> Option<UcsResult<u32>> {
    if !key.device
        || put.offset != 0
        || !iface.attr().flags.contains(IfaceFlags::DEVICE_RMA)
        || forced() == Some(Method::PackUnpack)
    {
        return None;
    }
    let remote = match (&put.layout, put.segs.as_slice()) {
        (Some((origin, canon)), _) => Remote::Layout {
            origin: *origin,
            dt: canon,
        },
        (None, [g]) => Remote::Dense {
            addr: g.addr,
            len: g.len,
        },
        _ => return None,
    };
    let (local, local_dev) = local_side(&s.data)?;
    if !remote.is_layout() && !matches!(local, Side::Layout { .. }) {
        return None;
    }
    if remote_size(&remote) != s.total as u64 {
        return None;
    }
    let rk = match iface.md().rkey_unpack(&key.mkey) {
        Ok(k) => k,
        Err(e) => return Some(Err(e)),
    };
    let (addr, len) = remote.range();
    let mut work = |mapped: u64, stream: &ucs::cuda::StreamRef| {
        run(stream, local_dev, &local, &remote.mapped(mapped))
    };
    Some(
        crate::buf::device_rma(iface, ep, addr, len, &rk, local_dev, &mut work, id.0).map(|d| {
            match d {
                Done::Now => 0,
                Done::Later => 1,
            }
        }),
    )
}
