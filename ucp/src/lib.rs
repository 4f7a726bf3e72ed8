//! `ucp` — Rucx's protocol layer. It sits on `uct` and `ucs`:
//! - [`context`]: the transports a process uses, from `UCX_*` configuration.
//! - [`worker`]: the worker (progress, wire-up, endpoints, client/server connection), tag
//!   send and receive with eager and rendezvous protocols, active messages, RMA and
//!   atomics, the stream API, peer failure, device memory (`docs/ucp.md`, `docs/gpu.md`).
//! - [`proto`]: protocol selection, the wire formats, the eager/rendezvous tuner.
//! - [`tag`]: the tag matcher (expected/unexpected queues, wildcards, probe, cancel).
//! - [`dt`] and [`datatype`]: the datatype engine (MPI-style layout constructors,
//!   canonical form, pack/unpack) and the data descriptions operations take.
//! - [`request`], [`address`], [`buf`]: request slots, worker addresses, user memory.
// Unsafe is denied everywhere but in `buf`, the one room where user memory described by
// raw pointers is touched (STYLE.md §6).
#![deny(unsafe_code)]

pub mod address;
#[allow(unsafe_code)]
pub mod buf;
pub mod context;
pub mod datatype;
pub mod dt;
pub mod proto;
pub mod request;
pub mod tag;
pub mod worker;

pub use buf::{Buf, HostBuf};
pub use context::{Context, Error};
pub use datatype::{Data, DtClass, GenericDt, PackState, UnpackState};
pub use request::{Completion, ReqId};
#[cfg(feature = "cuda")]
pub use worker::queue::StreamOp;
pub use worker::queue::{
    ProgressThread, QueueId, QueueInfo, QueueParams, QueueStream, TriggerKind,
};
pub use worker::{
    AmData, AmEvent, AmHandler, AmRndv, AmSendParams, AtomicOp, ConnRequest, EpHandle, MemHandle,
    RecvParams, Rkey, SendParams, SharedRegion, Signaler, StreamRecv, Worker, WorkerStats,
};
