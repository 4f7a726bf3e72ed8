//! A small stderr logger for Rucx processes that bring none of their own (the C library,
//! test peers), and a rate limiter for data-path messages.
//!
//! Binaries that already install a `log` backend keep it: [`init`] does nothing then.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

struct StderrLogger;

impl log::Log for StderrLogger {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let _ = writeln!(
                std::io::stderr().lock(),
                "[rucx {}] {:<5} {}: {}",
                std::process::id(),
                r.level(),
                r.target(),
                r.args()
            );
        }
    }
    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;

/// Installs the stderr logger at `level` unless a logger is already installed.
pub fn init(level: log::LevelFilter) {
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}

/// Lets one event through per `interval_ns` (for messages on the data path).
#[derive(Debug)]
pub struct RateLimit {
    interval_ns: u64,
    last: AtomicU64,
}

impl RateLimit {
    pub const fn new(interval_ns: u64) -> RateLimit {
        RateLimit {
            interval_ns,
            last: AtomicU64::new(0),
        }
    }

    /// True when the caller may log now.
    pub fn allow(&self) -> bool {
        let now = crate::time::now_ns();
        let last = self.last.load(Ordering::Relaxed);
        (last == 0 || now.saturating_sub(last) >= self.interval_ns)
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rate_limit_lets_one_through() {
        let r = super::RateLimit::new(60_000_000_000);
        assert!(r.allow());
        assert!(!r.allow());
    }
}
