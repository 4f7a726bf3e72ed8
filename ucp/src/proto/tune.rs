//! Measured choice between multi-fragment eager and zero-copy rendezvous, per endpoint.
//!
//! Between two processes on one host, which of the two moves a 16 KiB–4 MiB message
//! faster depends on the machine more than on any estimate a transport can give: eager
//! fragments are copied by the sender into shared memory and by the receiver out of it,
//! so the receiver reads lines that sit dirty in the other core's cache; a CMA get reads
//! the sender's buffer once, but pays a system call and page pinning per call. Measured
//! on two of the project's machines (docs/ucp.md): on one, 128 KiB took 2.7 µs by
//! eager and 10.3 µs by CMA; on the other, 9.6 µs by eager and 5.4 µs by CMA.
//!
//! So the endpoint measures. Sizes are grouped in power-of-two classes; in each class the
//! first sends try each protocol in a run of `RUN` timed sends, and afterwards the faster
//! one (by the best time per byte of its last few timed sends) serves the class. The
//! slower one gets a timed run again every `REPROBE` sends and the winner every `RETIME`,
//! so a change of conditions is noticed. A timed send measures one message alone: only a
//! send posted while the endpoint has nothing else in flight is timed (timing sends inside
//! a full pipeline measured nothing useful, as acknowledgements come back in bursts, and
//! holding a send back until the pipeline drains could deadlock a receiver that waits for
//! it before matching the earlier ones). Streaming follows the same decision: on both
//! machines above, the protocol that moved one message faster also streamed faster; a
//! program that only ever streams never times a send and keeps eager.
//! A rendezvous is timed from its RTS to the receiver's acknowledgement;
//! a timed eager send asks the receiver to acknowledge once the whole message is in place
//! (the synchronous-send flag), which it does with one small message after the last
//! fragment.
//!
//! While the worker's thread shares its CPU with other busy threads (`ucs::sched`), the
//! tuner neither measures nor decides: a timed send then measures whether the peer had a
//! turn, and the best of a few such samples is the one where it had a core to itself,
//! which the pattern does not. Instead, sizes go eager up to a fixed size and by
//! rendezvous above: an eager sender's blocking send completes without waiting for the
//! receiver's turn, which outweighs the second copy; where the machine runs more than two
//! busy processes per core, their FIFOs, buffers and second copies no longer fit the
//! caches and the copy each rendezvous saves is worth more. Measured on the 2-core VM with `osu`
//! (2026-11-28), eager against rendezvous:
//! - ping-pong with both ranks on one core, and multi-pair latency with 4 ranks: eager
//!   faster from 64 KiB to 1 MiB (1 MiB: 69 against 92 µs, 80 against 96 µs);
//! - multi-pair latency with 8 ranks: eager faster up to 256 KiB, slower from 512 KiB
//!   (1 MiB: 371 against 215 µs).
//!
//! This is protocol state without I/O (STYLE.md §4): the worker reads the clock and
//! hands the measurements in.

use super::select::Proto;

/// The smallest size tuned: below it one or two fragments go eagerly.
pub const MIN_TUNED: usize = 16 << 10;
/// Size classes: `[2^k, 2^(k+1))` for `k` in `FIRST_CLASS..FIRST_CLASS + CLASSES`.
const FIRST_CLASS: u32 = MIN_TUNED.trailing_zeros();
const CLASSES: usize = 9;
/// The largest size sent eagerly while the CPU is shared (see above)...
pub const SHARED_EAGER_MAX: usize = 1 << 20;
/// ... and while the machine has more than two runnable threads per CPU
/// (`ucs::sched::CpuShare::crowded`).
/// UCX 1.13 on shared memory switches its blocking sends to rendezvous at this size.
pub const CROWDED_EAGER_MAX: usize = 256 << 10;
/// Timed sends of one protocol in a probe run.
const RUN: u8 = 3;
/// Samples of each protocol before a class decides.
const PROBES: u32 = 3;
/// After deciding, the slower protocol gets a timed run once every this many sends...
const REPROBE: u32 = 512;
/// ... and the faster one once every this many.
const RETIME: u32 = 256;
/// Samples kept per protocol and class (the best of them counts).
const WINDOW: usize = 4;
/// A decided class changes protocol only when the other one is faster by this fraction:
/// where the two lie within the machine's noise of each other, a class that followed
/// every sample went back and forth, half its sends each way, and a pattern whose two
/// sides disagree was slower than either protocol (`MPI_Sendrecv` of 128 KiB: 12 µs
/// either way, 27 µs mixed).
const MARGIN: f32 = 0.1;

/// What the tuner asks the send to do. A `timed` send is measured alone (see above).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    Eager { timed: bool },
    Rndv { timed: bool },
}

/// The recent samples of one protocol in one class: nanoseconds per KiB.
#[derive(Clone, Copy, Debug, Default)]
struct Samples {
    ns_per_kib: [f32; WINDOW],
    n: u32,
}

impl Samples {
    fn record(&mut self, v: f32) {
        self.ns_per_kib[self.n as usize % WINDOW] = v;
        self.n = self.n.saturating_add(1);
    }

    fn best(&self) -> f32 {
        let k = (self.n as usize).min(WINDOW);
        self.ns_per_kib[..k]
            .iter()
            .copied()
            .fold(f32::INFINITY, f32::min)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Class {
    eager: Samples,
    rndv: Samples,
    sends: u32,
    /// A timed run in progress: the protocol (true: rendezvous) and the sends left.
    run: Option<(bool, u8)>,
    /// The protocol serving the class once decided (true: rendezvous).
    serving: Option<bool>,
}

impl Class {
    fn decided(&self) -> bool {
        self.eager.n >= PROBES && self.rndv.n >= PROBES
    }

    /// Whether rendezvous serves the class: the protocol serving it keeps it unless the
    /// other is faster by `MARGIN`.
    fn rndv_wins(&self) -> bool {
        self.serving == Some(true)
    }

    /// Re-decides after a sample: the first decision takes the faster; later ones switch
    /// only past `MARGIN`.
    fn decide(&mut self) {
        if !self.decided() {
            return;
        }
        let (e, r) = (self.eager.best(), self.rndv.best());
        self.serving = Some(match self.serving {
            None => r < e,
            Some(true) => e >= r * (1.0 - MARGIN),
            Some(false) => r < e * (1.0 - MARGIN),
        });
    }
}

/// The per-endpoint tuner.
#[derive(Clone, Debug, Default)]
pub struct Tuner {
    classes: [Class; CLASSES],
}

fn class_of(size: usize) -> Option<usize> {
    if size < MIN_TUNED {
        return None;
    }
    let k = (usize::BITS - 1 - size.leading_zeros()) - FIRST_CLASS;
    Some((k as usize).min(CLASSES - 1))
}

impl Tuner {
    /// The protocol for a send of `size` bytes (at least [`MIN_TUNED`]).
    pub fn choose(&mut self, size: usize) -> Choice {
        let Some(c) = class_of(size) else {
            return Choice::Eager { timed: false };
        };
        let cl = &mut self.classes[c];
        cl.sends = cl.sends.wrapping_add(1);
        if cl.run.is_none() {
            let start = if cl.eager.n < PROBES {
                Some(false)
            } else if cl.rndv.n < PROBES {
                Some(true)
            } else if cl.sends.is_multiple_of(REPROBE) {
                Some(!cl.rndv_wins())
            } else if cl.sends.is_multiple_of(RETIME) {
                Some(cl.rndv_wins())
            } else {
                None
            };
            cl.run = start.map(|r| (r, RUN));
        }
        match cl.run {
            Some((rndv, left)) => {
                cl.run = (left > 1).then_some((rndv, left - 1));
                if rndv {
                    Choice::Rndv { timed: true }
                } else {
                    Choice::Eager { timed: true }
                }
            }
            None if cl.rndv_wins() => Choice::Rndv { timed: false },
            None => Choice::Eager { timed: false },
        }
    }

    /// The protocol for a send of `size` bytes while the CPU is shared: eager up to
    /// `eager_max` bytes, untimed, and leaving the measurements alone.
    pub fn choose_shared(size: usize, eager_max: usize) -> Choice {
        if size <= eager_max {
            Choice::Eager { timed: false }
        } else {
            Choice::Rndv { timed: false }
        }
    }

    /// A timed send of `size` bytes by `proto` took `ns` nanoseconds, from its first
    /// message to the receiver's acknowledgement.
    pub fn record(&mut self, proto: Proto, size: usize, ns: f64) {
        let Some(c) = class_of(size) else { return };
        let v = (ns * 1024.0 / size as f64) as f32;
        match proto {
            Proto::EagerMulti | Proto::EagerBcopy | Proto::EagerZcopy => {
                self.classes[c].eager.record(v)
            }
            Proto::RndvGet | Proto::RndvPut => self.classes[c].rndv.record(v),
            Proto::EagerShort | Proto::RndvAm => return,
        }
        self.classes[c].decide();
    }

    /// One line per class that has decided, for `UCX_PROTO_INFO`: the sizes `lo..hi`
    /// (`hi` excluded), which protocol serves them, and the measured times.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, cl) in self.classes.iter().enumerate() {
            if !cl.decided() {
                continue;
            }
            let lo = MIN_TUNED << i;
            let hi = if i + 1 == CLASSES {
                "inf".to_string()
            } else {
                super::select::fmt_size(lo << 1)
            };
            out.push(format!(
                "{}..{}: {} (measured eager {:.0} ns/KiB, rendezvous {:.0} ns/KiB)",
                super::select::fmt_size(lo),
                hi,
                if cl.rndv_wins() {
                    "rendezvous"
                } else {
                    "eager"
                },
                cl.eager.best(),
                cl.rndv.best()
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `n` sends of `size` through the tuner on a machine where eager costs `eager`
    /// and rendezvous `rndv` ns per KiB; returns how many went by rendezvous and how many
    /// were timed.
    fn run(t: &mut Tuner, size: usize, n: u32, eager: f64, rndv: f64) -> (u32, u32) {
        let (mut by_rndv, mut timed) = (0, 0);
        for _ in 0..n {
            let c = t.choose(size);
            if let Choice::Rndv { .. } = c {
                by_rndv += 1;
            }
            let (proto, per_kib) = match c {
                Choice::Eager { timed: false } | Choice::Rndv { timed: false } => continue,
                Choice::Eager { timed: true } => (Proto::EagerMulti, eager),
                Choice::Rndv { timed: true } => (Proto::RndvGet, rndv),
            };
            timed += 1;
            t.record(proto, size, per_kib * size as f64 / 1024.0);
        }
        (by_rndv, timed)
    }

    #[test]
    fn a_shared_cpu_sends_by_size_alone() {
        let (e, r) = (
            Choice::Eager { timed: false },
            Choice::Rndv { timed: false },
        );
        for max in [SHARED_EAGER_MAX, CROWDED_EAGER_MAX] {
            assert_eq!(Tuner::choose_shared(MIN_TUNED, max), e);
            assert_eq!(Tuner::choose_shared(max, max), e);
            assert_eq!(Tuner::choose_shared(max + 1, max), r);
            assert_eq!(Tuner::choose_shared(64 << 20, max), r);
        }
    }

    #[test]
    fn each_protocol_is_tried_in_a_run_then_the_faster_serves() {
        let mut t = Tuner::default();
        let n = 128 << 10;
        for _ in 0..PROBES {
            assert_eq!(t.choose(n), Choice::Eager { timed: true });
            t.record(Proto::EagerMulti, n, 9600.0);
        }
        for _ in 0..PROBES {
            assert_eq!(t.choose(n), Choice::Rndv { timed: true });
            t.record(Proto::RndvGet, n, 5400.0);
        }
        // Rendezvous is faster here; the class sticks to it, untimed...
        assert_eq!(t.choose(n), Choice::Rndv { timed: false });
        assert!(t.describe()[0].starts_with("128K..256K: rendezvous"));
        // ... and another class has not decided anything yet.
        assert_eq!(t.choose(1 << 20), Choice::Eager { timed: true });
    }

    #[test]
    fn few_sends_are_timed_and_a_change_is_followed() {
        let mut t = Tuner::default();
        let size = 64 << 10;
        // Eager is faster: almost everything goes eager; few sends are timed (each one
        // costs a bandwidth loop a pipeline drain).
        let (r, timed) = run(&mut t, size, 4096, 40.0, 80.0);
        assert!(
            r <= u32::from(RUN) * (1 + 4096 / REPROBE),
            "{r} by rendezvous"
        );
        assert!(
            timed
                <= 2 * u32::from(RUN)
                    + 4096 / RETIME * u32::from(RUN)
                    + 4096 / REPROBE * u32::from(RUN),
            "{timed} timed"
        );
        // The machine changes (say the processes moved to distant cores): rendezvous is
        // now faster; after eager's next timed runs the class follows.
        let (r, _) = run(&mut t, size, 4096, 120.0, 80.0);
        assert!(r > 2500, "only {r} of 4096 by rendezvous after the change");
    }

    #[test]
    fn a_decided_class_keeps_its_protocol_within_the_margin() {
        let mut t = Tuner::default();
        let size = 32 << 10;
        // Rendezvous decides first (80 against 84 ns/KiB).
        run(&mut t, size, 64, 84.0, 80.0);
        assert_eq!(t.choose(size), Choice::Rndv { timed: false });
        // Eager now measures 5 % faster: within the margin, so every untimed send stays
        // with rendezvous (a class that followed each sample went back and forth).
        let (r, timed) = run(&mut t, size, 4096, 76.0, 80.0);
        assert!(
            4096 - r <= timed,
            "{} eager sends were not probes",
            4096 - r
        );
        // Eager 25 % faster: past the margin; the class follows.
        let (r, _) = run(&mut t, size, 4096, 60.0, 80.0);
        assert!(r < 1024, "{r} of 4096 still by rendezvous");
    }

    #[test]
    fn classes_cover_the_tuned_range() {
        assert_eq!(class_of(MIN_TUNED - 1), None);
        assert_eq!(class_of(MIN_TUNED), Some(0));
        assert_eq!(class_of(2 * MIN_TUNED - 1), Some(0));
        assert_eq!(class_of(2 * MIN_TUNED), Some(1));
        assert_eq!(class_of(usize::MAX), Some(CLASSES - 1));
        // Samples of untuned protocols or sizes are ignored.
        let mut t = Tuner::default();
        t.record(Proto::RndvAm, 1 << 20, 1.0);
        t.record(Proto::EagerMulti, 100, 1.0);
        assert_eq!(t.choose(1 << 20), Choice::Eager { timed: true });
    }
}
