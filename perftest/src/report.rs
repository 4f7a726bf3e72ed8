//! Output in `ucx_perftest`'s format: the same table header, one `[thread 0]` row per
//! reporting interval, and a `Final:` line with the same columns in the same order, so a
//! script written for `ucx_perftest` parses ours.

use hdrhistogram::Histogram;

/// Which numbers a test reports: latency tests halve the round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Ping-pong: one iteration is a round trip, latency is half of it.
    Latency,
    /// Streaming: one iteration is one message.
    Bandwidth,
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

/// Accumulates per-iteration times and prints rows.
#[derive(Debug)]
pub struct Reporter {
    kind: Kind,
    msg_size: usize,
    rank: f64,
    final_only: bool,
    csv: bool,
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
}

impl Reporter {
    pub fn new(kind: Kind, msg_size: usize, rank: f64, final_only: bool, csv: bool) -> Reporter {
        Reporter {
            kind,
            msg_size,
            rank,
            final_only,
            csv,
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds"),
            interval_iters: 0,
            interval_ns: 0,
            cycles: Vec::with_capacity(1 << 20),
            cycles_per_ns: ucs::time::cycles_per_ns(),
            total_iters: 0,
            total_ns: 0,
            rows: Vec::new(),
        }
    }

    fn div(&self) -> f64 {
        match self.kind {
            Kind::Latency => 2.0,
            Kind::Bandwidth => 1.0,
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
        self.flush_cycles();
        if self.interval_iters == 0 {
            return;
        }
        self.total_iters += self.interval_iters;
        self.total_ns += self.interval_ns;
        let pct = self.hist.value_at_quantile(self.rank / 100.0) as f64;
        let r = self.row(self.interval_iters, self.interval_ns, pct);
        self.rows.push(r);
        if !self.final_only {
            self.print("[thread 0]", &r);
        }
        self.interval_iters = 0;
        self.interval_ns = 0;
        self.hist.reset();
    }

    pub fn header(&self) {
        if self.csv || self.final_only {
            return;
        }
        let rank = format!("{:.1}%ile", self.rank);
        // ucx_perftest calls the per-message time of a streaming test its overhead.
        let what = match self.kind {
            Kind::Latency => "latency (usec)",
            Kind::Bandwidth => "overhead (usec)",
        };
        println!("+--------------+--------------+------------------------------+---------------------+-----------------------+");
        println!("|              |              |       {what:<23}|   bandwidth (MB/s)  |  message rate (msg/s) |");
        println!("+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+");
        println!("|    Stage     | # iterations | {rank:>8} | average | overall |  average |  overall |  average  |  overall  |");
        println!("+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+");
    }

    fn print(&self, stage: &str, r: &Row) {
        if self.csv {
            println!(
                "{},{},{:.3},{:.3},{:.3},{:.2},{:.2},{:.0},{:.0}",
                stage.trim_end_matches(':'),
                r.iters,
                r.lat_pct,
                r.lat_avg,
                r.lat_overall,
                r.bw_avg,
                r.bw_overall,
                r.rate_avg,
                r.rate_overall
            );
        } else {
            // ucx_perftest's widths, and its separating spaces: a number too wide for its
            // column still leaves the columns apart.
            println!(
                "{stage:<14}{:>14} {:>10.3} {:>9.3} {:>9.3} {:>10.2} {:>10.2} {:>11.0} {:>11.0}",
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
    }

    /// Prints the `Final:` line over the whole run and returns it.
    pub fn finish(&mut self) -> Row {
        self.interval();
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
        self.print("Final:", &r);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_rows_halve_round_trips() {
        let mut r = Reporter::new(Kind::Latency, 8, 50.0, true, false);
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
    fn bandwidth_counts_bytes() {
        let mut r = Reporter::new(Kind::Bandwidth, 1 << 20, 50.0, true, false);
        r.batch(1000, 1_000_000_000);
        let f = r.finish();
        assert!((f.bw_overall - 1000.0).abs() < 1e-6, "{f:?}");
    }
}
