//! Protocols: how each operation is carried over the transports.
//!
//! * [`select`]: which protocol serves which (operation, memory type, datatype class, size),
//!   from an endpoint's lanes and the configuration.
//! * [`tune`]: the measured choice between eager and rendezvous on same-host endpoints.
//! * [`wire`]: the protocol messages' headers and their checked decoders.
//!
//! The protocols' steps themselves are driven by the worker (`worker/tag.rs` sends,
//! `worker/rndv.rs` runs the receiver's side of a rendezvous, `worker/handler.rs` reacts
//! to arrivals).

pub mod select;
pub mod tune;
pub mod wire;
