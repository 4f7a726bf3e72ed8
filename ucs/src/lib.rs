//! `ucs` — Rucx's service layer, the bottom of the `ucs` ← `uct` ← `ucp` stack.
//!
//! It owns what every other layer needs and nothing protocol-specific: the [`Status`] codes
//! (numerically UCX's `ucs_status_t`), configuration from `UCX_*` environment variables
//! ([`config`]), object pools ([`pool`]), shared-memory segments ([`shm`]), wakeup
//! primitives ([`wakeup`]), monotonic time
//! ([`time`]), system facts such as same-host detection ([`sys`]), checked little-endian
//! reading and writing of peer-supplied bytes ([`wire`]), a stderr logger ([`log`]), memory
//! types and their detection ([`memtype`]) and, with the `cuda` feature, the CUDA driver
//! loaded at run time (`cuda`). It depends on no sibling crate; `uct` and `ucp` call into it.

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
pub mod time;
pub mod wakeup;
pub mod wire;

pub use config::Config;
pub use status::{Status, UcsResult};
