//! Pack and unpack between a buffer holding a layout and contiguous bytes, with strided
//! loops generated from the canonical form.
//!
//! The buffer origin (MPI's `buf` pointer, offset 0 of the layout) is `base` bytes into
//! the slice. One check up front — the whole layout's data, `[base + lo, base + hi)`, lies
//! inside the slice, and the packed window inside `[0, size)` — makes every later access
//! in range; the loops then run per stream, with fixed-size copies for dense blocks of
//! 1, 2, 4, 8 and 16 bytes. Unpacking a layout whose pieces overlap writes them in packing
//! order (the last write wins), as the naive type-map scatter would.

use ucs::Status;

use super::canon::{Canon, Node};

trait Mover {
    fn mv(&mut self, buf: usize, pk: usize, len: usize);
    fn mv_n<const N: usize>(&mut self, buf: usize, pk: usize);
}

struct Packer<'a> {
    src: &'a [u8],
    out: &'a mut [u8],
}

impl Mover for Packer<'_> {
    #[inline(always)]
    fn mv(&mut self, buf: usize, pk: usize, len: usize) {
        self.out[pk..pk + len].copy_from_slice(&self.src[buf..buf + len]);
    }

    #[inline(always)]
    fn mv_n<const N: usize>(&mut self, buf: usize, pk: usize) {
        self.out[pk..pk + N].copy_from_slice(&self.src[buf..buf + N]);
    }
}

struct Unpacker<'a> {
    packed: &'a [u8],
    dst: &'a mut [u8],
}

impl Mover for Unpacker<'_> {
    #[inline(always)]
    fn mv(&mut self, buf: usize, pk: usize, len: usize) {
        self.dst[buf..buf + len].copy_from_slice(&self.packed[pk..pk + len]);
    }

    #[inline(always)]
    fn mv_n<const N: usize>(&mut self, buf: usize, pk: usize) {
        self.dst[buf..buf + N].copy_from_slice(&self.packed[pk..pk + N]);
    }
}

/// Checks that the layout's data lies inside a buffer of `buf_len` bytes with the origin at
/// `base`, and that `[packed_offset, packed_offset + len)` lies inside the packed data.
fn check(
    c: &Canon,
    buf_len: usize,
    base: usize,
    packed_offset: u64,
    len: usize,
) -> Result<(), Status> {
    let end = packed_offset
        .checked_add(len as u64)
        .ok_or(Status::OutOfRange)?;
    if end > c.size() {
        return Err(Status::OutOfRange);
    }
    if c.size() > 0 {
        let (lo, hi) = c.bounds();
        if (base as i128) + (lo as i128) < 0 || (base as i128) + (hi as i128) > buf_len as i128 {
            return Err(Status::BufferTooSmall);
        }
    }
    Ok(())
}

/// Packs the whole layout from `src` (origin at `src[base]`) into `out[..size]`; returns
/// `size`. `BufferTooSmall` if `out` is shorter than `size` or the layout does not fit in `src`.
pub fn pack(c: &Canon, src: &[u8], base: usize, out: &mut [u8]) -> Result<u64, Status> {
    let size = usize::try_from(c.size()).map_err(|_| Status::BufferTooSmall)?;
    let out = out.get_mut(..size).ok_or(Status::BufferTooSmall)?;
    pack_range(c, src, base, 0, out)?;
    Ok(c.size())
}

/// Packs packed bytes `[packed_offset, packed_offset + out.len())` of the layout into `out`
/// (a pipelined protocol packs one fragment at a time). `OutOfRange` if the window leaves
/// the packed data.
pub fn pack_range(
    c: &Canon,
    src: &[u8],
    base: usize,
    packed_offset: u64,
    out: &mut [u8],
) -> Result<(), Status> {
    check(c, src.len(), base, packed_offset, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let (w0, w1) = (packed_offset, packed_offset + out.len() as u64);
    let mut m = Packer { src, out };
    part(&mut m, c.root(), base as i64 + c.offset(), 0, w0, w1);
    Ok(())
}

/// Unpacks `packed[..size]` into the layout in `dst` (origin at `dst[base]`); returns
/// `size`. `MessageTruncated` if `packed` is shorter than `size`.
pub fn unpack(c: &Canon, packed: &[u8], dst: &mut [u8], base: usize) -> Result<u64, Status> {
    let size = usize::try_from(c.size()).map_err(|_| Status::MessageTruncated)?;
    let packed = packed.get(..size).ok_or(Status::MessageTruncated)?;
    unpack_range(c, 0, packed, dst, base)?;
    Ok(c.size())
}

/// Unpacks `packed`, which holds packed bytes `[packed_offset, packed_offset + packed.len())`,
/// into the layout in `dst`.
pub fn unpack_range(
    c: &Canon,
    packed_offset: u64,
    packed: &[u8],
    dst: &mut [u8],
    base: usize,
) -> Result<(), Status> {
    check(c, dst.len(), base, packed_offset, packed.len())?;
    if packed.is_empty() {
        return Ok(());
    }
    let (w0, w1) = (packed_offset, packed_offset + packed.len() as u64);
    let mut m = Unpacker { packed, dst };
    part(&mut m, c.root(), base as i64 + c.offset(), 0, w0, w1);
    Ok(())
}

/// Moves the part of `node` (packed `[start, start + size)`, buffer origin `buf`) that lies
/// in the window `[w0, w1)`; whole nodes inside the window go to [`full`].
fn part<M: Mover>(m: &mut M, node: &Node, buf: i64, start: u64, w0: u64, w1: u64) {
    let size = node.size();
    let end = start + size;
    if end <= w0 || start >= w1 {
        return;
    }
    if start >= w0 && end <= w1 {
        full(m, node, buf, (start - w0) as usize);
        return;
    }
    match node {
        Node::Dense { .. } => {
            let (a, b) = (start.max(w0), end.min(w1));
            m.mv(
                (buf + (a - start) as i64) as usize,
                (a - w0) as usize,
                (b - a) as usize,
            );
        }
        Node::Stream {
            count,
            stride,
            child,
        } => {
            let z = child.size();
            let first = w0.saturating_sub(start) / z;
            let last = (*count).min((w1 - start).div_ceil(z));
            for i in first..last {
                let s = start + i * z;
                let b = buf + i as i64 * stride;
                if s >= w0 && s + z <= w1 {
                    full(m, child, b, (s - w0) as usize);
                } else {
                    part(m, child, b, s, w0, w1);
                }
            }
        }
        Node::Blocks(bl) => {
            let mut i = bl.find(w0.saturating_sub(start));
            while i < bl.entries().len() {
                let s = start + bl.packed_start(i);
                if s >= w1 {
                    break;
                }
                let (o, e) = &bl.entries()[i];
                part(m, e, buf + o, s, w0, w1);
                i += 1;
            }
        }
    }
}

/// Moves a whole node whose packed bytes start at `pk` in the window.
fn full<M: Mover>(m: &mut M, node: &Node, buf: i64, pk: usize) {
    match node {
        Node::Dense { len } => m.mv(buf as usize, pk, *len as usize),
        Node::Stream {
            count,
            stride,
            child,
        } => match &**child {
            Node::Dense { len } => strided(m, *count, *stride, *len as usize, buf, pk),
            c => {
                let z = c.size() as usize;
                for i in 0..*count {
                    full(m, c, buf + i as i64 * stride, pk + i as usize * z);
                }
            }
        },
        Node::Blocks(b) => {
            for (i, (o, e)) in b.entries().iter().enumerate() {
                full(m, e, buf + o, pk + b.packed_start(i) as usize);
            }
        }
    }
}

/// `count` dense blocks of `len` bytes, `stride` apart in the buffer, back to back packed.
#[inline(always)]
fn strided<M: Mover>(m: &mut M, count: u64, stride: i64, len: usize, buf: i64, pk: usize) {
    macro_rules! fixed {
        ($n:literal) => {
            for i in 0..count {
                m.mv_n::<$n>((buf + i as i64 * stride) as usize, pk + i as usize * $n);
            }
        };
    }
    match len {
        1 => fixed!(1),
        2 => fixed!(2),
        4 => fixed!(4),
        8 => fixed!(8),
        16 => fixed!(16),
        _ => {
            for i in 0..count {
                m.mv(
                    (buf + i as i64 * stride) as usize,
                    pk + i as usize * len,
                    len,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testgen::random_layout;
    use super::super::{Layout, Order};
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn prop_pack_unpack_match_the_type_map() {
        let mut rng = StdRng::seed_from_u64(0x9ac4_0001);
        let mut checked = 0;
        while checked < 2000 {
            let l = random_layout(&mut rng, 4);
            let Ok(map) = l.type_map(20_000) else {
                continue;
            };
            let c = l.canonical().unwrap();
            let (lo, hi) = c.bounds();
            let margin = rng.gen_range(0..4usize);
            let base = (-lo).max(0) as usize + margin;
            let buf_len = (base as i64 + hi) as usize + rng.gen_range(0..4usize);
            let src: Vec<u8> = (0..buf_len).map(|_| rng.gen()).collect();
            // Pack == the naive gather.
            let want: Vec<u8> = map
                .iter()
                .flat_map(|s| {
                    let a = (base as i64 + s.offset) as usize;
                    src[a..a + s.len as usize].iter().copied()
                })
                .collect();
            let mut out = vec![0u8; c.size() as usize];
            assert_eq!(pack(c, &src, base, &mut out), Ok(c.size()));
            assert_eq!(out, want, "{l:?}");
            // Unpack == the naive scatter (in order, so overlaps resolve the same way).
            let mut dst: Vec<u8> = (0..buf_len).map(|_| rng.gen()).collect();
            let mut want_dst = dst.clone();
            let mut p = 0;
            for s in &map {
                let a = (base as i64 + s.offset) as usize;
                want_dst[a..a + s.len as usize].copy_from_slice(&want[p..p + s.len as usize]);
                p += s.len as usize;
            }
            assert_eq!(unpack(c, &want, &mut dst, base), Ok(c.size()));
            assert_eq!(dst, want_dst, "{l:?}");
            // Windows: fragments of the packed stream, packed and unpacked one by one.
            if c.size() > 0 {
                let mut dst2: Vec<u8> = dst.clone();
                dst2.iter_mut().for_each(|b| *b = !*b);
                let mut at = 0u64;
                while at < c.size() {
                    let n = rng.gen_range(1..=c.size() - at).min(rng.gen_range(1..40));
                    let mut frag = vec![0u8; n as usize];
                    pack_range(c, &src, base, at, &mut frag).unwrap();
                    assert_eq!(frag[..], want[at as usize..(at + n) as usize]);
                    unpack_range(c, at, &frag, &mut dst2, base).unwrap();
                    at += n;
                }
                let mut want2: Vec<u8> = dst.iter().map(|b| !*b).collect();
                let mut p = 0;
                for s in &map {
                    let a = (base as i64 + s.offset) as usize;
                    want2[a..a + s.len as usize].copy_from_slice(&want[p..p + s.len as usize]);
                    p += s.len as usize;
                }
                assert_eq!(dst2, want2, "{l:?}");
            }
            checked += 1;
        }
    }

    #[test]
    fn round_trip_subarray() {
        let d = Layout::bytes(8);
        let s = Layout::subarray(&[64, 48], &[30, 20], &[5, 7], Order::C, &d).unwrap();
        let c = s.canonical().unwrap();
        let src: Vec<u8> = (0..64 * 48 * 8).map(|i| (i * 7 % 251) as u8).collect();
        let mut packed = vec![0u8; c.size() as usize];
        pack(c, &src, 0, &mut packed).unwrap();
        let mut back = vec![0u8; src.len()];
        unpack(c, &packed, &mut back, 0).unwrap();
        for r in 0..64 {
            for col in 0..48 {
                let a = (r * 48 + col) * 8;
                let inside = (5..35).contains(&r) && (7..27).contains(&col);
                let want = if inside {
                    &src[a..a + 8]
                } else {
                    &[0u8; 8][..]
                };
                assert_eq!(&back[a..a + 8], want);
            }
        }
    }

    #[test]
    fn bounds_are_checked() {
        let l = Layout::hvector(3, 1, -16, &Layout::bytes(8)).unwrap(); // data in [-32, 8)
        let c = l.canonical().unwrap();
        let src = vec![1u8; 40];
        let mut out = vec![0u8; 24];
        assert_eq!(pack(c, &src, 0, &mut out), Err(Status::BufferTooSmall)); // origin too low
        assert_eq!(pack(c, &src, 32, &mut out), Ok(24));
        assert_eq!(pack(c, &src, 33, &mut out), Err(Status::BufferTooSmall)); // runs off the end
        assert_eq!(
            pack(c, &src, 32, &mut out[..23]),
            Err(Status::BufferTooSmall)
        );
        assert_eq!(
            pack_range(c, &src, 32, 20, &mut out[..5]),
            Err(Status::OutOfRange)
        );
        assert_eq!(
            pack_range(c, &src, 32, u64::MAX, &mut out[..5]),
            Err(Status::OutOfRange)
        );
        let mut dst = vec![0u8; 40];
        assert_eq!(
            unpack(c, &out[..23], &mut dst, 32),
            Err(Status::MessageTruncated)
        );
        assert_eq!(
            unpack(c, &out, &mut dst[..39], 32),
            Err(Status::BufferTooSmall)
        );
        assert_eq!(unpack(c, &out, &mut dst, 32), Ok(24));
    }
}
