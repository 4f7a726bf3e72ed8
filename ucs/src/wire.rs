//! Checked little-endian reading and writing of address blobs and headers. Every read is
//! bounds-checked: a short or malformed blob gives `None`, never a panic.

#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    #[inline]
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf }
    }
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.buf.len() < n {
            return None;
        }
        let (a, b) = self.buf.split_at(n);
        self.buf = b;
        Some(a)
    }
    #[inline]
    pub fn u8(&mut self) -> Option<u8> {
        Some(self.bytes(1)?[0])
    }
    #[inline]
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }
    #[inline]
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    #[inline]
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// The bytes not read yet.
    #[inline]
    pub fn rest(&self) -> &'a [u8] {
        self.buf
    }
    /// How many bytes are left.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }
}

#[derive(Debug)]
pub struct Writer {
    pub buf: Vec<u8>,
}

/// What a new writer's buffer holds before it grows: every control message and key of
/// the protocols fits, so building one costs one allocation, not a reallocation per
/// doubling (a remote key packed from an empty vector took four, 2,500 instructions).
const FIRST: usize = 128;

impl Default for Writer {
    fn default() -> Self {
        Writer::with_capacity(FIRST)
    }
}

impl Writer {
    pub fn new() -> Self {
        Writer::default()
    }
    /// A writer whose buffer holds `n` bytes before it grows (for messages whose size is
    /// known: one allocation, no reallocation on the way).
    pub fn with_capacity(n: usize) -> Self {
        Writer {
            buf: Vec::with_capacity(n),
        }
    }
    pub fn u8(mut self, v: u8) -> Self {
        self.buf.push(v);
        self
    }
    pub fn u16(mut self, v: u16) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u32(mut self, v: u32) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn u64(mut self, v: u64) -> Self {
        self.buf.extend_from_slice(&v.to_le_bytes());
        self
    }
    pub fn bytes(mut self, v: &[u8]) -> Self {
        self.buf.extend_from_slice(v);
        self
    }
}

/// Copies `src` into `dst` (of the same length). Messages on the latency path are often a
/// few bytes, where a call to `memcpy` costs more than the copy: up to 64 bytes are moved
/// with at most four (overlapping) loads and stores of 16 bytes, or two of a machine word.
#[inline(always)]
pub fn copy(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy between slices of different lengths");
    if n > 64 {
        dst.copy_from_slice(src);
    } else if n > 16 {
        // Two 16-byte pieces, overlapping where n < 32, cover 17..=32 bytes; up to 64, the
        // first and last 32 bytes are covered the same way.
        let w = |at: usize| u128::from_ne_bytes(src[at..at + 16].try_into().expect("16 bytes"));
        let (a, b) = (w(0), w(n - 16));
        if n > 32 {
            let (c, d) = (w(16), w(n - 32));
            dst[16..32].copy_from_slice(&c.to_ne_bytes());
            dst[n - 32..n - 16].copy_from_slice(&d.to_ne_bytes());
        }
        dst[..16].copy_from_slice(&a.to_ne_bytes());
        dst[n - 16..].copy_from_slice(&b.to_ne_bytes());
    } else if n >= 8 {
        let a = u64::from_ne_bytes(src[..8].try_into().expect("8 bytes"));
        let b = u64::from_ne_bytes(src[n - 8..].try_into().expect("8 bytes"));
        dst[..8].copy_from_slice(&a.to_ne_bytes());
        dst[n - 8..].copy_from_slice(&b.to_ne_bytes());
    } else if n >= 4 {
        let a = u32::from_ne_bytes(src[..4].try_into().expect("4 bytes"));
        let b = u32::from_ne_bytes(src[n - 4..].try_into().expect("4 bytes"));
        dst[..4].copy_from_slice(&a.to_ne_bytes());
        dst[n - 4..].copy_from_slice(&b.to_ne_bytes());
    } else if n > 0 {
        dst[0] = src[0];
        dst[n / 2] = src[n / 2];
        dst[n - 1] = src[n - 1];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_moves_every_length_exactly() {
        let src: Vec<u8> = (1..=100).collect();
        for n in 0..=100 {
            let mut dst = vec![0u8; n + 2];
            copy(&mut dst[1..n + 1], &src[..n]);
            assert_eq!(&dst[1..n + 1], &src[..n], "length {n}");
            assert_eq!((dst[0], dst[n + 1]), (0, 0), "length {n} wrote outside");
        }
    }

    #[test]
    fn reader_refuses_short_input() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u16(), Some(0x0201));
        assert_eq!(r.u16(), None);
        assert_eq!(r.u8(), Some(3));
        assert!(r.is_empty());
    }
}
