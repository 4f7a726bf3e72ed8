//! The UMR layout rendezvous (after "UMR for noncontiguous GPU transfers"): over a memory
//! lane with [`IfaceFlags::UMR`] (rc_verbs), a layout moves with no packing and one RDMA
//! WRITE per chunk, from an indirect key over the sender's blocks into one over the
//! receiver's.
//!
//! 1. The sender's RTS names its layout (the memoized layout exchange); the receiver
//!    knows its smallest block from it, and its own from its data.
//! 2. The receiver agrees the chunk (`uct::tl::verbs::umr::agree_chunk`: the smaller
//!    block times `max_klm - 1`, so that a chunk of either side fits one key), builds one
//!    indirect key per chunk over its own blocks (the interface keeps them in its key
//!    cache by layout, address and chunk), and answers RTR_UMR with the chunk and its key
//!    list.
//! 3. The sender builds its own keys for the same chunk (cached the same way), writes chunk
//!    `i` from its key `i` into the receiver's key `i`, and sends FIN when all landed.
//!
//! **The per-peer remote key cache.** A key list the sender was sent is kept by its id
//! (`kid`, a hash of the receiver's layout, address, chunk and keys) in the endpoint, and
//! the receiver remembers the ids it sent: a second RTR_UMR for the same list carries the
//! id alone. Both sides keep the last [`KNOWN_MAX`] ids in the order the lists were sent,
//! and an RTR_UMR with a list adds one on both sides (the AM lane keeps the order), so the
//! two stay in step with no message of their own. A key set the receiver rebuilt has new
//! keys, so a new id: a stale list is never named.
//!
//! **The hybrid.** UMR pays per chunk (a work request), per entry of the keys (the HCA
//! walks every block) and per byte; packing pays per active message and copies every byte
//! twice (pack, unpack). The interface measures the first three on its provider
//! (`Iface::umr_cost`, at first use); [`choose`] takes the cheaper prediction, and the
//! receiver asks for it: RTR_UMR, or a plain RTR that turns the sender's get rendezvous
//! into the AM pipeline of packed fragments. `RUCX_UMR=umr|pack|blocks` forces one (blocks:
//! the plain path, one read per block). docs/results.md has the measured crossing.

use ucs::{Status, UcsResult};
use uct::{Done, Iface, IfaceFlags, Iov, OpenIface};

use crate::datatype::DataState;
use crate::dt::DtLayout;
use crate::request::ReqId;
use crate::worker::op::{Op, SendOp};
use crate::worker::state::{Core, Ctrl, Ep, Lane};

/// Key lists kept per peer (and ids remembered by the receiver that sent them).
pub(crate) const KNOWN_MAX: usize = 64;

/// The keys of RTR_UMR's list `kid`: `keys` learned (when given), or the list learned
/// before. `None`: an id this endpoint was never sent (a protocol violation).
pub(crate) fn learn_keys(ep: Option<&mut Ep>, kid: u64, keys: Vec<u32>) -> Option<Vec<u32>> {
    let e = ep?;
    if keys.is_empty() {
        return e
            .umr_known
            .iter()
            .find(|(k, _)| *k == kid)
            .map(|(_, v)| v.clone());
    }
    if e.umr_known.len() >= KNOWN_MAX {
        e.umr_known.pop_front();
    }
    e.umr_known.push_back((kid, keys.clone()));
    Some(keys)
}

/// How a layout rendezvous over a lane with UMR moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// UMR writes, chunk by chunk.
    Umr,
    /// Packed by the sender into active messages (the AM pipeline), unpacked here.
    Pack,
    /// Read block by block (one work request per block), as without UMR.
    Blocks,
}

/// `RUCX_UMR`: `auto` (default: the cost model picks UMR or packing), `umr`, `pack`,
/// `blocks`. Read once.
fn forced() -> Option<Way> {
    static W: std::sync::OnceLock<Option<Way>> = std::sync::OnceLock::new();
    *W.get_or_init(|| match std::env::var("RUCX_UMR").as_deref() {
        Ok("umr") => Some(Way::Umr),
        Ok("pack") => Some(Way::Pack),
        Ok("blocks") => Some(Way::Blocks),
        _ => None,
    })
}

/// CPU time to pack or unpack one block (the loop around the copy), ns.
const PACK_BLOCK_NS: f64 = 2.0;

/// The predicted times (ns) of a UMR transfer and of the packed one, for `bytes` in
/// `chunks` chunks over `entries` blocks of both sides together.
pub(crate) fn predict(c: &uct::UmrCost, bytes: u64, chunks: u64, entries: u64) -> (f64, f64) {
    let b = bytes as f64;
    let umr = chunks as f64 * c.wr_ns + entries as f64 * c.entry_ns + b * c.byte_ns;
    let frags = bytes.div_ceil(c.seg.max(1) as u64) as f64;
    let pack = frags * c.send_ns
        + 2.0 * b * 1e9 / crate::proto::select::COPY_BW
        + entries as f64 * PACK_BLOCK_NS;
    (umr, pack)
}

/// The cheaper way by the model (UMR on a tie).
pub(crate) fn choose(c: &uct::UmrCost, bytes: u64, chunks: u64, entries: u64) -> Way {
    let (umr, pack) = predict(c, bytes, chunks, entries);
    if umr <= pack {
        Way::Umr
    } else {
        Way::Pack
    }
}

/// FNV-1a over 64-bit words: the id of a key list.
fn fnv(words: impl IntoIterator<Item = u64>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for w in words {
        for b in w.to_le_bytes() {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// The receiver's side of a get rendezvous `id` whose sender (`(ep, sreq)`) describes its
/// data by layout `sender`, over memory lane `lane`, into `local`: asks for UMR writes
/// (RTR_UMR) or for the packed bytes (RTR), as the cost model or `RUCX_UMR` says. False
/// when neither applies (no UMR on the lane, `RUCX_UMR=blocks`): the caller reads block by
/// block.
#[allow(clippy::too_many_arguments)]
pub(crate) fn layout_get(
    ifaces: &mut [OpenIface],
    core: &mut Core,
    id: ReqId,
    lane: Lane,
    ep: usize,
    sreq: u64,
    local: &[Iov],
    sender: &DtLayout,
    device: bool,
) -> bool {
    let iface = &mut ifaces[lane.iface];
    let max_klm = iface.umr_max_klm();
    if !core.info[lane.iface].attr.flags.contains(IfaceFlags::UMR) || max_klm == 0 {
        return false;
    }
    let segs: Vec<(u64, u64)> = local
        .iter()
        .filter(|v| v.length > 0)
        .map(|v| (v.buffer as u64, v.length as u64))
        .collect();
    let total: u64 = segs.iter().map(|s| s.1).sum();
    if segs.is_empty() || total != sender.size() as u64 {
        return false;
    }
    let min_s = sender.canon().min_block();
    let min_r = uct::tl::verbs::umr::min_block(&segs);
    let chunk = uct::tl::verbs::umr::agree_chunk(min_s, min_r, max_klm);
    let chunks = total.div_ceil(chunk);
    let entries = segs.len() as u64 + sender.canon().pieces();
    let fits = crate::proto::wire::RTR_UMR_HDR + 4 * chunks as usize
        <= core.info[lane.iface].attr.am.max_bcopy;
    let way = match forced() {
        Some(w) => w,
        None => match iface.umr_cost() {
            Some(c) => {
                let w = choose(&c, total, chunks, entries);
                if log::log_enabled!(log::Level::Debug) {
                    let (u, p) = predict(&c, total, chunks, entries);
                    log::debug!(
                        "ucp: layout rendezvous of {total} bytes, {entries} blocks: {w:?} \
                         (predicted UMR {:.1} us, packed {:.1} us)",
                        u / 1e3,
                        p / 1e3
                    );
                }
                w
            }
            None => Way::Pack,
        },
    };
    match way {
        Way::Blocks => false,
        Way::Umr if fits && umr_request(iface.as_mut(), core, id, lane, ep, sreq, &segs, chunk) => {
            true
        }
        _ if device => false,
        // Packed: what UMR cannot carry (a key list longer than one message) goes too.
        Way::Umr | Way::Pack => {
            core.stats.rndv_pack += 1;
            core.queue_ctrl(ep, Ctrl::Rtr { sreq, rreq: id.0 });
            true
        }
    }
}

/// Builds the receiver's chunk keys and queues RTR_UMR (with the list, or its id where
/// the sender has it). False when the keys cannot be built.
#[allow(clippy::too_many_arguments)]
fn umr_request(
    iface: &mut dyn Iface,
    core: &mut Core,
    id: ReqId,
    lane: Lane,
    ep: usize,
    sreq: u64,
    segs: &[(u64, u64)],
    chunk: u64,
) -> bool {
    let n = segs.iter().map(|s| s.1).sum::<u64>().div_ceil(chunk) as usize;
    let Some(Op::Recv(r)) = core.reqs.get(id).map(|r| &r.state) else {
        return false;
    };
    // The receive's own name for the cache: its layout where it has one, else its blocks,
    // and how many of its bytes this message fills (a shorter message fills a prefix).
    let bytes = segs.iter().map(|s| s.1).sum::<u64>();
    let name = match &r.data {
        DataState::Layout(lb) => (lb.layout().hash(), lb.origin_addr, bytes),
        _ => (
            u128::from(fnv(segs.iter().flat_map(|s| [s.0, s.1]))),
            segs[0].0,
            bytes,
        ),
    };
    let keys = match iface.umr_keys(name, segs, chunk) {
        Ok(k) if k.len() == n => k,
        Ok(_) => {
            iface.umr_release(name, chunk);
            return false;
        }
        Err(_) => return false,
    };
    let kid = fnv([name.0 as u64, (name.0 >> 64) as u64, name.1, chunk]
        .into_iter()
        .chain(keys.iter().map(|&k| u64::from(k))));
    let Some(e) = core.eps.get_mut(ep) else {
        iface.umr_release(name, chunk);
        return false;
    };
    let known = e.umr_taught.contains(&kid);
    if !known {
        if e.umr_taught.len() >= KNOWN_MAX {
            e.umr_taught.pop_front();
        }
        e.umr_taught.push_back(kid);
    }
    core.stats.rndv_umr += 1;
    if known {
        core.stats.umr_list_hits += 1;
    } else {
        core.stats.umr_list_bytes += 4 * keys.len() as u64;
    }
    if let Some(Op::Recv(r)) = core.reqs.get_mut(id).map(|r| &mut r.state) {
        r.rndv().umr = Some((lane.iface, name, chunk));
    }
    core.queue_ctrl(
        ep,
        Ctrl::RtrUmr {
            sreq,
            rreq: id.0,
            chunk,
            kid,
            keys: if known { Vec::new() } else { keys },
        },
    );
    true
}

/// The sender's side: writes send `s` (a host layout) chunk by chunk into the receiver's
/// keys by UMR. `Ok(false)`: out of resources, the request stays as it was; call again.
/// A failure to build or post is the send's status, and FIN carries it to the receiver.
pub(crate) fn write(
    iface: &mut dyn Iface,
    lane: Lane,
    s: &mut SendOp,
    id: ReqId,
) -> UcsResult<bool> {
    let Some(put) = s.put.take() else {
        return Ok(true);
    };
    let Some((chunk, remote)) = put.umr.as_ref() else {
        s.put = Some(put);
        return Err(Status::InvalidParam);
    };
    let r = post(iface, lane, s, id, *chunk, remote);
    match r {
        Ok(Done::Later) => s.wait_comp += 1,
        Ok(Done::Now) => {}
        Err(Status::NoResource) => {
            s.put = Some(put);
            return Ok(false);
        }
        Err(st) => s.ack_status = st,
    }
    s.offset = s.total;
    s.fin_pending = true;
    Ok(true)
}

/// The blocks `(address, length)` of the first `total` bytes of layout `dt` at `origin`.
fn layout_segs(dt: &DtLayout, origin: u64, total: u64) -> UcsResult<Vec<(u64, u64)>> {
    let mut cur = crate::dt::Cursor::new(dt.canon(), 0).map_err(|_| Status::InvalidParam)?;
    let mut segs = Vec::new();
    let mut out = Vec::new();
    let mut got = 0;
    while got < total {
        segs.clear();
        let n = cur.fill(&mut segs, 4096, total - got);
        if n == 0 {
            break;
        }
        got += n;
        out.extend(
            segs.iter()
                .filter(|g| g.len > 0)
                .map(|g| (origin.wrapping_add(g.offset as u64), g.len)),
        );
    }
    (got == total).then_some(out).ok_or(Status::InvalidParam)
}

fn post(
    iface: &mut dyn Iface,
    lane: Lane,
    s: &mut SendOp,
    id: ReqId,
    chunk: u64,
    remote: &[u32],
) -> UcsResult<Done> {
    let total = s.total as u64;
    // A host layout, or one over GPU memory: its blocks where they lie.
    let lb = s.data.layout().ok_or(Status::InvalidParam)?;
    let name = (lb.layout().hash(), lb.origin_addr, total);
    let segs = layout_segs(lb.layout(), lb.origin_addr, total)?;
    let local = iface.umr_keys(name, &segs, chunk)?;
    if local.len() != remote.len() {
        iface.umr_release(name, chunk);
        return Err(Status::InvalidParam);
    }
    let r = crate::buf::umr_put(iface, lane.ep, &local, remote, chunk, total, id.0);
    if r.is_ok() {
        s.umr_use = Some(Box::new((lane.iface, name, chunk)));
    } else {
        iface.umr_release(name, chunk);
    }
    r
}
