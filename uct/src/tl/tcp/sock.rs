//! Thin checked wrappers over the BSD socket calls the tcp transport uses. Every call is
//! non-blocking; data-path calls return the raw `errno` so the caller can tell "would
//! block" from a failed peer without allocating an `io::Error`.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// Flags of every data-path send: never block, never raise SIGPIPE.
const SEND_FLAGS: i32 = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;

#[inline]
pub(super) fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A non-blocking, close-on-exec IPv4 stream socket.
pub(super) fn tcp_socket() -> io::Result<OwnedFd> {
    // SAFETY: socket has no memory-safety preconditions.
    let fd = unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn set_int_opt(fd: &OwnedFd, level: i32, name: i32, val: i32) -> io::Result<()> {
    // SAFETY: the option value is a live local int whose size is passed alongside.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const val).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Reads an int socket option (tests check what `set_int_opt` left).
#[cfg(test)]
pub(super) fn get_int_opt(fd: RawFd, level: i32, name: i32) -> io::Result<i32> {
    let mut val = 0i32;
    let mut len = std::mem::size_of::<i32>() as libc::socklen_t;
    // SAFETY: val and len are live locals; len holds val's size.
    let r = unsafe { libc::getsockopt(fd, level, name, (&raw mut val).cast(), &raw mut len) };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(val)
    }
}

/// What the kernel knows of a connection's state (`TCP_INFO`): the fields the dead-peer
/// check reads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct TcpState {
    /// `TCP_ESTABLISHED` (1), `TCP_SYN_SENT` (2), ...
    pub state: u8,
    /// Retransmission timeouts of the oldest unacknowledged segment in a row.
    pub retransmits: u8,
    /// Zero-window (or keepalive) probes sent and not answered.
    pub probes: u8,
    /// Segments sent and not acknowledged.
    pub unacked: u32,
    /// Bytes queued in the kernel and not sent yet (a closed window).
    pub notsent: u32,
    /// Milliseconds since the peer last acknowledged anything.
    pub last_ack_recv_ms: u32,
}

impl TcpState {
    /// The connection is up (its handshake done, neither side closed it).
    pub fn established(&self) -> bool {
        // `TCP_ESTABLISHED` of the kernel's `enum tcp_state` (libc has no Linux constant).
        self.state == 1
    }

    /// The kernel holds data for the peer, sent or not.
    pub fn outstanding(&self) -> bool {
        self.unacked > 0 || self.notsent > 0
    }

    /// Retransmissions or window probes in a row that the peer left unanswered.
    pub fn unanswered(&self) -> u8 {
        self.retransmits.max(self.probes)
    }
}

/// `getsockopt(TCP_INFO)`, the fields [`TcpState`] keeps.
pub(super) fn tcp_state(fd: RawFd) -> io::Result<TcpState> {
    // SAFETY: tcp_info is plain old data; all-zero is a valid value.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: ti and len are live locals; len holds ti's size, and the kernel writes at
    // most that many bytes (fewer on an older kernel, whose missing fields stay zero).
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut ti).cast(),
            &raw mut len,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpState {
        state: ti.tcpi_state,
        retransmits: ti.tcpi_retransmits,
        probes: ti.tcpi_probes,
        unacked: ti.tcpi_unacked,
        notsent: ti.tcpi_notsent_bytes,
        last_ack_recv_ms: ti.tcpi_last_ack_recv,
    })
}

fn to_sockaddr(addr: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: addr.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(addr.ip().octets()),
        },
        sin_zero: [0; 8],
    }
}

fn from_sockaddr(sa: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(sa.sin_addr.s_addr.to_ne_bytes()),
        u16::from_be(sa.sin_port),
    )
}

pub(super) fn bind(fd: &OwnedFd, addr: SocketAddrV4) -> io::Result<()> {
    let sa = to_sockaddr(addr);
    // SAFETY: sa is a valid sockaddr_in for the duration of the call.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const sa).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

pub(super) fn listen(fd: &OwnedFd, backlog: i32) -> io::Result<()> {
    // SAFETY: listen has no memory-safety preconditions.
    if unsafe { libc::listen(fd.as_raw_fd(), backlog) } < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The address a socket is bound to.
pub(super) fn local_addr(fd: &OwnedFd) -> io::Result<SocketAddrV4> {
    // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: sa/len describe a writable sockaddr_in buffer.
    let r = unsafe { libc::getsockname(fd.as_raw_fd(), (&raw mut sa).cast(), &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(from_sockaddr(&sa))
}

/// Starts a non-blocking connect. `Ok` also when the connection is still in progress.
pub(super) fn connect(fd: &OwnedFd, addr: SocketAddrV4) -> Result<(), i32> {
    let sa = to_sockaddr(addr);
    loop {
        // SAFETY: sa is a valid sockaddr_in for the duration of the call.
        let r = unsafe {
            libc::connect(
                fd.as_raw_fd(),
                (&raw const sa).cast(),
                std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
            )
        };
        if r == 0 {
            return Ok(());
        }
        match errno() {
            libc::EINPROGRESS => return Ok(()),
            libc::EINTR => continue,
            e => return Err(e),
        }
    }
}

/// Accepts one connection; `Ok(None)` when none is waiting.
pub(super) fn accept(fd: &OwnedFd) -> io::Result<Option<(OwnedFd, SocketAddrV4)>> {
    loop {
        // SAFETY: sockaddr_in is plain old data; all-zero is a valid value.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: sa/len describe a writable sockaddr_in buffer.
        let r = unsafe {
            libc::accept4(
                fd.as_raw_fd(),
                (&raw mut sa).cast(),
                &mut len,
                libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            )
        };
        if r >= 0 {
            // SAFETY: r is a fresh descriptor that nothing else owns.
            let conn = unsafe { OwnedFd::from_raw_fd(r) };
            return Ok(Some((conn, from_sockaddr(&sa))));
        }
        match errno() {
            libc::EAGAIN => return Ok(None),
            // The connection died before we took it; try the next.
            libc::EINTR | libc::ECONNABORTED => continue,
            _ => return Err(io::Error::last_os_error()),
        }
    }
}

/// Sends from one contiguous buffer. `Err(errno)` includes `EAGAIN`.
#[inline]
pub(super) fn send(fd: RawFd, buf: &[u8]) -> Result<usize, i32> {
    loop {
        // SAFETY: buf is a live readable slice of buf.len() bytes.
        let r = unsafe { libc::send(fd, buf.as_ptr().cast(), buf.len(), SEND_FLAGS) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Sends a gather list.
///
/// # Safety
/// Every entry of `iov` must describe readable memory.
#[inline]
pub(super) unsafe fn sendmsg(fd: RawFd, iov: &[libc::iovec]) -> Result<usize, i32> {
    // SAFETY: msghdr is plain old data; all-zero is a valid value.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_ptr().cast_mut();
    msg.msg_iovlen = iov.len() as _;
    loop {
        // SAFETY: msg points to `iov`, readable per the caller's contract; no control data.
        let r = unsafe { libc::sendmsg(fd, &msg, SEND_FLAGS) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// `recv` into `len` bytes at `ptr` (non-blocking; EINTR retried).
///
/// # Safety
/// `ptr` is writable for `len` bytes, and nothing else reads or writes them meanwhile.
pub(super) unsafe fn recv_raw(fd: RawFd, ptr: *mut u8, len: usize) -> Result<usize, i32> {
    loop {
        // SAFETY: per the contract.
        let r = unsafe { libc::recv(fd, ptr.cast(), len, libc::MSG_DONTWAIT) };
        if r >= 0 {
            return Ok(r as usize);
        }
        let e = errno();
        if e != libc::EINTR {
            return Err(e);
        }
    }
}

/// Receives into `buf`. `Ok(0)` is the end of the stream; `Err(errno)` includes `EAGAIN`.
#[inline]
pub(super) fn recv(fd: RawFd, buf: &mut [u8]) -> Result<usize, i32> {
    // SAFETY: buf is a live writable slice of buf.len() bytes, borrowed exclusively.
    unsafe { recv_raw(fd, buf.as_mut_ptr(), buf.len()) }
}

/// One up interface with an IPv4 address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Ipv4If {
    pub name: String,
    pub addr: Ipv4Addr,
}

/// Up interfaces with an IPv4 address (the first address of each), in the kernel's order.
pub(super) fn ipv4_interfaces() -> io::Result<Vec<Ipv4If>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: head is a valid out-pointer; freed below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut head) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out: Vec<Ipv4If> = Vec::new();
    let mut cur = head;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        let up = ifa.ifa_flags & (libc::IFF_UP as u32) != 0;
        if !up || ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of at least its family field.
        let family = unsafe { (*ifa.ifa_addr).sa_family };
        if i32::from(family) != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET address is a sockaddr_in.
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        // SAFETY: ifa_name is a NUL-terminated string owned by the list.
        let name = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) }
            .to_string_lossy()
            .into_owned();
        if out.iter().any(|i| i.name == name) {
            continue;
        }
        out.push(Ipv4If {
            name,
            addr: *from_sockaddr(sin).ip(),
        });
    }
    // SAFETY: head came from getifaddrs and is freed once; no node is used afterwards.
    unsafe { libc::freeifaddrs(head) };
    Ok(out)
}

/// Shuts down the write side of a connection (the peer reads the end of the stream after
/// the data already sent). Errors are ignored: the connection is being closed anyway.
pub(super) fn shutdown_write(fd: RawFd) {
    // SAFETY: shutdown has no memory-safety preconditions.
    unsafe { libc::shutdown(fd, libc::SHUT_WR) };
}

/// Waits up to `timeout_ms` for `events` on `fd`; whether they came.
pub(super) fn poll_one(fd: RawFd, events: i16, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: `p` is one live pollfd, and we pass a count of 1.
    unsafe { libc::poll(&raw mut p, 1, timeout_ms) > 0 }
}
