//! `ucp` — Rucx's protocol layer, the top of the stack, on `uct` and `ucs`:
//!
//! ```text
//!   ucs  <-  uct  <-  ucp  <-  { bindings-c   (libucp.so.0: UCX's C API, docs/c-abi.md)
//!                     ^^^        perftest     (rucx-perftest, rucx-info) }
//! ```
//!
//! What it owns (`docs/ucp.md`), in floors, each importing only from those below it
//! (`docs/layers.md`):
//! - [`buf`], [`dt`] and [`datatype`], [`tag`], [`request`], [`address`], [`context`]: user
//!   memory (the one room for `unsafe`), the datatype engine (MPI-style layout
//!   constructors, canonical form, pack/unpack) and the data descriptions operations take,
//!   the tag matcher, request slots, worker addresses, the transports a process uses.
//! - [`proto`]'s wire formats, protocol selection and the eager/rendezvous tuner.
//! - [`worker`]: the engine (progress, endpoints and lanes, wire-up, requests,
//!   client/server connection, peer failure), whose state the protocols step through.
//! - [`proto`]'s protocols: tag send and receive with eager and rendezvous protocols
//!   (device memory included, `docs/gpu.md`), UMR, active messages, RMA and atomics, the
//!   stream API.
//! - [`channel`] and [`queue`]: channels and stream-triggered queues, built on the
//!   worker's API.
//!
//! # Example
//!
//! A context on the loopback transport (`UCX_TLS=self`), a worker, an endpoint to the
//! worker's own address, and a tagged message sent to itself:
//!
//! ```
//! use ucp::{Buf, Context, Data, RecvParams, SendParams, Worker};
//! use ucs::{Config, Status};
//!
//! let cfg = Config::from_lookup(|name| (name == "TLS").then(|| "self".to_string())).unwrap();
//! let ctx = Context::new(cfg);
//! let mut worker = Worker::new(&ctx).unwrap();
//! let own = worker.address().to_vec();
//! let ep = worker.ep_create(&own).unwrap();
//!
//! let msg = b"hello, ucp".to_vec();
//! let mut inbox = vec![0u8; msg.len()];
//! // SAFETY: both vectors outlive the two requests, each of which is waited for below.
//! let (src, dst) = unsafe { (Buf::from_slice(&msg), Buf::from_mut_slice(&mut inbox)) };
//! let recv = worker
//!     .tag_recv(&Data::Contig(dst), 7, u64::MAX, RecvParams::default())
//!     .unwrap();
//! if let Some(send) = worker
//!     .tag_send(ep, &Data::Contig(src), 7, SendParams::default())
//!     .unwrap()
//! {
//!     assert_eq!(worker.wait(send).0, Status::Ok);
//! }
//! let (status, info) = worker.wait(recv);
//! assert_eq!(status, Status::Ok);
//! assert_eq!(info.unwrap().length, msg.len());
//! assert_eq!(inbox, msg);
//! ```
// Unsafe is denied everywhere but in `buf`, the one room where user memory described by
// raw pointers is touched (STYLE.md §6).
#![deny(unsafe_code)]

pub mod address;
#[allow(unsafe_code)]
pub mod buf;
pub mod channel;
pub mod context;
pub mod datatype;
pub mod dt;
pub mod proto;
pub mod queue;
pub mod request;
pub mod tag;
pub mod worker;

pub use buf::{AtomicOp, Buf, HostBuf};
pub use context::{Context, Error};
pub use datatype::{Data, DtClass, GenericDt, PackState, UnpackState};
pub use proto::am::{AmData, AmEvent, AmRndv, AmSendParams};
pub use proto::rma::{MemHandle, Rkey, SharedRegion};
pub use proto::stream::StreamRecv;
#[cfg(feature = "cuda")]
pub use queue::StreamOp;
pub use queue::{ProgressThread, QueueId, QueueInfo, QueueParams, QueueStream, TriggerKind};
pub use request::{Completion, EpHandle, ReqId};
pub use worker::op::{RecvParams, SendParams};
pub use worker::state::{AmHandler, ConnRequest, Worker, WorkerStats};
pub use worker::{FlushPoll, Signaler};
