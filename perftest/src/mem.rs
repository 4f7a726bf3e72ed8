//! Message memory of the UCP tests, and `rucx-perftest`'s one room for `unsafe` (STYLE.md
//! §6).
//!
//! A non-blocking `ucp` operation uses the caller's memory until it completes, so a
//! [`ucp::Buf`] is made by an `unsafe` constructor whose contract is "valid until every
//! operation on it has completed, and not touched by anyone else meanwhile". A [`Region`]
//! keeps the first half of that promise by construction: it is allocated once for a run
//! and never freed. The second half is kept by the tests' structure: they fill a send
//! region or check a receive region ([`Region::fill`], [`Region::check`]) only when they
//! have seen every operation on it complete. The one deliberate exception, as in
//! `ucx_perftest`, is a bandwidth test keeping several receives in flight into one shared
//! region (and several sends reading one shared region, which the contract allows). Those
//! receive bytes are written only by `ucp`'s operations — the worker on this thread, or,
//! for a put rendezvous, the peer process through its transport — and read by nobody in
//! this process, so the overlap can cost their contents (which nothing reads unless
//! `--validate`, and then every message in flight has a region of its own) but never
//! soundness here.
//!
//! This module never makes a Rust reference to a region's bytes: it reads and writes them
//! through the raw pointer only, so no `&`/`&mut` can alias what `ucp` or a peer's
//! transport does with them.

use std::alloc::{alloc_zeroed, Layout};
use std::ptr::NonNull;

use ucp::{Buf, Data};

/// Alignment of message buffers (a page, as `ucx_perftest` allocates them).
const ALIGN: usize = 4096;

/// `len` bytes that live until the process exits.
#[derive(Clone, Copy, Debug)]
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
}

impl Region {
    /// Allocates `len` zeroed bytes for the rest of the process (a run's message buffers
    /// are needed until its last operation completes, which is at the run's end).
    pub fn new(len: usize) -> Result<Region, String> {
        if len == 0 {
            return Ok(Region {
                ptr: NonNull::dangling(),
                len: 0,
            });
        }
        let err = || format!("cannot allocate a {len}-byte message buffer");
        let layout = Layout::from_size_align(len, ALIGN).map_err(|_| err())?;
        // SAFETY: `layout` has a non-zero size (len > 0 was checked above).
        let p = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or_else(err)?;
        Ok(Region { ptr, len })
    }

    /// The whole region as one `ucp` buffer.
    fn buf(&self) -> Buf {
        // SAFETY: the `len` bytes at `ptr` are one live allocation that is never freed
        // (`new`), so they stay allocated until any operation completes. That nobody else
        // touches them while an operation runs is the tests' part, described in the module
        // documentation (with its one overlap, harmless to this process); this module only
        // reaches the bytes through raw pointers, so no Rust reference aliases them.
        unsafe { Buf::from_raw(self.ptr.as_ptr(), self.len) }
    }

    /// The region as operation data: one contiguous buffer (`parts == None`), or the iov
    /// list of `parts`' lengths laid back to back from the start, as `ucx_perftest` splits
    /// its buffer for `-D iov`. Panics if `parts` add up to more than the region.
    pub fn data(&self, parts: Option<&[usize]>) -> Data {
        self.data_with_gap(parts, 0)
    }

    /// As [`Region::data`], with `gap` bytes between consecutive iov entries (the region
    /// must hold the entries and the gaps).
    pub fn data_with_gap(&self, parts: Option<&[usize]>, gap: usize) -> Data {
        let whole = self.buf();
        match parts {
            None => Data::Contig(whole),
            Some(parts) => {
                let mut off = 0;
                Data::Iov(
                    parts
                        .iter()
                        .map(|&n| {
                            let b = whole.sub(off, n).expect("iov entries inside the region");
                            off += n + gap;
                            b
                        })
                        .collect(),
                )
            }
        }
    }

    /// Writes the test pattern for `seed` over the whole region. Only while no operation
    /// on the region is in flight.
    pub fn fill(&self, seed: u64) {
        for i in 0..self.len {
            // SAFETY: i < len, inside the live allocation; a raw write, no reference made.
            unsafe { self.ptr.as_ptr().add(i).write(pattern(i, seed)) }
        }
    }

    /// Writes `v` (native endian) at `off`, which must leave room for 8 bytes. Only while no
    /// operation on the region is in flight.
    pub fn set_u64(&self, off: usize, v: u64) {
        assert!(off + 8 <= self.len, "set_u64 outside the region");
        // SAFETY: the 8 bytes at `off` lie inside the live allocation (checked); an
        // unaligned raw write, no reference made.
        unsafe { self.ptr.as_ptr().add(off).cast::<u64>().write_unaligned(v) }
    }

    /// Sets every byte to `b`. Only while no operation on the region is in flight.
    pub fn clear(&self, b: u8) {
        // SAFETY: `len` bytes from `ptr` are the live allocation; a raw write.
        unsafe { self.ptr.as_ptr().write_bytes(b, self.len) }
    }

    /// Whether the first `n` bytes hold the pattern for `seed`; the offset of the first
    /// byte that does not, otherwise. Only while no operation on the region is in flight.
    pub fn check(&self, n: usize, seed: u64) -> Result<(), usize> {
        for i in 0..n.min(self.len) {
            // SAFETY: i < len, inside the live allocation; a raw read, no reference made.
            let b = unsafe { self.ptr.as_ptr().add(i).read() };
            if b != pattern(i, seed) {
                return Err(i);
            }
        }
        if n > self.len {
            return Err(self.len);
        }
        Ok(())
    }
}

/// Byte `i` of the test message for `seed`: differs between neighbouring offsets, across
/// 256-byte periods and between seeds, so misplaced, stale or mixed-up data shows.
pub fn pattern(i: usize, seed: u64) -> u8 {
    let x = (i as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
    (x >> 56) as u8 ^ (x >> 24) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_then_check_and_detect_changes() {
        let r = Region::new(1000).unwrap();
        assert!(r.check(1000, 1).is_err(), "zeroed, not the pattern");
        r.fill(7);
        assert_eq!(r.check(1000, 7), Ok(()));
        assert!(r.check(1000, 8).is_err());
        assert_eq!(r.check(1001, 7), Err(1000));
        r.clear(0);
        assert!(r.check(1000, 7).is_err());
    }

    #[test]
    fn pattern_differs_by_offset_and_seed() {
        let a: Vec<u8> = (0..4096).map(|i| pattern(i, 1)).collect();
        let b: Vec<u8> = (0..4096).map(|i| pattern(i, 2)).collect();
        assert_ne!(a, b);
        assert_ne!(a[..256], a[256..512]);
    }

    #[test]
    fn iov_data_splits_back_to_back() {
        let r = Region::new(30).unwrap();
        match r.data(Some(&[10, 0, 20])) {
            Data::Iov(v) => {
                assert_eq!(v.iter().map(Buf::len).collect::<Vec<_>>(), [10, 0, 20]);
                assert_eq!(v[2].addr() - v[0].addr(), 10);
            }
            d => panic!("{d:?}"),
        }
        assert!(matches!(r.data(None), Data::Contig(b) if b.len() == 30));
        assert!(matches!(Region::new(0).unwrap().data(None), Data::Contig(b) if b.is_empty()));
    }
}
