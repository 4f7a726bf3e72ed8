//! Memory domains: registration of local memory and remote keys for RMA.
//!
//! A registration ([`MemH`]) names a region `[base, base+len)`; its packed form is the
//! remote key blob a peer unpacks into a [`RemoteKey`]. Every RMA operation checks the
//! target range against the key before anything moves; a range outside is refused with
//! `UCS_ERR_INVALID_PARAM`.

use ucs::{Status, UcsResult};

pub use ucs::memtype::MemoryType;

bitflags::bitflags! {
    /// A set of memory types (what a domain registers, what an operation's buffers may be).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct MemTypes: u8 {
        const HOST = 1 << 0;
        const CUDA = 1 << 1;
        const CUDA_MANAGED = 1 << 2;
        /// What the host can load and store: host and managed memory.
        const HOST_ACCESSIBLE = Self::HOST.bits() | Self::CUDA_MANAGED.bits();
    }
}

impl MemTypes {
    /// The set holding `t`.
    pub const fn of(t: MemoryType) -> MemTypes {
        match t {
            MemoryType::Host => MemTypes::HOST,
            MemoryType::Cuda => MemTypes::CUDA,
            MemoryType::CudaManaged => MemTypes::CUDA_MANAGED,
        }
    }

    /// Whether `t` is in the set.
    #[inline]
    pub const fn has(self, t: MemoryType) -> bool {
        self.contains(MemTypes::of(t))
    }
}

/// A local registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemH {
    pub base: u64,
    pub len: u64,
    /// Domain-specific key (a registration id for tcp; unused elsewhere).
    pub key: u64,
}

/// A peer's registration, unpacked from its blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteKey {
    pub base: u64,
    pub len: u64,
    pub key: u64,
}

impl RemoteKey {
    /// Checks that `[addr, addr+len)` lies inside the key's region.
    #[inline]
    pub fn check_range(&self, addr: u64, len: u64) -> UcsResult<()> {
        let end = addr.checked_add(len).ok_or(Status::InvalidParam)?;
        let region_end = self
            .base
            .checked_add(self.len)
            .ok_or(Status::InvalidParam)?;
        if addr >= self.base && end <= region_end {
            Ok(())
        } else {
            Err(Status::InvalidParam)
        }
    }
}

/// Bytes in every packed remote key: magic, base, len, key.
pub const RKEY_PACKED_LEN: usize = 4 + 8 + 8 + 8;

/// Packs a registration as a remote key blob tagged with the domain's 4-byte magic.
pub fn pack_rkey(magic: [u8; 4], memh: &MemH) -> Vec<u8> {
    let mut v = Vec::with_capacity(RKEY_PACKED_LEN);
    v.extend_from_slice(&magic);
    v.extend_from_slice(&memh.base.to_le_bytes());
    v.extend_from_slice(&memh.len.to_le_bytes());
    v.extend_from_slice(&memh.key.to_le_bytes());
    v
}

/// Unpacks a blob made by [`pack_rkey`] with the same magic; anything else is refused.
pub fn unpack_rkey(magic: [u8; 4], buf: &[u8]) -> UcsResult<RemoteKey> {
    if buf.len() != RKEY_PACKED_LEN || buf[..4] != magic {
        return Err(Status::InvalidParam);
    }
    let word = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&buf[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let rk = RemoteKey {
        base: word(4),
        len: word(12),
        key: word(20),
    };
    rk.base.checked_add(rk.len).ok_or(Status::InvalidParam)?;
    Ok(rk)
}

/// A memory domain.
pub trait Md: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &str;

    /// Memory types this domain can register (and whose keys its transports can reach).
    fn reg_mem_types(&self) -> MemTypes {
        MemTypes::HOST_ACCESSIBLE
    }

    /// Registers `[addr, addr+len)`.
    ///
    /// # Safety
    /// The region must stay mapped until `mem_dereg`; peers holding its key may read and
    /// write it through this domain's transports.
    unsafe fn mem_reg(&self, addr: *mut u8, len: usize) -> UcsResult<MemH>;

    fn mem_dereg(&self, memh: &MemH) -> UcsResult<()>;

    /// Packs the remote key a peer needs to access `memh`.
    fn mkey_pack(&self, memh: &MemH) -> Vec<u8>;

    /// Unpacks a peer's remote key. Malformed blobs give `InvalidParam`.
    fn rkey_unpack(&self, buf: &[u8]) -> UcsResult<RemoteKey>;

    /// Whether the memory a peer's key names lies on the same device as this process's
    /// memory at `local`: `Some(false)` for two different GPUs, `None` where the domain
    /// cannot tell (host memory, or a transport without devices). `ucp` lets one process
    /// of a pair make every copy on a shared GPU, and the receiver read directly otherwise.
    fn rkey_same_device(&self, _packed: &[u8], _local: u64) -> Option<bool> {
        None
    }
}

/// A domain whose transports need no registration (self, posix, cma, and the in-process
/// `cuda_copy` and `mock_dev`): registering only records the region so remote keys can
/// carry its bounds.
#[derive(Debug)]
pub struct BoundsMd {
    name: &'static str,
    magic: [u8; 4],
    types: MemTypes,
}

impl BoundsMd {
    /// A domain for host-accessible memory.
    pub const fn new(name: &'static str, magic: [u8; 4]) -> BoundsMd {
        BoundsMd {
            name,
            magic,
            types: MemTypes::HOST_ACCESSIBLE,
        }
    }

    /// A domain for device memory of `types` only: registering other memory is refused
    /// (`Unsupported`).
    pub const fn for_device(name: &'static str, magic: [u8; 4], types: MemTypes) -> BoundsMd {
        BoundsMd { name, magic, types }
    }
}

impl Md for BoundsMd {
    fn name(&self) -> &str {
        self.name
    }

    fn reg_mem_types(&self) -> MemTypes {
        self.types
    }

    unsafe fn mem_reg(&self, addr: *mut u8, len: usize) -> UcsResult<MemH> {
        if addr.is_null() && len != 0 {
            return Err(Status::InvalidParam);
        }
        if !self.types.contains(MemTypes::HOST) && !self.types.has(ucs::memtype::mem_type(addr)) {
            return Err(Status::Unsupported);
        }
        Ok(MemH {
            base: addr as u64,
            len: len as u64,
            key: 0,
        })
    }

    fn mem_dereg(&self, _memh: &MemH) -> UcsResult<()> {
        Ok(())
    }

    fn mkey_pack(&self, memh: &MemH) -> Vec<u8> {
        pack_rkey(self.magic, memh)
    }

    fn rkey_unpack(&self, buf: &[u8]) -> UcsResult<RemoteKey> {
        unpack_rkey(self.magic, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rkey_round_trip_and_bounds() {
        let md = BoundsMd::new("t", *b"TEST");
        let mut buf = vec![0u8; 100];
        // SAFETY: buf outlives the registration.
        let mh = unsafe { md.mem_reg(buf.as_mut_ptr(), buf.len()) }.unwrap();
        let rk = md.rkey_unpack(&md.mkey_pack(&mh)).unwrap();
        assert_eq!(rk.base, mh.base);
        assert!(rk.check_range(mh.base, 100).is_ok());
        assert!(rk.check_range(mh.base + 50, 50).is_ok());
        assert_eq!(rk.check_range(mh.base + 50, 51), Err(Status::InvalidParam));
        assert_eq!(rk.check_range(mh.base - 1, 1), Err(Status::InvalidParam));
        assert_eq!(rk.check_range(u64::MAX, 2), Err(Status::InvalidParam));
        assert!(md.rkey_unpack(b"short").is_err());
        let mut other = md.mkey_pack(&mh);
        other[0] = b'X';
        assert!(md.rkey_unpack(&other).is_err());
    }
}
