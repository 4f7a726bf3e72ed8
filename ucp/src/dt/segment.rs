//! Pieces of a layout (`(offset, len)` segments) and the bounds every layout lives in.

/// Largest absolute byte offset (of data or of an lb/ub marker) a layout may have: `2^61`.
/// Keeping offsets this small lets every stride, span and difference of offsets fit an `i64`.
pub const MAX_ABS_OFFSET: i64 = 1 << 61;

/// Largest `size` (bytes of data) a layout may have: `2^61`.
pub const MAX_SIZE: u64 = 1 << 61;

/// One contiguous piece of a layout: `len` bytes at `offset` bytes from the buffer origin
/// (MPI's `buf` pointer; offsets may be negative, as in MPI).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Segment {
    pub offset: i64,
    pub len: u64,
}

impl Segment {
    pub const fn new(offset: i64, len: u64) -> Self {
        Segment { offset, len }
    }

    /// First offset past the segment.
    pub const fn end(&self) -> i64 {
        self.offset + self.len as i64
    }
}

/// Merges adjacent pieces (one ends where the next, in order, begins) and drops empty ones.
/// Order is kept: pieces that touch only out of order are not merged.
pub fn merge_segments(pieces: &[Segment]) -> Vec<Segment> {
    let mut out: Vec<Segment> = Vec::with_capacity(pieces.len());
    for p in pieces.iter().filter(|p| p.len > 0) {
        match out.last_mut() {
            Some(last) if last.end() == p.offset => last.len += p.len,
            _ => out.push(*p),
        }
    }
    out
}
