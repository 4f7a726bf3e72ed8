//! The sender's side of a rendezvous: the RTS (with the sender's segments and key for a
//! get, or its layout by hash; nothing more for a put or the active-message pipeline), then
//! what the receiver's answer asks for: the pipeline's data messages (`stage` for device
//! data), writes into the receiver's segments or layout (RTR_PUT, RTR_SPLIT,
//! RTR_SPLIT_LAYOUT: through a mapping of its shared memory where there is one, by one
//! kernel for device layouts, `gpu`), or UMR writes (RTR_UMR, `proto::umr`); and FIN once
//! the writes landed. `eager::push_send` calls these steps for a send whose protocol is a
//! rendezvous; the handlers of the answers (RTR*, LAYOUT_MISS, ACK) are at the end.

use smallvec::SmallVec;
use ucs::{Status, UcsResult};
use uct::{Done, EpId, Iface, IfaceFlags, MemoryType, OpenIface};

use super::mapped;
use super::segs::{for_each_remote_seg, remote_segs, span_of};
use super::stage;
use crate::buf;
use crate::datatype::DataState;
use crate::proto::am::state::{rts_prefix, AmHdr};
use crate::proto::rma::{self, state::MappingCache};
use crate::proto::select::Proto;
use crate::proto::umr;
use crate::proto::wire::{self, FirstHdr, FragHdr, RndvKey, RtsData};
use crate::request::ReqId;
use crate::worker::op::{Op, PutTarget, SendOp};
use crate::worker::state::{nb, Bad, Core, Ctrl, Lane, Res, SendCx};
use crate::worker::wireup;

/// Writes send `s` where its receiver asked, once its RTR_UMR (its chunk keys), RTR_PUT or
/// RTR_SPLIT (its segments, or its layout) came; FIN follows completion.
pub(crate) fn write_tail(
    ifaces: &mut [OpenIface],
    cx: &mut SendCx<'_>,
    s: &mut SendOp,
    id: ReqId,
    (lane, rma, rma_dev): (Lane, Option<Lane>, Option<Lane>),
) -> UcsResult<bool> {
    if s.put.as_ref().is_some_and(|p| p.umr.is_some()) {
        // RTR_UMR: write each chunk into the receiver's chunk key; FIN follows completion.
        let rma = rma.ok_or(Status::Unsupported)?;
        return umr::write(ifaces[rma.iface].as_mut(), rma, s, id);
    }
    // RTR_PUT or RTR_SPLIT: write into the receiver's segments; FIN follows completion.
    // Device memory of the receiver's goes through the memory lane for it.
    let device = s
        .put
        .as_ref()
        .and_then(|p| RndvKey::decode(&p.rkey))
        .is_some_and(|k| k.device);
    let rma = if device { rma_dev } else { rma }.ok_or(Status::Unsupported)?;
    match write_to_receiver(ifaces[rma.iface].as_mut(), rma.ep, s, id, cx.mappings) {
        Ok(mapped) => {
            cx.stats.rndv_mapped += u64::from(mapped);
            // Puts carried as messages of the AM lane's own connection (tcp): the FIN
            // follows the data at once, and the connection's order makes the
            // receiver read every byte before it. The receiver so completes a round
            // trip sooner than after the puts' answers; this send still completes
            // on them (its buffer is in use until then). A put the target refuses
            // can only be into a receive that ended already, which the FIN then
            // finds gone.
            let same_connection = rma.iface == lane.iface
                && rma.ep == lane.ep
                && wireup::by_messages(&cx.info[rma.iface])
                && cx.info[rma.iface]
                    .attr
                    .flags
                    .contains(IfaceFlags::EP_ORDERED);
            if same_connection && s.fin_pending && s.put.is_none() {
                s.fin_pending = false;
                let rreq = s.rreq.unwrap_or(0);
                let e = &mut cx.eps[s.ep];
                e.ctrl.push_back(Ctrl::Fin {
                    rreq,
                    status: Status::Ok,
                });
                if !e.in_ctrl {
                    e.in_ctrl = true;
                    cx.ctrl_eps.push_back(s.ep);
                }
                *cx.work = true;
            }
            Ok(true)
        }
        // Out of resources part way: the rest waits in the endpoint's queue.
        Err(Status::NoResource) if s.put.is_some() => Ok(false),
        Err(e) => Err(e),
    }
}

/// The RTS of a get rendezvous of a structured layout.
pub(crate) fn rts_layout(
    ifaces: &mut [OpenIface],
    cx: &mut SendCx<'_>,
    s: &mut SendOp,
    id: ReqId,
    rid: u32,
    (lane, rma, rma_dev): (Lane, Option<Lane>, Option<Lane>),
) -> UcsResult<bool> {
    let seg = cx.info[lane.iface].attr.am.max_bcopy;
    let total = s.total;
    let tag = s.tag;
    // A structured layout travels by its canonical hash, and its compact encoding
    // only the first time this endpoint sends it (the receiver memoizes it). One
    // over device memory is registered with the memory lane for device memory:
    // the receiver maps it and moves it with one kernel (`gpu`).
    let device = s.data.mem_type() == MemoryType::Cuda;
    let rma = if device { rma_dev } else { rma }.ok_or(Status::Unsupported)?;
    let Some(l) = s.data.layout() else {
        return Err(Status::InvalidParam);
    };
    let (lo, hi) = (l.span.addr(), l.span.addr() + l.span.len() as u64);
    let mine = s.memh.as_deref().map(|(_, m)| m);
    let Some((mkey, memh)) = rts_mkey(ifaces[rma.iface].md(), mine, lo, hi)? else {
        s.proto = Proto::RndvAm;
        cx.stats.rndv_no_keys += 1;
        return Ok(false);
    };
    let shm = (!device)
        .then(|| rma::shm_window(cx.mems, cx.shm_regions, lo, hi))
        .flatten();
    // Offer to write a tail where the receiver copies through a mapping (a layout
    // read through cma is not split).
    let help = shm.is_some()
        && total >= cx.split_thresh
        && cx.info[rma.iface]
            .attr
            .flags
            .contains(IfaceFlags::PUT_ZCOPY);
    s.split_offered = help;
    let rkey = RndvKey {
        mkey: mkey.into(),
        shm,
        device,
    }
    .encode();
    if let Some(m) = memh {
        s.memh = Some(Box::new((rma.iface, m)));
    }
    let hash = l.dt.hash();
    let e = &mut cx.eps[s.ep];
    let first = !e.layouts_sent.contains(&hash);
    // A description too large for the RTS goes before it in LAYOUT_PART messages
    // (where `tag_send` chose so: an ordered lane, `UCX_RNDV_LAYOUT_PARTS`). Until
    // the RTS is out, `s.offset` counts the description's bytes sent.
    let in_parts = l.dt.encoded().len() + 160 > seg;
    if first && in_parts {
        let mut from = s.offset;
        let r = wireup::send_layout_parts(
            ifaces[lane.iface].as_mut(),
            lane.ep,
            rid,
            hash,
            l.dt.encoded(),
            seg,
            &mut from,
        );
        s.offset = from;
        if !r? {
            return Ok(false);
        }
    }
    let layout = (first && !in_parts).then(|| l.dt.encoded().to_vec());
    let msg = wire::encode_rts(
        &first_hdr(tag, rid, s.flags, id, total),
        &RtsData::GetLayout {
            rkey,
            origin: l.origin_addr,
            hash,
            layout,
            help,
        },
    );
    let (am_id, msg) = rts_for(&s.am, msg);
    let iface = &mut ifaces[lane.iface];
    if nb(send_bytes(iface.as_mut(), lane, am_id, &msg))?.is_none() {
        return Ok(false);
    }
    if first {
        if e.layouts_sent.len() >= 4096 {
            e.layouts_sent.clear();
        }
        e.layouts_sent.insert(hash);
        cx.stats.layout_bytes_sent += l.dt.encoded().len() as u64;
    }
    s.started = true;
    s.offset = total;
    s.wait_ack = true;
    Ok(true)
}

/// The RTS of a get rendezvous of data with addresses (contiguous, iov, device memory).
pub(crate) fn rts_get(
    ifaces: &mut [OpenIface],
    cx: &mut SendCx<'_>,
    s: &mut SendOp,
    id: ReqId,
    rid: u32,
    (lane, rma, rma_dev): (Lane, Option<Lane>, Option<Lane>),
) -> UcsResult<bool> {
    let total = s.total;
    let tag = s.tag;
    // Device memory goes through the memory lane for it: the peer maps it.
    let device = s.data.mem_type() == MemoryType::Cuda;
    let rma = if device { rma_dev } else { rma }.ok_or(Status::Unsupported)?;
    // A device layout sent packed: its scratch buffer, once the kernel filled it.
    s.data.prepare_device()?;
    let iov = if device {
        smallvec::smallvec![s.data.device_iov(0, total).ok_or(Status::InvalidParam)?]
    } else {
        s.data.iovs(0, total).ok_or(Status::InvalidParam)?
    };
    let segs = remote_segs(&iov);
    // One registration spanning every segment: its remote key bounds what the
    // receiver may read.
    let (lo, hi) = span_of(&segs).unwrap_or((0, 0));
    let mine = s.memh.as_deref().map(|(_, m)| m);
    let Some((mkey, memh)) = rts_mkey(ifaces[rma.iface].md(), mine, lo, hi)? else {
        s.proto = Proto::RndvAm;
        cx.stats.rndv_no_keys += 1;
        return Ok(false);
    };
    // Worker-allocated shared memory: the receiver may map it and copy directly.
    let shm = (!device)
        .then(|| rma::shm_window(cx.mems, cx.shm_regions, lo, hi))
        .flatten();
    if let Some(m) = memh {
        s.memh = Some(Box::new((rma.iface, m)));
    }
    // Offer to write part of the data when both sides can then copy at once
    // (a memory lane that also writes, and a message worth sharing; host memory:
    // the receiver's segments come with its host lane's key).
    let help = !device
        && total >= cx.split_thresh
        && cx.info[rma.iface]
            .attr
            .flags
            .contains(IfaceFlags::PUT_ZCOPY);
    s.split_offered = help;
    let hdr = first_hdr(tag, rid, s.flags, id, total);
    let key = wire::RndvKeyRef {
        mkey: &mkey,
        shm,
        device,
    };
    let iface = &mut ifaces[lane.iface];
    if s.am.is_none() {
        // A tag RTS is written straight into the transport's buffer: no key or
        // message built first (two allocations per message with `cuda_ipc`'s key).
        let n = wire::rts_get_len(&key, &segs);
        let r = iface.am_bcopy(lane.ep, wire::AM_RTS, &mut |buf| {
            wire::write_rts_get(buf, &hdr, help, &key, &segs).unwrap_or(0)
        });
        match nb(r)? {
            None => return Ok(false),
            Some(m) if m != n => return Err(Status::MessageTruncated),
            Some(_) => {}
        }
    } else {
        let rkey = RndvKey {
            mkey: mkey.as_slice().into(),
            shm,
            device,
        }
        .encode();
        let msg = wire::encode_rts(&hdr, &RtsData::Get { rkey, segs, help });
        let (am_id, msg) = rts_for(&s.am, msg);
        if nb(send_bytes(iface.as_mut(), lane, am_id, &msg))?.is_none() {
            return Ok(false);
        }
    }
    s.started = true;
    s.offset = total;
    s.wait_ack = true;
    Ok(true)
}

/// A put rendezvous or the active-message pipeline: the RTS, then, once the receiver's RTR
/// came, the data messages (through pinned fragments for device data, `stage`).
pub(crate) fn pipeline(
    ifaces: &mut [OpenIface],
    cx: &mut SendCx<'_>,
    s: &mut SendOp,
    id: ReqId,
    rid: u32,
    lane: Lane,
) -> UcsResult<bool> {
    let seg = cx.info[lane.iface].attr.am.max_bcopy;
    let total = s.total;
    let tag = s.tag;
    let iface = &mut ifaces[lane.iface];
    if !s.started {
        let rts = if s.proto == Proto::RndvPut {
            RtsData::Put
        } else {
            RtsData::Am
        };
        let msg = wire::encode_rts(&first_hdr(tag, rid, s.flags, id, total), &rts);
        let (am_id, msg) = rts_for(&s.am, msg);
        if nb(send_bytes(iface.as_mut(), lane, am_id, &msg))?.is_none() {
            return Ok(false);
        }
        s.started = true;
        if stage::applies(&s.data) {
            // Device data goes through pinned fragments: the first copies run
            // while the RTS travels.
            stage::fill(&mut s.stage, &s.data, s.total, cx.stage_cfg)?;
        }
    }
    let Some(rreq) = s.rreq else {
        // The RTR (or RTR_PUT) puts the request back in the queue.
        return Ok(true);
    };
    if s.offset >= total {
        // Refused by the receiver (truncation): nothing to stream.
        s.stage = None;
        return Ok(true);
    }
    if s.stage.is_some() {
        return stage::send(
            iface.as_mut(),
            lane.ep,
            seg,
            rid,
            rreq,
            &mut s.stage,
            &s.data,
            s.total,
            &mut s.offset,
            cx.stage_cfg,
            &mut cx.stats.rndv_staged,
        );
    }
    // The AM pipeline (also a put rendezvous whose receiver has no addresses).
    send_frags(
        iface,
        lane.ep,
        (wire::AM_RNDV_DATA, wire::RNDV_DATA_HDR),
        rid,
        rreq,
        s,
        seg,
    )
}

/// The packed key of an RTS whose data spans `lo..hi`: the send's registration's (`mine`)
/// when it has one, else a new registration's (returned too, for the send to keep).
/// `None` when the lane is out of keys (an HCA whose keys its peers' caches may hold while
/// they wait for this very message): nothing is sent yet, and the caller sends the data
/// by the active-message pipeline, which needs none.
fn rts_mkey(
    md: &dyn uct::Md,
    mine: Option<&uct::MemH>,
    lo: u64,
    hi: u64,
) -> UcsResult<Option<(Vec<u8>, Option<uct::MemH>)>> {
    if let Some(m) = mine {
        return Ok(Some((md.mkey_pack(m), None)));
    }
    match buf::register_span(md, lo, (hi - lo) as usize) {
        Ok(m) => Ok(Some((md.mkey_pack(&m), Some(m)))),
        Err(Status::NoResource) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes send `s`'s bytes from its put target's offset on into the receiver's segments
/// (a put rendezvous, or the tail of a split one), and marks FIN to follow completion.
/// `Ok(true)`: written with stores into the receiver's mapped shared memory (its key
/// carried a window `mappings` could map), not through the memory lane.
/// `Err(NoResource)` with `s.put` given back: the lane ran out of resources part way;
/// call again to write the rest.
fn write_to_receiver(
    iface: &mut dyn Iface,
    ep: uct::EpId,
    s: &mut SendOp,
    id: ReqId,
    mappings: &mut MappingCache,
) -> UcsResult<bool> {
    let Some(put) = s.put.take() else {
        return Ok(false);
    };
    let key = RndvKey::decode(&put.rkey).ok_or(Status::InvalidParam)?;
    let n = s.total - put.offset;
    // Device data with a layout on either side: one kernel into the receiver's memory.
    #[cfg(feature = "cuda")]
    if let Some(r) = super::gpu::direct_put(iface, ep, s, &put, &key, id) {
        s.wait_comp += r?;
        s.offset = s.total;
        s.fin_pending = true;
        return Ok(false);
    }
    // A device layout read as packed bytes (`device_iov`) is packed first.
    s.data.prepare_device()?;
    let mapped = key
        .shm
        .and_then(|w| rma::map_window(mappings, &w).map(|m| (w, m)));
    if let Some((w, seg)) = &mapped {
        let remote;
        let (dst, dst_from) = match &put.layout {
            Some((origin, canon)) => (
                mapped::remote_canon(canon, *origin, w, seg)?,
                put.offset as u64,
            ),
            None => {
                remote = mapped::remote_segs(&put.segs, w, seg)?;
                (mapped::Side::Pieces(&remote), 0)
            }
        };
        let mut pieces = SmallVec::new();
        let src =
            mapped::local_side(&mut s.data, s.total, &mut pieces).ok_or(Status::InvalidParam)?;
        mapped::copy(src, put.offset as u64, dst, dst_from, n as u64)?;
    } else if put.layout.is_some() {
        // A receiver asks for a layout split only when its memory can be mapped here.
        return Err(Status::Unsupported);
    } else {
        let local = match s.data.device_iov(put.offset, n) {
            Some(v) => smallvec::smallvec![v],
            None => s.data.iovs(put.offset, n).ok_or(Status::InvalidParam)?,
        };
        let rk = iface.md().rkey_unpack(&key.mkey)?;
        let (mut later, mut posted) = (0, 0);
        let r = for_each_remote_seg(&local, &put.segs, |pieces, addr| {
            match buf::put_zcopy(iface, ep, pieces, addr, &rk, id.0)? {
                Done::Now => {}
                Done::Later => later += 1,
            }
            posted += 1;
            Ok(())
        });
        s.wait_comp += later;
        if r == Err(Status::NoResource) {
            // Out of resources (a registration, a send queue): what was posted stays
            // posted, and the rest is written on a later progress, from where it stopped.
            let mut put = put;
            let done: u64 = put.segs[..posted].iter().map(|g| g.len).sum();
            put.offset += done as usize;
            put.segs.drain(..posted);
            s.put = Some(put);
            return Err(Status::NoResource);
        }
        r?;
    }
    s.offset = s.total;
    s.fin_pending = true;
    Ok(mapped.is_some())
}

/// The first header of send `id`'s message (eager first fragment or RTS).
pub(crate) fn first_hdr(tag: u64, rid: u32, flags: u8, id: ReqId, total: usize) -> FirstHdr {
    FirstHdr {
        tag,
        ep: rid,
        flags,
        sreq: id.0,
        total: total as u64,
    }
}

/// The AM id and bytes of an RTS: a tag RTS, or an AM RTS with its prefix.
fn rts_for(am: &Option<Box<AmHdr>>, rts: Vec<u8>) -> (u8, Vec<u8>) {
    match am {
        Some(a) => (wire::AM_USER_RTS, rts_prefix(a, rts)),
        None => (wire::AM_RTS, rts),
    }
}

fn send_bytes(iface: &mut dyn Iface, lane: Lane, id: u8, b: &[u8]) -> UcsResult<usize> {
    iface
        .am_bcopy(lane.ep, id, &mut |buf| {
            if buf.len() < b.len() {
                return 0;
            }
            buf[..b.len()].copy_from_slice(b);
            b.len()
        })
        .and_then(|n| {
            if n == b.len() {
                Ok(n)
            } else {
                Err(Status::MessageTruncated)
            }
        })
}

/// Whether `d` is a device layout that travels packed (`RUCX_GPU_DT_METHOD=pack-unpack`):
/// its RTS describes its scratch buffer, not the layout.
pub(crate) fn packs_device_layout(d: &DataState) -> bool {
    #[cfg(feature = "cuda")]
    if let DataState::DeviceLayout(g) = d {
        use crate::dt::gpu::model::Method;
        return g.packed_rts || super::gpu::forced() == Some(Method::PackUnpack);
    }
    let _ = d;
    false
}

/// Sends send `s`'s bytes from `s.offset` to its end as fragments of AM `am_id` (`hdr_len`
/// bytes of [`FragHdr`]: the peer's endpoint `rid`, its request `req`, the offset), at most
/// `seg` bytes each: the multi-fragment eager protocol's middle fragments and the rendezvous
/// pipeline's data. `Ok(false)`: the transport ran out of resources; call again to go on.
#[inline]
pub(crate) fn send_frags(
    iface: &mut OpenIface,
    ep: EpId,
    (am_id, hdr_len): (u8, usize),
    rid: u32,
    req: u64,
    s: &mut SendOp,
    seg: usize,
) -> UcsResult<bool> {
    while s.offset < s.total {
        let hdr = FragHdr {
            ep: rid,
            req,
            offset: s.offset as u64,
        };
        let (data, off) = (&mut s.data, s.offset);
        let r = iface.am_bcopy(ep, am_id, &mut |buf| {
            hdr.write(&mut buf[..hdr_len]);
            hdr_len + data.pack(off, &mut buf[hdr_len..seg])
        });
        let Some(n) = nb(r)? else { return Ok(false) };
        s.offset += n - hdr_len;
    }
    Ok(true)
}

impl Core {
    pub(crate) fn on_rtr(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, rreq) = wire::decode_rtr(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s))
                if s.ep == ep
                    && matches!(s.proto, Proto::RndvAm | Proto::RndvPut)
                    && s.rreq.is_none() =>
            {
                s.rreq = Some(rreq);
            }
            // A get rendezvous whose receiver would rather have the bytes packed (the UMR
            // hybrid, `proto::umr`): the AM pipeline from the start, and no ACK.
            Some(Op::Send(s))
                if s.ep == ep
                    && s.proto == Proto::RndvGet
                    && s.started
                    && s.wait_ack
                    && s.rreq.is_none()
                    && s.put.is_none() =>
            {
                s.proto = Proto::RndvAm;
                s.wait_ack = false;
                s.offset = 0;
                s.rreq = Some(rreq);
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// Puts send `id` back in its endpoint's queue (once), to move on at the next
    /// progress (an RTR, RTR_PUT or RTR_SPLIT gave it what it waited for).
    fn requeue(&mut self, ep: usize, id: ReqId) {
        if let Some(Op::Send(s)) = self.reqs.get_mut(id).map(|r| &mut r.state) {
            if !s.queued {
                s.queued = true;
                self.eps[ep].queue.push_back(id);
            }
        }
        self.mark_ready(ep);
    }

    pub(crate) fn on_rtr_put(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, rreq, rkey, segs) =
            wire::decode_rtr_put(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s))
                if s.ep == ep
                    && (s.proto == Proto::RndvPut || pushes_device(s))
                    && s.rreq.is_none()
                    && segs.iter().map(|g| g.len).sum::<u64>() == s.total as u64 =>
            {
                // A device get rendezvous the receiver turned into a push: no ACK comes, a
                // FIN goes once the writes landed.
                s.wait_ack = false;
                s.rreq = Some(rreq);
                s.put = Some(PutTarget::segs(rkey, segs, 0));
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// The receiver of our layout rendezvous asks us to write its chunks by UMR. A list
    /// we were sent before is named by its id alone; an id we do not know (or a list for a
    /// send that is not a host layout get rendezvous) is a protocol violation.
    pub(crate) fn on_rtr_umr(&mut self, data: &[u8]) -> Res {
        let m = wire::RtrUmr::decode(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(m.ep)?;
        let keys =
            umr::learn_keys(self.eps.get_mut(ep), m.kid, m.keys).ok_or(Bad::Malformed(Some(ep)))?;
        let id = ReqId(m.sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s))
                if s.ep == ep
                    && s.proto == Proto::RndvGet
                    && s.wait_ack
                    && s.rreq.is_none()
                    && s.data.layout().is_some()
                    && (s.total as u64).div_ceil(m.chunk) == keys.len() as u64 =>
            {
                s.wait_ack = false;
                s.rreq = Some(m.rreq);
                s.put = Some(PutTarget::umr(m.chunk, keys));
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// The receiver of our split rendezvous reads the head and asks us to write the tail
    /// (from `offset`) into its segments; its ACK follows when its reads are done.
    pub(crate) fn on_rtr_split(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, rreq, offset, rkey, segs) =
            wire::decode_rtr_split(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s))
                if takes_split(s, ep, offset)
                    && segs.iter().map(|g| g.len).sum::<u64>() == s.total as u64 - offset =>
            {
                s.rreq = Some(rreq);
                s.put = Some(PutTarget::segs(rkey, segs, offset as usize));
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// As [`on_rtr_split`](Self::on_rtr_split), for a receiver that describes its data by
    /// its layout: the tail goes into that layout's packed bytes from `offset` on.
    pub(crate) fn on_rtr_split_layout(&mut self, data: &[u8]) -> Res {
        let m = wire::RtrSplitLayout::decode(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(m.ep)?;
        let id = ReqId(m.sreq);
        let canon = match m.hash {
            // Sent just before in LAYOUT_PART messages.
            Some(h) => self.cached_layout(ep, h).map(|d| d.canon().clone()),
            None => crate::dt::Canon::decode(&m.layout).ok(),
        }
        .filter(crate::dt::Canon::is_ordered)
        .ok_or(Bad::Malformed(Some(ep)))?;
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            // Offset 0: a receiver of device data asks us to move all of it into its
            // layout (`gpu`): no ACK comes, a FIN goes once the data landed.
            Some(Op::Send(s))
                if s.ep == ep
                    && m.offset == 0
                    && pushes_device(s)
                    && s.rreq.is_none()
                    && canon.size() == s.total as u64 =>
            {
                s.wait_ack = false;
                s.rreq = Some(m.rreq);
                s.put = Some(PutTarget::layout(m.rkey, m.origin, canon, 0));
            }
            Some(Op::Send(s)) if takes_split(s, ep, m.offset) && canon.size() >= s.total as u64 => {
                s.rreq = Some(m.rreq);
                s.put = Some(PutTarget::layout(
                    m.rkey,
                    m.origin,
                    canon,
                    m.offset as usize,
                ));
            }
            _ => return Err(Bad::Malformed(Some(ep))),
        }
        self.requeue(ep, id);
        Ok(())
    }

    /// The receiver of our layout rendezvous evicted the layout: send it again.
    pub(crate) fn on_layout_miss(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, rreq) = wire::decode_rtr(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let (hash, bytes) = match self.reqs.get(ReqId(sreq)).map(|r| &r.state) {
            Some(Op::Send(s)) if s.ep == ep && s.proto == Proto::RndvGet => match s.data.layout() {
                Some(l) => (l.dt.hash(), l.dt.encoded().to_vec()),
                None => return Err(Bad::Malformed(Some(ep))),
            },
            _ => return Err(Bad::Malformed(Some(ep))),
        };
        self.stats.layout_bytes_sent += bytes.len() as u64;
        self.queue_ctrl(ep, Ctrl::Layout { rreq, hash, bytes });
        Ok(())
    }

    pub(crate) fn on_ack(&mut self, data: &[u8]) -> Res {
        let (ep, sreq, status) = wire::decode_ack(data).ok_or(Bad::Malformed(None))?;
        let ep = self.live_ep(ep)?;
        let id = ReqId(sreq);
        match self.reqs.get_mut(id).map(|r| &mut r.state) {
            Some(Op::Send(s)) if s.ep == ep => {
                s.wait_ack = false;
                let status = Status::from_code(status).unwrap_or(Status::IoError);
                if matches!(s.proto, Proto::RndvAm | Proto::RndvPut) && s.rreq.is_none() {
                    // The receiver refused the data (truncation): nothing to stream.
                    s.rreq = Some(0);
                    s.offset = s.total;
                }
                let split = s.proto == Proto::RndvGet && s.rreq.is_some();
                if status != Status::Ok && split {
                    // The receiver's reads failed, but it waits for the FIN of the tail
                    // we write: finish that first, then complete with the failure.
                    s.ack_status = status;
                    self.finished.push(id);
                    self.work = true;
                } else if status != Status::Ok {
                    self.complete(id, status, None);
                } else {
                    self.finished.push(id);
                    self.work = true;
                }
                Ok(())
            }
            _ => Err(Bad::Malformed(Some(ep))),
        }
    }
}

/// Whether send `s` is a get rendezvous still waiting for its receiver, which may ask us
/// to write into its device memory instead of reading (`RTR_PUT` with a device key): on a
/// pair of processes, one side makes every device copy, so that one GPU never switches
/// between the two processes' contexts for each message; and host data bound for device
/// memory is written by its sender, who can read it (`rndv::start_get`). Data with
/// addresses only (contiguous, iov, device): a layout or generic datatype is never asked.
fn pushes_device(s: &SendOp) -> bool {
    use crate::datatype::DataState;
    s.proto == Proto::RndvGet
        && s.wait_ack
        && matches!(
            s.data,
            DataState::Device(_) | DataState::Contig(_) | DataState::Iov(_)
        )
        || device_layout(s)
}

/// Whether send `s` is a get rendezvous of a layout over device memory, whose receiver
/// may ask us to move it (`gpu`).
fn device_layout(s: &SendOp) -> bool {
    #[cfg(feature = "cuda")]
    if s.proto == Proto::RndvGet && s.wait_ack {
        return matches!(s.data, crate::datatype::DataState::DeviceLayout(_));
    }
    let _ = s;
    false
}

/// Whether send `s` to endpoint `ep` may take a split request cutting at `offset`: a get
/// rendezvous that offered help, still waiting for its ACK, not split yet, and a cut
/// inside the message.
fn takes_split(s: &SendOp, ep: usize, offset: u64) -> bool {
    s.ep == ep
        && s.proto == Proto::RndvGet
        && s.split_offered
        && s.wait_ack
        && s.rreq.is_none()
        && offset > 0
        && offset < s.total as u64
}
