//! Client/server connection establishment through a socket address (`ucp_listener_create`,
//! `ucp_ep_create` with `UCP_EP_PARAM_FIELD_SOCK_ADDR`, `ucp_listener_reject`).
//!
//! The socket only carries the two worker addresses; everything after that is ordinary
//! wire-up over the transports.
//!
//! ```text
//! client -> server   "RUCXCONN" len:u32 client-worker-address
//! server -> client   "RUCXACPT" len:u32 server-worker-address     (at once, on accept(2))
//! client -> server   ep:u32   the client's endpoint for this connection
//! server -> client   'A' (the application accepted) or 'R' (it rejected), then close
//! ```
//!
//! Neither side blocks. `ep_connect_sockaddr` returns an endpoint at once, its socket
//! connecting; until the server's address arrives, the endpoint's lanes reach this worker
//! (`Ep::provisional`), nothing is sent on them, and sends posted meanwhile wait in its
//! queue, their protocols ones that any lane carries (`Thresholds::before_connect`). With
//! the server's address the endpoint gets its real lanes (`wireup::rebind_ep`) and tells
//! the server its id. It sends no wire-up request: the server's `accept` creates the
//! server-side endpoint, whose request names the client's endpoint and pairs exactly it (a
//! worker with several connections in flight to one server, or connected to itself, would
//! otherwise pair whichever endpoint came first); the queued sends go then, in order. The
//! application sees the connection request once that id has arrived. A refused connect,
//! no answer within 10 s, a reject, or the socket closing before a decision fails the
//! client endpoint with `Unreachable`, `TimedOut`, `Rejected` or `NotConnected`, reported
//! through `poll_ep_error` (the C API's error handler). Half-received hellos and replies
//! wait for the next progress call.
//!
//! Every socket the worker waits on (listeners, connects under way, hellos being
//! received, clients waiting for the server's decision) is in the worker's epoll set
//! (`SOCKET_EVENT`), so that a worker asleep on `ucp_worker_get_efd`'s descriptor wakes for
//! a connection request or an answer, and the progress call after such a wakeup (or after
//! `arm` found one) looks at the sockets at once instead of on its usual one call in
//! `POLL_EVERY`. A client and a server on one worker connect through the same steps.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use ucs::{Status, UcsResult};

use super::state::{ConnRequest, Connecting, Core, Ctrl, Handshake, Worker, SOCKET_EVENT};
use super::wireup::{fail_ep, new_ep, rebind_ep, Failure};
use crate::address::WorkerAddress;
use crate::proto::select::Thresholds;
use crate::request::EpHandle;

const HELLO: &[u8; 8] = b"RUCXCONN";
const REPLY: &[u8; 8] = b"RUCXACPT";
const MAX_ADDR: usize = 64 * 1024;
/// How long a client waits for the server's address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Listeners are polled once every this many progress calls.
const POLL_EVERY: u32 = 64;

/// Reads a complete `magic len addr` message from the front of `buf`, if there.
fn parse(buf: &[u8], magic: &[u8; 8]) -> Result<Option<Vec<u8>>, ()> {
    let n = buf.len().min(8);
    if buf[..n] != magic[..n] {
        return Err(());
    }
    if buf.len() < 12 {
        return Ok(None);
    }
    let len = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]) as usize;
    if len > MAX_ADDR {
        return Err(());
    }
    if buf.len() < 12 + len {
        return Ok(None);
    }
    Ok(Some(buf[12..12 + len].to_vec()))
}

fn frame(magic: &[u8; 8], addr: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(12 + addr.len());
    v.extend_from_slice(magic);
    v.extend_from_slice(&(addr.len() as u32).to_le_bytes());
    v.extend_from_slice(addr);
    v
}

impl Worker {
    /// Listens on `addr` for clients' `ep_connect_sockaddr` (`ucp_listener_create`).
    /// Returns the bound address (port 0 picks a free port).
    pub fn listen(&mut self, addr: SocketAddr) -> UcsResult<SocketAddr> {
        let l = TcpListener::bind(addr).map_err(|e| {
            log::warn!("ucp: cannot listen on {addr}: {e}");
            Status::from_errno(e.raw_os_error().unwrap_or(libc::EINVAL))
        })?;
        l.set_nonblocking(true).map_err(|_| Status::IoError)?;
        let bound = l.local_addr().map_err(|_| Status::IoError)?;
        watch(self, l.as_raw_fd());
        self.sock.listeners.push(l);
        Ok(bound)
    }

    /// Takes the next connection request (the `conn_handler` of a UCX listener).
    pub fn poll_conn_request(&mut self) -> Option<ConnRequest> {
        poll_listeners(self);
        self.sock.requests.pop_front()
    }

    /// Accepts a connection request: creates this side's endpoint to the client.
    pub fn accept(&mut self, req: ConnRequest) -> UcsResult<EpHandle> {
        let ConnRequest {
            worker_addr,
            client_ep,
            mut stream,
            ..
        } = req;
        let peer = WorkerAddress::decode(&worker_addr)?;
        let Worker { ifaces, core, .. } = self;
        let idx = new_ep(ifaces, core, &peer)?;
        core.queue_ctrl(idx, Ctrl::WireupReq { dst: client_ep });
        let _ = stream.write_all(b"A");
        Ok(EpHandle(idx as u32))
    }

    /// Rejects a connection request (`ucp_listener_reject`): the client's endpoint fails
    /// with `Rejected`.
    pub fn reject(&mut self, req: ConnRequest) {
        let mut s = req.stream;
        let _ = s.write_all(b"R");
    }

    /// Connects to a listening worker at `addr` (`ucp_ep_create` with a socket address).
    /// Returns at once: the endpoint takes sends and receives, which wait in order until
    /// the server's address has come and its wire-up request has paired the endpoint. A
    /// server that refuses the connection, does not answer within 10 s, or rejects it fails
    /// the endpoint (`poll_ep_error`) with `Unreachable`, `TimedOut` or `Rejected`.
    pub fn ep_connect_sockaddr(&mut self, addr: SocketAddr) -> UcsResult<EpHandle> {
        let own = WorkerAddress::decode(&self.core.address)?;
        let (stream, refused) = connect_nonblocking(addr)?;
        // Until the server's address comes, the endpoint's lanes reach this worker; nothing
        // goes out on them (`Ep::provisional`).
        let Worker {
            ifaces, core, sock, ..
        } = self;
        let idx = new_ep(ifaces, core, &own)?;
        sock.conns += 1;
        let conn = sock.conns;
        let e = &mut core.eps[idx];
        e.conn = Some(conn);
        e.provisional = true;
        e.thresh = Thresholds::before_connect(core.min_am_bcopy);
        e.tuner = None;
        if let Some(status) = refused {
            log::debug!("ucp: connect to {addr}: {status}");
            fail_ep(core, idx, status, Failure::Error);
            return Ok(EpHandle(idx as u32));
        }
        let fd = stream.as_raw_fd();
        if let Err(e) = self
            .epoll
            .add(fd, (libc::EPOLLIN | libc::EPOLLOUT) as u32, SOCKET_EVENT)
        {
            log::warn!("ucp: a socket cannot wake this worker (epoll_ctl: {e})");
        }
        self.sock.connecting.push(Connecting {
            ep: idx,
            conn,
            stream,
            hello: Some(frame(HELLO, &self.core.address)),
            got: Vec::new(),
            deadline_ns: ucs::time::now_ns() + CONNECT_TIMEOUT.as_nanos() as u64,
        });
        self.sock.due = true;
        Ok(EpHandle(idx as u32))
    }
}

/// A non-blocking connect to `addr`, under way; or the status of a refusal that came at
/// once.
fn connect_nonblocking(addr: SocketAddr) -> UcsResult<(TcpStream, Option<Status>)> {
    use nix::sys::socket::{self, AddressFamily, SockFlag, SockType, SockaddrStorage};
    let family = if addr.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    let fd = socket::socket(
        family,
        SockType::Stream,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| Status::from_errno(e as i32))?;
    let refused = match socket::connect(fd.as_raw_fd(), &SockaddrStorage::from(addr)) {
        Ok(()) | Err(nix::errno::Errno::EINPROGRESS) => None,
        Err(e) => Some(connect_status(e as i32)),
    };
    let stream = TcpStream::from(fd);
    let _ = stream.set_nodelay(true);
    Ok((stream, refused))
}

/// The endpoint status for a connect that failed with `errno`.
fn connect_status(errno: i32) -> Status {
    match errno {
        libc::ECONNREFUSED | libc::ENETUNREACH | libc::EHOSTUNREACH => Status::Unreachable,
        libc::ETIMEDOUT => Status::TimedOut,
        _ => Status::IoError,
    }
}

/// Puts a socket in the worker's epoll set.
fn watch(w: &Worker, fd: RawFd) {
    if let Err(e) = w.epoll.add(fd, libc::EPOLLIN as u32, SOCKET_EVENT) {
        log::warn!("ucp: a socket cannot wake this worker (epoll_ctl: {e})");
    }
}

/// Accepts new sockets, advances handshakes, and watches clients' pending decisions.
pub(crate) fn poll_sockets(w: &mut Worker) {
    w.sock.tick = w.sock.tick.wrapping_add(1);
    if !w.sock.due && !w.sock.tick.is_multiple_of(POLL_EVERY) {
        return;
    }
    w.sock.due = false;
    poll_listeners(w);
    poll_connecting(w);
    poll_pending(w);
}

fn poll_listeners(w: &mut Worker) {
    let Worker {
        sock, epoll, core, ..
    } = w;
    for l in &sock.listeners {
        let at = l
            .local_addr()
            .unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0)));
        loop {
            match l.accept() {
                Ok((stream, client)) => {
                    if stream.set_nonblocking(true).is_ok() {
                        let _ = stream.set_nodelay(true);
                        if let Err(e) =
                            epoll.add(stream.as_raw_fd(), libc::EPOLLIN as u32, SOCKET_EVENT)
                        {
                            log::warn!("ucp: a socket cannot wake this worker (epoll_ctl: {e})");
                        }
                        sock.handshakes.push(Handshake {
                            stream,
                            client,
                            listener: at,
                            buf: Vec::new(),
                            worker_addr: None,
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    log::warn!("ucp: accept: {e}");
                    break;
                }
            }
        }
    }
    let mut i = 0;
    while i < sock.handshakes.len() {
        let h = &mut sock.handshakes[i];
        let mut chunk = [0u8; 4096];
        let read = match h.stream.read(&mut chunk) {
            Ok(0) => Err(()),
            Ok(n) => {
                h.buf.extend_from_slice(&chunk[..n]);
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => Ok(()),
            Err(_) => Err(()),
        };
        let step = read.and_then(|()| step_handshake(h, &core.address));
        match step {
            Ok(None) => i += 1,
            Err(()) => {
                ucs::warn_limited!("ucp: malformed connection request from {}", h.client);
                let h = sock.handshakes.swap_remove(i);
                let _ = epoll.delete(h.stream.as_raw_fd());
            }
            Ok(Some(client_ep)) => {
                let h = sock.handshakes.swap_remove(i);
                // Open until the application decides; its bytes are not this worker's.
                let _ = epoll.delete(h.stream.as_raw_fd());
                sock.requests.push_back(ConnRequest {
                    client: h.client,
                    listener: h.listener,
                    worker_addr: h.worker_addr.unwrap_or_default(),
                    client_ep,
                    stream: h.stream,
                });
            }
        }
    }
}

/// Advances a server-side handshake with the bytes in its buffer: answers a complete
/// hello with this worker's address, then takes the client's endpoint id. `Ok(Some(id))`
/// once the connection request is complete, `Err` for a malformed one (or a failed
/// answer).
fn step_handshake(h: &mut Handshake, own: &[u8]) -> Result<Option<u32>, ()> {
    if h.worker_addr.is_none() {
        let Some(addr) = parse(&h.buf, HELLO)? else {
            return Ok(None);
        };
        if WorkerAddress::decode(&addr).is_err() {
            return Err(());
        }
        h.stream.write_all(&frame(REPLY, own)).map_err(drop)?;
        h.buf.drain(..12 + addr.len());
        h.worker_addr = Some(addr);
    }
    match h.buf.len() {
        0..4 => Ok(None),
        4 => Ok(Some(u32::from_le_bytes([
            h.buf[0], h.buf[1], h.buf[2], h.buf[3],
        ]))),
        // The client sends nothing more before the server's decision.
        _ => Err(()),
    }
}

fn poll_pending(w: &mut Worker) {
    let Worker { sock, core, .. } = w;
    let mut i = 0;
    while i < sock.pending.len() {
        let (ep, conn, s) = &mut sock.pending[i];
        let (ep, conn) = (*ep, *conn);
        let mut b = [0u8; 1];
        let verdict = if !is_conn(core, ep, conn) {
            // Closed meanwhile: the socket goes.
            Some(Ok(()))
        } else {
            match s.read(&mut b) {
                Ok(1) if b[0] == b'A' => Some(Ok(())),
                Ok(1) => Some(Err(Status::Rejected)),
                Ok(_) => Some(Err(Status::NotConnected)),
                Err(e) if e.kind() == ErrorKind::WouldBlock => None,
                Err(_) => Some(Err(Status::NotConnected)),
            }
        };
        match verdict {
            None => i += 1,
            Some(v) => {
                sock.pending.swap_remove(i);
                if let Err(s) = v {
                    fail_ep(core, ep, s, Failure::Error);
                }
            }
        }
    }
}

/// Whether endpoint slot `ep` still holds client connection `conn`'s endpoint.
fn is_conn(core: &Core, ep: usize, conn: u64) -> bool {
    core.eps
        .get(ep)
        .is_some_and(|e| e.conn == Some(conn) && e.failed.is_none())
}

/// Advances the client connections under way: sends the hello once the socket is
/// connected, reads the server's address, gives the endpoint its lanes, and tells the
/// server which endpoint pairs its own; the connection then waits for the server's
/// decision (`poll_pending`). A failure fails the endpoint.
fn poll_connecting(w: &mut Worker) {
    let mut i = 0;
    while i < w.sock.connecting.len() {
        match step_connecting(w, i) {
            Ok(false) => i += 1,
            Ok(true) => {
                let c = w.sock.connecting.swap_remove(i);
                let _ = w.epoll.delete(c.stream.as_raw_fd());
                watch(w, c.stream.as_raw_fd());
                w.sock.pending.push((c.ep, c.conn, c.stream));
            }
            Err(status) => {
                let c = w.sock.connecting.swap_remove(i);
                if is_conn(&w.core, c.ep, c.conn) {
                    log::debug!("ucp: client connection {} failed: {status}", c.conn);
                    fail_ep(&mut w.core, c.ep, status, Failure::Error);
                }
            }
        }
    }
}

/// One step of client connection `i`: `Ok(true)` once the server's address is in and the
/// endpoint rebound, `Ok(false)` while waiting.
fn step_connecting(w: &mut Worker, i: usize) -> Result<bool, Status> {
    let Worker {
        ifaces,
        core,
        sock,
        epoll,
        ..
    } = w;
    let c = &mut sock.connecting[i];
    if !is_conn(core, c.ep, c.conn) {
        // Closed meanwhile.
        return Err(Status::Canceled);
    }
    if ucs::time::now_ns() > c.deadline_ns {
        return Err(Status::TimedOut);
    }
    if let Some(hello) = &c.hello {
        if let Ok(Some(e)) = c.stream.take_error() {
            return Err(connect_status(e.raw_os_error().unwrap_or(libc::EIO)));
        }
        if c.stream.peer_addr().is_err() {
            return Ok(false);
        }
        // Connected; the hello (a worker address) fits the empty socket buffer.
        c.stream.write_all(hello).map_err(|_| Status::IoError)?;
        c.hello = None;
        let _ = epoll.modify(c.stream.as_raw_fd(), libc::EPOLLIN as u32, SOCKET_EVENT);
    }
    // Exactly the reply, no further: the decision byte that follows is read later.
    let server = loop {
        match parse(&c.got, REPLY) {
            // The server's word for its address size is checked before allocating.
            Err(()) => return Err(Status::InvalidParam),
            Ok(Some(addr)) => break addr,
            Ok(None) => {}
        }
        let need = if c.got.len() < 12 {
            12 - c.got.len()
        } else {
            let len = u32::from_le_bytes([c.got[8], c.got[9], c.got[10], c.got[11]]) as usize;
            12 + len - c.got.len()
        };
        let mut chunk = [0u8; 4096];
        match c.stream.read(&mut chunk[..need.min(4096)]) {
            Ok(0) => return Err(Status::NotConnected),
            Ok(n) => c.got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => return Err(Status::Unreachable),
            Err(_) => return Err(Status::IoError),
        }
    };
    let peer = WorkerAddress::decode(&server)?;
    rebind_ep(ifaces, core, c.ep, &peer)?;
    // Four bytes into a socket that has sent only the hello: they fit its buffer.
    c.stream
        .write_all(&(c.ep as u32).to_le_bytes())
        .map_err(|_| Status::IoError)?;
    Ok(true)
}
