//! Local iov lists paired with a peer's segments, and the keys that expose them: what both
//! sides of a rendezvous (and the device path) build their transfers from.

use smallvec::SmallVec;
use ucs::{Status, UcsResult};
use uct::{Done, Iface, Iov};

use crate::buf;
use crate::proto::wire::{self, RemoteSeg, RndvKey, ShmWindow};

/// The non-empty regions of `iov`, as a peer addresses them.
pub(crate) fn remote_segs(iov: &[Iov]) -> wire::Segs {
    iov.iter()
        .filter(|v| v.length > 0)
        .map(|v| RemoteSeg {
            addr: v.buffer as u64,
            len: v.length as u64,
        })
        .collect()
}

/// The lowest and one-past-highest address of `segs` (`None` when there are none): the
/// span one registration covers.
pub(crate) fn span_of(segs: &[RemoteSeg]) -> Option<(u64, u64)> {
    let lo = segs.iter().map(|v| v.addr).min()?;
    let hi = segs.iter().map(|v| v.addr + v.len).max()?;
    Some((lo, hi))
}

/// The first `n` bytes of a remote segment list.
pub(crate) fn head_of(segs: &[RemoteSeg], n: usize) -> wire::Segs {
    let mut left = n as u64;
    let mut out = wire::Segs::with_capacity(segs.len());
    for g in segs {
        if left == 0 {
            break;
        }
        let len = g.len.min(left);
        out.push(RemoteSeg { addr: g.addr, len });
        left -= len;
    }
    out
}

/// Registers `len` bytes at `addr` with `md` for a peer's access, and encodes the
/// rendezvous key a receiver's RTR carries for it (`shm`: a window of our shared memory
/// the peer may map instead; `device`: the memory is CUDA device memory).
pub(crate) fn register_key(
    md: &dyn uct::Md,
    addr: u64,
    len: usize,
    shm: Option<ShmWindow>,
    device: bool,
) -> ucs::UcsResult<(uct::MemH, wire::KeyBytes)> {
    let m = buf::register_span(md, addr, len)?;
    let rkey = RndvKey {
        mkey: md.mkey_pack(&m).into(),
        shm,
        device,
    }
    .encode();
    Ok((m, rkey))
}

/// Reads the sender's structured layout `dt` at `origin` into `local`, in chunks of
/// remote segments generated lazily from the canonical form: each chunk is one remote
/// gather (`get_zcopy_iov`), or one read per segment where the transport cannot gather.
/// Returns how many reads complete later (through `comp`).
pub(crate) fn get_layout(
    iface: &mut dyn Iface,
    ep: uct::EpId,
    local: &[Iov],
    dt: &crate::datatype::DtLayout,
    origin: u64,
    rk: &uct::RemoteKey,
    comp: u64,
) -> UcsResult<u32> {
    const CHUNK: usize = 4096;
    let mut later = 0u32;
    let mut cur = crate::dt::Cursor::new(dt.canon(), 0).map_err(|_| Status::InvalidParam)?;
    let mut segs = Vec::with_capacity(CHUNK);
    let mut remote: Vec<(u64, u64)> = Vec::with_capacity(CHUNK);
    let mut cut = IovCutter::default();
    let mut pieces: Vec<Iov> = Vec::new();
    let mut gather = true;
    loop {
        let n = cur.fill(&mut segs, CHUNK, u64::MAX);
        if n == 0 {
            return Ok(later);
        }
        remote.clear();
        for g in &segs {
            let a = origin.wrapping_add(g.offset as u64);
            remote.push((a, g.len));
        }
        // The local pieces for these `n` bytes.
        pieces.clear();
        cut.take(local, n as usize, &mut pieces)?;
        if gather {
            match buf::get_zcopy_iov(iface, ep, &pieces, &remote, rk, comp) {
                Ok(Done::Now) => continue,
                Ok(Done::Later) => {
                    later += 1;
                    continue;
                }
                Err(Status::Unsupported) => gather = false,
                Err(e) => return Err(e),
            }
        }
        let segs_r: Vec<RemoteSeg> = remote
            .iter()
            .map(|&(addr, len)| RemoteSeg { addr, len })
            .collect();
        for_each_remote_seg(&pieces, &segs_r, |p, addr| {
            if buf::get_zcopy(iface, ep, p, addr, rk, comp)? == Done::Later {
                later += 1;
            }
            Ok(())
        })?;
    }
}

/// Calls `f(local_pieces, remote_addr)` once per remote segment, with the local iov pieces
/// that cover it (the two lists describe the same number of bytes, cut differently).
pub(crate) fn for_each_remote_seg(
    local: &[Iov],
    segs: &[RemoteSeg],
    mut f: impl FnMut(&[Iov], u64) -> UcsResult<()>,
) -> UcsResult<()> {
    let mut cut = IovCutter::default();
    let mut pieces: SmallVec<[Iov; 8]> = SmallVec::new();
    for seg in segs {
        pieces.clear();
        cut.take(local, seg.len as usize, &mut pieces)?;
        f(&pieces, seg.addr)?;
    }
    Ok(())
}

/// Walks a local iov list, cutting off the pieces that cover the next bytes asked for
/// (to pair them with remote segments cut differently).
#[derive(Default)]
pub(crate) struct IovCutter {
    /// The current entry, and the offset into it.
    li: usize,
    loff: usize,
}

impl IovCutter {
    /// Appends to `out` the pieces of `local` covering the next `n` bytes;
    /// `MessageTruncated` if the list ends first.
    pub(crate) fn take(
        &mut self,
        local: &[Iov],
        n: usize,
        out: &mut impl Extend<Iov>,
    ) -> UcsResult<()> {
        let mut need = n;
        while need > 0 && self.li < local.len() {
            let l = local[self.li];
            let take = (l.length - self.loff).min(need);
            out.extend(std::iter::once(Iov {
                buffer: l.buffer.wrapping_add(self.loff),
                length: take,
            }));
            need -= take;
            self.loff += take;
            if self.loff == l.length {
                self.li += 1;
                self.loff = 0;
            }
        }
        if need > 0 {
            Err(Status::MessageTruncated)
        } else {
            Ok(())
        }
    }
}
