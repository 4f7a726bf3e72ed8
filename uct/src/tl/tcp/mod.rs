//! `tcp`: active messages over non-blocking TCP sockets, with put and get emulated over the
//! same streams.
//!
//! An interface listens on one device's IPv4 address (chosen through `UCX_NET_DEVICES`).
//! `ep_connect` starts a non-blocking connect and returns at once; what is posted before
//! the connection is up waits in its send queue, behind a `HELLO` frame that names the
//! connecting interface and lets the acceptor check it is talking to a Rucx tcp peer. The
//! acceptor takes connections in `progress` and reads frames (module `wire`) from all of them.
//!
//! **One connection per pair of interfaces.** A connection carries traffic both ways, and
//! every endpoint to the same peer interface shares it: an endpoint whose peer has already
//! connected to us adopts that connection instead of opening a second one. When both sides
//! connected at once, the first send on each side settles on one of the two: the one the
//! peer already sends on, else the one opened by the interface with the smaller identity
//! (listening address and nonce, `wire::IfaceId`). Our own connection is closed if it loses
//! (it carried nothing but the hello, and by the same rule the peer never sends on it); two
//! connections stay in use only when both sides sent before seeing the other's. A second
//! connection costs a pure ACK segment per message, about 2.5 µs of a loopback round trip,
//! so this is what keeps ping-pong latency low. Connections live until their interface is
//! closed or the peer goes away, so endpoints to the same peer come and go without
//! reconnecting.
//!
//! The data path allocates nothing per message: a send goes straight to the socket from the
//! connection's reusable send buffer (one `send` or `sendmsg` call) and is queued only when
//! the socket is full; `progress` reads the connection that last brought data with one
//! direct `recv` and polls the epoll set every few calls (or every call while a send queue
//! waits for room). Put and get are checked twice: against the remote key at the
//! initiator, then against the target's registration table ([`TcpMd`]), which refuses
//! anything outside a registered region with an error answer. Gets are requested a window
//! at a time, so the answers a peer must buffer stay bounded; a peer that lets more than
//! `TX_HARD_CAP` (64 MiB) of answers pile up is disconnected. A reset connection fails every
//! operation outstanding on it with `ConnectionReset` and reports `ep_error` once per
//! endpoint.
//!
//! **A peer host that stops answering** (its link cut, the host gone: no reset, no close
//! ever arrives) fails its connections with `EndpointTimeout`. An idle connection is the
//! kernel's keepalive's (`UCX_TCP_KEEPIDLE`, `KEEPINTVL`, `KEEPCNT`: 16 s by default). One
//! where data waits for the peer is found by `check_silence`, run from `progress` every
//! `UCX_ERROR_CHECK_INTERVAL`: it asks the kernel (`TCP_INFO`) whether it holds data for
//! the peer that it has retransmitted, or whose closed window it has probed, twice or more
//! without an answer, and fails the connection once that has lasted, with no
//! acknowledgment at all, `KEEPINTVL` x `KEEPCNT` (6 s by default), or three
//! `UCX_KEEPALIVE_INTERVAL`s where that is shorter (ucp's keepalive messages keep data
//! going to every peer, so an idle connection is found that way too). A live peer's kernel
//! answers retransmissions and window probes even while its process does not read, so a
//! slow peer is never taken for a dead one; `TCP_USER_TIMEOUT`, which also ends a
//! connection whose window stayed closed that long (Linux 5.11 and later), is not used.
//!
//! **Puts move no byte through a buffer.** The initiator sends a put's data from the
//! caller's memory (`sendmsg` of borrowed pieces), in frames of up to `PUT_FRAME_SEGS`
//! segments. The target reads a put's headers into its receive buffer and, once the
//! payload does not fit what was read with them, the rest straight into the registered
//! target (`DirectPut`, checked against the table under its lock for every read, so a
//! region deregistered part way is not written again: the rest is read and dropped and
//! the answer is an error). After a put, the next read takes one frame's headers only, so
//! that a following put's payload is not read into the buffer first. `ucp` uses this for
//! rendezvous over tcp (a put of the sender's buffer into the receiver's).

mod buf;
mod md;
mod sock;
pub(crate) mod wire;
#[doc(hidden)]
pub use wire::fuzz_stream;

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use slab::Slab;
use ucs::config::AutoSize;
use ucs::log::RateLimit;
use ucs::wakeup::Epoll;
use ucs::{Config, Status, UcsResult};

use crate::ep::{iov_total, Comp, Done, EpId, Iov, IovVec};
use crate::error::OpenError;
use crate::iface::{check_am_id, Handler, Iface, IfaceAttr, IfaceFlags, OpLimits, PerfEstimate};
use crate::md::{Md, RemoteKey};
use ucs::wire::{Reader, Writer};

use buf::{RxBuf, TxQueue};
pub use md::TcpMd;
use wire::{Decoded, Frame, IfaceId, Limits, Side, WireError, HDR_LEN};

/// Bytes a connection may hold in its send queue before operations return `NoResource`.
const TX_LIMIT: usize = 256 << 10;
/// Bytes of get answers an initiator lets a peer owe it at a time (at least one fragment).
const GET_WINDOW: usize = 4 << 20;
/// Owned bytes a send queue may reach before the peer is taken to be broken: an honest peer
/// keeps what it makes us queue under `GET_WINDOW` plus small change.
const TX_HARD_CAP: usize = 64 << 20;
/// Upper bound of `max_short` (header included).
const SHORT_CAP: usize = 8192;
const MAX_HDR: usize = 128;
const AM_MAX_IOV: usize = 64;
const RMA_MAX_IOV: usize = 1 << 16;
const RMA_MAX_ZCOPY: usize = 1 << 30;
/// Extra receive space beyond one maximal frame, so small frames arrive in batches.
const RX_SLACK: usize = 64 << 10;
const EVENTS: usize = 64;
/// Receive-buffer fills per connection and progress call.
const READS_PER_CALL: usize = 16;
const ACCEPT_BATCH: usize = 64;
const LISTEN_BACKLOG: i32 = 1024;
/// While a connection is hot, the epoll set is polled once every this many progress calls
/// (a power of two).
const FULL_POLL_EVERY: u32 = 16;
/// The clock is read for the dead-peer check once every this many progress calls (a power
/// of two).
const SILENCE_POLL_EVERY: u32 = 64;
/// Connections the dead-peer check asks the kernel about per round at most (one
/// `getsockopt` each); more are taken in turns over the following rounds.
const SILENCE_PER_ROUND: usize = 64;

const EV_IN: u32 = (libc::EPOLLIN | libc::EPOLLRDHUP) as u32;
const EV_OUT: u32 = libc::EPOLLOUT as u32;
const EV_ERR: u32 = (libc::EPOLLERR | libc::EPOLLHUP) as u32;

const KIND_LISTENER: u64 = 0;
const KIND_CONN: u64 = 1;
const GEN_MASK: u32 = 0x3fff_ffff;

static ACCEPT_LOG: RateLimit = RateLimit::new(1_000_000_000);
static EPOLL_LOG: RateLimit = RateLimit::new(1_000_000_000);

/// epoll data: kind (2 bits), generation (30 bits), slab index (32 bits). The generation
/// makes an event for a closed connection whose slot was reused harmless.
fn ev_token(kind: u64, gen: u32, idx: usize) -> u64 {
    (kind << 62) | (u64::from(gen & GEN_MASK) << 32) | (idx as u64 & 0xffff_ffff)
}

/// Network devices tcp can use: up interfaces with an IPv4 address that `UCX_NET_DEVICES`
/// selects (loopback included).
pub fn devices(cfg: &Config) -> Result<Vec<String>, String> {
    let ifs = sock::ipv4_interfaces().map_err(|e| format!("getifaddrs failed: {e}"))?;
    Ok(ifs
        .into_iter()
        .filter(|i| cfg.net_device_enabled(&i.name))
        .map(|i| i.name)
        .collect())
}

/// The status a failed socket call means for the endpoints of the connection.
fn errno_status(e: i32) -> Status {
    match e {
        libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH | libc::EHOSTDOWN => {
            Status::Unreachable
        }
        libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ECONNABORTED | libc::ESHUTDOWN => {
            Status::ConnectionReset
        }
        // The kernel gave up on the peer: keepalive probes or a connect went unanswered.
        libc::ETIMEDOUT => Status::EndpointTimeout,
        _ => Status::IoError,
    }
}

fn errno_str(e: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(e)
}

/// Bytes of fragment `k` of a `total`-byte transfer cut into `seg`-byte fragments.
#[inline]
fn frag_len(total: usize, seg: usize, k: usize) -> usize {
    seg.min(total - (k * seg).min(total))
}

/// Something `progress` hands to the handler after the fact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    Completion(Comp, Status),
    EpError(EpId, Status),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    Comp(Comp),
    /// An interface-wide flush, counted down per connection.
    Group(usize),
}

/// An `am_zcopy` or flush waiting for the bytes queued before it to leave and the RMA
/// operations posted before it to be answered.
#[derive(Clone, Copy, Debug)]
struct Waiter {
    ep: Option<EpId>,
    tx_end: u64,
    rma_mark: u64,
    target: Target,
}

#[derive(Clone, Copy, Debug)]
struct FlushGroup {
    comp: Comp,
    remaining: usize,
    status: Status,
}

/// State every connection touches: the epoll set, events to report, flush groups.
#[derive(Debug)]
struct Shared {
    epoll: Epoll,
    events: VecDeque<Event>,
    groups: Slab<FlushGroup>,
    pending_total: usize,
    /// Connections whose send queue waits for `EPOLLOUT`.
    out_waiting: usize,
    /// Put payload bytes read straight into their targets (`DirectPut`).
    direct_bytes: u64,
}

impl Shared {
    fn finish(&mut self, target: Target, st: Status) {
        match target {
            Target::Comp(c) => self.events.push_back(Event::Completion(c, st)),
            Target::Group(g) => {
                let Some(grp) = self.groups.get_mut(g) else {
                    return;
                };
                if st != Status::Ok && grp.status == Status::Ok {
                    grp.status = st;
                }
                grp.remaining -= 1;
                if grp.remaining == 0 {
                    let grp = self.groups.remove(g);
                    self.events
                        .push_back(Event::Completion(grp.comp, grp.status));
                }
            }
        }
    }
}

/// Where a get's answers land.
#[derive(Debug)]
struct GetDst {
    iov: IovVec,
    idx: usize,
    off: usize,
}

impl GetDst {
    /// Moves the cursor over `n` bytes, copying `src` (of length `n`) there when given.
    fn advance(&mut self, mut n: usize, src: Option<&[u8]>) {
        let mut at = 0;
        while n > 0 && self.idx < self.iov.len() {
            let v = self.iov[self.idx];
            let k = (v.length - self.off).min(n);
            if let Some(src) = src {
                // SAFETY: get_zcopy's contract makes every iov entry writable for `length`
                // bytes until completion (a canceled get has its list emptied first);
                // off + k <= length and at + k <= src.len() == n.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.as_ptr().add(at), v.buffer.add(self.off), k)
                };
            }
            at += k;
            n -= k;
            self.off += k;
            if self.off == v.length {
                self.idx += 1;
                self.off = 0;
            }
        }
    }
}

/// An outstanding put or get of ours on a connection: one answer per fragment.
#[derive(Debug)]
struct RmaOp {
    seq: u64,
    ep: EpId,
    comp: Comp,
    total: usize,
    key: u64,
    addr: u64,
    frags_total: usize,
    frags_requested: usize,
    frags_done: usize,
    status: Status,
    /// The answer was promised to nobody (the endpoint was destroyed).
    canceled: bool,
    /// `Some` for a get.
    get: Option<GetDst>,
}

impl RmaOp {
    fn finished(&self) -> bool {
        self.frags_done == self.frags_total
    }
}

/// Why a connection is closed.
#[derive(Debug, thiserror::Error)]
enum Close {
    #[error("closed by the peer")]
    Eof,
    #[error("{}", errno_str(*.0))]
    Socket(i32),
    #[error("malformed frame: {0}")]
    Proto(#[from] WireError),
    #[error("unexpected answer for request {0}")]
    Unexpected(u32),
    #[error("get answer of {got} bytes where {want} were asked for")]
    AnswerLength { got: usize, want: usize },
    #[error("the peer lets {0} bytes of answers pile up without reading them")]
    Overrun(usize),
    #[error("the peer's host acknowledged nothing for {0} ms while data waited for it")]
    Silent(u32),
}

impl Close {
    fn status(&self) -> Status {
        match self {
            Close::Eof => Status::ConnectionReset,
            Close::Socket(e) => errno_status(*e),
            Close::Silent(_) => Status::EndpointTimeout,
            _ => Status::IoError,
        }
    }
}

/// A put whose payload is read from the socket straight into its target, not through
/// the receive buffer (its headers arrived, its payload had not).
#[derive(Debug)]
struct DirectPut {
    req: u32,
    key: u64,
    addr: u64,
    len: usize,
    got: usize,
    /// Not `Ok`: the target was refused part way (deregistered); the rest is read and
    /// dropped, and the answer says so.
    status: Status,
}

/// Puts of at least this many payload bytes go straight into their target once their
/// headers are in (smaller ones come whole with the frames around them).
const DIRECT_MIN: usize = 4096;

/// One TCP connection to a peer interface, in both directions.
#[derive(Debug)]
struct Conn {
    fd: OwnedFd,
    gen: u32,
    token: u64,
    /// The epoll events registered now.
    interest: u32,
    rx: RxBuf,
    tx: TxQueue,
    addr: SocketAddrV4,
    /// The peer interface: known when we connect, learnt from the hello when we accept.
    peer: Option<IfaceId>,
    side: Side,
    hello: bool,
    /// The peer has sent requests here: it settled on this connection.
    peer_sends: bool,
    rma: VecDeque<RmaOp>,
    rma_seq: u64,
    get_inflight: usize,
    waiters: VecDeque<Waiter>,
    /// The put being read into its target.
    direct: Option<DirectPut>,
    /// The last frame was a put: the next read takes one frame's headers only, so that a
    /// following put's payload is read into its target rather than into the buffer.
    put_streak: bool,
    /// When the dead-peer check first saw the kernel retransmitting or probing on this
    /// connection without an answer (monotonic ns); `None` while the peer answers.
    unanswered_since: Option<u64>,
}

impl Conn {
    #[inline]
    fn raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// True when a new operation may be queued.
    #[inline]
    fn sendable(&self) -> bool {
        self.tx.queued() < TX_LIMIT && !self.deferred()
    }

    /// A get still has fragments to request; later operations wait behind it so the
    /// connection stays ordered.
    #[inline]
    fn deferred(&self) -> bool {
        self.rma
            .back()
            .is_some_and(|op| op.frags_requested < op.frags_total)
    }

    #[inline]
    fn idle(&self) -> bool {
        self.tx.is_empty() && self.rma.is_empty()
    }

    fn set_interest(&mut self, sh: &mut Shared) -> std::io::Result<()> {
        let want = if self.tx.is_empty() {
            EV_IN
        } else {
            EV_IN | EV_OUT
        };
        if self.interest != want {
            sh.epoll.modify(self.raw(), want, self.token)?;
            match (self.interest & EV_OUT != 0, want & EV_OUT != 0) {
                (false, true) => sh.out_waiting += 1,
                (true, false) => sh.out_waiting -= 1,
                _ => {}
            }
            self.interest = want;
        }
        Ok(())
    }

    /// Writes the send queue and settles what that completed.
    #[inline]
    fn send(&mut self, sh: &mut Shared) -> Result<(), Close> {
        self.tx.flush(self.raw()).map_err(Close::Socket)?;
        if !self.waiters.is_empty() {
            self.check_waiters(sh);
        }
        // Waiting for room when the queue is empty, or not waiting when it is not.
        if (self.interest & EV_OUT != 0) == self.tx.is_empty() {
            self.set_interest(sh)
                .map_err(|e| Close::Socket(e.raw_os_error().unwrap_or(libc::EIO)))?;
        }
        Ok(())
    }

    /// The dead-peer check of one connection: `Some(ms)` when its peer's host has been
    /// silent for `ms` (at least `timeout_ns`) while data waits for it, that is when the
    /// kernel holds data for the peer, has retransmitted it or probed the peer's closed
    /// window at least twice in a row without an answer, has seen such unanswered tries
    /// at every check for `timeout_ns`, and has received no acknowledgment for as long.
    /// A live peer's kernel answers every retransmission and window probe, even while its
    /// process does not read, so a slow peer is never taken for a dead one; an idle
    /// connection is the keepalive's.
    fn silent(&mut self, now: u64, timeout_ns: u64) -> Option<u32> {
        let st = match sock::tcp_state(self.raw()) {
            Ok(st) if st.established() && st.outstanding() && st.unanswered() > 0 => st,
            // Answered, idle, not up yet (the connect has its own timeout), or closing
            // (its socket reports that itself).
            _ => {
                self.unanswered_since = None;
                return None;
            }
        };
        let since = *self.unanswered_since.get_or_insert(now);
        let silent = st.unanswered() >= 2
            && now.saturating_sub(since) >= timeout_ns
            && u64::from(st.last_ack_recv_ms) * 1_000_000 >= timeout_ns;
        silent.then_some(st.last_ack_recv_ms)
    }

    fn check_waiters(&mut self, sh: &mut Shared) {
        let sent = self.tx.sent();
        let rma_front = self.rma.front().map_or(u64::MAX, |op| op.seq);
        while let Some(&w) = self.waiters.front() {
            if w.tx_end > sent || rma_front < w.rma_mark {
                break;
            }
            self.waiters.pop_front();
            sh.finish(w.target, Status::Ok);
        }
    }

    /// Reports the finished operations at the front, in posting order.
    fn pop_finished(&mut self, sh: &mut Shared) {
        let mut any = false;
        while self.rma.front().is_some_and(RmaOp::finished) {
            if let Some(op) = self.rma.pop_front() {
                if !op.canceled {
                    sh.events.push_back(Event::Completion(op.comp, op.status));
                }
                any = true;
            }
        }
        if any && !self.waiters.is_empty() {
            self.check_waiters(sh);
        }
    }

    /// Requests the next fragments of the get at the back, as far as the window allows.
    fn issue_gets(&mut self, seg: usize) {
        let Some(op) = self.rma.back_mut() else {
            return;
        };
        while op.frags_requested < op.frags_total {
            let k = op.frags_requested;
            let flen = frag_len(op.total, seg, k);
            if self.get_inflight > 0 && self.get_inflight + flen > GET_WINDOW {
                break;
            }
            let fl = HDR_LEN + wire::GET_REQ_LEN;
            wire::get_req(
                self.tx.reserve(fl),
                op.seq as u32,
                flen as u32,
                op.key,
                op.addr + (k * seg) as u64,
            );
            self.tx.commit(fl);
            op.frags_requested += 1;
            self.get_inflight += flen;
        }
    }

    /// Fails everything outstanding with `st` (the connection is gone).
    fn fail_ops(&mut self, st: Status, sh: &mut Shared) {
        self.tx.clear();
        self.rx.clear();
        self.direct = None;
        for op in self.rma.drain(..) {
            if !op.canceled {
                sh.events.push_back(Event::Completion(op.comp, st));
            }
        }
        for w in self.waiters.drain(..) {
            sh.finish(w.target, st);
        }
    }

    /// Reads what the socket has. Returns the peer named by a hello, if one arrived.
    fn read(
        &mut self,
        h: &mut dyn Handler,
        ctx: &Ctx<'_>,
        sh: &mut Shared,
        n: &mut usize,
    ) -> Result<Option<IfaceId>, Close> {
        let mut hello = None;
        // A bounded number of reads, so a peer that sends faster than we handle cannot keep
        // `progress` from returning; what is left waits for the next call.
        for _ in 0..READS_PER_CALL {
            if self.direct.is_some() {
                if self.read_direct(ctx.md, sh)? {
                    continue;
                }
                return Ok(hello);
            }
            let max = if self.put_streak && self.rx.start == self.rx.end {
                HDR_LEN + wire::PUT_HDR_LEN
            } else {
                usize::MAX
            };
            match self.rx.fill(self.raw(), max) {
                Ok((0, _)) => return Err(Close::Eof),
                Ok((_, more)) => {
                    if let Some(id) = self.process_rx(h, ctx, sh, n)? {
                        hello = Some(id);
                    }
                    if !more {
                        return Ok(hello);
                    }
                }
                Err(libc::EAGAIN) => return Ok(hello),
                Err(e) => return Err(Close::Socket(e)),
            }
        }
        Ok(hello)
    }

    /// Reads the payload of the put in `direct` into its target (or, refused, drops it),
    /// and answers the put once all of it is in. `Ok(true)` when the socket may have more.
    fn read_direct(&mut self, md: &TcpMd, sh: &mut Shared) -> Result<bool, Close> {
        let fd = self.raw();
        let Some(d) = self.direct.as_mut() else {
            return Ok(true);
        };
        let want = d.len - d.got;
        let placed = if d.status == Status::Ok {
            match md.recv_into(d.key, d.addr + d.got as u64, want, fd) {
                Ok(r) => Some(r),
                Err(st) => {
                    log::debug!("tcp: a put's target at {:#x} went away", d.addr);
                    d.status = st;
                    None
                }
            }
        } else {
            None
        };
        let r = placed.unwrap_or_else(|| {
            let mut sink = [0u8; 16 << 10];
            let k = want.min(sink.len());
            sock::recv(fd, &mut sink[..k])
        });
        match r {
            Ok(0) => Err(Close::Eof),
            Ok(n) => {
                d.got += n;
                if d.status == Status::Ok {
                    sh.direct_bytes += n as u64;
                }
                if d.got == d.len {
                    let (req, st) = (d.req, d.status);
                    self.direct = None;
                    let l = HDR_LEN + wire::ACK_LEN;
                    wire::put_ack(self.tx.reserve(l), req, st);
                    self.tx.commit(l);
                }
                Ok(n == want || self.direct.is_none())
            }
            Err(libc::EAGAIN) => Ok(false),
            Err(e) => Err(Close::Socket(e)),
        }
    }

    fn process_rx(
        &mut self,
        h: &mut dyn Handler,
        ctx: &Ctx<'_>,
        sh: &mut Shared,
        n: &mut usize,
    ) -> Result<Option<IfaceId>, Close> {
        let mut hello_from = None;
        let mut answered = false;
        let mut off = self.rx.start;
        loop {
            let frame = match wire::decode(&self.rx.bytes()[off..], ctx.limits, self.side)? {
                Decoded::Frame(f, used) => {
                    off += used;
                    f
                }
                Decoded::Need(k) => {
                    let rest = &self.rx.bytes()[off..];
                    match wire::put_head(rest) {
                        Some(Err(e)) => return Err(e.into()),
                        Some(Ok(_)) if self.side == Side::Acceptor && !self.hello => {
                            return Err(WireError::NoHello.into());
                        }
                        Some(Ok(p)) if p.len >= DIRECT_MIN => {
                            // The payload goes straight into its target: what is here
                            // first, the rest as it comes (`read_direct`). A put the
                            // target refuses is read and dropped the same way (it may
                            // be longer than the receive buffer), and answered so.
                            let here = &rest[p.head..];
                            let st = match ctx.md.check(p.key, p.addr, p.len) {
                                Status::Ok => ctx.md.write(p.key, p.addr, here),
                                refused => {
                                    log::debug!(
                                        "tcp: refused a put of {} bytes at {:#x}",
                                        p.len,
                                        p.addr
                                    );
                                    refused
                                }
                            };
                            self.direct = Some(DirectPut {
                                req: p.req,
                                key: p.key,
                                addr: p.addr,
                                len: p.len,
                                got: here.len(),
                                status: st,
                            });
                            self.peer_sends = true;
                            self.put_streak = true;
                            off += rest.len();
                            self.rx.need = 0;
                        }
                        Some(Ok(_)) => self.rx.need = k,
                        None => {
                            self.put_streak = false;
                            self.rx.need = k;
                        }
                    }
                    break;
                }
            };
            if self.side == Side::Acceptor && !self.hello {
                let Frame::Hello(id) = frame else {
                    return Err(WireError::NoHello.into());
                };
                self.hello = true;
                self.peer = Some(id);
                hello_from = Some(id);
                continue;
            }
            self.put_streak = matches!(frame, Frame::Put { .. });
            match frame {
                Frame::Hello(_) => return Err(WireError::SecondHello.into()),
                Frame::Am { id, data } => {
                    self.peer_sends = true;
                    h.am(id, data);
                    *n += 1;
                }
                Frame::Put {
                    req,
                    key,
                    addr,
                    data,
                } => {
                    self.peer_sends = true;
                    let st = ctx.md.write(key, addr, data);
                    if st != Status::Ok {
                        log::debug!("tcp: refused a put of {} bytes at {addr:#x}", data.len());
                    }
                    let l = HDR_LEN + wire::ACK_LEN;
                    wire::put_ack(self.tx.reserve(l), req, st);
                    self.tx.commit(l);
                }
                Frame::GetReq {
                    req,
                    len,
                    key,
                    addr,
                } => {
                    self.peer_sends = true;
                    // Checked before each answer, so one receive buffer full of requests
                    // cannot make us queue more than a fragment past the cap.
                    if self.tx.owned() > TX_HARD_CAP {
                        return Err(Close::Overrun(self.tx.owned()));
                    }
                    // `len` is at most the rma limit (checked by the decoder).
                    let len = len as usize;
                    let hl = HDR_LEN + wire::GET_RESP_HDR_LEN;
                    let b = self.tx.reserve(hl + len);
                    let st = ctx.md.read(key, addr, &mut b[hl..]);
                    if st != Status::Ok {
                        log::debug!("tcp: refused a get of {len} bytes at {addr:#x}");
                    }
                    let dlen = if st == Status::Ok { len } else { 0 };
                    wire::get_resp(b, req, st, dlen);
                    self.tx.commit(hl + dlen);
                }
                Frame::PutAck { req, status } => {
                    Self::on_answer(
                        &mut self.rma,
                        &mut self.get_inflight,
                        req,
                        status,
                        None,
                        ctx.seg,
                    )?;
                    answered = true;
                }
                Frame::GetResp { req, status, data } => {
                    Self::on_answer(
                        &mut self.rma,
                        &mut self.get_inflight,
                        req,
                        status,
                        Some(data),
                        ctx.seg,
                    )?;
                    answered = true;
                }
            }
        }
        self.rx.start = off;
        if answered {
            self.pop_finished(sh);
            self.issue_gets(ctx.seg);
        }
        if self.tx.owned() > TX_HARD_CAP {
            return Err(Close::Overrun(self.tx.owned()));
        }
        Ok(hello_from)
    }

    /// Matches an answer with the oldest operation waiting for one (answers come in the
    /// order of the requests).
    fn on_answer(
        rma: &mut VecDeque<RmaOp>,
        get_inflight: &mut usize,
        req: u32,
        st: Status,
        data: Option<&[u8]>,
        seg: usize,
    ) -> Result<(), Close> {
        let op = rma
            .iter_mut()
            .find(|op| op.frags_done < op.frags_requested)
            .ok_or(Close::Unexpected(req))?;
        if req != op.seq as u32 {
            return Err(Close::Unexpected(req));
        }
        match (&mut op.get, data) {
            (None, None) => {}
            (Some(g), Some(data)) => {
                let want = frag_len(op.total, seg, op.frags_done);
                if st == Status::Ok {
                    if data.len() != want {
                        return Err(Close::AnswerLength {
                            got: data.len(),
                            want,
                        });
                    }
                    g.advance(want, Some(data));
                } else {
                    g.advance(want, None);
                }
                *get_inflight -= want;
            }
            _ => return Err(Close::Unexpected(req)),
        }
        if st != Status::Ok && op.status == Status::Ok {
            op.status = st;
        }
        op.frags_done += 1;
        Ok(())
    }
}

/// What reading a connection needs from the interface.
#[derive(Clone, Copy, Debug)]
struct Ctx<'a> {
    md: &'a TcpMd,
    limits: &'a Limits,
    seg: usize,
}

/// The connections we have to one peer interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct PeerConns {
    /// The connection we opened.
    own: Option<usize>,
    /// The connection the peer opened (once its hello arrived).
    acc: Option<usize>,
    /// The connection our endpoints send on, fixed by the first send.
    committed: Option<usize>,
}

impl PeerConns {
    fn forget(&mut self, ci: usize) {
        for f in [&mut self.own, &mut self.acc, &mut self.committed] {
            if *f == Some(ci) {
                *f = None;
            }
        }
    }
}

/// An endpoint: a handle on the connection to one peer interface.
#[derive(Debug)]
struct EpConn {
    peer: IfaceId,
    conn: usize,
    /// `conn` is the connection all endpoints to `peer` send on.
    committed: bool,
    failed: Option<Status>,
    pending: VecDeque<u64>,
}

/// The `tcp` interface.
pub struct TcpIface {
    attr: IfaceAttr,
    device: String,
    ip: Ipv4Addr,
    me: IfaceId,
    dev_addr: Vec<u8>,
    iface_addr: Vec<u8>,
    md: TcpMd,
    seg: usize,
    limits: Limits,
    rx_cap: usize,
    sndbuf: Option<i32>,
    rcvbuf: Option<i32>,
    /// Keepalive (idle s, interval s, count); None: off.
    keepalive: Option<(i32, i32, i32)>,
    /// The dead-peer check of connections with data outstanding; None with keepalive off.
    silence: Option<SilenceCheck>,
    listener: OwnedFd,
    sh: Shared,
    evs: Vec<libc::epoll_event>,
    conns: Slab<Conn>,
    eps: Slab<EpConn>,
    peers: HashMap<IfaceId, PeerConns>,
    hot: Option<usize>,
    calls: u32,
    next_gen: u32,
}

impl fmt::Debug for TcpIface {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpIface")
            .field("device", &self.device)
            .field("ip", &self.ip)
            .field("port", &self.me.port)
            .field("conns", &self.conns.len())
            .field("eps", &self.eps.len())
            .finish()
    }
}

/// The dead-peer check of connections with data outstanding (module docs): the kernel's
/// keepalive probes only idle connections, and `TCP_USER_TIMEOUT` would also end a
/// connection whose peer is alive but has not read for as long (a closed window).
#[derive(Debug)]
struct SilenceCheck {
    /// A peer whose host acknowledges nothing for this long while data waits for it is
    /// taken for dead: `UCX_TCP_KEEPINTVL` x `UCX_TCP_KEEPCNT`.
    timeout_ns: u64,
    /// How often the connections are looked at: `UCX_ERROR_CHECK_INTERVAL`.
    every_ns: u64,
    next_ns: u64,
    /// The connection (slab index) the next round starts from.
    cursor: usize,
}

fn auto_bytes(a: AutoSize) -> Option<i32> {
    match a {
        AutoSize::Auto => None,
        AutoSize::Bytes(n) => Some(i32::try_from(n).unwrap_or(i32::MAX)),
    }
}

impl TcpIface {
    /// Opens a listening interface on `device`'s IPv4 address.
    pub fn open(cfg: &Config, device: &str) -> Result<TcpIface, OpenError> {
        let os = |call: &'static str, source: std::io::Error| OpenError::Os {
            tl: "tcp",
            device: device.to_string(),
            call,
            source,
        };
        let ip = sock::ipv4_interfaces()
            .map_err(|e| os("getifaddrs", e))?
            .into_iter()
            .find(|i| i.name == device)
            .map(|i| i.addr)
            .ok_or_else(|| OpenError::NoDevice {
                tl: "tcp",
                device: device.to_string(),
            })?;
        let sndbuf = auto_bytes(cfg.tcp_sndbuf);
        let rcvbuf = auto_bytes(cfg.tcp_rcvbuf);
        let listener = sock::tcp_socket().map_err(|e| os("socket", e))?;
        sock::set_int_opt(&listener, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)
            .map_err(|e| os("setsockopt(SO_REUSEADDR)", e))?;
        if let Some(v) = rcvbuf {
            // Accepted sockets inherit the receive buffer size (it sets the window scale).
            sock::set_int_opt(&listener, libc::SOL_SOCKET, libc::SO_RCVBUF, v)
                .map_err(|e| os("setsockopt(SO_RCVBUF)", e))?;
        }
        match cfg.tcp_port_range {
            (0, 0) => sock::bind(&listener, SocketAddrV4::new(ip, 0)).map_err(|e| os("bind", e))?,
            (lo, hi) => {
                let mut last = None;
                for port in lo..=hi {
                    match sock::bind(&listener, SocketAddrV4::new(ip, port)) {
                        Ok(()) => {
                            last = None;
                            break;
                        }
                        Err(e) => last = Some(e),
                    }
                }
                if let Some(e) = last {
                    return Err(os("bind", e));
                }
            }
        }
        sock::listen(&listener, LISTEN_BACKLOG).map_err(|e| os("listen", e))?;
        let port = sock::local_addr(&listener)
            .map_err(|e| os("getsockname", e))?
            .port();
        let epoll = Epoll::new().map_err(|e| os("epoll_create1", e))?;
        epoll
            .add(
                listener.as_raw_fd(),
                libc::EPOLLIN as u32,
                ev_token(KIND_LISTENER, 0, 0),
            )
            .map_err(|e| os("epoll_ctl", e))?;

        let seg = cfg.tcp_seg_size;
        let limits = Limits {
            am: seg + MAX_HDR,
            rma: seg,
            put: seg * wire::PUT_FRAME_SEGS,
        };
        let me = IfaceId {
            ip: ip.octets(),
            port,
            nonce: rand::random(),
        };
        let iface_addr = Writer::default()
            .u16(port)
            .u32(seg as u32)
            .u64(me.nonce)
            .buf;
        let rma = OpLimits {
            min_zcopy: 0,
            max_zcopy: RMA_MAX_ZCOPY,
            max_iov: RMA_MAX_IOV,
            ..Default::default()
        };
        let attr = IfaceAttr {
            flags: IfaceFlags::AM_SHORT
                | IfaceFlags::AM_BCOPY
                | IfaceFlags::AM_ZCOPY
                | IfaceFlags::PUT_ZCOPY
                | IfaceFlags::GET_ZCOPY
                | IfaceFlags::PENDING
                | IfaceFlags::CONNECT_TO_IFACE
                | IfaceFlags::EVENT_RECV
                | IfaceFlags::ERRHANDLE_PEER_FAILURE
                | IfaceFlags::EP_ORDERED,
            am: OpLimits {
                max_short: seg.min(SHORT_CAP) - 8,
                max_bcopy: seg,
                min_zcopy: 0,
                max_zcopy: seg,
                max_iov: AM_MAX_IOV,
                max_hdr: MAX_HDR,
            },
            put: rma,
            get: rma,
            perf: PerfEstimate {
                overhead_ns: 2000.0,
                latency_ns: 5000.0,
                bandwidth: 3e9,
            },
            mem: crate::iface::MemCaps::HOST,
            device_addr_len: 4,
            iface_addr_len: iface_addr.len(),
        };
        log::debug!("tcp: listening on {ip}:{port} ({device})");
        Ok(TcpIface {
            attr,
            device: device.to_string(),
            ip,
            me,
            dev_addr: Writer::default().bytes(&ip.octets()).buf,
            iface_addr,
            md: TcpMd::new(),
            seg,
            limits,
            rx_cap: limits.frame_max() + RX_SLACK,
            sndbuf,
            rcvbuf,
            keepalive: cfg.tcp_keepidle_ns.map(|idle| {
                let secs = |ns: u64| (ns / 1_000_000_000).clamp(1, i32::MAX as u64) as i32;
                (
                    secs(idle),
                    secs(cfg.tcp_keepintvl_ns),
                    cfg.tcp_keepcnt as i32,
                )
            }),
            // ucp's keepalive (`UCX_KEEPALIVE_INTERVAL`) keeps data going to every peer;
            // a peer that acknowledges none of it for three intervals is given up on when
            // that is sooner than KEEPINTVL x KEEPCNT.
            silence: cfg.tcp_keepidle_ns.map(|_| SilenceCheck {
                timeout_ns: cfg
                    .tcp_keepintvl_ns
                    .saturating_mul(u64::from(cfg.tcp_keepcnt))
                    .min(
                        cfg.keepalive_interval_ns
                            .map_or(u64::MAX, |k| k.saturating_mul(3)),
                    )
                    .max(1_000_000),
                every_ns: cfg
                    .error_check_interval_ns
                    .min(cfg.keepalive_interval_ns.unwrap_or(u64::MAX))
                    .max(1_000_000),
                next_ns: 0,
                cursor: 0,
            }),
            listener,
            sh: Shared {
                epoll,
                events: VecDeque::new(),
                groups: Slab::new(),
                pending_total: 0,
                out_waiting: 0,
                direct_bytes: 0,
            },
            evs: vec![libc::epoll_event { events: 0, u64: 0 }; EVENTS],
            conns: Slab::new(),
            eps: Slab::new(),
            peers: HashMap::new(),
            hot: None,
            calls: 0,
            next_gen: 0,
        })
    }

    /// The port this interface listens on.
    pub fn port(&self) -> u16 {
        self.me.port
    }

    fn gen(&mut self) -> u32 {
        self.next_gen = self.next_gen.wrapping_add(1) & GEN_MASK;
        self.next_gen
    }

    fn tune(&self, fd: &OwnedFd) -> std::io::Result<()> {
        sock::set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_NODELAY, 1)?;
        if let Some((idle, intvl, cnt)) = self.keepalive {
            // A peer host that vanishes without a reset is found by the kernel's probes
            // while the connection is idle, and by `check_silence` while data waits for
            // it. No TCP_USER_TIMEOUT: it also ends a connection whose peer is alive but
            // has not read for as long (its window closed; Linux 5.11 and later).
            sock::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1)?;
            sock::set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, idle)?;
            sock::set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, intvl)?;
            sock::set_int_opt(fd, libc::IPPROTO_TCP, libc::TCP_KEEPCNT, cnt)?;
        }
        if let Some(v) = self.sndbuf {
            sock::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_SNDBUF, v)?;
        }
        if let Some(v) = self.rcvbuf {
            sock::set_int_opt(fd, libc::SOL_SOCKET, libc::SO_RCVBUF, v)?;
        }
        Ok(())
    }

    /// The peer's socket address and identity; `InvalidAddr` for a malformed address and
    /// `Unreachable` for one this interface cannot (or should not) talk to.
    fn parse_peer(&self, dev: &[u8], iface: &[u8]) -> UcsResult<(SocketAddrV4, IfaceId)> {
        let ip: [u8; 4] = dev.try_into().map_err(|_| Status::InvalidAddr)?;
        let addr = Ipv4Addr::from(ip);
        let mut r = Reader::new(iface);
        let port = r.u16().ok_or(Status::InvalidAddr)?;
        let seg = r.u32().ok_or(Status::InvalidAddr)?;
        let nonce = r.u64().ok_or(Status::InvalidAddr)?;
        if !r.is_empty()
            || port == 0
            || addr.is_unspecified()
            || addr.is_broadcast()
            || addr.is_multicast()
        {
            return Err(Status::InvalidAddr);
        }
        // A loopback address means "this host" only to an interface on loopback, and the
        // peer must accept frames as large as ours.
        if (addr.is_loopback() && !self.ip.is_loopback()) || (seg as usize) < self.seg {
            return Err(Status::Unreachable);
        }
        Ok((SocketAddrV4::new(addr, port), IfaceId { ip, port, nonce }))
    }

    /// Opens our connection to `peer`; the hello is the first thing queued on it.
    fn connect(&mut self, addr: SocketAddrV4, peer: IfaceId) -> UcsResult<usize> {
        let fd = sock::tcp_socket().map_err(|e| {
            log::warn!("tcp: socket failed: {e}");
            Status::from_errno(e.raw_os_error().unwrap_or(0))
        })?;
        self.tune(&fd).map_err(|e| {
            log::warn!("tcp: setting up a socket failed: {e}");
            Status::IoError
        })?;
        sock::connect(&fd, addr).map_err(|e| {
            log::debug!("tcp: connect to {addr} failed: {}", errno_str(e));
            errno_status(e)
        })?;
        let gen = self.gen();
        let entry = self.conns.vacant_entry();
        let ci = entry.key();
        let token = ev_token(KIND_CONN, gen, ci);
        // Writable means connected (or failed); until then sends wait in the queue.
        let interest = EV_IN | EV_OUT;
        self.sh
            .epoll
            .add(fd.as_raw_fd(), interest, token)
            .map_err(|e| {
                log::warn!("tcp: epoll_ctl failed: {e}");
                Status::IoError
            })?;
        self.sh.out_waiting += 1;
        let mut tx = TxQueue::new();
        tx.push_copy(&wire::hello(&self.me));
        entry.insert(Conn {
            fd,
            gen,
            token,
            interest,
            rx: RxBuf::new(self.rx_cap),
            tx,
            addr,
            peer: Some(peer),
            side: Side::Initiator,
            hello: false,
            peer_sends: false,
            rma: VecDeque::new(),
            rma_seq: 0,
            get_inflight: 0,
            waiters: VecDeque::new(),
            direct: None,
            put_streak: false,
            unanswered_since: None,
        });
        self.peers.entry(peer).or_default().own = Some(ci);
        // The connection may already be up (loopback); if it failed, the endpoints learn it
        // from ep_error.
        let _ = self.send(ci);
        Ok(ci)
    }

    /// The dead-peer check, at most once per `UCX_ERROR_CHECK_INTERVAL`: asks the kernel
    /// about up to `SILENCE_PER_ROUND` connections and closes those whose peer host has
    /// stopped answering while data waits for it (`Conn::silent`). Its endpoints fail
    /// with `EndpointTimeout`.
    #[cold]
    #[inline(never)]
    fn check_silence(&mut self) {
        let Some(sc) = self.silence.as_mut() else {
            return;
        };
        let now = ucs::time::now_ns();
        if now < sc.next_ns || self.conns.is_empty() {
            return;
        }
        sc.next_ns = now + sc.every_ns;
        let (start, timeout_ns) = (sc.cursor, sc.timeout_ns);
        let mut dead: Vec<(usize, u32)> = Vec::new();
        let (mut seen, mut next) = (0, None);
        // Connections from the cursor on, then those before it.
        'passes: for first in [true, false] {
            for (ci, c) in self.conns.iter_mut() {
                if (ci >= start) != first {
                    continue;
                }
                if seen == SILENCE_PER_ROUND {
                    next = Some(ci);
                    break 'passes;
                }
                seen += 1;
                if let Some(ms) = c.silent(now, timeout_ns) {
                    dead.push((ci, ms));
                }
            }
        }
        if let Some(sc) = self.silence.as_mut() {
            sc.cursor = next.unwrap_or(start);
        }
        for (ci, ms) in dead {
            self.close(ci, Close::Silent(ms));
        }
    }

    /// Closes connection `ci` after a failure: everything outstanding on it fails with
    /// `st`, and so does every endpoint using it.
    #[cold]
    fn fail_conn(&mut self, ci: usize, st: Status, graceful: bool) {
        let Some(mut c) = self.conns.try_remove(ci) else {
            return;
        };
        let _ = self.sh.epoll.delete(c.raw());
        if c.interest & EV_OUT != 0 {
            self.sh.out_waiting -= 1;
        }
        c.fail_ops(st, &mut self.sh);
        // When both sides opened a connection, each may send on its own. An orderly close
        // of one (the peer is shutting down) must not fail the endpoints while the other
        // still holds what the peer sent last: they move to it, and fail when it closes.
        let other = c.peer.and_then(|p| self.peers.get(&p)).and_then(|pc| {
            [pc.own, pc.acc]
                .into_iter()
                .flatten()
                .find(|&o| o != ci && self.conns.contains(o))
        });
        let heir = if graceful { other } else { None };
        for (i, e) in self.eps.iter_mut() {
            if e.conn == ci && e.failed.is_none() {
                match heir {
                    Some(o) => e.conn = o,
                    None => {
                        e.failed = Some(st);
                        self.sh.events.push_back(Event::EpError(EpId(i as u32), st));
                    }
                }
            }
        }
        if let Some(p) = c.peer {
            if let Some(pc) = self.peers.get_mut(&p) {
                pc.forget(ci);
                if let Some(o) = heir {
                    pc.committed = Some(o);
                }
                if *pc == PeerConns::default() {
                    self.peers.remove(&p);
                }
            }
        }
        if self.hot == Some(ci) {
            self.hot = None;
        }
    }

    /// Pushes the send queue of `ci` out; a socket error fails the connection.
    #[inline]
    fn send(&mut self, ci: usize) -> UcsResult<()> {
        let Some(c) = self.conns.get_mut(ci) else {
            return Err(Status::InvalidParam);
        };
        match c.send(&mut self.sh) {
            Ok(()) => Ok(()),
            Err(why) => Err(self.close(ci, why)),
        }
    }

    /// Sends what an operation just queued, unless the socket is known to be full (then the
    /// `EPOLLOUT` wake-up sends it).
    #[inline]
    fn kick(&mut self, ci: usize) -> UcsResult<()> {
        if self.conns.get(ci).is_some_and(|c| c.interest & EV_OUT != 0) {
            return Ok(());
        }
        self.send(ci)
    }

    #[cold]
    fn close(&mut self, ci: usize, why: Close) -> Status {
        let st = why.status();
        if let Some(c) = self.conns.get(ci) {
            match why {
                Close::Eof | Close::Socket(_) => {
                    log::debug!("tcp: connection with {} closed: {why}", c.addr)
                }
                _ => log::error!("tcp: closing the connection with {}: {why}", c.addr),
            }
        }
        self.fail_conn(ci, st, matches!(why, Close::Eof));
        st
    }

    /// The connection `ep` sends on, settling it on the first send.
    #[inline]
    fn ep_conn(&mut self, ep: EpId) -> UcsResult<usize> {
        let e = self.eps.get(ep.index()).ok_or(Status::InvalidParam)?;
        if let Some(st) = e.failed {
            return Err(st);
        }
        if e.committed {
            return Ok(e.conn);
        }
        self.commit(ep)
    }

    /// Settles which connection the endpoints to `ep`'s peer send on. When both sides
    /// connected: the one the peer already sends on, else the one opened by the smaller
    /// identity (the peer applies the same rule, so both settle on one connection unless
    /// both sent before seeing the other's). Ours is closed if it loses: it carried only
    /// the hello, and by the rule the peer never sends on it.
    #[cold]
    #[inline(never)]
    fn commit(&mut self, ep: EpId) -> UcsResult<usize> {
        let peer = self.eps[ep.index()].peer;
        let pc = self.peers.get(&peer).copied().unwrap_or_default();
        let sends = |c: usize| self.conns.get(c).is_some_and(|c| c.peer_sends);
        let adopt = match (pc.own, pc.acc) {
            (Some(o), Some(a)) => !sends(o) && (sends(a) || peer < self.me),
            _ => false,
        };
        let chosen = match (pc.committed, pc.own, pc.acc) {
            (Some(c), _, _) => c,
            (None, Some(o), Some(a)) if adopt => {
                log::debug!("tcp: using the connection {peer:?} opened; closing ours");
                if let Some(c) = self.conns.try_remove(o) {
                    let _ = self.sh.epoll.delete(c.raw());
                    if c.interest & EV_OUT != 0 {
                        self.sh.out_waiting -= 1;
                    }
                }
                if self.hot == Some(o) {
                    self.hot = None;
                }
                a
            }
            (None, Some(o), _) => o,
            (None, None, Some(a)) => a,
            // Our connection failed before the first send; the endpoint failed with it.
            (None, None, None) => {
                return Err(self.eps[ep.index()].failed.unwrap_or(Status::Unreachable))
            }
        };
        let pc = self.peers.entry(peer).or_default();
        if pc.own != Some(chosen) {
            pc.own = None;
        }
        pc.committed = Some(chosen);
        for (_, e) in self.eps.iter_mut() {
            if e.peer == peer && e.failed.is_none() {
                e.conn = chosen;
                e.committed = true;
            }
        }
        Ok(chosen)
    }

    /// The connection `ep` sends on, when it can take another operation now.
    #[inline]
    fn ready_conn(&mut self, ep: EpId) -> UcsResult<usize> {
        let ci = self.ep_conn(ep)?;
        match self.conns.get(ci) {
            Some(c) if c.sendable() => Ok(ci),
            Some(_) => Err(Status::NoResource),
            None => Err(Status::IoError),
        }
    }

    fn accept_all(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            let (fd, addr) = match sock::accept(&self.listener) {
                Ok(Some(c)) => c,
                Ok(None) => return,
                Err(e) => {
                    if ACCEPT_LOG.allow() {
                        log::warn!("tcp: accept on {} failed: {e}", self.device);
                    }
                    return;
                }
            };
            if let Err(e) = self.tune(&fd) {
                ucs::warn_limited!("tcp: cannot set up the connection from {addr}: {e}");
                continue;
            }
            let gen = self.gen();
            let entry = self.conns.vacant_entry();
            let token = ev_token(KIND_CONN, gen, entry.key());
            if let Err(e) = self.sh.epoll.add(fd.as_raw_fd(), EV_IN, token) {
                ucs::warn_limited!("tcp: epoll_ctl for the connection from {addr} failed: {e}");
                continue;
            }
            log::debug!("tcp: accepted a connection from {addr}");
            entry.insert(Conn {
                fd,
                gen,
                token,
                interest: EV_IN,
                rx: RxBuf::new(self.rx_cap),
                tx: TxQueue::new(),
                addr,
                peer: None,
                side: Side::Acceptor,
                hello: false,
                peer_sends: false,
                rma: VecDeque::new(),
                rma_seq: 0,
                get_inflight: 0,
                waiters: VecDeque::new(),
                direct: None,
                put_streak: false,
                unanswered_since: None,
            });
        }
    }

    /// Handles readiness `revents` of connection `ci`; returns the messages delivered.
    fn service(&mut self, ci: usize, revents: u32, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        let ctx = Ctx {
            md: &self.md,
            limits: &self.limits,
            seg: self.seg,
        };
        let Some(c) = self.conns.get_mut(ci) else {
            return 0;
        };
        let mut r = Ok(None);
        if revents & (EV_OUT | EV_ERR) != 0 {
            r = c.send(&mut self.sh).map(|()| None);
        }
        if r.is_ok() && revents & (EV_IN | EV_ERR) != 0 {
            r = c.read(h, &ctx, &mut self.sh, &mut n);
            if r.is_ok() && !c.tx.is_empty() {
                // Answers, and gets the answers let through.
                r = c.send(&mut self.sh).map(|()| r.unwrap_or(None));
            }
        }
        match r {
            Ok(Some(id)) => self.hello_from(ci, id),
            Ok(None) => {}
            Err(why) => {
                self.close(ci, why);
            }
        }
        n
    }

    /// An accepted connection named its interface.
    fn hello_from(&mut self, ci: usize, id: IfaceId) {
        log::debug!("tcp: connection {ci} is from interface {id:?}");
        self.peers.entry(id).or_default().acc = Some(ci);
    }

    #[cold]
    #[inline(never)]
    fn dispatch_pending(&mut self, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        for (i, e) in self.eps.iter_mut() {
            if e.pending.is_empty() {
                continue;
            }
            let ready = e.failed.is_some()
                || !e.committed
                || self.conns.get(e.conn).is_some_and(Conn::sendable);
            if !ready {
                continue;
            }
            self.sh.pending_total -= e.pending.len();
            while let Some(t) = e.pending.pop_front() {
                h.pending(EpId(i as u32), t);
                n += 1;
            }
        }
        n
    }

    #[cold]
    #[inline(never)]
    fn report(&mut self, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        while let Some(ev) = self.sh.events.pop_front() {
            match ev {
                Event::Completion(c, st) => h.completion(c, st),
                Event::EpError(ep, st) => h.ep_error(ep, st),
            }
            n += 1;
        }
        n
    }

    /// Polls the epoll set and services what it reports.
    fn poll_all(&mut self, h: &mut dyn Handler) -> usize {
        let mut n = 0;
        let cnt = match self.sh.epoll.wait(&mut self.evs, 0) {
            Ok(c) => c,
            Err(e) => {
                if EPOLL_LOG.allow() {
                    log::error!("tcp: epoll_wait failed: {e}");
                }
                0
            }
        };
        for i in 0..cnt {
            let ev = self.evs[i];
            let (revents, data) = (ev.events, ev.u64);
            if data >> 62 != KIND_CONN {
                self.accept_all();
                continue;
            }
            let ci = (data & 0xffff_ffff) as usize;
            let gen = ((data >> 32) as u32) & GEN_MASK;
            if self.conns.get(ci).is_some_and(|c| c.gen == gen) {
                let k = self.service(ci, revents, h);
                if k > 0 {
                    self.hot = Some(ci);
                }
                n += k;
            }
        }
        n
    }

    /// Queues the header and body pieces of one put fragment per `seg` bytes.
    ///
    /// # Safety
    /// The iov entries satisfy `put_zcopy`'s contract.
    unsafe fn queue_put(
        tx: &mut TxQueue,
        seg: usize,
        req: u32,
        iov: &[Iov],
        total: usize,
        addr: u64,
        key: u64,
    ) -> usize {
        let nfrag = total.div_ceil(seg).max(1);
        let (mut idx, mut off) = (0usize, 0usize);
        for k in 0..nfrag {
            let flen = frag_len(total, seg, k);
            let hl = HDR_LEN + wire::PUT_HDR_LEN;
            wire::put_req(tx.reserve(hl), req, key, addr + (k * seg) as u64, flen);
            tx.commit(hl);
            let mut left = flen;
            while left > 0 && idx < iov.len() {
                let v = iov[idx];
                let take = (v.length - off).min(left);
                let piece = Iov {
                    buffer: v.buffer.wrapping_add(off),
                    length: take,
                };
                // SAFETY: a sub-range of a caller's iov entry, valid until the put completes
                // (after every fragment has been answered, so after it was sent).
                unsafe { tx.push_borrowed(piece) };
                left -= take;
                off += take;
                if off == v.length {
                    idx += 1;
                    off = 0;
                }
            }
        }
        nfrag
    }

    fn check_rma(iov: &[Iov], remote_addr: u64, rkey: &RemoteKey) -> UcsResult<usize> {
        let total = iov_total(iov);
        if iov.len() > RMA_MAX_IOV || total > RMA_MAX_ZCOPY {
            return Err(Status::InvalidParam);
        }
        rkey.check_range(remote_addr, total as u64)?;
        Ok(total)
    }
}

/// How long closing an interface may take to hand its connections over gracefully.
const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

impl Drop for TcpIface {
    /// Closes the connections the way TCP expects, so the last messages reach the peer:
    /// what is still queued is written, the write side is shut down (the peer reads the
    /// data, then the end of the stream), and what the peer still sends is read and dropped
    /// until it closes too. Closing with unread data would make the kernel reset the
    /// connection, and a reset can destroy data the peer has not read yet. Bounded by
    /// `LINGER`; a peer that never closes only delays this.
    fn drop(&mut self) {
        let deadline = std::time::Instant::now() + LINGER;
        let keys: Vec<usize> = self.conns.iter().map(|(k, _)| k).collect();
        for &k in &keys {
            let c = &mut self.conns[k];
            while !c.tx.is_empty() && std::time::Instant::now() < deadline {
                if c.send(&mut self.sh).is_err() {
                    break;
                }
                if !c.tx.is_empty() {
                    let _ = sock::poll_one(c.raw(), libc::POLLOUT, 10);
                }
            }
            sock::shutdown_write(c.raw());
        }
        let mut scratch = vec![0u8; 64 * 1024];
        for &k in &keys {
            let fd = self.conns[k].raw();
            while std::time::Instant::now() < deadline {
                match sock::recv(fd, &mut scratch) {
                    Ok(0) => break,
                    Ok(_) => continue,
                    Err(e) if e == libc::EAGAIN || e == libc::EWOULDBLOCK => {
                        let _ = sock::poll_one(fd, libc::POLLIN, 10);
                    }
                    Err(_) => break,
                }
            }
        }
    }
}

impl Iface for TcpIface {
    fn tl_name(&self) -> &str {
        "tcp"
    }
    fn device_name(&self) -> &str {
        &self.device
    }
    fn attr(&self) -> &IfaceAttr {
        &self.attr
    }
    fn md(&self) -> &dyn Md {
        &self.md
    }
    fn device_address(&self) -> &[u8] {
        &self.dev_addr
    }
    fn iface_address(&self) -> &[u8] {
        &self.iface_addr
    }
    fn is_reachable(&self, dev: &[u8], iface: &[u8]) -> bool {
        self.parse_peer(dev, iface).is_ok()
    }

    fn ep_connect(&mut self, dev: &[u8], iface: &[u8]) -> UcsResult<EpId> {
        let (addr, peer) = self.parse_peer(dev, iface)?;
        let pc = self.peers.get(&peer).copied().unwrap_or_default();
        let (conn, committed) = match (pc.committed, pc.own, pc.acc) {
            (Some(c), _, _) => (c, true),
            (None, Some(o), _) => (o, false),
            // The peer connected to us already: share its connection.
            (None, None, Some(a)) if peer != self.me => {
                self.peers.entry(peer).or_default().committed = Some(a);
                (a, true)
            }
            _ => (self.connect(addr, peer)?, false),
        };
        // The connect may have failed at once (then the endpoint starts failed).
        let failed = (!self.conns.contains(conn)).then_some(Status::Unreachable);
        let id = EpId(self.eps.insert(EpConn {
            peer,
            conn,
            committed,
            failed,
            pending: VecDeque::new(),
        }) as u32);
        if let Some(st) = failed {
            self.sh.events.push_back(Event::EpError(id, st));
        }
        Ok(id)
    }

    fn ep_destroy(&mut self, ep: EpId) {
        let Some(e) = self.eps.try_remove(ep.index()) else {
            return;
        };
        self.sh.pending_total -= e.pending.len();
        self.sh
            .events
            .retain(|ev| !matches!(ev, Event::EpError(id, _) if *id == ep));
        if e.failed.is_some() {
            return;
        }
        let Some(c) = self.conns.get_mut(e.conn) else {
            return;
        };
        // The connection stays (the peer and other endpoints may use it); this endpoint's
        // operations are canceled. Their bytes may still be on their way, so borrowed
        // buffers are copied before the caller gets them back.
        let mut any = false;
        for op in c.rma.iter_mut().filter(|op| op.ep == ep && !op.canceled) {
            op.canceled = true;
            if let Some(g) = op.get.as_mut() {
                g.iov.clear();
            }
            op.frags_total = op.frags_requested;
            self.sh
                .events
                .push_back(Event::Completion(op.comp, Status::Canceled));
            any = true;
        }
        let sh = &mut self.sh;
        c.waiters.retain(|w| {
            if w.ep != Some(ep) {
                return true;
            }
            sh.finish(w.target, Status::Canceled);
            any = true;
            false
        });
        if any {
            c.tx.own_all();
            c.pop_finished(&mut self.sh);
        }
    }

    #[inline]
    fn am_short(&mut self, ep: EpId, id: u8, header: u64, payload: &[u8]) -> UcsResult<()> {
        check_am_id(id)?;
        if payload.len() > self.attr.am.max_short {
            return Err(Status::InvalidParam);
        }
        let ci = self.ready_conn(ep)?;
        let tx = &mut self.conns[ci].tx;
        let len = 8 + payload.len();
        let b = tx.reserve(HDR_LEN + len);
        wire::put_header(b, wire::Type::Am, id, len);
        b[8..16].copy_from_slice(&header.to_le_bytes());
        b[16..].copy_from_slice(payload);
        tx.commit(HDR_LEN + len);
        self.kick(ci)
    }

    #[inline]
    fn am_bcopy(
        &mut self,
        ep: EpId,
        id: u8,
        pack: &mut dyn FnMut(&mut [u8]) -> usize,
    ) -> UcsResult<usize> {
        check_am_id(id)?;
        let seg = self.seg;
        let ci = self.ready_conn(ep)?;
        let tx = &mut self.conns[ci].tx;
        let b = tx.reserve(HDR_LEN + seg);
        let len = pack(&mut b[HDR_LEN..]).min(seg);
        wire::put_header(b, wire::Type::Am, id, len);
        tx.commit(HDR_LEN + len);
        self.kick(ci)?;
        Ok(len)
    }

    unsafe fn am_zcopy(
        &mut self,
        ep: EpId,
        id: u8,
        header: &[u8],
        iov: &[Iov],
        comp: Comp,
    ) -> UcsResult<Done> {
        check_am_id(id)?;
        let total = iov_total(iov);
        if header.len() > MAX_HDR || iov.len() > AM_MAX_IOV || total > self.seg {
            return Err(Status::InvalidParam);
        }
        let ci = self.ready_conn(ep)?;
        let c = &mut self.conns[ci];
        let hl = HDR_LEN + header.len();
        let b = c.tx.reserve(hl);
        wire::put_header(b, wire::Type::Am, id, header.len() + total);
        b[HDR_LEN..].copy_from_slice(header);
        c.tx.commit(hl);
        for v in iov {
            // SAFETY: the caller keeps the buffers valid until the operation completes: now
            // if the socket takes them, or when `comp` is reported.
            unsafe { c.tx.push_borrowed(*v) };
        }
        let (end, mark) = (c.tx.enq(), c.rma_seq);
        self.kick(ci)?;
        let c = &mut self.conns[ci];
        // Done now only if the bytes left and no earlier operation is still outstanding
        // (completions are reported in posting order).
        if c.tx.sent() >= end && c.rma.is_empty() && c.waiters.is_empty() {
            Ok(Done::Now)
        } else {
            c.waiters.push_back(Waiter {
                ep: Some(ep),
                tx_end: end,
                rma_mark: mark,
                target: Target::Comp(comp),
            });
            Ok(Done::Later)
        }
    }

    unsafe fn put_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        let total = Self::check_rma(iov, remote_addr, rkey)?;
        // The peer takes put frames as long as ours (its segment is at least ours).
        let seg = self.seg * wire::PUT_FRAME_SEGS;
        let ci = self.ready_conn(ep)?;
        let c = &mut self.conns[ci];
        let seq = c.rma_seq;
        // SAFETY: forwarded caller contract; the buffers are read until the last fragment
        // is sent, which precedes its answer and so the completion.
        let nfrag = unsafe {
            Self::queue_put(
                &mut c.tx,
                seg,
                seq as u32,
                iov,
                total,
                remote_addr,
                rkey.key,
            )
        };
        c.rma_seq += 1;
        c.rma.push_back(RmaOp {
            seq,
            ep,
            comp,
            total,
            key: rkey.key,
            addr: remote_addr,
            frags_total: nfrag,
            frags_requested: nfrag,
            frags_done: 0,
            status: Status::Ok,
            canceled: false,
            get: None,
        });
        // A failed send fails the connection and with it this operation, which is then
        // reported through the handler like every other outstanding one.
        let _ = self.kick(ci);
        Ok(Done::Later)
    }

    unsafe fn get_zcopy(
        &mut self,
        ep: EpId,
        iov: &[Iov],
        remote_addr: u64,
        rkey: &RemoteKey,
        comp: Comp,
    ) -> UcsResult<Done> {
        let total = Self::check_rma(iov, remote_addr, rkey)?;
        let seg = self.seg;
        let ci = self.ready_conn(ep)?;
        let c = &mut self.conns[ci];
        let seq = c.rma_seq;
        c.rma_seq += 1;
        c.rma.push_back(RmaOp {
            seq,
            ep,
            comp,
            total,
            key: rkey.key,
            addr: remote_addr,
            frags_total: total.div_ceil(seg).max(1),
            frags_requested: 0,
            frags_done: 0,
            status: Status::Ok,
            canceled: false,
            get: Some(GetDst {
                iov: iov.iter().copied().collect(),
                idx: 0,
                off: 0,
            }),
        });
        c.issue_gets(seg);
        // As for put_zcopy: a failure is reported through the handler.
        let _ = self.kick(ci);
        Ok(Done::Later)
    }

    fn pending_add(&mut self, ep: EpId, token: u64) -> UcsResult<()> {
        let e = self.eps.get_mut(ep.index()).ok_or(Status::InvalidParam)?;
        let ready = e.failed.is_some()
            || !e.committed
            || self.conns.get(e.conn).is_some_and(Conn::sendable);
        if ready && e.pending.is_empty() {
            return Err(Status::Busy);
        }
        e.pending.push_back(token);
        self.sh.pending_total += 1;
        Ok(())
    }

    fn pending_purge(&mut self, ep: EpId) -> Vec<u64> {
        match self.eps.get_mut(ep.index()) {
            Some(e) => {
                self.sh.pending_total -= e.pending.len();
                e.pending.drain(..).collect()
            }
            None => Vec::new(),
        }
    }

    fn ep_idle(&self, ep: EpId) -> bool {
        // What `flush` answers `Done::Now` for.
        self.eps.get(ep.index()).is_some_and(|e| {
            e.failed.is_none() && (!e.committed || self.conns.get(e.conn).is_some_and(|c| c.idle()))
        })
    }

    fn flush(&mut self, ep: Option<EpId>, comp: Comp) -> UcsResult<Done> {
        if let Some(ep) = ep {
            let e = self.eps.get(ep.index()).ok_or(Status::InvalidParam)?;
            if let Some(st) = e.failed {
                return Err(st);
            }
            if !e.committed {
                // Nothing was ever sent through it.
                return Ok(Done::Now);
            }
            let c = self.conns.get_mut(e.conn).ok_or(Status::IoError)?;
            if c.idle() {
                return Ok(Done::Now);
            }
            c.waiters.push_back(Waiter {
                ep: Some(ep),
                tx_end: c.tx.enq(),
                rma_mark: c.rma_seq,
                target: Target::Comp(comp),
            });
            return Ok(Done::Later);
        }
        let g = self.sh.groups.insert(FlushGroup {
            comp,
            remaining: 0,
            status: Status::Ok,
        });
        let mut count = 0;
        for ci in self.peers.values().filter_map(|p| p.committed) {
            let Some(c) = self.conns.get_mut(ci) else {
                continue;
            };
            if !c.idle() {
                c.waiters.push_back(Waiter {
                    ep: None,
                    tx_end: c.tx.enq(),
                    rma_mark: c.rma_seq,
                    target: Target::Group(g),
                });
                count += 1;
            }
        }
        if count == 0 {
            self.sh.groups.remove(g);
            Ok(Done::Now)
        } else {
            self.sh.groups[g].remaining = count;
            Ok(Done::Later)
        }
    }

    fn progress(&mut self, h: &mut dyn Handler) -> usize {
        self.calls = self.calls.wrapping_add(1);
        let mut n = 0;
        match self.hot {
            // The common case: one busy connection, read directly (one system call).
            Some(ci) if self.sh.out_waiting == 0 && self.calls & (FULL_POLL_EVERY - 1) != 0 => {
                n += self.service(ci, EV_IN, h);
            }
            _ => n += self.poll_all(h),
        }
        if self.sh.pending_total > 0 {
            n += self.dispatch_pending(h);
        }
        if self.calls & (SILENCE_POLL_EVERY - 1) == 0 && self.silence.is_some() {
            self.check_silence();
        }
        if !self.sh.events.is_empty() {
            n += self.report(h);
        }
        n
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.sh.epoll.as_raw_fd())
    }

    fn arm(&mut self) -> UcsResult<()> {
        if !self.sh.events.is_empty()
            || (self.sh.pending_total > 0
                && self.eps.iter().any(|(_, e)| {
                    !e.pending.is_empty()
                        && (e.failed.is_some()
                            || !e.committed
                            || self.conns.get(e.conn).is_some_and(Conn::sendable))
                }))
        {
            return Err(Status::Busy);
        }
        // Everything else is a socket event, which makes the epoll descriptor readable.
        Ok(())
    }
}

#[cfg(test)]
mod tests;
