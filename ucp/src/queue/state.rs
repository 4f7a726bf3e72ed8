//! A queue's record: its deferred operations, the stream that drives it, its counters'
//! bookkeeping, and the operations running; the stream operations a start or a wait
//! becomes; the wakeup of a progress thread. Held by the worker for the queue API
//! (`queue/mod.rs`), which is all of the logic.

use smallvec::SmallVec;
use std::sync::{Condvar, Mutex};
use ucs::Status;
#[cfg(feature = "cuda")]
use ucs::UcsResult;
use uct::trigger::{reached, DeferredQueue};

use crate::datatype::Data;
use crate::request::{EpHandle, ReqId};

/// A queue of a worker: its slot and the slot's generation, so that the id of a destroyed
/// queue is refused rather than taken for a later queue in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueueId {
    pub(super) idx: u32,
    pub(super) gen: u32,
}

/// How a queue's stream writes the trigger counter and waits on the completion counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TriggerKind {
    /// `cuStreamWriteValue32` / `cuStreamWaitValue32`.
    #[default]
    MemOp,
    /// One-thread kernels (a system-scope store; a spin on a system-scope load).
    Kernel,
    /// The start by a stream memory operation (the cheaper write), the wait by a spinning
    /// kernel (released sooner than the stream's own wait; it occupies one thread of the
    /// GPU while it spins).
    Mixed,
}

/// What drives a queue's starts and waits.
#[derive(Clone, Copy, Debug)]
pub enum QueueStream {
    /// No stream, for CPU-only use: `enqueue_start` writes the trigger counter from the
    /// host at once; `enqueue_wait` progresses the worker until the operations started so
    /// far are done.
    Host,
    /// Someone else writes and waits on the counters (`queue_counters`): `enqueue_start`
    /// and `enqueue_wait` only return the value to write or wait for. What a stream does,
    /// done by a test or a custom driver.
    External,
    /// A CUDA stream: starts and waits are queued on it.
    #[cfg(feature = "cuda")]
    Cuda {
        stream: ucs::cuda::StreamRef,
        trigger: TriggerKind,
    },
}

/// How a queue is made.
#[derive(Clone, Copy, Debug)]
pub struct QueueParams {
    pub stream: QueueStream,
    /// Where both counters start (any value: they are compared cyclically).
    pub counter_base: u32,
}

impl Default for QueueParams {
    fn default() -> Self {
        QueueParams {
            stream: QueueStream::Host,
            counter_base: 0,
        }
    }
}

/// What a queue has done, as `queue_query` reports it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueInfo {
    /// Operations enqueued and not yet fired (released or not).
    pub pending: usize,
    /// Fired and not finished.
    pub running: usize,
    /// Starts issued, and operations they released.
    pub starts: u32,
    pub started: u32,
    /// Finished operations (the completion counter minus its base).
    pub completed: u32,
    /// The first error an operation finished with, and how many did.
    pub error: Option<Status>,
    pub failed: u64,
}

/// An operation waiting for its trigger.
#[derive(Debug)]
pub(super) enum Queued {
    Send {
        ep: EpHandle,
        data: Data,
        tag: u64,
    },
    Recv {
        src: EpHandle,
        data: Data,
        tag: u64,
        mask: u64,
    },
}

/// A running operation: its request, and for a receive the endpoint it waits on.
#[derive(Clone, Copy, Debug)]
pub(super) struct Running {
    pub(super) req: ReqId,
    pub(super) src: Option<EpHandle>,
    /// A receive posted before its start: the trigger value of that start, from which its
    /// completion counts.
    pub(super) counts_from: Option<u32>,
    /// Its status, once it finished before its start (its request is freed).
    pub(super) early: Option<Status>,
}

impl Running {
    pub(super) fn fired(req: ReqId, src: Option<EpHandle>) -> Running {
        Running {
            req,
            src,
            counts_from: None,
            early: None,
        }
    }

    /// Whether its completion may be counted, the trigger counter being at `trigger`.
    pub(super) fn countable(&self, trigger: u32) -> bool {
        self.counts_from.is_none_or(|c| reached(trigger, c))
    }
}

#[derive(Debug)]
pub(crate) struct Queue {
    pub(super) dq: DeferredQueue<Queued>,
    pub(super) stream: QueueStream,
    pub(super) base: u32,
    /// Starts issued (the last wrote `base + starts`).
    pub(super) starts: u32,
    /// Operations enqueued since the last start.
    pub(super) batch: u32,
    /// Operations released by the starts so far.
    pub(super) started: u32,
    pub(super) running: SmallVec<[Running; 8]>,
    /// Failures already returned to the caller by a host wait.
    pub(super) reported: u64,
    pub(super) gen: u32,
}

impl Queue {
    pub(super) fn issued(&self) -> u32 {
        self.base.wrapping_add(self.starts)
    }

    pub(super) fn armed(&self) -> bool {
        self.dq.armed(self.issued())
    }
}

/// A stream write of the trigger counter or a stream wait on the completion counter, owed
/// by a start or a wait and issued by [`issue`](Self::issue).
#[cfg(feature = "cuda")]
#[derive(Clone, Copy, Debug)]
pub struct StreamOp {
    stream: ucs::cuda::StreamRef,
    trigger: TriggerKind,
    addr: u64,
    value: u32,
    wait: bool,
}

#[cfg(feature = "cuda")]
impl StreamOp {
    /// Queues the operation on its stream.
    pub fn issue(self) -> UcsResult<()> {
        let s = self.stream;
        match (self.wait, self.trigger) {
            (false, TriggerKind::MemOp | TriggerKind::Mixed) => {
                s.write_value(self.addr, self.value)
            }
            (false, TriggerKind::Kernel) => s.kernel_write(self.addr, self.value),
            (true, TriggerKind::MemOp) => s.wait_value(self.addr, self.value),
            (true, TriggerKind::Kernel | TriggerKind::Mixed) => {
                s.kernel_wait(self.addr, self.value)
            }
        }
    }
}

/// The stream operation of a start (`wait` false: write `value` to the trigger counter) or
/// of a wait (for the completion counter to reach `value`); `None` without a stream.
#[cfg(feature = "cuda")]
pub(super) fn stream_op(qu: &Queue, value: u32, wait: bool) -> UcsResult<Option<StreamOp>> {
    let QueueStream::Cuda { stream, trigger } = qu.stream else {
        return Ok(None);
    };
    let (t, c) = qu.dq.counters().device_ptrs().ok_or(Status::InvalidParam)?;
    Ok(Some(StreamOp {
        stream,
        trigger,
        addr: if wait { c } else { t },
        value,
        wait,
    }))
}

/// Wakes a [`ProgressThread`] sleeping for lack of armed queues.
#[derive(Debug, Default)]
pub(crate) struct Kick {
    pub(super) kicked: Mutex<bool>,
    pub(super) cv: Condvar,
}

impl Kick {
    pub(crate) fn kick(&self) {
        *self.kicked.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_one();
    }
}
