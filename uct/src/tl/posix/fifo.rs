//! The lock-free multi-producer / single-consumer FIFO inside a segment.
//!
//! Layout (every field on its own cache line):
//!
//! ```text
//! 0    control: magic, fifo_size, seg_size, owner pid
//! 64   head  — producers claim cell `head` with compare-and-swap; bit 63 is ARMED
//! 128  tail  — the consumer has released every cell below `tail`
//! 192  producer slots handed out
//! 256  slots[SLOTS], 64 bytes each: a producer's pid, and the index it is claiming
//! CTL_SIZE  cells[fifo_size], seg_size bytes each:
//!        0  seq   (u64) = index + 1 once the cell at `index` is published;
//!                         CLAIMED | pid of the producer while it writes the cell
//!        8  len   (u32) bytes of data
//!        12 am id (u8)
//!        16 data
//! ```
//!
//! A producer claims index `h` only while `h - tail < fifo_size`, marks the cell with its
//! pid, writes it, and publishes it with a release store of `seq`. A producer that dies
//! between claim and publish would stall the FIFO for every other producer. So each
//! producer (up to `SLOTS` of them) takes a slot when it attaches and writes there the
//! index it is about to claim, before each compare-and-swap; with the mark in the cell,
//! that lets the consumer name every process that may be writing a stalled cell, and skip
//! the cell when all of them are dead (`claimants`). The consumer reads cell `rx`, checks
//! `seq == rx + 1` with an acquire load, hands the data over, and moves on; it releases
//! cells to the producers in batches (a store of `tail` every quarter FIFO), so in a
//! ping-pong the `tail` line does not bounce between the cores on every message. Each round
//! writes a distinct `seq`, so no cell is ever read twice.
//!
//! Wakeup: before sleeping, the consumer sets ARMED in `head` with an atomic OR and looks at
//! the count it returns: if a producer has claimed a cell it has not consumed, it does not
//! sleep. Otherwise the next producer's compare-and-swap sees ARMED, clears it, and signals
//! the eventfd after publishing. The ARMED handshake rides on the claim itself, so the send
//! path needs no extra fence.

use std::sync::atomic::{AtomicU64, Ordering};

use ucs::shm::Segment;

pub(crate) const MAGIC: u64 = 0x314d_5350_7863_7552; // "RucxPSM1"
const OFF_NSLOTS: usize = 192;
const OFF_SLOTS: usize = 256;
/// Producers that get a slot; a FIFO with more producers than this trusts only cell marks.
const SLOTS: usize = 64;
pub(crate) const CTL_SIZE: usize = OFF_SLOTS + SLOTS * 64;
pub(crate) const CELL_HDR: usize = 16;
const OFF_HEAD: usize = 64;
const OFF_TAIL: usize = 128;
/// Set in `head` by a consumer about to sleep.
const ARMED: u64 = 1 << 63;
/// Set in a cell's `seq` (with the producer's pid below) while the producer writes it; a
/// published `seq` (an index + 1) never has it.
const CLAIMED: u64 = 1 << 63;

/// Segment bytes for a FIFO of `fifo_size` cells of `seg_size` bytes.
pub(crate) fn segment_len(fifo_size: usize, seg_size: usize) -> usize {
    CTL_SIZE + fifo_size * seg_size
}

/// A FIFO in a mapped segment: owns the mapping, and derefs to its [`FifoView`].
#[derive(Debug)]
pub(crate) struct Fifo {
    seg: Segment,
    view: FifoView,
}

/// The addresses and geometry of a mapped FIFO, copied into each endpoint so the send path
/// reaches the shared lines without chasing pointers. Valid while the owning [`Fifo`] lives
/// (endpoints keep it alive through an `Arc`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct FifoView {
    base: *mut u8,
    cells: *mut u8,
    mask: u64,
    size: u64,
    seg_size: usize,
    /// `CLAIMED` and this process's pid: the mark of a cell this process is writing.
    mark: u64,
    /// This producer's slot (pid, then the index it is claiming), or null without one.
    slot: *mut u8,
}

// SAFETY: shared fields are accessed only through atomics; cell payloads are written by
// the producer that claimed them and read by the single consumer after the seq handshake.
unsafe impl Send for FifoView {}
// SAFETY: as above.
unsafe impl Sync for FifoView {}

impl std::ops::Deref for Fifo {
    type Target = FifoView;
    fn deref(&self) -> &FifoView {
        &self.view
    }
}

/// Why a mapped segment is not a FIFO we can use.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum BadFifo {
    Magic,
    Geometry,
    Owner,
}

impl Fifo {
    /// Initializes a fresh (zeroed) segment as an empty FIFO owned by this process.
    pub(crate) fn init(seg: Segment, fifo_size: usize, seg_size: usize) -> Fifo {
        assert!(seg.len() >= segment_len(fifo_size, seg_size));
        let base = seg.base();
        // SAFETY: the segment is at least CTL_SIZE long, page-aligned, and not yet shared.
        unsafe {
            base.add(8).cast::<u32>().write(fifo_size as u32);
            base.add(12).cast::<u32>().write(seg_size as u32);
            base.add(16).cast::<u32>().write(std::process::id());
            (*base.cast::<AtomicU64>()).store(MAGIC, Ordering::Release);
        }
        Self::wrap(seg, fifo_size, seg_size)
    }

    /// Checks a peer's mapped segment against the geometry and owner its address announced.
    pub(crate) fn open(
        seg: Segment,
        fifo_size: usize,
        seg_size: usize,
        owner: u32,
    ) -> Result<Fifo, BadFifo> {
        if seg.len() < segment_len(fifo_size, seg_size) {
            return Err(BadFifo::Geometry);
        }
        let base = seg.base();
        // SAFETY: the segment is at least CTL_SIZE long (checked), page-aligned.
        let (magic, fs, ss, pid) = unsafe {
            (
                (*base.cast::<AtomicU64>()).load(Ordering::Acquire),
                base.add(8).cast::<u32>().read_volatile(),
                base.add(12).cast::<u32>().read_volatile(),
                base.add(16).cast::<u32>().read_volatile(),
            )
        };
        if magic != MAGIC {
            return Err(BadFifo::Magic);
        }
        if fs as usize != fifo_size || ss as usize != seg_size {
            return Err(BadFifo::Geometry);
        }
        if pid != owner {
            return Err(BadFifo::Owner);
        }
        let mut f = Self::wrap(seg, fifo_size, seg_size);
        // A producer's slot: its pid, and no index claimed yet.
        let k = f.ctl_atomic64(OFF_NSLOTS).fetch_add(1, Ordering::AcqRel) as usize;
        if k < SLOTS {
            // SAFETY: slot k lies inside the control area; it is this producer's alone.
            let slot = unsafe { f.base.add(OFF_SLOTS + k * 64) };
            f.view.slot = slot;
            f.view.slot_word(1).store(u64::MAX, Ordering::Relaxed);
            f.view
                .slot_word(0)
                .store(u64::from(std::process::id()), Ordering::Release);
        }
        Ok(f)
    }

    fn wrap(seg: Segment, fifo_size: usize, seg_size: usize) -> Fifo {
        // SAFETY: CTL_SIZE is inside the segment.
        let cells = unsafe { seg.base().add(CTL_SIZE) };
        let view = FifoView {
            base: seg.base(),
            cells,
            mask: fifo_size as u64 - 1,
            size: fifo_size as u64,
            seg_size,
            mark: CLAIMED | u64::from(std::process::id()),
            slot: std::ptr::null_mut(),
        };
        Fifo { seg, view }
    }

    pub(crate) fn segment(&self) -> &Segment {
        &self.seg
    }

    /// A copy of the view; valid while `self` lives.
    pub(crate) fn view(&self) -> FifoView {
        self.view
    }
}

impl FifoView {
    #[inline]
    fn ctl_atomic64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: off is one of the 8-aligned control offsets inside the segment, which
        // outlives every view of it; the field is only ever accessed atomically.
        unsafe { &*self.base.add(off).cast::<AtomicU64>() }
    }

    /// Word `i` of this producer's slot (0: pid, 1: index being claimed).
    #[inline(always)]
    fn slot_word(&self, i: usize) -> &AtomicU64 {
        // SAFETY: called only with a slot (non-null), which lies inside the control area;
        // its words are only ever accessed atomically.
        unsafe { &*self.slot.add(i * 8).cast::<AtomicU64>() }
    }

    #[inline]
    fn cell(&self, index: u64) -> *mut u8 {
        // SAFETY: (index & mask) < fifo_size, so the cell lies inside the segment.
        unsafe { self.cells.add((index & self.mask) as usize * self.seg_size) }
    }

    #[inline]
    fn seq(&self, cell: *mut u8) -> &AtomicU64 {
        // SAFETY: cells are 64-aligned and start with the seq word; accessed atomically only.
        unsafe { &*cell.cast::<AtomicU64>() }
    }

    /// Bytes of data a cell holds.
    #[inline]
    pub(crate) fn data_cap(&self) -> usize {
        self.seg_size - CELL_HDR
    }

    /// True when a producer could claim a cell now.
    #[inline]
    pub(crate) fn has_room(&self) -> bool {
        let h = self.ctl_atomic64(OFF_HEAD).load(Ordering::Relaxed) & !ARMED;
        let t = self.ctl_atomic64(OFF_TAIL).load(Ordering::Acquire);
        h.wrapping_sub(t) & !ARMED < self.size
    }

    /// [`push_sized`](Self::push_sized) with the length unknown.
    #[cfg(test)]
    pub(crate) fn push(
        &self,
        tail_seen: &mut u64,
        am_id: u8,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Option<(usize, bool, usize)> {
        self.push_sized(tail_seen, am_id, usize::MAX, fill)
    }

    /// Producer: claims a cell, lets `fill` write at most `data_cap()` bytes of data into
    /// it (returning the length), and publishes it with `am_id`. Returns `None` when the
    /// FIFO is full; otherwise the length, whether the consumer asked to be woken, and the
    /// address of the cell the next push will most likely claim (for [`prefetch_write`]).
    ///
    /// `tail_seen` is this producer's last reading of `tail` (0 at first). `tail` only
    /// grows, so every cell below a stale reading is free as well: the shared line is read
    /// again only when the FIFO looks full by the old reading. Otherwise the first send
    /// after each batch release by the consumer would wait for that line to come over from
    /// the consumer's core.
    ///
    /// `reach` is the most data `fill` writes (`usize::MAX`: unknown). When it reaches the
    /// cell's second cache line, that line is asked for as soon as the cell is claimed: its
    /// ownership then travels while the first line is written, instead of stalling the
    /// stores that reach it (the consumer read it when the ring last came round). In a
    /// window of 64-byte MPI messages on a 16-core Xeon: 242 -> 335 MB/s
    /// (docs/benchmarks.md, stop 43).
    #[inline(always)]
    pub(crate) fn push_sized(
        &self,
        tail_seen: &mut u64,
        am_id: u8,
        reach: usize,
        fill: impl FnOnce(&mut [u8]) -> usize,
    ) -> Option<(usize, bool, usize)> {
        let head = self.ctl_atomic64(OFF_HEAD);
        let mut cur = head.load(Ordering::Relaxed);
        let h = loop {
            let h = cur & !ARMED;
            if h.wrapping_sub(*tail_seen) & !ARMED >= self.size {
                // The acquire orders the consumer's reads of the cells it released before
                // our writes into them (cells below any earlier reading were ordered by
                // that reading's acquire).
                *tail_seen = self.ctl_atomic64(OFF_TAIL).load(Ordering::Acquire);
                if h.wrapping_sub(*tail_seen) & !ARMED >= self.size {
                    return None;
                }
            }
            // The index we are about to claim, where the consumer can see it if we die
            // between the claim and our mark (ordered before the claim by its release).
            if !self.slot.is_null() {
                self.slot_word(1).store(h, Ordering::Relaxed);
            }
            // Claiming also clears ARMED: this producer then owes the consumer a signal.
            match head.compare_exchange_weak(
                cur,
                (h + 1) & !ARMED,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break h,
                Err(now) => cur = now,
            }
        };
        let wake = cur & ARMED != 0;
        let cell = self.cell(h);
        if reach > 64 - CELL_HDR {
            prefetch_write(cell as usize + 64);
        }
        // Our mark, so that if we die before publishing, the consumer knows whose the
        // stalled cell was (the line is ours to write: the data below shares it).
        self.seq(cell).store(self.mark, Ordering::Relaxed);
        // SAFETY: we own cell `h` until we publish it: the consumer released it (h - tail <
        // size at claim time, by a reading of tail no newer than the real one) and no
        // other producer can claim the same index.
        let data = unsafe { std::slice::from_raw_parts_mut(cell.add(CELL_HDR), self.data_cap()) };
        let len = fill(data).min(self.data_cap());
        // SAFETY: header word of our claimed cell (len in the low half, am id above it:
        // one store instead of two).
        unsafe {
            cell.add(8)
                .cast::<u64>()
                .write(len as u64 | u64::from(am_id) << 32)
        };
        self.seq(cell).store(h.wrapping_add(1), Ordering::Release);
        Some((len, wake, self.cell(h.wrapping_add(1)) as usize))
    }

    /// The index of the next cell a producer will claim: every cell below it has been
    /// claimed (and is published, or being written, or abandoned by a dead writer).
    pub(crate) fn claimed(&self) -> u64 {
        self.ctl_atomic64(OFF_HEAD).load(Ordering::Acquire) & !ARMED
    }

    /// Consumer: true when the cell at `index` has been published.
    #[inline(always)]
    pub(crate) fn ready(&self, index: u64) -> bool {
        self.seq(self.cell(index)).load(Ordering::Acquire) == index.wrapping_add(1)
    }

    /// Consumer: the cell at `index` if it has been published: `(am_id, data)`. The length
    /// written by the peer is checked against the cell size (`Err` when it does not fit).
    #[inline(always)]
    pub(crate) fn peek(&self, index: u64) -> Option<Result<(u8, &[u8]), u32>> {
        let cell = self.cell(index);
        if self.seq(cell).load(Ordering::Acquire) != index.wrapping_add(1) {
            return None;
        }
        // SAFETY: the cell is published (acquire above) and not released yet, so no
        // producer writes it until we store tail past it.
        let word = unsafe { cell.add(8).cast::<u64>().read() };
        let (len, id) = (word as u32, (word >> 32) as u8);
        if len as usize > self.data_cap() {
            return Some(Err(len));
        }
        if len as usize > 64 - CELL_HDR {
            // The data runs into the cell's second line, which the producer wrote and the
            // handler reads only after matching: ask for it now, so that its transfer from
            // the producer's core overlaps that work.
            prefetch_read(cell as usize + 64);
        }
        // SAFETY: len <= data_cap keeps the slice inside the cell.
        let data = unsafe { std::slice::from_raw_parts(cell.add(CELL_HDR), len as usize) };
        Some(Ok((id, data)))
    }

    /// Consumer: the processes that may be writing cell `index`, when it has been claimed
    /// in this round and is not published: the pid marked in the cell, and every slotted
    /// producer whose slot names `index` (one of them won the claim; the others lost it and
    /// will move on, unless dead). Empty when the cell is not stalled that way, or when its
    /// writer cannot be known (a producer without a slot that died before marking it).
    pub(crate) fn claimants(&self, index: u64) -> Vec<u32> {
        let head = self.ctl_atomic64(OFF_HEAD).load(Ordering::Acquire) & !ARMED;
        let claimed_past = head.wrapping_sub(index);
        if claimed_past == 0 || claimed_past > self.size {
            return Vec::new(); // not claimed in this round
        }
        let s = self.seq(self.cell(index)).load(Ordering::Acquire);
        if s == index.wrapping_add(1) {
            return Vec::new(); // published
        }
        let mut who = Vec::new();
        if s & CLAIMED != 0 {
            who.push(s as u32);
        }
        let n = self.ctl_atomic64(OFF_NSLOTS).load(Ordering::Acquire) as usize;
        if n > SLOTS {
            // Some producer has no slot: only a mark tells who writes.
            return who;
        }
        for k in 0..n {
            let base = OFF_SLOTS + k * 64;
            let pid = self.ctl_atomic64(base).load(Ordering::Acquire);
            if self.ctl_atomic64(base + 8).load(Ordering::Acquire) == index && pid != 0 {
                who.push(pid as u32);
            }
        }
        who
    }

    /// Consumer: gives up cell `index`, whose claimant died before publishing it: its mark
    /// is cleared (a later round's claimant writes its own), and the caller moves past it.
    pub(crate) fn abandon(&self, index: u64) {
        self.seq(self.cell(index))
            .store(index.wrapping_add(1), Ordering::Relaxed);
    }

    /// Consumer: releases every cell below `next` to the producers.
    #[inline]
    pub(crate) fn release(&self, next: u64) {
        self.ctl_atomic64(OFF_TAIL).store(next, Ordering::Release);
    }

    /// Consumer: asks producers to signal the eventfd, after releasing every cell below
    /// `index`. Returns false when a cell has been claimed at or after `index` (it is, or
    /// is about to be, published: do not sleep).
    pub(crate) fn arm(&self, index: u64) -> bool {
        self.release(index);
        let head = self.ctl_atomic64(OFF_HEAD);
        let before = head.fetch_or(ARMED, Ordering::AcqRel);
        if before & !ARMED != index & !ARMED {
            head.fetch_and(!ARMED, Ordering::AcqRel);
            return false;
        }
        true
    }
}

/// Asks the core for the cache line at `addr` in a state it may write (x86 `prefetchw`),
/// without waiting for it. A hint: it never faults, whatever the address, and has no
/// effect on what memory holds.
#[inline(always)]
pub(crate) fn prefetch_write(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetchw` reads no register but its operand, writes nothing, and never
    // faults, even on an unmapped address.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above for `prfm pstl1keep` (prefetch for store into L1).
    unsafe {
        std::arch::asm!("prfm pstl1keep, [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

/// Asks the core for the cache line at `addr` for reading (x86 `prefetcht0`), without
/// waiting for it. A hint, as [`prefetch_write`].
#[inline(always)]
pub(crate) fn prefetch_read(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` reads no register but its operand, writes nothing, and never
    // faults, even on an unmapped address.
    unsafe {
        std::arch::asm!("prefetcht0 [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: as above for `prfm pldl1keep` (prefetch for load into L1).
    unsafe {
        std::arch::asm!("prfm pldl1keep, [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_producer_that_dies_mid_write_leaves_its_mark() {
        let f = Fifo::init(Segment::create(segment_len(4, 256)).unwrap(), 4, 256);
        let mut tail = 0;
        // A producer that stops between claiming cell 0 and publishing it (here: its fill
        // panics).
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            f.push(&mut tail, 1, |_| panic!("killed mid-write"));
        }));
        assert!(r.is_err());
        assert!(!f.ready(0));
        assert_eq!(f.claimants(0), vec![std::process::id()]);
        // Another producer's message waits behind it, reachable once cell 0 is skipped.
        f.push(&mut tail, 2, |d| {
            d[..3].copy_from_slice(b"abc");
            3
        })
        .expect("room");
        assert!(f.peek(0).is_none());
        assert!(f.claimants(1).is_empty(), "published");
        assert!(f.claimants(2).is_empty(), "not claimed");
        assert_eq!(f.peek(1), Some(Ok((2, &b"abc"[..]))));
        f.abandon(0);
        assert!(f.claimants(0).is_empty(), "given up: its mark is cleared");
        f.release(2);
        // The next rounds go on as usual, cell 0 included.
        for i in 2..10u64 {
            f.push(&mut tail, 3, |d| {
                d[0] = i as u8;
                1
            })
            .expect("room");
            assert!(f.claimants(i).is_empty());
            assert_eq!(f.peek(i), Some(Ok((3, &[i as u8][..]))));
            f.release(i + 1);
        }
    }

    #[test]
    fn a_producer_that_dies_between_claim_and_mark_is_named_by_its_slot() {
        let seg = Segment::create(segment_len(4, 256)).unwrap();
        let pid = std::process::id();
        let consumer = Fifo::init(seg, 4, 256);
        let (fd, len) = (consumer.segment().fd(), segment_len(4, 256));
        let producer = Fifo::open(
            Segment::attach(pid as i32, fd as u32, len).unwrap(),
            4,
            256,
            pid,
        )
        .unwrap();
        assert!(!producer.slot.is_null(), "the first producer gets a slot");
        // What `push` does up to its claim, and no further: the slot names index 0, head
        // moves past it, no mark in the cell.
        producer.slot_word(1).store(0, Ordering::Relaxed);
        producer
            .ctl_atomic64(OFF_HEAD)
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Relaxed)
            .unwrap();
        assert!(!consumer.ready(0));
        assert_eq!(consumer.claimants(0), vec![pid]);
        assert!(consumer.claimants(1).is_empty(), "not claimed");
    }

    #[test]
    fn push_peek_release_wraps() {
        let seg = Segment::create(segment_len(4, 128)).unwrap();
        let f = Fifo::init(seg, 4, 128);
        let mut next = 0u64;
        let mut seen = 0;
        for round in 0..10u8 {
            for i in 0..4u8 {
                let (n, _, _) = f
                    .push(&mut seen, i, |b| {
                        b[0] = round;
                        b[1] = i;
                        2
                    })
                    .unwrap();
                assert_eq!(n, 2);
            }
            assert!(f.push(&mut seen, 9, |_| 0).is_none(), "full");
            for i in 0..4u8 {
                let (id, d) = f.peek(next).unwrap().unwrap();
                assert_eq!((id, d), (i, &[round, i][..]));
                next += 1;
                f.release(next);
            }
            assert!(f.peek(next).is_none());
        }
    }

    #[test]
    fn push_names_the_next_cell_and_its_prefetch_is_only_a_hint() {
        let f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128);
        let mut seen = 0;
        // Addresses that are not mapped, or not ours, must not fault: a hint only.
        for addr in [0, 64, usize::MAX & !63, 0x7fff_ffff_f000] {
            prefetch_write(addr);
            prefetch_read(addr);
        }
        for i in 0..6u64 {
            let (_, _, next) = f
                .push(&mut seen, 1, |b| {
                    b[0] = i as u8;
                    1
                })
                .unwrap();
            assert_eq!(next, f.cell(i + 1) as usize, "the cell after {i}, wrapping");
            prefetch_write(next);
            // Prefetching the next cell changes nothing in it or in the one just written.
            assert!(f.peek(i + 1).is_none());
            assert_eq!(f.peek(i).unwrap().unwrap(), (1, &[i as u8][..]));
            f.release(i + 1);
        }
    }

    #[test]
    fn a_message_past_the_first_line_reads_back_whole() {
        // `peek` asks for the cell's second line before handing the data over.
        let f = Fifo::init(Segment::create(segment_len(4, 256)).unwrap(), 4, 256);
        let mut seen = 0;
        for (i, len) in [48usize, 64, 200].into_iter().enumerate() {
            let i = i as u64;
            let msg: Vec<u8> = (0..len).map(|k| k as u8 ^ 0x5a).collect();
            f.push(&mut seen, 3, |b| {
                b[..len].copy_from_slice(&msg);
                len
            })
            .unwrap();
            assert_eq!(f.peek(i).unwrap().unwrap(), (3, &msg[..]));
            f.release(i + 1);
        }
    }

    #[test]
    fn producers_read_tail_only_when_the_fifo_looks_full() {
        let f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128);
        let (mut a, mut b) = (0, 0);
        for _ in 0..4 {
            assert!(f.push(&mut a, 1, |_| 0).is_some());
        }
        assert_eq!(a, 0, "no reading while the old one shows room");
        assert!(f.push(&mut a, 1, |_| 0).is_none(), "full");
        let _ = (f.peek(0), f.peek(1));
        f.release(2);
        assert!(
            f.push(&mut a, 1, |_| 0).is_some(),
            "a looks again, sees room"
        );
        assert_eq!(a, 2);
        assert!(
            f.push(&mut b, 1, |_| 0).is_some(),
            "a second producer, never read"
        );
        assert_eq!(b, 2);
        assert!(
            f.push(&mut a, 1, |_| 0).is_none(),
            "full again: a stale reading never claims an unreleased cell"
        );
        assert_eq!(f.peek(5).map(|c| c.map(|(id, _)| id)), Some(Ok(1)));
        assert!(f.peek(6).is_none());
    }

    #[test]
    fn arm_sees_waiting_cell_and_wakes_producer() {
        let f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128);
        let mut seen = 0;
        assert!(f.arm(0));
        let (_, wake, _) = f.push(&mut seen, 1, |_| 0).unwrap();
        assert!(wake);
        let (_, wake, _) = f.push(&mut seen, 1, |_| 0).unwrap();
        assert!(!wake, "only the first producer after arm signals");
        assert!(!f.arm(0), "a claimed cell is waiting");
        let _ = f.peek(0);
        let _ = f.peek(1);
        assert!(f.arm(2), "all consumed");
        let (_, wake, _) = f.push(&mut seen, 1, |_| 0).unwrap();
        assert!(wake);
    }

    #[test]
    fn attach_checks_geometry_and_owner() {
        let f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128);
        let pid = std::process::id();
        let fd = f.segment().fd() as u32;
        let len = segment_len(4, 128);
        let again = Segment::attach(pid as i32, fd, len).unwrap();
        assert!(Fifo::open(again, 4, 128, pid).is_ok());
        let again = Segment::attach(pid as i32, fd, len).unwrap();
        assert_eq!(
            Fifo::open(again, 4, 128, pid + 1).unwrap_err(),
            BadFifo::Owner
        );
        assert!(Segment::attach(pid as i32, fd, len + 64).is_err());
    }
}
