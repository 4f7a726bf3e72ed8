//! Command line, with `ucx_perftest`'s option letters and meanings.

use clap::Parser;

/// Measure Rucx point-to-point performance (ucx_perftest-compatible command line).
#[derive(Parser, Debug, Clone)]
#[command(name = "rucx-perftest", disable_help_flag = true)]
pub struct Args {
    /// Server address: with it this process is the client; without it, the server.
    pub server: Option<String>,
    /// Test to run (am_lat, am_bw). Without it, `--loopback` runs the default suite.
    #[arg(short = 't')]
    pub test: Option<String>,
    /// Transport for UCT-level tests.
    #[arg(short = 'x')]
    pub tl: Option<String>,
    /// Device for UCT-level tests.
    #[arg(short = 'd')]
    pub device: Option<String>,
    /// Data layout: short, bcopy, zcopy (UCT tests).
    #[arg(short = 'D', default_value = "short")]
    pub layout: String,
    /// Message size (a comma-separated list gives scatter-gather entries summed).
    #[arg(short = 's', default_value = "8")]
    pub size: String,
    /// Measured iterations (default 1000000; 100000 per case in the default suite).
    #[arg(short = 'n')]
    pub iters: Option<u64>,
    /// Warm-up iterations.
    #[arg(short = 'w', default_value_t = 10_000)]
    pub warmup: u64,
    /// Pin to this CPU (first of a comma-separated list).
    #[arg(short = 'c')]
    pub cpus: Option<String>,
    /// Port of the out-of-band connection.
    #[arg(short = 'p', default_value_t = 13337)]
    pub port: u16,
    /// Percentile rank for the latency column.
    #[arg(short = 'R', default_value_t = 50.0)]
    pub rank: f64,
    /// Print only the final line.
    #[arg(short = 'f')]
    pub final_only: bool,
    /// CSV output.
    #[arg(short = 'v')]
    pub csv: bool,
    /// Most outstanding sends in bandwidth tests.
    #[arg(short = 'O', default_value_t = 1)]
    pub outstanding: u32,
    /// Start the server as a child process on this host and run against it.
    #[arg(long = "loopback")]
    pub loopback: bool,
    /// Print help.
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

impl Args {
    pub fn test(&self) -> &str {
        self.test.as_deref().unwrap_or("am_lat")
    }

    pub fn iters(&self) -> u64 {
        self.iters.unwrap_or(1_000_000)
    }

    /// The message size: the sum of the scatter-gather list.
    pub fn msg_size(&self) -> Result<usize, String> {
        let mut total = 0usize;
        for part in self.size.split(',') {
            let n = ucs::config::parse_size(part)
                .ok_or_else(|| format!("bad size '{part}' in -s {}", self.size))?;
            total = total.checked_add(n).ok_or("message size overflows")?;
        }
        Ok(total)
    }

    /// The options the server needs to run the same test, as command-line words (the
    /// address, port, CPU list and `--loopback` stay with the client).
    pub fn to_server_argv(&self) -> Vec<String> {
        let mut v = Vec::new();
        let mut opt = |flag: &str, val: String| {
            v.push(flag.to_string());
            v.push(val);
        };
        if let Some(t) = &self.test {
            opt("-t", t.clone());
        }
        if let Some(x) = &self.tl {
            opt("-x", x.clone());
        }
        if let Some(d) = &self.device {
            opt("-d", d.clone());
        }
        opt("-D", self.layout.clone());
        opt("-s", self.size.clone());
        opt("-n", self.iters().to_string());
        opt("-w", self.warmup.to_string());
        opt("-R", self.rank.to_string());
        opt("-O", self.outstanding.to_string());
        if self.final_only {
            v.push("-f".into());
        }
        if self.csv {
            v.push("-v".into());
        }
        v
    }

    /// The first CPU of `-c`.
    pub fn cpu(&self) -> Result<Option<usize>, String> {
        match &self.cpus {
            None => Ok(None),
            Some(s) => s
                .split(',')
                .next()
                .and_then(|c| c.trim().parse().ok())
                .map(Some)
                .ok_or_else(|| format!("bad CPU list '{s}' in -c")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_argv_round_trips() {
        let a = Args::try_parse_from([
            "p", "host", "-t", "am_bw", "-x", "tcp", "-d", "lo", "-s", "8,16", "-n", "5", "-c",
            "1", "-f",
        ])
        .unwrap();
        assert_eq!(a.msg_size(), Ok(24));
        assert_eq!(a.cpu(), Ok(Some(1)));
        let mut argv = vec!["p".to_string()];
        argv.extend(a.to_server_argv());
        let b = Args::try_parse_from(&argv).unwrap();
        assert_eq!(b.server, None);
        assert_eq!(b.cpus, None);
        assert_eq!(
            (b.test(), b.tl.as_deref(), b.device.as_deref()),
            ("am_bw", Some("tcp"), Some("lo"))
        );
        assert_eq!((b.msg_size(), b.iters(), b.final_only), (Ok(24), 5, true));
    }

    #[test]
    fn bad_sizes_are_errors() {
        let a = Args::try_parse_from(["p", "-s", "8,x"]).unwrap();
        assert!(a.msg_size().unwrap_err().contains("bad size"));
        assert!(Args::try_parse_from(["p", "-n", "many"]).is_err());
    }
}
