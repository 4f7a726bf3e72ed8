//! Lazy segment generation from a canonical form, resumable at any packed byte offset.

use super::canon::{Canon, Node};
use super::error::DtError;
use super::segment::Segment;

/// One level of the walk: the node, where this instance of it starts in the buffer, and
/// which copy (stream) or entry (blocks) is current.
#[derive(Clone, Copy, Debug)]
struct Frame<'a> {
    node: &'a Node,
    base: i64,
    idx: u64,
}

/// A resumable walk over the merged segments of a [`Canon`], in packing order.
///
/// Memory is one frame per tree level, whatever the number of segments; each step costs
/// O(1) amortized, a [`seek`](Cursor::seek) O(depth² + log(entries)).
#[derive(Clone, Debug)]
pub struct Cursor<'a> {
    canon: &'a Canon,
    /// Root-to-leaf path; the last frame is the current `Dense` node. Empty when done.
    frames: Vec<Frame<'a>>,
    /// Bytes of the current dense node already produced.
    leaf_pos: u64,
    /// Packed position of the next byte.
    pos: u64,
}

impl<'a> Cursor<'a> {
    /// A cursor at packed byte `start` (`0..=size`).
    pub fn new(canon: &'a Canon, start: u64) -> Result<Cursor<'a>, DtError> {
        let mut c = Cursor {
            canon,
            frames: Vec::with_capacity(canon.root().depth()),
            leaf_pos: 0,
            pos: 0,
        };
        c.seek(start)?;
        Ok(c)
    }

    /// Moves to packed byte `pos` (`0..=size`).
    pub fn seek(&mut self, pos: u64) -> Result<(), DtError> {
        if pos > self.canon.size() {
            return Err(DtError::InvalidArgument(
                "seek beyond the end of the packed data",
            ));
        }
        self.frames.clear();
        self.pos = pos;
        self.leaf_pos = 0;
        if pos == self.canon.size() {
            return Ok(());
        }
        let mut node = self.canon.root();
        let mut base = self.canon.offset();
        let mut rem = pos;
        loop {
            match node {
                Node::Dense { .. } => {
                    self.frames.push(Frame { node, base, idx: 0 });
                    self.leaf_pos = rem;
                    return Ok(());
                }
                Node::Stream { stride, child, .. } => {
                    let z = child.size();
                    let i = rem / z;
                    rem %= z;
                    self.frames.push(Frame { node, base, idx: i });
                    base += i as i64 * stride;
                    node = child;
                }
                Node::Blocks(b) => {
                    let i = b.find(rem);
                    rem -= b.packed_start(i);
                    self.frames.push(Frame {
                        node,
                        base,
                        idx: i as u64,
                    });
                    let (o, e) = &b.entries()[i];
                    base += o;
                    node = e;
                }
            }
        }
    }

    /// Packed position of the next byte.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Packed bytes left.
    pub fn remaining(&self) -> u64 {
        self.canon.size() - self.pos
    }

    pub fn is_done(&self) -> bool {
        self.frames.is_empty()
    }

    /// Descends from `node` at `base` to its first dense leaf.
    fn descend(&mut self, mut node: &'a Node, mut base: i64) {
        loop {
            self.frames.push(Frame { node, base, idx: 0 });
            match node {
                Node::Dense { .. } => break,
                Node::Stream { child, .. } => node = child,
                Node::Blocks(b) => {
                    let (o, e) = &b.entries()[0];
                    base += o;
                    node = e;
                }
            }
        }
        self.leaf_pos = 0;
    }

    /// Leaves the finished dense leaf for the next one (or ends the walk).
    fn advance(&mut self) {
        self.frames.pop();
        while let Some(f) = self.frames.last_mut() {
            f.idx += 1;
            match f.node {
                Node::Stream {
                    count,
                    stride,
                    child,
                } if f.idx < *count => {
                    let base = f.base + f.idx as i64 * stride;
                    self.descend(child, base);
                    return;
                }
                Node::Blocks(b) if (f.idx as usize) < b.entries().len() => {
                    let (o, e) = &b.entries()[f.idx as usize];
                    let base = f.base + o;
                    self.descend(e, base);
                    return;
                }
                _ => {
                    self.frames.pop();
                }
            }
        }
    }

    /// The rest of the current dense piece, as `(offset, len)`.
    fn piece(&self) -> Option<(i64, u64)> {
        let f = self.frames.last()?;
        let Node::Dense { len } = f.node else {
            return None;
        };
        Some((f.base + self.leaf_pos as i64, len - self.leaf_pos))
    }

    fn consume(&mut self, n: u64, piece_left: u64) {
        self.pos += n;
        if n == piece_left {
            self.advance();
        } else {
            self.leaf_pos += n;
        }
    }

    /// Clears `out` and fills it with at most `max_segments` merged segments covering at
    /// most `max_bytes` packed bytes (the last segment is cut there); returns the bytes
    /// covered. The next call continues where this one stopped; 0 means done (or a zero
    /// limit).
    pub fn fill(&mut self, out: &mut Vec<Segment>, max_segments: usize, max_bytes: u64) -> u64 {
        out.clear();
        let mut bytes = 0u64;
        while bytes < max_bytes {
            let Some((off, left)) = self.piece() else {
                break;
            };
            let take = left.min(max_bytes - bytes);
            if let Some(last) = out.last_mut().filter(|l| l.end() == off) {
                last.len += take;
            } else if out.len() >= max_segments {
                break;
            } else {
                out.push(Segment::new(off, take));
            }
            bytes += take;
            if take < left {
                self.consume(take, left);
                continue;
            }
            self.pos += take;
            self.leaf_fast_path(out, max_segments, max_bytes, &mut bytes);
            self.advance();
        }
        bytes
    }

    /// Just after a dense leaf was finished: if it is the child of a stream, emits the
    /// following whole copies in a tight loop (no descent per segment) while they fit.
    /// Leaves the cursor on the last copy emitted, finished, for [`advance`](Self::advance).
    #[inline]
    fn leaf_fast_path(
        &mut self,
        out: &mut Vec<Segment>,
        max_segments: usize,
        max_bytes: u64,
        bytes: &mut u64,
    ) {
        let n = self.frames.len();
        if n < 2 {
            return;
        }
        let parent = &mut self.frames[n - 2];
        let Node::Stream {
            count,
            stride,
            child,
        } = parent.node
        else {
            return;
        };
        let Node::Dense { len } = **child else { return };
        while parent.idx + 1 < *count && max_bytes - *bytes >= len {
            let off = parent.base + (parent.idx + 1) as i64 * stride;
            if let Some(last) = out.last_mut().filter(|l| l.end() == off) {
                last.len += len;
            } else if out.len() >= max_segments {
                break;
            } else {
                out.push(Segment::new(off, len));
            }
            parent.idx += 1;
            *bytes += len;
            self.pos += len;
        }
    }
}

impl Iterator for Cursor<'_> {
    type Item = Segment;

    /// The next merged segment, whole.
    fn next(&mut self) -> Option<Segment> {
        let (off, left) = self.piece()?;
        let mut seg = Segment::new(off, left);
        self.consume(left, left);
        while let Some((off, left)) = self.piece() {
            if off != seg.end() {
                break;
            }
            seg.len += left;
            self.consume(left, left);
        }
        Some(seg)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testgen::random_layout;
    use super::super::{merge_segments, Layout};
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    /// The merged flattening with its first `pos` bytes removed.
    fn tail(full: &[Segment], mut pos: u64) -> Vec<Segment> {
        let mut out = Vec::new();
        for s in full {
            if pos >= s.len {
                pos -= s.len;
                continue;
            }
            out.push(Segment::new(s.offset + pos as i64, s.len - pos));
            pos = 0;
        }
        out
    }

    #[test]
    fn prop_resumed_iteration_equals_tail() {
        let mut rng = StdRng::seed_from_u64(0x17e2_0001);
        let mut checked = 0;
        while checked < 2000 {
            let l = random_layout(&mut rng, 4);
            let Ok(full) = l.type_map_merged(20_000) else {
                continue;
            };
            let c = l.canonical().unwrap();
            for _ in 0..4 {
                let start = rng.gen_range(0..=c.size());
                let want = tail(&full, start);
                // Whole segments through the iterator.
                let got: Vec<Segment> = Cursor::new(c, start).unwrap().collect();
                assert_eq!(got, want, "{l:?} from {start}");
                // Chunks with random limits, concatenated and re-merged.
                let mut cur = Cursor::new(c, start).unwrap();
                let (n, b) = (rng.gen_range(1..6), rng.gen_range(1..64));
                let mut all = Vec::new();
                let mut chunk = Vec::new();
                let mut total = 0;
                loop {
                    let got = cur.fill(&mut chunk, n, b);
                    if got == 0 {
                        break;
                    }
                    assert!(chunk.len() <= n && got <= b);
                    assert_eq!(chunk.iter().map(|s| s.len).sum::<u64>(), got);
                    total += got;
                    assert_eq!(cur.position(), start + total);
                    all.extend_from_slice(&chunk);
                }
                assert!(cur.is_done());
                assert_eq!(total, c.size() - start);
                assert_eq!(merge_segments(&all), want, "{l:?} from {start} n {n} b {b}");
            }
            checked += 1;
        }
    }

    /// A 100-million-segment vector: first and last chunks via seek, with memory bounded
    /// by the chunk, and a long stretch walked in chunks.
    #[test]
    fn hundred_million_segments_stay_lazy() {
        let l = Layout::hvector(100_000_000, 1, 16, &Layout::bytes(8)).unwrap();
        let c = l.canonical().unwrap();
        assert_eq!(c.size(), 800_000_000);
        assert_eq!(c.pieces(), 100_000_000);
        let mut chunk = Vec::with_capacity(1024);
        let mut cur = Cursor::new(c, 0).unwrap();
        assert_eq!(cur.fill(&mut chunk, 1024, u64::MAX), 8192);
        assert_eq!(chunk[0], Segment::new(0, 8));
        assert_eq!(chunk[1023], Segment::new(1023 * 16, 8));
        // The last chunk, after a seek.
        cur.seek(c.size() - 1024 * 8 + 3).unwrap();
        assert_eq!(cur.fill(&mut chunk, 1024, u64::MAX), 1024 * 8 - 3);
        assert_eq!(chunk.len(), 1024);
        assert_eq!(chunk[0], Segment::new((100_000_000 - 1024) * 16 + 3, 5));
        assert_eq!(chunk[1023], Segment::new((100_000_000 - 1) * 16, 8));
        assert_eq!(cur.fill(&mut chunk, 1024, u64::MAX), 0);
        assert!(cur.is_done());
        // A stretch of a million segments in the middle, memory bounded by the chunk.
        cur.seek(50_000_000 * 8).unwrap();
        let mut n = 0u64;
        let mut expect = 50_000_000i64 * 16;
        while n < 1_000_000 {
            cur.fill(&mut chunk, 1024, u64::MAX);
            for s in &chunk {
                assert_eq!(*s, Segment::new(expect, 8));
                expect += 16;
            }
            n += chunk.len() as u64;
            assert!(chunk.capacity() <= 1024);
        }
    }

    #[test]
    fn seek_errors_and_empty() {
        let l = Layout::vector(3, 1, 2, &Layout::bytes(4)).unwrap();
        let c = l.canonical().unwrap();
        assert!(Cursor::new(c, 13).is_err());
        let mut cur = Cursor::new(c, 12).unwrap();
        assert!(cur.is_done());
        assert_eq!(cur.next(), None);
        let e = Layout::contiguous(0, &l).unwrap();
        let ce = e.canonical().unwrap();
        let mut cur = Cursor::new(ce, 0).unwrap();
        let mut v = Vec::new();
        assert_eq!(cur.fill(&mut v, 10, 100), 0);
        assert!(v.is_empty());
    }
}
