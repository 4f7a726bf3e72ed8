//! Minimal two-process ping-pong over a uct transport, to measure the transport alone:
//! `cargo run --release -p uct --example pingpong [TL] [ITERS]`.
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};

use ucs::Config;
use uct::{EpId, Handler};

struct Count(u64);
impl Handler for Count {
    #[inline]
    fn am(&mut self, _id: u8, _d: &[u8]) {
        self.0 += 1;
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let server = args.get(1).map(|s| s == "--server").unwrap_or(false);
    let tl = if server {
        args[2].clone()
    } else {
        args.get(1).cloned().unwrap_or_else(|| "posix".into())
    };
    let iters: u64 = if server {
        args[3].parse().unwrap()
    } else {
        args.get(2).map(|s| s.parse().unwrap()).unwrap_or(1_000_000)
    };
    let cpu = if server { 0 } else { 1 };
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).unwrap();
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
    let cfg = Config::default();
    let mut iface = uct::component::open_by_name(&tl, None, &cfg).unwrap();
    let me = format!(
        "{} {}",
        hex(iface.device_address()),
        hex(iface.iface_address())
    );
    let (peer_line, child, mut to_child) = if server {
        println!("{me}");
        let mut l = String::new();
        std::io::stdin().lock().read_line(&mut l).unwrap();
        (l, None, None)
    } else {
        let exe = std::env::current_exe().unwrap();
        let mut c = Command::new(exe)
            .args(["--server", &tl, &iters.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut l = String::new();
        std::io::BufReader::new(c.stdout.take().unwrap())
            .read_line(&mut l)
            .unwrap();
        let mut w = c.stdin.take().unwrap();
        writeln!(w, "{me}").unwrap();
        (l, Some(c), Some(w))
    };
    let w: Vec<&str> = peer_line.split_whitespace().collect();
    let (dev, ifa) = if w.len() == 2 {
        (unhex(w[0]), unhex(w[1]))
    } else {
        (vec![], unhex(w[0]))
    };
    let ep: EpId = iface.ep_connect(&dev, &ifa).unwrap();
    let mut rx = Count(0);
    let mut samples = Vec::with_capacity(iters as usize);
    let mut last = ucs::time::cycles();
    for i in 1..=iters {
        if server {
            while rx.0 < i {
                if iface.progress(&mut rx) == 0 {
                    std::hint::spin_loop();
                }
            }
        }
        while iface.am_short(ep, 1, 0, &[]).is_err() {
            iface.progress(&mut rx);
        }
        if !server {
            while rx.0 < i {
                if iface.progress(&mut rx) == 0 {
                    std::hint::spin_loop();
                }
            }
            let now = ucs::time::cycles();
            samples.push(now - last);
            last = now;
        }
    }
    if !server {
        drop(to_child.take());
        child.unwrap().wait().unwrap();
        samples.sort_unstable();
        let r = ucs::time::cycles_per_ns();
        println!(
            "{tl}: median one-way {:.1} ns",
            samples[samples.len() / 2] as f64 / r / 2.0
        );
    }
}
