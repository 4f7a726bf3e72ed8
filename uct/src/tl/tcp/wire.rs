//! The tcp frame codec: what goes on the byte stream between two tcp interfaces.
//!
//! Every frame starts with an 8-byte little-endian header `type:u8 id:u8 reserved:u16
//! len:u32`, followed by `len` bytes of body. `id` is the active-message id for `AM` and zero
//! otherwise; `reserved` is zero. Bodies:
//!
//! | type | body |
//! |---|---|
//! | `HELLO` (1) | magic `RTCP`, version `u16`, reserved `u16`, then the sender interface's identity: IPv4 `[u8; 4]`, port `u16`, reserved `u16`, nonce `u64` — first frame from the connecting side |
//! | `AM` (2) | the message: header bytes then payload |
//! | `PUT` (3) | `req:u32 reserved:u32 key:u64 addr:u64` then the data |
//! | `PUT_ACK` (4) | `req:u32 status:i32` |
//! | `GET_REQ` (5) | `req:u32 len:u32 key:u64 addr:u64` |
//! | `GET_RESP` (6) | `req:u32 status:i32` then `len` bytes of data when status is OK |
//!
//! A connection carries traffic both ways: the connecting side starts with `HELLO`, after
//! which either side may send requests (`AM`, `PUT`, `GET_REQ`), and answers (`PUT_ACK`,
//! `GET_RESP`) travel back on the connection that carried the request, in request order.
//! [`decode`] checks the type, the side, the reserved bits, the AM id and the length against
//! [`Limits`] from the header alone, before any body byte is awaited, so a peer can never
//! make us wait for (or buffer) more than one maximal frame.

use ucs::Status;

use crate::iface::AM_ID_MAX;
use ucs::wire::{Reader, Writer};

/// Bytes of the frame header.
pub(crate) const HDR_LEN: usize = 8;
/// Bytes of the `HELLO` body.
pub(crate) const HELLO_LEN: usize = 24;
/// Bytes of the `PUT` body before the data.
pub(crate) const PUT_HDR_LEN: usize = 24;
/// Bytes of a `PUT_ACK` body.
pub(crate) const ACK_LEN: usize = 8;
/// Bytes of a `GET_REQ` body.
pub(crate) const GET_REQ_LEN: usize = 24;
/// Bytes of the `GET_RESP` body before the data.
pub(crate) const GET_RESP_HDR_LEN: usize = 8;

pub(crate) const MAGIC: [u8; 4] = *b"RTCP";
pub(crate) const VERSION: u16 = 1;

/// Frame types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Type {
    Hello = 1,
    Am = 2,
    Put = 3,
    PutAck = 4,
    GetReq = 5,
    GetResp = 6,
}

impl Type {
    fn from_u8(v: u8) -> Option<Type> {
        Some(match v {
            1 => Type::Hello,
            2 => Type::Am,
            3 => Type::Put,
            4 => Type::PutAck,
            5 => Type::GetReq,
            6 => Type::GetResp,
            _ => return None,
        })
    }
}

/// Which end of the connection is reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    /// We accepted the connection: it starts with the peer's `HELLO`.
    Acceptor,
    /// We opened it: a `HELLO` from the peer is a protocol error.
    Initiator,
}

/// An interface's identity: the address it listens on and a random nonce from its
/// interface address (so a connection cannot claim to be an interface whose address blob
/// it has not seen).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct IfaceId {
    pub ip: [u8; 4],
    pub port: u16,
    pub nonce: u64,
}

/// The largest bodies a receiver accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Largest `AM` body (header + payload).
    pub am: usize,
    /// Largest `GET_REQ` length and `GET_RESP` data.
    pub rma: usize,
    /// Largest data part of a `PUT` (read into its target as it arrives, so it need not
    /// fit the receive buffer).
    pub put: usize,
}

impl Limits {
    /// The largest whole frame, header included.
    pub(crate) fn frame_max(&self) -> usize {
        HDR_LEN
            + self
                .am
                .max(PUT_HDR_LEN + self.rma)
                .max(GET_RESP_HDR_LEN + self.rma)
                .max(HELLO_LEN)
    }
}

/// A decoded frame; slices borrow the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Frame<'a> {
    Hello(IfaceId),
    Am {
        id: u8,
        data: &'a [u8],
    },
    Put {
        req: u32,
        key: u64,
        addr: u64,
        data: &'a [u8],
    },
    PutAck {
        req: u32,
        status: Status,
    },
    GetReq {
        req: u32,
        len: u32,
        key: u64,
        addr: u64,
    },
    GetResp {
        req: u32,
        status: Status,
        data: &'a [u8],
    },
}

/// What [`decode`] found at the front of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decoded<'a> {
    /// A whole frame and the bytes it used.
    Frame(Frame<'a>, usize),
    /// The frame at the front is not complete; it will be this many bytes long in total.
    Need(usize),
}

/// A frame that breaks the protocol. The connection it came on is closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum WireError {
    #[error("unknown frame type {0}")]
    UnknownType(u8),
    #[error("frame type {0:?} not allowed in this direction")]
    WrongDirection(Type),
    #[error("nonzero reserved bits {0:#x}")]
    Reserved(u32),
    #[error("active message id {0} out of range")]
    AmId(u8),
    #[error("nonzero id {1} in a {0:?} frame")]
    StrayId(Type, u8),
    #[error("{0:?} frame of {1} bytes is outside the limits")]
    Length(Type, usize),
    #[error("bad hello magic {0:02x?}")]
    Magic([u8; 4]),
    #[error("unsupported protocol version {0}")]
    Version(u16),
    #[error("invalid status code {0}")]
    BadStatus(i32),
    #[error("the connection did not start with a hello")]
    NoHello,
    #[error("a second hello")]
    SecondHello,
}

/// Decodes the frame at the front of `buf`, checking everything against `lim` and `dir`.
pub(crate) fn decode<'a>(
    buf: &'a [u8],
    lim: &Limits,
    side: Side,
) -> Result<Decoded<'a>, WireError> {
    let mut h = Reader::new(buf);
    let (Some(raw_ty), Some(id), Some(reserved), Some(len)) = (h.u8(), h.u8(), h.u16(), h.u32())
    else {
        return Ok(Decoded::Need(HDR_LEN));
    };
    let ty = Type::from_u8(raw_ty).ok_or(WireError::UnknownType(raw_ty))?;
    let len = len as usize;
    if ty == Type::Hello && side == Side::Initiator {
        return Err(WireError::WrongDirection(ty));
    }
    if reserved != 0 {
        return Err(WireError::Reserved(u32::from(reserved)));
    }
    if ty == Type::Am {
        if id >= AM_ID_MAX {
            return Err(WireError::AmId(id));
        }
    } else if id != 0 {
        return Err(WireError::StrayId(ty, id));
    }
    let len_ok = match ty {
        Type::Hello => len == HELLO_LEN,
        Type::Am => len <= lim.am,
        Type::Put => (PUT_HDR_LEN..=PUT_HDR_LEN + lim.put).contains(&len),
        Type::PutAck => len == ACK_LEN,
        Type::GetReq => len == GET_REQ_LEN,
        Type::GetResp => (GET_RESP_HDR_LEN..=GET_RESP_HDR_LEN + lim.rma).contains(&len),
    };
    if !len_ok {
        return Err(WireError::Length(ty, len));
    }
    let total = HDR_LEN + len;
    let Some(body) = buf.get(HDR_LEN..total) else {
        return Ok(Decoded::Need(total));
    };
    let mut r = Reader::new(body);
    // The lengths were checked above, so the fixed-size reads below cannot run short; the
    // `ok_or` keeps that a checked fact rather than an assumption.
    let short = WireError::Length(ty, len);
    let frame = match ty {
        Type::Hello => {
            let magic: [u8; 4] = r.bytes(4).and_then(|b| b.try_into().ok()).ok_or(short)?;
            if magic != MAGIC {
                return Err(WireError::Magic(magic));
            }
            let version = r.u16().ok_or(short)?;
            if version != VERSION {
                return Err(WireError::Version(version));
            }
            let reserved = r.u16().ok_or(short)?;
            let ip: [u8; 4] = r.bytes(4).and_then(|b| b.try_into().ok()).ok_or(short)?;
            let port = r.u16().ok_or(short)?;
            let reserved2 = r.u16().ok_or(short)?;
            if reserved != 0 || reserved2 != 0 {
                return Err(WireError::Reserved(u32::from(reserved | reserved2)));
            }
            let nonce = r.u64().ok_or(short)?;
            Frame::Hello(IfaceId { ip, port, nonce })
        }
        Type::Am => Frame::Am { id, data: body },
        Type::Put => {
            let req = r.u32().ok_or(short)?;
            let reserved = r.u32().ok_or(short)?;
            if reserved != 0 {
                return Err(WireError::Reserved(reserved));
            }
            let key = r.u64().ok_or(short)?;
            let addr = r.u64().ok_or(short)?;
            Frame::Put {
                req,
                key,
                addr,
                data: &body[PUT_HDR_LEN..],
            }
        }
        Type::PutAck => {
            let req = r.u32().ok_or(short)?;
            let status = status(r.u32().ok_or(short)?)?;
            Frame::PutAck { req, status }
        }
        Type::GetReq => {
            let req = r.u32().ok_or(short)?;
            let len = r.u32().ok_or(short)?;
            if len as usize > lim.rma {
                return Err(WireError::Length(ty, len as usize));
            }
            let key = r.u64().ok_or(short)?;
            let addr = r.u64().ok_or(short)?;
            Frame::GetReq {
                req,
                len,
                key,
                addr,
            }
        }
        Type::GetResp => {
            let req = r.u32().ok_or(short)?;
            let status = status(r.u32().ok_or(short)?)?;
            let data = &body[GET_RESP_HDR_LEN..];
            if status != Status::Ok && !data.is_empty() {
                return Err(WireError::Length(ty, len));
            }
            Frame::GetResp { req, status, data }
        }
    };
    Ok(Decoded::Frame(frame, total))
}

/// A put frame carries up to this many segments of data (`UCX_TCP_SEG_SIZE`): its target
/// reads the payload straight into place, so fewer, longer frames cost fewer headers and
/// answers.
pub(crate) const PUT_FRAME_SEGS: usize = 16;

/// The head of a put frame that `decode` found incomplete (`Decoded::Need`): its
/// request, key, address and payload length, and how many bytes its headers take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PutHead {
    pub req: u32,
    pub key: u64,
    pub addr: u64,
    pub len: usize,
    pub head: usize,
}

/// The head of the frame at the start of `buf` when it is a put whose headers have
/// arrived (`None` otherwise). Call it only where [`decode`] answered `Need` for the same
/// bytes: the frame header is then checked already (its type, and its length against
/// the limits).
pub(crate) fn put_head(buf: &[u8]) -> Option<Result<PutHead, WireError>> {
    let mut h = Reader::new(buf);
    let (ty, _, _, len) = (h.u8()?, h.u8()?, h.u16()?, h.u32()?);
    if ty != Type::Put as u8 {
        return None;
    }
    let mut r = Reader::new(buf.get(HDR_LEN..HDR_LEN + PUT_HDR_LEN)?);
    let (req, reserved, key, addr) = (r.u32()?, r.u32()?, r.u64()?, r.u64()?);
    if reserved != 0 {
        return Some(Err(WireError::Reserved(reserved)));
    }
    Some(Ok(PutHead {
        req,
        key,
        addr,
        len: (len as usize).checked_sub(PUT_HDR_LEN)?,
        head: HDR_LEN + PUT_HDR_LEN,
    }))
}

/// A status on the wire: OK or an error code (never "in progress").
fn status(raw: u32) -> Result<Status, WireError> {
    let v = raw as i32;
    i8::try_from(v)
        .ok()
        .and_then(Status::from_code)
        .filter(|s| *s == Status::Ok || s.is_err())
        .filter(|s| s.code() as i32 == v)
        .ok_or(WireError::BadStatus(v))
}

/// Writes a frame header into `out[..HDR_LEN]`.
#[inline(always)]
pub(crate) fn put_header(out: &mut [u8], ty: Type, id: u8, len: usize) {
    debug_assert!(len <= u32::MAX as usize);
    out[0] = ty as u8;
    out[1] = id;
    out[2] = 0;
    out[3] = 0;
    out[4..8].copy_from_slice(&(len as u32).to_le_bytes());
}

/// The whole `HELLO` frame of interface `me`.
pub(crate) fn hello(me: &IfaceId) -> Vec<u8> {
    Writer::default()
        .u8(Type::Hello as u8)
        .u8(0)
        .u16(0)
        .u32(HELLO_LEN as u32)
        .bytes(&MAGIC)
        .u16(VERSION)
        .u16(0)
        .bytes(&me.ip)
        .u16(me.port)
        .u16(0)
        .u64(me.nonce)
        .buf
}

/// Header and fixed body of a `PUT` carrying `data_len` bytes.
pub(crate) fn put_req(out: &mut [u8], req: u32, key: u64, addr: u64, data_len: usize) {
    put_header(out, Type::Put, 0, PUT_HDR_LEN + data_len);
    out[8..12].copy_from_slice(&req.to_le_bytes());
    out[12..16].copy_from_slice(&0u32.to_le_bytes());
    out[16..24].copy_from_slice(&key.to_le_bytes());
    out[24..32].copy_from_slice(&addr.to_le_bytes());
}

/// A whole `PUT_ACK` frame.
pub(crate) fn put_ack(out: &mut [u8], req: u32, status: Status) {
    put_header(out, Type::PutAck, 0, ACK_LEN);
    out[8..12].copy_from_slice(&req.to_le_bytes());
    out[12..16].copy_from_slice(&i32::from(status.code()).to_le_bytes());
}

/// A whole `GET_REQ` frame.
pub(crate) fn get_req(out: &mut [u8], req: u32, len: u32, key: u64, addr: u64) {
    put_header(out, Type::GetReq, 0, GET_REQ_LEN);
    out[8..12].copy_from_slice(&req.to_le_bytes());
    out[12..16].copy_from_slice(&len.to_le_bytes());
    out[16..24].copy_from_slice(&key.to_le_bytes());
    out[24..32].copy_from_slice(&addr.to_le_bytes());
}

/// Header and fixed body of a `GET_RESP` followed by `data_len` bytes.
pub(crate) fn get_resp(out: &mut [u8], req: u32, status: Status, data_len: usize) {
    put_header(out, Type::GetResp, 0, GET_RESP_HDR_LEN + data_len);
    out[8..12].copy_from_slice(&req.to_le_bytes());
    out[12..16].copy_from_slice(&i32::from(status.code()).to_le_bytes());
}

/// Decodes every frame of a byte stream as an acceptor and an initiator would, with the
/// transport's default limits, until the bytes run out or a frame is refused: the fuzzing
/// entry for peer-supplied tcp bytes (`fuzz/`). Panics only if the decoder breaks its own
/// promise (a frame that uses no bytes, or more than there are); allocates nothing.
#[doc(hidden)]
pub fn fuzz_stream(buf: &[u8]) -> usize {
    let lim = Limits {
        am: 64 << 10,
        rma: 64 << 10,
        put: PUT_FRAME_SEGS * (64 << 10),
    };
    let mut frames = 0;
    for side in [Side::Acceptor, Side::Initiator] {
        let mut b = buf;
        loop {
            match decode(b, &lim, side) {
                Ok(Decoded::Frame(_, used)) => {
                    assert!(
                        used > 0 && used <= b.len(),
                        "frame of {used} bytes in {}",
                        b.len()
                    );
                    frames += 1;
                    b = &b[used..];
                }
                // An incomplete put is read into its target from its headers on: they
                // must name no more than the frame holds.
                Ok(Decoded::Need(k)) => {
                    if let Some(Ok(p)) = put_head(b) {
                        assert!(p.head + p.len <= k, "put head {p:?} beyond a frame of {k}");
                    }
                    break;
                }
                Err(_) => break,
            }
        }
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const LIM: Limits = Limits {
        am: 1000,
        rma: 4096,
        put: 4096,
    };
    const ME: IfaceId = IfaceId {
        ip: [10, 1, 2, 3],
        port: 4567,
        nonce: 0x1234_5678_9abc_def0,
    };

    fn frame(ty: u8, id: u8, body: &[u8]) -> Vec<u8> {
        let mut v = vec![ty, id, 0, 0];
        v.extend_from_slice(&(body.len() as u32).to_le_bytes());
        v.extend_from_slice(body);
        v
    }

    #[test]
    fn round_trips() {
        let h = hello(&ME);
        assert_eq!(
            decode(&h, &LIM, Side::Acceptor),
            Ok(Decoded::Frame(Frame::Hello(ME), 32))
        );
        let am = frame(2, 63, b"abcdefgh-payload");
        assert_eq!(
            decode(&am, &LIM, Side::Acceptor),
            Ok(Decoded::Frame(
                Frame::Am {
                    id: 63,
                    data: b"abcdefgh-payload"
                },
                am.len()
            ))
        );
        let mut p = vec![0u8; 32];
        put_req(&mut p, 7, 99, 0x1000, 3);
        p.extend_from_slice(b"xyz");
        assert_eq!(
            decode(&p, &LIM, Side::Acceptor),
            Ok(Decoded::Frame(
                Frame::Put {
                    req: 7,
                    key: 99,
                    addr: 0x1000,
                    data: b"xyz"
                },
                35
            ))
        );
        let mut a = [0u8; 16];
        put_ack(&mut a, 7, Status::InvalidParam);
        assert_eq!(
            decode(&a, &LIM, Side::Initiator),
            Ok(Decoded::Frame(
                Frame::PutAck {
                    req: 7,
                    status: Status::InvalidParam
                },
                16
            ))
        );
        let mut g = [0u8; 32];
        get_req(&mut g, 8, 4096, 5, 6);
        assert_eq!(
            decode(&g, &LIM, Side::Acceptor),
            Ok(Decoded::Frame(
                Frame::GetReq {
                    req: 8,
                    len: 4096,
                    key: 5,
                    addr: 6
                },
                32
            ))
        );
        let mut r = vec![0u8; 16];
        get_resp(&mut r, 8, Status::Ok, 2);
        r.extend_from_slice(b"hi");
        assert_eq!(
            decode(&r, &LIM, Side::Initiator),
            Ok(Decoded::Frame(
                Frame::GetResp {
                    req: 8,
                    status: Status::Ok,
                    data: b"hi"
                },
                18
            ))
        );
    }

    #[test]
    fn put_heads_are_read_from_partial_frames_only_when_whole() {
        let mut f = vec![0u8; HDR_LEN + PUT_HDR_LEN + 4000];
        put_req(&mut f, 9, 77, 0x4000, 4000);
        // The frame is incomplete: decode asks for the rest, put_head reads the headers.
        let part = &f[..HDR_LEN + PUT_HDR_LEN + 100];
        assert_eq!(
            decode(part, &LIM, Side::Acceptor),
            Ok(Decoded::Need(f.len()))
        );
        assert_eq!(
            put_head(part),
            Some(Ok(PutHead {
                req: 9,
                key: 77,
                addr: 0x4000,
                len: 4000,
                head: HDR_LEN + PUT_HDR_LEN
            }))
        );
        // Headers not all in yet, or another type: nothing.
        assert_eq!(put_head(&f[..HDR_LEN + 10]), None);
        let mut a = vec![0u8; 40];
        put_header(&mut a, Type::Am, 1, 32);
        assert_eq!(put_head(&a), None);
        // A reserved field set is an error, as `decode` says of a whole frame.
        f[12] = 1;
        assert!(matches!(put_head(&f), Some(Err(WireError::Reserved(1)))));
    }

    #[test]
    fn partial_frames_ask_for_the_rest() {
        let am = frame(2, 1, &[5u8; 100]);
        assert_eq!(decode(&am[..3], &LIM, Side::Acceptor), Ok(Decoded::Need(8)));
        assert_eq!(
            decode(&am[..50], &LIM, Side::Acceptor),
            Ok(Decoded::Need(108))
        );
        assert_eq!(decode(&[], &LIM, Side::Acceptor), Ok(Decoded::Need(8)));
    }

    #[test]
    fn rejects_malformed_headers() {
        use WireError::*;
        fn d(b: &[u8], dir: Side) -> Result<Decoded<'_>, WireError> {
            decode(b, &LIM, dir)
        }
        assert_eq!(d(&frame(0, 0, &[]), Side::Acceptor), Err(UnknownType(0)));
        assert_eq!(d(&frame(9, 0, &[]), Side::Acceptor), Err(UnknownType(9)));
        assert_eq!(
            d(&hello(&ME), Side::Initiator),
            Err(WrongDirection(Type::Hello))
        );
        assert_eq!(d(&frame(2, 64, &[]), Side::Acceptor), Err(AmId(64)));
        assert_eq!(d(&frame(2, 255, &[]), Side::Acceptor), Err(AmId(255)));
        assert_eq!(
            d(&frame(3, 1, &[0; 24]), Side::Acceptor),
            Err(StrayId(Type::Put, 1))
        );
        let mut f = frame(2, 0, &[]);
        f[3] = 1;
        assert_eq!(d(&f, Side::Acceptor), Err(Reserved(0x100)));
        // Oversized lengths are refused from the header alone, without the body.
        let mut big = frame(2, 0, &[]);
        big[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            d(&big, Side::Acceptor),
            Err(Length(Type::Am, u32::MAX as usize))
        );
        assert_eq!(
            d(&frame(2, 0, &[0; 1001]), Side::Acceptor),
            Err(Length(Type::Am, 1001))
        );
        assert_eq!(
            d(&frame(3, 0, &[0; 23]), Side::Acceptor),
            Err(Length(Type::Put, 23))
        );
        assert_eq!(
            d(&frame(3, 0, &vec![0; 24 + 4097]), Side::Acceptor),
            Err(Length(Type::Put, 24 + 4097))
        );
        assert_eq!(
            d(&frame(1, 0, &[0; 9]), Side::Acceptor),
            Err(Length(Type::Hello, 9))
        );
        let mut h = hello(&ME);
        h[22] = 1;
        assert_eq!(d(&h, Side::Acceptor), Err(Reserved(1)));
        let mut h = hello(&ME);
        h[8] = b'X';
        assert_eq!(d(&h, Side::Acceptor), Err(Magic(*b"XTCP")));
        let mut h = hello(&ME);
        h[12] = 2;
        assert_eq!(d(&h, Side::Acceptor), Err(Version(2)));
        // A get longer than the limit, a bad status, data with an error status.
        let mut g = [0u8; 32];
        get_req(&mut g, 1, 4097, 0, 0);
        assert_eq!(d(&g, Side::Acceptor), Err(Length(Type::GetReq, 4097)));
        let mut a = [0u8; 16];
        put_ack(&mut a, 1, Status::Ok);
        a[12..16].copy_from_slice(&1i32.to_le_bytes());
        assert_eq!(d(&a, Side::Initiator), Err(BadStatus(1)));
        a[12..16].copy_from_slice(&(-1000i32).to_le_bytes());
        assert_eq!(d(&a, Side::Initiator), Err(BadStatus(-1000)));
        let mut r = vec![0u8; 16];
        get_resp(&mut r, 1, Status::InvalidParam, 1);
        r.push(0);
        assert_eq!(d(&r, Side::Initiator), Err(Length(Type::GetResp, 9)));
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(0x7c9);
        let mut buf = vec![0u8; 256];
        for round in 0..200_000 {
            let n = rng.gen_range(0..buf.len());
            rng.fill(&mut buf[..n]);
            // Bias towards plausible headers so bodies get parsed too.
            if n >= 8 && round % 2 == 0 {
                buf[0] = rng.gen_range(0..8);
                buf[1] = if rng.gen() { 0 } else { rng.gen_range(0..70) };
                buf[2] = 0;
                buf[3] = 0;
                let len = rng.gen_range(0..n as u32);
                buf[4..8].copy_from_slice(&len.to_le_bytes());
            }
            for side in [Side::Acceptor, Side::Initiator] {
                match decode(&buf[..n], &LIM, side) {
                    Ok(Decoded::Frame(_, used)) => assert!(used <= n && used >= HDR_LEN),
                    Ok(Decoded::Need(total)) => {
                        assert!(total > n && total <= LIM.frame_max())
                    }
                    Err(_) => {}
                }
            }
        }
    }
}
