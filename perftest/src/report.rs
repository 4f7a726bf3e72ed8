//! Output in `ucx_perftest`'s format: the same table header, one `[thread 0]` row per
//! reporting interval, and a `Final:` line with the same columns in the same order, so a
//! script written for `ucx_perftest` parses ours. `-f` and `-v` follow `ucx_perftest` too:
//! `-f` prints the header (its first column named `Test`) and one unlabelled line of final
//! numbers; `-v` prints a CSV header, `[thread 0]`-prefixed interval rows and an unlabelled
//! final row; `-N` groups thousands in the iteration and message-rate columns.
//!
//! A run longer than a second shows a progress bar on stderr when stderr is a terminal
//! (indicatif), drawn when a reporting interval closes, so the timed loop pays nothing for
//! it. Every run's final numbers are also kept ([`take_finals`]) for `--json`, `--plot`
//! and `--compare-ucx`.

use std::io::IsTerminal;
use std::sync::Mutex;

use hdrhistogram::Histogram;

use crate::args::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// What one iteration is, which decides how times are reported (`ucx_perftest`'s test
/// types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Ping-pong: one iteration is a round trip, latency is half of it.
    Latency,
    /// Streaming: one iteration is one message; the time per message is its "overhead".
    Bandwidth,
    /// One operation that completes at the initiator (get, fetching atomics): its time is
    /// its latency, not halved.
    OpLatency,
}

/// How rows are printed (`-R`, `-f`, `-v`, `-N`) and whether a progress bar may be shown.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Format {
    pub rank: f64,
    pub final_only: bool,
    pub csv: bool,
    pub numeric: bool,
    /// Print nothing (`--json -` owns stdout); the numbers are still kept.
    pub quiet: bool,
    /// Leave out the table header (later runs of a sweep under `-f`).
    pub no_header: bool,
    /// Measured iterations expected (the progress bar's length).
    pub iters: u64,
    /// A progress bar may be drawn (the client, with stderr a terminal).
    pub progress: bool,
    /// Run k of n of a sweep or suite, shown with the progress bar.
    pub sweep: Option<(usize, usize)>,
}

impl Default for Format {
    fn default() -> Self {
        Format {
            rank: 50.0,
            final_only: false,
            csv: false,
            numeric: false,
            quiet: false,
            no_header: false,
            iters: 0,
            progress: false,
            sweep: None,
        }
    }
}

/// One row of numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Row {
    pub iters: u64,
    /// Percentile latency in µs.
    pub lat_pct: f64,
    pub lat_avg: f64,
    pub lat_overall: f64,
    pub bw_avg: f64,
    pub bw_overall: f64,
    pub rate_avg: f64,
    pub rate_overall: f64,
}

impl Row {
    /// The eight numbers in column order.
    pub fn columns(&self) -> [f64; 8] {
        [
            self.iters as f64,
            self.lat_pct,
            self.lat_avg,
            self.lat_overall,
            self.bw_avg,
            self.bw_overall,
            self.rate_avg,
            self.rate_overall,
        ]
    }
}

/// Final rows of the runs this process reported, in order.
static FINALS: Mutex<Vec<Row>> = Mutex::new(Vec::new());

/// Takes the final rows recorded since the last call.
pub fn take_finals() -> Vec<Row> {
    std::mem::take(&mut *FINALS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Accumulates per-iteration times and prints rows.
#[derive(Debug)]
pub struct Reporter {
    kind: Kind,
    msg_size: usize,
    fmt: Format,
    hist: Histogram<u64>,
    interval_iters: u64,
    interval_ns: u64,
    /// Raw cycle counts of this interval's iterations, converted when it closes so the
    /// timed loop only stores a number.
    cycles: Vec<u64>,
    cycles_per_ns: f64,
    total_iters: u64,
    total_ns: u64,
    rows: Vec<Row>,
    bar: Option<ProgressBar>,
}

/// Room for the raw samples of a latency loop (one `u64` per iteration until the interval
/// closes), with every page already touched: a page fault costs about 2.5 µs on a VM, and
/// the first sample written to each new page would otherwise carry one (2026-11-23:
/// `ucp_am_lat`'s 99.9th percentile was 2.66 µs, UCX's 0.19). Bandwidth loops keep no
/// per-iteration samples.
fn sample_buffer(kind: Kind) -> Vec<u64> {
    if kind == Kind::Bandwidth {
        return Vec::new();
    }
    // Ones, not zeros: a zeroed allocation comes from fresh pages the kernel maps on first
    // write, which is what this avoids.
    let mut v = vec![1u64; SAMPLES];
    v.clear();
    v
}

/// Raw samples kept before they are converted into the histogram.
const SAMPLES: usize = 1 << 20;

impl Reporter {
    pub fn new(kind: Kind, msg_size: usize, fmt: Format) -> Reporter {
        Reporter {
            kind,
            msg_size,
            fmt,
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
            interval_iters: 0,
            interval_ns: 0,
            cycles: sample_buffer(kind),
            cycles_per_ns: ucs::time::cycles_per_ns(),
            total_iters: 0,
            total_ns: 0,
            rows: Vec::new(),
            bar: None,
        }
    }

    fn div(&self) -> f64 {
        match self.kind {
            Kind::Latency => 2.0,
            Kind::Bandwidth | Kind::OpLatency => 1.0,
        }
    }

    /// Records one iteration that took `ns`.
    #[inline]
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn sample(&mut self, ns: u64) {
        let _ = self.hist.record(ns.max(1));
        self.interval_iters += 1;
        self.interval_ns += ns;
    }

    /// Records one iteration that took `cycles` of `ucs::time::cycles()`.
    #[inline]
    pub fn sample_cycles(&mut self, cycles: u64) {
        if self.cycles.len() == self.cycles.capacity() {
            self.flush_cycles();
        }
        self.cycles.push(cycles);
    }

    #[cold]
    fn flush_cycles(&mut self) {
        let mut sum = 0u64;
        for &c in &self.cycles {
            let ns = (c as f64 / self.cycles_per_ns) as u64;
            let _ = self.hist.record(ns.max(1));
            sum += ns;
        }
        self.interval_iters += self.cycles.len() as u64;
        self.interval_ns += sum;
        self.cycles.clear();
    }

    /// Records `iters` iterations that took `ns` together (bandwidth tests).
    pub fn batch(&mut self, iters: u64, ns: u64) {
        if let Some(per_iter) = ns.checked_div(iters) {
            let _ = self.hist.record_n(per_iter.max(1), iters);
        }
        self.interval_iters += iters;
        self.interval_ns += ns;
    }

    fn row(&self, iters: u64, ns: u64, pct_ns: f64) -> Row {
        let d = self.div();
        let (secs, tsecs) = (ns as f64 / 1e9, self.total_ns as f64 / 1e9);
        let lat = |it: u64, s: f64| {
            if it == 0 {
                0.0
            } else {
                s * 1e6 / it as f64 / d
            }
        };
        // Bandwidth and message rate are one-way too: a round trip moves a message each way
        // (ucx_perftest multiplies them by the same factor it divides latency by).
        let bw = |it: u64, s: f64| {
            if s == 0.0 {
                0.0
            } else {
                it as f64 * self.msg_size as f64 / s / (1024.0 * 1024.0) * d
            }
        };
        let rate = |it: u64, s: f64| if s == 0.0 { 0.0 } else { it as f64 / s * d };
        Row {
            iters,
            lat_pct: pct_ns / 1e3 / d,
            lat_avg: lat(iters, secs),
            lat_overall: lat(self.total_iters, tsecs),
            bw_avg: bw(iters, secs),
            bw_overall: bw(self.total_iters, tsecs),
            rate_avg: rate(iters, secs),
            rate_overall: rate(self.total_iters, tsecs),
        }
    }

    /// Closes the current interval and prints its row unless final-only.
    pub fn interval(&mut self) {
        self.close_interval(true);
    }

    /// Closes the current interval; prints its row when `print` and not final-only.
    fn close_interval(&mut self, print: bool) {
        self.flush_cycles();
        if self.interval_iters == 0 {
            return;
        }
        self.total_iters += self.interval_iters;
        self.total_ns += self.interval_ns;
        let pct = self.hist.value_at_quantile(self.fmt.rank / 100.0) as f64;
        let r = self.row(self.interval_iters, self.interval_ns, pct);
        self.rows.push(r);
        if print && !self.fmt.final_only {
            self.print(Stage::Interval, &r);
        }
        self.interval_iters = 0;
        self.interval_ns = 0;
        self.hist.reset();
        self.progress();
    }

    /// Draws or advances the progress bar: only once the run has lasted a second (the
    /// first interval closes after one), only with stderr a terminal.
    fn progress(&mut self) {
        if !self.fmt.progress || self.fmt.iters == 0 || self.total_ns < 1_000_000_000 {
            return;
        }
        let total = self.total_iters.min(self.fmt.iters);
        if let Some(b) = &self.bar {
            b.set_position(total);
            return;
        }
        if !std::io::stderr().is_terminal() {
            self.fmt.progress = false;
            return;
        }
        let b = ProgressBar::with_draw_target(
            Some(self.fmt.iters),
            ProgressDrawTarget::stderr_with_hz(4),
        );
        let run = match self.fmt.sweep {
            Some((k, n)) => format!("run {k}/{n}: "),
            None => String::new(),
        };
        b.set_style(
            ProgressStyle::with_template(&format!(
                "{run}{{bar:30.cyan/blue}} {{pos}}/{{len}} iterations, eta {{eta}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b.set_position(total);
        self.bar = Some(b);
    }

    /// Prints the table header (or the CSV one).
    pub fn header(&self) {
        if self.fmt.quiet || self.fmt.no_header {
            return;
        }
        if self.fmt.csv {
            println!(
                "iterations,{:.1}_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr",
                self.fmt.rank
            );
            return;
        }
        let rank = format!("{:.1}%ile", self.fmt.rank);
        // ucx_perftest calls the per-message time of a streaming test its overhead.
        let what = match self.kind {
            Kind::Latency | Kind::OpLatency => "latency (usec)",
            Kind::Bandwidth => "overhead (usec)",
        };
        // ucx_perftest names the first column "Test" when it prints final numbers only.
        let first = if self.fmt.final_only {
            "     Test     "
        } else {
            "    Stage     "
        };
        println!("+--------------+--------------+------------------------------+---------------------+-----------------------+");
        println!("|              |              |{what:^30}|   bandwidth (MB/s)  |  message rate (msg/s) |");
        println!("+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+");
        println!("|{first}| # iterations | {rank:>8} | average | overall |  average |  overall |  average  |  overall  |");
        println!("+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+");
    }

    fn print(&self, stage: Stage, r: &Row) {
        if self.fmt.quiet {
            return;
        }
        let line = format_row(stage, r, self.fmt);
        match &self.bar {
            Some(b) => b.suspend(|| println!("{line}")),
            None => println!("{line}"),
        }
    }

    /// Prints the final line over the whole run and returns it.
    pub fn finish(&mut self) -> Row {
        // The last, partial interval has no row of its own (as in ucx_perftest): the final
        // line covers it.
        self.close_interval(false);
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
        // The final percentile is the median of the interval percentiles weighted by
        // iterations (the per-interval histograms are gone by now).
        let mut pcts: Vec<(f64, u64)> = self.rows.iter().map(|r| (r.lat_pct, r.iters)).collect();
        pcts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let half = self.total_iters / 2;
        let mut acc = 0;
        let mut pct = 0.0;
        for (p, n) in pcts {
            acc += n;
            pct = p;
            if acc > half {
                break;
            }
        }
        let mut r = self.row(self.total_iters, self.total_ns, pct * 1e3 * self.div());
        r.lat_pct = pct;
        self.print(Stage::Final, &r);
        FINALS.lock().unwrap_or_else(|e| e.into_inner()).push(r);
        r
    }
}

/// Reports one iteration of a latency loop on the client.
pub struct LatClock {
    pub rep: Reporter,
    last: u64,
    next_report: u64,
    report_every: u64,
}

impl LatClock {
    /// A clock for ping-pong round trips (`Kind::Latency`) or single operations
    /// (`Kind::OpLatency`).
    pub fn new(args: &Args, kind: Kind, size: usize) -> LatClock {
        let rep = Reporter::new(kind, size, args.format());
        rep.header();
        crate::mark_measured();
        let report_every = (1e9 * ucs::time::cycles_per_ns()) as u64;
        let last = ucs::time::cycles();
        LatClock {
            rep,
            last,
            next_report: last + report_every,
            report_every,
        }
    }

    #[inline(always)]
    pub fn tick(&mut self, i: u64, warmup: u64) {
        let now = ucs::time::cycles();
        if i >= warmup {
            self.rep.sample_cycles(now.wrapping_sub(self.last));
            if now >= self.next_report {
                self.rep.interval();
                self.next_report = now + self.report_every;
            }
        } else if i + 1 == warmup {
            self.next_report = now + self.report_every;
        }
        self.last = now;
    }
}

/// Reports a streaming loop on the client: iterations are counted, and the time of each
/// batch of them taken once per reporting interval.
pub struct StreamClock {
    rep: Reporter,
    rate: f64,
    report_every: u64,
    mark: u64,
    since: u64,
}

impl StreamClock {
    pub fn new(args: &Args, size: usize) -> StreamClock {
        let rep = Reporter::new(Kind::Bandwidth, size, args.format());
        rep.header();
        crate::mark_measured();
        let rate = ucs::time::cycles_per_ns();
        StreamClock {
            rep,
            rate,
            report_every: (1e9 * rate) as u64,
            mark: ucs::time::cycles(),
            since: 0,
        }
    }

    /// Starts the measured part now: the loop calls it once the warm-up operations have
    /// completed, so that their time is not counted against the measured ones (a window
    /// of asynchronous GPU copies takes milliseconds to drain).
    pub fn restart(&mut self) {
        crate::mark_measured();
        self.mark = ucs::time::cycles();
        self.since = 0;
    }

    /// Counts iteration `i` (warm-up iterations restart the clock).
    #[inline(always)]
    pub fn tick(&mut self, i: u64, warmup: u64) {
        if i < warmup {
            self.mark = ucs::time::cycles();
            return;
        }
        self.since += 1;
        if self.since.is_multiple_of(1024) {
            let now = ucs::time::cycles();
            if now - self.mark >= self.report_every {
                self.rep
                    .batch(self.since, ((now - self.mark) as f64 / self.rate) as u64);
                self.rep.interval();
                self.mark = now;
                self.since = 0;
            }
        }
    }

    /// Ends the run (after the receiver confirmed the last message).
    pub fn finish(mut self) {
        let now = ucs::time::cycles();
        self.rep
            .batch(self.since, ((now - self.mark) as f64 / self.rate) as u64);
        self.rep.finish();
    }
}

/// Which row a line is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// A reporting interval (`[thread 0]`).
    Interval,
    /// The whole run (`Final:`, unlabelled under `-f` and in CSV).
    Final,
    /// Any other label in the first column (`--compare-ucx` rows).
    Label(&'static str),
}

/// One row as `ucx_perftest` prints it under `fmt`.
pub fn format_row(stage: Stage, r: &Row, fmt: Format) -> String {
    let label = match stage {
        Stage::Interval => "[thread 0]",
        Stage::Final if fmt.final_only || fmt.csv => "",
        Stage::Final => "Final:",
        Stage::Label(l) => l,
    };
    if fmt.csv {
        // ucx_perftest glues the interval label to the first number.
        return format!(
            "{label}{},{:.3},{:.3},{:.3},{:.2},{:.2},{:.0},{:.0}",
            r.iters,
            r.lat_pct,
            r.lat_avg,
            r.lat_overall,
            r.bw_avg,
            r.bw_overall,
            r.rate_avg,
            r.rate_overall
        );
    }
    let count = |v: f64| {
        if fmt.numeric {
            group_thousands(v)
        } else {
            format!("{v:.0}")
        }
    };
    // ucx_perftest's widths, and its separating spaces: a number too wide for its column
    // still leaves the columns apart.
    format!(
        "{label:<14}{:>14} {:>10.3} {:>9.3} {:>9.3} {:>10.2} {:>10.2} {:>11} {:>11}",
        count(r.iters as f64),
        r.lat_pct,
        r.lat_avg,
        r.lat_overall,
        r.bw_avg,
        r.bw_overall,
        count(r.rate_avg),
        count(r.rate_overall)
    )
}

/// `1234567.4` as `1,234,567` (`-N`, as `ucx_perftest` prints in an English locale).
pub fn group_thousands(v: f64) -> String {
    let s = format!("{:.0}", v.abs());
    let mut out = String::with_capacity(s.len() + s.len() / 3 + 1);
    if v < 0.0 && s != "0" {
        out.push('-');
    }
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt() -> Format {
        Format {
            final_only: true,
            ..Format::default()
        }
    }

    #[test]
    fn latency_rows_halve_round_trips() {
        let mut r = Reporter::new(Kind::Latency, 8, fmt());
        for _ in 0..1000 {
            r.sample(2_000); // 2 µs round trip
        }
        let f = r.finish();
        assert_eq!(f.iters, 1000);
        assert!((f.lat_avg - 1.0).abs() < 1e-9, "{f:?}");
        assert!((f.lat_pct - 1.0).abs() < 0.01, "{f:?}");
        // One message each way per round trip, as ucx_perftest counts them.
        assert!((f.rate_overall - 1_000_000.0).abs() < 1.0, "{f:?}");
        assert!((f.bw_overall - 8e6 / 1048576.0).abs() < 1e-6, "{f:?}");
    }

    #[test]
    fn latency_samples_cost_no_page_faults() {
        use nix::sys::resource::{getrusage, UsageWho};
        let faults = || {
            getrusage(UsageWho::RUSAGE_THREAD)
                .unwrap()
                .minor_page_faults()
        };
        let mut r = Reporter::new(Kind::Latency, 8, fmt());
        let before = faults();
        // 200 000 samples fill 391 pages of 4 KiB: each would fault on first write.
        for i in 0..200_000 {
            r.sample_cycles(i);
        }
        let after = faults();
        assert!(after - before < 20, "{} page faults", after - before);
        assert_eq!(
            Reporter::new(Kind::Bandwidth, 8, fmt()).cycles.capacity(),
            0
        );
    }

    #[test]
    fn operation_latency_is_not_halved() {
        let mut r = Reporter::new(Kind::OpLatency, 8, fmt());
        for _ in 0..1000 {
            r.sample(2_000);
        }
        let f = r.finish();
        assert!((f.lat_avg - 2.0).abs() < 1e-9, "{f:?}");
        assert!((f.rate_overall - 500_000.0).abs() < 1.0, "{f:?}");
    }

    #[test]
    fn bandwidth_counts_bytes() {
        let mut r = Reporter::new(Kind::Bandwidth, 1 << 20, fmt());
        r.batch(1000, 1_000_000_000);
        let f = r.finish();
        assert!((f.bw_overall - 1000.0).abs() < 1e-6, "{f:?}");
    }

    #[test]
    fn rows_in_ucx_perftest_layouts() {
        let r = Row {
            iters: 1_234_567,
            lat_pct: 0.1234,
            lat_avg: 1.5,
            lat_overall: 2.25,
            bw_avg: 10.0,
            bw_overall: 20.5,
            rate_avg: 2_500_000.4,
            rate_overall: 999.0,
        };
        let plain = Format::default();
        assert_eq!(
            format_row(Stage::Final, &r, plain),
            "Final:               1234567      0.123     1.500     2.250      10.00      20.50     2500000         999"
        );
        let f = format_row(Stage::Final, &r, fmt());
        assert!(
            f.starts_with(&" ".repeat(21)) && f.contains("1234567"),
            "{f}"
        );
        let csv = Format { csv: true, ..plain };
        assert_eq!(
            format_row(Stage::Interval, &r, csv),
            "[thread 0]1234567,0.123,1.500,2.250,10.00,20.50,2500000,999"
        );
        assert_eq!(
            format_row(Stage::Final, &r, csv),
            "1234567,0.123,1.500,2.250,10.00,20.50,2500000,999"
        );
        let n = Format {
            numeric: true,
            ..plain
        };
        let line = format_row(Stage::Final, &r, n);
        assert!(
            line.contains(" 1,234,567 ") && line.contains(" 2,500,000 "),
            "{line}"
        );
    }

    #[test]
    fn thousands() {
        assert_eq!(group_thousands(0.0), "0");
        assert_eq!(group_thousands(999.0), "999");
        assert_eq!(group_thousands(1000.0), "1,000");
        assert_eq!(group_thousands(1234567.6), "1,234,568");
    }
}
