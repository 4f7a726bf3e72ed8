//! Monotonic time in nanoseconds.

/// Nanoseconds from CLOCK_MONOTONIC.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// A deadline on the monotonic clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Deadline(pub u64);

impl Deadline {
    pub fn after_ns(ns: u64) -> Deadline {
        Deadline(now_ns().saturating_add(ns))
    }
    pub fn passed(self) -> bool {
        now_ns() >= self.0
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn monotonic() {
        let a = super::now_ns();
        let b = super::now_ns();
        assert!(b >= a);
        assert!(super::Deadline::after_ns(0).passed());
        assert!(!super::Deadline::after_ns(60_000_000_000).passed());
    }
}
