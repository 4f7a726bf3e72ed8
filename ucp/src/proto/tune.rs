//! Measured choice between multi-fragment eager and zero-copy rendezvous, per endpoint.
//!
//! Between two processes on one host, which of the two moves a 16 KiB–4 MiB message
//! faster depends on the machine more than on any estimate a transport can give: eager
//! fragments are copied by the sender into shared memory and by the receiver out of it,
//! so the receiver reads lines that sit dirty in the other core's cache; a CMA get reads
//! the sender's buffer once, but pays a system call and page pinning per call. Measured
//! on two of the project's machines (docs/benchmarks.md): on one, 128 KiB took 2.7 µs by
//! eager and 10.3 µs by CMA; on the other, 9.6 µs by eager and 5.4 µs by CMA.
//!
//! So the endpoint measures. Sizes are grouped in power-of-two classes; in each class the
//! first sends try each protocol twice, and afterwards the faster one (by the best time
//! per byte of its last few timed sends) serves the class, with the slower one tried
//! again once every `REPROBE` sends so a change of conditions is noticed. A rendezvous send is
//! timed from its RTS to the receiver's acknowledgement; an eager probe asks the receiver
//! to acknowledge once the whole message is in place (the synchronous-send flag), which
//! it does with one small message after the last fragment.
//!
//! This is protocol state without I/O (STYLE.md §4): the worker reads the clock and
//! hands the measurements in.

use super::select::Proto;

/// The smallest size tuned: below it one or two fragments go eagerly.
pub const MIN_TUNED: usize = 16 << 10;
/// Size classes: `[2^k, 2^(k+1))` for `k` in `FIRST_CLASS..FIRST_CLASS + CLASSES`.
const FIRST_CLASS: u32 = MIN_TUNED.trailing_zeros();
const CLASSES: usize = 9;
/// Measurements of each protocol before a class decides.
const PROBES: u32 = 2;
/// After deciding, the slower protocol is measured again once every this many sends.
const REPROBE: u32 = 128;
/// Eager sends are timed only on request (the acknowledgement is an extra message); while
/// eager serves a class, one in this many is timed, so its samples stay current.
const RETIME: u32 = 16;
/// Samples kept per protocol and class (the best of them counts).
const WINDOW: usize = 4;

/// What the tuner asks the send to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Eager; `probe`: time it (ask the receiver for an acknowledgement at completion).
    Eager { probe: bool },
    /// Zero-copy rendezvous (always timed: its acknowledgement comes anyway).
    Rndv,
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
            return Choice::Eager { probe: false };
        };
        let cl = &mut self.classes[c];
        cl.sends = cl.sends.wrapping_add(1);
        if cl.eager.n < PROBES {
            return Choice::Eager { probe: true };
        }
        if cl.rndv.n < PROBES {
            return Choice::Rndv;
        }
        let reprobe = cl.sends.is_multiple_of(REPROBE);
        if cl.eager.best() <= cl.rndv.best() {
            if reprobe {
                Choice::Rndv
            } else {
                Choice::Eager {
                    probe: cl.sends.is_multiple_of(RETIME),
                }
            }
        } else if reprobe {
            Choice::Eager { probe: true }
        } else {
            Choice::Rndv
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
            Proto::EagerShort | Proto::RndvAm => {}
        }
    }

    /// One line per class that has decided, for `UCX_PROTO_INFO`: the sizes `lo..hi`
    /// (`hi` excluded), which protocol serves them, and the measured times.
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, cl) in self.classes.iter().enumerate() {
            if cl.eager.n < PROBES || cl.rndv.n < PROBES {
                continue;
            }
            let lo = MIN_TUNED << i;
            let hi = if i + 1 == CLASSES {
                "inf".to_string()
            } else {
                super::select::fmt_size(lo << 1)
            };
            let (e, r) = (cl.eager.best(), cl.rndv.best());
            out.push(format!(
                "{}..{}: {} (measured eager {:.0} ns/KiB, rendezvous {:.0} ns/KiB)",
                super::select::fmt_size(lo),
                hi,
                if e <= r { "eager" } else { "rendezvous" },
                e,
                r
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `n` sends of `size` through the tuner with a machine where eager costs
    /// `eager` and rendezvous `rndv` ns per KiB; returns how many went by rendezvous.
    fn run(t: &mut Tuner, size: usize, n: u32, eager: f64, rndv: f64) -> u32 {
        let mut by_rndv = 0;
        for _ in 0..n {
            let (proto, per_kib) = match t.choose(size) {
                Choice::Eager { probe } => {
                    if !probe {
                        continue;
                    }
                    (Proto::EagerMulti, eager)
                }
                Choice::Rndv => {
                    by_rndv += 1;
                    (Proto::RndvGet, rndv)
                }
            };
            t.record(proto, size, per_kib * size as f64 / 1024.0);
        }
        by_rndv
    }

    #[test]
    fn each_protocol_is_tried_then_the_faster_serves() {
        let mut t = Tuner::default();
        // Two eager probes, then two rendezvous probes.
        assert_eq!(t.choose(128 << 10), Choice::Eager { probe: true });
        t.record(Proto::EagerMulti, 128 << 10, 9600.0);
        assert_eq!(t.choose(128 << 10), Choice::Eager { probe: true });
        t.record(Proto::EagerMulti, 128 << 10, 9700.0);
        assert_eq!(t.choose(128 << 10), Choice::Rndv);
        t.record(Proto::RndvGet, 128 << 10, 5400.0);
        assert_eq!(t.choose(128 << 10), Choice::Rndv);
        t.record(Proto::RndvGet, 128 << 10, 5300.0);
        // Rendezvous is faster here; the class sticks to it...
        assert_eq!(t.choose(128 << 10), Choice::Rndv);
        // ... and another class has not decided anything yet.
        assert_eq!(t.choose(1 << 20), Choice::Eager { probe: true });
        assert!(t.describe()[0].starts_with("128K..256K: rendezvous"));
    }

    #[test]
    fn the_slower_protocol_is_retried_and_a_change_is_followed() {
        let mut t = Tuner::default();
        let size = 64 << 10;
        // Eager is faster: almost everything goes eager, rendezvous is re-measured rarely.
        let r = run(&mut t, size, 1000, 40.0, 80.0);
        assert!((2..=2 + 1000 / REPROBE).contains(&r), "{r} by rendezvous");
        // The machine changes (say the processes moved to distant cores): rendezvous is
        // now faster; after a few re-probes of eager the class follows.
        let r = run(&mut t, size, 2000, 120.0, 80.0);
        assert!(r > 1500, "only {r} of 2000 by rendezvous after the change");
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
        assert_eq!(t.choose(1 << 20), Choice::Eager { probe: true });
    }
}
