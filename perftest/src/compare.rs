//! `--compare-ucx PATH`: right after each of our runs, the same test by UCX's
//! `ucx_perftest` at PATH, with the same options and environment, and both final rows
//! printed with the ratio Rucx / UCX.
//!
//! Both ends take part, over our out-of-band connection: the server picks a free port,
//! starts `PATH -p PORT` (pinned like itself) and sends the port; the client runs `PATH
//! HOST -p PORT <options>` (retrying while the server is not listening yet), parses its
//! `Final:` line and tells the server it is done. On two hosts, PATH must exist on both.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::args::Args;
use crate::bootstrap::Oob;
use crate::report::{format_row, Format, Row, Stage};
use crate::{Error, Role};

/// How long the client retries while the reference server starts listening.
const CONNECT_WAIT: Duration = Duration::from_secs(10);

/// Checks that PATH names a program (a path, or a name found in `PATH`).
pub fn check_program(p: &str) -> Result<(), Error> {
    let found = if p.contains('/') {
        std::path::Path::new(p).is_file()
    } else {
        std::env::var_os("PATH")
            .map(|dirs| std::env::split_paths(&dirs).any(|d| d.join(p).is_file()))
            .unwrap_or(false)
    };
    if found {
        Ok(())
    } else {
        Err(Error::Usage(format!(
            "--compare-ucx: no program at '{p}' (give the path of ucx_perftest)"
        )))
    }
}

/// Parses the numbers of a `Final:` line (or an unlabelled final line under `-f`).
pub fn parse_final(out: &str) -> Option<Row> {
    let line = out.lines().find(|l| l.starts_with("Final:"))?;
    let v: Vec<f64> = line["Final:".len()..]
        .split_whitespace()
        .map(|w| w.replace(',', "").parse().ok())
        .collect::<Option<_>>()?;
    let [iters, lat_pct, lat_avg, lat_overall, bw_avg, bw_overall, rate_avg, rate_overall] = v[..]
    else {
        return None;
    };
    Some(Row {
        iters: iters as u64,
        lat_pct,
        lat_avg,
        lat_overall,
        bw_avg,
        bw_overall,
        rate_avg,
        rate_overall,
    })
}

/// Runs the reference after one of our runs; the client gets its final row.
pub fn run(
    a: &Args,
    path: &str,
    role: Role,
    oob: &mut Oob,
) -> Result<Option<(String, Row)>, Error> {
    match role {
        Role::Server => serve(a, path, oob).map(|()| None),
        Role::Client => {
            let r = client(a, path, oob)?;
            let want = a.message_bytes().map_err(Error::Usage)?;
            match checked_size(&r, want) {
                Ok(()) => Ok(Some((path.to_string(), r))),
                Err(e) => {
                    // Two rows of different sizes: no ratio, in the table or the JSON.
                    eprintln!("rucx-perftest: no comparison with {path}: {e}");
                    Ok(None)
                }
            }
        }
    }
}

/// Checks that the reference moved messages of `want` bytes: `ucx_perftest` does not print
/// its message size, but its bandwidth (MB/s, 2^20 bytes) over its message rate is that
/// size.
pub fn checked_size(r: &Row, want: usize) -> Result<(), String> {
    let (bw, rate) = if r.rate_overall > 0.0 {
        (r.bw_overall, r.rate_overall)
    } else {
        (r.bw_avg, r.rate_avg)
    };
    if rate <= 0.0 || !bw.is_finite() {
        return Err("its output has no message rate to check its message size by".into());
    }
    let got = bw * 1_048_576.0 / rate;
    // Both columns are printed rounded (two decimals of MB/s, whole messages/s).
    let slack = (want as f64 * 0.01).max(1.0) + 0.006 * 1_048_576.0 / rate;
    if (got - want as f64).abs() > slack {
        return Err(format!(
            "its bandwidth and message rate say it moved {got:.0}-byte messages, not {want}"
        ));
    }
    Ok(())
}

fn serve(a: &Args, path: &str, oob: &mut Oob) -> Result<(), Error> {
    let started = free_port().and_then(|port| {
        let mut c = Command::new(path);
        c.args(["-p", &port.to_string()]);
        if let Some(cpu) = a.cpu().ok().flatten() {
            c.args(["-c", &cpu.to_string()]);
        }
        // UCX 1.22's server checks a UCT test's transport and device against its own
        // command line too.
        if let Ok(v) = a.to_ucx_argv() {
            for flag in ["-x", "-d"] {
                if let Some(k) = v.iter().position(|w| w == flag) {
                    c.args([flag, &v[k + 1]]);
                }
            }
        }
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(|child| (port, child))
            .map_err(|e| format!("cannot start {path}: {e}"))
    });
    let (port, mut child) = match started {
        Ok(x) => x,
        Err(e) => {
            oob.send(format!("error {e}").as_bytes())
                .map_err(Error::Oob)?;
            return Err(Error::Setup(e));
        }
    };
    oob.send(format!("port {port}").as_bytes())
        .map_err(Error::Oob)?;
    // The client says when its run is over (or that it gave up).
    let r = oob.recv();
    finish(&mut child);
    r.map_err(Error::Oob).map(drop)
}

/// Waits a little for the reference server to leave by itself, then ends it.
fn finish(child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind(("0.0.0.0", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port for the reference server: {e}"))
}

fn client(a: &Args, path: &str, oob: &mut Oob) -> Result<Row, Error> {
    let msg = String::from_utf8_lossy(&oob.recv().map_err(Error::Oob)?).into_owned();
    let port = match msg.split_once(' ') {
        Some(("port", p)) => p
            .parse::<u16>()
            .map_err(|_| Error::Peer("malformed reference port from the server".into()))?,
        Some(("error", e)) => return Err(Error::Peer(format!("the server: {e}"))),
        _ => {
            return Err(Error::Peer(
                "malformed reference message from the server".into(),
            ))
        }
    };
    let host = a.server.clone().unwrap_or_else(|| "127.0.0.1".into());
    let r = run_reference(a, path, &host, port);
    oob.send(b"done").map_err(Error::Oob)?;
    r
}

fn run_reference(a: &Args, path: &str, host: &str, port: u16) -> Result<Row, Error> {
    let mut argv = vec![host.to_string(), "-p".to_string(), port.to_string()];
    argv.extend(a.to_ucx_argv().map_err(Error::Usage)?);
    if let Some(cpu) = a.cpu().ok().flatten() {
        argv.extend(["-c".to_string(), cpu.to_string()]);
    }
    let deadline = Instant::now() + CONNECT_WAIT;
    loop {
        let out = Command::new(path)
            .args(&argv)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| Error::Setup(format!("cannot run {path}: {e}")))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            return parse_final(&stdout).ok_or_else(|| {
                Error::Peer(format!(
                    "{path} printed no Final: line (options: {})",
                    argv[3..].join(" ")
                ))
            });
        }
        let stderr = String::from_utf8_lossy(&out.stderr);
        let refused = stderr.contains("connect") || stdout.contains("connect");
        if !refused || Instant::now() >= deadline {
            let last = stderr
                .lines()
                .chain(stdout.lines())
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("no output");
            return Err(Error::Peer(format!(
                "{path} {} failed ({}): {}",
                argv[3..].join(" "),
                out.status,
                last.trim()
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Prints our row, the reference's and their ratio (ours / theirs, column by column).
pub fn print(a: &Args, ours: &Row, theirs: &(String, Row)) {
    let fmt = Format {
        final_only: false,
        ..a.format()
    };
    if fmt.quiet {
        return;
    }
    let (path, u) = theirs;
    let (o, t) = (ours.columns(), u.columns());
    let ratio: Vec<f64> = o
        .iter()
        .zip(&t)
        .map(|(x, y)| if *y > 0.0 { x / y } else { f64::NAN })
        .collect();
    if fmt.csv {
        let join = |v: &[f64]| {
            v.iter()
                .map(|x| format!("{x}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        println!("rucx,{}", join(&o));
        println!("ucx,{}", join(&t));
        println!("ratio,{}", join(&ratio));
        return;
    }
    println!(
        "# {} {} bytes: rucx-perftest against {path} (ratio: rucx / ucx)",
        a.test(),
        a.message_bytes().unwrap_or(0)
    );
    println!("{}", format_row(Stage::Label("rucx"), ours, fmt));
    println!("{}", format_row(Stage::Label("ucx"), u, fmt));
    println!(
        "{:<14}{:>14.2} {:>10.2} {:>9.2} {:>9.2} {:>10.2} {:>10.2} {:>11.2} {:>11.2}",
        "ratio", ratio[0], ratio[1], ratio[2], ratio[3], ratio[4], ratio[5], ratio[6], ratio[7]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ucx_perftest_final_lines() {
        let out = "+---+\nFinal:               3000000      0.046     0.825     0.653        9.24      11.69     1211720     1532308\n";
        let r = parse_final(out).unwrap();
        assert_eq!(r.iters, 3_000_000);
        assert_eq!(
            (r.lat_pct, r.bw_overall, r.rate_overall),
            (0.046, 11.69, 1532308.0)
        );
        let n = "Final:             3,000,000      0.046     0.825     0.653        9.24      11.69   1,211,720   1,532,308";
        assert_eq!(parse_final(n).unwrap().rate_avg, 1211720.0);
        assert!(parse_final("Final: 1 2 3").is_none());
        assert!(parse_final("nothing").is_none());
    }

    #[test]
    fn a_reference_of_another_size_is_refused() {
        // ucx_perftest -s 16,48 (64 bytes) and -s 1 (what it ran when given "-s 1k").
        let r64 = parse_final(
            "Final:                  1000      0.170     0.180     0.180      339.07     339.07     5555370     5555370",
        )
        .unwrap();
        assert_eq!(checked_size(&r64, 64), Ok(()));
        assert!(checked_size(&r64, 1024).is_err());
        let r1 = parse_final(
            "Final:                  1000      0.581     0.586     0.586       1.63       1.63     1706389     1706389",
        )
        .unwrap();
        assert_eq!(checked_size(&r1, 1), Ok(()));
        let e = checked_size(&r1, 1024).unwrap_err();
        assert!(e.contains("1-byte messages, not 1024"), "{e}");
    }
}
