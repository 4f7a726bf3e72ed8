//! Driving `rucx-ucp-peer` processes from the `ucp` tests: spawning a pair with a
//! transport configuration, exchanging their addresses, and collecting their verdicts.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

/// Transport configurations: (name, UCX_TLS, UCX_NET_DEVICES, UCX_RNDV_SCHEME).
pub const CONFIGS: &[(&str, &str, &str, &str)] = &[
    ("shm", "posix,cma", "all", "auto"),
    ("shm-put", "posix,cma", "all", "put_zcopy"),
    ("tcp", "tcp", "lo", "auto"),
    // rc_verbs on the software HCA model (a model of an HCA; `RUCX_SOFTHCA=1` is set for
    // the peers of this configuration), with self for a worker's own endpoints.
    ("rc-model", "rc_verbs,self", "all", "auto"),
];

/// One `rucx-ucp-peer` process and its stdout lines.
#[derive(Debug)]
pub struct Proc {
    pub child: Child,
    pub lines: Receiver<String>,
}

impl Proc {
    /// Starts `exe role case` with the configuration `(UCX_TLS, UCX_NET_DEVICES,
    /// UCX_RNDV_SCHEME)` and extra environment.
    pub fn spawn(
        exe: &str,
        role: &str,
        case: &str,
        cfg: (&str, &str, &str),
        env: &[(&str, &str)],
    ) -> Proc {
        let (tls, dev, scheme) = cfg;
        let mut cmd = Command::new(exe);
        cmd.args([role, case])
            .env("UCX_TLS", tls)
            .env("UCX_NET_DEVICES", dev)
            .env("UCX_RNDV_SCHEME", scheme)
            .env(
                "RUCX_SOFTHCA",
                if tls.contains("rc_verbs") { "1" } else { "0" },
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn rucx-ucp-peer");
        let out = child.stdout.take().expect("piped");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Proc { child, lines }
    }

    /// The next stdout line, within 120 s.
    pub fn line(&self, what: &str) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no {what} line from the peer within 120 s"))
    }

    /// Writes one line to the process's stdin.
    pub fn say(&mut self, line: &str) {
        writeln!(self.child.stdin.as_mut().expect("piped"), "{line}").expect("peer stdin");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `a` and `b` for `case` and gives each the other's address.
pub fn start_pair(exe: &str, case: &str, cfg: (&str, &str, &str)) -> (Proc, Proc) {
    let mut a = Proc::spawn(exe, "a", case, cfg, &[]);
    let mut b = Proc::spawn(exe, "b", case, cfg, &[]);
    let hex = |p: &Proc| {
        let l = p.line("ADDR");
        l.strip_prefix("ADDR ")
            .unwrap_or_else(|| panic!("{case}: expected ADDR, got {l}"))
            .to_string()
    };
    let (ah, bh) = (hex(&a), hex(&b));
    a.say(&bh);
    b.say(&ah);
    (a, b)
}

/// Runs `case` between two peers over every configuration; both must report `DONE`.
pub fn run_case(exe: &str, case: &str) {
    for &(name, tls, dev, scheme) in CONFIGS {
        let (mut a, mut b) = start_pair(exe, case, (tls, dev, scheme));
        let ra = a.line("result");
        let rb = b.line("result");
        assert!(
            ra.starts_with("DONE") && rb.starts_with("DONE"),
            "{name}/{case}: a {ra}; b {rb}"
        );
        assert!(rb.starts_with("DONE"), "{name}/{case} b: {rb}");
        eprintln!("{name}/{case}: a {ra}; b {rb}");
        assert!(a.child.wait().expect("wait").success());
        assert!(b.child.wait().expect("wait").success());
    }
}

/// Kills one side of an `endless_<kind>` pair once traffic flows; the survivor must report
/// an error within 2 s, and then serve a third peer it connected to before the kill (100
/// round trips and one of 1 MiB, checked). Returns how long the error took.
pub fn kill_one(exe: &str, kind: &str, cfg: (&str, &str, &str), victim: &str) -> Duration {
    let case = format!("endless_{kind}");
    // Over rc_verbs a layout goes by UMR here (the hybrid may pack rows of 1 KiB), so that
    // the kill lands in a UMR transfer.
    let umr = kind == "layout" && cfg.0.contains("rc_verbs");
    let third: &[(&str, &str)] = if umr {
        &[("RUCX_THIRD", "1"), ("RUCX_UMR", "umr")]
    } else {
        &[("RUCX_THIRD", "1")]
    };
    let victim_env: &[(&str, &str)] = if umr { &[("RUCX_UMR", "umr")] } else { &[] };
    let env = |role: &str| if role == victim { victim_env } else { third };
    let mut a = Proc::spawn(exe, "a", &case, cfg, env("a"));
    let mut b = Proc::spawn(exe, "b", &case, cfg, env("b"));
    let mut t = Proc::spawn(exe, "c", "echo", cfg, &[]);
    let hex = |p: &Proc| {
        let l = p.line("ADDR");
        l.strip_prefix("ADDR ")
            .unwrap_or_else(|| panic!("{case}: expected ADDR, got {l}"))
            .to_string()
    };
    let (ah, bh, th) = (hex(&a), hex(&b), hex(&t));
    a.say(&bh);
    b.say(&ah);
    let (dead, survivor, sh) = if victim == "a" {
        (&mut a, &mut b, bh)
    } else {
        (&mut b, &mut a, ah)
    };
    survivor.say(&th);
    t.say(&sh);
    for (side, p) in [("dead", &*dead), ("survivor", &*survivor)] {
        let l = p
            .lines
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{case} {cfg:?}: {side} never got going"));
        assert_eq!(l, "READY", "{case} {cfg:?}: {side}");
    }
    dead.child.kill().expect("kill");
    let killed = std::time::Instant::now();
    let r = survivor
        .lines
        .recv_timeout(Duration::from_secs(2))
        .unwrap_or_else(|_| panic!("{case} {cfg:?}: no error 2 s after killing {victim}"));
    let took = killed.elapsed();
    assert!(
        r.starts_with("DOWN ERR"),
        "{case} {cfg:?}, {victim} killed: {r}"
    );
    let done = survivor.line("result after the kill");
    assert!(
        done.starts_with("DONE ERR") && done.contains("third peer"),
        "{case} {cfg:?}, {victim} killed: the survivor did not serve its other peer: {done}"
    );
    let tr = t.line("third peer result");
    assert!(tr.starts_with("DONE"), "{case} {cfg:?}: third peer: {tr}");
    took
}
