//! Per-connection byte buffers: the send queue ([`TxQueue`]) and the receive buffer
//! ([`RxBuf`]). Both are reused for the life of the connection, so the data path allocates
//! nothing once they have grown to the working size.

use std::collections::VecDeque;
use std::fmt;
use std::os::fd::RawFd;

use crate::ep::Iov;

use super::sock;

/// Most gather entries handed to one `sendmsg` (Linux's `UIO_MAXIOV` is 1024).
const SEND_IOV: usize = 64;
/// First size of a receive buffer.
const RX_INITIAL: usize = 16 << 10;
/// Free space below which a receive buffer is compacted (or grown) before reading.
const MIN_FREE: usize = 4096;

/// One piece of the send queue: bytes we own (at the head of `TxQueue::buf`), or a caller's
/// buffer that stays valid until the bytes have left (the zero-copy contract).
#[derive(Clone, Copy, Debug)]
enum Seg {
    Owned(usize),
    Borrowed(Iov),
}

/// What is waiting to be written to one socket, in order.
///
/// Owned bytes live in `buf[head..tail]` in the order of the `Owned` segments that name
/// them. `enq` and `sent` count every byte ever queued and written, so a waiter can note
/// `enq` after posting and be complete once `sent` reaches it.
pub(super) struct TxQueue {
    buf: Vec<u8>,
    head: usize,
    tail: usize,
    segs: VecDeque<Seg>,
    queued: usize,
    /// Of `queued`, bytes in borrowed segments.
    borrowed: usize,
    enq: u64,
    sent: u64,
}

impl fmt::Debug for TxQueue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TxQueue")
            .field("segs", &self.segs.len())
            .field("queued", &self.queued)
            .field("enq", &self.enq)
            .field("sent", &self.sent)
            .finish()
    }
}

impl TxQueue {
    pub(super) fn new() -> TxQueue {
        TxQueue {
            buf: Vec::new(),
            head: 0,
            tail: 0,
            segs: VecDeque::new(),
            queued: 0,
            borrowed: 0,
            enq: 0,
            sent: 0,
        }
    }

    #[inline]
    pub(super) fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// Bytes waiting.
    #[inline]
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// Bytes waiting that we own (everything but zero-copy user buffers).
    #[inline]
    pub(super) fn owned(&self) -> usize {
        self.queued - self.borrowed
    }

    /// Bytes ever queued.
    #[inline]
    pub(super) fn enq(&self) -> u64 {
        self.enq
    }

    /// Bytes ever written to the socket.
    #[inline]
    pub(super) fn sent(&self) -> u64 {
        self.sent
    }

    /// `n` writable bytes at the tail; what is written becomes part of the queue with
    /// [`commit`](Self::commit).
    #[inline]
    pub(super) fn reserve(&mut self, n: usize) -> &mut [u8] {
        if self.head == self.tail {
            self.head = 0;
            self.tail = 0;
        }
        if self.buf.len() - self.tail < n {
            self.make_room(n);
        }
        &mut self.buf[self.tail..self.tail + n]
    }

    #[cold]
    #[inline(never)]
    fn make_room(&mut self, n: usize) {
        if self.head > 0 {
            self.buf.copy_within(self.head..self.tail, 0);
            self.tail -= self.head;
            self.head = 0;
        }
        if self.buf.len() - self.tail < n {
            let want = (self.tail + n).max(self.buf.len() * 2).max(4096);
            self.buf.resize(want, 0);
        }
    }

    /// Queues the first `n` bytes of the last [`reserve`](Self::reserve).
    #[inline]
    pub(super) fn commit(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        debug_assert!(self.tail + n <= self.buf.len());
        self.tail += n;
        match self.segs.back_mut() {
            Some(Seg::Owned(l)) => *l += n,
            _ => self.segs.push_back(Seg::Owned(n)),
        }
        self.queued += n;
        self.enq += n as u64;
    }

    /// Queues a copy of `b`.
    #[inline]
    pub(super) fn push_copy(&mut self, b: &[u8]) {
        self.reserve(b.len()).copy_from_slice(b);
        self.commit(b.len());
    }

    /// Queues a caller's buffer without copying it.
    ///
    /// # Safety
    /// `v` must describe readable memory that stays valid and unchanged until `sent()` has
    /// passed it (or the queue is cleared).
    #[inline]
    pub(super) unsafe fn push_borrowed(&mut self, v: Iov) {
        if v.length == 0 {
            return;
        }
        self.segs.push_back(Seg::Borrowed(v));
        self.queued += v.length;
        self.borrowed += v.length;
        self.enq += v.length as u64;
    }

    /// Drops everything queued (the connection is gone); borrowed buffers are forgotten.
    pub(super) fn clear(&mut self) {
        self.sent += self.queued as u64;
        self.segs.clear();
        self.queued = 0;
        self.borrowed = 0;
        self.head = 0;
        self.tail = 0;
    }

    /// Copies every borrowed buffer into the queue's own storage, so the callers may reuse
    /// them now (their operations were canceled) while the stream stays intact.
    #[cold]
    pub(super) fn own_all(&mut self) {
        if self.borrowed == 0 {
            return;
        }
        let mut buf = Vec::with_capacity(self.queued.max(self.buf.len()));
        let mut pos = self.head;
        for s in &self.segs {
            match *s {
                Seg::Owned(n) => {
                    buf.extend_from_slice(&self.buf[pos..pos + n]);
                    pos += n;
                }
                Seg::Borrowed(v) => {
                    // SAFETY: a queued borrowed segment is still valid (push_borrowed's
                    // contract holds until it is sent or the queue is cleared).
                    buf.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(v.buffer.cast_const(), v.length)
                    });
                }
            }
        }
        let n = buf.len();
        buf.resize(buf.capacity(), 0);
        self.buf = buf;
        self.head = 0;
        self.tail = n;
        self.segs.clear();
        self.segs.push_back(Seg::Owned(n));
        self.borrowed = 0;
    }

    /// Writes as much as the socket takes. `Err(errno)` for a failed socket; a full one is
    /// `Ok` with bytes left in the queue.
    #[inline]
    pub(super) fn flush(&mut self, fd: RawFd) -> Result<(), i32> {
        while let Some(&first) = self.segs.front() {
            let r = match (first, self.segs.len()) {
                // The common case, one run of owned bytes: a plain send.
                (Seg::Owned(n), 1) => {
                    sock::send(fd, &self.buf[self.head..self.head + n]).map(|k| (k, n))
                }
                _ => self.send_gather(fd),
            };
            match r {
                Ok((k, want)) => {
                    self.consume(k);
                    if k < want {
                        return Ok(());
                    }
                }
                Err(libc::EAGAIN) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn send_gather(&mut self, fd: RawFd) -> Result<(usize, usize), i32> {
        let mut iov = [libc::iovec {
            iov_base: std::ptr::null_mut(),
            iov_len: 0,
        }; SEND_IOV];
        let mut cnt = 0;
        let mut want = 0;
        let mut pos = self.head;
        for s in self.segs.iter().take(SEND_IOV) {
            let (base, len) = match *s {
                Seg::Owned(n) => {
                    let p = self.buf[pos..pos + n].as_ptr();
                    pos += n;
                    (p, n)
                }
                Seg::Borrowed(v) => (v.buffer.cast_const(), v.length),
            };
            iov[cnt] = libc::iovec {
                iov_base: base.cast_mut().cast(),
                iov_len: len,
            };
            cnt += 1;
            want += len;
        }
        // SAFETY: owned entries point into `buf` (checked slices above); borrowed ones are
        // readable per `push_borrowed`'s contract.
        unsafe { sock::sendmsg(fd, &iov[..cnt]) }.map(|k| (k, want))
    }

    /// Forgets the first `n` bytes, which the socket took.
    fn consume(&mut self, mut n: usize) {
        self.sent += n as u64;
        self.queued -= n;
        while n > 0 {
            let Some(front) = self.segs.front_mut() else {
                break;
            };
            match front {
                Seg::Owned(l) => {
                    let k = n.min(*l);
                    self.head += k;
                    *l -= k;
                    n -= k;
                    if *l == 0 {
                        self.segs.pop_front();
                    }
                }
                Seg::Borrowed(v) => {
                    let k = n.min(v.length);
                    v.buffer = v.buffer.wrapping_add(k);
                    v.length -= k;
                    self.borrowed -= k;
                    n -= k;
                    if v.length == 0 {
                        self.segs.pop_front();
                    }
                }
            }
        }
        if self.segs.is_empty() {
            self.head = 0;
            self.tail = 0;
        }
    }
}

/// Received bytes not yet decoded: `buf[start..end]`.
pub(super) struct RxBuf {
    buf: Box<[u8]>,
    cap: usize,
    pub(super) start: usize,
    pub(super) end: usize,
    /// Total length of the incomplete frame at `start` (at least a header).
    pub(super) need: usize,
}

impl fmt::Debug for RxBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RxBuf")
            .field("cap", &self.cap)
            .field("start", &self.start)
            .field("end", &self.end)
            .finish()
    }
}

impl RxBuf {
    /// A buffer that grows up to `cap` bytes (which must hold the largest frame): it starts
    /// small, so an idle connection, or one that never gets past its hello, costs little.
    pub(super) fn new(cap: usize) -> RxBuf {
        RxBuf {
            buf: Box::default(),
            cap,
            start: 0,
            end: 0,
            need: 0,
        }
    }

    /// The received bytes up to `end`; decoding starts at `start`.
    #[inline]
    pub(super) fn bytes(&self) -> &[u8] {
        &self.buf[..self.end]
    }

    /// Reads once from `fd`, at most `max` bytes. Returns the bytes read (0 = end of
    /// stream) and whether the read filled all the space it was given (so more may be
    /// waiting).
    #[inline]
    pub(super) fn fill(&mut self, fd: RawFd, max: usize) -> Result<(usize, bool), i32> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
        let free = self.buf.len() - self.end;
        // Make room for the rest of the frame being received, and for a useful batch.
        if free < self.need.saturating_sub(self.end - self.start) || free < MIN_FREE {
            self.make_room();
        }
        let free = self.buf.len() - self.end;
        if free == 0 {
            // Only a frame larger than `cap` could leave no room, and the decoder refuses
            // those; never mistake an empty read for the end of the stream.
            return Err(libc::EAGAIN);
        }
        let room = free.min(max);
        let n = sock::recv(fd, &mut self.buf[self.end..self.end + room])?;
        self.end += n;
        Ok((n, n == room))
    }

    #[cold]
    #[inline(never)]
    fn make_room(&mut self) {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        let free = self.buf.len() - self.end;
        let short = free < MIN_FREE || self.buf.len() < self.need;
        if short && self.buf.len() < self.cap {
            let len = (self.buf.len() * 2)
                .max(RX_INITIAL)
                .max(self.need + MIN_FREE)
                .min(self.cap);
            let mut grown = vec![0u8; len].into_boxed_slice();
            grown[..self.end].copy_from_slice(&self.buf[..self.end]);
            self.buf = grown;
        }
    }

    /// Drops everything buffered.
    pub(super) fn clear(&mut self) {
        self.start = 0;
        self.end = 0;
        self.need = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn rx_buffer_grows_only_when_a_frame_needs_it() {
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        use std::os::fd::AsRawFd;
        let mut rx = RxBuf::new(100_000);
        b.write_all(&[1u8; 10]).unwrap();
        assert_eq!(rx.fill(a.as_raw_fd(), usize::MAX), Ok((10, false)));
        assert_eq!(rx.buf.len(), RX_INITIAL);
        // Pretend a 60 000-byte frame starts here: the buffer grows to hold it.
        rx.need = 60_000;
        b.write_all(&vec![2u8; 59_990]).unwrap();
        let mut got = 10;
        while got < 60_000 {
            got += rx.fill(a.as_raw_fd(), usize::MAX).unwrap().0;
        }
        assert!(rx.buf.len() >= 60_000 && rx.buf.len() <= 100_000);
        assert_eq!(rx.bytes()[9], 1);
        assert_eq!(rx.bytes()[10], 2);
        assert_eq!(rx.fill(a.as_raw_fd(), usize::MAX), Err(libc::EAGAIN));
    }

    #[test]
    fn tx_queue_keeps_order_across_owned_and_borrowed() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        a.set_nonblocking(true).unwrap();
        use std::os::fd::AsRawFd;
        let mut q = TxQueue::new();
        let user = b"-borrowed-".to_vec();
        q.push_copy(b"one");
        // SAFETY: `user` outlives the queue's use of it (flushed below).
        unsafe { q.push_borrowed(Iov::from_slice(&user)) };
        q.reserve(3).copy_from_slice(b"two");
        q.commit(3);
        assert_eq!(q.queued(), 16);
        q.flush(a.as_raw_fd()).unwrap();
        assert!(q.is_empty());
        assert_eq!(q.sent(), 16);
        let mut got = [0u8; 16];
        use std::io::Read;
        (&b).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"one-borrowed-two");
        // own_all keeps the bytes and their order, without the borrowed buffers.
        let mut q = TxQueue::new();
        let mut user = b"-lent-".to_vec();
        q.push_copy(b"a");
        // SAFETY: `user` is valid until own_all copies it below.
        unsafe { q.push_borrowed(Iov::from_slice(&user)) };
        q.push_copy(b"b");
        assert_eq!((q.queued(), q.owned()), (8, 2));
        q.own_all();
        user.fill(b'X');
        assert_eq!((q.queued(), q.owned()), (8, 8));
        q.flush(a.as_raw_fd()).unwrap();
        let mut got = [0u8; 8];
        (&b).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"a-lent-b");
    }
}
