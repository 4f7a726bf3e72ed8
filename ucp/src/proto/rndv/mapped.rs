//! Rendezvous copies through a mapping of a same-host peer's shared memory.
//!
//! When a rendezvous key carries a window (the peer's data lies in memory its worker
//! allocated, see `proto::wire::RndvKey`) and this worker can map it, the bytes move with
//! plain loads and stores instead of a memory lane (cma). Each side of such a copy says where
//! consecutive packed bytes live in this process ([`Side`]): a canonical layout placed at
//! an address, or explicit pieces. [`copy`] pairs the two sides over a packed range: with a
//! strided loop when both are vectors (or dense) of one block size, which is what regular
//! iov lists and `MPI_Type_vector` become, and segment by segment otherwise.
//!
//! Addresses of the peer's side are translated into the mapping and checked against the
//! window by the caller ([`remote_canon`], [`remote_segs`]) before anything is copied.

use smallvec::SmallVec;
use ucs::shm::Segment;
use ucs::{Status, UcsResult};
use uct::Iov;

use crate::buf;
use crate::datatype::DataState;
use crate::dt::{Canon, Cursor, Node};
use crate::proto::wire::ShmWindow;

/// Where consecutive packed bytes of one side of a copy live, as addresses of this process.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Side<'a> {
    /// A canonical layout whose offset 0 is at address `base`.
    Canon { canon: &'a Canon, base: u64 },
    /// Explicit pieces, in order.
    Pieces(&'a [Iov]),
}

/// A side that is `count` blocks of `blen` bytes, block `i` at `first + i * stride` (a dense
/// side is one block).
#[derive(Clone, Copy, Debug)]
struct Shape {
    first: u64,
    count: u64,
    stride: i64,
    blen: u64,
}

impl Side<'_> {
    fn shape(&self) -> Option<Shape> {
        match *self {
            Side::Pieces([p]) => Some(Shape {
                first: p.buffer as u64,
                count: 1,
                stride: 0,
                blen: p.length as u64,
            }),
            Side::Pieces(_) => None,
            Side::Canon { canon, base } => {
                let first = base.wrapping_add(canon.offset() as u64);
                match canon.root() {
                    Node::Dense { len } => Some(Shape {
                        first,
                        count: 1,
                        stride: 0,
                        blen: *len,
                    }),
                    Node::Stream {
                        count,
                        stride,
                        child,
                    } => match **child {
                        Node::Dense { len } => Some(Shape {
                            first,
                            count: *count,
                            stride: *stride,
                            blen: len,
                        }),
                        _ => None,
                    },
                    Node::Blocks(_) => None,
                }
            }
        }
    }

    /// The side's pieces from packed byte `from` on, as `(address, length)`.
    fn pieces(&self, from: u64) -> UcsResult<Pieces<'_>> {
        Ok(match *self {
            Side::Canon { canon, base } => Pieces::Canon {
                cur: Cursor::new(canon, from).map_err(|_| Status::InvalidParam)?,
                base,
            },
            Side::Pieces(list) => {
                let mut skip = from;
                let mut i = 0;
                while i < list.len() && skip >= list[i].length as u64 {
                    skip -= list[i].length as u64;
                    i += 1;
                }
                Pieces::List { list, i, skip }
            }
        })
    }
}

/// Blocks of `blk` bytes of a shaped side, from block `first_block` on: `(address of that
/// block, stride)`. A dense side is cut into blocks of `blk`.
fn blocks(s: Shape, blk: u64, first_block: u64) -> (u64, i64) {
    if s.count == 1 {
        (s.first.wrapping_add(first_block * blk), blk as i64)
    } else {
        let at = s
            .first
            .wrapping_add((first_block as i64).wrapping_mul(s.stride) as u64);
        (at, s.stride)
    }
}

enum Pieces<'a> {
    Canon {
        cur: Cursor<'a>,
        base: u64,
    },
    List {
        list: &'a [Iov],
        i: usize,
        skip: u64,
    },
}

impl Iterator for Pieces<'_> {
    type Item = (u64, u64);

    fn next(&mut self) -> Option<(u64, u64)> {
        match self {
            Pieces::Canon { cur, base } => cur
                .next()
                .map(|g| (base.wrapping_add(g.offset as u64), g.len)),
            Pieces::List { list, i, skip } => loop {
                let p = list.get(*i)?;
                *i += 1;
                let off = std::mem::take(skip);
                if (p.length as u64) > off {
                    return Some((p.buffer as u64 + off, p.length as u64 - off));
                }
            },
        }
    }
}

/// Copies `n` packed bytes: from `src`'s packed byte `src_from` on to `dst`'s packed byte
/// `dst_from` on. `InvalidParam` when either side ends first. Every address either side
/// yields must be valid for the copy (see [`buf::copy_raw`]): the caller built the peer's
/// side from a checked window.
pub(crate) fn copy(src: Side, src_from: u64, dst: Side, dst_from: u64, n: u64) -> UcsResult<()> {
    if n == 0 {
        return Ok(());
    }
    if let (Some(a), Some(b)) = (src.shape(), dst.shape()) {
        // One block size both sides can be cut into: a vector's block, or the whole range
        // when both are dense.
        let blk = match (a.count == 1, b.count == 1) {
            (true, true) => Some(n),
            (true, false) => Some(b.blen),
            (false, true) => Some(a.blen),
            (false, false) => (a.blen == b.blen).then_some(a.blen),
        };
        let aligned = |k: u64| {
            k > 0 && src_from.is_multiple_of(k) && dst_from.is_multiple_of(k) && n.is_multiple_of(k)
        };
        if let Some(blk) = blk.filter(|&k| aligned(k)) {
            let count = n / blk;
            let fits = |s: Shape, from: u64| {
                if s.count == 1 {
                    from.checked_add(n).is_some_and(|end| end <= s.blen)
                } else {
                    from / blk + count <= s.count
                }
            };
            if !fits(a, src_from) || !fits(b, dst_from) {
                return Err(Status::InvalidParam);
            }
            let (sa, ss) = blocks(a, blk, src_from / blk);
            let (da, ds) = blocks(b, blk, dst_from / blk);
            buf::copy_strided(sa, ss, da, ds, blk as usize, count);
            return Ok(());
        }
    }
    let mut s = src.pieces(src_from)?;
    let mut d = dst.pieces(dst_from)?;
    let (mut sa, mut sl, mut da, mut dl) = (0u64, 0u64, 0u64, 0u64);
    let mut left = n;
    while left > 0 {
        if sl == 0 {
            (sa, sl) = s.next().ok_or(Status::InvalidParam)?;
        }
        if dl == 0 {
            (da, dl) = d.next().ok_or(Status::InvalidParam)?;
        }
        let k = sl.min(dl).min(left);
        buf::copy_raw(sa, da, k as usize);
        sa += k;
        da += k;
        sl -= k;
        dl -= k;
        left -= k;
    }
    Ok(())
}

/// The peer's segments `segs` as a side in `seg`, this process's mapping of window `w`;
/// `InvalidParam` when any of them lies outside the window.
pub(crate) fn remote_segs(
    segs: &[crate::proto::wire::RemoteSeg],
    w: &ShmWindow,
    seg: &Segment,
) -> UcsResult<Vec<Iov>> {
    if w.len > seg.len() as u64 {
        return Err(Status::InvalidParam);
    }
    segs.iter()
        .map(|g| {
            if !w.holds(g.addr, g.len) {
                return Err(Status::InvalidParam);
            }
            let at = (seg.base() as u64) + (g.addr - w.base);
            Ok(Iov {
                buffer: at as *mut u8,
                length: g.len as usize,
            })
        })
        .collect()
}

/// The peer's layout `canon`, placed at `origin` in the peer, as a side in `seg` (this
/// process's mapping of window `w`); `InvalidParam` when any of its bytes lies outside the
/// window.
pub(crate) fn remote_canon<'a>(
    canon: &'a Canon,
    origin: u64,
    w: &ShmWindow,
    seg: &Segment,
) -> UcsResult<Side<'a>> {
    let (lo, hi) = canon.bounds();
    let start = i128::from(origin) + i128::from(lo);
    let len = i128::from(hi) - i128::from(lo);
    let ok = canon.size() == 0
        || (start >= 0
            && len >= 0
            && u64::try_from(start).is_ok_and(|s| w.holds(s, len as u64))
            && w.len <= seg.len() as u64);
    if !ok {
        return Err(Status::InvalidParam);
    }
    // The mapping's address of the peer's `origin` (which itself may lie outside the
    // window when the layout's first byte is after it).
    let base = (seg.base() as u64)
        .wrapping_add(origin)
        .wrapping_sub(w.base);
    Ok(Side::Canon { canon, base })
}

/// The local side of an operation's data: its layout, or its pieces (written into
/// `pieces`); `None` for generic data (a bounce buffer stands in for it).
pub(crate) fn local_side<'a>(
    d: &'a mut DataState,
    total: usize,
    pieces: &'a mut SmallVec<[Iov; 8]>,
) -> Option<Side<'a>> {
    if let DataState::Layout(l) = d {
        return Some(Side::Canon {
            canon: &l.local,
            base: l.span.addr(),
        });
    }
    *pieces = d.iovs(0, total)?;
    Some(Side::Pieces(pieces))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dt::Layout;

    fn iov(v: &mut [u8]) -> Iov {
        Iov::from_mut_slice(v)
    }

    /// Copies between every pairing of a vector, a dense buffer and an irregular list;
    /// checks against the packed bytes.
    #[test]
    fn copies_between_vectors_dense_and_pieces() {
        let n = 64u64 * 32;
        // Source: a vector of 32 blocks of 64 bytes, stride 100, over a 3200-byte buffer.
        let mut src = vec![0u8; 3200];
        for (i, b) in src.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let packed: Vec<u8> = (0..32)
            .flat_map(|k| src[k * 100..k * 100 + 64].to_vec())
            .collect();
        let vec64 = Layout::hvector(32, 1, 100, &Layout::bytes(64)).unwrap();
        let c64 = vec64.canonical().unwrap().clone();
        let s = Side::Canon {
            canon: &c64,
            base: src.as_ptr() as u64,
        };
        // Into a vector of 64-byte blocks, stride 70: the strided loop.
        let mut d1 = vec![0u8; 70 * 32];
        let c70 = Layout::hvector(32, 1, 70, &Layout::bytes(64))
            .unwrap()
            .canonical()
            .unwrap()
            .clone();
        let dst = Side::Canon {
            canon: &c70,
            base: d1.as_mut_ptr() as u64,
        };
        copy(s, 0, dst, 0, 1024).unwrap();
        copy(s, 1024, dst, 1024, n - 1024).unwrap();
        let got: Vec<u8> = (0..32)
            .flat_map(|k| d1[k * 70..k * 70 + 64].to_vec())
            .collect();
        assert_eq!(got, packed);
        // Into a dense buffer, in one go and in an unaligned range (segment by segment).
        let mut d2 = vec![0u8; n as usize];
        let p = [iov(&mut d2)];
        copy(s, 0, Side::Pieces(&p), 0, n).unwrap();
        assert_eq!(d2, packed);
        let mut d3 = vec![0u8; n as usize];
        let p = [iov(&mut d3)];
        copy(s, 10, Side::Pieces(&p), 10, 1000).unwrap();
        assert_eq!(d3[10..1010], packed[10..1010]);
        assert!(d3[..10].iter().chain(&d3[1010..]).all(|&x| x == 0));
        // Into irregular pieces (32-byte blocks: no common shape).
        let mut d4 = vec![0u8; n as usize];
        let (x, y) = d4.split_at_mut(333);
        let p = [iov(x), iov(y)];
        copy(s, 0, Side::Pieces(&p), 0, n).unwrap();
        assert_eq!(d4, packed);
        // From dense pieces back into the vector.
        let mut back = vec![0u8; 3200];
        let c = Side::Canon {
            canon: &c64,
            base: back.as_mut_ptr() as u64,
        };
        let mut d2c = d2.clone();
        let p = [iov(&mut d2c)];
        copy(Side::Pieces(&p), 0, c, 0, n).unwrap();
        for k in 0..32 {
            assert_eq!(back[k * 100..k * 100 + 64], src[k * 100..k * 100 + 64]);
            assert!(back[k * 100 + 64..(k * 100 + 100).min(3200)]
                .iter()
                .all(|&x| x == 0));
        }
        // A range past either side's end is refused before anything is copied... or
        // while copying (segment by segment), never past the end.
        let mut short = vec![0u8; 100];
        let p = [iov(&mut short)];
        assert_eq!(
            copy(s, 0, Side::Pieces(&p), 0, n),
            Err(Status::InvalidParam)
        );
        assert_eq!(copy(s, 64, dst, 64, n), Err(Status::InvalidParam));
        // Different offsets on the two sides: the second half of the source into the
        // first half of a dense buffer.
        let mut d5 = vec![0u8; n as usize / 2];
        let p = [iov(&mut d5)];
        copy(s, n / 2, Side::Pieces(&p), 0, n / 2).unwrap();
        assert_eq!(d5[..], packed[n as usize / 2..]);
    }
}
