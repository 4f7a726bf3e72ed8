//! Out-of-band exchange over a TCP socket, as `ucx_perftest` does it: the server listens,
//! the client connects, and both swap length-prefixed messages (test parameters, worker or
//! interface addresses) and meet at barriers.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Largest out-of-band message accepted (addresses and parameters are small).
const MAX_MSG: usize = 1 << 20;

/// A connected out-of-band channel.
#[derive(Debug)]
pub struct Oob {
    sock: TcpStream,
}

impl Oob {
    /// Server side: waits for one client on `port` (all interfaces).
    pub fn accept(port: u16) -> io::Result<Oob> {
        let l = TcpListener::bind(("0.0.0.0", port))
            .map_err(|e| io::Error::new(e.kind(), format!("cannot listen on port {port}: {e}")))?;
        let (sock, _) = l.accept()?;
        Self::setup(sock)
    }

    /// Client side: connects to `host:port`, retrying for up to `wait` while the server
    /// starts.
    pub fn connect(host: &str, port: u16, wait: Duration) -> io::Result<Oob> {
        let addrs: Vec<_> = (host, port)
            .to_socket_addrs()
            .map_err(|e| io::Error::new(e.kind(), format!("cannot resolve {host}: {e}")))?
            .collect();
        let start = std::time::Instant::now();
        let deadline = start + wait;
        let mut told = false;
        loop {
            if !told && start.elapsed() >= Duration::from_secs(1) {
                // Not silent for the whole wait: say what is being waited for.
                told = true;
                eprintln!(
                    "rucx-perftest: nothing listening at {host}:{port} yet; retrying for {} s",
                    wait.as_secs()
                );
            }
            let mut last = None;
            for a in &addrs {
                match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                    Ok(s) => return Self::setup(s),
                    Err(e) => last = Some(e),
                }
            }
            if std::time::Instant::now() >= deadline {
                let e = last.unwrap_or_else(|| io::Error::other("no address"));
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot connect to {host}:{port}: {e}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn setup(sock: TcpStream) -> io::Result<Oob> {
        sock.set_nodelay(true)?;
        Ok(Oob { sock })
    }

    pub fn send(&mut self, msg: &[u8]) -> io::Result<()> {
        self.sock.write_all(&(msg.len() as u32).to_le_bytes())?;
        self.sock.write_all(msg)
    }

    pub fn recv(&mut self) -> io::Result<Vec<u8>> {
        let mut len = [0u8; 4];
        self.sock.read_exact(&mut len).map_err(peer_gone)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > MAX_MSG {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "out-of-band message too long",
            ));
        }
        let mut buf = vec![0u8; len];
        self.sock.read_exact(&mut buf).map_err(peer_gone)?;
        Ok(buf)
    }

    /// [`recv`](Self::recv) that gives up after `wait` (`ErrorKind::TimedOut`).
    pub fn recv_timeout(&mut self, wait: Duration) -> io::Result<Vec<u8>> {
        self.sock.set_read_timeout(Some(wait))?;
        let r = self.recv();
        self.sock.set_read_timeout(None)?;
        r.map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                io::Error::new(io::ErrorKind::TimedOut, "no answer")
            }
            _ => e,
        })
    }

    /// Both sides return once both have called it.
    pub fn barrier(&mut self) -> io::Result<()> {
        self.send(b"barrier")?;
        let m = self.recv()?;
        if m != b"barrier" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "out-of-band barrier mismatch",
            ));
        }
        Ok(())
    }

    /// Non-blocking check whether a message has started to arrive (so `recv` will not wait
    /// for the peer to send one). A closed channel is an error.
    pub fn readable(&self) -> io::Result<bool> {
        let mut b = [0u8; 1];
        self.sock.set_nonblocking(true)?;
        let r = self.sock.peek(&mut b);
        self.sock.set_nonblocking(false)?;
        match r {
            Ok(0) => Err(peer_gone(io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Non-blocking check whether the peer closed the channel (used while spinning). A
    /// peer may die with a message of its own still unread here, so this asks the kernel
    /// whether the peer hung up (`POLLRDHUP`) instead of peeking at the data.
    pub fn peer_closed(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        // nix leaves POLLRDHUP out of its flags; the kernel's value is libc's.
        let rdhup = PollFlags::from_bits_retain(nix::libc::POLLRDHUP);
        let mut fds = [PollFd::new(self.sock.as_fd(), rdhup | PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::ZERO) {
            Ok(0) => false,
            // nix reports no flags at all when one it does not know (POLLRDHUP, the only
            // such one asked for) is set.
            Ok(_) => match fds[0].revents() {
                None => true,
                Some(r) => {
                    r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
                }
            },
            Err(nix::errno::Errno::EINTR) => false,
            Err(_) => true,
        }
    }
}

fn peer_gone(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::UnexpectedEof {
        io::Error::new(e.kind(), "the peer closed the out-of-band connection")
    } else {
        e
    }
}
