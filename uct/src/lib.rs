//! `uct` — Rucx's transport layer, between `ucs` (below) and `ucp` (above):
//!
//! ```text
//!   ucs  <-  uct  <-  ucp  <-  { bindings-c   (libucp.so.0: UCX's C API, docs/c-abi.md)
//!            ^^^                 perftest     (rucx-perftest, rucx-info) }
//! ```
//!
//! Each transport lives in `tl/<name>` and implements the traits of [`md`] (memory domain:
//! registration and remote keys) and [`iface`] (an interface with its endpoints: active
//! messages short/bcopy/zcopy, put/get zero-copy with iov lists, flush, fence, pending
//! queue, progress). [`component`] discovers which transports can run here and opens them.
//! Nothing here knows about tags, protocols or datatypes, and no transport knows another
//! (`docs/uct.md`).
//!
//! The modules form floors (`docs/layers.md`): the traits, the error and the shared pieces
//! ([`ep`], [`md`], [`iface`], [`error`], the helpers of [`tl`]) at the bottom; the
//! transports ([`tl`]`::*`) above them; the registry ([`component`]) and the enum dispatch
//! ([`dispatch`]) on top.
//!
//! # Example
//!
//! Discover the transports, open the loopback one (`self`), connect an endpoint to the
//! interface's own address and send it a short active message, received by progress:
//!
//! ```
//! use ucs::Config;
//! use uct::{Handler, Iface};
//!
//! /// Collects the active messages that progress delivers.
//! #[derive(Default)]
//! struct Inbox(Vec<(u8, Vec<u8>)>);
//! impl Handler for Inbox {
//!     fn am(&mut self, id: u8, data: &[u8]) {
//!         self.0.push((id, data.to_vec()));
//!     }
//! }
//!
//! let cfg = Config::default();
//! let found = uct::discover(&cfg);
//! let res = found.available.iter().find(|r| r.tl == "self").unwrap();
//! let mut iface = uct::open(res, &cfg).unwrap();
//! let (dev, addr) = (iface.device_address().to_vec(), iface.iface_address().to_vec());
//! let ep = iface.ep_connect(&dev, &addr).unwrap();
//!
//! iface.am_short(ep, 1, 0x42, b"hello").unwrap();
//! let mut inbox = Inbox::default();
//! while inbox.0.is_empty() {
//!     iface.progress(&mut inbox);
//! }
//! // Message id 1: the 8-byte header, then the payload.
//! assert_eq!(inbox.0[0].0, 1);
//! assert!(inbox.0[0].1.ends_with(b"hello"));
//! ```
pub mod component;
pub mod dispatch;
pub mod ep;
pub mod error;
pub mod iface;
pub mod md;
#[cfg(test)]
mod test_util;
pub mod tl;
pub mod trigger;

pub use component::{discover, open, open_iface, Discovery, TlAbsent, TlResource};
pub use dispatch::OpenIface;
pub use ep::{Comp, Done, EpId, Iov};
pub use error::OpenError;
pub use iface::{
    Amo64, Handler, Iface, IfaceAttr, IfaceFlags, MemCaps, OpLimits, PerfEstimate, UmrCost,
};
pub use md::{Md, MemH, MemTypes, MemoryType, RemoteKey};
