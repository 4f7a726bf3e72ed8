//! `ucp` — Rucx's protocol layer (context, worker, endpoints, tag matching, eager and
//! rendezvous protocols, datatypes). It sits on `uct` and `ucs`.
//!
//! Written so far, as protocol state that does no I/O:
//! - [`tag`]: the tag matcher (expected/unexpected queues, wildcards, probe, cancel).
//! - [`dt`]: the datatype engine (MPI-style layout constructors, canonical form,
//!   streaming segment iteration, pack/unpack).
//!
//! The context, worker, wire-up and protocols are the subject of the `ucp` core issue.
#![forbid(unsafe_code)]
pub mod dt;
pub mod tag;
