//! `rucx-perftest --loopback` end to end: every test name runs between two real processes
//! and prints a final line that `ucx_perftest`'s format parses, with sane numbers (no
//! timing is asserted, STYLE.md §13); the output has `ucx_perftest`'s layout line for line
//! (checked against Debian's `ucx_perftest` where installed); sweeps, named layouts,
//! `--json`, `--plot` and `--compare-ucx` work; and bad command lines, an unreachable or a
//! dead server end in one error line and a non-zero exit.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Each run is two processes spinning on the CPU; on a small machine, running the cases
/// one at a time keeps them from starving each other.
static SERIAL: Mutex<()> = Mutex::new(());

fn perftest() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rucx-perftest"))
}

fn run(env: &[(&str, &str)], args: &[&str]) -> Output {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut c = perftest();
    c.arg("--loopback").args(args).envs(env.iter().copied());
    c.output().expect("run rucx-perftest")
}

/// `ucx_perftest`'s final line, as its printf format lays it out: a 14-column stage
/// (`Final:`, or blank under `-f`), then `%14.0f %10.3f %9.3f %9.3f %10.2f %10.2f %11.0f
/// %11.0f` (iterations; latency percentile, average, overall in µs; bandwidth average,
/// overall in MB/s; message rate average, overall). The same expression parses UCX's own
/// output (`output_format_matches_ucx_perftest`).
const UCX_FINAL: &str = r"^(?:Final:)?\s+(\d+)\s+(\d+\.\d{3})\s+(\d+\.\d{3})\s+(\d+\.\d{3})\s+(\d+\.\d{2})\s+(\d+\.\d{2})\s+(\d+)\s+(\d+)\s*$";

/// The numbers of every final line (`Final:` or, under `-f`, the unlabelled one).
fn finals_of(stdout: &str) -> Vec<[f64; 8]> {
    let re = regex::Regex::new(UCX_FINAL).unwrap();
    stdout
        .lines()
        .filter_map(|l| re.captures(l))
        .map(|c| std::array::from_fn(|i| c[i + 1].parse::<f64>().unwrap()))
        .collect()
}

fn finals(out: &Output) -> Vec<[f64; 8]> {
    finals_of(&String::from_utf8_lossy(&out.stdout))
}

/// Runs a test that must succeed and returns its single `Final:` line, checked for sanity.
fn final_of(env: &[(&str, &str)], args: &[&str], iters: f64) -> [f64; 8] {
    let out = run(env, args);
    assert!(
        out.status.success(),
        "{args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let f = finals(&out);
    assert_eq!(f.len(), 1, "{args:?}: {f:?}");
    let f = f[0];
    assert_eq!(f[0], iters, "{args:?}: iterations in {f:?}");
    for (i, x) in f.iter().enumerate() {
        // Bandwidth is printed in MB/s with two decimals: a slow run of small messages
        // (two processes sharing a CPU) can print 0.00.
        let ok = if i == 4 || i == 5 {
            *x >= 0.0
        } else {
            *x > 0.0
        };
        assert!(x.is_finite() && ok, "{args:?}: column {i} of {f:?}");
    }
    f
}

#[test]
fn tag_tests_report_sane_numbers() {
    for t in ["tag_lat", "tag_bw", "tag_sync_lat", "tag_sync_bw"] {
        final_of(
            &[],
            &["-t", t, "-n", "1000", "-w", "100", "-s", "8", "-f"],
            1000.0,
        );
    }
}

/// `ucp_put_lat`, `ucp_put_bw` and `ucp_am_lat` over shared memory (mapped region, eager AM) and tcp
/// (RMA as checked messages), small and larger messages.
#[test]
fn put_and_am_latency_tests_run() {
    for tls in ["posix,cma", "tcp"] {
        for t in ["ucp_put_lat", "ucp_put_bw", "ucp_am_lat"] {
            for size in ["8", "100000"] {
                final_of(
                    &[("UCX_TLS", tls), ("UCX_NET_DEVICES", "lo")],
                    &["-t", t, "-n", "500", "-w", "50", "-s", size, "-f"],
                    500.0,
                );
            }
        }
    }
}

#[test]
fn latency_is_half_the_round_trip_and_rate_one_way() {
    let f = final_of(
        &[],
        &["-t", "tag_lat", "-n", "1000", "-w", "10", "-s", "64", "-f"],
        1000.0,
    );
    // Overall latency in µs and the message rate describe the same one-way time.
    let rate_from_lat = 1e6 / f[3];
    assert!((rate_from_lat / f[7] - 1.0).abs() < 0.01, "{f:?}");
    // Bandwidth is the message rate times the size.
    // (MB/s is printed with two decimals: a slow run's is mostly rounding.)
    assert!(
        (f[5] - f[7] * 64.0 / 1048576.0).abs() <= 0.005 + 0.01 * f[5],
        "{f:?}"
    );
}

#[test]
fn iov_layouts_and_validation() {
    for t in ["tag_lat", "tag_bw", "tag_sync_lat", "tag_sync_bw"] {
        for d in ["iov", "iov,contig", "contig,iov"] {
            final_of(
                &[],
                &[
                    "-t",
                    t,
                    "-n",
                    "300",
                    "-w",
                    "10",
                    "-D",
                    d,
                    "-s",
                    "1000,2000",
                    "-f",
                    "--validate",
                ],
                300.0,
            );
        }
    }
}

#[test]
fn wildcard_unexpected_and_protocol_sizes_validate() {
    // 8 B: eager short; 12000 B: beyond eager short; 100 KB and 1 MB: rendezvous on shared
    // memory. Each with a wildcard receive, forced unexpected, and a small window.
    for size in ["8", "12000", "100000", "1m"] {
        for t in ["tag_lat", "tag_bw", "tag_sync_bw"] {
            for opts in [&["-C"][..], &["-U"], &["-C", "-U", "-O", "3"]] {
                let mut a = vec![
                    "-t",
                    t,
                    "-n",
                    "100",
                    "-w",
                    "5",
                    "-s",
                    size,
                    "-f",
                    "--validate",
                ];
                a.extend_from_slice(opts);
                final_of(&[], &a, 100.0);
            }
        }
    }
}

#[test]
fn heap_and_worker_allocated_buffers_both_validate() {
    // Message buffers come from the worker (`mem_map`, shared memory: a same-host
    // rendezvous maps the peer's and copies) unless `--heap-buffers` (cma). Both move
    // checked data, contiguous and iov, split and whole.
    for heap in [false, true] {
        for (size, layout) in [("1m", "contig"), ("100000,31000", "iov")] {
            for split in ["32k", "inf"] {
                let mut a = vec![
                    "-t",
                    "tag_lat",
                    "-n",
                    "50",
                    "-w",
                    "5",
                    "-s",
                    size,
                    "-D",
                    layout,
                    "-f",
                    "--validate",
                ];
                if heap {
                    a.push("--heap-buffers");
                }
                final_of(&[("UCX_RNDV_SPLIT_THRESH", split)], &a, 50.0);
            }
        }
    }
}

#[test]
fn tcp_and_shared_memory_transports() {
    for tls in ["tcp", "posix", "posix,cma"] {
        let env = [("UCX_TLS", tls), ("UCX_NET_DEVICES", "lo")];
        for size in ["8", "1000,50000", "300000"] {
            for t in ["tag_lat", "tag_bw"] {
                final_of(
                    &env,
                    &[
                        "-t",
                        t,
                        "-n",
                        "100",
                        "-w",
                        "5",
                        "-s",
                        size,
                        "-D",
                        "iov",
                        "-f",
                        "--validate",
                    ],
                    100.0,
                );
            }
        }
    }
}

#[test]
fn default_suite_runs_tag_tests_over_a_size_sweep() {
    let out = run(&[], &["-n", "200", "-w", "10", "-f"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("# tag_lat").count(), 6, "{stdout}");
    assert_eq!(stdout.matches("# tag_bw").count(), 6, "{stdout}");
    let f = finals(&out);
    assert_eq!(f.len(), 12, "{stdout}");
    assert!(
        f.iter().flatten().all(|x| x.is_finite() && *x >= 0.0),
        "{f:?}"
    );
    assert!(f.iter().all(|r| r[3] > 0.0 && r[7] > 0.0), "{f:?}");
}

/// A run that must fail: non-zero exit, an error line, no panic.
fn fails(args: &[&str], what: &str) {
    let out = run(&[], args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(stderr.contains(what), "{args:?}: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
}

#[test]
fn bad_command_lines_are_one_error_line() {
    fails(&["-t", "tag_nope"], "unknown test 'tag_nope'");
    fails(&["-t", "tag_lat", "-s", "8,x"], "bad size");
    fails(&["-t", "tag_bw", "-s", "0"], "at least 1 byte");
    fails(
        &["-t", "tag_lat", "-D", "zcopy"],
        "not supported by UCP tests",
    );
    fails(&["-t", "tag_lat", "-D", "iov,iov,iov"], "at most");
}

#[test]
fn dead_server_ends_the_client() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let port = {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    for (t, extra) in [
        ("tag_lat", &[][..]),
        ("tag_bw", &[][..]),
        ("ucp_get", &[][..]),
        ("ucp_fadd", &[][..]),
        ("stream_lat", &[][..]),
        ("ucp_am_bw", &[][..]),
        ("put_lat", &["-x", "cma"][..]),
    ] {
        let mut server = perftest().args(["-p", &port]).spawn().unwrap();
        let client = perftest()
            .args(["127.0.0.1", "-p", &port, "-t", t, "-n", "1000000000", "-f"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1000));
        server.kill().unwrap();
        server.wait().unwrap();
        let start = Instant::now();
        let out = client.wait_with_output().unwrap();
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{t}: the client hung"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{t}: {stderr}");
        assert!(!stderr.contains("panicked"), "{t}: {stderr}");
        assert!(
            stderr.contains("peer") || stderr.contains("out-of-band"),
            "{t}: {stderr}"
        );
    }
}

/// Says why a case is skipped, past libtest's capture (so a skip is never silent); in CI
/// (`RUCX_CI` set by `.ci/run`, where `contrib/test-all.sh` installs every tool) a skip is
/// a failure.
fn skip(why: &str) {
    assert!(
        std::env::var_os("RUCX_CI").is_none_or(|v| v.is_empty() || v == "0"),
        "RUCX_CI is set, so this must run, but: {why}"
    );
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// Every test name of ucx_perftest that Rucx has, over the transports the worker picks
/// (UCP) or a transport that has the operation (UCT).
#[test]
fn every_test_name_runs() {
    let cases: &[(&str, &[&str])] = &[
        ("am_lat", &["-x", "posix"]),
        ("am_bw", &["-x", "posix", "-D", "bcopy", "-s", "1024"]),
        ("put_lat", &["-x", "cma"]),
        ("put_bw", &["-x", "cma", "-s", "4096"]),
        ("get", &["-x", "cma", "-s", "4096"]),
        ("tag_lat", &[]),
        ("tag_bw", &[]),
        ("tag_sync_lat", &[]),
        ("tag_sync_bw", &[]),
        ("ucp_put_lat", &[]),
        ("ucp_put_bw", &[]),
        ("ucp_get", &["-s", "4096"]),
        ("ucp_add", &[]),
        ("ucp_fadd", &[]),
        ("ucp_swap", &["-s", "4"]),
        ("ucp_cswap", &[]),
        ("stream_lat", &["-s", "1000"]),
        ("stream_bw", &["-s", "1000"]),
        ("ucp_am_lat", &[]),
        ("ucp_am_bw", &["-s", "1000"]),
    ];
    for (t, extra) in cases {
        let mut a = vec!["-t", t, "-n", "300", "-w", "10", "-f"];
        a.extend_from_slice(extra);
        let f = final_of(&[], &a, 300.0);
        // A latency test's message rate is the inverse of its overall latency.
        if t.ends_with("_lat")
            || ["get", "ucp_get", "ucp_fadd", "ucp_swap", "ucp_cswap"].contains(t)
        {
            assert!((1e6 / f[3] / f[7] - 1.0).abs() < 0.02, "{t}: {f:?}");
        }
    }
}

/// The one-sided, stream and AM tests over tcp too, where RMA and atomics travel as
/// messages the target executes (and the server checks what the atomics left).
#[test]
fn one_sided_stream_and_am_tests_over_tcp() {
    let env = [("UCX_TLS", "tcp"), ("UCX_NET_DEVICES", "lo")];
    for (t, size) in [
        ("ucp_get", "100000"),
        ("ucp_add", "4"),
        ("ucp_fadd", "8"),
        ("ucp_swap", "8"),
        ("ucp_cswap", "4"),
        ("stream_lat", "70000"),
        ("stream_bw", "8"),
        ("ucp_am_bw", "100000"),
    ] {
        final_of(
            &env,
            &["-t", t, "-s", size, "-n", "200", "-w", "5", "-f"],
            200.0,
        );
    }
    for t in ["put_lat", "put_bw", "get"] {
        final_of(
            &[],
            &[
                "-t", t, "-x", "tcp", "-d", "lo", "-s", "1000", "-n", "200", "-w", "5", "-f",
            ],
            200.0,
        );
    }
}

/// The named application layouts (`ucp::dt::apps`) on both sides, and mixed with contig, with
/// every message checked.
#[test]
fn named_layouts_send_and_receive_validated() {
    for d in [
        "milc:4",
        "nas_mg_x:8",
        "nas_mg_y:8,contig",
        "contig,nas_mg_z:8",
        "specfem3d_cm:300,40,3000,200",
        "wrf_x_vec:8,3",
        "wrf_y_sa:8,3,wrf_y_vec:8,3",
        "stencil:8,y,2",
    ] {
        for t in ["tag_lat", "tag_bw"] {
            final_of(
                &[],
                &["-t", t, "-D", d, "-n", "100", "-w", "5", "-f", "--validate"],
                100.0,
            );
        }
    }
    // The message size is the layout's: nas_mg_y:8 is 8 rows of 16 doubles.
    let out = run(
        &[],
        &[
            "-t",
            "tag_lat",
            "-D",
            "nas_mg_y:8",
            "-n",
            "100",
            "-w",
            "5",
            "--json",
            "-",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["runs"][0]["size"], 1024);
    assert_eq!(doc["runs"][0]["send_layout"], "nas_mg_y:18x10x10");
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rucx-perftest-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn sweeps_write_json_and_a_plot() {
    let dir = tmpdir("sweep");
    let (json, svg) = (dir.join("r.json"), dir.join("r.svg"));
    let out = run(
        &[],
        &[
            "-t",
            "tag_lat",
            "-s",
            "8..1k:x4",
            "-n",
            "200",
            "-w",
            "5",
            "-f",
            "--json",
            json.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
            "--label",
            "shm",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    // 8, 32, 128, 512, and the last size 1024.
    assert_eq!(finals(&out).len(), 5, "{stdout}");
    assert_eq!(
        stdout.matches("# iterations").count(),
        1,
        "one header under -f: {stdout}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    let sizes: Vec<u64> = runs.iter().map(|r| r["size"].as_u64().unwrap()).collect();
    assert_eq!(sizes, [8, 32, 128, 512, 1024]);
    for r in runs {
        assert_eq!(r["iterations"], 200);
        assert!(r["latency_us"]["percentile"].as_f64().unwrap() > 0.0);
        assert_eq!(r["kind"], "latency");
    }
    assert_eq!(doc["label"], "shm");
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert!(plot.starts_with("<svg") && plot.contains(">shm<"), "{plot}");
    assert_eq!(
        plot.matches("<polyline").count(),
        2,
        "one line in each panel"
    );
    // Earlier runs join a later plot as lines of their own.
    let both = dir.join("both.svg");
    let out = perftest()
        .args([
            "--plot",
            both.to_str().unwrap(),
            "--from",
            json.to_str().unwrap(),
        ])
        .args(["--from", json.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&both)
            .unwrap()
            .matches("<polyline")
            .count(),
        4
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn csv_numeric_and_compact_sizes() {
    let out = run(&[], &["-t", "tag_lat", "-n", "200", "-w", "5", "-v"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("iterations,50.0_percentile_lat,avg_lat,overall_lat,avg_bw,overall_bw,avg_mr,overall_mr")
    );
    let last: Vec<&str> = stdout.lines().last().unwrap().split(',').collect();
    assert_eq!((last.len(), last[0]), (8, "200"), "{stdout}");
    let out = run(
        &[],
        &[
            "-t", "tag_bw", "-n", "2000", "-w", "5", "-N", "-s", "512:4", "-D", "iov",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let fin = stdout.lines().find(|l| l.starts_with("Final:")).unwrap();
    assert!(fin.contains(" 2,000 "), "{fin}");
}

/// Runs Debian's `ucx_perftest` (server and client) with `args` over shared memory.
fn ucx_perftest(bin: &str, args: &[&str]) -> String {
    let port = {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let mut server = Command::new(bin)
        .args(["-p", &port])
        .env("UCX_TLS", "posix")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let out = loop {
        let out = Command::new(bin)
            .args(["127.0.0.1", "-p", &port])
            .args(args)
            .env("UCX_TLS", "posix")
            .output()
            .unwrap();
        if out.status.success() || Instant::now() > deadline {
            break out;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let _ = server.kill();
    let _ = server.wait();
    assert!(
        out.status.success(),
        "{bin} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What a script sees: the table's frame and header lines, and the shape of the rest
/// (numbers blanked).
fn shape(out: &str) -> Vec<String> {
    out.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            if l.starts_with('+') || l.starts_with('|') || l.starts_with("iterations,") {
                l.to_string()
            } else {
                let lead = l
                    .chars()
                    .take_while(|c| !c.is_ascii_digit())
                    .collect::<String>();
                format!(
                    "{}<{} numbers>",
                    lead.trim_end(),
                    l[lead.len()..]
                        .split([' ', ','])
                        .filter(|w| !w.is_empty())
                        .count()
                )
            }
        })
        .collect()
}

/// The same command line gives the same table, header lines and final-line layout as
/// Debian's ucx_perftest 1.13 (installed by contrib/test-all.sh), and the same expression
/// parses both programs' final lines.
#[test]
fn output_format_matches_ucx_perftest() {
    const UCX: &str = "/usr/bin/ucx_perftest";
    if !Path::new(UCX).exists() {
        skip(&format!(
            "{UCX} not installed (Debian ucx-utils): output not compared with UCX"
        ));
        return;
    }
    for (t, fmt) in [
        ("tag_lat", &[][..]),
        ("tag_bw", &[][..]),
        ("tag_lat", &["-f"][..]),
        ("ucp_get", &["-f"][..]),
        ("ucp_add", &["-v"][..]),
        ("tag_bw", &["-f", "-v"][..]),
    ] {
        let mut a = vec!["-t", t, "-n", "2000", "-w", "10"];
        a.extend_from_slice(fmt);
        let theirs = ucx_perftest(UCX, &a);
        let ours = run(&[("UCX_TLS", "posix")], &a);
        let ours = String::from_utf8_lossy(&ours.stdout).into_owned();
        // Interval rows come once a second, so their number differs between runs; the
        // rest of the shape must match.
        let strip = |v: Vec<String>| -> Vec<String> {
            v.into_iter()
                .filter(|l| !l.starts_with("[thread"))
                .collect()
        };
        assert_eq!(
            strip(shape(&ours)),
            strip(shape(&theirs)),
            "{t} {fmt:?}\nours:\n{ours}\ntheirs:\n{theirs}"
        );
        if !fmt.contains(&"-v") {
            assert_eq!(finals_of(&theirs).len(), 1, "{theirs}");
            assert_eq!(finals_of(&ours).len(), 1, "{ours}");
            assert_eq!(finals_of(&theirs)[0][0], 2000.0);
        }
    }
}

#[test]
fn compare_ucx_prints_both_rows_and_the_ratio() {
    const UCX: &str = "/usr/bin/ucx_perftest";
    if !Path::new(UCX).exists() {
        skip(&format!(
            "{UCX} not installed (Debian ucx-utils): --compare-ucx not run"
        ));
        return;
    }
    let out = run(
        &[("UCX_TLS", "posix")],
        &[
            "-t",
            "tag_lat",
            "-s",
            "8..16",
            "-n",
            "1000",
            "-w",
            "10",
            "--compare-ucx",
            UCX,
            "--json",
            "-",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let runs = doc["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2);
    for r in runs {
        assert_eq!(r["ucx"]["iterations"], 1000, "{r}");
        assert_eq!(r["ucx"]["program"], UCX);
        assert!(r["ucx"]["latency_us"]["percentile"].as_f64().unwrap() > 0.0);
    }
    let out = run(
        &[("UCX_TLS", "posix")],
        &[
            "-t",
            "ucp_get",
            "-n",
            "1000",
            "-w",
            "10",
            "--compare-ucx",
            UCX,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("rucx ") || l.starts_with("ucx ") || l.starts_with("ratio "))
        .collect();
    assert_eq!(rows.len(), 3, "{stdout}");
    let ratio: Vec<f64> = rows[2]
        .split_whitespace()
        .skip(1)
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(ratio[0], 1.0, "same iterations: {stdout}");
    assert!(ratio.iter().all(|r| r.is_finite() && *r > 0.0), "{stdout}");
}

#[test]
fn more_bad_input_is_one_error_line() {
    fails(&["-t", "tag_lat", "-s", "8..4"], "bad sweep");
    fails(&["-t", "tag_lat", "-s", "1024:x"], "bad size");
    // Without a GPU the driver's absence is the reason (with one, `-m cuda` runs).
    if ucs::cuda::driver().is_none() {
        fails(&["-t", "tag_lat", "-m", "cuda"], "no CUDA driver");
    }
    fails(&["-t", "tag_lat", "-m", "rocm"], "not supported");
    fails(&["-t", "put_lat", "-x", "posix", "-m", "cuda"], "UCP tests");
    fails(&["-t", "tag_lat", "-m", "floppy"], "unknown memory type");
    fails(&["-t", "put_lat", "-x", "posix"], "no put_zcopy");
    fails(&["-t", "get", "-x", "cma", "-D", "short"], "zcopy only");
    fails(&["-t", "am_lat", "-x", "self"], "only its own process");
    fails(&["-t", "put_lat"], "give -x");
    fails(&["-t", "ucp_fadd", "-s", "16"], "4 or 8");
    fails(&["-t", "tag_lat", "-D", "milc:3"], "even");
    fails(&["-t", "tag_lat", "-D", "nope:3"], "not supported");
    fails(&["-t", "tag_lat", "-R", "200"], "percentile");
    fails(
        &[
            "-t",
            "tag_lat",
            "--compare-ucx",
            "/nonexistent/ucx_perftest",
        ],
        "no program",
    );
    fails(
        &[
            "-t",
            "tag_lat",
            "-D",
            "milc:4",
            "--compare-ucx",
            "/bin/true",
        ],
        "no application layouts",
    );
}

#[test]
fn unreachable_server_is_one_error_line() {
    // Nothing listens on the port: the client says so after a second, retries for 10 s,
    // then gives up with one error line. The port stays bound, without listening, for the
    // whole test: a port merely freed could be taken meanwhile by a server of a test
    // running beside this one (it was, once).
    use nix::sys::socket::{
        bind, getsockname, socket, AddressFamily, SockFlag, SockType, SockaddrIn,
    };
    let held = socket(
        AddressFamily::Inet,
        SockType::Stream,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .expect("socket");
    bind(
        std::os::fd::AsRawFd::as_raw_fd(&held),
        &SockaddrIn::new(127, 0, 0, 1, 0),
    )
    .expect("bind");
    let port = getsockname::<SockaddrIn>(std::os::fd::AsRawFd::as_raw_fd(&held))
        .expect("getsockname")
        .port()
        .to_string();
    for host in ["127.0.0.1", "no-such-host.invalid"] {
        let start = Instant::now();
        let out = perftest()
            .args([host, "-p", &port, "-t", "tag_lat", "-n", "10"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{host}: {stderr}");
        let errors: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.contains("nothing listening at"))
            .collect();
        assert_eq!(errors.len(), 1, "{host}: {stderr}");
        assert!(
            stderr.contains("cannot connect") || stderr.contains("cannot resolve"),
            "{stderr}"
        );
        if host == "127.0.0.1" {
            assert!(
                stderr.contains("nothing listening at 127.0.0.1"),
                "the wait is announced: {stderr}"
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{host}: took {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn a_listener_that_never_answers_is_an_error_within_the_handshake_wait() {
    // Something else listens on the port and accepts, but says nothing.
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let hold = std::thread::spawn(move || {
        let (c, _) = l.accept().unwrap();
        std::thread::sleep(Duration::from_secs(15));
        drop(c);
    });
    let start = Instant::now();
    let out = perftest()
        .args(["127.0.0.1", "-p", &port, "-t", "tag_lat", "-n", "10"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("gave no rucx-perftest handshake"),
        "{stderr}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(14),
        "{:?}",
        start.elapsed()
    );
    hold.join().unwrap();
}

#[test]
fn impossible_runs_and_outputs_are_refused_before_anything_runs() {
    let refused = |args: &[&str], want: &str| {
        let start = Instant::now();
        let out = perftest().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line: {stderr}");
        assert!(
            String::from_utf8_lossy(&out.stdout).trim().is_empty(),
            "{args:?}: nothing measured"
        );
        assert!(start.elapsed() < Duration::from_secs(10), "{args:?}");
    };
    refused(
        &["--loopback", "-t", "tag_lat", "-s", "99999999999999"],
        "of message buffers",
    );
    refused(&["--loopback", "-t", "tag_lat", "-s", "4000g"], "available");
    refused(
        &["--loopback", "-t", "tag_lat", "-D", "milc:300"],
        "-D milc:300",
    );
    refused(&["--loopback", "-t", "tag_lat", "-n", "0"], "-n 0");
    refused(
        &["--loopback", "-t", "tag_lat", "--plot", "x.png"],
        "SVG only",
    );
    refused(
        &[
            "--loopback",
            "-t",
            "tag_lat",
            "--json",
            "/nonexistent-dir/x.json",
        ],
        "cannot write",
    );
}
