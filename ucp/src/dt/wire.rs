//! The compact encoding of a [`Canon`] and its checked decoder (peers send these).
//!
//! ```text
//! canon  := version:u8 (= 1)  flags:u8 (bit 0: unordered; others 0)  offset:svarint  node
//! node   := 0x00 len:uvarint                                  Dense (len >= 1)
//!         | 0x01 count:uvarint stride:svarint node             Stream (count >= 2)
//!         | 0x02 n:uvarint (offset:svarint node){n}            Blocks (n >= 2, first offset 0)
//! empty  := version 0x00|flags 0x00 0x00 0x00                  (offset 0, Dense len 0)
//! ```
//!
//! `uvarint` is unsigned LEB128 of a `u64` in its shortest form; `svarint` is the zigzag
//! mapping of an `i64` in a `uvarint`. The decoder rejects: another version or unknown flag
//! bits, a varint longer than 10 bytes, overflowing or not in its shortest form, an unknown
//! tag, nesting deeper than [`MAX_WIRE_DEPTH`], a `Blocks` count larger than the bytes left
//! could hold, trailing bytes, a size above [`MAX_SIZE`](super::MAX_SIZE) or an offset
//! beyond [`MAX_ABS_OFFSET`](super::MAX_ABS_OFFSET), and anything a canonical form never
//! contains (a zero-length dense node, a stream of count < 2, a stream the folding or
//! flattening rules would rewrite, a `Blocks` with < 2 entries, a nested `Blocks` entry,
//! touching dense neighbours, a first entry not at 0). It never panics and allocates at
//! most in proportion to its input.

use super::canon::{Blocks, Canon, Node};
use super::error::DtError;
use super::segment::{MAX_ABS_OFFSET, MAX_SIZE};

/// Version byte of the encoding.
pub const WIRE_VERSION: u8 = 1;

/// Deepest tree the decoder accepts (and the encoder produces).
pub const MAX_WIRE_DEPTH: usize = 64;

const TAG_DENSE: u8 = 0;
const TAG_STREAM: u8 = 1;
const TAG_BLOCKS: u8 = 2;
const FLAG_UNORDERED: u8 = 1;

fn put_u(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_s(out: &mut Vec<u8>, v: i64) {
    put_u(out, ((v << 1) ^ (v >> 63)) as u64);
}

pub(crate) fn write_node(n: &Node, out: &mut Vec<u8>) {
    match n {
        Node::Dense { len } => {
            out.push(TAG_DENSE);
            put_u(out, *len);
        }
        Node::Stream {
            count,
            stride,
            child,
        } => {
            out.push(TAG_STREAM);
            put_u(out, *count);
            put_s(out, *stride);
            write_node(child, out);
        }
        Node::Blocks(b) => {
            out.push(TAG_BLOCKS);
            put_u(out, b.entries().len() as u64);
            for (o, e) in b.entries() {
                put_s(out, *o);
                write_node(e, out);
            }
        }
    }
}

impl Canon {
    /// The encoding without the depth check (what the hash covers).
    pub(crate) fn serialize(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        out.push(WIRE_VERSION);
        out.push(if self.ordered { 0 } else { FLAG_UNORDERED });
        put_s(&mut out, self.offset);
        write_node(&self.root, &mut out);
        out
    }

    /// The compact encoding (the wire format in the [`dt` module docs](super)). Fails only
    /// for trees deeper than [`MAX_WIRE_DEPTH`].
    pub fn encode(&self) -> Result<Vec<u8>, DtError> {
        let depth = self.root.depth();
        if depth > MAX_WIRE_DEPTH {
            return Err(DtError::TooDeep { depth });
        }
        Ok(self.serialize())
    }

    /// Decodes and validates a peer-supplied encoding: every length, count and depth is
    /// bounded, ranges are checked, and anything a canonical form never contains is
    /// rejected with [`DtError::Malformed`]. Never panics; allocates in proportion to the input.
    pub fn decode(bytes: &[u8]) -> Result<Canon, DtError> {
        let mut r = Reader { buf: bytes, pos: 0 };
        if r.byte()? != WIRE_VERSION {
            return Err(DtError::Malformed("unknown version"));
        }
        let flags = r.byte()?;
        if flags & !FLAG_UNORDERED != 0 {
            return Err(DtError::Malformed("unknown flags"));
        }
        let ordered = flags & FLAG_UNORDERED == 0;
        let offset = r.svarint()?;
        if bytes.get(r.pos..) == Some(&[TAG_DENSE, 0][..]) {
            return if offset == 0 && ordered {
                Ok(Canon::empty())
            } else {
                Err(DtError::Malformed("bad empty form"))
            };
        }
        let root = r.node(1)?;
        if r.pos != bytes.len() {
            return Err(DtError::Malformed("trailing bytes"));
        }
        if offset.unsigned_abs() > MAX_ABS_OFFSET as u64 {
            return Err(DtError::Malformed("offset out of range"));
        }
        Canon::from_parts(offset, root, ordered)
            .map_err(|_| DtError::Malformed("size or offset out of range"))
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, DtError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(DtError::Malformed("truncated"))?;
        self.pos += 1;
        Ok(b)
    }

    fn uvarint(&mut self) -> Result<u64, DtError> {
        let mut v: u64 = 0;
        for i in 0..10 {
            let b = self.byte()?;
            let bits = (b & 0x7f) as u64;
            if i == 9 && b > 1 {
                return Err(DtError::Malformed("varint overflow"));
            }
            v |= bits << (7 * i);
            if b & 0x80 == 0 {
                if i > 0 && b == 0 {
                    return Err(DtError::Malformed("varint not minimal"));
                }
                return Ok(v);
            }
        }
        Err(DtError::Malformed("varint too long"))
    }

    fn svarint(&mut self) -> Result<i64, DtError> {
        let u = self.uvarint()?;
        Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
    }

    /// Reads a node; checks the canonical invariants and the size/offset ranges.
    fn node(&mut self, depth: usize) -> Result<Node, DtError> {
        if depth > MAX_WIRE_DEPTH {
            return Err(DtError::Malformed("nested too deep"));
        }
        let n = match self.byte()? {
            TAG_DENSE => {
                let len = self.uvarint()?;
                if len == 0 || len > MAX_SIZE {
                    return Err(DtError::Malformed("dense length out of range"));
                }
                Node::Dense { len }
            }
            TAG_STREAM => {
                let count = self.uvarint()?;
                let stride = self.svarint()?;
                if count < 2 {
                    return Err(DtError::Malformed("stream count below 2"));
                }
                if stride.unsigned_abs() > MAX_ABS_OFFSET as u64 {
                    return Err(DtError::Malformed("stride out of range"));
                }
                let child = self.node(depth + 1)?;
                match &child {
                    Node::Dense { len } if *len as i64 == stride => {
                        return Err(DtError::Malformed("stream not dense-folded"));
                    }
                    Node::Stream {
                        count: c2,
                        stride: s2,
                        ..
                    } if stride as i128 == *c2 as i128 * *s2 as i128 => {
                        return Err(DtError::Malformed("stream not flattened"));
                    }
                    _ => {}
                }
                let size = count
                    .checked_mul(child.size())
                    .ok_or(DtError::Malformed("size overflow"))?;
                let span = (count as i128 - 1) * stride as i128;
                if size > MAX_SIZE || span.abs() > 2 * MAX_ABS_OFFSET as i128 {
                    return Err(DtError::Malformed("stream out of range"));
                }
                Node::Stream {
                    count,
                    stride,
                    child: Box::new(child),
                }
            }
            TAG_BLOCKS => {
                let n = self.uvarint()?;
                let left = (self.buf.len() - self.pos) as u64;
                if n < 2 || n > left / 3 {
                    return Err(DtError::Malformed("bad block count"));
                }
                let mut entries: Vec<(i64, Node)> = Vec::with_capacity(n as usize);
                let mut size: u64 = 0;
                for i in 0..n {
                    let off = self.svarint()?;
                    if off.unsigned_abs() > 2 * MAX_ABS_OFFSET as u64 || (i == 0 && off != 0) {
                        return Err(DtError::Malformed("bad block offset"));
                    }
                    let e = self.node(depth + 1)?;
                    if matches!(e, Node::Blocks(_)) {
                        return Err(DtError::Malformed("nested block list"));
                    }
                    if let (Some((po, Node::Dense { len: pl })), Node::Dense { .. }) =
                        (entries.last(), &e)
                    {
                        if *po as i128 + *pl as i128 == off as i128 {
                            return Err(DtError::Malformed("touching dense entries"));
                        }
                    }
                    size = size
                        .checked_add(e.size())
                        .ok_or(DtError::Malformed("size overflow"))?;
                    if size > MAX_SIZE {
                        return Err(DtError::Malformed("size out of range"));
                    }
                    entries.push((off, e));
                }
                Node::Blocks(Blocks::new(entries))
            }
            _ => return Err(DtError::Malformed("unknown node tag")),
        };
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testgen::random_layout;
    use super::super::{Cursor, Segment};
    use super::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    #[test]
    fn prop_round_trip() {
        let mut rng = StdRng::seed_from_u64(0x3170_0001);
        for _ in 0..2000 {
            let l = random_layout(&mut rng, 4);
            let c = l.canonical().unwrap();
            let bytes = c.encode().unwrap();
            let d = Canon::decode(&bytes).unwrap();
            assert_eq!(&d, c);
            assert_eq!(d.hash128(), c.hash128());
            let u = c.unordered();
            assert_eq!(Canon::decode(&u.encode().unwrap()).unwrap(), u);
        }
        let e = Canon::empty();
        assert_eq!(e.encode().unwrap(), vec![1, 0, 0, 0, 0]);
        assert_eq!(Canon::decode(&[1, 0, 0, 0, 0]).unwrap(), e);
    }

    /// Walks a decoded form a little, to show that what the decoder accepts is usable.
    fn exercise(c: &Canon) {
        let mut cur = Cursor::new(c, c.size() / 2).unwrap();
        let mut v: Vec<Segment> = Vec::new();
        cur.fill(&mut v, 8, 1 << 20);
        assert!(v.len() <= 8);
    }

    #[test]
    fn prop_random_bytes_never_panic() {
        let mut rng = StdRng::seed_from_u64(0x3170_0002);
        let mut ok = 0;
        for _ in 0..100_000 {
            let n = rng.gen_range(0..48);
            let mut b: Vec<u8> = (0..n).map(|_| rng.gen()).collect();
            if n > 0 {
                b[0] = WIRE_VERSION;
            }
            if n > 1 {
                b[1] &= 1;
            }
            if n > 3 {
                b[3] %= 3;
            }
            if let Ok(c) = Canon::decode(&b) {
                ok += 1;
                exercise(&c);
                assert_eq!(Canon::decode(&c.encode().unwrap()).unwrap(), c);
            }
        }
        assert!(ok > 0, "no random input decoded at all");
    }

    #[test]
    fn prop_mutated_encodings_never_panic() {
        let mut rng = StdRng::seed_from_u64(0x3170_0003);
        for _ in 0..3000 {
            let l = random_layout(&mut rng, 4);
            let good = l.canonical().unwrap().encode().unwrap();
            for _ in 0..10 {
                let mut b = good.clone();
                match rng.gen_range(0..4) {
                    0 => {
                        let i = rng.gen_range(0..b.len());
                        b[i] = rng.gen();
                    }
                    1 => b.truncate(rng.gen_range(0..b.len())),
                    2 => b.insert(rng.gen_range(0..=b.len()), rng.gen()),
                    _ => {
                        let i = rng.gen_range(0..b.len());
                        b[i] ^= 1 << rng.gen_range(0..8);
                    }
                }
                if let Ok(c) = Canon::decode(&b) {
                    exercise(&c);
                }
            }
        }
    }

    #[test]
    fn malformed_inputs_are_rejected() {
        let bad: &[&[u8]] = &[
            &[],
            &[2, 0, 0, 0, 8],          // version
            &[1, 2, 0, 0, 8],          // flags
            &[1, 0, 0, 0, 0, 0],       // trailing after empty
            &[1, 0, 0, 0, 8, 0],       // trailing
            &[1, 0, 0, 0],             // truncated
            &[1, 0, 0, 0, 0x88, 0x00], // non-minimal varint
            &[
                1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f,
            ], // overflow
            &[1, 0, 0, 1, 1, 4, 0, 8], // count 1
            &[1, 0, 0, 1, 3, 16, 0, 8], // stride == len: not folded
            &[1, 0, 0, 1, 2, 96, 1, 3, 32, 0, 8], // stride 48 == 3 * 16: not flattened
            &[1, 0, 0, 2, 1, 0, 0, 8], // one entry
            &[1, 0, 0, 2, 0xff, 0xff, 0x03, 0, 0, 8], // block count beyond input
            &[1, 0, 0, 2, 2, 2, 0, 8, 0, 0, 8], // first entry not at 0
            &[1, 0, 0, 2, 2, 0, 0, 8, 16, 0, 8], // touching dense entries
            &[1, 0, 0, 7, 0],          // unknown tag
            &[1, 0, 2, 0, 0],          // empty with an offset
            &[
                1, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 0x10, 0, 8,
            ], // size overflow
        ];
        for b in bad {
            assert!(
                matches!(Canon::decode(b), Err(DtError::Malformed(_))),
                "{b:?} -> {:?}",
                Canon::decode(b)
            );
        }
        // A depth bomb: thousands of nested streams fail cleanly, without deep recursion.
        let mut bomb = vec![1, 0, 0];
        for _ in 0..10_000 {
            bomb.extend_from_slice(&[1, 2, 100]);
        }
        bomb.extend_from_slice(&[0, 1]);
        assert!(matches!(Canon::decode(&bomb), Err(DtError::Malformed(_))));
        // The encoder refuses what the decoder would.
        let mut n = Node::Dense { len: 1 };
        for i in 0..70 {
            n = Node::Blocks(Blocks::new(vec![(0, n), (10 + i, Node::Dense { len: 1 })]));
        }
        let c = Canon::from_parts(0, n, true).unwrap();
        assert!(matches!(c.encode(), Err(DtError::TooDeep { depth: 71 })));
    }
}
