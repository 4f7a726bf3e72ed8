//! Whether the calling thread shares its CPU with other busy threads: the scheduler's run
//! delay (`/proc/thread-self/schedstat`, second field: the time the thread spent runnable
//! but waiting for a CPU) against the wall-clock time, over windows of at least
//! [`CpuShare::WINDOW_NS`].
//!
//! Two things that pay off when each process has a core of its own cost time when
//! processes take turns on one: pausing between the polls of a spin-wait (the process
//! that would run the peer waits out more of its turn before its MPI library yields), and
//! handing part of a copy to the peer (the copy then waits for the peer's next turn). The
//! worker turns both off while its thread waits for a CPU more than an eighth of the time
//! (docs/uct.md, docs/ucp.md). It also stops measuring eager against rendezvous, and
//! sends eagerly up to a size that is smaller where the whole machine runs more than two
//! busy threads per CPU, and its posix receive FIFO uses a compact ring, whose
//! cells the processes taking turns on a core do not push out of its caches.

/// The run-delay reading of one window.
#[derive(Debug)]
pub struct CpuShare {
    /// Wall-clock time and run delay of the window's start; `None` before the first
    /// reading, and for good where the kernel does not keep the statistic.
    start: Option<(u64, u64)>,
    readable: bool,
    shared: bool,
    crowded: bool,
    /// CPUs online (`None` where that cannot be read: never crowded).
    cpus: Option<u64>,
}

impl Default for CpuShare {
    fn default() -> Self {
        CpuShare {
            start: None,
            readable: true,
            shared: false,
            crowded: false,
            cpus: cpus_online(),
        }
    }
}

impl CpuShare {
    /// The shortest window judged (one reading of the file every window at most).
    pub const WINDOW_NS: u64 = 10_000_000;

    /// Takes a reading if the window since the last one is long enough, and returns
    /// whether the thread waited for a CPU more than an eighth of that window (else the
    /// previous answer). `now_ns` is `crate::time::now_ns()`.
    pub fn update(&mut self, now_ns: u64) -> bool {
        if !self.readable {
            return false;
        }
        if let Some((t0, _)) = self.start {
            if now_ns.saturating_sub(t0) < Self::WINDOW_NS {
                return self.shared;
            }
        }
        let Some(delay) = run_delay_ns() else {
            self.readable = false;
            self.shared = false;
            self.crowded = false;
            return false;
        };
        if let Some(start) = self.start {
            self.shared = waited_more_than(start, (now_ns, delay), 1);
            self.crowded = self.shared
                && self
                    .cpus
                    .zip(machine_runnable())
                    .is_some_and(|(cpus, runnable)| runnable > 2 * cpus);
        }
        self.start = Some((now_ns, delay));
        self.shared
    }

    /// The last answer of [`update`](Self::update).
    pub fn shared(&self) -> bool {
        self.shared
    }

    /// Whether, at the last reading, the thread was sharing its CPU and the whole machine
    /// had more than two runnable threads per CPU online. The machine's count, not this
    /// thread's waiting: with eight busy processes on two CPUs the scheduler keeps moving
    /// them, and four of them at a time waited less than five eighths of the time for
    /// 60–200 ms (traced on 2026-11-28).
    pub fn crowded(&self) -> bool {
        self.crowded
    }
}

/// Whether the kernel keeps the statistic (CONFIG_SCHED_INFO) where this thread can read it.
pub fn available() -> bool {
    run_delay_ns().is_some()
}

/// Whether the run delay grew by more than `eighths` eighths of the wall-clock time
/// between two readings `(wall ns, run delay ns)`. A delay that went backwards (a reading
/// from another thread) counts as none.
fn waited_more_than(from: (u64, u64), to: (u64, u64), eighths: u64) -> bool {
    let wall = to.0.saturating_sub(from.0);
    let waited = to.1.saturating_sub(from.1);
    wall > 0 && waited.saturating_mul(8) > wall.saturating_mul(eighths)
}

/// Threads runnable on the machine now: the first half of `/proc/loadavg`'s fourth field
/// (`runnable/total`).
fn machine_runnable() -> Option<u64> {
    let mut buf = [0u8; 128];
    parse_runnable(read_short("/proc/loadavg", &mut buf)?)
}

fn parse_runnable(loadavg: &str) -> Option<u64> {
    let field = loadavg.split_ascii_whitespace().nth(3)?;
    field.split_once('/')?.0.parse().ok()
}

/// CPUs online, from `/sys/devices/system/cpu/online` (`0-3,8-11`; read once per worker,
/// and of any length).
fn cpus_online() -> Option<u64> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").ok()?;
    parse_cpu_list(&text)
}

fn parse_cpu_list(list: &str) -> Option<u64> {
    let mut n = 0u64;
    for part in list.trim().split(',') {
        n += match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u64, u64) = (a.parse().ok()?, b.parse().ok()?);
                b.checked_sub(a)? + 1
            }
            None => {
                part.parse::<u64>().ok()?;
                1
            }
        };
    }
    (n > 0).then_some(n)
}

/// The calling thread's run delay in nanoseconds, or `None` where the kernel does not
/// expose it.
fn run_delay_ns() -> Option<u64> {
    let mut buf = [0u8; 96];
    let text = read_short("/proc/thread-self/schedstat", &mut buf)?;
    text.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// The text of a short kernel file, read with one call into `buf` (no allocation: the
/// files of every window are read this way).
fn read_short<'a>(path: &str, buf: &'a mut [u8]) -> Option<&'a str> {
    use std::io::Read;
    let n = std::fs::File::open(path).ok()?.read(buf).ok()?;
    std::str::from_utf8(&buf[..n]).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_is_judged_by_the_share_of_time_spent_waiting() {
        let shared = |from, to| waited_more_than(from, to, 1);
        assert!(
            !shared((0, 0), (80, 10)),
            "an eighth is not more than an eighth"
        );
        assert!(shared((0, 0), (80, 11)));
        assert!(shared((100, 500), (200, 600)), "waited the whole window");
        assert!(!shared((100, 500), (200, 400)), "went backwards");
        assert!(!shared((100, 0), (100, 50)), "no time passed");
    }

    #[test]
    fn the_machine_is_read_from_loadavg_and_the_online_list() {
        assert_eq!(parse_runnable("1.88 3.24 2.74 9/78 5675\n"), Some(9));
        assert_eq!(parse_runnable("1.88 3.24 2.74"), None);
        assert_eq!(parse_runnable("1.88 3.24 2.74 x/78 5675"), None);
        assert_eq!(parse_cpu_list("0-1\n"), Some(2));
        assert_eq!(parse_cpu_list("0-3,8-11,13"), Some(9));
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list(""), None);
        if let (Some(r), Some(c)) = (machine_runnable(), cpus_online()) {
            assert!(r >= 1, "this thread runs");
            assert!(c >= 1);
        } else {
            println!("skipped: /proc/loadavg or /sys/devices/system/cpu/online unreadable");
        }
    }

    #[test]
    fn the_first_reading_only_starts_a_window() {
        let mut c = CpuShare::default();
        assert!(!c.update(crate::time::now_ns()));
        assert!(!c.shared());
    }

    /// Two busy threads pinned to one CPU: each waits for it about half the time, and at
    /// least one of them says so. Needs the statistic (CONFIG_SCHED_INFO).
    #[test]
    fn two_busy_threads_on_one_cpu_find_it_shared() {
        use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
        use nix::unistd::Pid;
        if !available() {
            println!("skipped: /proc/thread-self/schedstat is not readable here");
            return;
        }
        let mine = sched_getaffinity(Pid::from_raw(0)).unwrap();
        let cpu = (0..CpuSet::count()).find(|&c| mine.is_set(c).unwrap_or(false));
        let cpu = cpu.expect("a CPU in this thread's affinity mask");
        let spin = move || {
            let mut one = CpuSet::new();
            one.set(cpu).unwrap();
            sched_setaffinity(Pid::from_raw(0), &one).unwrap();
            let mut c = CpuShare::default();
            let t0 = crate::time::now_ns();
            c.update(t0);
            let mut last = false;
            while crate::time::now_ns() - t0 < 6 * CpuShare::WINDOW_NS {
                last = c.update(crate::time::now_ns());
                std::hint::spin_loop();
            }
            last
        };
        let a = std::thread::spawn(spin);
        let b = std::thread::spawn(spin);
        let (a, b) = (a.join().unwrap(), b.join().unwrap());
        assert!(
            a || b,
            "neither of two threads on CPU {cpu} found it shared"
        );
    }
}
