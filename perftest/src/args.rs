//! Command line, with `ucx_perftest`'s option letters and meanings.

use clap::Parser;

/// Measure Rucx point-to-point performance (ucx_perftest-compatible command line).
#[derive(Parser, Debug, Clone)]
#[command(name = "rucx-perftest", disable_help_flag = true)]
pub struct Args {
    /// Server address: with it this process is the client; without it, the server.
    pub server: Option<String>,
    /// Test to run: am_lat, am_bw (UCT; -x TRANSPORT -d DEVICE), tag_lat, tag_bw,
    /// tag_sync_lat, tag_sync_bw (UCP; transports from UCX_TLS / UCX_NET_DEVICES). Without
    /// it, `--loopback` runs the default suite (tag_lat and tag_bw over a size sweep);
    /// `--loopback -t am_lat` (or am_bw) without -x sweeps every UCT transport.
    #[arg(short = 't')]
    pub test: Option<String>,
    /// Transport for UCT-level tests.
    #[arg(short = 'x')]
    pub tl: Option<String>,
    /// Device for UCT-level tests.
    #[arg(short = 'd')]
    pub device: Option<String>,
    /// Data layout. UCT tests: short (default), bcopy. UCP tests: SEND[,RECV], each contig
    /// (default) or iov (the `-s` list as scatter-gather entries); RECV defaults to SEND.
    #[arg(short = 'D')]
    pub layout: Option<String>,
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
    /// Most outstanding sends (and posted receives) in bandwidth tests; 0: the test's
    /// default, as ucx_perftest (32 for tag_bw and tag_sync_bw).
    #[arg(short = 'O', default_value_t = 0)]
    pub outstanding: u32,
    /// Distance in bytes between consecutive iov entries (`-D iov`), as ucx_perftest's `-i`:
    /// the entries of `-s` then lie with gaps of this size between them.
    #[arg(short = 'i', default_value_t = 0)]
    pub iov_gap: usize,
    /// UCP tag tests: receive with a wildcard tag (mask 0).
    #[arg(short = 'C')]
    pub wildcard: bool,
    /// UCP tag tests: force the unexpected path (receive only a message a probe found).
    #[arg(short = 'U')]
    pub unexpected: bool,
    /// UCP tag tests: send a pattern and check every received message.
    #[arg(long = "validate")]
    pub validate: bool,
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
        for n in self.msg_sizes()? {
            total = total.checked_add(n).ok_or("message size overflows")?;
        }
        Ok(total)
    }

    /// The scatter-gather list of `-s`, in order.
    pub fn msg_sizes(&self) -> Result<Vec<usize>, String> {
        self.size
            .split(',')
            .map(|part| {
                ucs::config::parse_size(part)
                    .filter(|&n| n != usize::MAX)
                    .ok_or_else(|| format!("bad size '{part}' in -s {}", self.size))
            })
            .collect()
    }

    /// The send and receive data layouts of a UCP test (`-D SEND[,RECV]`).
    pub fn ucp_layouts(&self) -> Result<(Dt, Dt), String> {
        let s = self.layout.as_deref().unwrap_or("contig");
        let one = |w: &str| match w.trim() {
            "contig" => Ok(Dt::Contig),
            "iov" => Ok(Dt::Iov),
            o => Err(format!(
                "layout '{o}' is not supported by UCP tests (-D contig|iov[,contig|iov])"
            )),
        };
        let mut words = s.split(',');
        let send = one(words.next().unwrap_or_default())?;
        let recv = words.next().map(one).transpose()?.unwrap_or(send);
        if words.next().is_some() {
            return Err(format!("-D {s}: at most a send and a receive layout"));
        }
        Ok((send, recv))
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
        if let Some(l) = &self.layout {
            opt("-D", l.clone());
        }
        opt("-s", self.size.clone());
        opt("-n", self.iters().to_string());
        opt("-w", self.warmup.to_string());
        opt("-R", self.rank.to_string());
        opt("-O", self.outstanding.to_string());
        opt("-i", self.iov_gap.to_string());
        for (on, flag) in [
            (self.final_only, "-f"),
            (self.csv, "-v"),
            (self.wildcard, "-C"),
            (self.unexpected, "-U"),
            (self.validate, "--validate"),
        ] {
            if on {
                v.push(flag.into());
            }
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

/// How a UCP test lays out a message in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dt {
    /// One contiguous buffer.
    Contig,
    /// The `-s` entries as an iov list, back to back in one buffer.
    Iov,
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
        assert_eq!(b.layout, None);
        assert!(!(b.wildcard || b.unexpected || b.validate));
    }

    #[test]
    fn ucp_options_round_trip() {
        let a = Args::try_parse_from([
            "p",
            "host",
            "-t",
            "tag_bw",
            "-D",
            "iov,contig",
            "-s",
            "1000,2k",
            "-O",
            "4",
            "-C",
            "-U",
            "--validate",
        ])
        .unwrap();
        let mut argv = vec!["p".to_string()];
        argv.extend(a.to_server_argv());
        let b = Args::try_parse_from(&argv).unwrap();
        assert_eq!(b.ucp_layouts(), Ok((Dt::Iov, Dt::Contig)));
        assert_eq!(b.msg_sizes(), Ok(vec![1000, 2048]));
        assert_eq!(b.msg_size(), Ok(3048));
        assert_eq!(b.outstanding, 4);
        assert!(b.wildcard && b.unexpected && b.validate);
    }

    #[test]
    fn ucp_layouts() {
        let parse = |d: Option<&str>| {
            let mut v = vec!["p"];
            if let Some(d) = d {
                v.extend(["-D", d]);
            }
            Args::try_parse_from(v).unwrap().ucp_layouts()
        };
        assert_eq!(parse(None), Ok((Dt::Contig, Dt::Contig)));
        assert_eq!(parse(Some("iov")), Ok((Dt::Iov, Dt::Iov)));
        assert_eq!(parse(Some("contig,iov")), Ok((Dt::Contig, Dt::Iov)));
        assert!(parse(Some("short")).unwrap_err().contains("not supported"));
        assert!(parse(Some("iov,iov,iov")).is_err());
        assert!(parse(Some("iov,")).is_err());
    }

    #[test]
    fn bad_sizes_are_errors() {
        let a = Args::try_parse_from(["p", "-s", "8,x"]).unwrap();
        assert!(a.msg_size().unwrap_err().contains("bad size"));
        let a = Args::try_parse_from(["p", "-s", "inf"]).unwrap();
        assert!(a.msg_sizes().is_err());
        let a = Args::try_parse_from(["p", "-s", "8,,8"]).unwrap();
        assert!(a.msg_sizes().is_err());
        assert!(Args::try_parse_from(["p", "-n", "many"]).is_err());
    }
}
