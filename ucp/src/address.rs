//! The worker address: what a peer needs to create an endpoint to a worker, exchanged out
//! of band (`ucp_worker_get_address`).
//!
//! ```text
//! address := "RUCX" version:u8 (= 1) uuid:u64 host_id:u64 pid:u32 n:u8 entry{n}
//! entry   := tl_len:u8 tl dev_len:u8 dev dev_addr_len:u16 dev_addr iface_addr_len:u16 iface_addr
//! ```
//!
//! Integers are little-endian. The decoder checks every length against what is left and
//! against the limits below, and rejects trailing bytes: a malformed blob is an error,
//! never a panic.

use ucs::wire::{Reader, Writer};
use ucs::Status;

const MAGIC: &[u8; 4] = b"RUCX";
/// The version this build writes and reads.
pub const ADDRESS_VERSION: u8 = 1;
/// Most transport entries in one address.
pub const MAX_ENTRIES: usize = 32;
/// Longest transport-level address blob.
pub const MAX_TL_ADDR: usize = 1024;

/// One transport interface of a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlAddress {
    pub tl: String,
    pub device: String,
    pub device_addr: Vec<u8>,
    pub iface_addr: Vec<u8>,
}

/// A decoded worker address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerAddress {
    /// Unique per worker (random at creation).
    pub uuid: u64,
    /// `ucs::sys::host_id()` of the worker's host.
    pub host_id: u64,
    pub pid: u32,
    pub tls: Vec<TlAddress>,
}

impl WorkerAddress {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::new()
            .bytes(MAGIC)
            .u8(ADDRESS_VERSION)
            .u64(self.uuid)
            .u64(self.host_id)
            .u32(self.pid)
            .u8(self.tls.len().min(MAX_ENTRIES) as u8);
        for t in self.tls.iter().take(MAX_ENTRIES) {
            w = w
                .u8(t.tl.len() as u8)
                .bytes(t.tl.as_bytes())
                .u8(t.device.len() as u8)
                .bytes(t.device.as_bytes())
                .u16(t.device_addr.len() as u16)
                .bytes(&t.device_addr)
                .u16(t.iface_addr.len() as u16)
                .bytes(&t.iface_addr);
        }
        w.buf
    }

    /// Decodes a blob made by [`WorkerAddress::encode`]; anything else is `InvalidParam`
    /// (or `Unsupported` for another version).
    pub fn decode(buf: &[u8]) -> Result<WorkerAddress, Status> {
        let bad = Status::InvalidParam;
        let mut r = Reader::new(buf);
        if r.bytes(4) != Some(MAGIC.as_slice()) {
            return Err(bad);
        }
        if r.u8().ok_or(bad)? != ADDRESS_VERSION {
            return Err(Status::Unsupported);
        }
        let uuid = r.u64().ok_or(bad)?;
        let host_id = r.u64().ok_or(bad)?;
        let pid = r.u32().ok_or(bad)?;
        let n = r.u8().ok_or(bad)? as usize;
        if n > MAX_ENTRIES {
            return Err(bad);
        }
        let mut tls = Vec::with_capacity(n);
        for _ in 0..n {
            let name = |r: &mut Reader| -> Result<String, Status> {
                let len = r.u8().ok_or(bad)? as usize;
                let b = r.bytes(len).ok_or(bad)?;
                String::from_utf8(b.to_vec()).map_err(|_| bad)
            };
            let blob = |r: &mut Reader| -> Result<Vec<u8>, Status> {
                let len = r.u16().ok_or(bad)? as usize;
                if len > MAX_TL_ADDR {
                    return Err(bad);
                }
                Ok(r.bytes(len).ok_or(bad)?.to_vec())
            };
            tls.push(TlAddress {
                tl: name(&mut r)?,
                device: name(&mut r)?,
                device_addr: blob(&mut r)?,
                iface_addr: blob(&mut r)?,
            });
        }
        if !r.is_empty() {
            return Err(bad);
        }
        Ok(WorkerAddress {
            uuid,
            host_id,
            pid,
            tls,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> WorkerAddress {
        WorkerAddress {
            uuid: 0x1122_3344_5566_7788,
            host_id: 42,
            pid: 1234,
            tls: vec![
                TlAddress {
                    tl: "posix".into(),
                    device: "memory".into(),
                    device_addr: vec![1, 2, 3],
                    iface_addr: vec![4; 20],
                },
                TlAddress {
                    tl: "tcp".into(),
                    device: "lo".into(),
                    device_addr: vec![127, 0, 0, 1],
                    iface_addr: vec![],
                },
            ],
        }
    }

    #[test]
    fn round_trip() {
        let a = sample();
        assert_eq!(WorkerAddress::decode(&a.encode()).unwrap(), a);
    }

    #[test]
    fn every_truncation_and_extension_is_refused() {
        let blob = sample().encode();
        for n in 0..blob.len() {
            assert!(WorkerAddress::decode(&blob[..n]).is_err(), "prefix {n}");
        }
        let mut long = blob.clone();
        long.push(0);
        assert_eq!(WorkerAddress::decode(&long), Err(Status::InvalidParam));
        let mut v2 = blob.clone();
        v2[4] = 2;
        assert_eq!(WorkerAddress::decode(&v2), Err(Status::Unsupported));
    }

    #[test]
    fn random_bytes_never_panic() {
        let blob = sample().encode();
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let mut b = blob.clone();
            let i = (x as usize) % b.len();
            b[i] = (x >> 32) as u8;
            let _ = WorkerAddress::decode(&b);
        }
    }
}
