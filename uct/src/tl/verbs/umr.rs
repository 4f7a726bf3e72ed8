//! The UMR pieces of the noncontiguous protocol (after "UMR for noncontiguous GPU
//! transfers"): both sides cut a layout's packed bytes into chunks of one agreed size, build
//! one indirect key per chunk over the blocks it covers, and move each chunk with one RDMA
//! operation from a local indirect key to a remote one, with no packing.
//!
//! * [`agree_chunk`]: each side sends its smallest block length (in the RTS and the CTS);
//!   the chunk is the smaller of the two times `max_klm - 1`. A window of that many bytes
//!   touches at most `max_klm` blocks of either side even when it starts inside a block
//!   (the paper's `min × max_klm` can need one entry more when the window is not aligned
//!   to a block), so both sides build the same number of keys, each within the limit.
//! * [`chunk_klms`]: the KLM entries of one window of a segment list.
//! * [`MkeyCache`]: the local keys of (layout id, base address, chunk), least recently
//!   used dropped (their keys destroyed) beyond its capacity; [`RemoteKeys`]: the peer's
//!   keys it sent for the same triple, so that a CTS on a hit carries no key list.
//!
//! The protocol that uses them is `ucp`'s UMR layout rendezvous (`ucp::proto::umr`) over
//! the `rc_verbs` transport, which keeps its own key cache (it must know which keys a
//! transfer in flight still uses).

use std::collections::HashMap;

use super::{Access, Klm, Provider, VResult, VerbsError};

/// The chunk both sides use: `min(min_a, min_b) * (max_klm - 1)` bytes (at least one
/// block when `max_klm` is 1).
pub fn agree_chunk(min_a: u64, min_b: u64, max_klm: usize) -> u64 {
    let m = min_a.min(min_b).max(1);
    m.saturating_mul((max_klm as u64).saturating_sub(1).max(1))
}

/// The smallest block of a segment list (`(address, length)`, lengths > 0).
pub fn min_block(segs: &[(u64, u64)]) -> u64 {
    segs.iter()
        .map(|s| s.1)
        .filter(|&l| l > 0)
        .min()
        .unwrap_or(1)
}

/// The KLM entries (region `key`) covering packed bytes `[start, start + len)` of `segs`.
pub fn chunk_klms(segs: &[(u64, u64)], key: u32, start: u64, len: u64) -> Vec<Klm> {
    let end = start + len;
    let mut out = Vec::new();
    let mut pos = 0u64;
    for &(addr, l) in segs {
        let (s, e) = (pos, pos + l);
        if e > start && s < end {
            let from = start.max(s);
            let to = end.min(e);
            out.push(Klm {
                addr: addr + (from - s),
                len: to - from,
                key,
            });
        }
        pos = e;
        if pos >= end {
            break;
        }
    }
    out
}

/// One indirect key per chunk of `segs` (all within region `key` of `p`).
pub fn build_mkeys(
    p: &mut dyn Provider,
    segs: &[(u64, u64)],
    key: u32,
    chunk: u64,
    access: Access,
) -> VResult<Vec<u32>> {
    let total: u64 = segs.iter().map(|s| s.1).sum();
    let mut keys = Vec::with_capacity(total.div_ceil(chunk.max(1)) as usize);
    let mut at = 0;
    while at < total {
        let n = chunk.min(total - at);
        let klms = chunk_klms(segs, key, at, n);
        if klms.len() > p.caps().max_klm {
            for k in keys {
                let _ = p.destroy_mkey(k);
            }
            return Err(VerbsError::Invalid);
        }
        match p.create_mkey(&klms, access) {
            Ok(k) => keys.push(k),
            Err(e) => {
                // Nothing half built stays behind.
                for k in keys {
                    let _ = p.destroy_mkey(k);
                }
                return Err(e);
            }
        }
        at += n;
    }
    Ok(keys)
}

/// What names a set of chunk keys: the layout, where it is applied, the chunk size.
pub type MkeyId = (u128, u64, u64);

/// Local chunk keys by (layout id, base address, chunk size).
#[derive(Debug, Default)]
pub struct MkeyCache {
    entries: HashMap<MkeyId, (Vec<u32>, u64)>,
    tick: u64,
    capacity: usize,
    pub hits: u64,
    pub misses: u64,
}

impl MkeyCache {
    pub fn new(capacity: usize) -> MkeyCache {
        MkeyCache {
            capacity: capacity.max(1),
            ..Default::default()
        }
    }

    /// The keys of `id`, built by `build` on a miss (the least recently used entry is
    /// destroyed first when the cache is full).
    pub fn get_or_build(
        &mut self,
        p: &mut dyn Provider,
        id: MkeyId,
        build: impl FnOnce(&mut dyn Provider) -> VResult<Vec<u32>>,
    ) -> VResult<Vec<u32>> {
        self.tick += 1;
        if let Some(e) = self.entries.get_mut(&id) {
            e.1 = self.tick;
            self.hits += 1;
            return Ok(e.0.clone());
        }
        self.misses += 1;
        if self.entries.len() >= self.capacity {
            if let Some(old) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.1)
                .map(|(k, _)| *k)
            {
                if let Some((keys, _)) = self.entries.remove(&old) {
                    for k in keys {
                        let _ = p.destroy_mkey(k);
                    }
                }
            }
        }
        let keys = build(p)?;
        self.entries.insert(id, (keys.clone(), self.tick));
        Ok(keys)
    }

    /// Drops the keys of a base address (its memory was deregistered or freed).
    pub fn invalidate(&mut self, p: &mut dyn Provider, base: u64) {
        let dead: Vec<MkeyId> = self
            .entries
            .keys()
            .filter(|k| k.1 == base)
            .copied()
            .collect();
        for k in dead {
            if let Some((keys, _)) = self.entries.remove(&k) {
                for key in keys {
                    let _ = p.destroy_mkey(key);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A peer's chunk keys as it sent them, by the same triple: a hit lets the CTS carry no
/// key list. Counts the bytes of key lists received.
#[derive(Debug, Default)]
pub struct RemoteKeys {
    entries: HashMap<MkeyId, Vec<u32>>,
    pub list_bytes: u64,
}

impl RemoteKeys {
    pub fn get(&self, id: &MkeyId) -> Option<&[u32]> {
        self.entries.get(id).map(Vec::as_slice)
    }

    /// Learns the keys a peer sent for `id`.
    pub fn learn(&mut self, id: MkeyId, keys: Vec<u32>) {
        self.list_bytes += 4 * keys.len() as u64;
        self.entries.insert(id, keys);
    }

    /// Forgets what the peer said of `base` (it invalidated those keys).
    pub fn forget(&mut self, base: u64) {
        self.entries.retain(|k, _| k.1 != base);
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::SoftHca;
    use super::super::{Opcode, QpAddr, QpState, SendWr, Sge, WcStatus};
    use super::*;
    use rand::{Rng, SeedableRng};
    use smallvec::smallvec;

    /// A random segment list of `n` blocks inside a buffer at `base` (gaps between), with
    /// exactly `total` bytes when given.
    fn random_segs(rng: &mut impl Rng, base: u64, n: usize, total: Option<u64>) -> Vec<(u64, u64)> {
        let mut lens: Vec<u64> = (0..n).map(|_| rng.gen_range(1..200)).collect();
        if let Some(t) = total {
            // Scale to the total: spread it over the blocks, each at least 1.
            let n = n as u64;
            let each = (t / n).max(1);
            lens = (0..n).map(|_| each).collect();
            let rest = t - each * n;
            lens[0] += rest;
        }
        let mut at = base;
        lens.into_iter()
            .map(|l| {
                at += rng.gen_range(0..50);
                let s = (at, l);
                at += l;
                s
            })
            .collect()
    }

    #[test]
    fn both_sides_agree_on_the_chunks_and_every_byte_arrives() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(24);
        let max_klm = 8;
        let mut a = SoftHca::open(max_klm, 0).unwrap();
        let mut b = SoftHca::open(max_klm, 0).unwrap();
        let (ca, cb) = (a.create_cq().unwrap(), b.create_cq().unwrap());
        let (qa, qb) = (a.create_qp(ca, ca).unwrap(), b.create_qp(cb, cb).unwrap());
        a.modify_qp(qa, QpState::Init, None).unwrap();
        b.modify_qp(qb, QpState::Init, None).unwrap();
        let (da, db) = (a.device_address(), b.device_address());
        a.modify_qp(
            qa,
            QpState::Rtr,
            Some(&QpAddr {
                device: db,
                qpn: qb,
            }),
        )
        .unwrap();
        b.modify_qp(
            qb,
            QpState::Rtr,
            Some(&QpAddr {
                device: da,
                qpn: qa,
            }),
        )
        .unwrap();
        a.modify_qp(qa, QpState::Rts, None).unwrap();
        b.modify_qp(qb, QpState::Rts, None).unwrap();
        let mut src = vec![0u8; 1 << 16];
        let mut dst = vec![0u8; 1 << 16];
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        let ka = a
            .reg_mr(src.as_mut_ptr() as u64, src.len() as u64, rw)
            .unwrap();
        let kb = b
            .reg_mr(dst.as_mut_ptr() as u64, dst.len() as u64, rw)
            .unwrap();
        for round in 0..40 {
            let na = rng.gen_range(1..60);
            let sa = random_segs(&mut rng, src.as_ptr() as u64, na, None);
            let total: u64 = sa.iter().map(|s| s.1).sum();
            let nb = rng.gen_range(1..60).min(total as usize);
            let sb = random_segs(&mut rng, dst.as_ptr() as u64, nb, Some(total));
            if sb
                .last()
                .is_some_and(|l| l.0 + l.1 > dst.as_ptr() as u64 + dst.len() as u64)
            {
                continue;
            }
            for (i, v) in src.iter_mut().enumerate() {
                *v = (i as u8).wrapping_mul(7).wrapping_add(round as u8);
            }
            dst.iter_mut().for_each(|v| *v = 0);
            // Each side's smallest block goes to the other; both get the same chunk.
            let chunk = agree_chunk(min_block(&sa), min_block(&sb), max_klm);
            assert_eq!(chunk, agree_chunk(min_block(&sb), min_block(&sa), max_klm));
            let keys_a = build_mkeys(&mut a, &sa, ka, chunk, rw).unwrap();
            let keys_b = build_mkeys(&mut b, &sb, kb, chunk, rw).unwrap();
            assert_eq!(
                keys_a.len(),
                keys_b.len(),
                "round {round}: key counts differ"
            );
            // One RDMA WRITE per chunk, local indirect key to remote indirect key.
            let mut left = total;
            for (i, (&la, &rb)) in keys_a.iter().zip(&keys_b).enumerate() {
                let n = chunk.min(left);
                left -= n;
                let wr = SendWr {
                    wr_id: i as u64,
                    opcode: Opcode::RdmaWrite,
                    sges: smallvec![Sge {
                        addr: 0,
                        len: n as u32,
                        lkey: la
                    }],
                    remote_addr: 0,
                    rkey: rb,
                    signaled: true,
                };
                a.post_send(qa, &wr).unwrap();
                let mut wc = Vec::new();
                a.poll_cq(ca, 8, &mut wc);
                assert_eq!(wc[0].status, WcStatus::Success, "round {round} chunk {i}");
            }
            // Every byte: the k-th packed byte of a's list at the k-th of b's.
            let packed = |segs: &[(u64, u64)], base: u64, buf: &[u8]| -> Vec<u8> {
                segs.iter()
                    .flat_map(|&(ad, l)| {
                        buf[(ad - base) as usize..(ad - base + l) as usize].to_vec()
                    })
                    .collect()
            };
            assert_eq!(
                packed(&sa, src.as_ptr() as u64, &src),
                packed(&sb, dst.as_ptr() as u64, &dst),
                "round {round}"
            );
            for k in keys_a {
                a.destroy_mkey(k).unwrap();
            }
            for k in keys_b {
                b.destroy_mkey(k).unwrap();
            }
        }
    }

    #[test]
    fn caches_build_once_and_evict() {
        let mut h = SoftHca::open(4, 0).unwrap();
        let mut buf = vec![0u8; 4096];
        let k = h
            .reg_mr(buf.as_mut_ptr() as u64, 4096, Access::LOCAL_WRITE)
            .unwrap();
        let base = buf.as_ptr() as u64;
        let segs: Vec<(u64, u64)> = (0..10).map(|i| (base + i * 100, 50)).collect();
        let mut c = MkeyCache::new(2);
        let chunk = agree_chunk(50, 50, 4);
        let get = |c: &mut MkeyCache, h: &mut SoftHca, layout: u128| {
            c.get_or_build(h, (layout, base, chunk), |p| {
                build_mkeys(p, &segs, k, chunk, Access::LOCAL_WRITE)
            })
            .unwrap()
        };
        let first = get(&mut c, &mut h, 1);
        let created = h.mkeys_created;
        assert_eq!(created, first.len() as u64);
        // The second transfer of the same layout creates nothing.
        assert_eq!(get(&mut c, &mut h, 1), first);
        assert_eq!((h.mkeys_created, c.hits, c.misses), (created, 1, 1));
        // Two more layouts: the least recently used is evicted (its keys destroyed).
        get(&mut c, &mut h, 2);
        get(&mut c, &mut h, 3);
        assert_eq!(c.len(), 2);
        assert!(
            h.destroy_mkey(first[0]).is_err(),
            "evicted keys are destroyed"
        );
        get(&mut c, &mut h, 1);
        assert_eq!(c.misses, 4);
        c.invalidate(&mut h, base);
        assert!(c.is_empty());
        // Remote keys: a hit needs no list; list bytes are counted.
        let mut r = RemoteKeys::default();
        assert!(r.get(&(1, base, chunk)).is_none());
        r.learn((1, base, chunk), vec![7, 8, 9]);
        assert_eq!(r.get(&(1, base, chunk)), Some(&[7, 8, 9][..]));
        assert_eq!(r.list_bytes, 12);
        r.forget(base);
        assert!(r.get(&(1, base, chunk)).is_none());
    }

    #[test]
    fn a_window_never_needs_more_than_max_klm_entries() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..500 {
            let max_klm = rng.gen_range(2..16);
            let n = rng.gen_range(1..80);
            let segs = random_segs(&mut rng, 0, n, None);
            let total: u64 = segs.iter().map(|s| s.1).sum();
            let chunk = agree_chunk(min_block(&segs), rng.gen_range(1..300), max_klm);
            let mut at = 0;
            while at < total {
                let n = chunk.min(total - at);
                let k = chunk_klms(&segs, 1, at, n);
                assert!(k.len() <= max_klm, "{} entries > {max_klm}", k.len());
                assert_eq!(k.iter().map(|e| e.len).sum::<u64>(), n);
                at += n;
            }
        }
        assert_eq!(agree_chunk(64, 16, 1), 16);
    }
}
