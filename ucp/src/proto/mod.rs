//! Protocols: how each operation is carried over the transports.
//!
//! * [`select`]: which protocol serves which (operation, memory type, datatype class, size),
//!   from an endpoint's lanes and the configuration.
//! * [`wire`]: the protocol messages' headers and their checked decoders.
//!
//! The protocols' steps themselves are driven by the worker (`worker/tag.rs` sends,
//! `worker/handler.rs` reacts to arrivals).

pub mod select;
pub mod wire;
