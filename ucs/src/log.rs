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

/// Lets one event through per `interval_ns` (for messages on the data path, and for
/// those a peer can trigger at will: a flood of malformed messages must not become a flood
/// of log lines), and counts the ones it held back.
#[derive(Debug)]
pub struct RateLimit {
    interval_ns: u64,
    last: AtomicU64,
    held: AtomicU64,
}

impl RateLimit {
    pub const fn new(interval_ns: u64) -> RateLimit {
        RateLimit {
            interval_ns,
            last: AtomicU64::new(0),
            held: AtomicU64::new(0),
        }
    }

    /// True when the caller may log now.
    pub fn allow(&self) -> bool {
        self.allow_counted().is_some()
    }

    /// `Some(n)` when the caller may log now, `n` being how many events were held back
    /// since the last one let through; `None` (and one more held back) otherwise.
    pub fn allow_counted(&self) -> Option<u64> {
        let now = crate::time::now_ns();
        let last = self.last.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= self.interval_ns)
            && self
                .last
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.held.swap(0, Ordering::Relaxed));
        }
        self.held.fetch_add(1, Ordering::Relaxed);
        None
    }
}

/// `log::warn!` at most once per second from this call site, with the count of the ones
/// held back since: for warnings a peer can trigger at will.
#[macro_export]
macro_rules! warn_limited {
    ($($arg:tt)+) => {{
        static LIMIT: $crate::log::RateLimit = $crate::log::RateLimit::new(1_000_000_000);
        if let Some(held) = LIMIT.allow_counted() {
            if held > 0 {
                log::warn!("{} ({held} more like it held back)", format_args!($($arg)+));
            } else {
                log::warn!($($arg)+);
            }
        }
    }};
}

#[cfg(test)]
mod tests {
    #[test]
    fn rate_limit_lets_one_through() {
        let r = super::RateLimit::new(60_000_000_000);
        assert!(r.allow());
        assert!(!r.allow());
    }

    #[test]
    fn rate_limit_counts_what_it_held_back() {
        let r = super::RateLimit::new(50_000_000);
        assert_eq!(r.allow_counted(), Some(0));
        for _ in 0..5 {
            assert_eq!(r.allow_counted(), None);
        }
        std::thread::sleep(std::time::Duration::from_millis(60));
        assert_eq!(r.allow_counted(), Some(5), "five held back since");
        assert_eq!(r.allow_counted(), None);
    }
}
