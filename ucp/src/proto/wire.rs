//! The headers of `ucp`'s protocol messages, and their checked decoders.
//!
//! Every message is a transport active message; the AM id says which header follows. All
//! integers are little-endian. `ep` is always the *receiver's* endpoint id for the sender
//! (learned at wire-up), `sreq`/`rreq` are request ids of the sender/receiver, echoed back
//! unchanged.
//!
//! ```text
//! EAGER        tag:u64 data
//! EAGER_SYNC   tag:u64 ep:u32 sreq:u64 data
//! EAGER_FIRST  tag:u64 ep:u32 flags:u8 sreq:u64 total:u64 data
//! EAGER_MIDDLE ep:u32 sreq:u64 offset:u64 data
//! RTS          tag:u64 ep:u32 flags:u8 sreq:u64 total:u64 mode:u8 [GET: rkey_len:u16 rkey nseg:u32 (addr:u64 len:u64){nseg}]
//! RTR          ep:u32 sreq:u64 rreq:u64
//! RNDV_DATA    ep:u32 rreq:u64 offset:u64 data
//! ACK          ep:u32 sreq:u64 status:i8
//! RTR_PUT      ep:u32 sreq:u64 rreq:u64 rkey_len:u16 rkey nseg:u32 (addr:u64 len:u64){nseg}
//! FIN          ep:u32 rreq:u64 status:i8          (put rendezvous: the data is in place)
//! LAYOUT_MISS  ep:u32 sreq:u64 rreq:u64           (the receiver no longer knows the layout)
//! LAYOUT       ep:u32 rreq:u64 layout             (the layout, resent; empty: it went
//!              before in LAYOUT_PART messages)
//! LAYOUT_PART  ep:u32 hash:u128 total:u32 offset:u32 bytes
//!              (a piece of a layout's encoding too large for one message; the last piece
//!              completes it, and the receiver learns it as if an RTS had carried it)
//! RTR_SPLIT    ep:u32 sreq:u64 rreq:u64 offset:u64 rkey_len:u16 rkey nseg:u32 (addr:u64 len:u64){nseg}
//! RTR_SPLIT_LAYOUT ep:u32 sreq:u64 rreq:u64 offset:u64 rkey_len:u16 rkey origin:u64 len:u32 layout
//!              (len u32::MAX: `hash:u128` follows instead, naming a layout sent just
//!              before in LAYOUT_PART messages)
//!
//! An RTS of mode GET_HELP (5) is a GET whose sender offers to write part of the data
//! itself: the receiver may answer RTR_SPLIT with its segments for the bytes from `offset`
//! on, read the bytes before `offset` as in GET, and send ACK when its reads are done; the
//! sender writes the tail and sends FIN (see `proto::rndv`, `start_split`).
//!
//! An RTS of mode GET_LAYOUT (4) carries, instead of a segment list, `rkey_len:u16 rkey
//! origin:u64 hash:u128 has:u8 [len:u32 layout]`: the sender's structured layout by its
//! canonical hash, with the encoding itself the first time this endpoint sends it. Mode
//! GET_LAYOUT_HELP (6) is the same with the sender's offer to write a tail; a receiver
//! whose own data is a layout (in memory the sender can map) answers RTR_SPLIT_LAYOUT,
//! which describes its bytes by their canonical encoding placed at `origin` instead of a
//! segment list.
//! WIREUP       kind:u8 uuid:u64 src_ep:u32 dst_ep:u32 addr_len:u32 addr
//!              (kind 1 REQ carries the sender's address; 2 REP answers it; 3 CLOSE says the
//!              sender closed `src_ep`, so the receiver's `dst_ep` ends without a failure)
//! ```
//!
//! The `rkey` of RTS, RTR_PUT and RTR_SPLIT is a [`RndvKey`]: `mkey_len:u16 mkey has:u8
//! [pid:u32 fd:u32 nonce:u64 seg_len:u64 base:u64 len:u64]` — the memory lane's packed key,
//! and, when the segments lie in shared memory the worker allocated (`mem_map` without a
//! buffer), the window a same-host peer maps to copy them with plain loads and stores.
//!
//! A decoder returns `None` for anything short, oversized or out of range; the worker then
//! closes the endpoint the message came from (when it can tell) and logs it.

use smallvec::SmallVec;
use ucs::wire::{Reader, Writer};

/// A packed memory key as it travels in rendezvous messages: held inline up to 80 bytes
/// (the keys of the memory lanes without hardware, with a shared-memory window, take 71),
/// so decoding one allocates nothing. `cuda_ipc`'s key (132 bytes: its IPC handle alone is
/// 64) spills to the heap; held inline at 160 bytes it saved those allocations but made
/// every move of a key a `memcpy` call, which cost a host rendezvous as much (callgrind,
/// 2026-11-27).
pub type KeyBytes = SmallVec<[u8; 80]>;

/// The remote segments of a rendezvous: held inline up to 4 (a contiguous buffer is one).
pub type Segs = SmallVec<[RemoteSeg; 4]>;

pub const AM_WIREUP: u8 = 1;
pub const AM_EAGER: u8 = 2;
pub const AM_EAGER_SYNC: u8 = 3;
pub const AM_EAGER_FIRST: u8 = 4;
pub const AM_EAGER_MIDDLE: u8 = 5;
pub const AM_RTS: u8 = 6;
pub const AM_RTR: u8 = 7;
pub const AM_RNDV_DATA: u8 = 8;
pub const AM_ACK: u8 = 9;
pub const AM_RTR_PUT: u8 = 10;
pub const AM_FIN: u8 = 11;
pub const AM_LAYOUT_MISS: u8 = 19;
pub const AM_LAYOUT: u8 = 20;
pub const AM_RTR_SPLIT: u8 = 21;
pub const AM_RTR_SPLIT_LAYOUT: u8 = 22;
pub const AM_LAYOUT_PART: u8 = 24;
pub const AM_RTR_UMR: u8 = 25;

// The ids of the active-message, RMA and stream protocols, whose headers are described in
// `proto::am`, `proto::rma` and `proto::stream`.
pub const AM_USER: u8 = 12;
pub const AM_USER_RTS: u8 = 13;
pub const AM_USER_SHORT: u8 = 23;
pub const AM_RMA_PUT: u8 = 14;
pub const AM_RMA_GET: u8 = 15;
pub const AM_RMA_ATOMIC: u8 = 16;
pub const AM_RMA_REPLY: u8 = 17;
pub const AM_RMA_PUT_ACK: u8 = 26;
pub const AM_STREAM: u8 = 18;

/// Bytes of the AM_USER header before the user header.
pub const AM_USER_HDR: usize = 2 + 1 + 4 + 4;

/// `flags` bit of AM_USER: the sender asks for a reply endpoint (`UCP_AM_SEND_FLAG_REPLY`).
pub const AM_FLAG_REPLY: u8 = 1;

/// Largest user header of an active message.
pub const MAX_AM_HEADER: usize = 4096;

/// Bytes of the RMA_REPLY header before its data.
pub const REPLY_HDR: usize = 4 + 8 + 8 + 1;

/// Bytes of the STREAM header before its data.
pub const STREAM_HDR: usize = 4;

/// Header bytes of a LAYOUT_PART.
pub const LAYOUT_PART_HDR: usize = 4 + 16 + 4 + 4;
/// The largest layout encoding a peer may send in parts (a malformed total is refused
/// before anything is allocated).
pub const MAX_LAYOUT_BYTES: usize = 16 << 20;

/// Writes the LAYOUT_PART header into `buf`.
pub fn write_layout_part_hdr(buf: &mut [u8], ep: u32, hash: u128, total: u32, offset: u32) {
    buf[..4].copy_from_slice(&ep.to_le_bytes());
    buf[4..20].copy_from_slice(&hash.to_le_bytes());
    buf[20..24].copy_from_slice(&total.to_le_bytes());
    buf[24..28].copy_from_slice(&offset.to_le_bytes());
}

/// A LAYOUT_PART: `(ep, hash, total, offset, bytes)`; `None` when short, or when the piece
/// does not lie inside `total` bytes of at most [`MAX_LAYOUT_BYTES`].
pub fn decode_layout_part(buf: &[u8]) -> Option<(u32, u128, usize, usize, &[u8])> {
    let mut r = Reader::new(buf);
    let ep = r.u32()?;
    let hash = u128::from_le_bytes(r.bytes(16)?.try_into().ok()?);
    let (total, offset) = (r.u32()? as usize, r.u32()? as usize);
    let bytes = r.rest();
    (total <= MAX_LAYOUT_BYTES && offset.checked_add(bytes.len())? <= total)
        .then_some((ep, hash, total, offset, bytes))
}

/// Header bytes in front of the data of each message kind.
pub const EAGER_HDR: usize = 8;
pub const EAGER_SYNC_HDR: usize = 8 + 4 + 8;
pub const EAGER_FIRST_HDR: usize = 8 + 4 + 1 + 8 + 8;
pub const EAGER_MIDDLE_HDR: usize = 4 + 8 + 8;
pub const RNDV_DATA_HDR: usize = 4 + 8 + 8;

/// `flags` bit: the sender waits for an acknowledgement of the match (synchronous send).
pub const FLAG_SYNC: u8 = 1;

/// Most segments a GET rendezvous announces.
pub const MAX_RTS_SEGS: usize = 1 << 20;

/// RTS mode of a GET whose sender offers to write a tail of the data (RTR_SPLIT).
pub const MODE_GET_HELP: u8 = 5;
/// RTS modes of a GET_LAYOUT, without and with the sender's offer to write a tail
/// (RTR_SPLIT or RTR_SPLIT_LAYOUT).
pub const MODE_GET_LAYOUT: u8 = 4;
pub const MODE_GET_LAYOUT_HELP: u8 = 6;

/// How the receiver of an RTS gets the data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RndvMode {
    /// The receiver reads the sender's segments with a zero-copy get, then sends ACK.
    Get = 1,
    /// The receiver answers RTR; the sender streams RNDV_DATA fragments.
    Am = 2,
    /// The receiver answers RTR_PUT with its segments; the sender writes them, then FIN.
    /// (A receiver that cannot expose its segments answers RTR: the pipeline.)
    Put = 3,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FirstHdr {
    pub tag: u64,
    pub ep: u32,
    pub flags: u8,
    pub sreq: u64,
    pub total: u64,
}

impl FirstHdr {
    pub fn write(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.tag.to_le_bytes());
        out[8..12].copy_from_slice(&self.ep.to_le_bytes());
        out[12] = self.flags;
        out[13..21].copy_from_slice(&self.sreq.to_le_bytes());
        out[21..29].copy_from_slice(&self.total.to_le_bytes());
    }
    pub fn read(r: &mut Reader) -> Option<FirstHdr> {
        Some(FirstHdr {
            tag: r.u64()?,
            ep: r.u32()?,
            flags: r.u8()?,
            sreq: r.u64()?,
            total: r.u64()?,
        })
    }
}

/// `ep sreq offset` (EAGER_MIDDLE) or `ep rreq offset` (RNDV_DATA).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragHdr {
    pub ep: u32,
    pub req: u64,
    pub offset: u64,
}

impl FragHdr {
    pub fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.ep.to_le_bytes());
        out[4..12].copy_from_slice(&self.req.to_le_bytes());
        out[12..20].copy_from_slice(&self.offset.to_le_bytes());
    }
    pub fn read(r: &mut Reader) -> Option<FragHdr> {
        Some(FragHdr {
            ep: r.u32()?,
            req: r.u64()?,
            offset: r.u64()?,
        })
    }
}

/// A remote segment of a GET rendezvous.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RemoteSeg {
    pub addr: u64,
    pub len: u64,
}

/// Where a worker-allocated shared-memory region is: the owner's `pid` and the `fd` of its
/// memory file (a same-host peer with ptrace rights opens it with `pidfd_getfd`), the
/// region's `nonce` (the same fd number may later hold another region), the file's length,
/// and the region's address range in the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShmWindow {
    pub pid: u32,
    pub fd: u32,
    pub nonce: u64,
    pub seg_len: u64,
    pub base: u64,
    pub len: u64,
}

impl ShmWindow {
    /// Whether `[addr, addr+len)` lies inside the window.
    pub fn holds(&self, addr: u64, len: u64) -> bool {
        addr >= self.base
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.base + self.len)
    }
}

/// The memory key of a rendezvous: the memory lane's packed key and, for worker-allocated
/// shared memory, its window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RndvKey {
    pub mkey: KeyBytes,
    pub shm: Option<ShmWindow>,
    /// The key's memory is CUDA device memory: the peer reads it through its memory lane
    /// for device memory, not its host one.
    pub device: bool,
}

/// Flags byte of an encoded [`RndvKey`]: a shared-memory window follows; the memory is
/// device memory.
const KEY_SHM: u8 = 1;
const KEY_DEVICE: u8 = 0x10;

const SHM_WINDOW_LEN: usize = 4 + 4 + 8 + 8 + 8 + 8;
const _: () = assert!(2 + uct::md::RKEY_PACKED_LEN + 1 + SHM_WINDOW_LEN <= 80);

impl RndvKey {
    /// The encoding `RndvKeyRef::write` makes (one encoder for both).
    pub fn encode(&self) -> KeyBytes {
        let key = RndvKeyRef {
            mkey: &self.mkey,
            shm: self.shm,
            device: self.device,
        };
        let mut k = KeyBytes::from_elem(0, key.encoded_len());
        let mut w = Put {
            out: &mut k,
            at: 0,
            short: false,
        };
        key.write(&mut w);
        k
    }

    /// Decodes a key; a window must fit its file (`len <= seg_len`, no address overflow).
    pub fn decode(buf: &[u8]) -> Option<RndvKey> {
        RndvKeyRef::decode(buf).map(|k| RndvKey {
            mkey: KeyBytes::from_slice(k.mkey),
            shm: k.shm,
            device: k.device,
        })
    }
}

/// An [`RndvKey`] read in place: its memory lane's key borrowed from the message, for a
/// receiver that uses it at once (a `cuda_ipc` key does not fit [`KeyBytes`] inline, and
/// copying it out cost an allocation per message).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RndvKeyRef<'a> {
    pub mkey: &'a [u8],
    pub shm: Option<ShmWindow>,
    pub device: bool,
}

impl<'a> RndvKeyRef<'a> {
    /// As [`RndvKey::decode`].
    pub fn decode(buf: &'a [u8]) -> Option<RndvKeyRef<'a>> {
        let mut r = Reader::new(buf);
        let n = r.u16()? as usize;
        let mkey = r.bytes(n)?;
        let flags = r.u8()?;
        if flags & !(KEY_SHM | KEY_DEVICE) != 0 {
            return None;
        }
        let shm = match flags & KEY_SHM {
            0 => None,
            _ => {
                let s = ShmWindow {
                    pid: r.u32()?,
                    fd: r.u32()?,
                    nonce: r.u64()?,
                    seg_len: r.u64()?,
                    base: r.u64()?,
                    len: r.u64()?,
                };
                (s.len <= s.seg_len && s.base.checked_add(s.len).is_some()).then_some(s)?;
                Some(s)
            }
        };
        r.is_empty().then_some(RndvKeyRef {
            mkey,
            shm,
            device: flags & KEY_DEVICE != 0,
        })
    }

    /// Bytes of the encoding.
    fn encoded_len(&self) -> usize {
        2 + self.mkey.len()
            + 1
            + if self.shm.is_some() {
                SHM_WINDOW_LEN
            } else {
                0
            }
    }

    /// The encoding of [`RndvKey::encode`], into `w`.
    fn write(&self, w: &mut Put) {
        w.u16(self.mkey.len() as u16);
        w.bytes(self.mkey);
        let dev = if self.device { KEY_DEVICE } else { 0 };
        match self.shm {
            None => w.u8(dev),
            Some(s) => {
                w.u8(dev | KEY_SHM);
                w.u32(s.pid);
                w.u32(s.fd);
                for v in [s.nonce, s.seg_len, s.base, s.len] {
                    w.u64(v);
                }
            }
        }
    }
}

/// A little-endian writer into a slice: what does not fit is dropped and remembered.
struct Put<'a> {
    out: &'a mut [u8],
    at: usize,
    short: bool,
}

impl Put<'_> {
    fn bytes(&mut self, v: &[u8]) {
        match self.out.get_mut(self.at..self.at + v.len()) {
            Some(d) => {
                d.copy_from_slice(v);
                self.at += v.len();
            }
            None => self.short = true,
        }
    }
    fn u8(&mut self, v: u8) {
        self.bytes(&[v]);
    }
    fn u16(&mut self, v: u16) {
        self.bytes(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}

/// Bytes of the RTS [`write_rts_get`] writes.
pub fn rts_get_len(key: &RndvKeyRef, segs: &[RemoteSeg]) -> usize {
    EAGER_FIRST_HDR + 1 + segs_len_n(key.encoded_len(), segs.len())
}

/// Writes into `out` the RTS that [`encode_rts`] makes of `h` and `RtsData::Get { rkey:
/// key` encoded`, segs, help }`, without building the key or the message first (a
/// sender's RTS goes straight into the transport's buffer); its length, or `None` when
/// `out` is shorter than [`rts_get_len`].
pub fn write_rts_get(
    out: &mut [u8],
    h: &FirstHdr,
    help: bool,
    key: &RndvKeyRef,
    segs: &[RemoteSeg],
) -> Option<usize> {
    if out.len() < rts_get_len(key, segs) {
        return None;
    }
    h.write(&mut out[..EAGER_FIRST_HDR]);
    let mut w = Put {
        out,
        at: EAGER_FIRST_HDR,
        short: false,
    };
    w.u8(if help {
        MODE_GET_HELP
    } else {
        RndvMode::Get as u8
    });
    w.u16(key.encoded_len() as u16);
    key.write(&mut w);
    w.u32(segs.len() as u32);
    for s in segs {
        w.u64(s.addr);
        w.u64(s.len);
    }
    (!w.short).then_some(w.at)
}

/// An RTS's rendezvous part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RtsData {
    Get {
        rkey: KeyBytes,
        segs: Segs,
        /// The sender will write a tail of the data if asked (mode GET_HELP).
        help: bool,
    },
    Am,
    Put,
    GetLayout {
        rkey: KeyBytes,
        origin: u64,
        hash: u128,
        layout: Option<Vec<u8>>,
        /// The sender will write a tail of the data if asked (mode GET_LAYOUT_HELP).
        help: bool,
    },
}

pub fn encode_rts(h: &FirstHdr, data: &RtsData) -> Vec<u8> {
    let body = match data {
        RtsData::Get { rkey, segs, .. } => 1 + segs_len(rkey, segs),
        RtsData::Am | RtsData::Put => 1,
        RtsData::GetLayout { rkey, layout, .. } => {
            1 + 2 + rkey.len() + 8 + 16 + 1 + layout.as_ref().map_or(0, |l| 4 + l.len())
        }
    };
    let mut b = Vec::with_capacity(EAGER_FIRST_HDR + body);
    b.resize(EAGER_FIRST_HDR, 0);
    h.write(&mut b);
    let mut w = Writer { buf: b };
    match data {
        RtsData::Get { rkey, segs, help } => {
            let mode = if *help {
                MODE_GET_HELP
            } else {
                RndvMode::Get as u8
            };
            w = write_segs(w.u8(mode), rkey, segs)
        }
        RtsData::Am => w = w.u8(RndvMode::Am as u8),
        RtsData::Put => w = w.u8(RndvMode::Put as u8),
        RtsData::GetLayout {
            rkey,
            origin,
            hash,
            layout,
            help,
        } => {
            w = w
                .u8(if *help {
                    MODE_GET_LAYOUT_HELP
                } else {
                    MODE_GET_LAYOUT
                })
                .u16(rkey.len() as u16)
                .bytes(rkey)
                .u64(*origin)
                .bytes(&hash.to_le_bytes());
            w = match layout {
                Some(l) => w.u8(1).u32(l.len() as u32).bytes(l),
                None => w.u8(0),
            };
        }
    }
    w.buf
}

/// Decodes an RTS; the segment lengths must add up to `total`.
pub fn decode_rts(buf: &[u8]) -> Option<(FirstHdr, RtsData)> {
    let mut r = Reader::new(buf);
    let h = FirstHdr::read(&mut r)?;
    let data = match r.u8()? {
        m @ (1 | MODE_GET_HELP) => {
            let (rkey, segs) = read_segs(&mut r, Some(h.total))?;
            RtsData::Get {
                rkey,
                segs,
                help: m == MODE_GET_HELP,
            }
        }
        2 => RtsData::Am,
        3 => RtsData::Put,
        m @ (MODE_GET_LAYOUT | MODE_GET_LAYOUT_HELP) => {
            let n = r.u16()? as usize;
            let rkey = r.bytes(n)?.to_vec();
            let origin = r.u64()?;
            let hash = u128::from_le_bytes(r.bytes(16)?.try_into().ok()?);
            let layout = match r.u8()? {
                0 => None,
                1 => {
                    let n = r.u32()? as usize;
                    Some(r.bytes(n)?.to_vec())
                }
                _ => return None,
            };
            RtsData::GetLayout {
                rkey: KeyBytes::from_vec(rkey),
                origin,
                hash,
                layout,
                help: m == MODE_GET_LAYOUT_HELP,
            }
        }
        _ => return None,
    };
    if !r.is_empty() {
        return None;
    }
    Some((h, data))
}

/// Reads `rkey_len rkey nseg segs` to the end of `r`; the lengths must add up to `total`
/// when given.
fn read_segs(r: &mut Reader, total: Option<u64>) -> Option<(KeyBytes, Segs)> {
    let n = r.u16()? as usize;
    let rkey = KeyBytes::from_slice(r.bytes(n)?);
    let nseg = r.u32()? as usize;
    if nseg > MAX_RTS_SEGS || r.remaining() != nseg * 16 {
        return None;
    }
    let mut segs = Segs::with_capacity(nseg);
    let mut sum = 0u64;
    for _ in 0..nseg {
        let s = RemoteSeg {
            addr: r.u64()?,
            len: r.u64()?,
        };
        s.addr.checked_add(s.len)?;
        sum = sum.checked_add(s.len)?;
        segs.push(s);
    }
    total.is_none_or(|t| t == sum).then_some((rkey, segs))
}

/// Bytes `write_segs` adds.
fn segs_len(rkey: &[u8], segs: &[RemoteSeg]) -> usize {
    segs_len_n(rkey.len(), segs.len())
}

fn segs_len_n(rkey_len: usize, nsegs: usize) -> usize {
    2 + rkey_len + 4 + 16 * nsegs
}

fn write_segs(mut w: Writer, rkey: &[u8], segs: &[RemoteSeg]) -> Writer {
    w = w.u16(rkey.len() as u16).bytes(rkey).u32(segs.len() as u32);
    for s in segs {
        w = w.u64(s.addr).u64(s.len);
    }
    w
}

/// An RTR_PUT: the receiver's request and segments.
pub fn encode_rtr_put(ep: u32, sreq: u64, rreq: u64, rkey: &[u8], segs: &[RemoteSeg]) -> Vec<u8> {
    let w = Writer::with_capacity(20 + segs_len(rkey, segs));
    write_segs(w.u32(ep).u64(sreq).u64(rreq), rkey, segs).buf
}

/// An RTR_PUT: `(ep, sreq, rreq, rkey, segments)`.
pub type RtrPut = (u32, u64, u64, KeyBytes, Segs);

/// Decodes an RTR_PUT. The caller checks that its segments add up to the message length.
pub fn decode_rtr_put(buf: &[u8]) -> Option<RtrPut> {
    let mut r = Reader::new(buf);
    let (ep, sreq, rreq) = (r.u32()?, r.u64()?, r.u64()?);
    // The total is checked by the caller, which knows the message.
    let (rkey, segs) = read_segs(&mut r, None)?;
    Some((ep, sreq, rreq, rkey, segs))
}

/// An RTR_SPLIT: the receiver reads the bytes before `offset` and asks the sender to write
/// the rest into `segs`.
pub fn encode_rtr_split(
    ep: u32,
    sreq: u64,
    rreq: u64,
    offset: u64,
    rkey: &[u8],
    segs: &[RemoteSeg],
) -> Vec<u8> {
    write_segs(
        Writer::with_capacity(28 + segs_len(rkey, segs))
            .u32(ep)
            .u64(sreq)
            .u64(rreq)
            .u64(offset),
        rkey,
        segs,
    )
    .buf
}

/// An RTR_SPLIT: `(ep, sreq, rreq, offset, rkey, segments)`.
pub type RtrSplit = (u32, u64, u64, u64, KeyBytes, Segs);

/// Decodes an RTR_SPLIT. The caller checks that its segments add up to the message length
/// less `offset`.
pub fn decode_rtr_split(buf: &[u8]) -> Option<RtrSplit> {
    let mut r = Reader::new(buf);
    let (ep, sreq, rreq, offset) = (r.u32()?, r.u64()?, r.u64()?, r.u64()?);
    let (rkey, segs) = read_segs(&mut r, None)?;
    Some((ep, sreq, rreq, offset, rkey, segs))
}

/// An RTR_SPLIT_LAYOUT: the receiver reads the bytes before `offset` and asks the sender
/// to write the rest into its data, described by the canonical encoding `layout` placed at
/// `origin` (its packed bytes from `offset` on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtrSplitLayout {
    pub ep: u32,
    pub sreq: u64,
    pub rreq: u64,
    pub offset: u64,
    pub rkey: KeyBytes,
    pub origin: u64,
    /// The layout's encoding, or (empty) its hash when it went before in parts.
    pub layout: Vec<u8>,
    pub hash: Option<u128>,
}

impl RtrSplitLayout {
    pub fn encode(&self) -> Vec<u8> {
        let body = match self.hash {
            Some(_) => 16,
            None => self.layout.len(),
        };
        let n = 28 + 2 + self.rkey.len() + 8 + 4 + body;
        let w = Writer::with_capacity(n)
            .u32(self.ep)
            .u64(self.sreq)
            .u64(self.rreq)
            .u64(self.offset)
            .u16(self.rkey.len() as u16)
            .bytes(&self.rkey)
            .u64(self.origin);
        match self.hash {
            Some(h) => w.u32(u32::MAX).bytes(&h.to_le_bytes()).buf,
            None => w.u32(self.layout.len() as u32).bytes(&self.layout).buf,
        }
    }

    pub fn decode(buf: &[u8]) -> Option<RtrSplitLayout> {
        let mut r = Reader::new(buf);
        let (ep, sreq, rreq, offset) = (r.u32()?, r.u64()?, r.u64()?, r.u64()?);
        let n = r.u16()? as usize;
        let rkey = KeyBytes::from_slice(r.bytes(n)?);
        let origin = r.u64()?;
        let (layout, hash) = match r.u32()? {
            u32::MAX => (
                Vec::new(),
                Some(u128::from_le_bytes(r.bytes(16)?.try_into().ok()?)),
            ),
            n => (r.bytes(n as usize)?.to_vec(), None),
        };
        r.is_empty().then_some(RtrSplitLayout {
            ep,
            sreq,
            rreq,
            offset,
            rkey,
            origin,
            layout,
            hash,
        })
    }
}

/// RTR and ACK share a shape: `ep a b` (ACK's `b` is its status).
pub fn encode_rtr(ep: u32, sreq: u64, rreq: u64) -> [u8; 20] {
    let mut b = [0u8; 20];
    b[0..4].copy_from_slice(&ep.to_le_bytes());
    b[4..12].copy_from_slice(&sreq.to_le_bytes());
    b[12..20].copy_from_slice(&rreq.to_le_bytes());
    b
}

pub fn decode_rtr(buf: &[u8]) -> Option<(u32, u64, u64)> {
    let mut r = Reader::new(buf);
    let v = (r.u32()?, r.u64()?, r.u64()?);
    r.is_empty().then_some(v)
}

/// RTR_UMR: the receiver of a layout rendezvous over a transport with UMR asks the sender
/// to write each chunk of `chunk` bytes into its indirect key `keys[i]`. `kid` names the
/// key list; a list the sender was sent before (the per-peer remote key cache, kept in
/// step on both sides) is named by `kid` alone, with `keys` empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RtrUmr {
    pub ep: u32,
    pub sreq: u64,
    pub rreq: u64,
    pub chunk: u64,
    pub kid: u64,
    pub keys: Vec<u32>,
}

/// Bytes of an RTR_UMR before its keys.
pub const RTR_UMR_HDR: usize = 4 + 8 + 8 + 8 + 8 + 4;

impl RtrUmr {
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default()
            .u32(self.ep)
            .u64(self.sreq)
            .u64(self.rreq)
            .u64(self.chunk)
            .u64(self.kid)
            .u32(self.keys.len() as u32);
        for k in &self.keys {
            w = w.u32(*k);
        }
        w.buf
    }

    /// Refuses a zero chunk and a key count that disagrees with the bytes.
    pub fn decode(buf: &[u8]) -> Option<RtrUmr> {
        let mut r = Reader::new(buf);
        let (ep, sreq, rreq, chunk, kid, n) = (
            r.u32()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u32()? as usize,
        );
        if chunk == 0 || r.rest().len() != n.checked_mul(4)? {
            return None;
        }
        let keys = (0..n).map(|_| r.u32()).collect::<Option<Vec<u32>>>()?;
        Some(RtrUmr {
            ep,
            sreq,
            rreq,
            chunk,
            kid,
            keys,
        })
    }
}

pub fn encode_ack(ep: u32, sreq: u64, status: i8) -> [u8; 13] {
    let mut b = [0u8; 13];
    b[0..4].copy_from_slice(&ep.to_le_bytes());
    b[4..12].copy_from_slice(&sreq.to_le_bytes());
    b[12] = status as u8;
    b
}

pub fn decode_ack(buf: &[u8]) -> Option<(u32, u64, i8)> {
    let mut r = Reader::new(buf);
    let v = (r.u32()?, r.u64()?, r.u8()? as i8);
    r.is_empty().then_some(v)
}

/// Wire-up message kinds.
/// Writes an RMA_REPLY into `buf` (a transport's buffer, checked by the caller to hold
/// `REPLY_HDR + data.len()` bytes); returns its length.
pub fn write_reply(
    buf: &mut [u8],
    ep: u32,
    req: u64,
    offset: u64,
    status: i8,
    data: &[u8],
) -> usize {
    buf[..4].copy_from_slice(&ep.to_le_bytes());
    buf[4..12].copy_from_slice(&req.to_le_bytes());
    buf[12..20].copy_from_slice(&offset.to_le_bytes());
    buf[20] = status as u8;
    buf[REPLY_HDR..REPLY_HDR + data.len()].copy_from_slice(data);
    REPLY_HDR + data.len()
}

pub const WIREUP_REQ: u8 = 1;
pub const WIREUP_REP: u8 = 2;
/// The sender closed its endpoint `src_ep` (paired with our `dst_ep`): a clean close, not
/// a failure.
pub const WIREUP_CLOSE: u8 = 3;
/// Nothing to act on: sent every `UCX_KEEPALIVE_INTERVAL` on endpoints over a network
/// transport, so that the transport has data to see acknowledged (or not) by the peer.
pub const WIREUP_KEEPALIVE: u8 = 4;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wireup {
    pub kind: u8,
    pub uuid: u64,
    pub src_ep: u32,
    pub dst_ep: u32,
    /// The sender's worker address (REQ only).
    pub addr: Vec<u8>,
}

impl Wireup {
    pub fn encode(&self) -> Vec<u8> {
        Writer::new()
            .u8(self.kind)
            .u64(self.uuid)
            .u32(self.src_ep)
            .u32(self.dst_ep)
            .u32(self.addr.len() as u32)
            .bytes(&self.addr)
            .buf
    }
    pub fn decode(buf: &[u8]) -> Option<Wireup> {
        let mut r = Reader::new(buf);
        let kind = r.u8()?;
        if !matches!(
            kind,
            WIREUP_REQ | WIREUP_REP | WIREUP_CLOSE | WIREUP_KEEPALIVE
        ) {
            return None;
        }
        let w = Wireup {
            kind,
            uuid: r.u64()?,
            src_ep: r.u32()?,
            dst_ep: r.u32()?,
            addr: {
                let n = r.u32()? as usize;
                r.bytes(n)?.to_vec()
            },
        };
        r.is_empty().then_some(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rndv_key_round_trip_and_checks() {
        let plain = RndvKey {
            mkey: smallvec::smallvec![9; 12],
            shm: None,
            device: false,
        };
        let b = plain.encode();
        assert_eq!(b.len(), 2 + 12 + 1);
        assert_eq!(RndvKey::decode(&b), Some(plain.clone()));
        let dev = RndvKey {
            device: true,
            ..plain
        };
        assert_eq!(RndvKey::decode(&dev.encode()), Some(dev));
        let w = ShmWindow {
            pid: 42,
            fd: 7,
            nonce: 0x1234_5678,
            seg_len: 1 << 20,
            base: 0x7f00_0000_0000,
            len: 1000,
        };
        let k = RndvKey {
            mkey: smallvec::smallvec![1, 2, 3],
            shm: Some(w),
            device: false,
        };
        let b = k.encode();
        assert_eq!(b.len(), 2 + 3 + 1 + SHM_WINDOW_LEN);
        assert!(!b.spilled(), "held inline");
        assert_eq!(RndvKey::decode(&b), Some(k.clone()));
        // Every truncation, and a trailing byte, is refused.
        for n in 0..b.len() {
            assert_eq!(RndvKey::decode(&b[..n]), None, "{n} bytes");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(RndvKey::decode(&long), None);
        // A window longer than its file, or past the end of the address space.
        for bad in [
            ShmWindow {
                len: w.seg_len + 1,
                ..w
            },
            ShmWindow {
                base: u64::MAX - 10,
                ..w
            },
        ] {
            let b = RndvKey {
                mkey: smallvec::smallvec![],
                shm: Some(bad),
                device: false,
            }
            .encode();
            assert_eq!(RndvKey::decode(&b), None, "{bad:?}");
        }
        // An unknown window flag.
        let mut b = plain_bytes();
        *b.last_mut().unwrap() = 2;
        assert_eq!(RndvKey::decode(&b), None);
        *b.last_mut().unwrap() = 0x20;
        assert_eq!(RndvKey::decode(&b), None);
        // Bounds.
        assert!(w.holds(w.base, w.len));
        assert!(w.holds(w.base + 10, 0));
        assert!(!w.holds(w.base - 1, 1));
        assert!(!w.holds(w.base + 1, w.len));
        assert!(!w.holds(u64::MAX, 2));
    }

    #[test]
    fn rtr_split_layout_round_trip() {
        let m = RtrSplitLayout {
            ep: 1,
            sreq: 2,
            rreq: 3,
            offset: 4096,
            rkey: smallvec::smallvec![7; 9],
            origin: 0x1000,
            layout: vec![1, 2, 3, 4, 5],
            hash: None,
        };
        let by_hash = RtrSplitLayout {
            layout: Vec::new(),
            hash: Some(u128::MAX - 7),
            ..m.clone()
        };
        for m in [m, by_hash] {
            let b = m.encode();
            assert_eq!(b.len(), b.capacity(), "sized up front");
            assert_eq!(RtrSplitLayout::decode(&b), Some(m));
            for n in 0..b.len() {
                assert_eq!(RtrSplitLayout::decode(&b[..n]), None, "{n} bytes");
            }
            let mut long = b;
            long.push(0);
            assert_eq!(RtrSplitLayout::decode(&long), None);
        }
    }

    #[test]
    fn rtr_umr_round_trips_and_refuses_what_does_not_add_up() {
        let m = RtrUmr {
            ep: 2,
            sreq: 3,
            rreq: 4,
            chunk: 504,
            kid: 0xfeed,
            keys: vec![0x100, 0x201, 0x302],
        };
        let b = m.encode();
        assert_eq!(b.len(), RTR_UMR_HDR + 12);
        assert_eq!(RtrUmr::decode(&b), Some(m.clone()));
        for n in 0..b.len() {
            assert_eq!(RtrUmr::decode(&b[..n]), None, "{n} bytes");
        }
        let mut long = b.clone();
        long.push(0);
        assert_eq!(RtrUmr::decode(&long), None);
        // A count that does not match the bytes (even one that overflows), a zero chunk.
        let mut bad = b.clone();
        bad[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(RtrUmr::decode(&bad), None);
        let zero = RtrUmr { chunk: 0, ..m };
        assert_eq!(RtrUmr::decode(&zero.encode()), None);
    }

    #[test]
    fn layout_parts_lie_inside_their_total() {
        let mut b = vec![0u8; LAYOUT_PART_HDR + 5];
        write_layout_part_hdr(&mut b, 3, 99, 20, 15);
        assert_eq!(decode_layout_part(&b), Some((3, 99, 20, 15, &[0u8; 5][..])));
        // Past the total, an offset that overflows, a total over the limit, short.
        write_layout_part_hdr(&mut b, 3, 99, 20, 16);
        assert_eq!(decode_layout_part(&b), None);
        write_layout_part_hdr(&mut b, 3, 99, u32::MAX, u32::MAX);
        assert_eq!(decode_layout_part(&b), None);
        write_layout_part_hdr(&mut b, 3, 99, MAX_LAYOUT_BYTES as u32 + 1, 0);
        assert_eq!(decode_layout_part(&b), None);
        assert_eq!(decode_layout_part(&b[..LAYOUT_PART_HDR - 1]), None);
    }

    fn plain_bytes() -> Vec<u8> {
        RndvKey {
            mkey: smallvec::smallvec![5],
            shm: None,
            device: false,
        }
        .encode()
        .to_vec()
    }

    #[test]
    fn an_rts_written_in_place_is_the_encoded_one() {
        let h = FirstHdr {
            tag: 0xdead_beef,
            ep: 5,
            flags: 0,
            sreq: 17,
            total: 4096,
        };
        let w = ShmWindow {
            pid: 42,
            fd: 7,
            nonce: 9,
            seg_len: 1 << 20,
            base: 0x7f00_0000_0000,
            len: 4096,
        };
        let segs: Segs = smallvec::smallvec![
            RemoteSeg {
                addr: 0x1000,
                len: 1000
            },
            RemoteSeg {
                addr: 0x3000,
                len: 3096
            },
        ];
        // A host key with a window, and a device key too long to be held inline (as
        // `cuda_ipc`'s 132 bytes), with and without the offer to write a tail.
        let host = vec![3u8; 12];
        let dev = vec![0xa5u8; 132];
        for (mkey, shm, device) in [(&host, Some(w), false), (&dev, None, true)] {
            for help in [false, true] {
                let key = RndvKeyRef { mkey, shm, device };
                let owned = RndvKey {
                    mkey: KeyBytes::from_slice(mkey),
                    shm,
                    device,
                };
                let want = encode_rts(
                    &h,
                    &RtsData::Get {
                        rkey: owned.encode(),
                        segs: segs.clone(),
                        help,
                    },
                );
                let n = rts_get_len(&key, &segs);
                assert_eq!(n, want.len());
                let mut out = vec![0u8; n + 8];
                assert_eq!(write_rts_get(&mut out, &h, help, &key, &segs), Some(n));
                assert_eq!(&out[..n], &want[..]);
                // Read back in place, the key is the one written.
                let Some((_, RtsData::Get { rkey, .. })) = decode_rts(&out[..n]) else {
                    panic!("not a get RTS");
                };
                assert_eq!(RndvKeyRef::decode(&rkey), Some(key));
                assert_eq!(RndvKey::decode(&rkey), Some(owned));
                // A buffer one byte short is refused and left as it was.
                let mut short = vec![0u8; n - 1];
                assert_eq!(write_rts_get(&mut short, &h, help, &key, &segs), None);
                assert!(short.iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn rts_round_trip_and_checks() {
        let h = FirstHdr {
            tag: 7,
            ep: 3,
            flags: FLAG_SYNC,
            sreq: 99,
            total: 30,
        };
        let d = RtsData::Get {
            rkey: smallvec::smallvec![1, 2, 3],
            segs: smallvec::smallvec![
                RemoteSeg { addr: 100, len: 10 },
                RemoteSeg { addr: 200, len: 20 },
            ],
            help: false,
        };
        let b = encode_rts(&h, &d);
        assert_eq!(decode_rts(&b), Some((h, d)));
        // The same with the sender's offer to write a tail.
        let d = RtsData::Get {
            rkey: smallvec::smallvec![1, 2, 3],
            segs: smallvec::smallvec![RemoteSeg { addr: 100, len: 30 }],
            help: true,
        };
        let b = encode_rts(&h, &d);
        // Sized exactly up front: one allocation, no reallocation.
        assert_eq!(b.len(), b.capacity());
        assert_eq!(b[EAGER_FIRST_HDR], MODE_GET_HELP);
        assert_eq!(decode_rts(&b), Some((h, d)));
        for n in 0..b.len() {
            assert_eq!(decode_rts(&b[..n]), None, "prefix {n}");
        }
        // Segment lengths that do not add up to total.
        let bad = encode_rts(
            &FirstHdr { total: 31, ..h },
            &RtsData::Get {
                rkey: smallvec::smallvec![],
                segs: smallvec::smallvec![RemoteSeg { addr: 0, len: 30 }],
                help: false,
            },
        );
        assert_eq!(decode_rts(&bad), None);
        // An address range that wraps.
        let wrap = encode_rts(
            &FirstHdr { total: 2, ..h },
            &RtsData::Get {
                rkey: smallvec::smallvec![],
                segs: smallvec::smallvec![RemoteSeg {
                    addr: u64::MAX,
                    len: 2,
                }],
                help: true,
            },
        );
        assert_eq!(decode_rts(&wrap), None);
        assert_eq!(
            decode_rts(&encode_rts(&h, &RtsData::Put)),
            Some((h, RtsData::Put))
        );
        let segs = [RemoteSeg { addr: 1, len: 2 }];
        let b = encode_rtr_put(1, 2, 3, &[9, 9], &segs);
        assert_eq!(
            decode_rtr_put(&b),
            Some((1, 2, 3, smallvec::smallvec![9, 9], Segs::from_slice(&segs)))
        );
        for n in 0..b.len() {
            assert_eq!(decode_rtr_put(&b[..n]), None);
        }
        let b = encode_rtr_split(1, 2, 3, 4096, &[9], &segs);
        assert_eq!(b.len(), b.capacity());
        assert_eq!(
            decode_rtr_split(&b),
            Some((
                1,
                2,
                3,
                4096,
                smallvec::smallvec![9],
                Segs::from_slice(&segs)
            ))
        );
        for n in 0..b.len() {
            assert_eq!(decode_rtr_split(&b[..n]), None);
        }
        for (layout, help) in [(None, false), (Some(vec![7u8; 33]), false), (None, true)] {
            let d = RtsData::GetLayout {
                rkey: smallvec::smallvec![1; 28],
                origin: 0x1000,
                hash: u128::MAX - 5,
                layout,
                help,
            };
            let b = encode_rts(&h, &d);
            assert_eq!(b.len(), b.capacity());
            assert_eq!(decode_rts(&b), Some((h, d)));
        }
        let am = encode_rts(&h, &RtsData::Am);
        assert_eq!(decode_rts(&am), Some((h, RtsData::Am)));
        let mut bad_mode = am.clone();
        *bad_mode.last_mut().unwrap() = 9;
        assert_eq!(decode_rts(&bad_mode), None);
    }

    #[test]
    fn small_headers_round_trip() {
        assert_eq!(decode_rtr(&encode_rtr(1, 2, 3)), Some((1, 2, 3)));
        assert_eq!(decode_rtr(&encode_rtr(1, 2, 3)[..19]), None);
        assert_eq!(decode_ack(&encode_ack(5, 6, -4)), Some((5, 6, -4)));
        let w = Wireup {
            kind: WIREUP_REQ,
            uuid: 1,
            src_ep: 2,
            dst_ep: u32::MAX,
            addr: vec![9; 5],
        };
        assert_eq!(Wireup::decode(&w.encode()), Some(w.clone()));
        let mut b = w.encode();
        b[0] = 5;
        assert_eq!(Wireup::decode(&b), None);
        let close = Wireup {
            kind: WIREUP_CLOSE,
            addr: Vec::new(),
            ..w
        };
        assert_eq!(Wireup::decode(&close.encode()), Some(close));
        let mut f = [0u8; EAGER_MIDDLE_HDR];
        let fh = FragHdr {
            ep: 1,
            req: 2,
            offset: 3,
        };
        fh.write(&mut f);
        assert_eq!(FragHdr::read(&mut Reader::new(&f)), Some(fh));
    }
}
