//! `ucp` tag matching and its protocols between two real processes, over every transport
//! pairing the worker can choose: shared memory with CMA (`UCX_TLS=posix,cma`) and tcp
//! over loopback (`UCX_TLS=tcp`), and shared memory with the put-zcopy rendezvous. Each case runs `rucx-ucp-peer a <case>` against
//! `rucx-ucp-peer b <case>`; the peers check every byte and report `DONE` or `FAIL`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

const PEER: &str = env!("CARGO_BIN_EXE_rucx-ucp-peer");

/// Transport configurations: (name, UCX_TLS, UCX_NET_DEVICES, UCX_RNDV_SCHEME).
const CONFIGS: &[(&str, &str, &str, &str)] = &[
    ("shm", "posix,cma", "all", "auto"),
    ("shm-put", "posix,cma", "all", "put_zcopy"),
    ("tcp", "tcp", "lo", "auto"),
];

struct Proc {
    child: Child,
    lines: Receiver<String>,
}

impl Proc {
    fn spawn(role: &str, case: &str, cfg: (&str, &str, &str)) -> Proc {
        let (tls, dev, scheme) = cfg;
        let mut child = Command::new(PEER)
            .args([role, case])
            .env("UCX_TLS", tls)
            .env("UCX_NET_DEVICES", dev)
            .env("UCX_RNDV_SCHEME", scheme)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn rucx-ucp-peer");
        let out = child.stdout.take().unwrap();
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

    fn line(&self, what: &str) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("no {what} line from the peer within 120 s"))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run_case(case: &str) {
    for &(name, tls, dev, scheme) in CONFIGS {
        let mut a = Proc::spawn("a", case, (tls, dev, scheme));
        let mut b = Proc::spawn("b", case, (tls, dev, scheme));
        let aa = a.line("ADDR");
        let ba = b.line("ADDR");
        let hex = |l: &str| {
            l.strip_prefix("ADDR ")
                .unwrap_or_else(|| panic!("{name}/{case}: expected ADDR, got {l}"))
                .to_string()
        };
        let (ah, bh) = (hex(&aa), hex(&ba));
        writeln!(a.child.stdin.as_mut().unwrap(), "{bh}").unwrap();
        writeln!(b.child.stdin.as_mut().unwrap(), "{ah}").unwrap();
        let ra = a.line("result");
        let rb = b.line("result");
        assert!(ra.starts_with("DONE"), "{name}/{case} a: {ra}");
        assert!(rb.starts_with("DONE"), "{name}/{case} b: {rb}");
        eprintln!("{name}/{case}: a {ra}; b {rb}");
        assert!(a.child.wait().unwrap().success());
        assert!(b.child.wait().unwrap().success());
    }
}

#[test]
fn pingpong_every_size_class_0_to_64mib() {
    run_case("pingpong");
}

#[test]
fn stream_of_mixed_sizes_keeps_order() {
    run_case("stream");
}

#[test]
fn ten_thousand_outstanding_sends() {
    run_case("outstanding");
}

#[test]
fn unexpected_storm_with_probe_and_wildcards() {
    run_case("storm");
}

#[test]
fn cancel_and_truncation() {
    run_case("misc");
}

#[test]
fn iov_on_both_sides() {
    run_case("iov");
}

/// A peer killed mid-rendezvous: the survivor's operations end in an error within 2 s,
/// whichever side dies, over each transport configuration.
#[test]
fn peer_killed_mid_rendezvous_fails_the_survivor_quickly() {
    for &(name, tls, dev, scheme) in CONFIGS {
        for victim in ["a", "b"] {
            let mut a = Proc::spawn("a", "endless", (tls, dev, scheme));
            let mut b = Proc::spawn("b", "endless", (tls, dev, scheme));
            let ah = a.line("ADDR").trim_start_matches("ADDR ").to_string();
            let bh = b.line("ADDR").trim_start_matches("ADDR ").to_string();
            writeln!(a.child.stdin.as_mut().unwrap(), "{bh}").unwrap();
            writeln!(b.child.stdin.as_mut().unwrap(), "{ah}").unwrap();
            assert_eq!(a.line("READY"), "READY", "{name}");
            assert_eq!(b.line("READY"), "READY", "{name}");
            let (dead, survivor) = if victim == "a" {
                (&mut a, &b)
            } else {
                (&mut b, &a)
            };
            dead.child.kill().unwrap();
            let killed = std::time::Instant::now();
            let r = survivor
                .lines
                .recv_timeout(Duration::from_secs(2))
                .unwrap_or_else(|_| {
                    panic!("{name}: no error on the survivor 2 s after killing {victim}")
                });
            assert!(r.starts_with("DONE ERR"), "{name}, {victim} killed: {r}");
            eprintln!(
                "{name}: {victim} killed, survivor reported '{r}' after {:?}",
                killed.elapsed()
            );
        }
    }
}
