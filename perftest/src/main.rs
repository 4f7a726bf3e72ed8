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
        let a = &a;
        if sweep && role == Role::Client && !quiet {
            println!(
                "# {}, {} bytes",
                a.test(),
                a.message_bytes().map_err(Error::Usage)?
            );
        }
        run_test(a, role, oob)?;
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
            out.push(results::RunResult::new(a, row, ucx)?);
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

fn server(port: u16, own_cpus: Option<String>) -> Result<(), Error> {
    let mut oob = Oob::accept(port).map_err(Error::Oob)?;
    let argv = String::from_utf8(oob.recv().map_err(Error::Oob)?)
        .map_err(|_| Error::Peer("the client sent a malformed command line".into()))?;
    let mut full = vec!["rucx-perftest".to_string()];
    full.extend(argv.split('\0').filter(|s| !s.is_empty()).map(String::from));
    let mut args = Args::try_parse_from(&full)
        .map_err(|e| Error::Peer(format!("the client's command line: {e}")))?;
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
    }
    if let Some(p) = &args.compare_ucx {
        compare::check_program(p)?;
    }
    Ok(())
}

fn loopback(args: &Args) -> Result<Vec<results::RunResult>, Error> {
    validate(args)?;
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
    let tls = std::env::var("UCX_TLS").unwrap_or_else(|_| "auto".into());
    let mut out = Vec::new();
    for (test, budget, most) in [
        ("tag_lat", 256u64 << 20, 100_000u64),
        ("tag_bw", 1 << 30, 200_000),
    ] {
        for size in SUITE_SIZES {
            let mut a = args.clone();
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
                println!("# {test}, {size} bytes (transports: {tls})");
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
    let r = if !args.from.is_empty() && args.test.is_none() && !args.loopback {
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
