//! Blocking-wait plumbing: an eventfd to signal, and a small epoll set to sleep on.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A non-blocking Linux eventfd.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd has no memory-safety preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(EventFd { fd })
    }

    /// Wraps an eventfd descriptor obtained elsewhere (for example with `pidfd_getfd`).
    pub fn from_owned(fd: OwnedFd) -> EventFd {
        EventFd { fd }
    }

    /// Adds one to the counter, waking a sleeper.
    pub fn signal(&self) -> io::Result<()> {
        signal_raw(self.fd.as_raw_fd())
    }

    /// Resets the counter; returns true if it was signalled.
    pub fn drain(&self) -> bool {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a local u64.
        let r = unsafe { libc::read(self.fd.as_raw_fd(), (&raw mut v).cast(), 8) };
        r == 8
    }
}

/// Signals the eventfd `fd` (used by senders holding a duplicate of a peer's eventfd).
pub fn signal_raw(fd: RawFd) -> io::Result<()> {
    let v: u64 = 1;
    // SAFETY: writes 8 bytes from a local u64.
    let r = unsafe { libc::write(fd, (&raw const v).cast(), 8) };
    if r == 8 {
        Ok(())
    } else {
        let e = io::Error::last_os_error();
        // A saturated counter already means "wake up".
        if e.raw_os_error() == Some(libc::EAGAIN) {
            Ok(())
        } else {
            Err(e)
        }
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An epoll instance. Event data is a caller-chosen `u64`.
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: no preconditions.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    fn ctl(&self, op: i32, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events, u64: data };
        // SAFETY: ev is a valid epoll_event for the duration of the call.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    pub fn add(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, data)
    }

    pub fn modify(&self, fd: RawFd, events: u32, data: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, data)
    }

    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout_ms` (-1 forever, 0 poll) and fills `events`; returns how many.
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> io::Result<usize> {
        let max = i32::try_from(events.len()).unwrap_or(i32::MAX);
        // SAFETY: events is a valid writable buffer of `max` entries.
        let r =
            unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(r as usize)
    }
}

impl AsRawFd for Epoll {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Blocks until `fd` is readable or `timeout_ms` passes; returns true when readable.
pub fn wait_readable(fd: RawFd, timeout_ms: i32) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: p is a valid pollfd for the call.
    let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_wakes_epoll() {
        let e = EventFd::new().unwrap();
        let ep = Epoll::new().unwrap();
        ep.add(e.as_raw_fd(), libc::EPOLLIN as u32, 7).unwrap();
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 4];
        assert_eq!(ep.wait(&mut evs, 0).unwrap(), 0);
        e.signal().unwrap();
        assert_eq!(ep.wait(&mut evs, 1000).unwrap(), 1);
        let data = evs[0].u64;
        assert_eq!(data, 7);
        assert!(e.drain());
        assert!(!e.drain());
        assert!(!wait_readable(e.as_raw_fd(), 0).unwrap());
    }
}
