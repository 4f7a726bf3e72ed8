//! Configuration from the environment, under UCX's own variable names.
//!
//! Every variable Rucx reads is one row of [`TABLE`]: name, default and meaning. [`Config`]
//! holds the typed values; [`Config::from_env`] reads `UCX_*` from the process environment
//! and [`Config::from_lookup`] from any source (tests, `ucp_config_modify`). A `UCX_*`
//! variable that is not in the table gets one warning naming the closest known variable.

use std::fmt;

/// One documented configuration variable (the name is without the `UCX_` prefix).
#[derive(Debug, Clone, Copy)]
pub struct ConfigVar {
    pub name: &'static str,
    pub default: &'static str,
    pub doc: &'static str,
}

/// Every variable Rucx understands. `rucx-info -c` prints this table with current values.
pub const TABLE: &[ConfigVar] = &[
    ConfigVar {
        name: "TLS",
        default: "all",
        doc: "Comma-separated transports to use; a leading '^' excludes the listed ones. \
              Aliases (UCX's; names of transports Rucx lacks are ignored): all; shm and sm \
              (posix, cma, xpmem, sysv); mm (posix, xpmem, sysv); cuda (cuda_copy, \
              cuda_ipc, gdr_copy); rc (rc_verbs).",
    },
    ConfigVar {
        name: "NET_DEVICES",
        default: "all",
        doc: "Network devices (interface names such as lo, eth0) tcp may use; 'all' for every \
              up interface with an IPv4 address. A leading '^' excludes.",
    },
    ConfigVar {
        name: "RNDV_THRESH",
        default: "auto",
        doc: "Message size from which tag/AM sends use rendezvous; 'auto' picks it from the \
              transports' performance estimates, 'inf' disables rendezvous.",
    },
    ConfigVar {
        name: "ZCOPY_THRESH",
        default: "auto",
        doc: "Message size from which eager sends use zero-copy; 'auto' from estimates.",
    },
    ConfigVar {
        name: "LOG_LEVEL",
        default: "warn",
        doc:
            "Logging level: fatal, error, warn, diag, info, debug, trace (req/data/async/func/poll \
              are accepted as trace).",
    },
    ConfigVar {
        name: "POSIX_FIFO_SIZE",
        default: "64",
        doc: "Cells in each posix shared-memory receive FIFO (a power of two, 2..=65536).",
    },
    ConfigVar {
        name: "POSIX_FIFO_SHARED_SIZE",
        default: "32",
        doc: "Cells of the posix receive FIFO in use while the worker's thread shares its \
              CPU (UCX_SHARED_CPU_ADAPT): a smaller ring, whose cells stay in the caches \
              while processes take turns on the cores (a power of two, 1..=POSIX_FIFO_SIZE; \
              a larger value is taken as POSIX_FIFO_SIZE). (Rucx only.)",
    },
    ConfigVar {
        name: "POSIX_SEG_SIZE",
        default: "32832",
        doc: "Bytes per posix FIFO cell including its 16-byte header (multiple of 64); \
              max_bcopy is this minus 16. The default holds a 32 KiB message whole (a FIFO \
              of 64 cells: 2.1 MB of shared memory per process); UCX's is 8256.",
    },
    ConfigVar {
        name: "POSIX_FIFO_MAX_POLL",
        default: "16",
        doc: "Messages a posix interface hands over per progress call at most, as in UCX; \
              the rest wait for the next call, so an application that posts receives between \
              its calls finds fewer messages taken as unexpected ('inf': no limit).",
    },
    ConfigVar {
        name: "POSIX_POLL_BACKOFF",
        default: "16",
        doc: "Empty polls of a posix receive FIFO in a row after which each further empty poll \
              pauses once (x86 `pause`), so a waiting consumer rereads less often the cell a \
              producer is about to write; 'inf' never pauses. (Rucx only.)",
    },
    ConfigVar {
        name: "TCP_SEG_SIZE",
        default: "64k",
        doc: "Largest tcp active-message payload (max_bcopy and max_zcopy).",
    },
    ConfigVar {
        name: "TCP_SNDBUF",
        default: "auto",
        doc: "SO_SNDBUF for tcp sockets; 'auto' leaves the kernel default.",
    },
    ConfigVar {
        name: "TCP_RCVBUF",
        default: "auto",
        doc: "SO_RCVBUF for tcp sockets; 'auto' leaves the kernel default.",
    },
    ConfigVar {
        name: "TCP_PORT_RANGE",
        default: "0",
        doc: "Port range for tcp listening sockets as LOW-HIGH; 0 lets the kernel choose.",
    },
    ConfigVar {
        name: "TCP_KEEPIDLE",
        default: "10s",
        doc: "Idle time before tcp sends keepalive probes on a connection (SO_KEEPALIVE); \
              'inf' turns keepalive off, and with it the dead-peer check of connections \
              where data waits (TCP_KEEPCNT).",
    },
    ConfigVar {
        name: "TCP_KEEPINTVL",
        default: "2s",
        doc: "Time between tcp keepalive probes.",
    },
    ConfigVar {
        name: "TCP_KEEPCNT",
        default: "3",
        doc: "Unanswered tcp keepalive probes after which an idle connection, and the \
              endpoints on it, fail (endpoint timeout). A connection where data waits for \
              the peer fails once the kernel has retransmitted it, or probed the peer's \
              closed window, without an answer and the peer's host has acknowledged \
              nothing for KEEPINTVL x KEEPCNT (6 s), as checked every \
              ERROR_CHECK_INTERVAL. A peer that is alive but does not read is not failed \
              (no TCP_USER_TIMEOUT).",
    },
    ConfigVar {
        name: "CMA_MAX_IOV",
        default: "auto",
        doc: "Most iov entries in one process_vm_readv/writev call; 'auto' is the system IOV_MAX.",
    },
    ConfigVar {
        name: "IB_GID_INDEX",
        default: "auto",
        doc: "GID table index rc_verbs uses on a real RDMA port; 'auto' is 0 on InfiniBand and \
              the first RoCE v2 entry on Ethernet.",
    },
    ConfigVar {
        name: "ATOMIC_MODE",
        default: "guess",
        doc: "Who executes 8-byte fetch-add and compare-and-swap on a peer's memory: cpu (the \
              target's CPU, through messages), device (the network device, on endpoints whose \
              transport has device atomics, such as rc_verbs; other operations and 4-byte ones \
              still go through messages and are not atomic with respect to device ones, as in \
              UCX), or guess (cpu in Rucx).",
    },
    ConfigVar {
        name: "RNDV_SCHEME",
        default: "auto",
        doc: "Rendezvous protocol on endpoints with a zero-copy memory lane: get_zcopy (the \
              receiver reads), put_zcopy (the sender writes), or auto (get_zcopy).",
    },
    ConfigVar {
        name: "RNDV_SPLIT_THRESH",
        default: "32k",
        doc: "Message size from which a same-host get rendezvous is shared out: the \
              receiver reads the head of the message while the sender writes the tail, so \
              both cores copy, when the receiver has nothing else in flight. 'inf' turns \
              it off. (Rucx only: UCX has no such protocol.)",
    },
    ConfigVar {
        name: "RNDV_LAYOUT_CACHE",
        default: "64",
        doc: "Structured layouts each endpoint remembers from its peer (an LRU keyed by the \
              layout's 128-bit hash), so repeated rendezvous with one layout send no layout \
              bytes.",
    },
    ConfigVar {
        name: "RNDV_LAYOUT_PARTS",
        default: "n",
        doc: "A layout whose description does not fit one rendezvous request: y: its \
              description goes first in as many messages as it needs, and the data moves \
              zero-copy by the layout, as for any other; n: its bytes go packed (device \
              memory: a kernel packs them into a scratch buffer; host memory: the active \
              message pipeline); auto: y for device memory, n for host memory. n by \
              default: measured on a GPU, the direct path is slower for such layouts \
              today (docs/benchmarks.md). (Rucx only.)",
    },
    ConfigVar {
        name: "SHARED_CPU_ADAPT",
        default: "y",
        doc: "y: while the thread that progresses a worker waits for a CPU more than an \
              eighth of the time (its run delay, read every 10 ms at most: processes taking \
              turns on the same cores), turn off the split rendezvous and the posix poll \
              backoff, which pay off only with a core per process, and send messages up \
              to 1 MiB eagerly (256 KiB while the machine has more than two runnable \
              threads per CPU) and larger ones by rendezvous instead of measuring which is \
              faster, have ucp_worker_progress answer an empty poll before it enters \
              the message path, and receive posix messages in the FIFO's compact ring \
              (POSIX_FIFO_SHARED_SIZE); n: keep them. (Rucx only.)",
    },
    ConfigVar {
        name: "PROTO_INFO",
        default: "n",
        doc: "y: print each new endpoint's protocol table (which protocol serves which \
              message sizes) to stderr.",
    },
    ConfigVar {
        name: "MEMTYPE_CACHE",
        default: "y",
        doc: "y: remember the memory type of allocations (device ranges, host pages) so \
              that host buffers cost no CUDA driver call; n: ask the driver for every buffer.",
    },
    ConfigVar {
        name: "RNDV_FRAG_SIZE",
        default: "512k",
        doc: "Fragment size of the rendezvous pipeline that stages GPU data through pinned \
              host buffers for peers that cannot map this GPU's memory (tcp, or cuda_ipc \
              excluded); a message of fewer than RNDV_PIPELINE_DEPTH fragments is cut into \
              that many (not below 64 KiB).",
    },
    ConfigVar {
        name: "RNDV_PIPELINE_DEPTH",
        default: "4",
        doc: "Fragments of one send of the staged rendezvous pipeline copied out of the \
              device ahead of the network (Rucx only).",
    },
    ConfigVar {
        name: "ERROR_CHECK_INTERVAL",
        default: "100ms",
        doc: "How often a transport checks that the peers it talks to are alive.",
    },
    ConfigVar {
        name: "KEEPALIVE_INTERVAL",
        default: "20s",
        doc: "How often ucp sends a keepalive message on endpoints whose active-message \
              lane is a network transport (tcp), so that a peer host that went silent is \
              found even on an idle connection; 'inf' turns it off. tcp then gives up on a \
              silent peer after three intervals where that is shorter than \
              TCP_KEEPINTVL x TCP_KEEPCNT. Same-host transports find dead peers by their \
              process (ERROR_CHECK_INTERVAL) and need no keepalive.",
    },
    ConfigVar {
        name: "KEEPALIVE_NUM_EPS",
        default: "128",
        doc: "Endpoints sent a keepalive message per round (KEEPALIVE_INTERVAL); the next \
              round goes on where this one stopped. 'inf': all.",
    },
];

/// A `UCX_TLS`-style list: names, optionally negated with a leading `^`.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct NameList {
    pub negate: bool,
    pub names: Vec<String>,
}

impl NameList {
    /// The list meaning "everything".
    pub fn all() -> NameList {
        NameList {
            negate: false,
            names: vec!["all".into()],
        }
    }

    fn parse(s: &str) -> NameList {
        let s = s.trim();
        let (negate, body) = match s.strip_prefix('^') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let names = body
            .split(',')
            .map(|n| n.trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
        NameList { negate, names }
    }

    /// True when `name` is selected. `aliases` expands a listed alias into member names.
    pub fn selects(&self, name: &str, aliases: &[(&str, &[&str])]) -> bool {
        let listed = self.names.iter().any(|n| {
            n == "all"
                || n == name
                || aliases
                    .iter()
                    .any(|(alias, members)| alias == n && members.contains(&name))
        });
        listed != self.negate
    }
}

impl fmt::Display for NameList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.negate {
            f.write_str("^")?;
        }
        f.write_str(&self.names.join(","))
    }
}

/// Transport aliases for `UCX_TLS`, as UCX defines them for the transports Rucx has.
pub const TLS_ALIASES: &[(&str, &[&str])] = &[
    ("shm", &["posix", "cma", "xpmem", "sysv"]),
    ("sm", &["posix", "cma", "xpmem", "sysv"]),
    ("mm", &["posix", "xpmem", "sysv"]),
    ("cuda", &["cuda_copy", "cuda_ipc", "gdr_copy"]),
    ("rc", &["rc_verbs"]),
];

/// A size that may be `auto` (`None`) or `inf` (`usize::MAX`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AutoSize {
    Auto,
    Bytes(usize),
}

impl fmt::Display for AutoSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AutoSize::Auto => f.write_str("auto"),
            AutoSize::Bytes(usize::MAX) => f.write_str("inf"),
            AutoSize::Bytes(n) => write!(f, "{n}"),
        }
    }
}

/// Logging level named as UCX names it.
#[derive(Clone, Copy, PartialEq, Eq, Debug, PartialOrd, Ord)]
pub enum LogLevel {
    Fatal,
    Error,
    Warn,
    Diag,
    Info,
    Debug,
    Trace,
}

impl LogLevel {
    pub fn to_filter(self) -> log::LevelFilter {
        match self {
            LogLevel::Fatal | LogLevel::Error => log::LevelFilter::Error,
            LogLevel::Warn => log::LevelFilter::Warn,
            LogLevel::Diag | LogLevel::Info => log::LevelFilter::Info,
            LogLevel::Debug => log::LevelFilter::Debug,
            LogLevel::Trace => log::LevelFilter::Trace,
        }
    }
}

impl fmt::Display for LogLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            LogLevel::Fatal => "fatal",
            LogLevel::Error => "error",
            LogLevel::Warn => "warn",
            LogLevel::Diag => "diag",
            LogLevel::Info => "info",
            LogLevel::Debug => "debug",
            LogLevel::Trace => "trace",
        };
        f.write_str(s)
    }
}

/// A configuration value that failed to parse.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("UCX_{name}={value}: {reason}")]
    BadValue {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("UCX_{0} is not a Rucx configuration variable")]
    UnknownName(String),
}

/// The typed configuration. Field docs are in [`TABLE`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub tls: NameList,
    pub net_devices: NameList,
    pub rndv_thresh: AutoSize,
    pub zcopy_thresh: AutoSize,
    pub log_level: LogLevel,
    pub posix_fifo_size: usize,
    pub posix_fifo_shared_size: usize,
    pub posix_seg_size: usize,
    pub posix_fifo_max_poll: usize,
    pub posix_poll_backoff: usize,
    pub tcp_seg_size: usize,
    pub tcp_sndbuf: AutoSize,
    pub tcp_rcvbuf: AutoSize,
    pub tcp_port_range: (u16, u16),
    /// Keepalive idle time (None: off), probe interval, probe count.
    pub tcp_keepidle_ns: Option<u64>,
    pub tcp_keepintvl_ns: u64,
    pub tcp_keepcnt: u32,
    pub cma_max_iov: AutoSize,
    /// `UCX_IB_GID_INDEX`; `None` for auto.
    pub ib_gid_index: Option<u8>,
    pub rndv_scheme: RndvScheme,
    pub atomic_mode: AtomicMode,
    pub rndv_layout_cache: usize,
    pub rndv_split_thresh: usize,
    /// `RNDV_LAYOUT_PARTS`: `None` for auto.
    pub rndv_layout_parts: Option<bool>,
    pub shared_cpu_adapt: bool,
    pub proto_info: bool,
    pub memtype_cache: bool,
    pub rndv_frag_size: usize,
    pub rndv_pipeline_depth: usize,
    pub error_check_interval_ns: u64,
    /// `UCX_KEEPALIVE_INTERVAL` (None: off) and `UCX_KEEPALIVE_NUM_EPS`.
    pub keepalive_interval_ns: Option<u64>,
    pub keepalive_num_eps: usize,
}

/// `UCX_ATOMIC_MODE`: who executes atomics on a peer's memory.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum AtomicMode {
    Cpu,
    Device,
    /// UCX picks device atomics where a network device has them; Rucx takes cpu.
    Guess,
}

impl AtomicMode {
    /// Whether 8-byte fetch-add and compare-and-swap go to devices that have them.
    pub fn device(self) -> bool {
        self == AtomicMode::Device
    }
}

impl fmt::Display for AtomicMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AtomicMode::Cpu => "cpu",
            AtomicMode::Device => "device",
            AtomicMode::Guess => "guess",
        })
    }
}

/// `UCX_RNDV_SCHEME`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum RndvScheme {
    Auto,
    GetZcopy,
    PutZcopy,
}

impl fmt::Display for RndvScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RndvScheme::Auto => "auto",
            RndvScheme::GetZcopy => "get_zcopy",
            RndvScheme::PutZcopy => "put_zcopy",
        })
    }
}

/// Parses UCX's boolean spellings.
fn parse_bool(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" | "on" | "1" | "true" => Some(true),
        "n" | "no" | "off" | "0" | "false" => Some(false),
        _ => None,
    }
}

impl Default for Config {
    fn default() -> Config {
        Config::from_lookup(|_| None).expect("the defaults in TABLE parse")
    }
}

/// Parses `8`, `8b`, `64k`, `64kb`, `1m`, `2G`, `inf`.
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim().to_ascii_lowercase();
    if s == "inf" || s == "infinity" {
        return Some(usize::MAX);
    }
    let s = s.strip_suffix('b').unwrap_or(&s);
    let (digits, mult) = match s.chars().last()? {
        'k' => (&s[..s.len() - 1], 1usize << 10),
        'm' => (&s[..s.len() - 1], 1 << 20),
        'g' => (&s[..s.len() - 1], 1 << 30),
        't' => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    digits.trim().parse::<usize>().ok()?.checked_mul(mult)
}

/// Parses a time such as `100ms`, `2s`, `500us`, `10ns` into nanoseconds.
pub fn parse_time_ns(s: &str) -> Option<u64> {
    let s = s.trim().to_ascii_lowercase();
    let split = s
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num.parse().ok()?;
    let mult = match unit {
        "" | "s" => 1e9,
        "ms" => 1e6,
        "us" => 1e3,
        "ns" => 1.0,
        "m" => 60e9,
        _ => return None,
    };
    let ns = v * mult;
    (ns.is_finite() && ns >= 0.0).then_some(ns as u64)
}

/// Formats nanoseconds in the largest unit that keeps it whole (`100ms`, `2s`, `1500ns`).
pub fn format_time_ns(ns: u64) -> String {
    match ns {
        0 => "0s".into(),
        n if n % 1_000_000_000 == 0 => format!("{}s", n / 1_000_000_000),
        n if n % 1_000_000 == 0 => format!("{}ms", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{}us", n / 1_000),
        n => format!("{n}ns"),
    }
}

fn bad(name: &'static str, value: &str, reason: &'static str) -> ConfigError {
    ConfigError::BadValue {
        name,
        value: value.to_string(),
        reason,
    }
}

impl Config {
    /// Reads the configuration from the process environment and warns about unknown
    /// `UCX_*` variables.
    pub fn from_env() -> Result<Config, ConfigError> {
        for (key, _) in std::env::vars() {
            if let Some(name) = key.strip_prefix("UCX_") {
                warn_if_unknown(name);
            }
        }
        Config::from_lookup(|name| std::env::var(format!("UCX_{name}")).ok())
    }

    /// Builds a configuration from `lookup(name)` (name without the `UCX_` prefix),
    /// falling back to the table's defaults.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let get = |name: &'static str| -> (String, &'static str) {
            let var = TABLE
                .iter()
                .find(|v| v.name == name)
                .expect("every field is in TABLE");
            (
                lookup(name).unwrap_or_else(|| var.default.to_string()),
                var.name,
            )
        };
        let size = |name: &'static str| -> Result<usize, ConfigError> {
            let (v, n) = get(name);
            parse_size(&v).ok_or_else(|| bad(n, &v, "expected a size such as 8192, 64k or 1m"))
        };
        let auto_size = |name: &'static str| -> Result<AutoSize, ConfigError> {
            let (v, n) = get(name);
            if v.trim().eq_ignore_ascii_case("auto") {
                return Ok(AutoSize::Auto);
            }
            parse_size(&v)
                .map(AutoSize::Bytes)
                .ok_or_else(|| bad(n, &v, "expected auto, inf, or a size such as 64k"))
        };

        let (log_v, log_n) = get("LOG_LEVEL");
        let log_level = match log_v.trim().to_ascii_lowercase().as_str() {
            "fatal" => LogLevel::Fatal,
            "error" => LogLevel::Error,
            "warn" | "warning" => LogLevel::Warn,
            "diag" => LogLevel::Diag,
            "info" => LogLevel::Info,
            "debug" => LogLevel::Debug,
            "trace" | "req" | "data" | "async" | "func" | "poll" | "trace_req" | "trace_data"
            | "trace_async" | "trace_func" | "trace_poll" => LogLevel::Trace,
            _ => {
                return Err(bad(
                    log_n,
                    &log_v,
                    "expected fatal/error/warn/diag/info/debug/trace",
                ))
            }
        };

        let fifo = size("POSIX_FIFO_SIZE")?;
        if !(2..=65536).contains(&fifo) || !fifo.is_power_of_two() {
            let (v, n) = get("POSIX_FIFO_SIZE");
            return Err(bad(n, &v, "must be a power of two between 2 and 65536"));
        }
        let fifo_shared = size("POSIX_FIFO_SHARED_SIZE")?;
        if fifo_shared == 0 || !fifo_shared.is_power_of_two() {
            let (v, n) = get("POSIX_FIFO_SHARED_SIZE");
            return Err(bad(n, &v, "must be a power of two, at least 1"));
        }
        let seg = size("POSIX_SEG_SIZE")?;
        if seg < 128 || seg % 64 != 0 || seg > (1 << 24) {
            let (v, n) = get("POSIX_SEG_SIZE");
            return Err(bad(n, &v, "must be a multiple of 64 between 128 and 16m"));
        }
        let posix_fifo_max_poll = size("POSIX_FIFO_MAX_POLL")?;
        if posix_fifo_max_poll == 0 {
            let (v, n) = get("POSIX_FIFO_MAX_POLL");
            return Err(bad(n, &v, "must be at least 1"));
        }
        let posix_poll_backoff = size("POSIX_POLL_BACKOFF")?;
        let tcp_seg = size("TCP_SEG_SIZE")?;
        if !(64..=(1 << 30)).contains(&tcp_seg) {
            let (v, n) = get("TCP_SEG_SIZE");
            return Err(bad(n, &v, "must be between 64 and 1g"));
        }

        let (pr, pr_n) = get("TCP_PORT_RANGE");
        let tcp_port_range = if pr.trim() == "0" {
            (0, 0)
        } else {
            let parsed = pr.split_once('-').and_then(|(a, b)| {
                Some((a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?))
            });
            match parsed {
                Some((lo, hi)) if lo > 0 && lo <= hi => (lo, hi),
                _ => return Err(bad(pr_n, &pr, "expected 0 or LOW-HIGH")),
            }
        };

        let (ki, ki_n) = get("TCP_KEEPIDLE");
        let tcp_keepidle_ns = if ki.trim().eq_ignore_ascii_case("inf") {
            None
        } else {
            Some(
                parse_time_ns(&ki)
                    .filter(|&t| t >= 1_000_000_000)
                    .ok_or_else(|| bad(ki_n, &ki, "expected inf or a time of at least 1s"))?,
            )
        };
        let (kv, kv_n) = get("TCP_KEEPINTVL");
        let tcp_keepintvl_ns = parse_time_ns(&kv)
            .filter(|&t| t >= 1_000_000_000)
            .ok_or_else(|| bad(kv_n, &kv, "expected a time of at least 1s"))?;
        let (kc, kc_n) = get("TCP_KEEPCNT");
        let tcp_keepcnt = kc
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|c| (1..=127).contains(c))
            .ok_or_else(|| bad(kc_n, &kc, "expected a count between 1 and 127"))?;

        let (rs, rs_n) = get("RNDV_SCHEME");
        let rndv_scheme = match rs.trim().to_ascii_lowercase().as_str() {
            "auto" => RndvScheme::Auto,
            "get_zcopy" => RndvScheme::GetZcopy,
            "put_zcopy" => RndvScheme::PutZcopy,
            _ => return Err(bad(rs_n, &rs, "expected auto, get_zcopy or put_zcopy")),
        };
        let (am, am_n) = get("ATOMIC_MODE");
        let atomic_mode = match am.trim().to_ascii_lowercase().as_str() {
            "cpu" => AtomicMode::Cpu,
            "guess" => AtomicMode::Guess,
            "device" => AtomicMode::Device,
            _ => return Err(bad(am_n, &am, "expected cpu, device or guess")),
        };
        let rndv_layout_cache = size("RNDV_LAYOUT_CACHE")?;
        let rndv_split_thresh = size("RNDV_SPLIT_THRESH")?;
        let (lp, lp_n) = get("RNDV_LAYOUT_PARTS");
        let rndv_layout_parts = match lp.trim().to_ascii_lowercase().as_str() {
            "auto" => None,
            v => Some(parse_bool(v).ok_or_else(|| bad(lp_n, &lp, "expected auto, y or n"))?),
        };
        let (sc, sc_n) = get("SHARED_CPU_ADAPT");
        let shared_cpu_adapt = parse_bool(&sc).ok_or_else(|| bad(sc_n, &sc, "expected y or n"))?;
        let (pi, pi_n) = get("PROTO_INFO");
        let proto_info = parse_bool(&pi).ok_or_else(|| bad(pi_n, &pi, "expected y or n"))?;

        let (mc, mc_n) = get("MEMTYPE_CACHE");
        let memtype_cache = parse_bool(&mc).ok_or_else(|| bad(mc_n, &mc, "expected y or n"))?;
        let rndv_frag_size = size("RNDV_FRAG_SIZE")?.max(4096);
        let rndv_pipeline_depth = size("RNDV_PIPELINE_DEPTH")?.clamp(1, 64);

        let (t, t_n) = get("ERROR_CHECK_INTERVAL");
        let error_check_interval_ns =
            parse_time_ns(&t).ok_or_else(|| bad(t_n, &t, "expected a time such as 100ms"))?;

        let (ka, ka_n) = get("KEEPALIVE_INTERVAL");
        let keepalive_interval_ns = if ka.trim().eq_ignore_ascii_case("inf") {
            None
        } else {
            Some(
                parse_time_ns(&ka)
                    .filter(|&t| t > 0)
                    .ok_or_else(|| bad(ka_n, &ka, "expected inf or a time above zero"))?,
            )
        };
        let (kn, kn_n) = get("KEEPALIVE_NUM_EPS");
        let keepalive_num_eps = if kn.trim().eq_ignore_ascii_case("inf") {
            usize::MAX
        } else {
            kn.trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| bad(kn_n, &kn, "expected inf or a count above zero"))?
        };

        let (g, g_n) = get("IB_GID_INDEX");
        let ib_gid_index = match g.trim() {
            a if a.eq_ignore_ascii_case("auto") => None,
            v => Some(
                v.parse::<u8>()
                    .map_err(|_| bad(g_n, &g, "expected auto or a GID index 0..=255"))?,
            ),
        };

        Ok(Config {
            tls: NameList::parse(&get("TLS").0),
            net_devices: NameList::parse(&get("NET_DEVICES").0),
            rndv_thresh: auto_size("RNDV_THRESH")?,
            zcopy_thresh: auto_size("ZCOPY_THRESH")?,
            log_level,
            posix_fifo_size: fifo,
            posix_fifo_shared_size: fifo_shared.min(fifo),
            posix_seg_size: seg,
            posix_fifo_max_poll,
            posix_poll_backoff,
            tcp_seg_size: tcp_seg,
            tcp_sndbuf: auto_size("TCP_SNDBUF")?,
            tcp_rcvbuf: auto_size("TCP_RCVBUF")?,
            tcp_port_range,
            tcp_keepidle_ns,
            tcp_keepintvl_ns,
            tcp_keepcnt,
            keepalive_interval_ns,
            keepalive_num_eps,
            cma_max_iov: auto_size("CMA_MAX_IOV")?,
            ib_gid_index,
            rndv_scheme,
            atomic_mode,
            rndv_layout_cache,
            rndv_split_thresh,
            rndv_layout_parts,
            shared_cpu_adapt,
            proto_info,
            memtype_cache,
            rndv_frag_size,
            rndv_pipeline_depth,
            error_check_interval_ns,
        })
    }

    /// True when `UCX_TLS` selects transport `tl`.
    pub fn tl_enabled(&self, tl: &str) -> bool {
        self.tls.selects(tl, TLS_ALIASES)
    }

    /// True when `UCX_NET_DEVICES` selects network device `dev`.
    pub fn net_device_enabled(&self, dev: &str) -> bool {
        self.net_devices.selects(dev, &[])
    }

    /// The current value of each table row as text, in table order.
    pub fn value_of(&self, name: &str) -> Option<String> {
        Some(match name {
            "TLS" => self.tls.to_string(),
            "NET_DEVICES" => self.net_devices.to_string(),
            "RNDV_THRESH" => self.rndv_thresh.to_string(),
            "ZCOPY_THRESH" => self.zcopy_thresh.to_string(),
            "LOG_LEVEL" => self.log_level.to_string(),
            "POSIX_FIFO_SIZE" => self.posix_fifo_size.to_string(),
            "POSIX_FIFO_SHARED_SIZE" => self.posix_fifo_shared_size.to_string(),
            "POSIX_SEG_SIZE" => self.posix_seg_size.to_string(),
            "POSIX_FIFO_MAX_POLL" => match self.posix_fifo_max_poll {
                usize::MAX => "inf".to_string(),
                n => n.to_string(),
            },
            "POSIX_POLL_BACKOFF" => match self.posix_poll_backoff {
                usize::MAX => "inf".to_string(),
                n => n.to_string(),
            },
            "TCP_SEG_SIZE" => self.tcp_seg_size.to_string(),
            "TCP_SNDBUF" => self.tcp_sndbuf.to_string(),
            "TCP_RCVBUF" => self.tcp_rcvbuf.to_string(),
            "TCP_PORT_RANGE" => match self.tcp_port_range {
                (0, _) => "0".to_string(),
                (lo, hi) => format!("{lo}-{hi}"),
            },
            "TCP_KEEPIDLE" => self
                .tcp_keepidle_ns
                .map_or("inf".to_string(), format_time_ns),
            "TCP_KEEPINTVL" => format_time_ns(self.tcp_keepintvl_ns),
            "TCP_KEEPCNT" => self.tcp_keepcnt.to_string(),
            "KEEPALIVE_INTERVAL" => self
                .keepalive_interval_ns
                .map_or("inf".to_string(), format_time_ns),
            "KEEPALIVE_NUM_EPS" => match self.keepalive_num_eps {
                usize::MAX => "inf".to_string(),
                n => n.to_string(),
            },
            "CMA_MAX_IOV" => self.cma_max_iov.to_string(),
            "IB_GID_INDEX" => self
                .ib_gid_index
                .map_or("auto".to_string(), |i| i.to_string()),
            "RNDV_SCHEME" => self.rndv_scheme.to_string(),
            "ATOMIC_MODE" => self.atomic_mode.to_string(),
            "RNDV_LAYOUT_CACHE" => self.rndv_layout_cache.to_string(),
            "RNDV_SPLIT_THRESH" => match self.rndv_split_thresh {
                usize::MAX => "inf".to_string(),
                n => n.to_string(),
            },
            "RNDV_LAYOUT_PARTS" => match self.rndv_layout_parts {
                None => "auto",
                Some(true) => "y",
                Some(false) => "n",
            }
            .to_string(),
            "SHARED_CPU_ADAPT" => if self.shared_cpu_adapt { "y" } else { "n" }.to_string(),
            "PROTO_INFO" => if self.proto_info { "y" } else { "n" }.to_string(),
            "MEMTYPE_CACHE" => if self.memtype_cache { "y" } else { "n" }.to_string(),
            "RNDV_FRAG_SIZE" => self.rndv_frag_size.to_string(),
            "RNDV_PIPELINE_DEPTH" => self.rndv_pipeline_depth.to_string(),
            "ERROR_CHECK_INTERVAL" => format_time_ns(self.error_check_interval_ns),
            _ => return None,
        })
    }
}

/// What a value of a [`UcxOnly`] option must look like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueKind {
    /// Memory units (`8192`, `2M`, `inf`, `auto`).
    Size,
    /// `y`/`n` and their spellings.
    Bool,
    /// A time (`100ms`, `20s`, `inf`).
    Time,
    /// A count, or `inf`/`auto`.
    Count,
    /// Any text.
    Text,
}

/// An option of UCX's that Rucx has no use for, but accepts, checks and prints back
/// (`ucp_config_modify`, `ucp_config_print`), so that programs written for UCX, which set
/// and read them, run unchanged: UCXX's tests set `SEG_SIZE` and read it back.
#[derive(Debug, Clone, Copy)]
pub struct UcxOnly {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: ValueKind,
    /// What the option does in UCX, and why Rucx needs no such knob.
    pub doc: &'static str,
}

/// The UCX options of [`UcxOnly`]'s kind.
pub const UCX_ONLY: &[UcxOnly] = &[
    UcxOnly {
        name: "SEG_SIZE",
        default: "8192",
        kind: ValueKind::Size,
        doc: "UCX: the segment size of the worker's preregistered bounce pool. Rucx has no \
              such pool (eager data goes through each transport's own buffers: \
              UCX_POSIX_SEG_SIZE, UCX_TCP_SEG_SIZE).",
    },
    UcxOnly {
        name: "MAX_RNDV_RAILS",
        default: "2",
        kind: ValueKind::Count,
        doc: "UCX: network lanes a rendezvous is striped over. Rucx uses one memory lane \
              per endpoint and memory type.",
    },
    UcxOnly {
        name: "PROTO_ENABLE",
        default: "y",
        kind: ValueKind::Bool,
        doc: "UCX: its newer protocol selection. Rucx has one selection (docs/ucp.md).",
    },
    UcxOnly {
        name: "RNDV_FRAG_MEM_TYPE",
        default: "host",
        kind: ValueKind::Text,
        doc: "UCX: the memory type of pipelined rendezvous fragments. Rucx stages device \
              data through pinned host fragments (UCX_RNDV_FRAG_SIZE).",
    },
    UcxOnly {
        name: "UD_TIMEOUT",
        default: "30s",
        kind: ValueKind::Time,
        doc: "UCX: the ud transport's peer timeout. Rucx has no ud transport.",
    },
    UcxOnly {
        name: "CUDA_COPY_MAX_REG_RATIO",
        default: "0.1",
        kind: ValueKind::Text,
        doc: "UCX: how much of the GPU's BAR1 cuda_copy may register. Rucx registers no \
              device memory for copies.",
    },
];

impl UcxOnly {
    /// The option named `name` (without `UCX_`), if it is one.
    pub fn find(name: &str) -> Option<&'static UcxOnly> {
        UCX_ONLY.iter().find(|o| o.name == name)
    }

    /// Checks `value` against the option's kind; the reason when it does not fit.
    pub fn check(&self, value: &str) -> Result<(), &'static str> {
        let v = value.trim();
        let special = |v: &str| v.eq_ignore_ascii_case("inf") || v.eq_ignore_ascii_case("auto");
        let ok = match self.kind {
            ValueKind::Size => special(v) || parse_size(v).is_some(),
            ValueKind::Bool => parse_bool(v).is_some(),
            ValueKind::Time => special(v) || parse_time_ns(v).is_some(),
            ValueKind::Count => special(v) || v.parse::<u64>().is_ok(),
            ValueKind::Text => true,
        };
        if ok {
            return Ok(());
        }
        Err(match self.kind {
            ValueKind::Size => "expected memory units: <number>[b|k|m|g], inf or auto",
            ValueKind::Bool => "expected y or n",
            ValueKind::Time => "expected a time: <number>[s|ms|us|ns], inf or auto",
            ValueKind::Count => "expected a count, inf or auto",
            ValueKind::Text => "",
        })
    }
}

/// Variables UCX itself defines that Rucx accepts silently although it does not use them
/// (so programs tuned for UCX do not spam warnings).
const KNOWN_FOREIGN: &[&str] = &[
    "MODULE_DIR",
    "HANDLE_ERRORS",
    "MEM_MALLOC_HOOKS",
    "WARN_UNUSED_ENV_VARS",
];

/// The closest known variable name to `name`, for "did you mean" messages.
pub fn closest_known(name: &str) -> Option<&'static str> {
    TABLE
        .iter()
        .map(|v| (edit_distance(name, v.name), v.name))
        .min()
        .map(|(_, n)| n)
}

/// Warns (once per call) when `UCX_<name>` is not a variable Rucx knows.
pub fn warn_if_unknown(name: &str) -> bool {
    if TABLE.iter().any(|v| v.name == name)
        || KNOWN_FOREIGN.contains(&name)
        || UcxOnly::find(name).is_some()
    {
        return false;
    }
    match closest_known(name) {
        Some(c) => log::warn!("unknown configuration variable UCX_{name}; did you mean UCX_{c}?"),
        None => log::warn!("unknown configuration variable UCX_{name}"),
    }
    true
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        Config::from_lookup(move |n| pairs.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone()))
    }

    #[test]
    fn defaults_parse() {
        let c = Config::default();
        assert!(c.tl_enabled("tcp") && c.tl_enabled("posix"));
        assert_eq!(c.rndv_thresh, AutoSize::Auto);
        assert_eq!(c.log_level, LogLevel::Warn);
        assert_eq!(c.posix_fifo_size, 64);
        for v in TABLE {
            assert!(c.value_of(v.name).is_some(), "{} has no value", v.name);
        }
    }

    #[test]
    fn tls_negation_and_aliases() {
        let c = cfg(&[("TLS", "^tcp")]).unwrap();
        assert!(!c.tl_enabled("tcp"));
        assert!(c.tl_enabled("posix"));
        let c = cfg(&[("TLS", "shm,self")]).unwrap();
        assert!(c.tl_enabled("posix") && c.tl_enabled("cma") && c.tl_enabled("self"));
        assert!(!c.tl_enabled("tcp"));
        let c = cfg(&[("TLS", "^shm")]).unwrap();
        assert!(!c.tl_enabled("posix") && !c.tl_enabled("cma") && c.tl_enabled("tcp"));
        let c = cfg(&[("TLS", "all")]).unwrap();
        assert!(c.tl_enabled("xpmem"));
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8192"), Some(8192));
        assert_eq!(parse_size("64k"), Some(65536));
        assert_eq!(parse_size("64KB"), Some(65536));
        assert_eq!(parse_size("1m"), Some(1 << 20));
        assert_eq!(parse_size("inf"), Some(usize::MAX));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        let c = cfg(&[("RNDV_THRESH", "16k"), ("ZCOPY_THRESH", "inf")]).unwrap();
        assert_eq!(c.rndv_thresh, AutoSize::Bytes(16384));
        assert_eq!(c.zcopy_thresh, AutoSize::Bytes(usize::MAX));
        assert_eq!(c.value_of("ZCOPY_THRESH").unwrap(), "inf");
        assert_eq!(Config::default().posix_poll_backoff, 16);
        let c = cfg(&[("POSIX_POLL_BACKOFF", "inf")]).unwrap();
        assert_eq!(c.posix_poll_backoff, usize::MAX);
        assert_eq!(c.value_of("POSIX_POLL_BACKOFF").unwrap(), "inf");
        let c = cfg(&[("POSIX_POLL_BACKOFF", "0")]).unwrap();
        assert_eq!(c.value_of("POSIX_POLL_BACKOFF").unwrap(), "0");
        assert!(cfg(&[("POSIX_POLL_BACKOFF", "often")]).is_err());
        assert_eq!(Config::default().posix_fifo_max_poll, 16);
        let c = cfg(&[("POSIX_FIFO_MAX_POLL", "inf")]).unwrap();
        assert_eq!(c.value_of("POSIX_FIFO_MAX_POLL").unwrap(), "inf");
        assert_eq!(
            cfg(&[("POSIX_FIFO_MAX_POLL", "1")])
                .unwrap()
                .posix_fifo_max_poll,
            1
        );
        let e = cfg(&[("POSIX_FIFO_MAX_POLL", "0")]).unwrap_err();
        assert!(e.to_string().contains("UCX_POSIX_FIFO_MAX_POLL=0"), "{e}");
    }

    #[test]
    fn bad_values_name_the_variable() {
        let e = cfg(&[("RNDV_THRESH", "lots")]).unwrap_err();
        assert!(e.to_string().contains("UCX_RNDV_THRESH=lots"), "{e}");
        assert!(cfg(&[("POSIX_FIFO_SIZE", "100")]).is_err());
        assert!(cfg(&[("POSIX_FIFO_SHARED_SIZE", "24")]).is_err());
        assert!(cfg(&[("POSIX_FIFO_SHARED_SIZE", "0")]).is_err());
        let c = cfg(&[("POSIX_FIFO_SIZE", "8"), ("POSIX_FIFO_SHARED_SIZE", "32")]).unwrap();
        assert_eq!(c.value_of("POSIX_FIFO_SHARED_SIZE").unwrap(), "8");
        assert_eq!(Config::default().posix_fifo_shared_size, 32);
        assert!(cfg(&[("LOG_LEVEL", "loud")]).is_err());
        assert!(cfg(&[("TCP_PORT_RANGE", "9-3")]).is_err());
        assert_eq!(
            cfg(&[("TCP_PORT_RANGE", "2000-2010")])
                .unwrap()
                .tcp_port_range,
            (2000, 2010)
        );
    }

    #[test]
    fn times() {
        assert_eq!(parse_time_ns("100ms"), Some(100_000_000));
        assert_eq!(parse_time_ns("2s"), Some(2_000_000_000));
        assert_eq!(parse_time_ns("1.5us"), Some(1500));
        assert_eq!(parse_time_ns("fast"), None);
    }

    #[test]
    fn unknown_names_suggest_closest() {
        assert_eq!(closest_known("RNDV_TRESH"), Some("RNDV_THRESH"));
        assert_eq!(closest_known("TSL"), Some("TLS"));
        assert!(warn_if_unknown("NET_DEVICE"));
        assert!(!warn_if_unknown("TLS"));
    }
}

#[cfg(test)]
mod doc_tests {
    #[test]
    fn docs_configuration_md_lists_every_variable() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/configuration.md"
        ))
        .expect("docs/configuration.md");
        // The whole row, so that the page and `rucx-info -c` cannot disagree.
        let missing: Vec<String> = super::TABLE
            .iter()
            .map(|v| format!("| `UCX_{}` | `{}` | {} |", v.name, v.default, v.doc))
            .filter(|row| !doc.contains(row.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/configuration.md lacks these rows, or they differ from the table in \
             ucs/src/config.rs:\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn docs_configuration_md_lists_every_ucx_only_option() {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../docs/configuration.md"
        ))
        .expect("docs/configuration.md");
        let missing: Vec<String> = super::UCX_ONLY
            .iter()
            .map(|o| format!("| `UCX_{}` | `{}` | {} |", o.name, o.default, o.doc))
            .filter(|row| !doc.contains(row.as_str()))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/configuration.md lacks:\n{}",
            missing.join("\n")
        );
    }

    #[test]
    fn ucx_only_options_check_their_values() {
        let seg = super::UcxOnly::find("SEG_SIZE").unwrap();
        assert!(seg.check("3M").is_ok() && seg.check("8192").is_ok() && seg.check("inf").is_ok());
        assert!(seg.check("invalid-size").is_err());
        let b = super::UcxOnly::find("PROTO_ENABLE").unwrap();
        assert!(b.check("n").is_ok() && b.check("maybe").is_err());
        let t = super::UcxOnly::find("UD_TIMEOUT").unwrap();
        assert!(t.check("100ms").is_ok() && t.check("soon").is_err());
        assert!(super::UcxOnly::find("TLS").is_none());
        assert!(!super::warn_if_unknown("SEG_SIZE"));
    }
}
