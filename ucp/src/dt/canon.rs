//! The canonical IR (TEMPI's `DenseData`/`StreamData`, plus an explicit block list), the
//! transformations to a fixed point, and the compressor that makes small and irregular
//! layouts a function of their bytes. The lowering from a [`Layout`](super::Layout) is in
//! `layout.rs`, the unordered form in `unordered.rs`. See the [module docs](super) for the
//! rules and what they guarantee.

use super::error::DtError;
use super::segment::{merge_segments, Segment, MAX_ABS_OFFSET, MAX_SIZE};

/// Layouts of at most this many pieces (after structural simplification) that are not a
/// clean chain are canonicalized from their merged segment list, which makes the result
/// depend on the bytes only. Also bounds the explicit segment lists built while doing so.
pub const COMPRESS_LIMIT: u64 = 4096;

/// Longest repeated group (in entries) the compressor looks for.
const PERIOD_MAX: usize = 16;

/// A node of the canonical IR. Each node's first byte in packing order is at its origin.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    /// `len` contiguous bytes.
    Dense { len: u64 },
    /// `count` copies of `child`, copy `i` at `i * stride` bytes.
    Stream {
        count: u64,
        stride: i64,
        child: Box<Node>,
    },
    /// Explicit entries in packing order.
    Blocks(Blocks),
}

/// The entries of a [`Node::Blocks`]: `(offset, node)` in packing order, with the packed
/// position of each entry precomputed (for seeking).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Blocks {
    pub(super) entries: Vec<(i64, Node)>,
    /// `ends[i]`: packed bytes up to and including entry `i`.
    ends: Vec<u64>,
}

impl Blocks {
    pub(crate) fn new(entries: Vec<(i64, Node)>) -> Blocks {
        let mut acc = 0u64;
        let ends = entries
            .iter()
            .map(|(_, n)| {
                acc = acc.saturating_add(n.size());
                acc
            })
            .collect();
        Blocks { entries, ends }
    }

    /// The entries, in packing order.
    pub fn entries(&self) -> &[(i64, Node)] {
        &self.entries
    }

    /// Packed position at which entry `i` starts.
    pub fn packed_start(&self, i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            self.ends[i - 1]
        }
    }

    /// Index of the entry holding packed byte `pos` (`pos < size`).
    pub(crate) fn find(&self, pos: u64) -> usize {
        self.ends.partition_point(|&e| e <= pos)
    }

    pub(crate) fn size(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }
}

impl Node {
    /// Bytes of data under this node.
    pub fn size(&self) -> u64 {
        match self {
            Node::Dense { len } => *len,
            Node::Stream { count, child, .. } => count.saturating_mul(child.size()),
            Node::Blocks(b) => b.size(),
        }
    }

    /// Number of dense pieces when fully expanded (saturating).
    pub fn pieces(&self) -> u64 {
        match self {
            Node::Dense { .. } => 1,
            Node::Stream { count, child, .. } => count.saturating_mul(child.pieces()),
            Node::Blocks(b) => b
                .entries
                .iter()
                .fold(0u64, |a, (_, n)| a.saturating_add(n.pieces())),
        }
    }

    /// The shortest dense piece (0 when there is none): no merged segment of the layout
    /// is shorter.
    pub fn min_dense(&self) -> u64 {
        match self {
            Node::Dense { len } => *len,
            Node::Stream { count: 0, .. } => 0,
            Node::Stream { child, .. } => child.min_dense(),
            Node::Blocks(b) => b
                .entries
                .iter()
                .map(|(_, n)| n.min_dense())
                .filter(|&l| l > 0)
                .min()
                .unwrap_or(0),
        }
    }

    /// Depth of the tree (a dense node has depth 1).
    pub fn depth(&self) -> usize {
        match self {
            Node::Dense { .. } => 1,
            Node::Stream { child, .. } => 1 + child.depth(),
            Node::Blocks(b) => 1 + b.entries.iter().map(|(_, n)| n.depth()).max().unwrap_or(0),
        }
    }

    /// `[lo, hi)` of the data relative to the node's origin, in i128 (no overflow).
    pub(crate) fn bounds(&self) -> (i128, i128) {
        match self {
            Node::Dense { len } => (0, *len as i128),
            Node::Stream {
                count,
                stride,
                child,
            } => {
                let (lo, hi) = child.bounds();
                let t = (*count as i128 - 1) * *stride as i128;
                (lo + t.min(0), hi + t.max(0))
            }
            Node::Blocks(b) => b
                .entries
                .iter()
                .fold((i128::MAX, i128::MIN), |(lo, hi), (o, n)| {
                    let (a, c) = n.bounds();
                    (lo.min(*o as i128 + a), hi.max(*o as i128 + c))
                }),
        }
    }

    /// Appends the node's pieces at `base`, merged with what `out` ends with.
    pub(crate) fn emit(&self, base: i64, out: &mut Vec<Segment>) {
        match self {
            Node::Dense { len } => match out.last_mut() {
                Some(last) if last.end() == base => last.len += len,
                _ => out.push(Segment::new(base, *len)),
            },
            Node::Stream {
                count,
                stride,
                child,
            } => {
                for i in 0..*count as i64 {
                    child.emit(base + i * stride, out);
                }
            }
            Node::Blocks(b) => {
                for (o, n) in &b.entries {
                    n.emit(base + o, out);
                }
            }
        }
    }
}

/// A canonical layout: the offset of its first byte and the IR tree, with its size, the
/// bounds of its data and its hash.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Canon {
    pub(crate) offset: i64,
    pub(crate) root: Node,
    pub(crate) size: u64,
    pub(crate) lo: i64,
    pub(crate) hi: i64,
    pub(crate) ordered: bool,
    pub(crate) hash: u128,
    /// `root.pieces()`, kept: the GPU model asks for it per transfer, and walking a tree
    /// of thousands of blocks costs microseconds.
    pub(crate) pieces: u64,
}

impl Canon {
    /// Builds a canonical value from parts already in canonical shape; checks ranges.
    pub(crate) fn from_parts(offset: i64, root: Node, ordered: bool) -> Result<Canon, DtError> {
        let size = root.size();
        let (lo, hi) = if size == 0 {
            (0, 0)
        } else {
            let (a, b) = root.bounds();
            (a + offset as i128, b + offset as i128)
        };
        let lim = MAX_ABS_OFFSET as i128;
        if size > MAX_SIZE || lo < -lim || hi > lim {
            return Err(DtError::Overflow);
        }
        let mut c = Canon {
            offset,
            root,
            size,
            lo: lo as i64,
            hi: hi as i64,
            ordered,
            hash: 0,
            pieces: 0,
        };
        c.pieces = if size == 0 { 0 } else { c.root.pieces() };
        c.hash = layout_hash(&c.serialize());
        Ok(c)
    }

    /// The canonical form of a layout with no data.
    pub fn empty() -> Canon {
        let mut c = Canon {
            offset: 0,
            root: Node::Dense { len: 0 },
            size: 0,
            lo: 0,
            hi: 0,
            ordered: true,
            hash: 0,
            pieces: 0,
        };
        c.hash = layout_hash(&c.serialize());
        c
    }

    /// The same bytes with the buffer origin moved to `delta` bytes after the old one
    /// (every offset decreases by `delta`): `rebased(lo)` puts the data's first byte at 0,
    /// so a buffer slice can start exactly where the data does. The hash is the one of the
    /// rebased form (a different origin is a different description).
    pub fn rebased(&self, delta: i64) -> Canon {
        let mut c = Canon {
            offset: self.offset - delta,
            root: self.root.clone(),
            size: self.size,
            lo: self.lo - delta,
            hi: self.hi - delta,
            ordered: self.ordered,
            hash: 0,
            pieces: self.pieces,
        };
        c.hash = layout_hash(&c.serialize());
        c
    }

    /// Offset of the first byte (in packing order) from the buffer origin.
    pub fn offset(&self) -> i64 {
        self.offset
    }

    /// The IR tree (`Dense { len: 0 }` for an empty layout).
    pub fn root(&self) -> &Node {
        &self.root
    }

    /// Bytes of data.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// `[lo, hi)` of the data relative to the buffer origin (`(0, 0)` when empty).
    pub fn bounds(&self) -> (i64, i64) {
        (self.lo, self.hi)
    }

    /// Whether this is the ordered form (packing order) rather than [`Canon::unordered`].
    pub fn is_ordered(&self) -> bool {
        self.ordered
    }

    /// Number of merged segments is at most this (dense pieces of the tree).
    pub fn pieces(&self) -> u64 {
        self.pieces
    }

    /// A lower bound of its segments' lengths (the shortest dense piece, at least 1): what
    /// the UMR protocol agrees its chunks from.
    pub fn min_block(&self) -> u64 {
        self.root().min_dense().max(1)
    }

    /// XXH3-128 of the encoding: the memoization key. Stable across builds and hosts.
    pub fn hash128(&self) -> u128 {
        self.hash
    }

    /// All merged segments, materialized (bounded by `limit`); for tests and small layouts.
    pub fn segments(&self, limit: usize) -> Result<Vec<Segment>, DtError> {
        if self.pieces > limit as u64 {
            return Err(DtError::TooManyPieces { limit });
        }
        let mut out = Vec::new();
        if self.size > 0 {
            self.root.emit(self.offset, &mut out);
        }
        Ok(out)
    }
}

/// The memoization key of an encoding: XXH3-128 (seed 0). Peers trust it to name a layout
/// they sent before, so it must not collide by accident (FNV-1a, used before 2026-11-26, is
/// weak there); a receiver recomputes it from every encoding it is sent, so a peer cannot
/// make another peer's key name its layout.
pub(crate) fn layout_hash(bytes: &[u8]) -> u128 {
    xxhash_rust::xxh3::xxh3_128(bytes)
}

// ---------------------------------------------------------------------------------------
// Lowering and simplification

/// The canonical form of a lowered layout (`layout.rs`'s structural lowering: the offset
/// and node of its data, `None` when it has none).
pub(crate) fn canonicalize(lowered: Option<(i64, Node)>) -> Result<Canon, DtError> {
    let Some((o, n)) = lowered else {
        return Ok(Canon::empty());
    };
    let Some((o2, n)) = simplify(n) else {
        return Ok(Canon::empty());
    };
    let o = o + o2;
    let (o, n) = if !is_clean_chain(&n) && n.pieces() <= COMPRESS_LIMIT {
        let mut segs = Vec::new();
        n.emit(o, &mut segs);
        compress(&segs).unwrap_or((o, n))
    } else {
        (o, n)
    };
    Canon::from_parts(o, n, true)
}

/// Bottom-up rewrite to the fixed point of the rules; returns the node with its first byte
/// at the origin and the offset that first byte had. `None` if the node has no data.
fn simplify(n: Node) -> Option<(i64, Node)> {
    match n {
        Node::Dense { len: 0 } => None,
        Node::Dense { .. } => Some((0, n)),
        Node::Stream {
            count,
            stride,
            child,
        } => {
            if count == 0 {
                return None;
            }
            let (o, c) = simplify(*child)?;
            Some((o, make_stream(count, stride, c)))
        }
        Node::Blocks(b) => simplify_blocks(b.entries),
    }
}

/// `Stream{count, stride, child}` for a simplified `child`, with elision, dense folding
/// and stream flattening applied.
pub(super) fn make_stream(count: u64, stride: i64, child: Node) -> Node {
    if count == 1 {
        return child;
    }
    match child {
        Node::Dense { len } if stride == len as i64 => Node::Dense { len: count * len },
        Node::Stream {
            count: c2,
            stride: s2,
            child: x,
        } if stride as i128 == c2 as i128 * s2 as i128 => make_stream(count * c2, s2, *x),
        c => Node::Stream {
            count,
            stride,
            child: Box::new(c),
        },
    }
}

/// Appends an entry, fusing it with the previous one when both are dense and touch.
pub(super) fn push_entry(out: &mut Vec<(i64, Node)>, off: i64, n: Node) {
    if let (Some((lo, Node::Dense { len: a })), Node::Dense { len: b }) = (out.last_mut(), &n) {
        if *lo + *a as i64 == off {
            *a += *b;
            return;
        }
    }
    out.push((off, n));
}

fn simplify_blocks(entries: Vec<(i64, Node)>) -> Option<(i64, Node)> {
    let mut out: Vec<(i64, Node)> = Vec::with_capacity(entries.len());
    for (off, n) in entries {
        let Some((o, m)) = simplify(n) else { continue };
        let off = off + o;
        match m {
            Node::Blocks(b) => {
                for (eo, en) in b.entries {
                    push_entry(&mut out, off + eo, en);
                }
            }
            m => push_entry(&mut out, off, m),
        }
    }
    let pieces = out
        .iter()
        .fold(0u64, |a, (_, n)| a.saturating_add(n.pieces()));
    if out.len() >= 2 && pieces <= COMPRESS_LIMIT {
        let mut segs = Vec::with_capacity(pieces as usize);
        for (o, n) in &out {
            n.emit(*o, &mut segs);
        }
        return compress(&segs);
    }
    if out.iter().all(|(_, n)| matches!(n, Node::Dense { .. })) {
        let segs: Vec<Segment> = out
            .iter()
            .map(|(o, n)| Segment::new(*o, n.size()))
            .collect();
        if let Some(chain) = recognize_chain(&segs) {
            return Some(chain);
        }
    }
    while runs_pass(&mut out) {}
    finish(out)
}

/// A one-entry list is its entry; otherwise a `Blocks` whose first entry is at 0.
pub(super) fn finish(mut items: Vec<(i64, Node)>) -> Option<(i64, Node)> {
    match items.len() {
        0 => None,
        1 => items.pop(),
        _ => {
            let o0 = items[0].0;
            for it in items.iter_mut() {
                it.0 -= o0;
            }
            Some((o0, Node::Blocks(Blocks::new(items))))
        }
    }
}

/// A nest of streams over one dense block whose pieces never touch across levels (so the
/// merged segments are exactly the pieces). For such a nest the structural form equals
/// what [`compress`] builds from the segments.
fn is_clean_chain(n: &Node) -> bool {
    let mut levels = Vec::new();
    let mut cur = n;
    let len = loop {
        match cur {
            Node::Dense { len } => break *len as i128,
            Node::Stream {
                count,
                stride,
                child,
            } => {
                levels.push((*count as i128, *stride as i128));
                cur = child;
            }
            Node::Blocks(_) => return false,
        }
    };
    // From the innermost level out: the step between the last piece of one copy of the
    // inner nest and the first piece of the next copy.
    let mut inner_span: i128 = 0;
    for &(c, s) in levels.iter().rev() {
        if s - inner_span == len {
            return false;
        }
        inner_span += (c - 1) * s;
    }
    true
}

/// The canonical form of a merged segment list (a function of the bytes alone): a nest of
/// streams if the list is one, otherwise greedy runs and repeated groups.
pub(crate) fn compress(segs: &[Segment]) -> Option<(i64, Node)> {
    debug_assert_eq!(merge_segments(segs).len(), segs.len());
    if let Some(chain) = recognize_chain(segs) {
        return Some(chain);
    }
    let mut items: Vec<(i64, Node)> = segs
        .iter()
        .map(|s| (s.offset, Node::Dense { len: s.len }))
        .collect();
    loop {
        if runs_pass(&mut items) {
            continue;
        }
        if period_pass(&mut items) {
            continue;
        }
        break;
    }
    finish(items)
}

/// Recognizes a merged segment list that is exactly a nest of streams over one dense
/// block: at each level the count is the length of the leading run of equal steps.
fn recognize_chain(segs: &[Segment]) -> Option<(i64, Node)> {
    let first = segs.first()?;
    let len = first.len;
    if segs.iter().any(|s| s.len != len) {
        return None;
    }
    let mut pts: Vec<i64> = segs.iter().map(|s| s.offset).collect();
    let mut levels: Vec<(u64, i64)> = Vec::new();
    while pts.len() > 1 {
        let step = pts[1] - pts[0];
        let mut c = 2;
        while c < pts.len() && pts[c] - pts[c - 1] == step {
            c += 1;
        }
        if !pts.chunks_exact(c).remainder().is_empty() {
            return None;
        }
        for blk in pts.chunks(c) {
            if blk.windows(2).any(|w| w[1] - w[0] != step) {
                return None;
            }
        }
        levels.push((c as u64, step));
        pts = pts.iter().step_by(c).copied().collect();
    }
    let mut node = Node::Dense { len };
    for &(c, s) in &levels {
        node = make_stream(c, s, node);
    }
    Some((first.offset, node))
}

/// One greedy left-to-right pass: runs of >= 2 equal nodes at a constant step become one
/// stream. Returns whether anything changed.
fn runs_pass(items: &mut Vec<(i64, Node)>) -> bool {
    let n = items.len();
    let mut out: Vec<(i64, Node)> = Vec::with_capacity(n);
    let mut changed = false;
    let mut i = 0;
    let mut old = std::mem::take(items)
        .into_iter()
        .map(Some)
        .collect::<Vec<_>>();
    while i < n {
        let mut j = i + 1;
        let mut step = 0;
        if i + 1 < n && node_of(&old, i + 1) == node_of(&old, i) {
            step = off_of(&old, i + 1) - off_of(&old, i);
            j = i + 2;
            while j < n
                && node_of(&old, j) == node_of(&old, i)
                && off_of(&old, j) - off_of(&old, j - 1) == step
            {
                j += 1;
            }
        }
        let (o, node) = old[i].take().unwrap_or((0, Node::Dense { len: 0 }));
        if j - i >= 2 {
            changed = true;
            out.push((o, make_stream((j - i) as u64, step, node)));
        } else {
            out.push((o, node));
        }
        i = j;
    }
    *items = out;
    changed
}

fn node_of(v: &[Option<(i64, Node)>], i: usize) -> Option<&Node> {
    v[i].as_ref().map(|x| &x.1)
}

fn off_of(v: &[Option<(i64, Node)>], i: usize) -> i64 {
    v[i].as_ref().map_or(0, |x| x.0)
}

/// One greedy pass looking for the shortest group of 2..=`PERIOD_MAX` entries repeated
/// >= 2 times at a constant step; each becomes a stream of a `Blocks`.
fn period_pass(items: &mut Vec<(i64, Node)>) -> bool {
    let n = items.len();
    let mut out: Vec<(i64, Node)> = Vec::with_capacity(n);
    let mut changed = false;
    let mut k = 0;
    let same = |items: &[(i64, Node)], a: usize, b: usize, p: usize, step: i64| {
        (0..p).all(|t| items[b + t].1 == items[a + t].1 && items[b + t].0 - items[a + t].0 == step)
    };
    while k < n {
        let mut found = None;
        for p in 2..=PERIOD_MAX {
            if k + 2 * p > n {
                break;
            }
            let step = items[k + p].0 - items[k].0;
            if same(items, k, k + p, p, step) {
                let mut r = 2;
                while k + (r + 1) * p <= n && same(items, k + (r - 1) * p, k + r * p, p, step) {
                    r += 1;
                }
                found = Some((p, r, step));
                break;
            }
        }
        match found {
            Some((p, r, step)) => {
                let o0 = items[k].0;
                let group: Vec<(i64, Node)> = items[k..k + p]
                    .iter()
                    .map(|(o, nd)| (o - o0, nd.clone()))
                    .collect();
                out.push((
                    o0,
                    make_stream(r as u64, step, Node::Blocks(Blocks::new(group))),
                ));
                k += r * p;
                changed = true;
            }
            None => {
                out.push(items[k].clone());
                k += 1;
            }
        }
    }
    *items = out;
    changed
}

#[cfg(test)]
mod tests {
    use super::super::testgen::{flat_hindexed, random_layout};
    use super::super::{Layout, Order};
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn canon(l: &Layout) -> Canon {
        l.canonical().unwrap().clone()
    }

    fn dense(len: u64) -> Node {
        Node::Dense { len }
    }

    fn stream(count: u64, stride: i64, child: Node) -> Node {
        Node::Stream {
            count,
            stride,
            child: Box::new(child),
        }
    }

    /// Canonical segments equal the naive type map, merged, for random nested layouts.
    #[test]
    fn prop_canonical_flattening_matches_naive() {
        let mut rng = StdRng::seed_from_u64(0x7e3d_0001);
        let mut checked = 0;
        while checked < 3000 {
            let l = random_layout(&mut rng, 4);
            let Ok(naive) = l.type_map_merged(20_000) else {
                continue;
            };
            let c = canon(&l);
            assert_eq!(
                c.segments(1 << 20).unwrap(),
                naive,
                "layout {l:?}\ncanon {c:?}"
            );
            assert_eq!(c.size(), l.size());
            match l.true_bounds() {
                Some(b) => assert_eq!(c.bounds(), b),
                None => assert_eq!(c, Canon::empty()),
            }
            checked += 1;
        }
    }

    /// The canonical form depends on the bytes only: it equals the compressor applied to
    /// the merged type map, and the canonical form of an explicit hindexed of those bytes.
    #[test]
    fn prop_canonical_is_a_function_of_the_bytes() {
        let mut rng = StdRng::seed_from_u64(0x7e3d_0002);
        let mut checked = 0;
        while checked < 2000 {
            let l = random_layout(&mut rng, 4);
            let Ok(naive) = l.type_map_merged(COMPRESS_LIMIT as usize) else {
                continue;
            };
            let c = canon(&l);
            let from_bytes = match compress(&naive) {
                Some((o, n)) => Canon::from_parts(o, n, true).unwrap(),
                None => Canon::empty(),
            };
            assert_eq!(c, from_bytes, "layout {l:?}");
            let flat = flat_hindexed(&naive);
            assert_eq!(canon(&flat), c, "layout {l:?}");
            assert_eq!(canon(&flat).hash128(), c.hash128());
            checked += 1;
        }
    }

    fn assert_same(a: &Layout, b: &Layout) {
        let (ca, cb) = (canon(a), canon(b));
        assert_eq!(ca, cb, "\n{a:?}\n{b:?}");
        assert_eq!(ca.hash128(), cb.hash128());
        assert_eq!(ca.encode().unwrap(), cb.encode().unwrap());
    }

    #[test]
    fn equivalent_descriptions_canonicalize_identically() {
        let d = Layout::bytes(8);
        // contiguous(n, contiguous(m, x)) == contiguous(n*m, x) == bytes(8nm)
        let a = Layout::contiguous(6, &Layout::contiguous(7, &d).unwrap()).unwrap();
        assert_same(&a, &Layout::contiguous(42, &d).unwrap());
        assert_same(&a, &Layout::bytes(336));
        assert_eq!(canon(&a).root(), &dense(336));
        // A vector of contiguous == a vector with a bigger block.
        let v1 = Layout::vector(5, 2, 3, &Layout::contiguous(4, &d).unwrap()).unwrap();
        let v2 = Layout::vector(5, 8, 12, &d).unwrap();
        assert_same(&v1, &v2);
        assert_eq!(canon(&v1).root(), &stream(5, 96, dense(64)));
        // Nested vectors whose strides line up flatten to one stream.
        let row = Layout::hvector(4, 1, 32, &d).unwrap(); // 4 doubles, 32 bytes apart
        let rows = Layout::hvector(3, 1, 128, &Layout::resized(&row, 0, 32).unwrap()).unwrap();
        assert_same(&rows, &Layout::hvector(12, 1, 32, &d).unwrap());
        // A 2D subarray == the equivalent vector at the right displacement.
        let s = Layout::subarray(&[10, 20], &[4, 5], &[2, 3], Order::C, &d).unwrap();
        let v = Layout::vector(4, 5, 20, &d).unwrap();
        let sv = Layout::structure(&[1], &[(2 * 20 + 3) * 8], &[v]).unwrap();
        assert_same(&s, &sv);
        // Fortran order: dimension 0 is fastest.
        let f = Layout::subarray(&[10, 20], &[4, 5], &[2, 3], Order::Fortran, &d).unwrap();
        let fv = Layout::hindexed(
            &[1],
            &[(3 * 10 + 2) * 8],
            &Layout::vector(5, 4, 10, &d).unwrap(),
        )
        .unwrap();
        assert_same(&f, &fv);
        // A 3D subarray == nested hvectors.
        let s3 = Layout::subarray(&[8, 9, 10], &[3, 4, 5], &[1, 2, 3], Order::C, &d).unwrap();
        let inner = Layout::hvector(4, 5, 80, &d).unwrap();
        let outer = Layout::hvector(3, 1, 720, &inner).unwrap();
        let h3 = Layout::hindexed_block(1, &[(720 + 2 * 80 + 3 * 8) as i64], &outer).unwrap();
        assert_same(&s3, &h3);
        // A full subarray is dense.
        let full = Layout::subarray(&[3, 4], &[3, 4], &[0, 0], Order::C, &d).unwrap();
        assert_same(&full, &Layout::bytes(96));
        // A regular indexed is a vector.
        let ix = Layout::indexed(&[2, 2, 2, 2], &[0, 5, 10, 15], &d).unwrap();
        assert_same(&ix, &Layout::vector(4, 2, 5, &d).unwrap());
        // An indexed_block of one element per block, and its hindexed twin.
        let ib = Layout::indexed_block(1, &[0, 3, 6], &d).unwrap();
        assert_same(
            &ib,
            &Layout::hindexed(&[1, 1, 1], &[0, 24, 48], &d).unwrap(),
        );
        // A vector of a struct == an explicit flattening of it (repeated groups).
        let st =
            Layout::structure(&[1, 2], &[0, 8], &[Layout::bytes(4), Layout::bytes(4)]).unwrap();
        let vst = Layout::contiguous(50, &Layout::resized(&st, 0, 24).unwrap()).unwrap();
        assert_same(&vst, &flat_hindexed(&vst.type_map_merged(1000).unwrap()));
        assert!(matches!(
            canon(&vst).root(),
            Node::Stream {
                count: 50,
                stride: 24,
                ..
            }
        ));
        // Large strided layouts (beyond COMPRESS_LIMIT) take the structural path.
        let big1 = Layout::vector(100_000, 3, 7, &Layout::contiguous(2, &d).unwrap()).unwrap();
        let big2 = Layout::hvector(100_000, 6, 112, &d).unwrap();
        assert_same(&big1, &big2);
        let big3 = Layout::subarray(
            &[1000, 1000],
            &[500, 400],
            &[10, 20],
            Order::C,
            &Layout::bytes(4),
        )
        .unwrap();
        let big4 = Layout::hindexed(
            &[1],
            &[(10 * 1000 + 20) * 4],
            &Layout::vector(500, 400, 1000, &Layout::bytes(4)).unwrap(),
        )
        .unwrap();
        assert_same(&big3, &big4);
    }

    /// Randomized versions of the equivalences above.
    #[test]
    fn prop_equivalences_random_parameters() {
        let mut rng = StdRng::seed_from_u64(0x7e3d_0003);
        for _ in 0..500 {
            let x = Layout::bytes(rng.gen_range(1..=16));
            let (n, m, bl) = (
                rng.gen_range(1..2000u64),
                rng.gen_range(1..40u64),
                rng.gen_range(1..5u64),
            );
            let stride = rng.gen_range(-6i64..12);
            assert_same(
                &Layout::contiguous(n, &Layout::contiguous(m, &x).unwrap()).unwrap(),
                &Layout::contiguous(n * m, &x).unwrap(),
            );
            assert_same(
                &Layout::vector(n, bl, stride, &Layout::contiguous(m, &x).unwrap()).unwrap(),
                &Layout::vector(n, bl * m, stride * m as i64, &x).unwrap(),
            );
            let e = x.extent();
            assert_same(
                &Layout::vector(n, bl, stride, &x).unwrap(),
                &Layout::hvector(n, bl, stride * e, &x).unwrap(),
            );
            // 2D subarray (either order) vs the vector it describes.
            let (rows, cols) = (rng.gen_range(1..60u64), rng.gen_range(1..60u64));
            let (r0, c0) = (rng.gen_range(0..rows), rng.gen_range(0..cols));
            let (nr, nc) = (rng.gen_range(1..=rows - r0), rng.gen_range(1..=cols - c0));
            let s = Layout::subarray(&[rows, cols], &[nr, nc], &[r0, c0], Order::C, &x).unwrap();
            let v = Layout::vector(nr, nc, cols as i64, &x).unwrap();
            let sv = Layout::hindexed(&[1], &[((r0 * cols + c0) as i64) * e], &v).unwrap();
            assert_same(&s, &sv);
            let f =
                Layout::subarray(&[cols, rows], &[nc, nr], &[c0, r0], Order::Fortran, &x).unwrap();
            assert_same(&f, &sv);
        }
    }

    /// A nest whose pieces happen to form longer runs across levels: structurally a clean
    /// chain, and the compressor recognizes the chain from the bytes.
    #[test]
    fn chain_with_runs_across_levels() {
        let d = Layout::bytes(4);
        let l1 = Layout::hvector(2, 1, 10, &d).unwrap();
        let l2 = Layout::hvector(2, 1, 100, &l1).unwrap();
        let l3 = Layout::hvector(2, 1, 120, &l2).unwrap();
        let c = canon(&l3);
        assert_eq!(
            c.root(),
            &stream(2, 120, stream(2, 100, stream(2, 10, dense(4))))
        );
        assert_same(&l3, &flat_hindexed(&l3.type_map_merged(100).unwrap()));
    }

    /// Pieces that touch across levels: the merged bytes decide.
    #[test]
    fn touching_across_levels() {
        let d = Layout::bytes(4);
        let inner = Layout::hvector(2, 1, 8, &d).unwrap();
        let outer = Layout::hvector(2, 1, 12, &inner).unwrap();
        let c = canon(&outer);
        assert_eq!(
            c.segments(10).unwrap(),
            vec![Segment::new(0, 4), Segment::new(8, 8), Segment::new(20, 4)]
        );
        assert_same(
            &outer,
            &Layout::hindexed(&[1, 2, 1], &[0, 8, 20], &d).unwrap(),
        );
    }

    #[test]
    fn different_orders_differ_but_unordered_forms_agree() {
        let d = Layout::bytes(4);
        let a = Layout::hvector(2, 1, 100, &Layout::hvector(3, 1, 8, &d).unwrap()).unwrap();
        let b = Layout::hvector(3, 1, 8, &Layout::hvector(2, 1, 100, &d).unwrap()).unwrap();
        assert_ne!(canon(&a), canon(&b));
        assert_ne!(canon(&a).hash128(), canon(&b).hash128());
        let (ua, ub) = (canon(&a).unordered(), canon(&b).unordered());
        assert_eq!(ua, ub);
        assert!(!ua.is_ordered());
        assert_ne!(ua.hash128(), canon(&a).hash128());
        // Negative strides flip in the unordered form; dense folding applies after sorting.
        let n = Layout::hvector(3, 1, -4, &d).unwrap();
        assert_eq!(canon(&n).root(), &stream(3, -4, dense(4)));
        let un = canon(&n).unordered();
        assert_eq!((un.offset(), un.root()), (-8, &dense(12)));
        // Unordered forms keep the byte multiset.
        let mut rng = StdRng::seed_from_u64(0x7e3d_0004);
        for _ in 0..500 {
            let l = random_layout(&mut rng, 3);
            let Ok(mut naive) = l.type_map(5000) else {
                continue;
            };
            let u = canon(&l).unordered();
            let mut got = u.segments(1 << 20).unwrap();
            let bytes = |v: &mut Vec<Segment>| {
                let mut b: Vec<i64> = v.iter().flat_map(|s| s.offset..s.end()).collect();
                b.sort();
                b
            };
            assert_eq!(bytes(&mut got), bytes(&mut naive), "{l:?}");
        }
    }

    #[test]
    fn hash_is_stable() {
        // Golden values: the hash is a wire-visible memoization key and must not drift.
        let d = Layout::bytes(8);
        let v = Layout::vector(5, 2, 3, &d).unwrap();
        assert_eq!(canon(&v).encode().unwrap(), vec![1, 0, 0, 1, 5, 48, 0, 16]);
        assert_eq!(
            canon(&v).hash128(),
            layout_hash(&[1, 0, 0, 1, 5, 48, 0, 16])
        );
        // XXH3-128 of the empty input (seed 0), the reference implementation's value.
        assert_eq!(layout_hash(b""), 0x99aa06d3014798d86001c324468d497f);
        assert_eq!(
            Canon::empty().hash128(),
            layout_hash(&Canon::empty().encode().unwrap())
        );
    }
}
