//! `ucp` — Rucx's protocol layer (context, worker, endpoints, tag matching, eager and
//! rendezvous protocols, datatypes). It sits on `uct` and `ucs`.
//!
//! Written so far, as protocol state that does no I/O:
//! - [`tag`]: the tag matcher (expected/unexpected queues, wildcards, probe, cancel).
//! - [`dt`]: the datatype engine (MPI-style layout constructors, canonical form,
//!   streaming segment iteration, pack/unpack).
//!
//! The context, worker, wire-up and protocols are the subject of the `ucp` core issue.
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

pub use buf::Buf;
pub use context::{Context, Error};
pub use datatype::{Data, DtClass, GenericDt, PackState, UnpackState};
pub use request::{Completion, ReqId};
pub use worker::{
    AmData, AmEvent, AmHandler, AmRndv, AmSendParams, AtomicOp, ConnRequest, EpHandle, MemHandle,
    RecvParams, Rkey, SendParams, SharedRegion, StreamRecv, Worker, WorkerStats,
};
