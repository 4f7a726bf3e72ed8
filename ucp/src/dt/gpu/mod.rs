//! Layouts on the GPU: what a kernel needs to know about a canonical form, the CUDA C
//! source generated from it, and the measured model that picks how a transfer goes.
//!
//! Everything in this module but [`launch`] (kernel compilation, caches and launches) and
//! `stage` (a device layout's scratch buffer) is pure, tested on CI without a GPU:
//!
//! * [`Shape`]: a canonical form that is a nest of at most [`MAX_LEVELS`] streams over one
//!   dense block (contiguous, vector, hvector, subarray, and iov lists shaped like them).
//!   A copy between two shapes (pack: layout → dense, unpack: dense → layout, direct:
//!   layout → layout) is one kernel with every count and stride baked in as a constant,
//!   compiled by NVRTC at run time and cached by the pair's hash ([`kernel::strided`]).
//! * [`Plan`]: every other pair of layouts meets as an explicit list of `(src, dst, len)`
//!   pieces (the two segment lists cut against each other), walked by one generic kernel
//!   compiled once per device ([`kernel::PLAN_SOURCE`]), a warp per piece.
//! * [`word_width`]: each thread moves 1, 2, 4, 8 or 16-byte words, the widest that every
//!   offset, stride, block length and base address allows (TEMPI and MVAPICH do the same).
//! * [`model`]: the cost of each method, calibrated per GPU and peer relation, and the pick.

pub mod kernel;
#[cfg(feature = "cuda")]
pub mod launch;
pub mod model;
#[cfg(feature = "cuda")]
pub mod stage;

use smallvec::SmallVec;

use super::{Canon, Node, Segment};

/// Deepest nest of streams a specialized kernel is generated for (1-, 2- and 3-level
/// strided layouts); deeper ones go by a [`Plan`].
pub const MAX_LEVELS: usize = 3;

/// Most pieces a [`Plan`] may hold (24 bytes each in device memory).
pub const MAX_PLAN_PIECES: usize = 1 << 20;

/// A nest of streams over one dense block: block `(i_0, …, i_k)` (innermost index first)
/// starts at `offset + Σ i_j * stride_j`, and blocks are packed in that index order with
/// the innermost index fastest.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    /// Offset of the first byte from the buffer origin.
    pub offset: i64,
    /// Bytes of each dense block.
    pub block: u64,
    /// `(count, stride)` per level, innermost first.
    pub levels: SmallVec<[(u64, i64); MAX_LEVELS]>,
}

impl Shape {
    /// The shape of `c`, when it is one (dense, or streams nested at most
    /// [`MAX_LEVELS`] deep over a dense block).
    pub fn of(c: &Canon) -> Option<Shape> {
        if c.size() == 0 || !c.is_ordered() {
            return None;
        }
        let mut levels = SmallVec::new();
        let mut n = c.root();
        loop {
            match n {
                Node::Dense { len } => {
                    levels.reverse();
                    return Some(Shape {
                        offset: c.offset(),
                        block: *len,
                        levels,
                    });
                }
                Node::Stream {
                    count,
                    stride,
                    child,
                } => {
                    if levels.len() == MAX_LEVELS {
                        return None;
                    }
                    levels.push((*count, *stride));
                    n = child;
                }
                Node::Blocks(_) => return None,
            }
        }
    }

    /// Contiguous bytes at offset 0.
    pub fn dense(len: u64) -> Shape {
        Shape {
            offset: 0,
            block: len,
            levels: SmallVec::new(),
        }
    }

    /// Bytes of data.
    pub fn size(&self) -> u64 {
        self.levels.iter().fold(self.block, |a, (c, _)| a * c)
    }

    /// Number of dense blocks.
    pub fn blocks(&self) -> u64 {
        self.levels.iter().map(|(c, _)| c).product()
    }

    /// The numbers every word must divide: the block length and the strides (the offset
    /// is added to a base address, which [`word_width`] takes separately).
    fn alignment_terms(&self) -> impl Iterator<Item = u64> + '_ {
        std::iter::once(self.block)
            .chain(self.levels.iter().map(|(_, s)| s.unsigned_abs()))
            .chain(std::iter::once(self.offset.unsigned_abs()))
    }
}

/// The widest word (16, 8, 4, 2 or 1 bytes) that divides every one of `terms` (zeros
/// divide by anything).
pub fn word_width(terms: impl IntoIterator<Item = u64>) -> u32 {
    let bits = terms.into_iter().fold(16u64, |a, t| a | t);
    1 << bits.trailing_zeros().min(4)
}

/// The word for a copy from `src` placed at address `src_base` to `dst` at `dst_base`.
pub fn pair_word(src: &Shape, src_base: u64, dst: &Shape, dst_base: u64) -> u32 {
    word_width(
        src.alignment_terms()
            .chain(dst.alignment_terms())
            .chain([src_base, dst_base]),
    )
}

/// One piece of a [`Plan`]: `len` bytes from `src` (offset from the source origin) to
/// `dst` (from the destination origin). Laid out as the generic kernel reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Piece {
    pub src: i64,
    pub dst: i64,
    pub len: u64,
}

/// Two layouts of the same size cut against each other: the pieces a generic kernel
/// copies, in packing order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub pieces: Vec<Piece>,
    pub bytes: u64,
}

impl Plan {
    /// The plan moving `src`'s packed bytes into `dst`'s; `None` when the sizes differ or
    /// either has more than [`MAX_PLAN_PIECES`] segments.
    pub fn new(src: &Canon, dst: &Canon) -> Option<Plan> {
        if src.size() != dst.size() {
            return None;
        }
        let s = src.segments(MAX_PLAN_PIECES).ok()?;
        let d = dst.segments(MAX_PLAN_PIECES).ok()?;
        let pieces = cut(&s, &d)?;
        Some(Plan {
            pieces,
            bytes: src.size(),
        })
    }

    /// As [`Plan::new`], from explicit segment lists (an iov list, say).
    pub fn from_segments(src: &[Segment], dst: &[Segment]) -> Option<Plan> {
        let bytes: u64 = src.iter().map(|g| g.len).sum();
        if bytes != dst.iter().map(|g| g.len).sum::<u64>() {
            return None;
        }
        Some(Plan {
            pieces: cut(src, dst)?,
            bytes,
        })
    }
}

/// The two lists (same total) cut at every boundary of either.
fn cut(s: &[Segment], d: &[Segment]) -> Option<Vec<Piece>> {
    let mut out = Vec::with_capacity(s.len().max(d.len()));
    let (mut i, mut j, mut si, mut dj) = (0, 0, 0u64, 0u64);
    while i < s.len() && j < d.len() {
        let (a, b) = (&s[i], &d[j]);
        let n = (a.len - si).min(b.len - dj);
        if n > 0 {
            if out.len() == MAX_PLAN_PIECES {
                return None;
            }
            out.push(Piece {
                src: a.offset + si as i64,
                dst: b.offset + dj as i64,
                len: n,
            });
        }
        si += n;
        dj += n;
        if si == a.len {
            i += 1;
            si = 0;
        }
        if dj == b.len {
            j += 1;
            dj = 0;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dt::{Layout, Order};

    fn canon(l: &Layout) -> Canon {
        l.canonical().unwrap().clone()
    }

    #[test]
    fn shapes_of_common_layouts() {
        let d = Layout::bytes(8);
        // A vector of 64 blocks of 4 doubles, stride 16 doubles.
        let v = Layout::vector(64, 4, 16, &d).unwrap();
        let s = Shape::of(&canon(&v)).unwrap();
        assert_eq!(s.block, 32);
        assert_eq!(s.levels.as_slice(), &[(64, 128)]);
        assert_eq!(s.size(), 64 * 32);
        // A 3D subarray face: 4 × 8 × 2 of a 16³ array of doubles, C order.
        let sub = Layout::subarray(&[16, 16, 16], &[4, 8, 2], &[1, 2, 3], Order::C, &d).unwrap();
        let s = Shape::of(&canon(&sub)).unwrap();
        assert_eq!(s.block, 16);
        assert_eq!(s.levels.as_slice(), &[(8, 128), (4, 2048)]);
        assert_eq!(s.offset, (16 * 16 + 2 * 16 + 3) * 8);
        // Contiguous: no levels.
        let c = Layout::contiguous(100, &d).unwrap();
        assert_eq!(Shape::of(&canon(&c)).unwrap(), Shape::dense(800));
        // Irregular: no shape.
        let ix = Layout::indexed(&[1, 3, 2], &[0, 5, 20], &d).unwrap();
        assert!(Shape::of(&canon(&ix)).is_none());
    }

    #[test]
    fn word_width_is_the_widest_common_divisor_up_to_16() {
        assert_eq!(word_width([1024, 4096, 0]), 16);
        assert_eq!(word_width([24, 48]), 8);
        assert_eq!(word_width([12, 48]), 4);
        assert_eq!(word_width([6]), 2);
        assert_eq!(word_width([7, 16]), 1);
        let v = Shape::of(&canon(&Layout::vector(8, 3, 5, &Layout::bytes(4)).unwrap())).unwrap();
        assert_eq!(pair_word(&v, 0x1000, &Shape::dense(96), 0x2000), 4);
        assert_eq!(pair_word(&v, 0x1002, &Shape::dense(96), 0x2000), 2);
    }

    #[test]
    fn plans_cut_both_lists_at_every_boundary() {
        let src = [Segment::new(0, 10), Segment::new(100, 6)];
        let dst = [Segment::new(50, 4), Segment::new(60, 12)];
        let p = Plan::from_segments(&src, &dst).unwrap();
        assert_eq!(p.bytes, 16);
        assert_eq!(
            p.pieces,
            vec![
                Piece {
                    src: 0,
                    dst: 50,
                    len: 4
                },
                Piece {
                    src: 4,
                    dst: 60,
                    len: 6
                },
                Piece {
                    src: 100,
                    dst: 66,
                    len: 6
                },
            ]
        );
        assert!(Plan::from_segments(&src, &dst[..1]).is_none());
        // Between two layouts: every byte lands where the type maps say.
        let d = Layout::bytes(4);
        let a = Layout::indexed(&[1, 3, 2], &[0, 5, 20], &d).unwrap();
        let b = Layout::vector(3, 2, 3, &d).unwrap();
        let p = Plan::new(&canon(&a), &canon(&b)).unwrap();
        assert_eq!(p.bytes, 24);
        let mut sa = vec![];
        for g in canon(&a).segments(100).unwrap() {
            sa.extend(g.offset..g.end());
        }
        let mut sb = vec![];
        for g in canon(&b).segments(100).unwrap() {
            sb.extend(g.offset..g.end());
        }
        let mut got = vec![];
        for pc in &p.pieces {
            for k in 0..pc.len as i64 {
                got.push((pc.src + k, pc.dst + k));
            }
        }
        let want: Vec<_> = sa.into_iter().zip(sb).collect();
        assert_eq!(got, want);
    }
}
