//! `rucx-perftest --loopback` end to end: the UCP tag tests run between two real processes
//! and print a `Final:` line whose numbers are sane (no timing is asserted, STYLE.md §13),
//! and bad command lines and a dead server end in one error line and a non-zero exit.

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

/// The numbers of every `Final:` line: iterations, latency (percentile, average, overall),
/// bandwidth (average, overall), message rate (average, overall).
fn finals(out: &Output) -> Vec<[f64; 8]> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("Final:"))
        .map(|rest| {
            let v: Vec<f64> = rest
                .split_whitespace()
                .map(|w| w.parse().unwrap_or(f64::NAN))
                .collect();
            v.try_into()
                .unwrap_or_else(|v| panic!("Final: line with {v:?}"))
        })
        .collect()
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
    assert!((f[5] * 1048576.0 / 64.0 / f[7] - 1.0).abs() < 0.01, "{f:?}");
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
    for t in ["tag_lat", "tag_bw"] {
        let mut server = perftest().args(["-p", &port]).spawn().unwrap();
        let client = perftest()
            .args(["127.0.0.1", "-p", &port, "-t", t, "-n", "1000000000", "-f"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(1500));
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
