//! Deferred work: operations posted now and run later, when a *trigger counter* reaches a
//! *threshold*, each adding one to a *completion counter* when it is done — the semantics
//! of libfabric's `fi_deferred_work`, which Slingshot's NIC runs in hardware.
//!
//! This is the software engine: it serves any transport, because firing an operation is
//! the caller's business (a [`DeferredQueue`] holds operations of any type `T` and says
//! which may run). No interface here runs deferred work in hardware; where libfabric's
//! `cxi` provider would, `rucx-info -d` says whether it is present ([`cxi_presence`]).
//!
//! The counters are 32-bit and compared cyclically (`(value - threshold) as i32 >= 0`, the
//! rule of `cuStreamWaitValue32`'s `GEQ`), so they may wrap. They live where a GPU can
//! write and wait on them when asked ([`Counters::new`] with `mapped`): pinned host memory
//! mapped into every device's address space. A stream writes the trigger counter when it
//! reaches a point (`cuStreamWriteValue32`), and waits on the completion counter
//! (`cuStreamWaitValue32`); the host side, here, reads the one and bumps the other.
//!
//! The engine never polls by itself. Its owner looks at [`DeferredQueue::next_ready`] from
//! its progress loop only while some operation may fire or is running
//! ([`DeferredQueue::armed`]); with nothing armed it costs nothing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use ucs::{Status, UcsResult};

/// Whether a counter at `value` has reached `threshold`, cyclically (wraps allowed, as
/// long as the two are less than 2³¹ apart).
#[inline]
pub fn reached(value: u32, threshold: u32) -> bool {
    (value.wrapping_sub(threshold) as i32) >= 0
}

/// One counter on its own cache line (the GPU writes the trigger, the host the completion).
#[repr(C, align(64))]
#[derive(Debug, Default)]
struct Line(AtomicU32);

/// Where a pair of counters lives.
#[derive(Debug)]
enum Mem {
    Heap(Box<[Line; 2]>),
    /// Pinned host memory mapped into the devices (`cuMemHostAlloc` with `DEVICEMAP`).
    #[cfg(feature = "cuda")]
    Mapped {
        host: *mut Line,
        dev: u64,
    },
}

/// A trigger counter and a completion counter.
#[derive(Debug)]
pub struct Counters {
    mem: Mem,
}

// SAFETY: the counters are atomics; the mapped memory is owned by this value and freed once,
// in Drop, from whichever thread drops it.
unsafe impl Send for Counters {}
// SAFETY: shared access only goes through the atomics.
unsafe impl Sync for Counters {}

impl Counters {
    /// Both counters at `base`. `mapped`: in pinned host memory a GPU can write and wait
    /// on (needs a CUDA driver: `Unsupported` without one); else in ordinary memory.
    pub fn new(base: u32, mapped: bool) -> UcsResult<Counters> {
        let c = if mapped {
            Self::new_mapped()?
        } else {
            Counters {
                mem: Mem::Heap(Box::default()),
            }
        };
        c.trigger().store(base, Ordering::Relaxed);
        c.completion().store(base, Ordering::Release);
        Ok(c)
    }

    #[cfg(feature = "cuda")]
    fn new_mapped() -> UcsResult<Counters> {
        let d = ucs::cuda::driver().ok_or(Status::Unsupported)?;
        let p = d.host_alloc(std::mem::size_of::<[Line; 2]>())?;
        let dev = match d.host_device_ptr(p) {
            Ok(dev) => dev,
            Err(e) => {
                // SAFETY: just allocated, not used since.
                unsafe { d.host_free(p) };
                return Err(e);
            }
        };
        let host = p.cast::<Line>();
        // SAFETY: the allocation is page-aligned and holds two lines; zeroed atomics are
        // valid values, written before any shared use.
        unsafe {
            host.write(Line::default());
            host.add(1).write(Line::default());
        }
        Ok(Counters {
            mem: Mem::Mapped { host, dev },
        })
    }

    #[cfg(not(feature = "cuda"))]
    fn new_mapped() -> UcsResult<Counters> {
        Err(Status::Unsupported)
    }

    fn line(&self, i: usize) -> &AtomicU32 {
        match &self.mem {
            Mem::Heap(b) => &b[i].0,
            // SAFETY: `host` points at two initialized lines owned by self (new_mapped).
            #[cfg(feature = "cuda")]
            Mem::Mapped { host, .. } => unsafe { &(*host.add(i)).0 },
        }
    }

    /// The trigger counter: written by whoever releases operations (a stream, or the host).
    pub fn trigger(&self) -> &AtomicU32 {
        self.line(0)
    }

    /// The completion counter: one added per finished operation.
    pub fn completion(&self) -> &AtomicU32 {
        self.line(1)
    }

    /// The device addresses of the trigger and completion counters, when mapped.
    pub fn device_ptrs(&self) -> Option<(u64, u64)> {
        match &self.mem {
            Mem::Heap(_) => None,
            #[cfg(feature = "cuda")]
            Mem::Mapped { dev, .. } => Some((*dev, *dev + std::mem::size_of::<Line>() as u64)),
        }
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        #[cfg(feature = "cuda")]
        if let (Mem::Mapped { host, .. }, Some(d)) = (&self.mem, ucs::cuda::driver()) {
            // SAFETY: allocated by `new_mapped` with this driver, freed once; the owner made
            // sure no stream still uses it (see `ucp`'s queue destroy).
            unsafe { d.host_free(host.cast()) };
        }
    }
}

/// Operations of type `T` waiting for their trigger, in the order posted, and the
/// bookkeeping of the ones running.
#[derive(Debug)]
pub struct DeferredQueue<T> {
    counters: Arc<Counters>,
    pending: VecDeque<(u32, T)>,
    /// Fired and not yet completed.
    running: usize,
    /// The first error an operation completed with, and how many did.
    error: Option<Status>,
    failed: u64,
}

impl<T> DeferredQueue<T> {
    /// An empty queue with both counters at `base` (see [`Counters::new`]).
    pub fn new(base: u32, mapped: bool) -> UcsResult<DeferredQueue<T>> {
        Ok(DeferredQueue {
            counters: Arc::new(Counters::new(base, mapped)?),
            pending: VecDeque::new(),
            running: 0,
            error: None,
            failed: 0,
        })
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The counters, shared: another thread may watch the completion counter without
    /// the queue (and an owner may keep the counter memory alive after the queue, while a
    /// stream may still use it).
    pub fn shared_counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// Posts `op` to run once the trigger counter reaches `threshold`, and after every
    /// operation posted before it (FIFO: a later operation never overtakes an earlier one,
    /// whatever their thresholds).
    pub fn post(&mut self, threshold: u32, op: T) {
        self.pending.push_back((threshold, op));
    }

    /// The oldest operation, if its threshold is reached: it is now running, and owes one
    /// [`complete`](Self::complete).
    #[inline]
    pub fn next_ready(&mut self) -> Option<T> {
        let &(th, _) = self.pending.front()?;
        if !reached(self.counters.trigger().load(Ordering::Acquire), th) {
            return None;
        }
        self.running += 1;
        self.pending.pop_front().map(|(_, op)| op)
    }

    /// Records an operation that its owner started without a trigger (posted at once): it
    /// runs like a fired one and owes one [`complete`](Self::complete).
    pub fn run_untriggered(&mut self) {
        self.running += 1;
    }

    /// Whether polling may do something: an operation runs, or the oldest waiting one has
    /// a threshold that the releases issued so far reach (`issued`: the value the last of
    /// them writes to the trigger counter). Operations no release covers yet need no
    /// polling.
    pub fn armed(&self, issued: u32) -> bool {
        self.running > 0
            || self
                .pending
                .front()
                .is_some_and(|&(th, _)| reached(issued, th))
    }

    /// Records the completion of a running operation with `status`, and adds one to the
    /// completion counter (with release ordering: what the operation wrote is visible to
    /// whoever sees the new count).
    pub fn complete(&mut self, status: Status) {
        debug_assert!(self.running > 0, "complete without a running operation");
        self.running = self.running.saturating_sub(1);
        self.count_done(status);
    }

    fn count_done(&mut self, status: Status) {
        if status != Status::Ok {
            self.failed += 1;
            self.error.get_or_insert(status);
        }
        self.counters.completion().fetch_add(1, Ordering::Release);
    }

    /// Operations waiting for their trigger.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// Operations fired and not completed.
    pub fn running(&self) -> usize {
        self.running
    }

    /// The first error an operation completed with, and how many did.
    pub fn error(&self) -> (Option<Status>, u64) {
        (self.error, self.failed)
    }

    /// Ends every operation still waiting for its trigger with `status`, counting each as
    /// complete (so that nothing waiting on the completion counter hangs), and hands them
    /// back.
    pub fn abandon(&mut self, status: Status) -> Vec<T> {
        let ops: Vec<T> = self.pending.drain(..).map(|(_, op)| op).collect();
        for _ in 0..ops.len() {
            self.count_done(status);
        }
        ops
    }

    /// Counts `n` running operations as complete with `status` without waiting for them
    /// (their owner gave up on them).
    pub fn give_up_running(&mut self, status: Status) {
        for _ in 0..std::mem::take(&mut self.running) {
            self.count_done(status);
        }
    }
}

/// Whether libfabric's `cxi` provider (HPE Slingshot, whose NIC runs deferred work in
/// hardware) is present: `Ok(description)` when it is, `Err(reason)` when not. Loads
/// `libfabric.so.1` at run time (once per process; it stays loaded) and lists its providers
/// with `fi_getinfo`, which takes about 0.3 s. Where it is, [`crate::tl::ofi`] hands
/// operations to its queue.
pub fn cxi_presence() -> Result<String, String> {
    static PRESENCE: std::sync::OnceLock<Result<String, String>> = std::sync::OnceLock::new();
    PRESENCE
        .get_or_init(|| {
            let (version, provs) = crate::tl::ofi::providers()?;
            if provs.is_empty() {
                Err(format!("{version} lists no provider here"))
            } else if provs.iter().any(|p| p == "cxi") {
                Ok(format!("{version}, cxi provider present"))
            } else {
                Err(format!(
                    "{version} has no cxi provider (providers here: {})",
                    provs.join(", ")
                ))
            }
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cyclic_comparison_survives_the_wrap() {
        assert!(reached(5, 5));
        assert!(reached(6, 5));
        assert!(!reached(4, 5));
        assert!(reached(2, u32::MAX - 1)); // wrapped past
        assert!(!reached(u32::MAX - 1, 2));
        assert!(reached(0, u32::MAX));
    }

    #[test]
    fn fires_in_order_when_the_trigger_arrives() {
        let mut q = DeferredQueue::new(u32::MAX - 1, false).unwrap();
        let base = u32::MAX - 1;
        q.post(base.wrapping_add(1), "a");
        q.post(base.wrapping_add(1), "b");
        q.post(base.wrapping_add(2), "c");
        assert!(!q.armed(base));
        assert!(q.armed(base.wrapping_add(1)));
        assert_eq!(q.next_ready(), None);
        q.counters()
            .trigger()
            .store(base.wrapping_add(1), Ordering::Release);
        assert_eq!(q.next_ready(), Some("a"));
        assert_eq!(q.next_ready(), Some("b"));
        assert_eq!(q.next_ready(), None, "c waits for the second trigger");
        q.complete(Status::Ok);
        q.complete(Status::Ok);
        assert_eq!(q.counters().completion().load(Ordering::Acquire), 0); // wrapped
        q.counters()
            .trigger()
            .store(base.wrapping_add(2), Ordering::Release);
        assert_eq!(q.next_ready(), Some("c"));
        q.complete(Status::Canceled);
        assert_eq!(q.error(), (Some(Status::Canceled), 1));
        assert_eq!(q.counters().completion().load(Ordering::Acquire), 1);
    }

    #[test]
    fn a_later_operation_with_a_lower_threshold_waits_its_turn() {
        let mut q = DeferredQueue::new(0, false).unwrap();
        q.post(2, 1);
        q.post(1, 2);
        q.counters().trigger().store(1, Ordering::Release);
        assert_eq!(q.next_ready(), None);
        q.counters().trigger().store(2, Ordering::Release);
        assert_eq!(q.next_ready(), Some(1));
        assert_eq!(q.next_ready(), Some(2));
    }

    #[test]
    fn abandoning_counts_every_operation() {
        let mut q = DeferredQueue::new(10, false).unwrap();
        q.post(11, ());
        q.post(12, ());
        q.counters().trigger().store(11, Ordering::Release);
        assert!(q.next_ready().is_some());
        assert_eq!(q.abandon(Status::Canceled).len(), 1);
        q.give_up_running(Status::Canceled);
        assert_eq!(q.counters().completion().load(Ordering::Acquire), 12);
        assert_eq!(q.error(), (Some(Status::Canceled), 2));
        assert_eq!(q.running(), 0);
        assert_eq!(q.pending(), 0);
    }

    #[test]
    fn mapped_counters_need_a_driver() {
        match Counters::new(0, true) {
            Ok(c) => assert!(c.device_ptrs().is_some()),
            Err(s) => {
                assert_eq!(s, Status::Unsupported);
                eprintln!("skipped: mapped counters (no CUDA driver here)");
            }
        }
    }

    #[test]
    fn cxi_presence_has_an_answer() {
        match cxi_presence() {
            Ok(s) => assert!(s.contains("cxi")),
            Err(why) => assert!(!why.is_empty()),
        }
    }
}
