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
//! The client's endpoint is created from the server's address as soon as it arrives, but
//! sends no wire-up request: the server's `accept` creates the server-side endpoint, whose
//! request names the client's endpoint and pairs exactly it (a worker with several
//! connections in flight to one server, or connected to itself, would otherwise pair
//! whichever endpoint came first). The application sees the connection request once that
//! id has arrived. Sends posted meanwhile wait in the endpoint's queue. A reject
//! (or the socket closing before a decision) fails the client endpoint with `Rejected`
//! (or `NotConnected`), reported through `poll_ep_error`. The server never blocks: sockets
//! are non-blocking and half-received hellos wait for the next progress call.
//!
//! Every socket the worker waits on (listeners, hellos being received, clients waiting for
//! the server's decision) is in the worker's epoll set (`SOCKET_EVENT`), so that a worker
//! asleep on `ucp_worker_get_efd`'s descriptor wakes for a connection request or an
//! answer, and the progress call after such a wakeup (or after `arm` found one) looks at
//! the sockets at once instead of on its usual one call in `POLL_EVERY`. A client waiting
//! for the server's address progresses this worker's own listeners meanwhile, so a client
//! and a server on one worker connect.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use ucs::{Status, UcsResult};

use super::state::{ConnRequest, Ctrl, Handshake, Worker, SOCKET_EVENT};
use super::wireup::{destroy_ep, fail_ep, new_ep, Failure};
use crate::address::WorkerAddress;
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

    /// Connects to a listening worker at `addr`. Waits (at most 10 s) for the server to
    /// answer with its worker address; the endpoint becomes usable once the server's
    /// application accepts.
    pub fn ep_connect_sockaddr(&mut self, addr: SocketAddr) -> UcsResult<EpHandle> {
        let mut s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT).map_err(|e| {
            log::warn!("ucp: connect to {addr}: {e}");
            match e.kind() {
                ErrorKind::ConnectionRefused => Status::Unreachable,
                ErrorKind::TimedOut => Status::TimedOut,
                _ => Status::IoError,
            }
        })?;
        let _ = s.set_nodelay(true);
        s.write_all(&frame(HELLO, &self.core.address))
            .map_err(|_| Status::IoError)?;
        // Exactly the reply, no further: the decision byte that follows is read later.
        let io = |e: std::io::Error| match e.kind() {
            ErrorKind::WouldBlock | ErrorKind::TimedOut => Status::TimedOut,
            ErrorKind::UnexpectedEof => Status::NotConnected,
            _ => Status::IoError,
        };
        // The server may be this very worker: serve its listeners while waiting. Exactly
        // the reply is read, no further: the decision byte that follows is read later.
        s.set_nonblocking(true).map_err(|_| Status::IoError)?;
        let deadline = std::time::Instant::now() + CONNECT_TIMEOUT;
        let mut got = Vec::new();
        let server = loop {
            match parse(&got, REPLY) {
                // The server's word for its address size is checked before allocating.
                Err(()) => return Err(Status::InvalidParam),
                Ok(Some(addr)) => break addr,
                Ok(None) => {}
            }
            let need = if got.len() < 12 {
                12 - got.len()
            } else {
                let len = u32::from_le_bytes([got[8], got[9], got[10], got[11]]) as usize;
                12 + len - got.len()
            };
            let mut chunk = [0u8; 4096];
            match s.read(&mut chunk[..need.min(4096)]) {
                Ok(0) => return Err(Status::NotConnected),
                Ok(n) => {
                    got.extend_from_slice(&chunk[..n]);
                    continue;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(io(e)),
            }
            if std::time::Instant::now() > deadline {
                return Err(Status::TimedOut);
            }
            if !self.sock.listeners.is_empty() {
                poll_listeners(self);
            }
            let _ = ucs::wakeup::wait_readable(s.as_raw_fd(), 1);
        };
        let peer = WorkerAddress::decode(&server)?;
        let Worker { ifaces, core, .. } = self;
        let idx = new_ep(ifaces, core, &peer)?;
        core.eps[idx].named_pairing = true;
        // Four bytes into a socket that has sent nothing else: they fit its buffer.
        if let Err(e) = s.write_all(&(idx as u32).to_le_bytes()) {
            destroy_unpaired(self, idx);
            return Err(io(e));
        }
        watch(self, s.as_raw_fd());
        self.sock.pending.push((idx, s));
        Ok(EpHandle(idx as u32))
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

/// Takes back a client endpoint that never reached its server.
fn destroy_unpaired(w: &mut Worker, idx: usize) {
    let Worker { ifaces, core, .. } = w;
    destroy_ep(ifaces, core, idx);
}

fn poll_pending(w: &mut Worker) {
    let Worker { sock, core, .. } = w;
    let mut i = 0;
    while i < sock.pending.len() {
        let (ep, s) = &mut sock.pending[i];
        let ep = *ep;
        let mut b = [0u8; 1];
        let verdict = match s.read(&mut b) {
            Ok(1) if b[0] == b'A' => Some(Ok(())),
            Ok(1) => Some(Err(Status::Rejected)),
            Ok(_) => Some(Err(Status::NotConnected)),
            Err(e) if e.kind() == ErrorKind::WouldBlock => None,
            Err(_) => Some(Err(Status::NotConnected)),
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
