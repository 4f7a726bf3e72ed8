//! The transports. Each module is one transport, complete in itself; the smallest,
//! [`self_`], is the place to start reading.
//!
//! The functions here are the transports' shared pieces (iov copies, cutting two lists of
//! segments into common pieces): on the bottom floor of `uct`, they name no transport.
//! What the transports share with the registry (discovery, opening by name) is in
//! [`crate::component`], above them (`docs/layers.md`).

pub mod cma;
#[cfg(feature = "cuda")]
pub mod cuda_copy;
#[cfg(feature = "cuda")]
pub mod cuda_ipc;
#[cfg(feature = "mock")]
pub mod mock_dev;
pub mod ofi;
pub mod posix;
pub mod rc_verbs;
pub mod self_;
pub mod tcp;
pub mod verbs;
pub mod xpmem;

/// Copies between the local iov list and this process's range at `remote_addr`, entry
/// after entry, through `ucs::memtype::copy` (any memory types, the driver where needed):
/// the synchronous path of the in-process transports (`cuda_copy`, `mock_dev`). `put`
/// writes the range, else it is read.
///
/// # Safety
/// Every iov entry is valid for its length; the remote range is memory of this process,
/// valid for the iov's total length.
#[cfg(any(feature = "cuda", feature = "mock"))]
pub(crate) unsafe fn copy_in_process(
    iov: &[crate::Iov],
    remote_addr: u64,
    put: bool,
) -> ucs::UcsResult<()> {
    use ucs::memtype::{copy, mem_type};
    let mut at = remote_addr;
    for v in iov {
        let (local, remote) = (mem_type(v.buffer), mem_type(at as *const u8));
        // SAFETY: per the contract.
        unsafe {
            if put {
                copy(at as *mut u8, remote, v.buffer, local, v.length)?;
            } else {
                copy(v.buffer, local, at as *const u8, remote, v.length)?;
            }
        }
        at += v.length as u64;
    }
    Ok(())
}

/// The pieces of two lists of `(address, length)` that hold the same bytes cut
/// differently: one piece between every two boundaries of either list (and no longer than
/// `max`, which is at least 1), as `(i, a_at, j, b_at, n)`, where `i` and `j` are the entries
/// of `a` and `b` the piece lies in. Zero-length entries give no piece; the walk ends with
/// the shorter list. What cma's gather, `rc_verbs`' work requests and the software HCA
/// model's copies are cut by.
pub(crate) fn pieces<'a>(a: &'a [(u64, u64)], b: &'a [(u64, u64)], max: u64) -> Pieces<'a> {
    Pieces {
        a,
        b,
        max: max.max(1),
        i: 0,
        ao: 0,
        j: 0,
        bo: 0,
    }
}

/// The iterator of [`pieces`].
pub(crate) struct Pieces<'a> {
    a: &'a [(u64, u64)],
    b: &'a [(u64, u64)],
    max: u64,
    i: usize,
    ao: u64,
    j: usize,
    bo: u64,
}

impl Iterator for Pieces<'_> {
    type Item = (usize, u64, usize, u64, u64);

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (&(aa, al), &(ba, bl)) = (self.a.get(self.i)?, self.b.get(self.j)?);
            let n = (al - self.ao).min(bl - self.bo).min(self.max);
            let piece = (self.i, aa + self.ao, self.j, ba + self.bo, n);
            self.ao += n;
            self.bo += n;
            if self.ao == al {
                self.i += 1;
                self.ao = 0;
            }
            if self.bo == bl {
                self.j += 1;
                self.bo = 0;
            }
            if n > 0 {
                return Some(piece);
            }
        }
    }
}

/// Copies `src` into the iov list in order; returns bytes copied.
pub(crate) fn scatter(src: &[u8], iov: &[crate::Iov]) -> usize {
    let mut off = 0;
    for v in iov {
        let n = v.length.min(src.len() - off);
        // SAFETY: the caller of the zcopy operation guarantees each iov entry is writable
        // for `length` bytes; `n` is within both buffers.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr().add(off), v.buffer, n) };
        off += n;
        if off == src.len() {
            break;
        }
    }
    off
}

/// Copies the bytes of the iov list, in order, into `dst`; returns bytes copied.
pub(crate) fn gather(iov: &[crate::Iov], dst: &mut [u8]) -> usize {
    let mut off = 0;
    for v in iov {
        let n = v.length.min(dst.len() - off);
        // SAFETY: the caller of the zcopy operation guarantees each iov entry is readable
        // for `length` bytes; `n` is within both buffers.
        unsafe { std::ptr::copy_nonoverlapping(v.buffer, dst.as_mut_ptr().add(off), n) };
        off += n;
        if off == dst.len() {
            break;
        }
    }
    off
}

#[cfg(test)]
mod tests {
    #[test]
    fn pieces_cut_at_every_boundary_of_either_list() {
        let a = [(100, 5), (200, 0), (300, 7)];
        let b = [(1000, 3), (2000, 9)];
        let p: Vec<_> = super::pieces(&a, &b, u64::MAX).collect();
        assert_eq!(
            p,
            vec![
                (0, 100, 0, 1000, 3),
                (0, 103, 1, 2000, 2),
                (2, 300, 1, 2002, 7)
            ]
        );
        let p: Vec<_> = super::pieces(&a, &b, 2).collect();
        assert_eq!(p.iter().map(|x| x.4).sum::<u64>(), 12);
        assert!(p.iter().all(|x| x.4 <= 2));
        // The shorter list ends the walk.
        assert_eq!(super::pieces(&a, &b[..1], u64::MAX).count(), 1);
    }
}
