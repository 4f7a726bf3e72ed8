//! A run on two "hosts" by address: two network namespaces joined by a veth pair, the
//! server in one and the client in the other, with nothing but the tcp transport between
//! them (`UCX_TLS=tcp`, the veth device). Needs root (or CAP_NET_ADMIN) and `ip`; where
//! `ip netns add` is not permitted the test says so and skips. Namespaces and processes are
//! removed even when the test fails; names carry the process id and a counter, so
//! concurrent runs do not collide.

use std::io::Write as _;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Both veth ends get this name inside their namespace, so `-d` and `UCX_NET_DEVICES`
/// name the same device on both sides (the server runs the client's command line).
const DEV: &str = "rucx0";
const SERVER_IP: &str = "10.213.7.1";
const CLIENT_IP: &str = "10.213.7.2";

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

fn ip(args: &[&str]) -> Result<Output, String> {
    Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))
}

fn ip_ok(args: &[&str]) -> Result<(), String> {
    let out = ip(args)?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces joined by a veth pair; removed on drop (which takes the veth with it).
struct Pair {
    ns: [String; 2],
}

impl Pair {
    /// Creates the pair; `Err` when namespaces cannot be made here (the reason).
    fn new() -> Result<Pair, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let tag = format!(
            "{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let ns = [format!("rucx-pt-{tag}-s"), format!("rucx-pt-{tag}-c")];
        ip_ok(&["netns", "add", &ns[0]])?;
        let mut pair = Pair {
            ns: [ns[0].clone(), String::new()],
        };
        ip_ok(&["netns", "add", &ns[1]])?;
        pair.ns[1] = ns[1].clone();
        // Veth names live in the root namespace until moved: short and unique.
        let id = std::process::id() % 100_000;
        let n = N.load(Ordering::Relaxed);
        let (va, vb) = (format!("rxs{id}_{n}"), format!("rxc{id}_{n}"));
        ip_ok(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        for (v, ns, addr) in [(&va, &ns[0], SERVER_IP), (&vb, &ns[1], CLIENT_IP)] {
            if let Err(e) = ip_ok(&["link", "set", v, "netns", ns]) {
                let _ = ip(&["link", "del", v]);
                return Err(e);
            }
            ip_ok(&["-n", ns, "link", "set", v, "name", DEV])?;
            ip_ok(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", DEV])?;
            ip_ok(&["-n", ns, "link", "set", DEV, "up"])?;
            ip_ok(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(pair)
    }

    /// `rucx-perftest ARGS` inside namespace `i`, over tcp on the veth only.
    fn perftest(&self, i: usize, args: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args([
            "netns",
            "exec",
            &self.ns[i],
            env!("CARGO_BIN_EXE_rucx-perftest"),
        ])
        .args(args)
        .env("UCX_TLS", "tcp")
        .env("UCX_NET_DEVICES", DEV);
        c
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        for ns in &self.ns {
            if !ns.is_empty() {
                let _ = ip(&["netns", "del", ns]);
            }
        }
    }
}

/// A child process that is killed when dropped (a failed assertion must not leave a
/// server behind).
struct Reap(Option<Child>);

impl Reap {
    /// Waits for the process with a deadline (killing it when the deadline passes) and
    /// returns what it printed.
    fn output(mut self, limit: Duration) -> Output {
        let mut c = self.0.take().expect("a child");
        let deadline = Instant::now() + limit;
        loop {
            match c.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = c.kill();
                    let _ = c.wait();
                    panic!("no exit within {limit:?}");
                }
            }
        }
        c.wait_with_output().expect("exited")
    }
}

impl Drop for Reap {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The numbers of the `Final:` line.
fn final_line(stdout: &str) -> Option<Vec<f64>> {
    let l = stdout.lines().find(|l| l.starts_with("Final:"))?;
    l["Final:".len()..]
        .split_whitespace()
        .map(|w| w.parse().ok())
        .collect()
}

#[test]
fn two_namespaces_over_tcp_by_address() {
    let pair = match Pair::new() {
        Ok(p) => p,
        Err(e) => {
            skip(&format!("network namespaces cannot be made here ({e})"));
            return;
        }
    };
    for (port, args) in [
        ("13401", &["-t", "tag_lat", "-n", "2000", "-w", "10"][..]),
        (
            "13402",
            &["-t", "tag_bw", "-s", "100000", "-n", "300", "-w", "10"][..],
        ),
        (
            "13403",
            &[
                "-t", "am_lat", "-x", "tcp", "-d", DEV, "-n", "2000", "-w", "10",
            ][..],
        ),
    ] {
        let server = Reap(Some(
            pair.perftest(0, &["-p", port])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start the server"),
        ));
        let mut a = vec![SERVER_IP, "-p", port];
        a.extend_from_slice(args);
        let client = Reap(Some(
            pair.perftest(1, &a)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("start the client"),
        ));
        let out = client.output(Duration::from_secs(60));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
        let f = final_line(&stdout).unwrap_or_else(|| panic!("{args:?}: no Final: line\n{stdout}"));
        assert_eq!(f.len(), 8, "{stdout}");
        let iters: f64 = args[args.iter().position(|a| *a == "-n").unwrap() + 1]
            .parse()
            .unwrap();
        assert_eq!(f[0], iters, "{stdout}");
        assert!(
            f.iter().all(|x| x.is_finite() && *x >= 0.0) && f[3] > 0.0,
            "{stdout}"
        );
        let server = server.output(Duration::from_secs(30));
        assert!(
            server.status.success(),
            "server: {}",
            String::from_utf8_lossy(&server.stderr)
        );
    }
}
