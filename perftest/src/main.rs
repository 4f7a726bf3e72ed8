//! `rucx-perftest`: point-to-point measurements with `ucx_perftest`'s command line and
//! output. No address: this process is the server; an address: the client, which sends its
//! parameters to the server over the out-of-band socket. `--loopback` starts the server as
//! a child process on this host.
//!
//! UCT-level tests (`am_lat`, `am_bw`, `put_lat`, `put_bw`, `get`) are in `uct_tests`,
//! UCP-level tests (tag, RMA, atomics, stream, active messages) in `ucp_tests`. A size
//! sweep (`-s 8..4M`) runs the test once per size over one out-of-band connection; the
//! client then writes `--json` and `--plot` (`results`, `plot`) and, with `--compare-ucx`,
//! runs UCX's `ucx_perftest` after each of its runs (`compare`).
// Unsafe is denied everywhere but in `mem`, where the tests' message memory is described
// to `ucp` and `uct` (STYLE.md §6).
#![deny(unsafe_code)]

mod args;
mod bootstrap;
mod compare;
#[allow(unsafe_code)]
mod mem;
mod plot;
mod report;
mod results;
mod ucp_tests;
mod uct_tests;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser as _;

use args::{Args, UCT_TESTS};
use bootstrap::Oob;

/// Which end of the test this process is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Server,
    Client,
}

/// Why a run failed; printed as one line.
#[derive(Debug)]
pub enum Error {
    Usage(String),
    Setup(String),
    Oob(std::io::Error),
    Peer(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Usage(s) | Error::Setup(s) | Error::Peer(s) => f.write_str(s),
            Error::Oob(e) => write!(f, "out-of-band connection: {e}"),
        }
    }
}

fn pin(args: &Args) -> Result<(), Error> {
    if let Some(cpu) = args.cpu().map_err(Error::Usage)? {
        let mut set = nix::sched::CpuSet::new();
        set.set(cpu)
            .map_err(|e| Error::Usage(format!("-c {cpu}: {e}")))?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
            .map_err(|e| Error::Setup(format!("cannot pin to CPU {cpu}: {e}")))?;
    }
    Ok(())
}

/// Runs one test (one size) on this side.
fn run_test(args: &Args, role: Role, oob: &mut Oob) -> Result<(), Error> {
    match args.test() {
        t if UCT_TESTS.contains(&t) => uct_tests::run(args, role, oob),
        t if ucp_tests::TESTS.contains(&t) => ucp_tests::run(args, role, oob),
        t => Err(unknown_test(t)),
    }
}

/// CPU time (user and system) of this process so far, in seconds.
fn cpu_seconds() -> Option<f64> {
    use nix::sys::resource::{getrusage, UsageWho};
    let u = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 * 1e-6;
    Some(t(u.user_time()) + t(u.system_time()))
}

/// When the current run's measured loop began, with the CPU time then: set by the
/// clocks (`report`), so that the setup before it — a CUDA context, GPU allocations,
/// which wait in the driver for a large part of a short run — is not taken for a core
/// shared with another process.
static MEASURED: std::sync::Mutex<Option<(std::time::Instant, Option<f64>)>> =
    std::sync::Mutex::new(None);

/// Marks the start of the measured loop (see [`MEASURED`]).
pub(crate) fn mark_measured() {
    let now = (std::time::Instant::now(), cpu_seconds());
    *MEASURED.lock().unwrap_or_else(|e| e.into_inner()) = Some(now);
}

/// The share of one CPU this process had since `t0` (wall clock, CPU time), or since the
/// measured loop began when that was later, for runs long enough to tell (a quarter of a
/// second).
fn cpu_share(t0: (std::time::Instant, Option<f64>)) -> Option<f64> {
    let m = *MEASURED.lock().unwrap_or_else(|e| e.into_inner());
    let t0 = match m {
        Some(m) if m.0 > t0.0 => m,
        _ => t0,
    };
    let wall = t0.0.elapsed().as_secs_f64();
    let cpu = cpu_seconds()? - t0.1?;
    (wall >= 0.25).then_some(cpu / wall)
}

/// Below this share of a CPU, a busy-polling side was sharing its core.
const MIN_CPU_SHARE: f64 = 0.75;

/// Why a run's figures cannot be trusted, from the client's and the server's CPU shares.
fn contention(client: Option<f64>, server: Option<f64>) -> Option<String> {
    let (who, share) = [("client", client), ("server", server)]
        .into_iter()
        .filter_map(|(w, s)| s.map(|s| (w, s)))
        .find(|&(_, s)| s < MIN_CPU_SHARE)?;
    Some(format!(
        "the {who} process had {:.0}% of a CPU during this run; it busy-polls, so it should \
         have had all of one: another process shared its core, and these figures measure \
         that sharing, not the library. Pin both to idle CPUs (-c A,B) or unload the machine.",
        share * 100.0
    ))
}

/// Runs every run of the command line (one, or one per size of a sweep) on this side; the
/// client collects the results.
fn run_all(args: &Args, role: Role, oob: &mut Oob) -> Result<Vec<results::RunResult>, Error> {
    pin(args)?;
    let runs = args.runs().map_err(Error::Usage)?;
    let sweep = runs.len() > 1 || args.sweep().ok().flatten().is_some();
    let quiet = args.format().quiet;
    let mut out = Vec::new();
    for (k, a) in runs.iter().enumerate() {
        let mut a = a.clone();
        a.no_header = sweep && k > 0 && (a.final_only || a.csv);
        if sweep {
            a.sweep_pos = Some((k + 1, runs.len()));
        }
        let a = &a;
        if role == Role::Server {
            // A server on another host checks its own memory.
            check_memory(a, 1)?;
        }
        if sweep && role == Role::Client && !quiet {
            println!(
                "# {}, {} bytes",
                a.test(),
                a.message_bytes().map_err(Error::Usage)?
            );
        }
        let t0 = (std::time::Instant::now(), cpu_seconds());
        run_test(a, role, oob)?;
        let share = cpu_share(t0);
        // Each side's share of a CPU while it ran: both busy-poll, so anything well below
        // one CPU means another process shared its core, and the figures measure that.
        let shares = match role {
            Role::Server => {
                oob.send(format!("cpu {}", share.unwrap_or(-1.0)).as_bytes())
                    .map_err(Error::Oob)?;
                None
            }
            Role::Client => {
                let m = oob.recv().map_err(Error::Oob)?;
                let theirs = std::str::from_utf8(&m)
                    .ok()
                    .and_then(|m| m.strip_prefix("cpu "))
                    .and_then(|v| v.parse::<f64>().ok())
                    .ok_or_else(|| Error::Peer("malformed CPU share from the server".into()))?;
                Some((share, (theirs >= 0.0).then_some(theirs)))
            }
        };
        let contended = shares.and_then(|(c, s)| contention(c, s));
        if let Some(why) = &contended {
            eprintln!("rucx-perftest: warning: {why}");
        }
        let ucx = match &a.compare_ucx {
            Some(path) => compare::run(a, path, role, oob)?,
            None => None,
        };
        if role == Role::Client {
            let row = report::take_finals()
                .pop()
                .ok_or_else(|| Error::Setup("the run ended without a final result".into()))?;
            if let Some(u) = &ucx {
                compare::print(a, &row, u);
            }
            let mut r = results::RunResult::new(a, row, ucx)?;
            r.cpu_share = shares;
            r.contended = contended.is_some();
            out.push(r);
        }
    }
    Ok(out)
}

fn unknown_test(t: &str) -> Error {
    Error::Usage(format!(
        "unknown test '{t}' ({}, {})",
        UCT_TESTS.join(", "),
        ucp_tests::TESTS.join(", ")
    ))
}

/// The server's answer to a client's command line: the handshake a client waits for, so
/// that a port where something else listens is an error and not a silent wait.
const HELLO: &[u8] = b"rucx-perftest ready";

/// How long a client waits for the server's handshake once connected.
const HELLO_WAIT: Duration = Duration::from_secs(10);

/// Set in the environment of `--loopback`'s server process, which has nobody to tell that
/// it waits.
const LOOPBACK_CHILD: &str = "RUCX_PERFTEST_LOOPBACK_CHILD";

fn server(port: u16, own_cpus: Option<String>) -> Result<(), Error> {
    if std::env::var_os(LOOPBACK_CHILD).is_none() {
        // As ucx_perftest says it.
        println!("Waiting for connection on port {port}...");
    }
    let mut oob = Oob::accept(port).map_err(Error::Oob)?;
    let argv = String::from_utf8(oob.recv().map_err(Error::Oob)?)
        .map_err(|_| Error::Peer("the client sent a malformed command line".into()))?;
    let mut full = vec!["rucx-perftest".to_string()];
    full.extend(argv.split('\0').filter(|s| !s.is_empty()).map(String::from));
    let mut args = match Args::try_parse_from(&full) {
        Ok(a) => a,
        Err(e) => {
            let msg = format!("the client's command line: {e}");
            let _ = oob.send(format!("error {msg}").as_bytes());
            return Err(Error::Peer(msg));
        }
    };
    oob.send(HELLO).map_err(Error::Oob)?;
    args.server = None;
    args.cpus = own_cpus;
    run_all(&args, Role::Server, &mut oob).map(drop)
}

fn client(args: &Args, host: &str) -> Result<Vec<results::RunResult>, Error> {
    let mut oob = Oob::connect(host, args.port, Duration::from_secs(10)).map_err(Error::Oob)?;
    let mut argv = args.to_server_argv();
    if let Some(p) = &args.compare_ucx {
        argv.extend(["--compare-ucx".to_string(), p.clone()]);
    }
    oob.send(argv.join("\0").as_bytes()).map_err(Error::Oob)?;
    let hello = match oob.recv_timeout(HELLO_WAIT) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
            return Err(Error::Peer(format!(
                "{host}:{} accepted the connection but gave no rucx-perftest handshake in {} s (is an rucx-perftest server listening there?)",
                args.port,
                HELLO_WAIT.as_secs()
            )))
        }
        Err(e) => return Err(Error::Oob(e)),
    };
    if hello != HELLO {
        let m = String::from_utf8_lossy(&hello);
        return Err(Error::Peer(match m.strip_prefix("error ") {
            Some(e) => format!("the server refused: {e}"),
            None => format!(
                "{host}:{} is not an rucx-perftest server of this version (it answered {:?})",
                args.port,
                m.chars().take(60).collect::<String>()
            ),
        }));
    }
    run_all(args, Role::Client, &mut oob)
}

/// Checks what can be checked before a server is started, so a bad command line gives one
/// error line instead of one from each side.
fn validate(args: &Args) -> Result<(), Error> {
    args.check_common().map_err(Error::Usage)?;
    for a in args.runs().map_err(Error::Usage)? {
        match a.test() {
            t if UCT_TESTS.contains(&t) => uct_tests::check_args(&a)?,
            t if ucp_tests::TESTS.contains(&t) => ucp_tests::check_args(&a)?,
            t => return Err(unknown_test(t)),
        }
        if a.compare_ucx.is_some() {
            a.to_ucx_argv().map_err(Error::Usage)?;
        }
        check_memory(&a, if a.loopback { 2 } else { 1 })?;
    }
    if let Some(p) = &args.compare_ucx {
        compare::check_program(p)?;
    }
    Ok(())
}

/// Refuses a run whose buffers cannot fit this machine, before anything is allocated
/// (instead of an abort in the allocator, or the OOM killer).
/// `processes`: how many processes of the run share this host.
fn check_memory(a: &Args, processes: u128) -> Result<(), Error> {
    let per_process = a.buffer_bytes().map_err(Error::Usage)?;
    let need = per_process * processes;
    let Some(have) = mem::available_bytes(!a.heap_buffers) else {
        return Ok(());
    };
    if need > u128::from(have) {
        let what = match &a.layout {
            Some(l) if !UCT_TESTS.contains(&a.test()) && a.message_bytes().is_ok() => {
                format!("-D {l} ({}-byte messages)", a.message_bytes().unwrap_or(0))
            }
            _ => format!("-s {}", a.size_arg()),
        };
        return Err(Error::Usage(format!(
            "{what}: the run needs {} of message buffers ({} per process), and this machine has {} available",
            mem::human(need),
            mem::human(per_process),
            mem::human(u128::from(have))
        )));
    }
    Ok(())
}

/// The two least busy CPUs this process may run on, from two samples of `/proc/stat`
/// 100 ms apart; `None` with fewer than two CPUs or nothing to read.
fn idle_cpus() -> Option<(usize, usize)> {
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let sample = || -> Option<Vec<(usize, u64, u64)>> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        Some(
            stat.lines()
                .filter_map(|l| {
                    let mut w = l.split_whitespace();
                    let cpu: usize = w.next()?.strip_prefix("cpu")?.parse().ok()?;
                    let v: Vec<u64> = w.filter_map(|x| x.parse().ok()).collect();
                    // idle + iowait, and the total.
                    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
                    Some((cpu, idle, v.iter().sum()))
                })
                .filter(|&(cpu, ..)| allowed.is_set(cpu).unwrap_or(false))
                .collect(),
        )
    };
    let a = sample()?;
    std::thread::sleep(Duration::from_millis(100));
    let b = sample()?;
    let mut busy: Vec<(f64, usize)> = a
        .iter()
        .zip(&b)
        .filter(|(x, y)| x.0 == y.0 && y.2 > x.2)
        .map(|(x, y)| (1.0 - (y.1 - x.1) as f64 / (y.2 - x.2) as f64, x.0))
        .collect();
    busy.sort_by(|p, q| p.0.total_cmp(&q.0));
    match busy[..] {
        [(_, c), (_, s), ..] => Some((c, s)),
        _ => None,
    }
}

fn loopback(args: &Args) -> Result<Vec<results::RunResult>, Error> {
    validate(args)?;
    // Two busy-polling processes must not share a core: unless told where (-c A,B), the
    // client and the server go to the two least busy CPUs.
    let pinned;
    let args = if args.cpus.is_none() {
        let mut a = args.clone();
        if let Some((c, sv)) = idle_cpus() {
            a.cpus = Some(format!("{c},{sv}"));
            let f = a.format();
            if !(f.quiet || f.final_only || f.csv || f.no_header || a.sweep_pos.is_some()) {
                println!(
                    "# client on CPU {c}, server on CPU {sv} (the least busy; -c A,B to choose)"
                );
            }
        }
        pinned = a;
        &pinned
    } else {
        args
    };
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(Error::Oob)?;
    let port = l.local_addr().map_err(Error::Oob)?.port();
    drop(l);
    let exe = std::env::current_exe()
        .map_err(|e| Error::Setup(format!("cannot find own executable: {e}")))?;
    // `-c A,B`: the client runs on A, the server on B.
    let mut server_args = vec!["-p".to_string(), port.to_string()];
    if let Some(b) = args.cpus.as_deref().and_then(|c| c.split(',').nth(1)) {
        server_args.extend(["-c".to_string(), b.trim().to_string()]);
    }
    let mut child = std::process::Command::new(exe)
        .args(&server_args)
        .env(LOOPBACK_CHILD, "1")
        .spawn()
        .map_err(|e| Error::Setup(format!("cannot start the server process: {e}")))?;
    let mut a = args.clone();
    a.port = port;
    let r = client(&a, "127.0.0.1");
    if r.is_err() {
        // The server may be waiting for a client that will not come (the client failed
        // before connecting) or for a peer that is gone: it must not outlive us.
        let _ = child.kill();
    }
    match child.wait() {
        Ok(st) if st.success() || r.is_err() => r,
        Ok(st) => Err(Error::Peer(format!("the server process exited with {st}"))),
        Err(e) => Err(Error::Setup(format!("waiting for the server: {e}"))),
    }
}

/// Message sizes of the default suite.
const SUITE_SIZES: [usize; 6] = [8, 64, 1 << 10, 8 << 10, 64 << 10, 1 << 20];

/// `--loopback` without `-t`: UCP tag latency and bandwidth over a size sweep, with the
/// transports the context selects (`UCX_TLS` and `UCX_NET_DEVICES` apply when set). Each
/// case moves a bounded number of bytes, so the whole suite takes seconds.
fn default_suite(args: &Args) -> Result<Vec<results::RunResult>, Error> {
    let tls = std::env::var("UCX_TLS")
        .map_or_else(|_| "UCX_TLS unset".into(), |v| format!("UCX_TLS={v}"));
    let mut out = Vec::new();
    let cases = 2 * SUITE_SIZES.len();
    for (t, (test, budget, most)) in [
        ("tag_lat", 256u64 << 20, 100_000u64),
        ("tag_bw", 1 << 30, 200_000),
    ]
    .into_iter()
    .enumerate()
    {
        for (k, size) in SUITE_SIZES.into_iter().enumerate() {
            let mut a = args.clone();
            a.sweep_pos = Some((t * SUITE_SIZES.len() + k + 1, cases));
            a.test = Some(test.to_string());
            a.tl = None;
            a.device = None;
            a.layout = None;
            a.size = Some(size.to_string());
            let n = args
                .iters
                .unwrap_or((budget / size as u64).clamp(1000, most));
            a.iters = Some(n);
            a.warmup = args.warmup.min(n / 10);
            if !a.format().quiet {
                println!("# {test}, {size} bytes ({tls})");
            }
            out.extend(loopback(&a)?);
        }
    }
    Ok(out)
}

/// `--loopback -t am_lat` (or `am_bw`) without `-x`: that UCT test over every
/// active-message transport between processes, over a few sizes.
fn uct_suite(args: &Args) -> Result<Vec<results::RunResult>, Error> {
    let cfg = ucs::Config::from_env().map_err(|e| Error::Usage(e.to_string()))?;
    let tls: Vec<String> = uct::discover(&cfg)
        .available
        .iter()
        .filter(|r| matches!(r.tl, "posix" | "tcp"))
        .filter(|r| r.tl != "tcp" || r.device == "lo")
        .map(|r| r.tl.to_string())
        .collect();
    if tls.is_empty() {
        return Err(Error::Setup(
            "no active-message transport between processes is available".into(),
        ));
    }
    let test = args.test();
    let sizes = match test {
        "am_lat" => &["8", "64", "1024", "4096"][..],
        _ => &["8", "1024", "8192"][..],
    };
    let mut out = Vec::new();
    for tl in &tls {
        for size in sizes {
            let mut a = args.clone();
            a.tl = Some(tl.clone());
            a.device = None;
            let layout = if *size == "8" || *size == "64" {
                "short"
            } else {
                "bcopy"
            };
            a.layout = Some(layout.to_string());
            a.size = Some(size.to_string());
            a.iters = Some(args.iters.unwrap_or(100_000));
            a.warmup = args.warmup.min(1000);
            if !a.format().quiet {
                println!("# {test} over {tl}, {size} bytes ({layout})");
            }
            out.extend(loopback(&a)?);
        }
    }
    Ok(out)
}

/// `--plot FILE --from A.json ...` without a test: draws earlier runs.
fn plot_only(args: &Args) -> Result<(), Error> {
    let Some(out) = &args.plot else {
        return Err(Error::Usage("--from needs --plot FILE.svg".into()));
    };
    let mut series = Vec::new();
    for f in &args.from {
        series.extend(results::read_series(f).map_err(Error::Usage)?);
    }
    plot::write_svg(out, &series).map_err(Error::Setup)
}

/// Refuses outputs that would fail only after the whole run: a `--plot` that is not SVG
/// (the only format drawn), and files that cannot be written.
fn check_outputs(args: &Args) -> Result<(), Error> {
    if let Some(p) = &args.plot {
        let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("");
        if !ext.eq_ignore_ascii_case("svg") {
            return Err(Error::Usage(format!(
                "--plot {}: the plot is drawn as SVG only; name the file .svg",
                p.display()
            )));
        }
    }
    let outs = [args.json.as_deref(), args.plot.as_deref()];
    for p in outs.into_iter().flatten() {
        if p == std::path::Path::new("-") {
            continue;
        }
        writable(p).map_err(|e| Error::Usage(format!("cannot write {}: {e}", p.display())))?;
    }
    Ok(())
}

/// Whether `p` can be written: an existing file is opened for writing (not truncated); a
/// new one is created and removed again (permission bits alone say little to root).
fn writable(p: &std::path::Path) -> Result<(), String> {
    use std::fs::OpenOptions;
    if p.is_dir() {
        return Err("it is a directory".into());
    }
    if p.exists() {
        return OpenOptions::new()
            .write(true)
            .open(p)
            .map(drop)
            .map_err(|e| e.to_string());
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(p)
        .map_err(|e| e.to_string())?;
    std::fs::remove_file(p).map_err(|e| e.to_string())
}

/// The client's outputs after the runs: `--json` and `--plot`.
fn outputs(args: &Args, runs: &[results::RunResult]) -> Result<(), Error> {
    if let Some(path) = &args.json {
        results::write_json(path, args, runs).map_err(Error::Setup)?;
    }
    if let Some(path) = &args.plot {
        let mut series = results::series(args, runs);
        for f in &args.from {
            series.extend(results::read_series(f).map_err(Error::Usage)?);
        }
        plot::write_svg(path, &series).map_err(Error::Setup)?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args = match Args::parse_cli() {
        Ok(a) => a,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    if let Ok(cfg) = ucs::Config::from_env() {
        ucs::log::init(cfg.log_level.to_filter());
    }
    let uct_sweep = matches!(args.test.as_deref(), Some("am_lat" | "am_bw")) && args.tl.is_none();
    let is_client = args.server.is_some() || args.loopback;
    let r = if let Err(e) = check_outputs(&args) {
        Err(e)
    } else if !args.from.is_empty() && args.test.is_none() && !args.loopback {
        plot_only(&args)
    } else if !is_client && (args.json.is_some() || args.plot.is_some()) {
        Err(Error::Usage(
            "--json and --plot are written by the client (give a server address or --loopback)"
                .into(),
        ))
    } else {
        let runs = if args.loopback && args.test.is_none() {
            default_suite(&args)
        } else if args.loopback && uct_sweep {
            uct_suite(&args)
        } else if args.loopback {
            loopback(&args)
        } else {
            match &args.server {
                None => server(args.port, args.cpus.clone()).map(|()| Vec::new()),
                Some(h) => validate(&args).and_then(|()| client(&args, &h.clone())),
            }
        };
        runs.and_then(|r| {
            if is_client {
                outputs(&args, &r)
            } else {
                Ok(())
            }
        })
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let who = if !is_client { " (server)" } else { "" };
            eprintln!("rucx-perftest{who}: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_side_with_well_under_one_cpu_marks_the_run_contended() {
        assert_eq!(contention(Some(0.99), Some(1.0)), None);
        assert_eq!(contention(None, None), None, "runs too short to tell");
        let w = contention(Some(0.98), Some(0.31)).unwrap();
        assert!(w.contains("server process had 31%"), "{w}");
        let w = contention(Some(0.5), Some(0.4)).unwrap();
        assert!(w.contains("client"), "the first side named: {w}");
    }

    #[test]
    fn the_least_busy_cpus_are_two_allowed_ones() {
        if let Some((c, s)) = idle_cpus() {
            assert_ne!(c, s);
            let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
            assert!(allowed.is_set(c).unwrap() && allowed.is_set(s).unwrap());
        } else {
            eprintln!("skipped: fewer than two CPUs here");
        }
    }
}
