//! `ucp` — Rucx's protocol layer (context, worker, endpoints, tag matching, eager and
//! rendezvous protocols, datatypes). It sits on `uct` and `ucs`.
//!
//! Not written yet: this crate is the subject of the `ucp` core issue. It exists now so
//! that the workspace has its final shape.
#![forbid(unsafe_code)]
