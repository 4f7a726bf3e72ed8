//! The active-message protocol's state and wire bits below the engine: a send's AM header
//! (and how it is packed, eagerly or in front of an RTS), the messages waiting for their
//! handlers, the one kept in place, and the events handlers are given.

use crate::buf::KeptBytes;
use crate::datatype::DataState;
use crate::proto::wire::{RtsData, AM_USER_HDR};
use crate::request::EpHandle;

/// The AM part of a send (header and id), for rendezvous RTS messages.
#[derive(Debug)]
pub(crate) struct AmHdr {
    pub(super) id: u16,
    pub(super) flags: u8,
    pub(super) header: Vec<u8>,
}

/// Rendezvous data announced to a handler, to receive with
/// [`Worker::am_recv_data`](crate::Worker::am_recv_data) or
/// drop with [`Worker::am_data_release`](crate::Worker::am_data_release).
#[derive(Debug)]
pub struct AmRndv {
    pub(super) ep: usize,
    pub(super) sreq: u64,
    pub(super) length: usize,
    /// Boxed: an arrived rendezvous is rare next to eager messages, and it keeps every
    /// queued event small.
    pub(super) rts: Box<RtsData>,
}

impl AmRndv {
    pub fn len(&self) -> usize {
        self.length
    }
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }
}

/// The data of an active message.
#[derive(Debug)]
pub enum AmData<'a> {
    /// The whole data, arrived with the message; lent for the handler's call.
    Eager(&'a [u8]),
    /// Data still at the sender.
    Rndv(AmRndv),
}

/// An arrived active message, handed to its handler. The header and eager data are lent
/// for the call.
#[derive(Debug)]
pub struct AmEvent<'a> {
    pub id: u16,
    pub header: &'a [u8],
    pub data: AmData<'a>,
    /// The endpoint to reply on, when the sender asked for one.
    pub reply_ep: Option<EpHandle>,
}

/// A message waiting for its handler, with its own (pooled) copies of header and data.
#[derive(Debug)]
pub(crate) struct QueuedAm {
    pub(super) id: u16,
    pub(super) header: Vec<u8>,
    pub(super) data: QueuedData,
    pub(super) reply_ep: Option<EpHandle>,
}

#[derive(Debug)]
pub(super) enum QueuedData {
    Eager(Vec<u8>),
    Rndv(AmRndv),
}

/// An eager message its transport kept in place for the handler (`Handler::am_keep`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeptAm {
    pub(super) bytes: KeptBytes,
    pub(super) reply_ep: Option<EpHandle>,
    /// The user header's length: `bytes` is the user header, then the data.
    pub(super) hdr_len: u32,
    pub(super) id: u16,
    /// The interface that keeps it, to release it after the handler.
    pub(super) iface: u8,
}

/// Writes an AM_USER message into `buf`; returns its length.
pub(super) fn pack_user(
    buf: &mut [u8],
    id: u16,
    flags: u8,
    ep: u32,
    header: &[u8],
    st: &mut DataState,
    total: usize,
) -> usize {
    let h = pack_user_hdr(buf, id, flags, ep, header);
    h + st.pack(0, &mut buf[h..h + total])
}

/// Writes the AM_USER header and the user header into `buf`; returns where data starts.
#[inline]
pub(super) fn pack_user_hdr(buf: &mut [u8], id: u16, flags: u8, ep: u32, header: &[u8]) -> usize {
    buf[0..2].copy_from_slice(&id.to_le_bytes());
    buf[2] = flags;
    buf[3..7].copy_from_slice(&ep.to_le_bytes());
    buf[7..11].copy_from_slice(&(header.len() as u32).to_le_bytes());
    let h = AM_USER_HDR + header.len();
    ucs::wire::copy(&mut buf[AM_USER_HDR..h], header);
    h
}

/// Packs a queued eager AM send (the request path of `am_send`).
pub(crate) fn pack_queued(
    buf: &mut [u8],
    am: &AmHdr,
    ep: u32,
    st: &mut DataState,
    total: usize,
) -> usize {
    pack_user(buf, am.id, am.flags, ep, &am.header, st, total)
}

/// The RTS of an AM rendezvous: the AM prefix, then the tag RTS bytes.
pub(crate) fn rts_prefix(am: &AmHdr, rts: Vec<u8>) -> Vec<u8> {
    let mut v = Vec::with_capacity(7 + am.header.len() + rts.len());
    v.extend_from_slice(&am.id.to_le_bytes());
    v.push(am.flags);
    v.extend_from_slice(&(am.header.len() as u32).to_le_bytes());
    v.extend_from_slice(&am.header);
    v.extend_from_slice(&rts);
    v
}
