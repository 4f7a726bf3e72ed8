//! Debian's `ucx_perftest` (UCX 1.13.1, unmodified) over our `libucp.so.0`: server and
//! client on this host for each UCP test; both must finish, and both must say (through
//! `RUCX_ANNOUNCE=1`) that Rucx's library served them.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const PERFTEST: &str = "/usr/bin/ucx_perftest";
const TESTS: &[&str] = &[
    "tag_lat",
    "tag_bw",
    "tag_sync_lat",
    "ucp_put_lat",
    "ucp_get",
    "ucp_am_lat",
    "stream_lat",
];

fn run_pair(lib: &Path, test: &str, extra: &[&str]) {
    let port = common::free_port().to_string();
    let cmd = |client: bool| {
        let mut c = Command::new(PERFTEST);
        c.env("LD_LIBRARY_PATH", lib)
            .env("RUCX_ANNOUNCE", "1")
            .args(["-p", &port]);
        if client {
            c.args(["-t", test, "-n", "1000"])
                .args(extra)
                .arg("127.0.0.1");
        }
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        c
    };
    let server = cmd(false).spawn().expect("spawn ucx_perftest server");
    // The server listens once it printed nothing yet; retry the client until it connects.
    let start = Instant::now();
    let client = loop {
        std::thread::sleep(Duration::from_millis(200));
        let out = cmd(true).output().expect("run ucx_perftest client");
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success()
            || !err.contains("connect")
            || start.elapsed() > Duration::from_secs(10)
        {
            break out;
        }
    };
    let server = server.wait_with_output().expect("server output");
    let (cout, cerr) = (
        String::from_utf8_lossy(&client.stdout),
        String::from_utf8_lossy(&client.stderr),
    );
    let serr = String::from_utf8_lossy(&server.stderr);
    assert!(
        client.status.success() && server.status.success(),
        "{test} {extra:?} failed: client {:?}\n{cout}\n{cerr}\nserver {:?}\n{serr}",
        client.status,
        server.status
    );
    assert!(cout.contains("Final:"), "{test}: no result line:\n{cout}");
    for (who, e) in [("client", &cerr), ("server", &serr)] {
        assert!(
            e.contains("[rucx] libucp.so.0 (Rucx"),
            "{test}: the {who} did not run on Rucx's libucp:\n{e}"
        );
    }
    let line = cout.lines().find(|l| l.contains("Final:")).unwrap_or("");
    println!("{test} {extra:?}: {line}");
}

#[test]
fn ucx_perftest_runs_on_rucx() {
    if !Path::new(PERFTEST).exists() {
        return common::skip(&format!("{PERFTEST} not installed (Debian ucx-utils)"));
    }
    let lib = common::libucp_dir();
    for t in TESTS {
        run_pair(&lib, t, &[]);
    }
    // Rendezvous-sized messages and iov data.
    run_pair(&lib, "tag_lat", &["-s", "1000000"]);
    run_pair(&lib, "ucp_am_lat", &["-s", "1000000"]);
    run_pair(&lib, "tag_bw", &["-s", "300000", "-D", "iov,iov"]);
}
