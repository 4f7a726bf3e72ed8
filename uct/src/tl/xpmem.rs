//! `xpmem`: zero-copy put/get between processes of one host by mapping the peer's memory
//! (the XPMEM kernel module, `/dev/xpmem`, and `libxpmem.so.0`, loaded at run time).
//!
//! Each interface exports its whole address space once (`xpmem_make(0,
//! XPMEM_MAXADDR_SIZE)`); its interface address carries the segment id with its pid. An
//! endpoint gets the peer's segment once (`xpmem_get`) and attaches the page-rounded ranges
//! an operation touches (`xpmem_attach`), kept in a per-peer attachment cache (at most
//! [`ATTACH_MAX`] ranges, the least recently used detached first). An operation then is
//! plain copies between the caller's buffers and the attached ranges, cut where either
//! side's list has a boundary (`tl::pieces`, as cma's gather and `rc_verbs` do). The
//! memory domain is cma's kind (`BoundsMd`): the remote key carries the registered bounds,
//! checked before anything is attached. Like cma, it has no active messages and rides
//! beside posix.
//!
//! What it shares with posix's mapping path: the idea (a peer's pages mapped into this
//! process, copies by loads and stores) but not the mechanism. Posix maps only segments
//! a worker allocated as shared memory, by descriptor (`ucs::shm::Segment::attach`);
//! xpmem maps any address of the peer, which is what makes it a transport for the user's
//! own buffers.
//!
//! No machine here has `/dev/xpmem`: discovery lists xpmem as absent with the reason. The
//! transport's logic (addresses, the attachment cache and its eviction, bounds, iov
//! gathers, a dead peer) is tested against the `Model` of its tests: a model of the XPMEM
//! calls, which maps the same pages at a second address of one process, and says so.

use std::collections::{BTreeMap, VecDeque};
use std::ffi::{c_int, c_void};
use std::path::Path;

use slab::Slab;
use ucs::wire::{Reader, Writer};
use ucs::{Config, Status, UcsResult};

use crate::ep::{iov_total, Comp, Done, EpId, Iov};
use crate::error::OpenError;
use crate::iface::{Handler, Iface, IfaceAttr, IfaceFlags, OpLimits, PerfEstimate};
use crate::md::{BoundsMd, Md, RemoteKey};

static MD: BoundsMd = BoundsMd::new("xpmem", *b"XPM1");

/// Attached ranges kept per peer.
pub const ATTACH_MAX: usize = 256;

/// The XPMEM calls the transport makes (`xpmem.h`). Segment and access ids are the
/// library's 64-bit ids.
pub trait XpmemApi: Send {
    /// Exports this process's whole address space (`xpmem_make(0, XPMEM_MAXADDR_SIZE,
    /// XPMEM_PERMIT_MODE, 0600)`).
    fn make_all(&mut self) -> Result<i64, Status>;
    fn remove(&mut self, segid: i64);
    /// Read-write access to a peer's segment (`xpmem_get`).
    fn get(&mut self, segid: i64) -> Result<i64, Status>;
    fn release(&mut self, apid: i64);
    /// Maps `size` bytes at `offset` (the peer's address) of an accessed segment.
    fn attach(&mut self, apid: i64, offset: u64, size: usize) -> Result<*mut u8, Status>;
    /// Unmaps what `attach` mapped at `at` (`size` is what was attached).
    fn detach(&mut self, at: *mut u8, size: usize);
}

/// `struct xpmem_addr`.
#[repr(C)]
#[derive(Clone, Copy)]
struct XpmemAddr {
    apid: i64,
    offset: libc::off_t,
}

const XPMEM_RDWR: c_int = 0x2;
const XPMEM_PERMIT_MODE: c_int = 0x1;
const XPMEM_MAXADDR_SIZE: usize = usize::MAX;

type MakeFn = unsafe extern "C" fn(*mut c_void, usize, c_int, *mut c_void) -> i64;
type RemoveFn = unsafe extern "C" fn(i64) -> c_int;
type GetFn = unsafe extern "C" fn(i64, c_int, c_int, *mut c_void) -> i64;
type ReleaseFn = unsafe extern "C" fn(i64) -> c_int;
type AttachFn = unsafe extern "C" fn(XpmemAddr, usize, *mut c_void) -> *mut c_void;
type DetachFn = unsafe extern "C" fn(*mut c_void) -> c_int;
type VersionFn = unsafe extern "C" fn() -> c_int;

/// libxpmem, loaded at run time.
#[derive(Clone, Copy, Debug)]
pub struct Lib {
    make: MakeFn,
    remove: RemoveFn,
    get: GetFn,
    release: ReleaseFn,
    attach: AttachFn,
    detach: DetachFn,
}

impl Lib {
    /// Loads libxpmem where `/dev/xpmem` exists; else why not.
    pub fn load() -> Result<Lib, String> {
        if !Path::new("/dev/xpmem").exists() {
            return Err("/dev/xpmem not found (xpmem kernel module not loaded)".into());
        }
        // SAFETY: dlopen with a constant name; never closed, so the pointers stay valid.
        let h = unsafe { libc::dlopen(c"libxpmem.so.0".as_ptr(), libc::RTLD_NOW) };
        if h.is_null() {
            return Err("/dev/xpmem exists, but libxpmem.so.0 does not load".into());
        }
        let sym = |name: &std::ffi::CStr| {
            // SAFETY: a symbol lookup in a loaded library.
            let p = unsafe { libc::dlsym(h, name.as_ptr()) };
            (!p.is_null())
                .then_some(p)
                .ok_or_else(|| format!("libxpmem.so.0 lacks {}", name.to_string_lossy()))
        };
        let (make, remove, get, release, attach, detach, version) = (
            sym(c"xpmem_make")?,
            sym(c"xpmem_remove")?,
            sym(c"xpmem_get")?,
            sym(c"xpmem_release")?,
            sym(c"xpmem_attach")?,
            sym(c"xpmem_detach")?,
            sym(c"xpmem_version")?,
        );
        // SAFETY: the C signatures of xpmem.h.
        let lib = unsafe {
            Lib {
                make: std::mem::transmute::<*mut c_void, MakeFn>(make),
                remove: std::mem::transmute::<*mut c_void, RemoveFn>(remove),
                get: std::mem::transmute::<*mut c_void, GetFn>(get),
                release: std::mem::transmute::<*mut c_void, ReleaseFn>(release),
                attach: std::mem::transmute::<*mut c_void, AttachFn>(attach),
                detach: std::mem::transmute::<*mut c_void, DetachFn>(detach),
            }
        };
        // SAFETY: as above; no arguments.
        let v = unsafe { std::mem::transmute::<*mut c_void, VersionFn>(version)() };
        if v < 0 {
            return Err(format!(
                "xpmem_version failed: {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(lib)
    }
}

fn errno_status() -> Status {
    Status::from_errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

impl XpmemApi for Lib {
    fn make_all(&mut self) -> Result<i64, Status> {
        // SAFETY: exporting the whole address space; the permit value is the mode 0600
        // passed as a pointer-sized integer, as xpmem.h specifies.
        let s = unsafe {
            (self.make)(
                std::ptr::null_mut(),
                XPMEM_MAXADDR_SIZE,
                XPMEM_PERMIT_MODE,
                0o600 as *mut c_void,
            )
        };
        if s < 0 {
            Err(errno_status())
        } else {
            Ok(s)
        }
    }
    fn remove(&mut self, segid: i64) {
        // SAFETY: a segment this process made.
        unsafe { (self.remove)(segid) };
    }
    fn get(&mut self, segid: i64) -> Result<i64, Status> {
        // SAFETY: a peer's segment id; the kernel checks the permission.
        let a = unsafe { (self.get)(segid, XPMEM_RDWR, XPMEM_PERMIT_MODE, std::ptr::null_mut()) };
        if a < 0 {
            Err(errno_status())
        } else {
            Ok(a)
        }
    }
    fn release(&mut self, apid: i64) {
        // SAFETY: an access id of ours, released once.
        unsafe { (self.release)(apid) };
    }
    fn attach(&mut self, apid: i64, offset: u64, size: usize) -> Result<*mut u8, Status> {
        let at = XpmemAddr {
            apid,
            offset: offset as libc::off_t,
        };
        // SAFETY: maps a new range (no address requested); the kernel checks the range.
        let p = unsafe { (self.attach)(at, size, std::ptr::null_mut()) };
        if p.is_null() || p == libc::MAP_FAILED {
            Err(errno_status())
        } else {
            Ok(p.cast())
        }
    }
    fn detach(&mut self, at: *mut u8, _size: usize) {
        // SAFETY: a range `attach` mapped, detached once.
        unsafe { (self.detach)(at.cast()) };
    }
}

/// Whether the transport can run here.
pub fn probe() -> Result<(), String> {
    Lib::load().map(|_| ())
}

/// An attached range of a peer.
#[derive(Debug)]
struct Attached {
    len: u64,
    at: *mut u8,
    used: u64,
}

#[derive(Debug)]
struct XpmemEp {
    pid: i32,
    start_time: u64,
    segid: i64,
    apid: Option<i64>,
    /// By the peer's page-aligned start address.
    attached: BTreeMap<u64, Attached>,
    failed: Option<Status>,
    reported: bool,
}

/// The `xpmem` interface.
pub struct XpmemIface {
    api: Box<dyn XpmemApi>,
    attr: IfaceAttr,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    segid: i64,
    eps: Slab<XpmemEp>,
    tick: u64,
    page: u64,
    check_interval_ns: u64,
    next_check: u64,
    progress_calls: u32,
    errors: VecDeque<(EpId, Status)>,
    hits: u64,
    attaches: u64,
    detaches: u64,
    bytes: u64,
}

// SAFETY: the attached ranges are mappings of this process, used only through `&mut self`.
unsafe impl Send for XpmemIface {}

impl std::fmt::Debug for XpmemIface {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "XpmemIface(segid {})", self.segid)
    }
}

impl XpmemIface {
    pub fn open(cfg: &Config) -> Result<XpmemIface, OpenError> {
        let lib = Lib::load().map_err(|reason| OpenError::Unavailable {
            tl: "xpmem",
            reason,
        })?;
        Self::with_api(cfg, Box::new(lib)).map_err(|s| OpenError::Unavailable {
            tl: "xpmem",
            reason: format!("xpmem_make: {s}"),
        })
    }

    /// The interface over `api` (the library, or a model in tests).
    pub fn with_api(cfg: &Config, mut api: Box<dyn XpmemApi>) -> UcsResult<XpmemIface> {
        let segid = api.make_all()?;
        let pid = std::process::id();
        let start = ucs::sys::process_start_time(pid as i32).unwrap_or(0);
        let dev_addr = Writer::default().u64(ucs::sys::host_id()).buf;
        let iface_addr = Writer::default().u32(pid).u64(start).u64(segid as u64).buf;
        let rma = OpLimits {
            min_zcopy: 0,
            max_zcopy: usize::MAX,
            max_iov: usize::MAX,
            ..Default::default()
        };
        Ok(XpmemIface {
            api,
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
                // Not measured (no machine here has XPMEM): a cached attachment is a
                // memcpy, so the figures are those of a copy in memory; a miss adds an
                // attach system call.
                perf: PerfEstimate {
                    overhead_ns: 100.0,
                    latency_ns: 50.0,
                    bandwidth: 12e9,
                },
                mem: crate::iface::MemCaps::HOST,
                device_addr_len: dev_addr.len(),
                iface_addr_len: iface_addr.len(),
            },
            dev_addr,
            iface_addr,
            segid,
            eps: Slab::new(),
            tick: 0,
            page: ucs::sys::page_size() as u64,
            check_interval_ns: cfg.error_check_interval_ns.max(1_000_000),
            next_check: 0,
            progress_calls: 0,
            errors: VecDeque::new(),
            hits: 0,
            attaches: 0,
            detaches: 0,
            bytes: 0,
        })
    }

    fn parse_iface(iface: &[u8]) -> Option<(i32, u64, i64)> {
        let mut r = Reader::new(iface);
        let pid = r.u32()?;
        let start = r.u64()?;
        let segid = r.u64()? as i64;
        (r.is_empty() && pid > 0 && pid <= i32::MAX as u32 && segid >= 0)
            .then_some((pid as i32, start, segid))
    }

    fn fail(&mut self, ep: EpId, st: Status) -> Status {
        if let Some(e) = self.eps.get_mut(ep.index()) {
            if e.failed.is_none() {
                e.failed = Some(st);
                self.errors.push_back((ep, st));
            }
        }
        self.drop_mappings(ep);
        st
    }

    fn drop_mappings(&mut self, ep: EpId) {
        let Some(e) = self.eps.get_mut(ep.index()) else {
            return;
        };
        for (_, a) in std::mem::take(&mut e.attached) {
            self.api.detach(a.at, a.len as usize);
            self.detaches += 1;
        }
        if let Some(apid) = e.apid.take() {
            self.api.release(apid);
        }
    }

    /// Where the peer's `[addr, addr + n)` is in this process: from the cache, or newly
    /// attached (page-rounded), evicting the least recently used range when full.
    fn translate(&mut self, ep: EpId, addr: u64, n: u64) -> UcsResult<*mut u8> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.eps.get_mut(ep.index()).ok_or(Status::InvalidParam)?;
        if let Some((&start, a)) = e.attached.range_mut(..=addr).next_back() {
            if addr + n <= start + a.len {
                a.used = tick;
                self.hits += 1;
                // SAFETY: `addr - start` is within the attached range.
                return Ok(unsafe { a.at.add((addr - start) as usize) });
            }
        }
        let apid = match e.apid {
            Some(a) => a,
            None => {
                let segid = e.segid;
                let a = self.api.get(segid)?;
                self.eps[ep.index()].apid = Some(a);
                a
            }
        };
        let start = addr & !(self.page - 1);
        let end = (addr + n).div_ceil(self.page) * self.page;
        let e = &mut self.eps[ep.index()];
        if e.attached.len() >= ATTACH_MAX {
            if let Some((&old, _)) = e.attached.iter().min_by_key(|(_, a)| a.used) {
                let a = e.attached.remove(&old).expect("just found");
                self.api.detach(a.at, a.len as usize);
                self.detaches += 1;
            }
        }
        let at = self.api.attach(apid, start, (end - start) as usize)?;
        self.attaches += 1;
        // A range this one covers is of no more use.
        let e = &mut self.eps[ep.index()];
        let inside: Vec<u64> = e
            .attached
            .range(start..end)
            .filter(|(&s, a)| s + a.len <= end)
            .map(|(&s, _)| s)
            .collect();
        for s in inside {
            let a = e.attached.remove(&s).expect("listed");
            self.api.detach(a.at, a.len as usize);
            self.detaches += 1;
        }
        self.eps[ep.index()].attached.insert(
            start,
            Attached {
                len: end - start,
                at,
                used: tick,
            },
        );
        // SAFETY: `addr - start` is within the range just attached.
        Ok(unsafe { at.add((addr - start) as usize) })
    }

    /// Copies between local pieces and the peer's: `write` moves local bytes to the peer.
    ///
    /// # Safety
    /// The local entries satisfy the zcopy contract of `Iface::put_zcopy`/`get_zcopy`.
    unsafe fn transfer(
        &mut self,
        ep: EpId,
        write: bool,
        local: &[Iov],
        remote: &[(u64, u64)],
        rkey: &RemoteKey,
    ) -> UcsResult<Done> {
        let e = self.eps.get(ep.index()).ok_or(Status::InvalidParam)?;
        if let Some(st) = e.failed {
            return Err(st);
        }
        let mut total = 0u64;
        for &(a, l) in remote {
            rkey.check_range(a, l)?;
            total += l;
        }
        if total != iov_total(local) as u64 {
            return Err(Status::InvalidParam);
        }
        let la: Vec<(u64, u64)> = local
            .iter()
            .map(|v| (v.buffer as u64, v.length as u64))
            .collect();
        // Each remote segment is attached (or found) whole, when its first piece comes.
        let mut seg: Option<(usize, *mut u8)> = None;
        for (_, l, j, r, n) in super::pieces(&la, remote, u64::MAX) {
            let base = match seg {
                Some((k, p)) if k == j => p,
                _ => {
                    let p = self.translate(ep, remote[j].0, remote[j].1)?;
                    seg = Some((j, p));
                    p
                }
            };
            // SAFETY: the piece lies within segment `j`, attached from `base`.
            let p = unsafe { base.add((r - remote[j].0) as usize) };
            // SAFETY: the local piece lies in an entry the caller vouches for; the remote
            // one in a range attached for at least `n` bytes from `p`. The two are
            // different mappings, so they do not overlap unless the peer's memory is this
            // process's (then `copy` is still defined: overlapping ranges are not passed
            // by any caller, which moves between distinct buffers).
            unsafe {
                if write {
                    std::ptr::copy_nonoverlapping(l as *const u8, p, n as usize);
                } else {
                    std::ptr::copy_nonoverlapping(p as *const u8, l as *mut u8, n as usize);
                }
            }
        }
        self.bytes += total;
        Ok(Done::Now)
    }

    fn check_peers(&mut self) {
        let dead: Vec<usize> = self
            .eps
            .iter()
            .filter(|(_, e)| e.failed.is_none() && ucs::sys::process_gone(e.pid, e.start_time))
            .map(|(i, _)| i)
            .collect();
        for i in dead {
            log::debug!("xpmem: peer pid {} is gone", self.eps[i].pid);
            self.fail(EpId(i as u32), Status::ConnectionReset);
        }
    }
}

impl Drop for XpmemIface {
    fn drop(&mut self) {
        let eps: Vec<usize> = self.eps.iter().map(|(i, _)| i).collect();
        for i in eps {
            self.drop_mappings(EpId(i as u32));
        }
        self.api.remove(self.segid);
    }
}

impl Iface for XpmemIface {
    fn tl_name(&self) -> &str {
        "xpmem"
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
        let (pid, start_time, segid) = Self::parse_iface(iface).ok_or(Status::InvalidAddr)?;
        if !ucs::sys::process_alive(pid) {
            return Err(Status::Unreachable);
        }
        let id = self.eps.insert(XpmemEp {
            pid,
            start_time,
            segid,
            apid: None,
            attached: BTreeMap::new(),
            failed: None,
            reported: false,
        });
        Ok(EpId(id as u32))
    }

    fn ep_destroy(&mut self, ep: EpId) {
        self.drop_mappings(ep);
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
        let remote = [(remote_addr, iov_total(iov) as u64)];
        // SAFETY: forwarded caller contract.
        unsafe { self.transfer(ep, true, iov, &remote, rkey) }
    }

    unsafe fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        let remote = [(remote_addr, iov_total(iov) as u64)];
        // SAFETY: forwarded caller contract.
        unsafe { self.transfer(ep, false, iov, &remote, rkey) }
    }

    unsafe fn get_zcopy_iov(
        &mut self,
        ep: EpId,
        local: &[Iov],
        remote: &[(u64, u64)],
        rkey: &RemoteKey,
        _comp: Comp,
    ) -> UcsResult<Done> {
        // SAFETY: forwarded caller contract.
        unsafe { self.transfer(ep, false, local, remote, rkey) }
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
        vec![
            ("xpmem_bytes", self.bytes),
            ("xpmem_attach_hits", self.hits),
            ("xpmem_attaches", self.attaches),
            ("xpmem_detaches", self.detaches),
        ]
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
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use super::*;
    use ucs::shm::Segment;

    /// **A model of the XPMEM calls, not XPMEM**: it exports and attaches memory of this
    /// process only, and only memory in arenas it made (shared memory segments), which it
    /// maps a second time at another address on `attach`. So a copy through an attached
    /// range reaches the exported pages through a different mapping, as with XPMEM, and
    /// a wrong offset shows in the data. It counts what is attached.
    #[derive(Default)]
    pub struct Model {
        st: Arc<Mutex<ModelState>>,
    }

    #[derive(Default)]
    pub struct ModelState {
        arenas: Vec<Segment>,
        segids: Vec<i64>,
        apids: HashMap<i64, i64>,
        mapped: HashMap<usize, usize>,
        pub attached: usize,
        pub released: usize,
    }

    impl Model {
        fn arena(&self, len: usize) -> &'static mut [u8] {
            let seg = Segment::create(len).unwrap();
            // SAFETY: the segment is mapped read-write for `len` bytes and lives in the
            // model state, which each test holds until after its last use of the slice.
            let s = unsafe { std::slice::from_raw_parts_mut(seg.base(), len) };
            self.st.lock().unwrap().arenas.push(seg);
            s
        }
    }

    impl XpmemApi for Model {
        fn make_all(&mut self) -> Result<i64, Status> {
            let mut s = self.st.lock().unwrap();
            let id = 100 + s.segids.len() as i64;
            s.segids.push(id);
            Ok(id)
        }
        fn remove(&mut self, segid: i64) {
            self.st.lock().unwrap().segids.retain(|s| *s != segid);
        }
        fn get(&mut self, segid: i64) -> Result<i64, Status> {
            let mut s = self.st.lock().unwrap();
            if !s.segids.contains(&segid) {
                return Err(Status::InvalidParam);
            }
            let apid = 1000 + s.apids.len() as i64;
            s.apids.insert(apid, segid);
            Ok(apid)
        }
        fn release(&mut self, apid: i64) {
            let mut s = self.st.lock().unwrap();
            s.apids.remove(&apid);
            s.released += 1;
        }
        fn attach(&mut self, apid: i64, offset: u64, size: usize) -> Result<*mut u8, Status> {
            let mut s = self.st.lock().unwrap();
            if !s.apids.contains_key(&apid) {
                return Err(Status::InvalidParam);
            }
            let arena = s
                .arenas
                .iter()
                .find(|a| {
                    let b = a.base() as u64;
                    offset >= b && offset + size as u64 <= b + a.len() as u64
                })
                .ok_or(Status::InvalidAddr)?;
            let off = offset - arena.base() as u64;
            // SAFETY: a new shared mapping of the arena's pages (the offset is page
            // aligned: the transport attaches page-rounded ranges).
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    size,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    arena.fd(),
                    off as libc::off_t,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(Status::InvalidAddr);
            }
            s.mapped.insert(p as usize, size);
            s.attached += 1;
            Ok(p.cast())
        }
        fn detach(&mut self, at: *mut u8, size: usize) {
            let mut s = self.st.lock().unwrap();
            assert_eq!(
                s.mapped.remove(&(at as usize)),
                Some(size),
                "detach what was attached"
            );
            // SAFETY: a mapping `attach` made, unmapped once.
            unsafe { libc::munmap(at.cast(), size) };
        }
    }

    fn pair() -> (XpmemIface, EpId, Model, Arc<Mutex<ModelState>>) {
        let m = Model::default();
        let st = m.st.clone();
        let view = Model { st: st.clone() };
        let mut i = XpmemIface::with_api(&Config::default(), Box::new(m)).unwrap();
        let (d, a) = (i.device_address().to_vec(), i.iface_address().to_vec());
        let ep = i.ep_connect(&d, &a).unwrap();
        (i, ep, view, st)
    }

    fn counter(i: &XpmemIface, name: &str) -> u64 {
        i.counters()
            .into_iter()
            .find(|(n, _)| *n == name)
            .unwrap()
            .1
    }

    #[test]
    fn puts_and_gets_go_through_a_second_mapping_and_are_cached() {
        let (mut i, ep, m, st) = pair();
        let page = ucs::sys::page_size();
        let peer = m.arena(64 * page);
        // SAFETY: the arena outlives the registration.
        let mh = unsafe { MD.mem_reg(peer.as_mut_ptr(), peer.len()) }.unwrap();
        let rk = MD.rkey_unpack(&MD.mkey_pack(&mh)).unwrap();
        let base = peer.as_ptr() as u64;
        // A put that straddles pages, from two local buffers.
        let mut a: Vec<u8> = (0..3000u32).map(|x| x as u8).collect();
        let mut b: Vec<u8> = (0..5000u32).map(|x| (x * 3) as u8).collect();
        let iov = [Iov::from_mut_slice(&mut a), Iov::from_mut_slice(&mut b)];
        let at = base + page as u64 - 1000;
        // SAFETY: the local vectors outlive the synchronous operation.
        let r = unsafe { i.put_zcopy(ep, &iov, at, &rk, 0) };
        assert_eq!(r, Ok(Done::Now));
        let off = (at - base) as usize;
        assert!(peer[off..off + 3000] == a[..]);
        assert!(peer[off + 3000..off + 8000] == b[..]);
        assert_eq!(counter(&i, "xpmem_attaches"), 1);
        // A get inside the attached range hits the cache.
        let mut back = vec![0u8; 8000];
        let iov = [Iov::from_mut_slice(&mut back)];
        // SAFETY: as above.
        let r = unsafe { i.get_zcopy(ep, &iov, at, &rk, 0) };
        assert_eq!(r, Ok(Done::Now));
        assert!(back == [a.clone(), b.clone()].concat());
        assert_eq!(counter(&i, "xpmem_attaches"), 1);
        assert_eq!(counter(&i, "xpmem_attach_hits"), 1);
        // A larger range replaces the one it covers.
        let mut big = vec![7u8; 10 * page];
        let iov = [Iov::from_mut_slice(&mut big)];
        // SAFETY: as above.
        let r = unsafe { i.put_zcopy(ep, &iov, base, &rk, 0) };
        assert_eq!(r, Ok(Done::Now));
        assert!(peer[..10 * page].iter().all(|&x| x == 7));
        assert_eq!(
            counter(&i, "xpmem_detaches"),
            1,
            "the covered range is detached"
        );
        // Outside the key: refused before anything is attached.
        let mut d = [0u8; 16];
        let iov = [Iov::from_mut_slice(&mut d)];
        let end = base + peer.len() as u64;
        // SAFETY: as above.
        let r = unsafe { i.get_zcopy(ep, &iov, end - 8, &rk, 0) };
        assert_eq!(r, Err(Status::InvalidParam));
        assert_eq!(counter(&i, "xpmem_attaches"), 2);
        ep_gone(i, ep, st);
    }

    fn ep_gone(mut i: XpmemIface, ep: EpId, st: Arc<Mutex<ModelState>>) {
        i.ep_destroy(ep);
        let s = st.lock().unwrap();
        assert!(
            s.mapped.is_empty(),
            "destroying the endpoint detaches everything"
        );
        assert_eq!(s.released, 1, "and releases the access id");
    }

    #[test]
    fn a_gather_of_many_segments_evicts_the_least_recently_used() {
        let (mut i, ep, m, st) = pair();
        let page = ucs::sys::page_size();
        let n = ATTACH_MAX + 44;
        let peer = m.arena(2 * n * page);
        for (k, x) in peer.iter_mut().enumerate() {
            *x = (k * 13 + 5) as u8;
        }
        // SAFETY: the arena outlives the registration.
        let mh = unsafe { MD.mem_reg(peer.as_mut_ptr(), peer.len()) }.unwrap();
        let rk = MD.rkey_unpack(&MD.mkey_pack(&mh)).unwrap();
        let base = peer.as_ptr() as u64;
        // One segment in every other page: each needs its own attachment.
        let remote: Vec<(u64, u64)> = (0..n as u64)
            .map(|k| (base + 2 * k * page as u64 + 100, 300))
            .collect();
        let mut got = vec![0u8; 300 * n];
        let local = [Iov::from_mut_slice(&mut got)];
        // SAFETY: `got` outlives the synchronous operation.
        let r = unsafe { i.get_zcopy_iov(ep, &local, &remote, &rk, 0) };
        assert_eq!(r, Ok(Done::Now));
        let want: Vec<u8> = remote
            .iter()
            .flat_map(|&(a, l)| {
                let o = (a - base) as usize;
                peer[o..o + l as usize].to_vec()
            })
            .collect();
        assert!(got == want, "every byte gathered through the attachments");
        assert_eq!(counter(&i, "xpmem_attaches"), n as u64);
        assert_eq!(counter(&i, "xpmem_detaches"), 44, "bounded at ATTACH_MAX");
        assert_eq!(st.lock().unwrap().mapped.len(), ATTACH_MAX);
        // The most recent segments are still attached; the first ones were evicted.
        let hits = counter(&i, "xpmem_attach_hits");
        let mut one = [0u8; 300];
        let last = [remote[n - 1]];
        let l = [Iov::from_mut_slice(&mut one)];
        // SAFETY: as above.
        unsafe { i.get_zcopy_iov(ep, &l, &last, &rk, 0) }.unwrap();
        assert_eq!(counter(&i, "xpmem_attach_hits"), hits + 1);
        let first = [remote[0]];
        // SAFETY: as above.
        unsafe { i.get_zcopy_iov(ep, &l, &first, &rk, 0) }.unwrap();
        assert_eq!(
            counter(&i, "xpmem_attaches"),
            n as u64 + 1,
            "evicted, attached again"
        );
        ep_gone(i, ep, st);
    }

    #[test]
    fn a_dead_peer_fails_the_endpoint_and_drops_its_mappings() {
        let (mut i, _ep, m, st) = pair();
        let page = ucs::sys::page_size();
        let peer = m.arena(4 * page);
        // SAFETY: the arena outlives the registration.
        let mh = unsafe { MD.mem_reg(peer.as_mut_ptr(), peer.len()) }.unwrap();
        let rk = MD.rkey_unpack(&MD.mkey_pack(&mh)).unwrap();
        // An endpoint to a child that exits: same segment id (the model's), another pid.
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = ucs::sys::process_start_time(pid as i32).unwrap();
        let addr = Writer::default()
            .u32(pid)
            .u64(start)
            .u64(i.segid as u64)
            .buf;
        let dev = i.device_address().to_vec();
        let ep = i.ep_connect(&dev, &addr).unwrap();
        let mut d = [0u8; 64];
        let iov = [Iov::from_mut_slice(&mut d)];
        // SAFETY: `d` outlives the synchronous operation.
        unsafe { i.get_zcopy(ep, &iov, peer.as_ptr() as u64, &rk, 0) }.unwrap();
        assert_eq!(st.lock().unwrap().mapped.len(), 1);
        child.kill().unwrap();
        child.wait().unwrap();
        #[derive(Default)]
        struct Ev(Vec<(EpId, Status)>);
        impl Handler for Ev {
            fn am(&mut self, _: u8, _: &[u8]) {}
            fn completion(&mut self, _: Comp, _: Status) {}
            fn ep_error(&mut self, ep: EpId, st: Status) {
                self.0.push((ep, st));
            }
        }
        let mut ev = Ev::default();
        let t0 = std::time::Instant::now();
        while ev.0.is_empty() && t0.elapsed().as_secs() < 5 {
            i.progress(&mut ev);
        }
        assert_eq!(ev.0, vec![(ep, Status::ConnectionReset)]);
        assert!(
            st.lock().unwrap().mapped.is_empty(),
            "its attachments are gone"
        );
        // SAFETY: as above.
        let r = unsafe { i.get_zcopy(ep, &iov, peer.as_ptr() as u64, &rk, 0) };
        assert_eq!(r, Err(Status::ConnectionReset));
        assert_eq!(i.flush(Some(ep), 0), Err(Status::ConnectionReset));
    }

    #[test]
    fn addresses_are_checked_and_xpmem_is_absent_here_with_the_reason() {
        assert_eq!(XpmemIface::parse_iface(&[1, 2, 3]), None);
        let ok = Writer::default().u32(10).u64(1).u64(5).buf;
        assert_eq!(XpmemIface::parse_iface(&ok), Some((10, 1, 5)));
        let neg = Writer::default().u32(10).u64(1).u64(u64::MAX).buf;
        assert_eq!(XpmemIface::parse_iface(&neg), None, "a negative segment id");
        match probe() {
            Ok(()) => eprintln!("xpmem: /dev/xpmem and libxpmem are here"),
            Err(why) => {
                assert!(why.contains("xpmem"), "{why}");
                eprintln!("xpmem: skipped the real library: {why}");
            }
        }
    }
}
