//! The staged rendezvous pipeline: contiguous device data that no lane of the peer's can
//! reach (a peer over tcp, or one whose `cuda_ipc` is excluded) travels through pinned host
//! fragments of `UCX_RNDV_FRAG_SIZE` bytes (smaller for a message of fewer than
//! `UCX_RNDV_PIPELINE_DEPTH` of them, [`StageCfg::frag_for`]), as rendezvous data messages
//! of the active-message pipeline.
//!
//! - The sender copies fragments out of the device asynchronously
//!   (`ucs::memtype::copy_async`: a stream and an event of the driver's), up to
//!   `UCX_RNDV_PIPELINE_DEPTH` at once, starting with the RTS so that the first ones have
//!   landed by the time the receiver's RTR comes. Each fragment is sent, in order, once it
//!   has landed, while the next ones are being copied.
//! - The receiver gathers the data messages of each fragment in a pinned buffer and copies
//!   the fragment into the device as soon as it is whole, while the next ones arrive. The
//!   receive completes when the last copy has landed (`rndv::finish_staged_recv`).
//!
//! A copy engine works from pinned memory at the bus's speed, and a driver copy from or
//! into pageable memory (an eager message's, one at a time) at a fraction of it. A fragment whose copy is in flight keeps its buffer until the copy is done, or
//! until it is dropped, which waits for the copy (`ucs::memtype::PendingCopy`): a send or
//! receive that fails part way frees nothing the copy engine still touches.
//!
//! Without a driver (the CPU tests' stand-in for one) the copies are whatever the
//! detector's source makes of them: synchronous by default, so the pipeline degenerates to
//! one fragment at a time, with the same messages on the wire.

use std::collections::VecDeque;

use ucs::{Status, UcsResult};
use uct::{EpId, Iface};

use crate::buf::{Buf, Staged};
use crate::datatype::DataState;
use crate::proto::wire::{self, FragHdr};

/// One fragment of a staged transfer: its pinned bytes (and their copy, while in flight).
#[derive(Debug)]
struct Frag {
    bytes: Staged,
    /// The message offset of its first byte.
    off: usize,
    /// Sender: its bytes sent so far; receiver: its bytes arrived so far.
    moved: usize,
}

/// The fragment size and depth of a worker's pipeline (`UCX_RNDV_FRAG_SIZE`,
/// `UCX_RNDV_PIPELINE_DEPTH`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StageCfg {
    pub(crate) frag: usize,
    pub(crate) depth: usize,
}

/// The smallest fragment a message is cut into below `depth` full fragments.
const MIN_FRAG: usize = 64 << 10;

impl StageCfg {
    /// The fragment size for a message of `total` bytes: the configured one, or, for a
    /// message smaller than `depth` of those, the message cut in `depth` (not below
    /// 64 KiB), so that the first copy out of the device and the last one into it, which
    /// nothing overlaps, are short. Each side cuts its own fragments: the receiver gathers
    /// by its size whatever the sender's messages are.
    pub(crate) fn frag_for(&self, total: usize) -> usize {
        total
            .div_ceil(self.depth.max(1))
            .clamp(MIN_FRAG.min(self.frag), self.frag)
    }
}

/// Whether a transfer of `data` is staged: contiguous device memory, which the host cannot
/// touch.
pub(crate) fn applies(data: &DataState) -> bool {
    matches!(data, DataState::Device(_))
}

/// The sender's side: fragments copied out of the device or being sent, in order.
#[derive(Debug, Default)]
pub(crate) struct SendStage {
    /// The message offset of the next fragment to copy out of the device.
    next: usize,
    frags: VecDeque<Frag>,
}

/// Starts copying fragments of a send of `total` bytes of `data` (its stage `stage`) out of
/// the device until `depth` are in flight or waiting to be sent.
pub(crate) fn fill(
    stage: &mut Option<Box<SendStage>>,
    data: &DataState,
    total: usize,
    cfg: StageCfg,
) -> UcsResult<()> {
    let DataState::Device(b) = data else {
        return Err(Status::InvalidParam);
    };
    let total = total.min(b.len());
    let frag = cfg.frag_for(total);
    let st = stage.get_or_insert_with(Box::default);
    while st.frags.len() < cfg.depth && st.next < total {
        let len = frag.min(total - st.next);
        let mut bytes = Staged::new(len);
        bytes.load(b, st.next)?;
        st.frags.push_back(Frag {
            bytes,
            off: st.next,
            moved: 0,
        });
        st.next += len;
    }
    Ok(())
}

/// Sends what has landed of a staged send (its stage `stage`, its `total` bytes of `data`,
/// `offset` of them sent) to the receiver's request `rreq`, as rendezvous data messages of
/// at most `seg` bytes over `iface`/`ep`, refilling the pipeline as fragments go.
/// `Ok(true)`: all sent; `Ok(false)`: waiting for a copy or for the transport (the caller
/// tries again on the next progress).
#[allow(clippy::too_many_arguments)]
pub(crate) fn send(
    iface: &mut dyn Iface,
    ep: EpId,
    seg: usize,
    rid: u32,
    rreq: u64,
    stage: &mut Option<Box<SendStage>>,
    data: &DataState,
    total: usize,
    offset: &mut usize,
    cfg: StageCfg,
    frags_sent: &mut u64,
) -> UcsResult<bool> {
    loop {
        fill(stage, data, total, cfg)?;
        let Some(st) = stage.as_mut() else {
            return Ok(*offset >= total);
        };
        let Some(f) = st.frags.front_mut() else {
            return Ok(true);
        };
        if !f.bytes.landed()? {
            return Ok(false);
        }
        let bytes = f.bytes.bytes().ok_or(Status::Busy)?;
        while f.moved < bytes.len() {
            let hdr = FragHdr {
                ep: rid,
                req: rreq,
                offset: (f.off + f.moved) as u64,
            };
            let src = &bytes[f.moved..];
            let r = iface.am_bcopy(ep, wire::AM_RNDV_DATA, &mut |buf| {
                let h = wire::RNDV_DATA_HDR;
                hdr.write(&mut buf[..h]);
                let n = src.len().min(seg - h);
                buf[h..h + n].copy_from_slice(&src[..n]);
                h + n
            });
            match r {
                Ok(n) => {
                    let n = n - wire::RNDV_DATA_HDR;
                    f.moved += n;
                    *offset += n;
                }
                Err(Status::NoResource) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        st.frags.pop_front();
        *frags_sent += 1;
    }
}

/// The receiver's side: fragments being gathered or copied into the device, in any order.
#[derive(Debug, Default)]
pub(crate) struct RecvStage {
    frags: Vec<Frag>,
}

impl RecvStage {
    /// Whether every fragment begun has been copied into the device.
    pub(crate) fn is_idle(&self) -> bool {
        self.frags.is_empty()
    }
}

/// Takes `payload`, at message offset `off` of a staged receive of `total` bytes into the
/// device buffer `dst`: into the pinned buffer of its fragment, and each fragment that is
/// now whole starts its copy into the device. Returns the fragments started.
pub(crate) fn absorb(
    st: &mut RecvStage,
    cfg: StageCfg,
    dst: &Buf,
    total: usize,
    mut off: usize,
    mut payload: &[u8],
) -> UcsResult<u64> {
    let mut started = 0;
    let frag = cfg.frag_for(total);
    while !payload.is_empty() {
        let start = off / frag * frag;
        let len = frag.min(total.saturating_sub(start));
        let at = off - start;
        if at >= len {
            return Err(Status::MessageTruncated);
        }
        let i = match st
            .frags
            .iter()
            .position(|f| f.off == start && !f.bytes.in_flight())
        {
            Some(i) => i,
            None => {
                st.frags.push(Frag {
                    bytes: Staged::new(len),
                    off: start,
                    moved: 0,
                });
                st.frags.len() - 1
            }
        };
        let f = &mut st.frags[i];
        let n = payload.len().min(len - at);
        let into = f.bytes.bytes_mut().ok_or(Status::Busy)?;
        into[at..at + n].copy_from_slice(&payload[..n]);
        f.moved += n;
        payload = &payload[n..];
        off += n;
        if f.moved == len {
            let r = f.bytes.store(dst, start);
            if r.is_err() || !f.bytes.in_flight() {
                st.frags.swap_remove(i);
            }
            r?;
            started += 1;
        }
    }
    Ok(started)
}

/// Once all of a receive's data has arrived: drops the fragments whose copy into the device
/// has landed, and any left part-filled by an error; returns whether the stage is idle now.
/// A failed copy is an error (its fragment is dropped too).
pub(crate) fn poll(st: &mut RecvStage) -> UcsResult<bool> {
    let mut err = None;
    st.frags.retain_mut(|f| match f.bytes.landed() {
        Ok(done) => !done,
        Err(e) => {
            err = Some(e);
            false
        }
    });
    match err {
        Some(e) => Err(e),
        None => Ok(st.is_idle()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_of_fewer_than_depth_fragments_is_cut_in_depth() {
        let cfg = StageCfg {
            frag: 512 << 10,
            depth: 4,
        };
        assert_eq!(cfg.frag_for(64 << 20), 512 << 10);
        assert_eq!(cfg.frag_for(2 << 20), 512 << 10);
        assert_eq!(cfg.frag_for(1 << 20), 256 << 10);
        assert_eq!(cfg.frag_for(100_000), 64 << 10, "not below 64 KiB");
        let small = StageCfg {
            frag: 4096,
            depth: 4,
        };
        assert_eq!(
            small.frag_for(1 << 20),
            4096,
            "never above the configured size"
        );
    }
}
