//! The tcp memory domain. Put and get are emulated over the byte stream, so the target
//! process itself writes and reads the registered memory; the registration table is what
//! lets it refuse anything a peer was not given. A registration id travels in the remote
//! key (`key`); the target checks every request against the table: the id exists and the
//! range lies inside it.
//!
//! Like UCX's single `tcp` domain, the table is one per process and shared by every tcp
//! interface, so memory registered through any of them is reachable through all of them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use ucs::{Status, UcsResult};

use crate::md::{pack_rkey, unpack_rkey, Md, MemH, RemoteKey};

const MAGIC: [u8; 4] = *b"TCP1";

#[derive(Debug, Default)]
pub(super) struct RegTable {
    regions: HashMap<u64, (u64, u64)>,
    next_id: u64,
}

impl RegTable {
    /// The registered range for `[addr, addr+len)` under registration `key`, if it lies
    /// entirely inside one.
    fn check(&self, key: u64, addr: u64, len: u64) -> Result<(), Status> {
        let &(base, rlen) = self.regions.get(&key).ok_or(Status::InvalidParam)?;
        let end = addr.checked_add(len).ok_or(Status::InvalidParam)?;
        if addr >= base && end <= base + rlen {
            Ok(())
        } else {
            Err(Status::InvalidParam)
        }
    }
}

pub(super) type Registry = Arc<Mutex<RegTable>>;

fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        Arc::new(Mutex::new(RegTable {
            regions: HashMap::new(),
            next_id: 1,
        }))
    })
}

fn lock(reg: &Registry) -> MutexGuard<'_, RegTable> {
    // The table stays consistent even if a holder panicked: every update is one insert or
    // remove.
    reg.lock().unwrap_or_else(|e| e.into_inner())
}

/// The tcp memory domain.
#[derive(Debug, Clone)]
pub struct TcpMd {
    reg: Registry,
}

impl TcpMd {
    pub(super) fn new() -> TcpMd {
        TcpMd {
            reg: registry().clone(),
        }
    }

    /// Copies `data` to `addr` if it lies inside registration `key`. Refused requests
    /// write nothing.
    pub(super) fn write(&self, key: u64, addr: u64, data: &[u8]) -> Status {
        let t = lock(&self.reg);
        if let Err(st) = t.check(key, addr, data.len() as u64) {
            return st;
        }
        if !data.is_empty() {
            // SAFETY: the range lies inside a live registration of this process (checked
            // under the lock, which `mem_dereg` also takes, so the region cannot be
            // unregistered during the copy); the registrant promised (`mem_reg`) to keep it
            // mapped and accessible to peers until then.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
        }
        Status::Ok
    }

    /// Whether `[addr, addr+len)` lies inside registration `key`.
    pub(super) fn check(&self, key: u64, addr: u64, len: usize) -> Status {
        match lock(&self.reg).check(key, addr, len as u64) {
            Ok(()) => Status::Ok,
            Err(st) => st,
        }
    }

    /// Reads from socket `fd` straight into registration `key`'s bytes at `addr`, at most
    /// `len` of them: `Err` with the refusal if they do not lie inside it (deregistered
    /// meanwhile, say), else what the read gave (bytes, or an errno).
    pub(super) fn recv_into(
        &self,
        key: u64,
        addr: u64,
        len: usize,
        fd: std::os::fd::RawFd,
    ) -> Result<Result<usize, i32>, Status> {
        let t = lock(&self.reg);
        t.check(key, addr, len as u64)?;
        // SAFETY: as in `write`: a checked range of a live registration, held under the
        // lock (so it cannot be deregistered during the read), which the registrant keeps
        // mapped and writable by peers until it deregisters.
        Ok(unsafe { super::sock::recv_raw(fd, addr as *mut u8, len) })
    }

    /// Copies registration `key`'s bytes at `addr` into `out`, if they lie inside it.
    pub(super) fn read(&self, key: u64, addr: u64, out: &mut [u8]) -> Status {
        let t = lock(&self.reg);
        if let Err(st) = t.check(key, addr, out.len() as u64) {
            return st;
        }
        if !out.is_empty() {
            // SAFETY: as in `write`: a checked range of a live registration, held under the
            // lock; `out` is our own buffer, distinct from registered user memory.
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len())
            };
        }
        Status::Ok
    }
}

impl Md for TcpMd {
    fn name(&self) -> &str {
        "tcp"
    }

    unsafe fn mem_reg(&self, addr: *mut u8, len: usize) -> UcsResult<MemH> {
        if addr.is_null() && len != 0 {
            return Err(Status::InvalidParam);
        }
        let base = addr as u64;
        base.checked_add(len as u64).ok_or(Status::InvalidParam)?;
        let mut t = lock(&self.reg);
        let key = t.next_id;
        // Ids are never reused, so a stale remote key cannot reach a later registration.
        t.next_id = t.next_id.checked_add(1).ok_or(Status::NoResource)?;
        t.regions.insert(key, (base, len as u64));
        Ok(MemH {
            base,
            len: len as u64,
            key,
        })
    }

    fn mem_dereg(&self, memh: &MemH) -> UcsResult<()> {
        let mut t = lock(&self.reg);
        match t.regions.get(&memh.key) {
            Some(&(base, len)) if base == memh.base && len == memh.len => {
                t.regions.remove(&memh.key);
                Ok(())
            }
            _ => Err(Status::InvalidParam),
        }
    }

    fn mkey_pack(&self, memh: &MemH) -> Vec<u8> {
        pack_rkey(MAGIC, memh)
    }

    fn rkey_unpack(&self, buf: &[u8]) -> UcsResult<RemoteKey> {
        unpack_rkey(MAGIC, buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_refuses_what_was_not_registered() {
        let md = TcpMd::new();
        let mut buf = vec![0u8; 64];
        // SAFETY: buf outlives the registration (deregistered below).
        let mh = unsafe { md.mem_reg(buf.as_mut_ptr(), buf.len()) }.unwrap();
        let rk = md.rkey_unpack(&md.mkey_pack(&mh)).unwrap();
        assert_eq!(rk.key, mh.key);
        assert_eq!(md.write(mh.key, mh.base + 60, b"abcd"), Status::Ok);
        assert_eq!(
            md.write(mh.key, mh.base + 61, b"abcd"),
            Status::InvalidParam
        );
        assert_eq!(md.write(mh.key, mh.base - 1, b"a"), Status::InvalidParam);
        assert_eq!(md.write(mh.key + 1000, mh.base, b"a"), Status::InvalidParam);
        assert_eq!(md.write(mh.key, u64::MAX, b"a"), Status::InvalidParam);
        let mut out = [0u8; 4];
        assert_eq!(md.read(mh.key, mh.base + 60, &mut out), Status::Ok);
        assert_eq!(&out, b"abcd");
        md.mem_dereg(&mh).unwrap();
        assert_eq!(md.read(mh.key, mh.base, &mut out), Status::InvalidParam);
        assert_eq!(md.mem_dereg(&mh), Err(Status::InvalidParam));
        assert_eq!(buf[60..], *b"abcd");
        assert!(md.rkey_unpack(b"TCP").is_err());
    }
}
