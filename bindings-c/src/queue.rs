//! Stream-triggered queues in C (`ucpx_queue_*`, `ucpx_enqueue_*`; `include/rucx.h`): a
//! thin layer over `ucp`'s queues (`ucp/src/queue/`), which say what each call
//! does. A queue handle is a box holding its worker and its `ucp` queue id.
//!
//! `stream` is a `CUstream` / `cudaStream_t`, or NULL for a queue with no stream (starts
//! and waits done by the host). Which way a stream writes and waits — stream memory
//! operations, one-thread kernels, or a memory operation to start and a kernel to wait —
//! is `RUCX_QUEUE_TRIGGER=memop|kernel|mixed` (memop by default), read when the queue is
//! created.

use std::ffi::c_void;

use ucp::{QueueId, QueueParams, QueueStream};
use ucs::Status;

use crate::ep::CEp;
use crate::types::*;
use crate::worker::CWorker;
use crate::{code, guard};

const QUEUE_MAGIC: u64 = 0x5275_6378_5175_6575;

/// `ucpx_queue_h`.
#[derive(Debug)]
struct CQueue {
    magic: u64,
    worker: *const CWorker,
    id: QueueId,
}

/// # Safety
/// `p` is NULL or a queue handle of ours (checked by magic) whose worker is alive.
unsafe fn queue<'a>(p: *const c_void) -> Option<&'a CQueue> {
    if p.is_null() {
        return None;
    }
    // SAFETY: per the contract.
    let q = unsafe { &*p.cast::<CQueue>() };
    (q.magic == QUEUE_MAGIC).then_some(q)
}

impl CQueue {
    fn worker(&self) -> &CWorker {
        // SAFETY: the worker outlives its queues (ucpx_queue_destroy comes before
        // ucp_worker_destroy, as for endpoints).
        unsafe { &*self.worker }
    }
}

/// The stream a queue is created for.
///
/// # Safety
/// `stream` is NULL or a live `CUstream` that outlives the queue.
unsafe fn stream_of(stream: *mut c_void) -> Result<QueueStream, Status> {
    if stream.is_null() {
        return Ok(QueueStream::Host);
    }
    #[cfg(feature = "cuda")]
    {
        let trigger = match std::env::var("RUCX_QUEUE_TRIGGER").as_deref() {
            Ok("kernel") => ucp::TriggerKind::Kernel,
            Ok("mixed") => ucp::TriggerKind::Mixed,
            Ok("memop") | Ok("") | Err(_) => ucp::TriggerKind::MemOp,
            Ok(other) => {
                log::warn!("RUCX_QUEUE_TRIGGER={other}: expected memop, kernel or mixed");
                return Err(Status::InvalidParam);
            }
        };
        // SAFETY: per the contract.
        let stream = unsafe { ucs::cuda::StreamRef::from_raw(stream as usize) }?;
        Ok(QueueStream::Cuda { stream, trigger })
    }
    #[cfg(not(feature = "cuda"))]
    Err(Status::Unsupported)
}

/// Creates a queue bound to `stream` (NULL: no stream).
///
/// # Safety
/// `worker` a live worker; `stream` NULL or a live `CUstream` that outlives the queue;
/// `queue_p` writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_queue_create(
    worker: *mut c_void,
    stream: *mut c_void,
    queue_p: *mut *mut c_void,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: checked by magic.
        let Some(w) = (unsafe { CWorker::from_ptr(worker.cast()) }) else {
            return code(Status::InvalidParam);
        };
        if queue_p.is_null() {
            return code(Status::InvalidParam);
        }
        // SAFETY: per the contract.
        let stream = match unsafe { stream_of(stream) } {
            Ok(s) => s,
            Err(e) => return code(e),
        };
        let p = QueueParams {
            stream,
            counter_base: 0,
        };
        match w.with(|w| w.queue_create(p)) {
            Ok(id) => {
                let q = Box::new(CQueue {
                    magic: QUEUE_MAGIC,
                    worker: w,
                    id,
                });
                // SAFETY: checked non-NULL; writable per the contract.
                unsafe { *queue_p = Box::into_raw(q).cast() };
                code(Status::Ok)
            }
            Err(e) => code(e),
        }
    })
}

/// The queue and the endpoint's `ucp` handle, both checked, on one worker.
///
/// # Safety
/// As for the exports.
unsafe fn queue_and_ep<'a>(
    queue: *mut c_void,
    ep: *mut c_void,
) -> Result<(&'a CQueue, ucp::EpHandle), Status> {
    // SAFETY: forwarded.
    let q = unsafe { self::queue(queue) }.ok_or(Status::InvalidParam)?;
    // SAFETY: checked by magic.
    let (e, ew) = unsafe { CEp::from_ptr(ep.cast()) }.ok_or(Status::InvalidParam)?;
    if !std::ptr::eq(ew, q.worker) {
        return Err(Status::InvalidParam);
    }
    Ok((q, e.h))
}

/// Enqueues a tagged send of `count` elements of `datatype` at `buffer` (any datatype,
/// any memory type), sent when the next start is reached.
///
/// # Safety
/// `queue` from `ucpx_queue_create`; `ep` an endpoint of the queue's worker; the data stays
/// valid and unchanged until a wait covering the operation is over.
#[no_mangle]
pub unsafe extern "C" fn ucpx_enqueue_send(
    queue: *mut c_void,
    ep: *mut c_void,
    buffer: *const c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let r = unsafe { queue_and_ep(queue, ep) }.and_then(|(q, e)| {
            // SAFETY: per the contract, the data outlives the operation.
            let d = unsafe { crate::dt::data(buffer, count, datatype) }?;
            q.worker().with(|w| w.enqueue_send(q.id, e, &d, tag))
        });
        code(r.err().unwrap_or(Status::Ok))
    })
}

/// Enqueues a receive of a message from `src_ep`'s peer matching `(tag, tag_mask)`,
/// posted when the next start is reached. If that endpoint fails, the receive ends with
/// its error.
///
/// # Safety
/// As for [`ucpx_enqueue_send`]; the buffer is not read or written by others until a wait
/// covering the operation is over.
#[no_mangle]
pub unsafe extern "C" fn ucpx_enqueue_recv(
    queue: *mut c_void,
    src_ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
) -> ucs_status_t {
    // SAFETY: forwarded contract.
    unsafe {
        enqueue_recv(
            queue,
            src_ep,
            buffer,
            count,
            datatype,
            (tag, tag_mask),
            false,
        )
    }
}

/// Posts a receive of a message from `src_ep`'s peer matching `(tag, tag_mask)` at once,
/// counted as an operation of the next start: it takes its message whenever it comes, and
/// a wait covers it from that start on (waits for earlier starts do not depend on it).
///
/// # Safety
/// As for [`ucpx_enqueue_recv`]; the buffer may be written as soon as this returns.
#[no_mangle]
pub unsafe extern "C" fn ucpx_enqueue_recv_posted(
    queue: *mut c_void,
    src_ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    tag: ucp_tag_t,
    tag_mask: ucp_tag_t,
) -> ucs_status_t {
    // SAFETY: forwarded contract.
    unsafe {
        enqueue_recv(
            queue,
            src_ep,
            buffer,
            count,
            datatype,
            (tag, tag_mask),
            true,
        )
    }
}

/// The two receives: released by the next start, or `posted` at once.
///
/// # Safety
/// As for [`ucpx_enqueue_recv`].
unsafe fn enqueue_recv(
    queue: *mut c_void,
    src_ep: *mut c_void,
    buffer: *mut c_void,
    count: usize,
    datatype: ucp_datatype_t,
    (tag, mask): (ucp_tag_t, ucp_tag_t),
    posted: bool,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let r = unsafe { queue_and_ep(queue, src_ep) }.and_then(|(q, e)| {
            // SAFETY: per the contract.
            let d = unsafe { crate::dt::data(buffer, count, datatype) }?;
            q.worker().with(|w| {
                if posted {
                    w.enqueue_recv_posted(q.id, e, &d, tag, mask)
                } else {
                    w.enqueue_recv(q.id, e, &d, tag, mask)
                }
            })
        });
        code(r.err().unwrap_or(Status::Ok))
    })
}

/// Releases every operation enqueued since the last start: one write of the trigger
/// counter on the stream (with no stream, at once).
///
/// # Safety
/// `queue` from `ucpx_queue_create`, not destroyed.
#[no_mangle]
pub unsafe extern "C" fn ucpx_enqueue_start(queue: *mut c_void) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let Some(q) = (unsafe { self::queue(queue) }) else {
            return code(Status::InvalidParam);
        };
        code(
            q.worker()
                .with(|w| w.enqueue_start(q.id))
                .err()
                .unwrap_or(Status::Ok),
        )
    })
}

/// Makes the stream wait until every started operation is done: one wait on the
/// completion counter. With no stream, progresses the worker until then, and returns the
/// first error of an operation that failed since the last such wait.
///
/// # Safety
/// `queue` from `ucpx_queue_create`, not destroyed.
#[no_mangle]
pub unsafe extern "C" fn ucpx_enqueue_wait(queue: *mut c_void) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let Some(q) = (unsafe { self::queue(queue) }) else {
            return code(Status::InvalidParam);
        };
        code(
            q.worker()
                .with(|w| w.enqueue_wait(q.id))
                .err()
                .unwrap_or(Status::Ok),
        )
    })
}

/// The queue's state: operations waiting for a start or its trigger, running, finished,
/// and the first error (`UCS_OK` if none) with the count of failed operations. Any output
/// pointer may be NULL.
///
/// # Safety
/// `queue` from `ucpx_queue_create`, not destroyed; the outputs NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ucpx_queue_query(
    queue: *mut c_void,
    pending_p: *mut usize,
    running_p: *mut usize,
    completed_p: *mut u32,
    error_p: *mut ucs_status_ret_t,
    failed_p: *mut u64,
) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let Some(q) = (unsafe { self::queue(queue) }) else {
            return code(Status::InvalidParam);
        };
        let i = match q.worker().with(|w| w.queue_query(q.id)) {
            Ok(i) => i,
            Err(e) => return code(e),
        };
        // SAFETY: each output NULL or writable, per the contract.
        unsafe {
            if !pending_p.is_null() {
                *pending_p = i.pending;
            }
            if !running_p.is_null() {
                *running_p = i.running;
            }
            if !completed_p.is_null() {
                *completed_p = i.completed;
            }
            if !error_p.is_null() {
                // A one-byte enum in C (UCS_S_PACKED).
                *error_p = i.error.unwrap_or(Status::Ok).code();
            }
            if !failed_p.is_null() {
                *failed_p = i.failed;
            }
        }
        code(Status::Ok)
    })
}

/// Destroys a queue. What it still holds is counted as finished, so no stream waiting on it
/// hangs; returns `UCS_ERR_CANCELED` if anything was cut short, the first unreported error
/// of an operation, or `UCS_OK`.
///
/// # Safety
/// `queue` from `ucpx_queue_create`, destroyed once, before its worker.
#[no_mangle]
pub unsafe extern "C" fn ucpx_queue_destroy(queue: *mut c_void) -> ucs_status_t {
    guard(code(Status::InvalidParam), || {
        // SAFETY: per the contract.
        let Some(q) = (unsafe { self::queue(queue) }) else {
            return code(Status::InvalidParam);
        };
        let r = q.worker().with(|w| w.queue_destroy(q.id));
        let p = (q as *const CQueue).cast_mut();
        // SAFETY: made by Box::into_raw in ucpx_queue_create and, per the contract,
        // destroyed once (the magic is cleared as a best effort against a second call).
        unsafe {
            (*p).magic = 0;
            drop(Box::from_raw(p));
        }
        code(r.err().unwrap_or(Status::Ok))
    })
}
