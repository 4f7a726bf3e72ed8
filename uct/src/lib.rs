//! `uct` — Rucx's transport layer, between `ucs` (below) and `ucp` (above).
//!
//! Each transport lives in `tl/<name>` and implements the traits of [`md`] (memory domain:
//! registration and remote keys) and [`iface`] (an interface with its endpoints: active
//! messages short/bcopy/zcopy, put/get zero-copy with iov lists, flush, fence, pending
//! queue, progress). [`component`] discovers which transports can run here and opens them.
//! Nothing here knows about tags, protocols or datatypes, and no transport knows another.

pub mod component;
pub mod ep;
pub mod iface;
pub mod md;
#[cfg(test)]
mod test_util;
pub mod tl;
pub mod trigger;

pub use component::{discover, open, open_iface, Discovery, TlAbsent, TlResource};
pub use ep::{Comp, Done, EpId, Iov};
pub use iface::{
    Amo64, Handler, Iface, IfaceAttr, IfaceFlags, MemCaps, OpLimits, OpenIface, PerfEstimate,
    UmrCost,
};
pub use md::{Md, MemH, MemTypes, MemoryType, RemoteKey};
