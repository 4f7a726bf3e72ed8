//! The lock-free multi-producer / single-consumer FIFO inside a segment.
//!
//! Layout (every field on its own cache line):
//!
//! ```text
//! 0    control: magic, fifo_size, seg_size, owner pid, compact size
//! 64   head  — producers claim cell `head` with compare-and-swap; bit 63 is ARMED,
//!        bit 62 COMPACT
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
//! each cell to the producers once it has handed it over (a store of `tail`). Producers
//! read `tail` only when their last reading shows the FIFO full, so in a ping-pong the
//! line stays with the consumer. (Until 2026-11-28 cells were released a quarter FIFO at a
//! time, and a window of 64 sends found the 64-cell ring full for its last few messages:
//! docs/uct.md.) Each round writes a distinct `seq`, so no cell is ever read twice.
//!
//! Wakeup: before sleeping, the consumer sets ARMED in `head` with an atomic OR and looks at
//! the count it returns: if a producer has claimed a cell it has not consumed, it does not
//! sleep. Otherwise the next producer's compare-and-swap sees ARMED, clears it, and signals
//! the eventfd after publishing. The ARMED handshake rides on the claim itself, so the send
//! path needs no extra fence.
//!
//! Two geometries: the full ring of `fifo_size` cells, and a compact one of its first
//! `compact` cells, for while the consumer's thread shares its CPU. Eight processes taking
//! turns on two cores each cycling through a 2.1 MB ring push one another's cells out of
//! the cores' caches; a ring of half that keeps them in (docs/uct.md,
//! the compact ring). Which geometry maps an index is the COMPACT bit of the `head` value that claimed
//! it: a producer reads it in the compare-and-swap that claims the cell, and the consumer
//! flips it only at a quiescent point (`Fifo::set_compact`): every claimed cell consumed
//! and released, no cell kept, `head` equal to the index it reads next. So no index is
//! mapped by one geometry and read by the other, and every cell the new geometry maps was
//! last read before the flip.

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
/// Set in `head` while the ring runs compact: the cells claimed from then on are mapped
/// onto the first `compact` cells.
const COMPACT: u64 = 1 << 62;
/// The index bits of `head`.
const INDEX: u64 = !(ARMED | COMPACT);
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
    /// The consumer's mask: that of the geometry in force for the indices it reads (on a
    /// producer's view, the full ring's; producers go by the COMPACT bit they claim with).
    mask: u64,
    /// The full ring's and the compact ring's masks (cells - 1).
    full_mask: u64,
    compact_mask: u64,
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

/// The cells of the compact ring of a FIFO of `fifo_size` cells when `wanted` are asked for:
/// a power of two, at least 1 and at most `fifo_size` (itself a power of two).
pub(crate) fn compact_size(fifo_size: usize, wanted: usize) -> usize {
    let w = wanted.clamp(1, fifo_size);
    if w.is_power_of_two() {
        w
    } else {
        w.next_power_of_two() / 2
    }
}

impl Fifo {
    /// Initializes a fresh (zeroed) segment as an empty FIFO owned by this process, in its
    /// full geometry; `compact` cells (see [`compact_size`]) make its compact one.
    pub(crate) fn init(seg: Segment, fifo_size: usize, seg_size: usize, compact: usize) -> Fifo {
        assert!(seg.len() >= segment_len(fifo_size, seg_size));
        let compact = compact_size(fifo_size, compact);
        let base = seg.base();
        // SAFETY: the segment is at least CTL_SIZE long, page-aligned, and not yet shared.
        unsafe {
            base.add(8).cast::<u32>().write(fifo_size as u32);
            base.add(12).cast::<u32>().write(seg_size as u32);
            base.add(16).cast::<u32>().write(std::process::id());
            base.add(20).cast::<u32>().write(compact as u32);
            (*base.cast::<AtomicU64>()).store(MAGIC, Ordering::Release);
        }
        Self::wrap(seg, fifo_size, seg_size, compact)
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
        let (magic, fs, ss, pid, compact) = unsafe {
            (
                (*base.cast::<AtomicU64>()).load(Ordering::Acquire),
                base.add(8).cast::<u32>().read_volatile(),
                base.add(12).cast::<u32>().read_volatile(),
                base.add(16).cast::<u32>().read_volatile(),
                base.add(20).cast::<u32>().read_volatile() as usize,
            )
        };
        if magic != MAGIC {
            return Err(BadFifo::Magic);
        }
        if fs as usize != fifo_size
            || ss as usize != seg_size
            || compact_size(fifo_size, compact) != compact
        {
            return Err(BadFifo::Geometry);
        }
        if pid != owner {
            return Err(BadFifo::Owner);
        }
        let mut f = Self::wrap(seg, fifo_size, seg_size, compact);
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

    fn wrap(seg: Segment, fifo_size: usize, seg_size: usize, compact: usize) -> Fifo {
        // SAFETY: CTL_SIZE is inside the segment.
        let cells = unsafe { seg.base().add(CTL_SIZE) };
        let view = FifoView {
            base: seg.base(),
            cells,
            mask: fifo_size as u64 - 1,
            full_mask: fifo_size as u64 - 1,
            compact_mask: compact as u64 - 1,
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

    /// Consumer: switches the ring to its compact geometry (`on`) or back to the full one,
    /// from `index`, the next cell it reads, on: the caller has consumed every cell below
    /// `index` and keeps none. Each cell below `index` is released first. The switch
    /// happens only when no producer has claimed a cell at or after `index` (the flip of
    /// COMPACT is a compare-and-swap on that `head`, so a producer's claim either comes
    /// before it and stops the switch, or after it and sees the new geometry). Returns
    /// whether the ring is now in the geometry asked for.
    pub(crate) fn set_compact(&mut self, index: u64, on: bool) -> bool {
        let head = self.ctl_atomic64(OFF_HEAD);
        let cur = head.load(Ordering::Acquire);
        if (cur & COMPACT != 0) == on {
            return true;
        }
        if cur & INDEX != index & INDEX {
            return false;
        }
        // Producers check their claims against `tail` in the new geometry; every cell
        // below `index` is read, so all of them may be written again.
        self.release(index);
        if head
            .compare_exchange(cur, cur ^ COMPACT, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        self.view.mask = if on {
            self.view.compact_mask
        } else {
            self.view.full_mask
        };
        true
    }

    /// Consumer: whether the ring runs in its compact geometry (only the consumer flips
    /// the bit, so its own reading is current). Read from `head`, not from the mask: the
    /// two masks are equal when the compact ring is as large as the full one.
    pub(crate) fn compact(&self) -> bool {
        self.ctl_atomic64(OFF_HEAD).load(Ordering::Relaxed) & COMPACT != 0
    }

    /// Cells in the geometry in force for the consumer.
    #[cfg(test)]
    pub(crate) fn cells_in_use(&self) -> u64 {
        self.view.mask + 1
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

    /// The consumer's cell for `index`.
    #[inline]
    fn cell(&self, index: u64) -> *mut u8 {
        self.cell_in(index, self.mask)
    }

    /// The cell for `index` in the geometry of `mask` (the full or the compact one).
    #[inline(always)]
    fn cell_in(&self, index: u64, mask: u64) -> *mut u8 {
        // SAFETY: mask is full_mask or compact_mask, both below fifo_size, so
        // (index & mask) < fifo_size and the cell lies inside the segment.
        unsafe { self.cells.add((index & mask) as usize * self.seg_size) }
    }

    /// A producer's mask for the cells claimed from the `head` value `head`.
    #[inline(always)]
    fn mask_of(&self, head: u64) -> u64 {
        if head & COMPACT != 0 {
            self.compact_mask
        } else {
            self.full_mask
        }
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
        let cur = self.ctl_atomic64(OFF_HEAD).load(Ordering::Relaxed);
        let t = self.ctl_atomic64(OFF_TAIL).load(Ordering::Acquire);
        (cur & INDEX).wrapping_sub(t) & INDEX <= self.mask_of(cur)
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
    /// again only when the FIFO looks full by the old reading. Otherwise a send would often
    /// wait for that line to come over from the consumer's core, which writes it on every
    /// message it reads.
    ///
    /// `reach` is the most data `fill` writes (`usize::MAX`: unknown). When it reaches the
    /// cell's second cache line, that line is asked for as soon as the cell is claimed: its
    /// ownership then travels while the first line is written, instead of stalling the
    /// stores that reach it (the consumer read it when the ring last came round). In a
    /// window of 64-byte MPI messages on a 16-core Xeon: 242 -> 335 MB/s
    /// (2026-11-27).
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
        let (h, mask) = loop {
            let h = cur & INDEX;
            // The geometry of this claim: the one `head` names when the claim succeeds.
            let mask = self.mask_of(cur);
            if h.wrapping_sub(*tail_seen) & INDEX > mask {
                // The acquire orders the consumer's reads of the cells it released before
                // our writes into them (cells below any earlier reading were ordered by
                // that reading's acquire).
                *tail_seen = self.ctl_atomic64(OFF_TAIL).load(Ordering::Acquire);
                if h.wrapping_sub(*tail_seen) & INDEX > mask {
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
                (h + 1) & INDEX | cur & COMPACT,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => break (h, mask),
                Err(now) => cur = now,
            }
        };
        let wake = cur & ARMED != 0;
        let cell = self.cell_in(h, mask);
        if reach > 64 - CELL_HDR {
            prefetch_write(cell as usize + 64);
        }
        // Our mark, so that if we die before publishing, the consumer knows whose the
        // stalled cell was (the line is ours to write: the data below shares it).
        self.seq(cell).store(self.mark, Ordering::Relaxed);
        // SAFETY: we own cell `h` until we publish it: the consumer released it (h - tail <
        // size at claim time, by a reading of tail no newer than the real one, in the
        // geometry the claim named; the consumer switches geometry only with every cell
        // released) and no other producer can claim the same index.
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
        Some((len, wake, self.cell_in(h.wrapping_add(1), mask) as usize))
    }

    /// The index of the next cell a producer will claim: every cell below it has been
    /// claimed (and is published, or being written, or abandoned by a dead writer).
    pub(crate) fn claimed(&self) -> u64 {
        self.ctl_atomic64(OFF_HEAD).load(Ordering::Acquire) & INDEX
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
        let head = self.ctl_atomic64(OFF_HEAD).load(Ordering::Acquire) & INDEX;
        let claimed_past = head.wrapping_sub(index) & INDEX;
        if claimed_past == 0 || claimed_past > self.mask + 1 {
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
        if before & INDEX != index & INDEX {
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
        let f = Fifo::init(Segment::create(segment_len(4, 256)).unwrap(), 4, 256, 4);
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
        let consumer = Fifo::init(seg, 4, 256, 4);
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
        let f = Fifo::init(seg, 4, 128, 4);
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
        let f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128, 4);
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
        let f = Fifo::init(Segment::create(segment_len(4, 256)).unwrap(), 4, 256, 4);
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
        let f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128, 4);
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
        let f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128, 4);
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
    fn the_compact_ring_is_a_power_of_two_within_the_full_one() {
        assert_eq!(compact_size(64, 16), 16);
        assert_eq!(compact_size(64, 24), 16);
        assert_eq!(compact_size(64, 1000), 64);
        assert_eq!(compact_size(64, 0), 1);
        assert_eq!(compact_size(4, 16), 4);
        assert_eq!(compact_size(2, 1), 1);
    }

    fn fill_with(v: u8) -> impl FnOnce(&mut [u8]) -> usize {
        move |d| {
            d[0] = v;
            1
        }
    }

    #[test]
    fn the_ring_switches_geometry_only_at_a_quiescent_point() {
        let mut f = Fifo::init(Segment::create(segment_len(8, 128)).unwrap(), 8, 128, 2);
        let mut seen = 0;
        for i in 0..3u8 {
            f.push(&mut seen, 1, fill_with(i)).unwrap();
        }
        assert!(!f.set_compact(0, true), "cells claimed at or after 0");
        assert!(!f.set_compact(2, true), "cell 2 is claimed, not read");
        assert!(!f.compact());
        for i in 0..3u64 {
            assert_eq!(f.peek(i).unwrap().unwrap(), (1, &[i as u8][..]));
        }
        assert!(f.set_compact(3, true), "all read: the switch happens");
        assert!(f.compact() && f.cells_in_use() == 2);
        assert!(f.set_compact(3, true), "already compact");
        // Two cells now, mapped by the compact mask; the third push finds the ring full.
        let (_, _, next) = f.push(&mut seen, 2, fill_with(3)).unwrap();
        assert_eq!(next, f.cell_in(4, 1) as usize);
        assert_eq!(f.cell(3), f.cell_in(3, 1), "index 3 in cell 1");
        f.push(&mut seen, 2, fill_with(4)).unwrap();
        assert!(
            f.push(&mut seen, 2, fill_with(5)).is_none(),
            "2 cells: full"
        );
        assert!(!f.has_room());
        for i in 3..5u64 {
            assert_eq!(f.peek(i).unwrap().unwrap(), (2, &[i as u8][..]));
        }
        f.release(5);
        assert!(f.has_room());
        // A claim in the compact ring stops the switch back until it is read.
        f.push(&mut seen, 3, fill_with(5)).unwrap();
        assert!(!f.set_compact(5, false));
        assert_eq!(f.peek(5).unwrap().unwrap(), (3, &[5][..]));
        assert!(f.set_compact(6, false));
        assert!(!f.compact() && f.cells_in_use() == 8);
        // Eight cells again, all of them free.
        for i in 6..14u8 {
            f.push(&mut seen, 4, fill_with(i)).unwrap();
        }
        assert!(
            f.push(&mut seen, 4, fill_with(14)).is_none(),
            "8 cells: full"
        );
        for i in 6..14u64 {
            assert_eq!(f.peek(i).unwrap().unwrap(), (4, &[i as u8][..]));
        }
        assert_eq!(f.claimed(), 14, "the mode bit is not part of the index");
    }

    #[test]
    fn a_compact_ring_as_large_as_the_full_one_switches_once() {
        let mut f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128, 8);
        assert!(f.set_compact(0, true));
        assert!(
            f.compact(),
            "the mode is on, though the geometry is the same"
        );
        assert_eq!(f.cells_in_use(), 4);
        let mut seen = 0;
        for i in 0..4u8 {
            f.push(&mut seen, 1, fill_with(i)).unwrap();
        }
        assert!(
            f.push(&mut seen, 1, fill_with(4)).is_none(),
            "4 cells: full"
        );
        for i in 0..4u64 {
            assert_eq!(f.peek(i).unwrap().unwrap(), (1, &[i as u8][..]));
        }
        assert!(f.set_compact(4, false));
        assert!(!f.compact());
    }

    #[test]
    fn a_switch_keeps_the_sleeping_consumers_wakeup() {
        let mut f = Fifo::init(Segment::create(segment_len(8, 128)).unwrap(), 8, 128, 2);
        let mut seen = 0;
        assert!(f.arm(0));
        assert!(f.set_compact(0, true), "an armed, empty ring switches");
        let (_, wake, _) = f.push(&mut seen, 1, fill_with(0)).unwrap();
        assert!(wake, "ARMED survived the switch");
        let (_, wake, _) = f.push(&mut seen, 1, fill_with(1)).unwrap();
        assert!(!wake);
        assert!(!f.arm(0), "cells wait");
        let _ = (f.peek(0), f.peek(1));
        assert!(f.arm(2));
        assert!(f.compact(), "arming keeps the geometry");
        let (_, wake, _) = f.push(&mut seen, 1, fill_with(2)).unwrap();
        assert!(wake);
        assert_eq!(f.peek(2).unwrap().unwrap(), (1, &[2][..]));
        assert_eq!(f.claimants(2), Vec::<u32>::new(), "published");
    }

    #[test]
    fn producers_see_the_compact_size_the_consumer_chose() {
        let pid = std::process::id();
        let len = segment_len(8, 128);
        let consumer = Fifo::init(Segment::create(len).unwrap(), 8, 128, 2);
        let fd = consumer.segment().fd() as u32;
        let p = Fifo::open(Segment::attach(pid as i32, fd, len).unwrap(), 8, 128, pid).unwrap();
        assert_eq!(p.compact_mask, 1);
        // A header naming a compact ring that is not a power of two within the full one
        // is not a FIFO we can use.
        // SAFETY: the test owns the segment and nothing else uses it now.
        unsafe { consumer.base.add(20).cast::<u32>().write(3) };
        let bad = Fifo::open(Segment::attach(pid as i32, fd, len).unwrap(), 8, 128, pid);
        assert_eq!(bad.unwrap_err(), BadFifo::Geometry);
    }

    /// Producers on threads push numbered messages while the consumer flips the geometry
    /// whenever it finds the ring empty: every message arrives once, in each producer's
    /// order, and the ring switched while producers still had messages to send.
    #[test]
    fn geometry_switches_under_concurrent_producers_lose_nothing() {
        const PRODUCERS: usize = 2;
        const EACH: u32 = 3000;
        let pid = std::process::id();
        let len = segment_len(16, 128);
        let mut consumer = Fifo::init(Segment::create(len).unwrap(), 16, 128, 4);
        let fd = consumer.segment().fd() as u32;
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|k| {
                let f = Fifo::open(Segment::attach(pid as i32, fd, len).unwrap(), 16, 128, pid)
                    .unwrap();
                std::thread::spawn(move || {
                    let mut seen = 0;
                    for n in 0..EACH {
                        while f
                            .push(&mut seen, k as u8, |d| {
                                d[..4].copy_from_slice(&n.to_le_bytes());
                                4
                            })
                            .is_none()
                        {
                            std::hint::spin_loop();
                        }
                        if n % 16 == 15 {
                            std::thread::sleep(std::time::Duration::from_micros(100));
                        }
                    }
                })
            })
            .collect();
        let mut next = [0u32; PRODUCERS];
        let (mut rx, mut switches_midway, mut compact) = (0u64, 0, false);
        while next.iter().any(|&n| n < EACH) {
            match consumer.peek(rx) {
                Some(Ok((k, d))) => {
                    let n = u32::from_le_bytes(d.try_into().unwrap());
                    assert_eq!(n, next[k as usize], "producer {k}'s order");
                    next[k as usize] += 1;
                    rx += 1;
                    if rx % 2 == 0 {
                        consumer.release(rx);
                    }
                }
                Some(Err(len)) => panic!("bad length {len}"),
                None => {
                    if consumer.set_compact(rx, !compact) {
                        compact = !compact;
                        switches_midway += 1;
                    }
                }
            }
        }
        for p in producers {
            p.join().unwrap();
        }
        assert!(consumer.peek(rx).is_none(), "nothing more");
        assert!(switches_midway > 0, "the ring never switched while in use");
    }

    #[test]
    fn attach_checks_geometry_and_owner() {
        let f = Fifo::init(Segment::create(segment_len(4, 128)).unwrap(), 4, 128, 4);
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
