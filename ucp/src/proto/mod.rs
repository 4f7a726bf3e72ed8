//! Protocols: how each operation is carried over the transports.
//!
//! At the bottom, what every protocol and the engine share:
//! * [`wire`]: the protocol messages' ids, headers and their checked decoders.
//! * [`select`]: which protocol serves which (operation, memory type, datatype class, size),
//!   from an endpoint's lanes and the configuration.
//! * [`tune`]: the measured choice between eager and rendezvous on same-host endpoints.
//!
//! Above the engine's state (`worker::state`), one file or folder per protocol, each a set
//! of steps over that state that the worker's driver runs (`progress`, `run_actions`, the
//! message handler) and the user calls of its API:
//! * `eager`: tagged messages (send, receive, probe), their matching, the eager protocols
//!   (short, bcopy, zcopy, multi-fragment, synchronous), and the send queue every send goes
//!   through;
//! * `rndv`: the rendezvous protocols, both sides (get, put, split, the active-message
//!   pipeline; copies through a mapping of a same-host peer's memory, `rndv::mapped`;
//!   device data through pinned fragments, `rndv::stage`; device layouts by one kernel,
//!   `rndv::gpu`);
//! * `umr`: layout rendezvous by UMR writes, or packed (the hybrid's choice);
//! * [`rma`]: remote memory access and atomics;
//! * [`am`]: active messages;
//! * [`stream`]: the byte stream of an endpoint.
//!
//! The protocols' state that the engine's tables hold lives below the engine
//! ([`am::state`](am), `rma::state`, `rndv::stage`), the rest with each protocol
//! (docs/layers.md).

pub mod am;
pub(crate) mod eager;
pub mod rma;
pub(crate) mod rndv;
pub mod select;
pub mod stream;
pub mod tune;
pub(crate) mod umr;
pub mod wire;
