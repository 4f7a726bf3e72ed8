//! `self`: loopback inside one process. An endpoint reaches only its own interface;
//! messages wait in a bounded queue until `progress` delivers them, and RMA is a checked
//! `memcpy`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use slab::Slab;
use ucs::pool::FixedBufPool;
use ucs::{Config, Status, UcsResult};

use crate::ep::{iov_total, Comp, Done, EpId, Iov};
use crate::iface::{check_am_id, Handler, Iface, IfaceAttr, IfaceFlags, OpLimits, PerfEstimate};
use crate::md::{BoundsMd, Md, RemoteKey};

const SEG_SIZE: usize = 8192;
const QUEUE_LEN: usize = 1024;
static MD: BoundsMd = BoundsMd::new("self", *b"SELF");
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Debug)]
struct Msg {
    id: u8,
    len: usize,
    buf: Box<[u8]>,
}

/// The `self` interface.
#[derive(Debug)]
pub struct SelfIface {
    attr: IfaceAttr,
    addr: [u8; 16],
    queue: VecDeque<Msg>,
    pool: FixedBufPool,
    eps: Slab<()>,
    pending: VecDeque<(EpId, u64)>,
}

impl SelfIface {
    pub fn open(_cfg: &Config) -> SelfIface {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let mut addr = [0u8; 16];
        addr[..8].copy_from_slice(&ucs::sys::host_id().to_le_bytes());
        addr[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        addr[12..].copy_from_slice(&(id as u32).to_le_bytes());
        let am = OpLimits {
            max_short: SEG_SIZE - 8,
            max_bcopy: SEG_SIZE,
            max_iov: 1,
            ..Default::default()
        };
        let rma = OpLimits {
            max_zcopy: usize::MAX,
            max_iov: usize::MAX,
            ..Default::default()
        };
        SelfIface {
            attr: IfaceAttr {
                flags: IfaceFlags::AM_SHORT
                    | IfaceFlags::AM_BCOPY
                    | IfaceFlags::PUT_ZCOPY
                    | IfaceFlags::GET_ZCOPY
                    | IfaceFlags::PENDING
                    | IfaceFlags::CONNECT_TO_IFACE
                    | IfaceFlags::EP_ORDERED
                    | IfaceFlags::ON_DEMAND,
                am,
                put: rma,
                get: rma,
                perf: PerfEstimate {
                    overhead_ns: 10.0,
                    latency_ns: 0.0,
                    bandwidth: 20e9,
                },
                mem: crate::iface::MemCaps::HOST,
                device_addr_len: 0,
                iface_addr_len: addr.len(),
            },
            addr,
            queue: VecDeque::with_capacity(QUEUE_LEN),
            pool: FixedBufPool::new(SEG_SIZE, 32),
            eps: Slab::new(),
            pending: VecDeque::new(),
        }
    }

    fn check_ep(&self, ep: EpId) -> UcsResult<()> {
        if self.eps.contains(ep.index()) {
            Ok(())
        } else {
            Err(Status::InvalidParam)
        }
    }

    fn push(&mut self, id: u8, fill: impl FnOnce(&mut [u8]) -> usize) -> UcsResult<usize> {
        check_am_id(id)?;
        if self.queue.len() >= QUEUE_LEN {
            return Err(Status::NoResource);
        }
        let mut buf = self.pool.get();
        let len = fill(&mut buf).min(SEG_SIZE);
        self.queue.push_back(Msg { id, len, buf });
        Ok(len)
    }
}

impl Iface for SelfIface {
    fn tl_name(&self) -> &str {
        "self"
    }
    fn device_name(&self) -> &str {
        "memory"
    }
    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn md(&self) -> &dyn Md {
        &MD
    }
    fn device_address(&self) -> &[u8] {
        &[]
    }
    fn iface_address(&self) -> &[u8] {
        &self.addr
    }
    fn is_reachable(&self, _dev: &[u8], iface: &[u8]) -> bool {
        iface == self.addr
    }

    fn ep_connect(&mut self, dev: &[u8], iface: &[u8]) -> UcsResult<EpId> {
        if !self.is_reachable(dev, iface) {
            return Err(Status::Unreachable);
        }
        Ok(EpId(self.eps.insert(()) as u32))
    }

    fn ep_destroy(&mut self, ep: EpId) {
        if self.eps.try_remove(ep.index()).is_some() {
            self.pending.retain(|(e, _)| *e != ep);
        }
    }

    fn am_short(&mut self, ep: EpId, id: u8, header: u64, payload: &[u8]) -> UcsResult<()> {
        self.check_ep(ep)?;
        if payload.len() > self.attr.am.max_short {
            return Err(Status::InvalidParam);
        }
        self.push(id, |b| {
            b[..8].copy_from_slice(&header.to_le_bytes());
            b[8..8 + payload.len()].copy_from_slice(payload);
            8 + payload.len()
        })
        .map(|_| ())
    }

    fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> UcsResult<usize> {
        self.check_ep(ep)?;
        self.push(id, pack)
    }

    unsafe fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        self.check_ep(ep)?;
        let total = iov_total(iov);
        rkey.check_range(remote_addr, total as u64)?;
        // SAFETY: the region lies inside a registration of this process (checked above);
        // the registrant keeps it mapped while its key is in use.
        let dst = unsafe { std::slice::from_raw_parts_mut(remote_addr as *mut u8, total) };
        super::gather(iov, dst);
        Ok(Done::Now)
    }

    unsafe fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        self.check_ep(ep)?;
        let total = iov_total(iov);
        rkey.check_range(remote_addr, total as u64)?;
        // SAFETY: as in put_zcopy, the source lies inside a live local registration.
        let src = unsafe { std::slice::from_raw_parts(remote_addr as *const u8, total) };
        super::scatter(src, iov);
        Ok(Done::Now)
    }

    fn pending_add(&mut self, ep: EpId, token: u64) -> UcsResult<()> {
        self.check_ep(ep)?;
        if self.queue.len() < QUEUE_LEN && self.pending.is_empty() {
            return Err(Status::Busy);
        }
        self.pending.push_back((ep, token));
        Ok(())
    }

    fn pending_purge(&mut self, ep: EpId) -> Vec<u64> {
        let (out, keep): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|(e, _)| *e == ep);
        self.pending = keep.into();
        out.into_iter().map(|(_, t)| t).collect()
    }

    fn flush(&mut self, ep: Option<EpId>, _comp: Comp) -> UcsResult<Done> {
        if let Some(ep) = ep {
            self.check_ep(ep)?;
        }
        Ok(Done::Now)
    }

    fn ep_idle(&self, ep: EpId) -> bool {
        self.check_ep(ep).is_ok()
    }

    fn has_work(&self) -> bool {
        !self.queue.is_empty() || !self.pending.is_empty()
    }

    fn progress(&mut self, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        // Deliver what is queued now; messages queued by the handler's owner afterwards wait
        // for the next call.
        for _ in 0..self.queue.len() {
            let Some(m) = self.queue.pop_front() else {
                break;
            };
            h.am(m.id, &m.buf[..m.len]);
            self.pool.put(m.buf);
            n += 1;
        }
        while self.queue.len() < QUEUE_LEN {
            let Some((ep, token)) = self.pending.pop_front() else {
                break;
            };
            h.pending(ep, token);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Sink {
        msgs: Vec<(u8, Vec<u8>)>,
        pending: Vec<u64>,
    }
    impl Handler for Sink {
        fn am(&mut self, id: u8, data: &[u8]) {
            self.msgs.push((id, data.to_vec()));
        }
        fn pending(&mut self, _ep: EpId, token: u64) {
            self.pending.push(token);
        }
    }

    fn pair() -> (SelfIface, EpId) {
        let mut i = SelfIface::open(&Config::default());
        let a = i.iface_address().to_vec();
        let ep = i.ep_connect(&[], &a).unwrap();
        (i, ep)
    }

    #[test]
    fn only_its_own_interface_is_reachable() {
        let (mut a, _) = pair();
        let b = SelfIface::open(&Config::default());
        assert!(!a.is_reachable(&[], b.iface_address()));
        assert_eq!(
            a.ep_connect(&[], b.iface_address()),
            Err(Status::Unreachable)
        );
    }

    #[test]
    fn am_sizes_up_to_the_limits() {
        let (mut i, ep) = pair();
        let mut sink = Sink::default();
        for n in [0usize, 1, 100, i.attr().am.max_short] {
            let payload = vec![n as u8; n];
            i.am_short(ep, 1, n as u64, &payload).unwrap();
        }
        assert_eq!(
            i.am_short(ep, 1, 0, &vec![0; i.attr().am.max_short + 1]),
            Err(Status::InvalidParam)
        );
        for n in [1usize, 4096, SEG_SIZE] {
            assert_eq!(
                i.am_bcopy(ep, 2, &mut |b| {
                    b[..n].fill(7);
                    n
                }),
                Ok(n)
            );
        }
        i.progress(&mut sink);
        assert_eq!(sink.msgs.len(), 7);
        assert_eq!(sink.msgs[3].1.len(), 8 + i.attr().am.max_short);
        assert!(sink.msgs[6].1.iter().all(|&b| b == 7));
    }

    #[test]
    fn put_get_are_bounds_checked() {
        let (mut i, ep) = pair();
        let mut region = vec![0u8; 64];
        // SAFETY: region outlives the key's use below.
        let mh = unsafe { i.md().mem_reg(region.as_mut_ptr(), 64) }.unwrap();
        let rk = i.md().rkey_unpack(&i.md().mkey_pack(&mh)).unwrap();
        let src = [1u8, 2, 3, 4];
        let iov = [Iov::from_slice(&src[..2]), Iov::from_slice(&src[2..])];
        // SAFETY: src and region outlive the synchronous operations.
        unsafe {
            assert_eq!(i.put_zcopy(ep, &iov, mh.base + 10, &rk, 0), Ok(Done::Now));
            assert_eq!(
                i.put_zcopy(ep, &iov, mh.base + 61, &rk, 0),
                Err(Status::InvalidParam)
            );
        }
        let mut dst = [0u8; 4];
        let iov = [Iov::from_mut_slice(&mut dst)];
        // SAFETY: as above.
        unsafe { i.get_zcopy(ep, &iov, mh.base + 10, &rk, 0) }.unwrap();
        assert_eq!(dst, src);
        assert_eq!(&region[10..14], &src);
        assert!(region[61..].iter().all(|&b| b == 0));
    }

    #[test]
    fn back_pressure_wakes_pending_in_order() {
        let (mut i, ep) = pair();
        let mut sink = Sink::default();
        assert_eq!(i.pending_add(ep, 9), Err(Status::Busy));
        let mut sent = 0;
        while i.am_short(ep, 1, 0, &[]).is_ok() {
            sent += 1;
        }
        assert_eq!(sent, QUEUE_LEN);
        for t in 0..5 {
            i.pending_add(ep, t).unwrap();
        }
        i.progress(&mut sink);
        assert_eq!(sink.msgs.len(), QUEUE_LEN);
        assert_eq!(sink.pending, vec![0, 1, 2, 3, 4]);
        assert_eq!(i.flush(Some(ep), 0), Ok(Done::Now));
    }
}
