//! [`OpenIface`]: the enum over an open interface that names the two hot transports, posix
//! and self, by their own types (the fast dispatch `ucp`'s worker polls and sends
//! through). Above the transports, beside the registry ([`crate::component`]) that makes
//! it; the traits it dispatches to are below, in [`crate::iface`].

use ucs::UcsResult;

use crate::ep::EpId;
use crate::iface::{Handler, Iface};
use crate::tl::posix::PosixIface;
use crate::tl::self_::SelfIface;

/// An open interface as a worker holds it. Posix, which carries every message between
/// processes of one host, is held by its own type, so that the worker's polling loop calls
/// its progress directly, with the handler's own type: the handler's message path is then
/// inlined into the loop that reads the FIFO rather than called through two trait objects
/// (a pair of MPI messages in a window: 1229 -> 1200 instructions,
/// 2026-11-28). Self, which an MPI library's endpoint to its own rank puts among the
/// interfaces a worker asks for work on every poll, is held by its type too, so that
/// asking is two loads instead of a virtual call. Everything else goes through
/// [`Iface`] (`Deref`).
#[derive(Debug)]
pub enum OpenIface {
    Posix(Box<PosixIface>),
    SelfTl(Box<SelfIface>),
    Dyn(Box<dyn Iface>),
}

impl std::ops::Deref for OpenIface {
    type Target = dyn Iface;

    #[inline]
    fn deref(&self) -> &(dyn Iface + 'static) {
        match self {
            OpenIface::Posix(p) => &**p,
            OpenIface::SelfTl(s) => &**s,
            OpenIface::Dyn(d) => &**d,
        }
    }
}

impl std::ops::DerefMut for OpenIface {
    #[inline]
    fn deref_mut(&mut self) -> &mut (dyn Iface + 'static) {
        match self {
            OpenIface::Posix(p) => &mut **p,
            OpenIface::SelfTl(s) => &mut **s,
            OpenIface::Dyn(d) => &mut **d,
        }
    }
}

impl AsMut<dyn Iface> for OpenIface {
    #[inline]
    fn as_mut(&mut self) -> &mut (dyn Iface + 'static) {
        &mut **self
    }
}

impl OpenIface {
    /// [`Iface::progress`], with `h`'s own type on posix.
    #[inline(always)]
    pub fn progress<H: Handler>(&mut self, h: &mut H) -> usize {
        match self {
            OpenIface::Posix(p) => p.poll(h),
            OpenIface::SelfTl(s) => s.progress(h),
            OpenIface::Dyn(d) => d.progress(h),
        }
    }

    /// [`Iface::am_short`], called directly on posix and self rather than through the
    /// trait object (an eager send in the in-process tag ping-pong: 266 -> 262
    /// instructions; inlining posix's into the send path made it 288,
    /// 2026-11-28).
    #[inline(always)]
    pub fn am_short(&mut self, ep: EpId, id: u8, header: u64, payload: &[u8]) -> UcsResult<()> {
        match self {
            OpenIface::Posix(p) => p.am_short(ep, id, header, payload),
            OpenIface::SelfTl(s) => s.am_short(ep, id, header, payload),
            OpenIface::Dyn(d) => d.am_short(ep, id, header, payload),
        }
    }

    /// [`Iface::has_work`], called directly on posix and self.
    #[inline(always)]
    pub fn has_work(&self) -> bool {
        match self {
            OpenIface::Posix(p) => p.has_work(),
            OpenIface::SelfTl(s) => s.has_work(),
            OpenIface::Dyn(d) => d.has_work(),
        }
    }
}
