//! Shared-memory segments: the memory behind the posix transport's FIFOs, and the memory
//! `ucp` allocates for remote access (`ucp_mem_map` with `ALLOCATE`, worker windows), which
//! same-host peers map and access with loads and stores; attaching to a peer's.
//!
//! A segment is created in `/dev/shm` under a random 128-bit name with `O_EXCL` and mode
//! 0600, and unlinked at once: it has no name while anyone uses it, so nothing is left
//! behind whichever process dies. Peers of the same user map it through the owner's
//! `/proc/<pid>/fd/<fd>` link; the owner's eventfd is duplicated with `pidfd_getfd`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A mapped segment. Unmapped on drop.
#[derive(Debug)]
pub struct Segment {
    ptr: *mut u8,
    len: usize,
    fd: OwnedFd,
}

// SAFETY: the mapping is process-wide memory; all access to shared fields goes through
// atomics or is confined to the owner's thread.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` only exposes the base pointer.
unsafe impl Sync for Segment {}

fn os_err(call: &'static str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("{call}: {e}"))
}

impl Segment {
    /// Creates, sizes, maps and unlinks a fresh segment of `len` bytes (zero-filled).
    pub fn create(len: usize) -> io::Result<Segment> {
        let mut rnd = [0u8; 16];
        // SAFETY: a writable buffer of its length.
        let got = unsafe { libc::getrandom(rnd.as_mut_ptr().cast(), rnd.len(), 0) };
        if got != rnd.len() as isize {
            return Err(os_err("getrandom"));
        }
        let name: String = rnd.iter().map(|b| format!("{b:02x}")).collect();
        let cname = CString::new(format!("/rucx-{name}")).expect("hex has no NUL");
        // SAFETY: cname is a valid C string.
        let fd = unsafe {
            libc::shm_open(
                cname.as_ptr(),
                libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
                0o600,
            )
        };
        if fd < 0 {
            return Err(os_err("shm_open"));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Unlink first: from here on the segment cannot outlive its users.
        // SAFETY: cname is a valid C string.
        unsafe { libc::shm_unlink(cname.as_ptr()) };
        // SAFETY: fd is a valid descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(os_err("ftruncate"));
        }
        Self::map(fd, len)
    }

    /// Maps the segment that process `pid` holds open as descriptor `fd`, which must be
    /// exactly `len` bytes long.
    pub fn attach(pid: i32, fd: u32, len: usize) -> io::Result<Segment> {
        let path = CString::new(format!("/proc/{pid}/fd/{fd}")).expect("digits have no NUL");
        // SAFETY: path is a valid C string.
        let raw = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if raw < 0 {
            return Err(os_err("open /proc/PID/fd"));
        }
        // SAFETY: raw is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: st is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is valid and st writable.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(os_err("fstat"));
        }
        if st.st_size as usize != len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "segment size mismatch",
            ));
        }
        Self::map(fd, len)
    }

    fn map(fd: OwnedFd, len: usize) -> io::Result<Segment> {
        // SAFETY: a fresh shared mapping of a descriptor we hold; no existing memory is
        // affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                // Populated up front: what `ucp_mem_map` promises for an allocation, and no
                // page faults on a FIFO's first messages.
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_err("mmap"));
        }
        Ok(Segment {
            ptr: p.cast(),
            len,
            fd,
        })
    }

    pub fn base(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        // SAFETY: ptr/len describe our own mapping, which no reference outlives (views of
        // it, such as the posix FIFOs, borrow the segment).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// Duplicates descriptor `fd` of process `pid` into this process (`pidfd_getfd`).
pub fn dup_remote_fd(pid: i32, fd: u32) -> io::Result<OwnedFd> {
    // SAFETY: raw syscalls with integer arguments.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if pidfd < 0 {
        return Err(os_err("pidfd_open"));
    }
    // SAFETY: pidfd is a fresh descriptor we own.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as RawFd) };
    // SAFETY: raw syscall with integer arguments.
    let r = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd.as_raw_fd(),
            fd as libc::c_int,
            0,
        )
    };
    if r < 0 {
        return Err(os_err("pidfd_getfd"));
    }
    // SAFETY: r is a fresh descriptor we own (pidfd_getfd sets CLOEXEC).
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}
