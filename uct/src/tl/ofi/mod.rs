//! Deferred work on libfabric: tagged sends and receives handed to a provider's own
//! deferred-work queue (`fi_control(domain, FI_QUEUE_WORK, fi_deferred_work)`), each to run
//! when the provider's trigger counter reaches its threshold and to add one to the
//! provider's completion counter when done — the semantics [`crate::trigger`] implements in
//! software, run by the provider instead of by our progress loop.
//!
//! `cxi` (HPE Slingshot 11) runs the queue in its NIC: that is the provider this module is
//! for, and the only one [`TriggeredEp::open`] takes unless another is named. No machine
//! here has one. libfabric's `sockets` provider implements the same call in software, in
//! its own progress thread, and ships in Debian's `libfabric1`: it is how the code here is
//! exercised, between real processes, on every CI run (`tests.rs`). It is a stand-in for
//! the NIC's queue, not a model of `cxi`: what is `cxi`'s own (its counters' MMIO and
//! writeback, [`cxi`]) is checked only against the header's definitions.
//!
//! A stream drives the provider's counters in one of two ways:
//! - through [`Bridge`], on any provider: the host copies the stream-written trigger
//!   counter of a [`Counters`] into the provider's trigger counter, and the provider's
//!   completion count back, so the stream writes and waits exactly as with the software
//!   engine;
//! - on `cxi`, without the host: the trigger counter's MMIO "add" doorbell and the
//!   completion counter's writeback word ([`TriggeredEp::cxi_counters`]); mapping them for a
//!   stream (a 64-bit stream write to the doorbell, a 64-bit stream wait on the word) is the
//!   caller's.
//!
//! Work items stay allocated until everything posted has completed (the `sockets`
//! provider keeps pointers into them; which item a counter increment belongs to is not
//! known), so a caller that never lets its queue drain grows it.

pub mod cxi;
mod sys;
#[cfg(test)]
mod tests;

use std::ffi::{c_int, c_void, CStr, CString};
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

use ucs::{Status, UcsResult};

use crate::trigger::Counters;
use sys::*;

/// Why a provider's deferred-work queue cannot be opened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpenError {
    pub status: Status,
    pub why: String,
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({:?})", self.why, self.status)
    }
}

fn open_err(status: Status, why: impl Into<String>) -> OpenError {
    OpenError {
        status,
        why: why.into(),
    }
}

/// What to open.
#[derive(Clone, Debug, Default)]
pub struct Params {
    /// The libfabric provider; `None` is `cxi`, the one whose queue runs in hardware.
    /// Others (`sockets`) run it in software and must be asked for by name.
    pub provider: Option<String>,
    /// The node (address or name) the endpoint binds to; `None` lets the provider choose.
    pub node: Option<String>,
}

/// The library's version and its providers here, or why there is no libfabric.
pub fn providers() -> Result<(String, Vec<String>), String> {
    let lib = sys::lib()?;
    // SAFETY: takes no argument.
    let v = unsafe { (lib.version)() };
    let version = format!("libfabric {}.{}", v >> 16, v & 0xffff);
    let mut info = null_mut();
    // SAFETY: the library's own API version, no node, service or hints, an out pointer;
    // the list is freed below.
    let rc = unsafe {
        (lib.getinfo)(
            v,
            std::ptr::null(),
            std::ptr::null(),
            0,
            std::ptr::null(),
            &mut info,
        )
    };
    if rc != 0 || info.is_null() {
        return Ok((version, Vec::new()));
    }
    let mut provs: Vec<String> = Vec::new();
    let mut p = info;
    while !p.is_null() {
        // SAFETY: a node of the list fi_getinfo returned, not yet freed; its fabric
        // attribute and provider name are NUL-terminated strings or null.
        unsafe {
            let fa = (*p).fabric_attr;
            if !fa.is_null() && !(*fa).prov_name.is_null() {
                let n = CStr::from_ptr((*fa).prov_name).to_string_lossy();
                if !provs.iter().any(|x| *x == n) {
                    provs.push(n.into_owned());
                }
            }
            p = (*p).next;
        }
    }
    // SAFETY: the list fi_getinfo returned, freed once.
    unsafe { (lib.freeinfo)(info) };
    Ok((version, provs))
}

/// A peer's address in the endpoint's address vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer(FiAddr);

/// One posted operation, kept in place until the queue drains.
struct Work {
    dw: FiDeferredWork,
    op: FiOpTagged,
    cntr_op: FiOpCntr,
    iov: libc::iovec,
}

/// What has completed: successes and failures, as the provider counted them plus the
/// failures its completion queue reported for our operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Done {
    pub ok: u64,
    pub failed: u64,
}

impl Done {
    pub fn total(&self) -> u64 {
        self.ok + self.failed
    }
}

/// An RDM endpoint of one provider with a trigger counter, a completion counter, and
/// tagged operations deferred on them.
pub struct TriggeredEp {
    lib: &'static Lib,
    provider: String,
    fabric: *mut FidFabric,
    domain: *mut FidDomain,
    av: *mut FidAv,
    cq: *mut FidCq,
    ep: *mut FidEp,
    trig: *mut FidCntr,
    comp: *mut FidCntr,
    // Boxed: each item's address is in the provider's hands and must not move when the
    // vector grows.
    #[allow(clippy::vec_box)]
    works: Vec<Box<Work>>,
    posted: u64,
    /// Failures reported through the completion queue (the provider did not count them on
    /// the completion counter), the first one's status, and what `abort` wrote off.
    cq_failed: u64,
    first_error: Option<Status>,
    abandoned: u64,
}

impl std::fmt::Debug for TriggeredEp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TriggeredEp")
            .field("provider", &self.provider)
            .field("posted", &self.posted)
            .field("done", &self.done())
            .finish_non_exhaustive()
    }
}

// SAFETY: the libfabric objects are used through `&mut self` (one thread at a time) or
// through the counters' `read`/`add`, which providers make thread-safe; the provider's own
// threads synchronize with us inside the library.
unsafe impl Send for TriggeredEp {}

/// Closes a libfabric object.
///
/// # Safety
/// `fid` is an open object of the library, closed once, after everything bound to it.
unsafe fn close(fid: *mut Fid) {
    if !fid.is_null() {
        // SAFETY: per the contract.
        unsafe { ((*(*fid).ops).close)(fid) };
    }
}

fn status_of(rc: isize) -> Status {
    match -rc {
        FI_EAGAIN => Status::NoResource,
        e if e == libc::ENOSYS as isize || e == libc::EOPNOTSUPP as isize => Status::Unsupported,
        e if e == libc::ENOMEM as isize => Status::NoMemory,
        e if e == libc::EINVAL as isize => Status::InvalidParam,
        e if e == libc::ECANCELED as isize => Status::Canceled,
        e if e == libc::ECONNREFUSED as isize || e == libc::ECONNRESET as isize => {
            Status::ConnectionReset
        }
        e if e == libc::ETIMEDOUT as isize => Status::TimedOut,
        _ => Status::IoError,
    }
}

impl TriggeredEp {
    /// Opens `p.provider`'s fabric, domain, an RDM endpoint for tagged messages bound to
    /// a completion queue (failures only: successes are counted, not queued), an address
    /// vector, and the two counters.
    pub fn open(p: &Params) -> Result<TriggeredEp, OpenError> {
        let lib = sys::lib().map_err(|w| open_err(Status::NoDevice, w))?;
        let prov = p.provider.clone().unwrap_or_else(|| "cxi".to_string());
        let cprov = CString::new(prov.clone())
            .map_err(|_| open_err(Status::InvalidParam, "provider name has a NUL"))?;
        let node = match &p.node {
            Some(n) => Some(
                CString::new(n.clone())
                    .map_err(|_| open_err(Status::InvalidParam, "node has a NUL"))?,
            ),
            None => None,
        };
        // SAFETY: fi_dupinfo(NULL) allocates a zeroed fi_info with every attribute
        // (fi_allocinfo); freed below with fi_freeinfo, which also frees the strdup'd name.
        let hints = unsafe { (lib.dupinfo)(std::ptr::null()) };
        if hints.is_null() {
            return Err(open_err(Status::NoMemory, "fi_allocinfo failed"));
        }
        // SAFETY: the attributes were allocated with the hints; only their leading fields
        // are written.
        unsafe {
            (*hints).caps = FI_TAGGED | FI_SEND | FI_RECV | FI_TRIGGER;
            (*(*hints).ep_attr).type_ = FI_EP_RDM;
            (*(*hints).domain_attr).mr_mode =
                FI_MR_ENDPOINT | FI_MR_ALLOCATED | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR;
            (*(*hints).fabric_attr).prov_name = libc::strdup(cprov.as_ptr());
        }
        // The API version this ABI is written for (1.17), or the library's if older (the
        // prefixes used here are older than either).
        // SAFETY: takes no argument.
        let version = unsafe { (lib.version)() }.min((1 << 16) | 17);
        let mut info = null_mut();
        // SAFETY: an API version the library knows, node or null, hints; the result is
        // freed below.
        let rc = unsafe {
            (lib.getinfo)(
                version,
                node.as_ref().map_or(std::ptr::null(), |n| n.as_ptr()),
                std::ptr::null(),
                0,
                hints,
                &mut info,
            )
        };
        // SAFETY: allocated above, freed once.
        unsafe { (lib.freeinfo)(hints) };
        if rc != 0 || info.is_null() {
            let why = if -rc == FI_ENODATA {
                format!("libfabric has no {prov} provider for tagged RDM with triggered operations here")
            } else {
                format!("fi_getinfo for {prov}: {}", lib.error(rc))
            };
            return Err(open_err(Status::NoDevice, why));
        }
        let mut t = TriggeredEp {
            lib,
            provider: prov,
            fabric: null_mut(),
            domain: null_mut(),
            av: null_mut(),
            cq: null_mut(),
            ep: null_mut(),
            trig: null_mut(),
            comp: null_mut(),
            works: Vec::new(),
            posted: 0,
            cq_failed: 0,
            first_error: None,
            abandoned: 0,
        };
        // On error, `t`'s Drop closes what was opened.
        // SAFETY: `info` is the first entry fi_getinfo returned, freed once after use.
        let r = unsafe { t.open_objects(info) };
        // SAFETY: as above.
        unsafe { (lib.freeinfo)(info) };
        r.map(|()| t)
    }

    /// # Safety
    /// `info` is a valid `fi_info` from `fi_getinfo`.
    unsafe fn open_objects(&mut self, info: *mut FiInfo) -> Result<(), OpenError> {
        let lib = self.lib;
        let chk = |rc: c_int, what: &str| {
            if rc == 0 {
                Ok(())
            } else {
                Err(open_err(
                    status_of(rc as isize),
                    format!("{what}: {}", lib.error(rc)),
                ))
            }
        };
        // Each call goes through the operation table of an object the library opened just
        // before, with arguments of the declared types (the header inlines fi_fabric,
        // fi_domain, fi_av_open, fi_cq_open, fi_cntr_open, fi_endpoint, fi_ep_bind and
        // fi_enable do exactly this); opened objects are kept in `self` at once so that
        // Drop closes them.
        // SAFETY: as above.
        unsafe {
            chk(
                (lib.fabric)((*info).fabric_attr, &mut self.fabric, null_mut()),
                "fi_fabric",
            )?;
            chk(
                ((*(*self.fabric).ops).domain)(self.fabric, info, &mut self.domain, null_mut()),
                "fi_domain",
            )?;
            let dops = (*self.domain).ops;
            let mut av_attr = FiAvAttr {
                type_: FI_AV_TABLE,
                rx_ctx_bits: 0,
                count: 64,
                ep_per_node: 0,
                name: std::ptr::null(),
                map_addr: null_mut(),
                flags: 0,
            };
            chk(
                ((*dops).av_open)(self.domain, &mut av_attr, &mut self.av, null_mut()),
                "fi_av_open",
            )?;
            let mut cq_attr = FiCqAttr {
                size: 0,
                flags: 0,
                format: FI_CQ_FORMAT_CONTEXT,
                wait_obj: FI_WAIT_NONE,
                signaling_vector: 0,
                wait_cond: 0,
                wait_set: null_mut(),
            };
            chk(
                ((*dops).cq_open)(self.domain, &mut cq_attr, &mut self.cq, null_mut()),
                "fi_cq_open",
            )?;
            for c in [&mut self.trig, &mut self.comp] {
                let mut a = FiCntrAttr {
                    events: 0,
                    wait_obj: FI_WAIT_NONE,
                    wait_set: null_mut(),
                    flags: 0,
                };
                chk(
                    ((*dops).cntr_open)(self.domain, &mut a, c, null_mut()),
                    "fi_cntr_open",
                )?;
            }
            chk(
                ((*dops).endpoint)(self.domain, info, &mut self.ep, null_mut()),
                "fi_endpoint",
            )?;
            let ep = self.ep.cast::<Fid>();
            let bind = (*(*ep).ops).bind;
            chk(bind(ep, self.av.cast(), 0), "fi_ep_bind(av)")?;
            chk(
                bind(
                    ep,
                    self.cq.cast(),
                    FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION,
                ),
                "fi_ep_bind(cq)",
            )?;
            chk(
                ((*(*ep).ops).control)(ep, FI_ENABLE, null_mut()),
                "fi_enable",
            )?;
        }
        Ok(())
    }

    /// The provider this endpoint runs on.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    /// This endpoint's address, for a peer's [`insert_peer`](Self::insert_peer).
    pub fn address(&self) -> UcsResult<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        let mut len = buf.len();
        // SAFETY: fi_getname through the endpoint's connection-management table, into a
        // buffer of `len` bytes; the provider writes at most `len` and sets the size.
        let rc = unsafe {
            ((*(*self.ep).cm).getname)(self.ep.cast(), buf.as_mut_ptr().cast(), &mut len)
        };
        if rc != 0 || len > buf.len() {
            return Err(status_of(rc as isize));
        }
        buf.truncate(len);
        Ok(buf)
    }

    /// Adds a peer's address (from its [`address`](Self::address)).
    pub fn insert_peer(&mut self, addr: &[u8]) -> UcsResult<Peer> {
        // The provider reads an address of its own format's length: a shorter one is
        // refused before it could read past it.
        if addr.len() < self.address()?.len() {
            return Err(Status::InvalidAddr);
        }
        let mut fa: FiAddr = FI_ADDR_UNSPEC;
        // SAFETY: fi_av_insert of one address, at least as long as the provider's format;
        // `addr` is only read.
        let n = unsafe {
            ((*(*self.av).ops).insert)(self.av, addr.as_ptr().cast(), 1, &mut fa, 0, null_mut())
        };
        if n != 1 {
            return Err(Status::InvalidAddr);
        }
        Ok(Peer(fa))
    }

    /// Posts a tagged send of `len` bytes at `buf` to `peer`, to start once the trigger
    /// counter reaches `threshold`; it adds one to the completion counter when done.
    ///
    /// # Safety
    /// `buf` stays valid and unchanged until the completion counter counts the send (or
    /// the endpoint is dropped).
    pub unsafe fn post_send(
        &mut self,
        threshold: u64,
        peer: Peer,
        buf: *const u8,
        len: usize,
        tag: u64,
    ) -> UcsResult<()> {
        // SAFETY: per the contract.
        unsafe { self.post_tagged(FI_OP_TSEND, threshold, peer.0, buf.cast_mut(), len, tag, 0) }
    }

    /// Posts a tagged receive of up to `len` bytes into `buf`, from any peer, of a tag
    /// equal to `tag` in the bits `ignore` does not set; it starts once the trigger counter
    /// reaches `threshold` and adds one to the completion counter when done.
    ///
    /// # Safety
    /// `buf` stays valid, and is not read, until the completion counter counts the receive
    /// (or the endpoint is dropped).
    pub unsafe fn post_recv(
        &mut self,
        threshold: u64,
        buf: *mut u8,
        len: usize,
        tag: u64,
        ignore: u64,
    ) -> UcsResult<()> {
        // SAFETY: per the contract.
        unsafe {
            self.post_tagged(
                FI_OP_TRECV,
                threshold,
                FI_ADDR_UNSPEC,
                buf,
                len,
                tag,
                ignore,
            )
        }
    }

    /// Posts "add `value` to the completion counter" once the trigger reaches `threshold`
    /// (`FI_OP_CNTR_ADD`): a marker that counts without moving data.
    pub fn post_count(&mut self, threshold: u64, value: u64) -> UcsResult<()> {
        let mut w = self.new_work(FI_OP_CNTR_ADD, threshold);
        w.cntr_op = FiOpCntr {
            cntr: self.comp,
            value,
        };
        w.dw.op = (&mut w.cntr_op as *mut FiOpCntr).cast();
        self.queue(w)
    }

    fn new_work(&self, op_type: u32, threshold: u64) -> Box<Work> {
        // SAFETY: every field of Work is a plain C value or pointer for which zero is a
        // valid (empty) value.
        let mut w: Box<Work> = Box::new(unsafe { std::mem::zeroed() });
        w.dw.threshold = threshold;
        w.dw.triggering_cntr = self.trig;
        w.dw.completion_cntr = self.comp;
        w.dw.op_type = op_type;
        w
    }

    #[allow(clippy::too_many_arguments)]
    unsafe fn post_tagged(
        &mut self,
        op_type: u32,
        threshold: u64,
        addr: FiAddr,
        buf: *mut u8,
        len: usize,
        tag: u64,
        ignore: u64,
    ) -> UcsResult<()> {
        let mut w = self.new_work(op_type, threshold);
        w.iov = libc::iovec {
            iov_base: buf.cast(),
            iov_len: len,
        };
        let ctx: *mut c_void = (&mut w.dw.context as *mut FiContext2).cast();
        w.op = FiOpTagged {
            ep: self.ep,
            msg: FiMsgTagged {
                msg_iov: &w.iov,
                desc: null_mut(),
                iov_count: 1,
                addr,
                tag,
                ignore,
                context: ctx,
                data: 0,
            },
            flags: 0,
        };
        w.dw.op = (&mut w.op as *mut FiOpTagged).cast();
        self.queue(w)
    }

    fn queue(&mut self, mut w: Box<Work>) -> UcsResult<()> {
        let dom = self.domain.cast::<Fid>();
        let arg: *mut c_void = (&mut w.dw as *mut FiDeferredWork).cast();
        // SAFETY: fi_control(domain, FI_QUEUE_WORK, work): the work and everything it
        // points to live in the Box, which stays in `self.works` (its address fixed) until
        // the queue drains or the endpoint is dropped after closing the provider's objects.
        let rc = unsafe { ((*(*dom).ops).control)(dom, FI_QUEUE_WORK, arg) };
        if rc != 0 {
            return Err(status_of(rc as isize));
        }
        self.works.push(w);
        self.posted += 1;
        Ok(())
    }

    /// Adds `n` to the provider's trigger counter (from the host).
    pub fn trigger_add(&self, n: u64) -> UcsResult<()> {
        // SAFETY: fi_cntr_add through the counter's table.
        let rc = unsafe { ((*(*self.trig).ops).add)(self.trig, n) };
        if rc == 0 {
            Ok(())
        } else {
            Err(status_of(rc as isize))
        }
    }

    /// The provider's trigger counter.
    pub fn triggered(&self) -> u64 {
        // SAFETY: fi_cntr_read through the counter's table.
        unsafe { ((*(*self.trig).ops).read)(self.trig) }
    }

    /// Operations posted so far.
    pub fn posted(&self) -> u64 {
        self.posted
    }

    /// Reads the completion queue's failures (each one of our operations that the
    /// provider ended with an error, not on the completion counter), frees the work items
    /// once everything posted has completed, and returns what has completed.
    pub fn progress(&mut self) -> Done {
        let mut entry = [null_mut::<c_void>(); 16];
        loop {
            // SAFETY: fi_cq_read into 16 context-format entries.
            let n = unsafe {
                ((*(*self.cq).ops).read)(self.cq, entry.as_mut_ptr().cast(), entry.len())
            };
            if n == -FI_EAVAIL {
                // SAFETY: zeroed is a valid error entry (err_data_size 0: no provider data
                // is asked for); fi_cq_readerr writes one entry.
                let mut e: FiCqErrEntry = unsafe { std::mem::zeroed() };
                // SAFETY: as above.
                let r = unsafe { ((*(*self.cq).ops).readerr)(self.cq, &mut e, 0) };
                if r != 1 {
                    break;
                }
                let ours = self.works.iter().any(|w| {
                    std::ptr::eq(
                        &w.dw.context as *const FiContext2 as *const c_void,
                        e.op_context,
                    )
                });
                if ours {
                    self.cq_failed += 1;
                    self.first_error.get_or_insert(status_of(-(e.err as isize)));
                }
            } else if n <= 0 {
                break;
            }
            // Successful entries are not ours (selective completion: deferred operations
            // are counted, not queued); nothing to do with them.
        }
        let d = self.done();
        if d.total() >= self.posted {
            self.works.clear();
        }
        d
    }

    /// What has completed, without reading the completion queue.
    pub fn done(&self) -> Done {
        // SAFETY: fi_cntr_read / fi_cntr_readerr through the counter's table.
        let (ok, err) = unsafe {
            (
                ((*(*self.comp).ops).read)(self.comp),
                ((*(*self.comp).ops).readerr)(self.comp),
            )
        };
        Done {
            ok,
            failed: err + self.cq_failed + self.abandoned,
        }
    }

    /// On `cxi`: the trigger counter's and the completion counter's extension operations,
    /// for a stream to drive them without the host ([`cxi`]); `Unsupported` elsewhere.
    pub fn cxi_counters(&self) -> UcsResult<(cxi::CxiCounterOps<'_>, cxi::CxiCounterOps<'_>)> {
        // SAFETY: both counters are open and outlive the borrow of self.
        unsafe {
            Ok((
                cxi::CxiCounterOps::open(self.trig)?,
                cxi::CxiCounterOps::open(self.comp)?,
            ))
        }
    }

    /// The first error an operation ended with.
    pub fn error(&self) -> Option<Status> {
        self.first_error
    }

    /// Writes off every operation not completed yet as failed with `Canceled` (a dead
    /// peer, or an owner giving up), so that whoever waits on the completion count is let
    /// through; the provider still holds them until the endpoint is dropped. A provider
    /// need not report a peer's death: `sockets` refuses a send posted to a dead peer, but
    /// drops one posted before the peer died without a completion or an error, so an owner
    /// that learns of the death elsewhere calls this.
    pub fn abort(&mut self) {
        let left = self.posted.saturating_sub(self.done().total());
        if left > 0 {
            self.abandoned += left;
            self.first_error.get_or_insert(Status::Canceled);
        }
    }

    /// One step of the host bridge between `c` (the counters a stream writes and waits on,
    /// [`crate::trigger`]) and the provider's: the stream's new trigger releases go to the
    /// provider's trigger counter, and everything completed goes to `c`'s completion
    /// counter. Returns whether either moved.
    pub fn bridge(&mut self, b: &mut Bridge, c: &Counters) -> UcsResult<bool> {
        let t = c.trigger().load(Ordering::Acquire);
        let d = t.wrapping_sub(b.seen);
        let mut moved = false;
        if d != 0 && (d as i32) > 0 {
            self.trigger_add(u64::from(d))?;
            b.seen = t;
            moved = true;
        }
        let done = self.progress().total();
        if done != b.done {
            b.done = done;
            c.completion()
                .store(b.base.wrapping_add(done as u32), Ordering::Release);
            moved = true;
        }
        Ok(moved)
    }
}

impl Drop for TriggeredEp {
    fn drop(&mut self) {
        // SAFETY: each object was opened by `open_objects` (or is null), and is closed
        // once, the endpoint before what is bound to it; FI_FLUSH_WORK first asks the
        // provider to drop deferred work still queued (cxi; others answer ENOSYS). The work
        // items are freed only after the objects that point into them are closed.
        unsafe {
            if !self.domain.is_null() {
                let dom = self.domain.cast::<Fid>();
                ((*(*dom).ops).control)(dom, FI_FLUSH_WORK, null_mut());
            }
            close(self.ep.cast());
            close(self.trig.cast());
            close(self.comp.cast());
            close(self.cq.cast());
            close(self.av.cast());
            close(self.domain.cast());
            close(self.fabric.cast());
        }
        self.works.clear();
    }
}

/// The host side of a stream driving a provider's counters through [`Counters`]: how far
/// the stream's trigger counter has been copied, and the completion count last written.
/// Thresholds of operations posted for the stream's `k`-th start after `base` are `k`
/// ([`Bridge::threshold`]).
#[derive(Clone, Copy, Debug)]
pub struct Bridge {
    base: u32,
    seen: u32,
    done: u64,
}

impl Bridge {
    /// For counters that start at `base` (both of them, as [`Counters::new`] sets them).
    pub fn new(base: u32) -> Bridge {
        Bridge {
            base,
            seen: base,
            done: 0,
        }
    }

    /// The provider-side threshold of the release that writes `value` to the stream's
    /// trigger counter (cyclically after `base`).
    pub fn threshold(&self, value: u32) -> u64 {
        u64::from(value.wrapping_sub(self.base))
    }

    /// The value the stream waits for when `n` operations have completed.
    pub fn completion_value(&self, n: u64) -> u32 {
        self.base.wrapping_add(n as u32)
    }
}
