//! Endpoint handles and the small types of the endpoint operations.

/// An endpoint of one interface. Handles are reused after `ep_destroy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EpId(pub u32);

impl EpId {
    #[inline]
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// A completion token: the caller's name for a zero-copy operation or flush.
pub type Comp = u64;

/// Whether an operation finished when it was posted (`UCS_OK`) or completes later through
/// `Handler::completion` (`UCS_INPROGRESS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Done {
    Now,
    Later,
}

/// One entry of a zero-copy gather/scatter list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Iov {
    pub buffer: *mut u8,
    pub length: usize,
}

// SAFETY: an Iov is a plain address/length pair; the unsafe zero-copy calls that
// dereference it carry the validity contract.
unsafe impl Send for Iov {}

impl Iov {
    pub fn from_slice(s: &[u8]) -> Iov {
        Iov {
            buffer: s.as_ptr().cast_mut(),
            length: s.len(),
        }
    }
    pub fn from_mut_slice(s: &mut [u8]) -> Iov {
        Iov {
            buffer: s.as_mut_ptr(),
            length: s.len(),
        }
    }
}

/// Total bytes of an iov list.
pub fn iov_total(iov: &[Iov]) -> usize {
    iov.iter().map(|v| v.length).sum()
}

/// A list of iov entries that stays on the stack for the common short lists.
pub type IovVec = smallvec::SmallVec<[Iov; 8]>;
