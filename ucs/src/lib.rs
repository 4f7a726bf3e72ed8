//! `ucs` — Rucx's service layer, the bottom of the stack:
//!
//! ```text
//!   ucs  <-  uct  <-  ucp  <-  { bindings-c   (libucp.so.0: UCX's C API, docs/c-abi.md)
//!   ^^^                          perftest     (rucx-perftest, rucx-info) }
//! ```
//!
//! It owns what every other layer needs and nothing protocol-specific: the [`Status`] codes
//! (numerically UCX's `ucs_status_t`), configuration from `UCX_*` environment variables
//! ([`config`]), object pools ([`pool`]), shared-memory segments ([`shm`]), wakeup
//! primitives ([`wakeup`]), monotonic time
//! ([`time`]), system facts such as same-host detection ([`sys`]), checked little-endian
//! reading and writing of peer-supplied bytes ([`wire`]), a stderr logger ([`log`]), memory
//! types and their detection ([`memtype`]) and, with the `cuda` feature, the CUDA driver
//! loaded at run time (`cuda`). It depends on no sibling crate; `uct` and `ucp` call into it.
//!
//! # Example
//!
//! Configuration is read as UCX reads it, from `UCX_<NAME>` variables
//! ([`Config::from_env`]) or, as here, from any lookup of `<NAME>`; status codes are UCX's
//! numbers:
//!
//! ```
//! use ucs::{Config, Status};
//!
//! let cfg = Config::from_lookup(|name| match name {
//!     "TLS" => Some("posix,self".to_string()),
//!     _ => None,
//! })
//! .unwrap();
//! assert!(cfg.tl_enabled("posix") && !cfg.tl_enabled("tcp"));
//!
//! assert_eq!(Status::NoResource.code(), -2); // UCS_ERR_NO_RESOURCE
//! assert_eq!(Status::from_code(-2), Some(Status::NoResource));
//! ```
pub mod config;
#[cfg(feature = "cuda")]
pub mod cuda;
pub mod log;
pub mod memtype;
pub mod pool;
pub mod sched;
pub mod shm;
pub mod status;
pub mod sys;
#[doc(hidden)]
pub mod testing;
pub mod time;
pub mod wakeup;
pub mod wire;

pub use config::Config;
pub use status::{Status, UcsResult};
