//! Monotonic time in nanoseconds.

/// Nanoseconds from CLOCK_MONOTONIC.
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
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

/// A cheap cycle counter for measuring loops (the TSC on x86_64, the monotonic clock in
/// nanoseconds elsewhere). Convert with [`cycles_per_ns`].
#[inline]
pub fn cycles() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: rdtsc has no preconditions; every x86_64 CPU has it.
        unsafe { core::arch::x86_64::_rdtsc() }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        now_ns()
    }
}

/// Cycles of [`cycles`] per nanosecond, measured once against the monotonic clock.
pub fn cycles_per_ns() -> f64 {
    static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        let (c0, t0) = (cycles(), now_ns());
        std::thread::sleep(std::time::Duration::from_millis(20));
        let (c1, t1) = (cycles(), now_ns());
        let r = (c1.wrapping_sub(c0)) as f64 / (t1 - t0).max(1) as f64;
        if r.is_finite() && r > 0.0 {
            r
        } else {
            1.0
        }
    })
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
