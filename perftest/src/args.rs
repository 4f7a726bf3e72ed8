//! Command line, with `ucx_perftest`'s option letters and meanings, plus Rucx's own long
//! options (`--loopback`, `--json`, `--plot`, `--compare-ucx`, `--validate`).
//!
//! `-s` takes `ucx_perftest`'s scatter-gather list (`-s 16,48,8192`, with the compact
//! `SIZE:COUNT` form: `-s 1024:16` is sixteen 1024-byte entries) or a size sweep
//! `FROM..TO[:xFACTOR]` (`-s 8..4M` is every power of two from 8 B to 4 MiB; `:x4` steps
//! by four instead). `-D` takes `contig`, `iov` or a named application layout
//! (`milc:16`, `nas_mg_y:64`, ...; see `ucp::dt::apps`), for the sender and optionally the
//! receiver.

use std::path::PathBuf;
use std::sync::Arc;

use clap::Parser;

/// Measure Rucx point-to-point performance (ucx_perftest-compatible command line).
#[derive(Parser, Debug, Clone)]
#[command(name = "rucx-perftest", disable_help_flag = true)]
pub struct Args {
    /// Server address: with it this process is the client; without it, the server.
    pub server: Option<String>,
    /// Test to run. UCT (-x TRANSPORT -d DEVICE): am_lat, am_bw, put_lat, put_bw, get.
    /// UCP (transports from UCX_TLS / UCX_NET_DEVICES): tag_lat, tag_bw, tag_sync_lat,
    /// tag_sync_bw, ucp_put_lat, ucp_put_bw, ucp_get, ucp_add, ucp_fadd, ucp_swap,
    /// ucp_cswap, stream_lat, stream_bw, ucp_am_lat, ucp_am_bw. Without it, `--loopback`
    /// runs the default suite (tag_lat and tag_bw over a size sweep); `--loopback -t
    /// am_lat` (or am_bw) without -x sweeps every UCT transport.
    #[arg(short = 't')]
    pub test: Option<String>,
    /// Transport for UCT-level tests.
    #[arg(short = 'x')]
    pub tl: Option<String>,
    /// Device for UCT-level tests.
    #[arg(short = 'd')]
    pub device: Option<String>,
    /// Data layout. UCT tests: short (default for AM), bcopy, zcopy (put and get). UCP
    /// tests: SEND[,RECV], each contig (default), iov (the `-s` list as scatter-gather
    /// entries) or a named application layout NAME[:PARAMS] (tag tests; the message size
    /// then comes from the layout); RECV defaults to SEND.
    #[arg(short = 'D')]
    pub layout: Option<String>,
    /// Message size: a scatter-gather list (`8`, `16,48,8k`, `1024:16`) or a sweep
    /// (`8..4M`, `8..4M:x4`). Default 8.
    #[arg(short = 's')]
    pub size: Option<String>,
    /// Measured iterations (default 1000000; 100000 per case in the default suite).
    #[arg(short = 'n')]
    pub iters: Option<u64>,
    /// Warm-up iterations.
    #[arg(short = 'w', default_value_t = 10_000)]
    pub warmup: u64,
    /// Pin to this CPU (first of a comma-separated list; `--loopback -c A,B`: client on A,
    /// server on B).
    #[arg(short = 'c')]
    pub cpus: Option<String>,
    /// Port of the out-of-band connection.
    #[arg(short = 'p', default_value_t = 13337)]
    pub port: u16,
    /// Percentile rank for the latency column.
    #[arg(short = 'R', default_value_t = 50.0)]
    pub rank: f64,
    /// Memory type of the send and receive buffers: SEND[,RECV] of `host` (default),
    /// `cuda`, `cuda-managed`.
    #[arg(short = 'm')]
    pub mem: Option<String>,
    /// GPU of the send and receive buffers, as ucx_perftest: SEND[,RECV] of `cuda[:N]`
    /// (device 0 when N is left out).
    #[arg(short = 'a')]
    pub accel: Option<String>,
    /// Print only the final numbers (after the header, as ucx_perftest).
    #[arg(short = 'f')]
    pub final_only: bool,
    /// CSV output.
    #[arg(short = 'v')]
    pub csv: bool,
    /// Numeric formatting: thousands separators in the iteration and rate columns.
    #[arg(short = 'N')]
    pub numeric: bool,
    /// Most outstanding operations in streaming tests (and receives posted); 0: the
    /// test's default, as ucx_perftest (32 for tag_bw, tag_sync_bw, ucp_put_bw and
    /// ucp_am_bw; 1 for the others).
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
    /// UCP tag tests: send a pattern and check every received message (with a named
    /// layout: its packed bytes).
    #[arg(long = "validate")]
    pub validate: bool,
    /// UCP tests: allocate message buffers on the heap, as a program using malloc does,
    /// instead of through the worker (`mem_map`, as ucx_perftest uses `ucp_mem_map`;
    /// same-host rendezvous between such buffers is a plain copy).
    #[arg(long = "heap-buffers")]
    pub heap_buffers: bool,
    /// Start the server as a child process on this host and run against it.
    #[arg(long = "loopback")]
    pub loopback: bool,
    /// Write the results as JSON to this file (`-`: to stdout, instead of the table).
    #[arg(long = "json", value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Draw latency and bandwidth against message size as an SVG (for a sweep).
    #[arg(long = "plot", value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// After each run, run this ucx_perftest with the same options and print both rows
    /// and the ratio Rucx / UCX.
    #[arg(long = "compare-ucx", value_name = "PATH")]
    pub compare_ucx: Option<String>,
    /// Name of this run's line in `--json` and `--plot` (default: the test and transports).
    #[arg(long = "label")]
    pub label: Option<String>,
    /// Add the runs of an earlier `--json` file to `--plot` (repeatable). Without a test
    /// and `--loopback` or an address, only draws them.
    #[arg(long = "from", value_name = "FILE.json")]
    pub from: Vec<PathBuf>,
    /// Set for the second and later runs of a sweep under `-f`: one table header is
    /// enough.
    #[arg(skip)]
    pub no_header: bool,
    /// Which run of how many this is (a sweep, or the default suite), for the progress bar.
    #[arg(skip)]
    pub sweep_pos: Option<(usize, usize)>,
    /// Print help.
    #[arg(short = 'h', long = "help", action = clap::ArgAction::Help)]
    pub help: Option<bool>,
}

/// The UCT-level tests.
pub const UCT_TESTS: &[&str] = &["am_lat", "am_bw", "put_lat", "put_bw", "get"];

/// Most scatter-gather entries handed to `ucx_perftest` (one command-line word).
const MAX_UCX_ENTRIES: usize = 4096;

/// Largest sweep (sizes in one `-s FROM..TO`).
const MAX_SWEEP: usize = 64;

impl Args {
    /// Parses the process's command line; `--help` ends with the named layouts.
    pub fn parse_cli() -> Result<Args, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let mut help = String::from(
            "Named layouts for -D (ucp::dt::apps; aliases milc, specfem, stencil, wrf_x, wrf_y):\n",
        );
        for (name, what) in ucp::dt::apps::list() {
            help.push_str(&format!("  {name:<15} {what}\n"));
        }
        help.push_str(
            "\nSee docs/perftest.md for the tests, the output formats, --json and --plot.",
        );
        let m = Args::command().after_help(help).try_get_matches()?;
        let mut a = Args::from_arg_matches(&m)?;
        a.cap_warmup();
        Ok(a)
    }

    /// Warm-up is at most a tenth of the measured iterations, as in `ucx_perftest`: the
    /// default 10 000 would otherwise dwarf a short run of large messages (`-n 50 -s 4M`
    /// moved 40 GB before measuring anything).
    pub fn cap_warmup(&mut self) {
        self.warmup = self.warmup.min(self.iters() / 10);
    }

    pub fn test(&self) -> &str {
        self.test.as_deref().unwrap_or("am_lat")
    }

    pub fn iters(&self) -> u64 {
        self.iters.unwrap_or(1_000_000)
    }

    /// The `-s` argument as given, or the default.
    pub fn size_arg(&self) -> &str {
        self.size.as_deref().unwrap_or("8")
    }

    /// The message size: the sum of the scatter-gather list.
    pub fn msg_size(&self) -> Result<usize, String> {
        let mut total = 0usize;
        for n in self.msg_sizes()? {
            total = total.checked_add(n).ok_or("message size overflows")?;
        }
        Ok(total)
    }

    /// Bytes in one message: the layout's size for a UCP test with a named layout, else
    /// the sum of the `-s` list.
    pub fn message_bytes(&self) -> Result<usize, String> {
        if !UCT_TESTS.contains(&self.test()) && self.layout.is_some() {
            let (s, r) = self.ucp_layouts()?;
            for d in [s, r] {
                if let Dt::Named(n) = d {
                    return Ok(n.size);
                }
            }
        }
        self.msg_size()
    }

    /// Bytes of message buffers one process of this run allocates, at most: a send and a
    /// receive buffer with the iov gaps between entries, one pair per message in flight
    /// when `--validate` keeps them apart. Checked against the machine before anything is
    /// allocated.
    pub fn buffer_bytes(&self) -> Result<u128, String> {
        let msg = self.message_bytes()? as u128;
        let parts = self.msg_sizes().map_or(1, |v| v.len()) as u128;
        let gaps = self.iov_gap as u128 * parts.saturating_sub(1);
        // A named layout's buffer is the application's arrays, not the message.
        let side = |d: &Dt| match d {
            Dt::Named(n) => n.buf_len as u128,
            _ => msg + gaps,
        };
        let pair = if !UCT_TESTS.contains(&self.test()) && self.layout.is_some() {
            let (s, r) = self.ucp_layouts()?;
            side(&s) + side(&r)
        } else {
            2 * (msg + gaps)
        };
        let slots = if self.validate {
            u128::from(self.outstanding.max(32))
        } else {
            1
        };
        Ok(pair * slots)
    }

    /// The scatter-gather list of `-s`, in order (`SIZE:COUNT` expanded). A sweep is an
    /// error here: [`Args::runs`] expands it first.
    pub fn msg_sizes(&self) -> Result<Vec<usize>, String> {
        let s = self.size_arg();
        if s.contains("..") {
            return Err(format!("-s {s}: a sweep cannot be a scatter-gather list"));
        }
        let mut out = Vec::new();
        for part in s.split(',') {
            let bad = || format!("bad size '{part}' in -s {s}");
            let (size, count) = match part.split_once(':') {
                Some((a, b)) => (
                    a,
                    b.trim()
                        .parse::<usize>()
                        .ok()
                        .filter(|&c| c > 0)
                        .ok_or_else(bad)?,
                ),
                None => (part, 1),
            };
            let n = parse_size(size).ok_or_else(bad)?;
            if out.len() + count > 1 << 20 {
                return Err(format!("-s {s}: more than 2^20 scatter-gather entries"));
            }
            out.extend(std::iter::repeat_n(n, count));
        }
        Ok(out)
    }

    /// The sizes of a sweep (`FROM..TO[:xFACTOR]`), or `None` when `-s` is not one.
    pub fn sweep(&self) -> Result<Option<Vec<usize>>, String> {
        let s = self.size_arg();
        let Some((from, rest)) = s.split_once("..") else {
            return Ok(None);
        };
        let bad =
            |what: &str| format!("bad sweep '-s {s}': {what} (FROM..TO[:xFACTOR], e.g. 8..4M)");
        let (to, factor) = match rest.split_once(':') {
            Some((to, f)) => {
                let f = f
                    .trim()
                    .strip_prefix(['x', 'X', '*'])
                    .ok_or_else(|| bad("the step is written xFACTOR"))?;
                let f: usize = f.parse().map_err(|_| bad("the factor is not a number"))?;
                (to, f)
            }
            None => (rest, 2),
        };
        let from = parse_size(from).ok_or_else(|| bad("bad first size"))?;
        let to = parse_size(to).ok_or_else(|| bad("bad last size"))?;
        if from == 0 || from > to {
            return Err(bad("sizes must grow from at least 1 byte"));
        }
        if factor < 2 {
            return Err(bad("the factor must be at least 2"));
        }
        let mut v = vec![from];
        let mut cur = from;
        while let Some(next) = cur.checked_mul(factor).filter(|&n| n <= to) {
            v.push(next);
            cur = next;
            if v.len() > MAX_SWEEP {
                return Err(bad("more than 64 sizes"));
            }
        }
        if *v.last().unwrap_or(&0) != to {
            // The last size is always measured, even off the geometric grid.
            v.push(to);
        }
        Ok(Some(v))
    }

    /// The runs this command line stands for: one, or one per size of a sweep (each with
    /// `-s` set to that size). Both ends expand the same command line the same way.
    pub fn runs(&self) -> Result<Vec<Args>, String> {
        match self.sweep()? {
            None => Ok(vec![self.clone()]),
            Some(sizes) => Ok(sizes
                .into_iter()
                .map(|n| {
                    let mut a = self.clone();
                    a.size = Some(n.to_string());
                    a
                })
                .collect()),
        }
    }

    /// The send and receive data layouts of a UCP test (`-D SEND[,RECV]`).
    pub fn ucp_layouts(&self) -> Result<(Dt, Dt), String> {
        let s = self.layout.as_deref().unwrap_or("contig");
        let items = split_layouts(s)?;
        let send = Dt::parse(&items[0])?;
        let recv = match items.get(1) {
            Some(r) => Dt::parse(r)?,
            None => send.clone(),
        };
        if items.len() > 2 {
            return Err(format!("-D {s}: at most a send and a receive layout"));
        }
        Ok((send, recv))
    }

    /// The memory type and GPU of the send and the receive buffers (`-m`, `-a`).
    pub fn mem_spec(&self) -> Result<(crate::mem::MemSpec, crate::mem::MemSpec), String> {
        use ucs::memtype::MemoryType;
        let pair =
            |v: &Option<String>, opt: &str| -> Result<(Option<String>, Option<String>), String> {
                let Some(m) = v.as_deref() else {
                    return Ok((None, None));
                };
                let words: Vec<&str> = m.split(',').map(str::trim).collect();
                if words.len() > 2 || words.iter().any(|w| w.is_empty()) {
                    return Err(format!("{opt} {m}: a send and at most one receive value"));
                }
                let send = words[0].to_string();
                let recv = words.get(1).map_or(send.clone(), |w| w.to_string());
                Ok((Some(send), Some(recv)))
            };
        let (ms, mr) = pair(&self.mem, "-m")?;
        let (as_, ar) = pair(&self.accel, "-a")?;
        let mem = |w: Option<String>| -> Result<MemoryType, String> {
            match w.as_deref() {
                None => Ok(MemoryType::Host),
                Some(w) => MemoryType::parse(w).ok_or_else(|| match w {
                    "rocm" | "rocm-managed" | "ze-host" | "ze-device" | "ze-managed" | "rdma"
                    | "gaudi" => {
                        format!("memory type '{w}' is not supported (host, cuda, cuda-managed)")
                    }
                    o => format!("unknown memory type '{o}' in -m (host, cuda, cuda-managed)"),
                }),
            }
        };
        let dev = |w: Option<String>| -> Result<i32, String> {
            match w.as_deref() {
                None | Some("cuda") => Ok(0),
                Some(w) => match w.strip_prefix("cuda:").map(str::parse::<i32>) {
                    Some(Ok(n)) if n >= 0 => Ok(n),
                    _ => Err(format!("-a {w}: expected cuda or cuda:N")),
                },
            }
        };
        Ok(((mem(ms)?, dev(as_)?), (mem(mr)?, dev(ar)?)))
    }

    /// Checks options that every test shares.
    pub fn check_common(&self) -> Result<(), String> {
        if self.iters == Some(0) {
            return Err("-n 0: a run needs at least one measured iteration".into());
        }
        self.mem_spec()?;
        self.cpu()?;
        if !(0.0..=100.0).contains(&self.rank) {
            return Err(format!("-R {}: a percentile rank is 0..100", self.rank));
        }
        self.sweep()?;
        Ok(())
    }

    /// The output format of this process's rows.
    pub fn format(&self) -> crate::report::Format {
        crate::report::Format {
            rank: self.rank,
            final_only: self.final_only,
            csv: self.csv,
            numeric: self.numeric,
            quiet: self.json.as_deref() == Some(std::path::Path::new("-")),
            no_header: self.no_header,
            iters: self.iters(),
            progress: self.server.is_some() || self.loopback,
            sweep: self.sweep_pos,
        }
    }

    /// The options the server needs to run the same test, as command-line words (the
    /// address, port, CPU list, `--loopback` and the client's outputs stay with the client).
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
        if let Some(s) = &self.size {
            opt("-s", s.clone());
        }
        if let Some(m) = &self.mem {
            opt("-m", m.clone());
        }
        if let Some(a) = &self.accel {
            opt("-a", a.clone());
        }
        opt("-n", self.iters().to_string());
        opt("-w", self.warmup.to_string());
        opt("-R", self.rank.to_string());
        opt("-O", self.outstanding.to_string());
        opt("-i", self.iov_gap.to_string());
        for (on, flag) in [
            (self.final_only, "-f"),
            (self.csv, "-v"),
            (self.numeric, "-N"),
            (self.wildcard, "-C"),
            (self.unexpected, "-U"),
            (self.validate, "--validate"),
            (self.heap_buffers, "--heap-buffers"),
        ] {
            if on {
                v.push(flag.into());
            }
        }
        v
    }

    /// The options `ucx_perftest` understands, for `--compare-ucx` (this run's single
    /// size; no address or port). Fails for what it cannot run the same way.
    pub fn to_ucx_argv(&self) -> Result<Vec<String>, String> {
        let mut v = Vec::new();
        let mut opt = |flag: &str, val: String| {
            v.push(flag.to_string());
            v.push(val);
        };
        let test = self.test();
        opt("-t", test.to_string());
        if let Some(x) = &self.tl {
            opt("-x", x.clone());
            // ucx_perftest needs the device; ours defaults to the transport's first.
            let dev = match &self.device {
                Some(d) => d.clone(),
                None => {
                    let cfg = ucs::Config::from_env().map_err(|e| e.to_string())?;
                    uct::discover(&cfg)
                        .available
                        .into_iter()
                        .find(|r| r.tl == x.as_str())
                        .map(|r| r.device)
                        .ok_or_else(|| format!("-x {x}: no such transport here"))?
                }
            };
            opt("-d", dev);
        }
        if UCT_TESTS.contains(&test) && self.layout.is_none() && !test.starts_with("am_") {
            // Ours are zero-copy; ucx_perftest's default (short) is another operation.
            opt("-D", "zcopy".to_string());
        }
        if let Some(l) = &self.layout {
            if UCT_TESTS.contains(&test) {
                opt("-D", l.clone());
            } else {
                let (s, r) = self.ucp_layouts()?;
                if matches!(s, Dt::Named(_)) || matches!(r, Dt::Named(_)) {
                    return Err(format!(
                        "-D {l}: ucx_perftest has no application layouts (see contrib/bench/ompi-layouts.sh)"
                    ));
                }
                opt("-D", l.clone());
            }
        }
        // In bytes: ucx_perftest reads no size suffixes (given "1k" it runs 1 byte).
        let sizes: Vec<String> = self.msg_sizes()?.iter().map(usize::to_string).collect();
        if sizes.len() > MAX_UCX_ENTRIES {
            return Err(format!(
                "-s {}: {} scatter-gather entries are more than ucx_perftest is given here ({MAX_UCX_ENTRIES})",
                self.size_arg(),
                sizes.len()
            ));
        }
        opt("-s", sizes.join(","));
        if let Some(m) = &self.mem {
            opt("-m", m.clone());
        }
        if let Some(a) = &self.accel {
            opt("-a", a.clone());
        }
        opt("-n", self.iters().to_string());
        opt("-w", self.warmup.to_string());
        opt("-R", format!("{:.1}", self.rank));
        if self.outstanding > 0 {
            opt("-O", self.outstanding.to_string());
        }
        if self.iov_gap > 0 {
            opt("-i", self.iov_gap.to_string());
        }
        for (on, flag) in [(self.wildcard, "-C"), (self.unexpected, "-U")] {
            if on {
                v.push(flag.into());
            }
        }
        Ok(v)
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

/// `ucs::config::parse_size` without `inf`.
fn parse_size(s: &str) -> Option<usize> {
    ucs::config::parse_size(s).filter(|&n| n != usize::MAX)
}

/// How a UCP test lays out a message in memory.
#[derive(Clone, Debug)]
pub enum Dt {
    /// One contiguous buffer.
    Contig,
    /// The `-s` entries as an iov list, back to back in one buffer.
    Iov,
    /// A named application layout over its buffer.
    Named(Arc<NamedDt>),
}

impl PartialEq for Dt {
    fn eq(&self, other: &Dt) -> bool {
        match (self, other) {
            (Dt::Contig, Dt::Contig) | (Dt::Iov, Dt::Iov) => true,
            (Dt::Named(a), Dt::Named(b)) => a.spec == b.spec,
            _ => false,
        }
    }
}

/// A named application layout, compiled (`ucp::dt::apps`).
#[derive(Debug)]
pub struct NamedDt {
    /// The spec with every parameter spelled out.
    pub spec: String,
    pub description: String,
    /// The layout (its canonical form packs and unpacks for validation).
    pub layout: ucp::dt::Layout,
    /// The layout compiled for communication.
    pub dt: Arc<ucp::datatype::DtLayout>,
    /// Bytes of buffer the layout addresses from its start.
    pub buf_len: usize,
    /// Bytes of data (the message size).
    pub size: usize,
}

/// Short names accepted for the application layouts.
const ALIASES: &[(&str, &str)] = &[
    ("milc", "milc_su3_zd"),
    ("specfem", "specfem3d_cm"),
    ("specfem3d", "specfem3d_cm"),
    ("stencil", "stencil3d_face"),
    ("stencil3d", "stencil3d_face"),
    ("wrf_x", "wrf_x_vec"),
    ("wrf_y", "wrf_y_vec"),
];

/// The layout name an `-D` item starts with, resolved through the aliases, if it is one.
fn layout_name(item: &str) -> Option<&'static str> {
    let name = item
        .split(':')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if let Some((_, full)) = ALIASES.iter().find(|(a, _)| *a == name) {
        return Some(full);
    }
    ucp::dt::apps::list()
        .iter()
        .map(|(n, _)| *n)
        .find(|n| *n == name)
}

/// Splits `-D`'s value into the send and receive items. Layout parameters contain commas
/// (`wrf_x_vec:32,65`), so a comma starts a new item only before `contig`, `iov` or a
/// layout name.
fn split_layouts(s: &str) -> Result<Vec<String>, String> {
    let mut items: Vec<String> = Vec::new();
    for tok in s.split(',') {
        let t = tok.trim();
        let starts_item = matches!(t, "contig" | "iov") || layout_name(t).is_some();
        match items.last_mut() {
            Some(last) if !starts_item && last.contains(':') => {
                last.push(',');
                last.push_str(t);
            }
            _ => items.push(t.to_string()),
        }
    }
    if items.iter().any(String::is_empty) {
        return Err(format!("-D {s}: empty layout"));
    }
    Ok(items)
}

/// The byte each offset of a layout's buffer holds when its fingerprint is taken (the
/// same function as `contrib/bench/ompi-layouts.c`).
pub fn fingerprint_byte(i: u64) -> u8 {
    ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8
}

/// FNV-1a, 64 bits.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

impl NamedDt {
    /// What an MPI program building the same datatype can check, as `key=value` words:
    /// size, lb and extent, true bounds, the number of contiguous blocks in address order
    /// (adjacent pieces merged), and a fingerprint of the packed bytes (FNV-1a 64 of the
    /// layout packed from a buffer whose byte `i` is [`fingerprint_byte`]`(i)`: equal
    /// fingerprints mean the same bytes in the same order).
    pub fn facts(&self) -> String {
        let l = &self.layout;
        let (tlb, tub) = l.true_bounds().unwrap_or((0, 0));
        let blocks = l
            .canonical()
            .and_then(|c| c.segments(1 << 24))
            .map(|mut v| {
                v.sort_by_key(|s| s.offset);
                ucp::dt::merge_segments(&v).len().to_string()
            })
            .unwrap_or_else(|e| format!("({e})"));
        let src: Vec<u8> = (0..self.buf_len as u64).map(fingerprint_byte).collect();
        let mut packed = vec![0u8; self.size];
        let fnv = match l
            .canonical()
            .map(|c| ucp::dt::pack(c, &src, 0, &mut packed))
        {
            Ok(Ok(_)) => format!("{:016x}", fnv1a64(&packed)),
            _ => "none".into(),
        };
        format!(
            "size={} lb={} extent={} true_lb={tlb} true_ub={tub} blocks={blocks} fnv={fnv}",
            self.size,
            l.lb(),
            l.extent()
        )
    }
}

impl Dt {
    /// One `-D` item: `contig`, `iov` or `NAME[:PARAMS]`.
    fn parse(item: &str) -> Result<Dt, String> {
        match item {
            "contig" => return Ok(Dt::Contig),
            "iov" => return Ok(Dt::Iov),
            _ => {}
        }
        let Some(name) = layout_name(item) else {
            let known: Vec<&str> = ucp::dt::apps::list().iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "layout '{item}' is not supported by UCP tests (contig, iov, or a named layout: {}; aliases milc, specfem, stencil, wrf_x, wrf_y)",
                known.join(", ")
            ));
        };
        let spec = match item.split_once(':') {
            Some((_, p)) => format!("{name}:{p}"),
            None => name.to_string(),
        };
        let nl = ucp::dt::apps::named(&spec).map_err(|e| format!("-D {item}: {e}"))?;
        let dt = ucp::datatype::DtLayout::new(&nl.layout).map_err(|e| format!("-D {item}: {e}"))?;
        match nl.layout.true_bounds() {
            Some((lo, hi)) if lo >= 0 && hi as u64 <= nl.buf_len as u64 => {}
            None => {}
            _ => return Err(format!("-D {item}: the layout leaves its buffer")),
        }
        let size =
            usize::try_from(nl.layout.size()).map_err(|_| format!("-D {item}: too large"))?;
        if size == 0 {
            return Err(format!("-D {item}: the layout has no data"));
        }
        Ok(Dt::Named(Arc::new(NamedDt {
            spec: nl.spec,
            description: nl.description,
            layout: nl.layout,
            dt,
            buf_len: nl.buf_len,
            size,
        })))
    }

    /// A short name for output (`contig`, `iov`, or the layout's full spec).
    pub fn name(&self) -> String {
        match self {
            Dt::Contig => "contig".into(),
            Dt::Iov => "iov".into(),
            Dt::Named(n) => n.spec.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: &[&str]) -> Args {
        let mut argv = vec!["p"];
        argv.extend(v);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn warmup_is_at_most_a_tenth_of_the_run() {
        for (argv, want) in [
            (&["-n", "50", "-s", "4194304"][..], 5),
            (&["-n", "5"][..], 0),
            (&["-n", "1000", "-w", "20"][..], 20),
            (&[][..], 10_000),
        ] {
            let mut a = parse(argv);
            a.cap_warmup();
            assert_eq!(a.warmup, want, "{argv:?}");
        }
    }

    #[test]
    fn server_argv_round_trips() {
        let a = parse(&[
            "host", "-t", "am_bw", "-x", "tcp", "-d", "lo", "-s", "8,16", "-n", "5", "-c", "1",
            "-f", "-N", "-m", "host",
        ]);
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
        assert!(b.numeric && b.mem.as_deref() == Some("host"));
        assert_eq!(b.layout, None);
        assert!(!(b.wildcard || b.unexpected || b.validate));
    }

    #[test]
    fn ucp_options_round_trip() {
        let a = parse(&[
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
            "--json",
            "x.json",
        ]);
        let mut argv = vec!["p".to_string()];
        argv.extend(a.to_server_argv());
        let b = Args::try_parse_from(&argv).unwrap();
        assert_eq!(b.ucp_layouts(), Ok((Dt::Iov, Dt::Contig)));
        assert_eq!(b.msg_sizes(), Ok(vec![1000, 2048]));
        assert_eq!(b.msg_size(), Ok(3048));
        assert_eq!(b.outstanding, 4);
        assert!(b.wildcard && b.unexpected && b.validate);
        assert_eq!(b.json, None, "outputs stay with the client");
    }

    #[test]
    fn ucp_layouts() {
        let layouts = |d: Option<&str>| {
            let mut v = vec![];
            if let Some(d) = d {
                v.extend(["-D", d]);
            }
            parse(&v).ucp_layouts()
        };
        assert_eq!(layouts(None), Ok((Dt::Contig, Dt::Contig)));
        assert_eq!(layouts(Some("iov")), Ok((Dt::Iov, Dt::Iov)));
        assert_eq!(layouts(Some("contig,iov")), Ok((Dt::Contig, Dt::Iov)));
        assert!(layouts(Some("short"))
            .unwrap_err()
            .contains("not supported"));
        assert!(layouts(Some("iov,iov,iov")).is_err());
        assert!(layouts(Some("iov,")).is_err());
    }

    #[test]
    fn named_layouts_with_commas_and_aliases() {
        let l = |d: &str| parse(&["-D", d]).ucp_layouts();
        let (s, r) = l("milc:4").unwrap();
        let Dt::Named(n) = &s else { panic!("{s:?}") };
        assert_eq!(n.spec, "milc_su3_zd:4x4x4x4");
        assert_eq!(n.size, 24 * 4 * 4 * 4);
        assert_eq!(s, r);
        let (s, r) = l("wrf_x_vec:8,5,contig").unwrap();
        assert!(
            matches!(&s, Dt::Named(n) if n.spec == "wrf_x_vec:8,5"),
            "{s:?}"
        );
        assert_eq!(r, Dt::Contig);
        let (s, r) = l("contig,stencil:8,y,2").unwrap();
        assert_eq!(s, Dt::Contig);
        assert!(
            matches!(&r, Dt::Named(n) if n.spec == "stencil3d_face:8x8x8,y,2"),
            "{r:?}"
        );
        let (s, r) = l("NAS_MG_Y:16,nas_mg_y:16").unwrap();
        assert_eq!(s, r);
        assert!(l("milc:3").unwrap_err().contains("even"));
        assert!(l("nope:3").unwrap_err().contains("not supported"));
        assert!(l("specfem3d_cm:c9").is_err());
        // A vector of 8 rows of 16 doubles, 180 doubles apart, placed at byte 2600.
        let (s, _) = l("nas_mg_y:8").unwrap();
        let Dt::Named(n) = &s else { panic!() };
        let f = n.facts();
        assert!(
            f.starts_with(
                "size=1024 lb=2600 extent=10208 true_lb=2600 true_ub=12808 blocks=8 fnv="
            ),
            "{f}"
        );
    }

    #[test]
    fn sizes_lists_compact_and_sweeps() {
        let a = parse(&["-s", "1024:3,8"]);
        assert_eq!(a.msg_sizes(), Ok(vec![1024, 1024, 1024, 8]));
        assert_eq!(a.sweep(), Ok(None));
        let a = parse(&["-s", "8..64"]);
        assert_eq!(a.sweep(), Ok(Some(vec![8, 16, 32, 64])));
        assert!(a.msg_sizes().is_err());
        let runs = a.runs().unwrap();
        assert_eq!(runs.len(), 4);
        assert_eq!(runs[3].msg_size(), Ok(64));
        let a = parse(&["-s", "8..4M:x4"]);
        let v = a.sweep().unwrap().unwrap();
        assert_eq!((v[0], v[1], *v.last().unwrap()), (8, 32, 4 << 20));
        assert_eq!(v.len(), 11, "{v:?}");
        assert_eq!(
            parse(&["-s", "1k..3k"]).sweep(),
            Ok(Some(vec![1024, 2048, 3072]))
        );
        for bad in ["8..4", "0..8", "8..x", "8..64:x1", "8..64:4", "8..64:x"] {
            assert!(parse(&["-s", bad]).sweep().is_err(), "{bad}");
        }
    }

    #[test]
    fn bad_sizes_are_errors() {
        assert!(parse(&["-s", "8,x"])
            .msg_size()
            .unwrap_err()
            .contains("bad size"));
        assert!(parse(&["-s", "inf"]).msg_sizes().is_err());
        assert!(parse(&["-s", "8,,8"]).msg_sizes().is_err());
        assert!(parse(&["-s", "8:0"]).msg_sizes().is_err());
        assert!(parse(&["-s", "8:x"]).msg_sizes().is_err());
        assert!(Args::try_parse_from(["p", "-n", "many"]).is_err());
    }

    #[test]
    fn memory_types() {
        use ucs::memtype::MemoryType::{Cuda, CudaManaged, Host};
        assert_eq!(parse(&[]).mem_spec(), Ok(((Host, 0), (Host, 0))));
        assert_eq!(
            parse(&["-m", "host,host"]).mem_spec(),
            Ok(((Host, 0), (Host, 0)))
        );
        assert_eq!(
            parse(&["-m", "cuda"]).mem_spec(),
            Ok(((Cuda, 0), (Cuda, 0)))
        );
        assert_eq!(
            parse(&["-m", "cuda,host", "-a", "cuda:1"]).mem_spec(),
            Ok(((Cuda, 1), (Host, 1)))
        );
        assert_eq!(
            parse(&["-m", "host,cuda-managed", "-a", "cuda:0,cuda:3"]).mem_spec(),
            Ok(((Host, 0), (CudaManaged, 3)))
        );
        assert!(parse(&["-m", "rocm"])
            .mem_spec()
            .unwrap_err()
            .contains("not supported"));
        assert!(parse(&["-m", "disk"])
            .mem_spec()
            .unwrap_err()
            .contains("unknown"));
        assert!(parse(&["-m", "cuda,cuda,cuda"]).mem_spec().is_err());
        assert!(parse(&["-a", "cuda:x"]).mem_spec().is_err());
        assert!(parse(&["-a", "gpu:1"]).mem_spec().is_err());
    }

    #[test]
    fn ucx_argv_keeps_ucx_options_only() {
        let a = parse(&[
            "--loopback",
            "-t",
            "tag_lat",
            "-s",
            "64",
            "-n",
            "100",
            "-C",
            "--validate",
            "--plot",
            "x.svg",
        ]);
        let v = a.to_ucx_argv().unwrap();
        assert_eq!(v.join(" "), "-t tag_lat -s 64 -n 100 -w 10000 -R 50.0 -C");
        assert!(parse(&["-t", "tag_lat", "-D", "milc:4"])
            .to_ucx_argv()
            .is_err());
    }

    #[test]
    fn zero_iterations_are_refused_and_buffers_are_counted() {
        let e = parse(&["-t", "tag_lat", "-n", "0"])
            .check_common()
            .unwrap_err();
        assert!(e.contains("-n 0"), "{e}");
        assert!(parse(&["-t", "tag_lat", "-n", "1"]).check_common().is_ok());
        // A send and a receive buffer; iov gaps between entries; one pair per message in
        // flight under --validate; a named layout's whole arrays.
        assert_eq!(
            parse(&["-t", "tag_lat", "-s", "1m"]).buffer_bytes(),
            Ok(2 << 20)
        );
        assert_eq!(
            parse(&["-t", "tag_lat", "-D", "iov", "-s", "8:4", "-i", "100"]).buffer_bytes(),
            Ok(2 * (32 + 300))
        );
        assert_eq!(
            parse(&["-t", "tag_bw", "-s", "8", "--validate"]).buffer_bytes(),
            Ok(2 * 8 * 32)
        );
        let named = parse(&["-t", "tag_lat", "-D", "milc:300"])
            .buffer_bytes()
            .unwrap();
        assert!(
            named > 300 << 30,
            "{named}: the lattice's arrays, not the message"
        );
    }

    #[test]
    fn ucx_argv_gives_sizes_in_bytes() {
        // ucx_perftest reads no suffixes: "1m" would be 1 byte there.
        let s = |arg: &str| {
            let v = parse(&["-t", "tag_lat", "-s", arg]).to_ucx_argv().unwrap();
            let k = v.iter().position(|w| w == "-s").unwrap();
            v[k + 1].clone()
        };
        assert_eq!(s("1m"), "1048576");
        assert_eq!(s("64k"), "65536");
        assert_eq!(s("16,48,8k"), "16,48,8192");
        assert_eq!(s("1k:3"), "1024,1024,1024");
        assert!(parse(&["-t", "tag_lat", "-s", "8:5000"])
            .to_ucx_argv()
            .is_err());
    }
}
