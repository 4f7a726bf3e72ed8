//! Stream-triggered queues: tag sends and receives enqueued now, released in batches by a
//! GPU stream (or the host) writing a trigger counter, and waited for by the stream on a
//! completion counter (the `MPIX_Enqueue_*` model of stream-triggered MPI).
//!
//! A queue is a `uct::trigger::DeferredQueue` of tag operations plus the bookkeeping of
//! its batches:
//! * `enqueue_send` / `enqueue_recv` post an operation with the threshold of the *next*
//!   start, and return at once;
//! * `enqueue_start` is one write of the trigger counter (`base + starts`): on the stream
//!   (a stream memory operation or a one-thread kernel), by the host at once, or left to
//!   the caller (`QueueStream::External`);
//! * `enqueue_wait` is one wait for the completion counter to reach `base + started`, the
//!   number of operations every start so far released: on the stream, or, with no stream,
//!   by progressing this worker.
//!
//! A receive may also be posted at once (`enqueue_recv_posted`): it takes its message as
//! soon as it comes, but counts as an operation of the next start, so a stream's wait
//! covers it and nothing before that start waits for it (see the method).
//!
//! The worker fires released operations from `progress` (in FIFO order per queue), and
//! watches them until they finish; each finished operation adds one to the completion
//! counter, failed or not, so a stream waiting on it never hangs. A receive names the
//! endpoint it expects its message from (as stream-triggered MPI has no `ANY_SOURCE`): if
//! that endpoint fails, the receive ends with the endpoint's error. Destroying a queue
//! counts everything it still holds as finished, with `Canceled`.
//!
//! Nothing is polled while no queue has a released operation waiting or running: the
//! worker's fast path is untouched (one flag checked on the slow path).

//!
//! The queue API is written against the worker's own: queues are kept by the worker
//! (`queue/state.rs`), which gives them a turn in `progress` and at its drop through the
//! hooks the first queue registers (`QueueHooks`); everything else goes through the calls
//! an application makes (tag send and receive, progress, request test and cancel).

use smallvec::SmallVec;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use ucs::{Status, UcsResult};
use uct::trigger::{reached, Counters, DeferredQueue};

pub(crate) mod state;

#[cfg(feature = "cuda")]
pub use state::StreamOp;
pub use state::{QueueId, QueueInfo, QueueParams, QueueStream, TriggerKind};

use crate::datatype::Data;
use crate::request::{EpHandle, ReqId};
use crate::worker::op::{RecvParams, SendParams};
use crate::worker::state::{QueueHooks, Worker};
#[cfg(feature = "cuda")]
use state::stream_op;
use state::{Kick, Queue, Queued, Running};

impl Worker {
    /// Creates a queue (`ucpx_queue_create`). A CUDA stream's queue keeps its counters in
    /// pinned host memory mapped to the devices.
    pub fn queue_create(&mut self, p: QueueParams) -> UcsResult<QueueId> {
        let mapped = !matches!(p.stream, QueueStream::Host | QueueStream::External);
        let dq = DeferredQueue::new(p.counter_base, mapped)?;
        // The worker gives the queues a turn in its progress and at its drop.
        self.queue_hooks.get_or_insert(QueueHooks {
            progress: Worker::progress_queues,
            drop: Worker::queues_drop_all,
        });
        self.queue_gen = self.queue_gen.wrapping_add(1);
        let gen = self.queue_gen;
        let i = self.queues.insert(Queue {
            dq,
            stream: p.stream,
            base: p.counter_base,
            starts: 0,
            batch: 0,
            started: 0,
            running: SmallVec::new(),
            reported: 0,
            gen,
        });
        match u32::try_from(i) {
            Ok(idx) => Ok(QueueId { idx, gen }),
            Err(_) => {
                self.queues.remove(i);
                Err(Status::NoMemory)
            }
        }
    }

    fn queue(&mut self, q: QueueId) -> UcsResult<&mut Queue> {
        self.queues
            .get_mut(q.idx as usize)
            .filter(|qu| qu.gen == q.gen)
            .ok_or(Status::InvalidParam)
    }

    fn queue_ref(&self, q: QueueId) -> Option<&Queue> {
        self.queues.get(q.idx as usize).filter(|qu| qu.gen == q.gen)
    }

    /// `InvalidParam` for an endpoint this worker does not have.
    fn ep_known(&self, ep: EpHandle) -> UcsResult<()> {
        if self.ep_exists(ep) {
            Ok(())
        } else {
            Err(Status::InvalidParam)
        }
    }

    fn enqueue(&mut self, q: QueueId, op: Queued) -> UcsResult<()> {
        let qu = self.queue(q)?;
        let th = qu.issued().wrapping_add(1);
        qu.dq.post(th, op);
        qu.batch = qu.batch.wrapping_add(1);
        Ok(())
    }

    /// Enqueues a tagged send of `data` on `ep`, to go when the next start is reached
    /// (`ucpx_enqueue_send`). Any datatype and memory type a send takes. `data` must stay
    /// valid until a wait covering it is over.
    pub fn enqueue_send(
        &mut self,
        q: QueueId,
        ep: EpHandle,
        data: &Data,
        tag: u64,
    ) -> UcsResult<()> {
        self.ep_known(ep)?;
        self.enqueue(
            q,
            Queued::Send {
                ep,
                data: data.clone(),
                tag,
            },
        )
    }

    /// Enqueues a receive of a message from `src` matching `(tag, mask)` into `data`
    /// (`ucpx_enqueue_recv`), posted when the next start is reached.
    pub fn enqueue_recv(
        &mut self,
        q: QueueId,
        src: EpHandle,
        data: &Data,
        tag: u64,
        mask: u64,
    ) -> UcsResult<()> {
        self.ep_known(src)?;
        self.enqueue(
            q,
            Queued::Recv {
                src,
                data: data.clone(),
                tag,
                mask,
            },
        )
    }

    /// Posts a receive of a message from `src` matching `(tag, mask)` into `data` now, as
    /// an operation of the next start (the paper's Faces pre-posts its receives this way):
    /// the message is taken whenever it comes, so a peer's rendezvous never waits for our
    /// stream to reach the start, while the completion counter counts the receive only
    /// once the trigger counter reaches that start (the stream got there). Counted
    /// sooner — when the host issues the start, ahead of its stream — it would stand in
    /// for an operation of an earlier batch that has not finished, and let the stream's
    /// wait for that batch through early. The buffer is written as soon as the message
    /// comes: the caller makes sure nothing still reads it (a second buffer for every
    /// other iteration, as Faces does, where the peer's message cannot leave before our
    /// stream is past the previous use).
    pub fn enqueue_recv_posted(
        &mut self,
        q: QueueId,
        src: EpHandle,
        data: &Data,
        tag: u64,
        mask: u64,
    ) -> UcsResult<()> {
        self.ep_known(src)?;
        self.queue(q)?;
        let req = self.tag_recv(data, tag, mask, RecvParams::default())?;
        let qu = self.queue(q)?;
        qu.dq.run_untriggered();
        qu.batch = qu.batch.wrapping_add(1);
        qu.running.push(Running {
            req,
            src: Some(src),
            counts_from: Some(qu.issued().wrapping_add(1)),
            early: None,
        });
        self.arm_queues();
        Ok(())
    }

    /// A queue has a released operation to fire or one running: the worker gives the
    /// queues their turn in `progress` from now on, and a progress thread wakes.
    fn arm_queues(&mut self) {
        self.core.queues_armed = true;
        self.core.work = true;
        if let Some(k) = &self.queue_kick {
            k.kick();
        }
    }

    /// Releases every operation enqueued since the last start, as one batch
    /// (`ucpx_enqueue_start`): one write of the trigger counter, queued on the stream,
    /// done by the host, or (`External`) left to the caller. Returns the value written.
    pub fn enqueue_start(&mut self, q: QueueId) -> UcsResult<u32> {
        let qu = self.queue(q)?;
        let value = qu.issued().wrapping_add(1);
        #[cfg(feature = "cuda")]
        if let Some(op) = stream_op(qu, value, false)? {
            op.issue()?;
        }
        self.start_batch(q, value)?;
        Ok(value)
    }

    /// [`enqueue_start`](Self::enqueue_start) with the stream's write left to the caller,
    /// who issues the returned operation after letting go of the worker (a thread that
    /// shares the worker with a [`ProgressThread`] then holds it for the bookkeeping
    /// only). `None` for a queue without a stream. If issuing fails, abort the queue: what
    /// the start released will never be triggered.
    #[cfg(feature = "cuda")]
    pub fn enqueue_start_deferred(&mut self, q: QueueId) -> UcsResult<Option<StreamOp>> {
        let qu = self.queue(q)?;
        let value = qu.issued().wrapping_add(1);
        let op = stream_op(qu, value, false)?;
        self.start_batch(q, value)?;
        Ok(op)
    }

    fn start_batch(&mut self, q: QueueId, value: u32) -> UcsResult<()> {
        let qu = self.queue(q)?;
        if let QueueStream::Host = qu.stream {
            qu.dq.counters().trigger().store(value, Ordering::Release);
        }
        qu.starts = qu.starts.wrapping_add(1);
        qu.started = qu.started.wrapping_add(std::mem::take(&mut qu.batch));
        if qu.armed() {
            self.arm_queues();
        }
        Ok(())
    }

    /// Waits until every operation started so far has finished (`ucpx_enqueue_wait`): one
    /// wait on the completion counter queued on the stream; with no stream, progress until
    /// then (returning the first error of an operation that failed since the last such
    /// wait); `External`: the value to wait for, for the caller. Returns the completion
    /// value waited for.
    pub fn enqueue_wait(&mut self, q: QueueId) -> UcsResult<u32> {
        let qu = self.queue(q)?;
        let target = qu.base.wrapping_add(qu.started);
        match qu.stream {
            QueueStream::External => {}
            #[cfg(feature = "cuda")]
            QueueStream::Cuda { .. } => {
                if let Some(op) = stream_op(qu, target, true)? {
                    op.issue()?;
                }
            }
            QueueStream::Host => {
                loop {
                    let qu = self.queue(q)?;
                    if reached(
                        qu.dq.counters().completion().load(Ordering::Acquire),
                        target,
                    ) {
                        break;
                    }
                    if self.progress() == 0 {
                        std::hint::spin_loop();
                    }
                }
                let qu = self.queue(q)?;
                let (err, failed) = qu.dq.error();
                if failed > qu.reported {
                    qu.reported = failed;
                    return Err(err.unwrap_or(Status::IoError));
                }
            }
        }
        Ok(target)
    }

    /// [`enqueue_wait`](Self::enqueue_wait) of a stream's queue, with the stream's wait left
    /// to the caller (see [`enqueue_start_deferred`](Self::enqueue_start_deferred)).
    /// `Unsupported` for a queue without a stream.
    #[cfg(feature = "cuda")]
    pub fn enqueue_wait_deferred(&mut self, q: QueueId) -> UcsResult<StreamOp> {
        let qu = self.queue(q)?;
        let target = qu.base.wrapping_add(qu.started);
        stream_op(qu, target, true)?.ok_or(Status::Unsupported)
    }

    /// The queue's counters, shared, for a thread that watches the completion counter
    /// without the worker (the worker's own view is [`queue_counters`](Self::queue_counters)),
    /// with the counters' base.
    pub fn queue_counters_shared(&self, q: QueueId) -> Option<(std::sync::Arc<Counters>, u32)> {
        self.queue_ref(q)
            .map(|qu| (qu.dq.shared_counters(), qu.base))
    }

    /// Whether some queue has a released operation to fire or one running: what a progress
    /// loop dedicated to queues needs to keep polling for.
    pub fn queues_armed(&self) -> bool {
        self.core.queues_armed
    }

    /// The queue's counters, for whoever drives an `External` queue, or to look.
    pub fn queue_counters(&self, q: QueueId) -> Option<&Counters> {
        self.queue_ref(q).map(|qu| qu.dq.counters())
    }

    /// What the queue has done.
    pub fn queue_query(&self, q: QueueId) -> UcsResult<QueueInfo> {
        let qu = self.queue_ref(q).ok_or(Status::InvalidParam)?;
        let (error, failed) = qu.dq.error();
        Ok(QueueInfo {
            pending: qu.dq.pending(),
            running: qu.dq.running(),
            starts: qu.starts,
            started: qu.started,
            completed: qu
                .dq
                .counters()
                .completion()
                .load(Ordering::Acquire)
                .wrapping_sub(qu.base),
            error,
            failed,
        })
    }

    /// Cuts short everything the queue holds, counting it as finished with `Canceled` so
    /// that no stream waiting on the completion counter hangs: operations not yet fired
    /// are dropped (released or not), receives not yet matched are cancelled, and sends in
    /// flight are left to finish on their own (their buffers stay in use until they do,
    /// as after `request_free`). Returns how many operations were cut short. The queue
    /// stays usable.
    pub fn queue_abort(&mut self, q: QueueId) -> UcsResult<usize> {
        let qu = self.queue(q)?;
        let abandoned = qu.dq.abandon(Status::Canceled).len();
        let running = std::mem::take(&mut qu.running);
        qu.dq.give_up_running(Status::Canceled);
        // Released-or-not, every operation enqueued is now counted: later starts release
        // nothing of what came before.
        qu.started = qu.started.wrapping_add(std::mem::take(&mut qu.batch));
        qu.reported += (abandoned + running.len()) as u64;
        for r in &running {
            self.request_cancel(r.req);
            self.request_free(r.req);
        }
        self.core.queues_armed = self.queues.iter().any(|(_, q)| q.armed());
        Ok(abandoned + running.len())
    }

    /// Destroys a queue (`ucpx_queue_destroy`), after [`queue_abort`](Self::queue_abort)
    /// if it still holds operations. Returns `Canceled` if anything was cut short, the
    /// first error of an operation that no wait reported, or Ok.
    ///
    /// A CUDA stream may still have the queue's counters in use (a wait queued behind
    /// other work): the counter memory is then kept until the stream is idle.
    pub fn queue_destroy(&mut self, q: QueueId) -> UcsResult<()> {
        let cut = self.queue_abort(q)?;
        let qu = self
            .queues
            .try_remove(q.idx as usize)
            .ok_or(Status::InvalidParam)?;
        let (err, failed) = qu.dq.error();
        let unreported = failed > qu.reported;
        retire(qu);
        if cut > 0 {
            Err(Status::Canceled)
        } else if unreported {
            Err(err.unwrap_or(Status::IoError))
        } else {
            Ok(())
        }
    }

    /// Destroys every queue left when the worker goes (its drop): everything they hold is
    /// counted as finished, so no stream waits forever, and counters a stream may still
    /// use are kept until it is idle.
    fn queues_drop_all(&mut self) {
        let ids: Vec<QueueId> = self
            .queues
            .iter()
            .map(|(i, qu)| QueueId {
                idx: i as u32,
                gen: qu.gen,
            })
            .collect();
        for q in ids {
            let _ = self.queue_destroy(q);
        }
    }

    /// Fires released operations and collects finished ones, for every armed queue
    /// (called from `progress` while `queues_armed`).
    fn progress_queues(&mut self) -> usize {
        let mut n = 0;
        let ids: SmallVec<[usize; 4]> = self
            .queues
            .iter()
            .filter(|(_, q)| q.armed())
            .map(|(i, _)| i)
            .collect();
        for i in ids {
            n += self.reap(i);
            loop {
                let Some(op) = self.queues.get_mut(i).and_then(|q| q.dq.next_ready()) else {
                    break;
                };
                n += 1;
                let (r, src) = self.fire(op);
                let qu = &mut self.queues[i];
                match r {
                    Ok(Some(req)) => qu.running.push(Running::fired(req, src)),
                    Ok(None) => qu.dq.complete(Status::Ok),
                    Err(s) => qu.dq.complete(s),
                }
            }
        }
        self.core.queues_armed = self.queues.iter().any(|(_, q)| q.armed());
        n
    }

    /// Posts a released operation.
    fn fire(&mut self, op: Queued) -> (UcsResult<Option<ReqId>>, Option<EpHandle>) {
        match op {
            Queued::Send { ep, data, tag } => {
                (self.tag_send(ep, &data, tag, SendParams::default()), None)
            }
            Queued::Recv {
                src,
                data,
                tag,
                mask,
            } => {
                // Posted even when the source endpoint failed: a peer that sent and then
                // closed has delivered its messages, which stay receivable. One that is
                // not here never comes: `reap` cancels the receive with the failure.
                let r = self.tag_recv(&data, tag, mask, RecvParams::default());
                (r.map(Some), Some(src))
            }
        }
    }

    /// Takes the finished operations of queue `i` off its running list, counting each
    /// (a receive posted before its start only once the trigger counter reaches it). A receive
    /// whose source endpoint failed is cancelled and ends with that failure.
    fn reap(&mut self, i: usize) -> usize {
        let mut n = 0;
        let mut k = 0;
        while k < self.queues[i].running.len() {
            let r = self.queues[i].running[k];
            let s = match r.early {
                Some(s) => s,
                None => {
                    let failure = r.src.and_then(|ep| self.ep_failure(ep));
                    if failure.is_some() {
                        self.request_cancel(r.req);
                    }
                    match self.request_test(r.req) {
                        None => {
                            k += 1;
                            continue;
                        }
                        Some((s, _)) => match (s, failure) {
                            (Status::Canceled, Some(f)) => f,
                            _ => s,
                        },
                    }
                }
            };
            let qu = &mut self.queues[i];
            if !r.countable(qu.dq.counters().trigger().load(Ordering::Acquire)) {
                qu.running[k].early = Some(s);
                k += 1;
                continue;
            }
            qu.running.swap_remove(k);
            qu.dq.complete(s);
            n += 1;
        }
        n
    }

    /// The error an endpoint failed with, if it did (closed or unknown: `NotConnected`).
    fn ep_failure(&self, ep: EpHandle) -> Option<Status> {
        if self.ep_exists(ep) {
            self.ep_failed(ep)
        } else {
            Some(Status::NotConnected)
        }
    }
}

/// A thread that progresses a worker while its queues are armed (the progress-thread way
/// of running stream-triggered operations, as HPE's implementation does intra-node), and
/// sleeps on a condition variable, woken by `enqueue_start`, while none is.
///
/// It holds the worker's mutex for one `progress` call at a time. An application thread
/// that takes the worker through [`lock`](Self::lock) goes first: the progress thread
/// stands back while someone waits for the lock, so enqueuing is never starved; with
/// [`Worker::enqueue_start_deferred`] the stream calls are made after letting go.
#[derive(Debug)]
pub struct ProgressThread {
    stop: Arc<AtomicBool>,
    kick: Arc<Kick>,
    want: Arc<AtomicUsize>,
    worker: Arc<Mutex<Worker>>,
    handle: Option<std::thread::JoinHandle<u64>>,
}

impl ProgressThread {
    /// Starts progressing `worker` from a new thread.
    pub fn spawn(worker: Arc<Mutex<Worker>>) -> ProgressThread {
        let kick = Arc::new(Kick::default());
        let stop = Arc::new(AtomicBool::new(false));
        let want = Arc::new(AtomicUsize::new(0));
        lock(&worker).queue_kick = Some(Arc::clone(&kick));
        let (w, k, st, wa) = (
            Arc::clone(&worker),
            Arc::clone(&kick),
            Arc::clone(&stop),
            Arc::clone(&want),
        );
        let handle = std::thread::Builder::new()
            .name("rucx-queue-progress".into())
            .spawn(move || {
                let mut polls = 0u64;
                while !st.load(Ordering::Acquire) {
                    if wa.load(Ordering::Acquire) > 0 {
                        std::hint::spin_loop();
                        continue;
                    }
                    let armed = match w.try_lock() {
                        Ok(mut g) => {
                            g.progress();
                            polls += 1;
                            g.queues_armed()
                        }
                        Err(std::sync::TryLockError::Poisoned(e)) => {
                            let mut g = e.into_inner();
                            g.progress();
                            g.queues_armed()
                        }
                        Err(std::sync::TryLockError::WouldBlock) => {
                            std::hint::spin_loop();
                            continue;
                        }
                    };
                    if armed {
                        continue;
                    }
                    let mut kicked = k.kicked.lock().unwrap_or_else(|e| e.into_inner());
                    while !*kicked && !st.load(Ordering::Acquire) {
                        kicked =
                            k.cv.wait_timeout(kicked, std::time::Duration::from_millis(100))
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                    }
                    *kicked = false;
                }
                polls
            })
            .ok();
        ProgressThread {
            stop,
            kick,
            want,
            worker,
            handle,
        }
    }

    /// The worker, locked, ahead of the progress thread.
    pub fn lock(&self) -> std::sync::MutexGuard<'_, Worker> {
        self.want.fetch_add(1, Ordering::AcqRel);
        let g = lock(&self.worker);
        self.want.fetch_sub(1, Ordering::AcqRel);
        g
    }

    /// Stops the thread; returns how many times it called `progress`.
    pub fn stop(mut self) -> u64 {
        self.finish()
    }

    fn finish(&mut self) -> u64 {
        self.stop.store(true, Ordering::Release);
        self.kick.kick();
        let polls = self.handle.take().map_or(0, |h| h.join().unwrap_or(0));
        lock(&self.worker).queue_kick = None;
        polls
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        if self.handle.is_some() {
            self.finish();
        }
    }
}

fn lock(w: &Mutex<Worker>) -> std::sync::MutexGuard<'_, Worker> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

/// Frees a destroyed queue's counters, or keeps them until the stream that may still
/// read or write them is idle (checked again at each later destroy).
fn retire(qu: Queue) {
    #[cfg(feature = "cuda")]
    {
        static KEPT: Mutex<Vec<(ucs::cuda::StreamRef, Arc<Counters>)>> = Mutex::new(Vec::new());
        let mut kept = KEPT.lock().unwrap_or_else(|e| e.into_inner());
        kept.retain(|(s, _)| !s.idle().unwrap_or(true));
        if let QueueStream::Cuda { stream, .. } = qu.stream {
            if !stream.idle().unwrap_or(true) {
                kept.push((stream, qu.dq.shared_counters()));
            }
        }
    }
    #[cfg(not(feature = "cuda"))]
    drop(qu);
}

#[cfg(test)]
#[allow(unsafe_code)] // tests describe their buffers as user code does
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use ucs::{Config, Status};

    use super::*;
    use crate::buf::Buf;
    use crate::context::Context;

    fn pair() -> (Worker, Worker, EpHandle, EpHandle) {
        let c: Arc<Context> = Context::new(
            Config::from_lookup(|k| match k {
                "TLS" => Some("posix,cma".into()),
                _ => None,
            })
            .unwrap(),
        );
        let mut a = Worker::new(&c).unwrap();
        let mut b = Worker::new(&c).unwrap();
        let ab = a.ep_create(b.address()).unwrap();
        let ba = b.ep_create(a.address()).unwrap();
        (a, b, ab, ba)
    }

    fn data(v: &[u8]) -> Data {
        // SAFETY: every test keeps the vector alive and untouched until its operation is
        // counted complete.
        Data::Contig(unsafe { Buf::from_slice(v) })
    }

    fn data_mut(v: &mut [u8]) -> Data {
        // SAFETY: as above.
        Data::Contig(unsafe { Buf::from_mut_slice(v) })
    }

    /// Progresses both until `done`, for at most 10 s.
    fn drive(
        a: &mut Worker,
        b: &mut Worker,
        mut done: impl FnMut(&mut Worker, &mut Worker) -> bool,
    ) {
        let t = Instant::now();
        while !done(a, b) {
            a.progress();
            b.progress();
            assert!(t.elapsed() < Duration::from_secs(10), "timed out");
        }
    }

    /// Progresses both `n` times.
    fn spin(a: &mut Worker, b: &mut Worker, n: usize) {
        for _ in 0..n {
            a.progress();
            b.progress();
        }
    }

    /// Writes the trigger counter of queue `q`, as its stream would.
    fn trigger(w: &Worker, q: QueueId, value: u32) {
        w.queue_counters(q)
            .unwrap()
            .trigger()
            .store(value, Ordering::Release);
    }

    fn completed(w: &Worker, q: QueueId) -> u32 {
        w.queue_query(q).unwrap().completed
    }

    fn recv(b: &mut Worker, v: &mut [u8], tag: u64) -> ReqId {
        b.tag_recv(&data_mut(v), tag, u64::MAX, RecvParams::default())
            .unwrap()
    }

    fn external(w: &mut Worker, base: u32) -> QueueId {
        w.queue_create(QueueParams {
            stream: QueueStream::External,
            counter_base: base,
        })
        .unwrap()
    }

    #[test]
    fn sends_fire_in_order_and_in_batches_when_the_trigger_is_written() {
        let (mut a, mut b, ab, _) = pair();
        let q = external(&mut a, 100);
        let msgs: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i + 1; 64]).collect();
        a.enqueue_send(q, ab, &data(&msgs[0]), 7).unwrap();
        a.enqueue_send(q, ab, &data(&msgs[1]), 7).unwrap();
        assert_eq!(a.enqueue_start(q).unwrap(), 101);
        a.enqueue_send(q, ab, &data(&msgs[2]), 7).unwrap();
        assert_eq!(a.enqueue_start(q).unwrap(), 102);
        assert_eq!(a.enqueue_wait(q).unwrap(), 103, "three operations started");
        let mut got = vec![vec![0u8; 64]; 3];
        let ids: Vec<ReqId> = got.iter_mut().map(|g| recv(&mut b, g, 7)).collect();
        spin(&mut a, &mut b, 2000);
        assert_eq!(
            b.request_status(ids[0]),
            Status::InProgress,
            "nothing fires untriggered"
        );
        assert_eq!(a.queue_query(q).unwrap().pending, 3);

        // The stream reaches the first start: the first batch (two sends) goes.
        trigger(&a, q, 101);
        drive(&mut a, &mut b, |a, b| {
            completed(a, q) == 2 && b.request_status(ids[1]) == Status::Ok
        });
        spin(&mut a, &mut b, 2000);
        assert_eq!(
            b.request_status(ids[2]),
            Status::InProgress,
            "the second batch waits"
        );
        assert_eq!(a.queue_query(q).unwrap().pending, 1);

        trigger(&a, q, 102);
        drive(&mut a, &mut b, |a, b| {
            completed(a, q) == 3 && b.request_status(ids[2]) == Status::Ok
        });
        // Same tag, one endpoint: the order received is the order fired.
        assert_eq!(got, msgs);
        assert_eq!(
            a.queue_counters(q)
                .unwrap()
                .completion()
                .load(Ordering::Acquire),
            103
        );
        let info = a.queue_query(q).unwrap();
        assert_eq!((info.starts, info.started, info.error), (2, 3, None));
        a.queue_destroy(q).unwrap();
    }

    #[test]
    fn a_start_with_nothing_enqueued_and_a_wait_before_any_start_return_at_once() {
        let (mut a, mut b, ab, _) = pair();
        let q = a.queue_create(QueueParams::default()).unwrap();
        a.enqueue_start(q).unwrap();
        assert_eq!(
            a.enqueue_wait(q).unwrap(),
            0,
            "nothing started: nothing to wait for"
        );
        let m = vec![9u8; 100];
        a.enqueue_send(q, ab, &data(&m), 1).unwrap();
        // The wait covers started operations only: the send is not released by it.
        assert_eq!(a.enqueue_wait(q).unwrap(), 0);
        assert_eq!(a.queue_query(q).unwrap().pending, 1);
        let mut g = vec![0u8; 100];
        let id = recv(&mut b, &mut g, 1);
        spin(&mut a, &mut b, 1000);
        assert_eq!(b.request_status(id), Status::InProgress);
        a.enqueue_start(q).unwrap();
        assert_eq!(a.enqueue_wait(q).unwrap(), 1);
        drive(&mut a, &mut b, |_, b| b.request_status(id) == Status::Ok);
        assert_eq!(g, m);
        a.queue_destroy(q).unwrap();
    }

    #[test]
    fn counters_wrap_and_receives_post_only_when_triggered() {
        let (mut a, mut b, ab, ba) = pair();
        let base = u32::MAX - 2;
        let qa = a
            .queue_create(QueueParams {
                stream: QueueStream::Host,
                counter_base: base,
            })
            .unwrap();
        let qb = external(&mut b, base);
        let rounds = 6u32;
        let mut bufs = vec![vec![0u8; 4096]; rounds as usize];
        for (r, buf) in bufs.iter_mut().enumerate() {
            b.enqueue_recv(qb, ba, &data_mut(buf), r as u64, u64::MAX)
                .unwrap();
            b.enqueue_start(qb).unwrap();
        }
        let before = b.stats().unexpected;
        let msgs: Vec<Vec<u8>> = (0..rounds).map(|r| vec![r as u8 ^ 0x5a; 4096]).collect();
        for (r, m) in msgs.iter().enumerate() {
            a.enqueue_send(qa, ab, &data(m), r as u64).unwrap();
            a.enqueue_start(qa).unwrap();
        }
        spin(&mut a, &mut b, 1000);
        assert!(
            b.stats().unexpected > before,
            "untriggered receives are not posted"
        );
        assert_eq!(completed(&b, qb), 0);
        for r in 1..=rounds {
            trigger(&b, qb, base.wrapping_add(r));
            drive(&mut a, &mut b, |_, b| completed(b, qb) == r);
        }
        assert_eq!(bufs, msgs);
        let c = b
            .queue_counters(qb)
            .unwrap()
            .completion()
            .load(Ordering::Acquire);
        assert_eq!(c, base.wrapping_add(rounds));
        assert!(c < base, "the completion counter wrapped");
        // All sent and received: the host wait has nothing left to wait for.
        assert_eq!(a.enqueue_wait(qa).unwrap(), base.wrapping_add(rounds));
        assert_eq!(a.queue_query(qa).unwrap().completed, rounds);
        a.queue_destroy(qa).unwrap();
        b.queue_destroy(qb).unwrap();
    }

    #[test]
    fn a_receive_from_a_peer_that_goes_away_ends_with_its_error() {
        let (a, b, _, ab_src) = pair();
        // `a` receives from `b` through the endpoint `b` made for it: swap the roles.
        let (mut b, mut a) = (a, b);
        let q = a.queue_create(QueueParams::default()).unwrap();
        let mut g = vec![0u8; 64];
        a.enqueue_recv(q, ab_src, &data_mut(&mut g), 3, u64::MAX)
            .unwrap();
        a.enqueue_start(q).unwrap();
        spin(&mut a, &mut b, 100);
        assert_eq!(a.queue_query(q).unwrap().running, 1);
        drop(b);
        let t = Instant::now();
        let r = a.enqueue_wait(q);
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(r.is_err(), "the receive fails with the endpoint: {r:?}");
        let info = a.queue_query(q).unwrap();
        assert_eq!((info.completed, info.failed), (1, 1));
        assert_ne!(
            info.error,
            Some(Status::Canceled),
            "the endpoint's own error"
        );
        // Reported by the wait: destroying says nothing more.
        a.queue_destroy(q).unwrap();
    }

    #[test]
    fn destroy_with_operations_outstanding_releases_the_completion_counter() {
        let (mut a, mut b, ab, ba) = pair();
        let q = external(&mut a, 0);
        let big = vec![1u8; 1 << 20];
        let mut g = vec![0u8; 64];
        a.enqueue_recv(q, ab, &data_mut(&mut g), 5, u64::MAX)
            .unwrap(); // never sent
        a.enqueue_send(q, ab, &data(&big), 6).unwrap(); // rendezvous, never received
        a.enqueue_start(q).unwrap();
        a.enqueue_send(q, ab, &data(&big[..8]), 6).unwrap(); // never started
        trigger(&a, q, 1);
        drive(&mut a, &mut b, |a, _| {
            a.queue_query(q).unwrap().running == 2
        });
        assert_eq!(a.queue_abort(q).unwrap(), 3);
        let info = a.queue_query(q).unwrap();
        assert_eq!(
            (info.completed, info.started),
            (3, 3),
            "every operation counted"
        );
        assert_eq!(info.error, Some(Status::Canceled));
        assert_eq!(
            a.enqueue_wait(q).unwrap(),
            3,
            "a later wait is satisfied already"
        );
        a.enqueue_send(q, ab, &data(&big[..8]), 6).unwrap();
        assert_eq!(a.queue_destroy(q), Err(Status::Canceled));
        assert_eq!(a.enqueue_start(q), Err(Status::InvalidParam));
        // A new queue takes the slot: the old id still names nothing.
        let q2 = external(&mut a, 0);
        assert_ne!(q2, q);
        assert_eq!(a.enqueue_start(q), Err(Status::InvalidParam));
        assert_eq!(a.enqueue_start(q2), Ok(1));
        a.queue_destroy(q2).unwrap();
        // The worker carries on: the peer receives the abandoned rendezvous send's data.
        let mut r = vec![0u8; 1 << 20];
        let id = recv(&mut b, &mut r, 6);
        drive(&mut a, &mut b, |_, b| {
            b.request_status(id) != Status::InProgress
        });
        assert_eq!(b.request_status(id), Status::Ok);
        assert_eq!(r, big);
        let _ = ba;
    }

    #[test]
    fn a_posted_receive_takes_its_message_at_once_and_counts_with_the_next_start() {
        let (mut a, mut b, ab, ba) = pair();
        let q = external(&mut b, 50);
        // Batch 1: a send from b that a does not receive until the end.
        let first = vec![3u8; 64];
        b.enqueue_send(q, ba, &data(&first), 1).unwrap();
        assert_eq!(b.enqueue_start(q).unwrap(), 51);
        // Posted now, counted with start 2; a rendezvous-sized message.
        let mut got = vec![0u8; 256 << 10];
        b.enqueue_recv_posted(q, ba, &data_mut(&mut got), 2, u64::MAX)
            .unwrap();
        let before = b.stats().unexpected;
        let msg: Vec<u8> = (0..got.len()).map(|i| (i * 7) as u8).collect();
        let sid = a
            .tag_send(ab, &data(&msg), 2, SendParams::default())
            .unwrap();
        drive(&mut a, &mut b, |a, _| {
            sid.is_none_or(|id| a.request_status(id) == Status::Ok)
        });
        assert_eq!(got, msg, "received before any start released it");
        assert_eq!(b.stats().unexpected, before, "it met a posted receive");
        spin(&mut a, &mut b, 200);
        assert_eq!(completed(&b, q), 0, "not counted before its start");
        assert_eq!(b.queue_query(q).unwrap().running, 1);

        // Start 2 is issued by the host, but the "stream" has reached neither start:
        // counting the receive now would let a wait for start 1 through while its send has
        // not even fired.
        assert_eq!(b.enqueue_start(q).unwrap(), 52);
        spin(&mut a, &mut b, 200);
        assert_eq!(
            completed(&b, q),
            0,
            "not counted before the stream reaches its start"
        );
        assert_eq!(b.queue_query(q).unwrap().pending, 1);
        let mut g = vec![0u8; 64];
        let rid = recv(&mut a, &mut g, 1);
        // The stream reaches start 1: the send goes and counts; the receive still waits.
        trigger(&b, q, 51);
        drive(&mut a, &mut b, |a, b| {
            completed(b, q) == 1 && a.request_status(rid) == Status::Ok
        });
        assert_eq!(g, first);
        spin(&mut a, &mut b, 200);
        assert_eq!(completed(&b, q), 1);
        // Start 2: the receive counts; the wait covers both.
        trigger(&b, q, 52);
        drive(&mut a, &mut b, |_, b| completed(b, q) == 2);
        assert_eq!(b.enqueue_wait(q).unwrap(), 52);
        let info = b.queue_query(q).unwrap();
        assert_eq!((info.started, info.failed, info.running), (2, 0, 0));
        b.queue_destroy(q).unwrap();
    }

    #[test]
    fn a_posted_receive_still_running_does_not_hold_back_earlier_waits() {
        let (mut a, mut b, ab, ba) = pair();
        let q = b.queue_create(QueueParams::default()).unwrap();
        let m = vec![1u8; 100];
        b.enqueue_send(q, ba, &data(&m), 1).unwrap();
        b.enqueue_start(q).unwrap();
        let mut later = vec![0u8; 100];
        b.enqueue_recv_posted(q, ba, &data_mut(&mut later), 2, u64::MAX)
            .unwrap();
        let mut g = vec![0u8; 100];
        let rid = recv(&mut a, &mut g, 1);
        // The host wait covers the first start only: the posted receive, whose message
        // never comes, does not keep it waiting.
        assert_eq!(b.enqueue_wait(q).unwrap(), 1);
        drive(&mut a, &mut b, |a, _| a.request_status(rid) == Status::Ok);
        assert_eq!(g, m);
        // Destroyed with the receive outstanding: it is cancelled and counted.
        assert_eq!(b.queue_destroy(q), Err(Status::Canceled));
        // A posted receive on a queue that is gone, or from an endpoint that is not, is
        // refused before anything is posted.
        assert_eq!(
            b.enqueue_recv_posted(q, ba, &data_mut(&mut later), 2, u64::MAX),
            Err(Status::InvalidParam)
        );
        let q2 = b.queue_create(QueueParams::default()).unwrap();
        let bad = EpHandle(1000);
        assert_eq!(
            b.enqueue_recv_posted(q2, bad, &data_mut(&mut later), 2, u64::MAX),
            Err(Status::InvalidParam)
        );
        assert_eq!(b.queue_query(q2).unwrap().running, 0);
        b.queue_destroy(q2).unwrap();
        let _ = ab;
    }

    #[test]
    fn a_progress_thread_fires_what_the_application_starts() {
        let (a, mut b, ab, _) = pair();
        let a = Arc::new(std::sync::Mutex::new(a));
        let pt = ProgressThread::spawn(Arc::clone(&a));
        let q = a
            .lock()
            .unwrap()
            .queue_create(QueueParams::default())
            .unwrap();
        let msgs: Vec<Vec<u8>> = (0..20u8).map(|i| vec![i; 1000]).collect();
        let mut got = vec![vec![0u8; 1000]; 20];
        let ids: Vec<ReqId> = got.iter_mut().map(|g| recv(&mut b, g, 4)).collect();
        for batch in msgs.chunks(5) {
            // The thread may sleep between batches (nothing armed): the start wakes it.
            std::thread::sleep(Duration::from_millis(20));
            let mut w = a.lock().unwrap();
            for m in batch {
                w.enqueue_send(q, ab, &data(m), 4).unwrap();
            }
            w.enqueue_start(q).unwrap();
        }
        let t = Instant::now();
        while ids
            .iter()
            .any(|&i| b.request_status(i) == Status::InProgress)
        {
            b.progress();
            assert!(t.elapsed() < Duration::from_secs(10), "timed out");
        }
        assert_eq!(got, msgs);
        while completed(&a.lock().unwrap(), q) != 20 {
            assert!(t.elapsed() < Duration::from_secs(10), "timed out");
            std::thread::yield_now();
        }
        let polls = pt.stop();
        assert!(polls > 0);
        a.lock().unwrap().queue_destroy(q).unwrap();
    }
}
