//! `cma`: zero-copy put/get between processes of one host and one user through Linux
//! cross-memory attach (`process_vm_readv` / `process_vm_writev`).
//!
//! It has no active messages: like UCX's cma it rides beside an AM transport (posix), which
//! `ucp` pairs it with. Iov lists longer than the system's `IOV_MAX` go in chunks; a partial
//! transfer continues where the kernel stopped. The remote key carries the registered
//! bounds; an access outside them is refused before any byte moves.

use std::collections::VecDeque;

use slab::Slab;
use ucs::config::AutoSize;
use ucs::{Config, Status, UcsResult};

use crate::ep::{iov_total, Comp, Done, EpId, Iov};
use crate::error::OpenError;
use crate::iface::{Handler, Iface, IfaceAttr, IfaceFlags, OpLimits, PerfEstimate};
use crate::md::{BoundsMd, Md, RemoteKey};
use ucs::wire::{Reader, Writer};

static MD: BoundsMd = BoundsMd::new("cma", *b"CMA1");

/// Checks that cross-memory attach works here (reads a word of our own memory).
pub fn probe() -> Result<(), String> {
    if std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim() == "3")
        .unwrap_or(false)
    {
        return Err("ptrace disabled by kernel.yama.ptrace_scope=3".into());
    }
    let src = 0x5a5a_u64;
    let mut dst = 0u64;
    let l = libc::iovec {
        iov_base: (&raw mut dst).cast(),
        iov_len: 8,
    };
    let r = libc::iovec {
        iov_base: (&raw const src).cast_mut().cast(),
        iov_len: 8,
    };
    // SAFETY: both iovecs describe live 8-byte locals of this process.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &l, 1, &r, 1, 0) };
    if n == 8 && dst == src {
        Ok(())
    } else {
        Err(format!(
            "process_vm_readv failed: {}",
            std::io::Error::last_os_error()
        ))
    }
}

#[derive(Debug)]
struct CmaEp {
    pid: i32,
    start_time: u64,
    failed: Option<Status>,
    reported: bool,
}

/// The `cma` interface.
#[derive(Debug)]
pub struct CmaIface {
    attr: IfaceAttr,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    eps: Slab<CmaEp>,
    max_iov: usize,
    check_interval_ns: u64,
    next_check: u64,
    progress_calls: u32,
    errors: VecDeque<(EpId, Status)>,
    /// Bytes moved and the time the system calls took, ns.
    bytes: u64,
    ns: u64,
}

impl CmaIface {
    /// Counts an operation of `bytes` that started at `t0`.
    fn account(&mut self, bytes: usize, t0: u64) {
        self.bytes += bytes as u64;
        self.ns += ucs::time::now_ns().saturating_sub(t0);
    }
}

#[derive(Clone, Copy)]
enum Dir {
    Read,
    Write,
}

impl CmaIface {
    pub fn open(cfg: &Config) -> Result<CmaIface, OpenError> {
        // Let same-user peers attach even under yama ptrace_scope=1. Fails harmlessly
        // (EINVAL) where yama is absent.
        // SAFETY: prctl with these integer arguments has no memory effects.
        unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
        let pid = std::process::id();
        let start = ucs::sys::process_start_time(pid as i32).unwrap_or(0);
        let max_iov = match cfg.cma_max_iov {
            AutoSize::Auto => ucs::sys::iov_max(),
            AutoSize::Bytes(n) => n.clamp(1, ucs::sys::iov_max()),
        };
        let dev_addr = Writer::default().u64(ucs::sys::host_id()).buf;
        let iface_addr = Writer::default().u32(pid).u64(start).buf;
        let rma = OpLimits {
            min_zcopy: 0,
            max_zcopy: usize::MAX,
            max_iov: usize::MAX,
            ..Default::default()
        };
        Ok(CmaIface {
            attr: IfaceAttr {
                flags: IfaceFlags::PUT_ZCOPY
                    | IfaceFlags::GET_ZCOPY
                    | IfaceFlags::RMA_ONE_SIDED
                    | IfaceFlags::CONNECT_TO_IFACE
                    | IfaceFlags::ERRHANDLE_PEER_FAILURE
                    | IfaceFlags::EP_ORDERED,
                am: OpLimits::default(),
                put: rma,
                get: rma,
                perf: PerfEstimate {
                    overhead_ns: 600.0,
                    latency_ns: 80.0,
                    // Measured: 1 MB reads stream at about 8 GB/s on the project machine
                    // (pinning the peer's pages costs on every call).
                    bandwidth: 8e9,
                },
                mem: crate::iface::MemCaps::HOST,
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
            },
            dev_addr,
            iface_addr,
            eps: Slab::new(),
            max_iov,
            check_interval_ns: cfg.error_check_interval_ns.max(1_000_000),
            next_check: 0,
            progress_calls: 0,
            errors: VecDeque::new(),
            bytes: 0,
            ns: 0,
        })
    }

    fn parse_iface(iface: &[u8]) -> Option<(i32, u64)> {
        let mut r = Reader::new(iface);
        let pid = r.u32()?;
        let start = r.u64()?;
        (r.is_empty() && pid > 0 && pid <= i32::MAX as u32).then_some((pid as i32, start))
    }

    fn fail(&mut self, ep: EpId, st: Status) -> Status {
        if let Some(e) = self.eps.get_mut(ep.index()) {
            if e.failed.is_none() {
                e.failed = Some(st);
                self.errors.push_back((ep, st));
            }
        }
        st
    }

    /// Moves `iov.len()` local buffers from/to the contiguous remote range.
    ///
    /// # Safety
    /// The iov entries satisfy the zcopy contract of `Iface::put_zcopy`/`get_zcopy`.
    unsafe fn transfer(
        &mut self,
        ep: EpId,
        dir: Dir,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> UcsResult<Done> {
        let e = self.eps.get(ep.index()).ok_or(Status::InvalidParam)?;
        if let Some(st) = e.failed {
            return Err(st);
        }
        let pid = e.pid;
        let total = iov_total(iov);
        rkey.check_range(remote_addr, total as u64)?;
        let mut local: smallvec::SmallVec<[libc::iovec; 16]> = smallvec::SmallVec::new();
        let mut remote = remote_addr;
        // Each chunk is at most max_iov local entries against one remote range.
        for chunk in iov.chunks(self.max_iov) {
            local.clear();
            local.extend(chunk.iter().filter(|v| v.length > 0).map(|v| libc::iovec {
                iov_base: v.buffer.cast(),
                iov_len: v.length,
            }));
            let mut first = 0;
            while first < local.len() {
                let want: usize = local[first..].iter().map(|v| v.iov_len).sum();
                let r = libc::iovec {
                    iov_base: remote as *mut libc::c_void,
                    iov_len: want,
                };
                let cnt = (local.len() - first) as libc::c_ulong;
                // SAFETY: local entries satisfy the caller's zcopy contract; the remote range
                // is inside the peer's registration (checked above); the kernel validates
                // remote addresses itself and fails with EFAULT.
                let n = unsafe {
                    match dir {
                        Dir::Read => {
                            libc::process_vm_readv(pid, local[first..].as_ptr(), cnt, &r, 1, 0)
                        }
                        Dir::Write => {
                            libc::process_vm_writev(pid, local[first..].as_ptr(), cnt, &r, 1, 0)
                        }
                    }
                };
                if n < 0 {
                    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                    if errno == libc::EINTR {
                        continue;
                    }
                    let st = match errno {
                        libc::ESRCH => self.fail(ep, Status::ConnectionReset),
                        libc::EPERM => self.fail(ep, Status::Rejected),
                        e => Status::from_errno(e),
                    };
                    return Err(st);
                }
                if n == 0 {
                    return Err(Status::IoError);
                }
                // Skip what was moved; a partial entry continues from its middle.
                let mut n = n as usize;
                remote += n as u64;
                while n > 0 {
                    let v = &mut local[first];
                    if n >= v.iov_len {
                        n -= v.iov_len;
                        first += 1;
                    } else {
                        // SAFETY: n < iov_len, so the advanced pointer stays in the buffer.
                        v.iov_base = unsafe { v.iov_base.cast::<u8>().add(n) }.cast();
                        v.iov_len -= n;
                        n = 0;
                    }
                }
            }
        }
        Ok(Done::Now)
    }

    /// Reads remote segments into local buffers: both lists are cut into pieces at every
    /// boundary of either, and up to `max_iov` pieces go in one `process_vm_readv`.
    ///
    /// # Safety
    /// The local entries satisfy the zcopy contract of `Iface::get_zcopy`.
    unsafe fn gather(
        &mut self,
        ep: EpId,
        local: &[Iov],
        remote: &[(u64, u64)],
        rkey: &RemoteKey,
    ) -> UcsResult<Done> {
        let e = self.eps.get(ep.index()).ok_or(Status::InvalidParam)?;
        if let Some(st) = e.failed {
            return Err(st);
        }
        let pid = e.pid;
        let mut rtotal = 0u64;
        for &(a, l) in remote {
            rkey.check_range(a, l)?;
            rtotal += l;
        }
        if rtotal != iov_total(local) as u64 {
            return Err(Status::InvalidParam);
        }
        let la: Vec<(u64, u64)> = local
            .iter()
            .map(|v| (v.buffer as u64, v.length as u64))
            .collect();
        let mut cut = super::pieces(&la, remote, u64::MAX);
        let mut lv: Vec<libc::iovec> = Vec::with_capacity(self.max_iov.min(4096));
        let mut rv: Vec<libc::iovec> = Vec::with_capacity(self.max_iov.min(4096));
        loop {
            // The next batch of pieces.
            lv.clear();
            rv.clear();
            for (_, l, _, r, n) in cut.by_ref().take(self.max_iov) {
                lv.push(libc::iovec {
                    iov_base: l as *mut libc::c_void,
                    iov_len: n as usize,
                });
                rv.push(libc::iovec {
                    iov_base: r as *mut libc::c_void,
                    iov_len: n as usize,
                });
            }
            if lv.is_empty() {
                return Ok(Done::Now);
            }
            let mut first = 0;
            while first < lv.len() {
                let cnt = (lv.len() - first) as libc::c_ulong;
                // SAFETY: the local pieces lie inside entries that satisfy the caller's
                // zcopy contract; the remote ones inside the peer's registration (checked
                // above; the kernel checks the addresses again and fails with EFAULT).
                let n = unsafe {
                    libc::process_vm_readv(
                        pid,
                        lv[first..].as_ptr(),
                        cnt,
                        rv[first..].as_ptr(),
                        cnt,
                        0,
                    )
                };
                if n < 0 {
                    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                    if errno == libc::EINTR {
                        continue;
                    }
                    return Err(match errno {
                        libc::ESRCH => self.fail(ep, Status::ConnectionReset),
                        libc::EPERM => self.fail(ep, Status::Rejected),
                        e => Status::from_errno(e),
                    });
                }
                if n == 0 {
                    return Err(Status::IoError);
                }
                // Skip what moved; the pieces are equal on both sides, so advance both.
                let mut n = n as usize;
                while n > 0 {
                    let len = lv[first].iov_len;
                    if n >= len {
                        n -= len;
                        first += 1;
                    } else {
                        lv[first].iov_base = lv[first].iov_base.cast::<u8>().wrapping_add(n).cast();
                        lv[first].iov_len -= n;
                        rv[first].iov_base = rv[first].iov_base.cast::<u8>().wrapping_add(n).cast();
                        rv[first].iov_len -= n;
                        n = 0;
                    }
                }
            }
        }
    }

    fn check_peers(&mut self) {
        let dead: Vec<usize> = self
            .eps
            .iter()
            .filter(|(_, e)| e.failed.is_none() && ucs::sys::process_gone(e.pid, e.start_time))
            .map(|(i, _)| i)
            .collect();
        for i in dead {
            log::debug!("cma: peer pid {} is gone", self.eps[i].pid);
            self.fail(EpId(i as u32), Status::ConnectionReset);
        }
    }
}

impl Iface for CmaIface {
    fn tl_name(&self) -> &str {
        "cma"
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
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }
    fn is_reachable(&self, dev: &[u8], iface: &[u8]) -> bool {
        dev == self.dev_addr.as_slice() && Self::parse_iface(iface).is_some()
    }

    fn ep_connect(&mut self, dev: &[u8], iface: &[u8]) -> UcsResult<EpId> {
        if dev != self.dev_addr.as_slice() {
            return Err(Status::Unreachable);
        }
        let (pid, start_time) = Self::parse_iface(iface).ok_or(Status::InvalidAddr)?;
        if !ucs::sys::process_alive(pid) {
            return Err(Status::Unreachable);
        }
        let id = self.eps.insert(CmaEp {
            pid,
            start_time,
            failed: None,
            reported: false,
        });
        Ok(EpId(id as u32))
    }

    fn ep_destroy(&mut self, ep: EpId) {
        self.eps.try_remove(ep.index());
        self.errors.retain(|(e, _)| *e != ep);
    }

    unsafe fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        let t0 = ucs::time::now_ns();
        // SAFETY: forwarded caller contract.
        let r = unsafe { self.transfer(ep, Dir::Write, iov, remote_addr, rkey) };
        self.account(iov_total(iov), t0);
        r
    }

    unsafe fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        let t0 = ucs::time::now_ns();
        // SAFETY: forwarded caller contract.
        let r = unsafe { self.transfer(ep, Dir::Read, iov, remote_addr, rkey) };
        self.account(iov_total(iov), t0);
        r
    }

    unsafe fn get_zcopy_iov(
        &mut self,
        ep: EpId,
        local: &[Iov],
        remote: &[(u64, u64)],
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        let t0 = ucs::time::now_ns();
        // SAFETY: forwarded caller contract.
        let r = unsafe { self.gather(ep, local, remote, rkey) };
        self.account(iov_total(local), t0);
        r
    }

    fn flush(&mut self, ep: Option<EpId>, _comp: Comp) -> UcsResult<Done> {
        // Every operation completed before it returned.
        match ep {
            Some(ep) => match self.eps.get(ep.index()) {
                None => Err(Status::InvalidParam),
                Some(e) => e.failed.map_or(Ok(Done::Now), Err),
            },
            None => Ok(Done::Now),
        }
    }

    fn ep_idle(&self, ep: EpId) -> bool {
        self.eps.get(ep.index()).is_some_and(|e| e.failed.is_none())
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("cma_bytes", self.bytes), ("cma_ns", self.ns)]
    }

    fn progress(&mut self, h: &mut dyn Handler) -> usize {
        self.progress_calls = self.progress_calls.wrapping_add(1);
        if self.progress_calls.is_multiple_of(256) && !self.eps.is_empty() {
            let now = ucs::time::now_ns();
            if now >= self.next_check {
                self.next_check = now + self.check_interval_ns;
                self.check_peers();
            }
        }
        let mut n = 0;
        while let Some((ep, st)) = self.errors.pop_front() {
            if let Some(e) = self.eps.get_mut(ep.index()) {
                if !e.reported {
                    e.reported = true;
                    h.ep_error(ep, st);
                    n += 1;
                }
            }
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Remote gather against this process's own memory: 1000 strided segments into three
    /// local buffers of other sizes, in several `process_vm_readv` batches.
    #[test]
    fn gather_reads_strided_segments_in_order() {
        let cfg = Config::from_lookup(|k| (k == "CMA_MAX_IOV").then(|| "64".into())).unwrap();
        let mut i = CmaIface::open(&cfg).unwrap();
        let (dev, addr) = (i.device_address().to_vec(), i.iface_address().to_vec());
        let ep = i.ep_connect(&dev, &addr).unwrap();
        let src: Vec<u8> = (0..256_000u32).map(|x| (x * 7 + 3) as u8).collect();
        // SAFETY: src outlives the registration and is only read.
        let mh = unsafe { MD.mem_reg(src.as_ptr().cast_mut(), src.len()) }.unwrap();
        let rk = MD.rkey_unpack(&MD.mkey_pack(&mh)).unwrap();
        let base = src.as_ptr() as u64;
        let remote: Vec<(u64, u64)> = (0..1000u64).map(|k| (base + k * 256, 100)).collect();
        let mut d1 = vec![0u8; 33_333];
        let mut d2 = vec![0u8; 50_000];
        let mut d3 = vec![0u8; 100_000 - 33_333 - 50_000];
        let local = [
            Iov::from_mut_slice(&mut d1),
            Iov::from_mut_slice(&mut d2),
            Iov::from_mut_slice(&mut d3),
        ];
        // SAFETY: the destination vectors outlive the (synchronous) operation.
        let r = unsafe { i.get_zcopy_iov(ep, &local, &remote, &rk, 0) };
        assert_eq!(r, Ok(Done::Now));
        let got = [d1, d2, d3].concat();
        let want: Vec<u8> = (0..1000usize)
            .flat_map(|k| src[k * 256..k * 256 + 100].iter().copied())
            .collect();
        assert!(got == want);
        // A segment outside the key is refused before anything moves.
        let bad = [(base + src.len() as u64 - 10, 20u64)];
        let mut d = [0u8; 20];
        let l = [Iov::from_mut_slice(&mut d)];
        // SAFETY: as above.
        let r = unsafe { i.get_zcopy_iov(ep, &l, &bad, &rk, 0) };
        assert_eq!(r, Err(Status::InvalidParam));
        assert_eq!(d, [0u8; 20]);
    }
}
