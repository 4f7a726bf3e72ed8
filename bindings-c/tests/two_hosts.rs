//! Two "hosts": two network namespaces joined by a veth pair, each with its own address,
//! and MPI jobs of 4 ranks across them, 2 ranks on each, over our `libucp.so.0` with
//! nothing but the tcp transport between the ranks (`UCX_TLS=tcp,self`, the veth device).
//! The jobs are launched by the MPIs' own launchers, run inside the first namespace,
//! which reach the second host through an rsh agent (OpenMPI's `plm_rsh_agent`, MPICH's
//! `-launcher-exec`) that enters that host's namespace: the nearest this machine comes to
//! a cluster.
//!
//! `bindings-c/mpi/hosts.c` checks where its ranks run, then point-to-point within and
//! across the hosts (0 B .. 4 MiB), MPI_Allreduce, MPI_Alltoall and RMA, every result
//! checked; the veth's byte counters show that its data crossed the link. With `cut`, the
//! ranks exchange in a loop while the test takes the second host's link down: the
//! survivors on the first host must end with an error (the peer's host stopped
//! answering, `docs/ucp.md`), not hang.
//!
//! Needs root (`ip netns`), `ip`, and OpenMPI or MPICH; says SKIPPED otherwise. The
//! namespaces, and every process left in them, go when a test ends, failed or not; their
//! names carry the process id and a counter, so concurrent runs do not collide.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The runs share two cores and busy-poll: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The veth end's name inside each namespace (so one `UCX_NET_DEVICES` serves both).
const DEV: &str = "rucx0";
/// The hosts' addresses, which are also their names for the launchers.
const ADDRS: [&str; 2] = ["10.77.0.1", "10.77.0.2"];
/// How long the survivors of a cut link may take to end before the test calls it a hang
/// (they take about 6 s: `UCX_TCP_KEEPINTVL` x `UCX_TCP_KEEPCNT`).
const HANG_LIMIT: Duration = Duration::from_secs(30);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mpi {
    /// Debian's OpenMPI 4.1 (`mpirun`, `pml ucx`, `osc ucx`).
    Open,
    /// Debian's MPICH 4.0 (`mpiexec.mpich`, hydra; device `ch4:ucx`).
    Mpich,
}

impl Mpi {
    fn tools(self) -> (&'static str, &'static str) {
        match self {
            Mpi::Open => ("mpicc", "mpirun"),
            Mpi::Mpich => ("mpicc.mpich", "mpiexec.mpich"),
        }
    }
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// Where this test binary keeps what it makes.
fn scratch() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-two-hosts");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Compiles `bindings-c/mpi/hosts.c` with `mpicc`; `None` (after saying SKIPPED) when
/// this MPI or `ip` is missing.
fn compile(mpi: Mpi) -> Option<PathBuf> {
    let (cc, run) = mpi.tools();
    let (Some(cc), Some(_), Some(_)) = (which(cc), which(run), which("ip")) else {
        common::skip(&format!(
            "{cc}, {run} or ip not found (Debian: apt-get install openmpi-bin \
             libopenmpi-dev mpich libmpich-dev iproute2)"
        ));
        return None;
    };
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("mpi/hosts.c");
    let exe = scratch().join(format!("hosts-{mpi:?}"));
    let out = Command::new(&cc)
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(
        out.status.success(),
        "{} {}: {}",
        cc.display(),
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

fn ip(args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The two hosts: namespaces `ns[0]` (where the launcher runs) and `ns[1]`, a veth pair
/// between them, loopback up in each, and the rsh agent that enters them by host name.
/// On drop every process still in them is killed and they are removed.
struct Hosts {
    ns: [String; 2],
    agent: PathBuf,
}

impl Hosts {
    fn new() -> Result<Hosts, String> {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let id = std::process::id();
        let mut h = Hosts {
            ns: [String::new(), String::new()],
            agent: scratch().join(format!("agent-{id}-{n}.sh")),
        };
        for (i, side) in ["a", "b"].into_iter().enumerate() {
            let name = format!("rucx-2h-{id}-{n}-{side}");
            ip(&["netns", "add", &name])?;
            h.ns[i] = name;
        }
        // Veth names live in the root namespace until moved: short and unique.
        let v = [
            format!("r2a{}_{n}", id % 100_000),
            format!("r2b{}_{n}", id % 100_000),
        ];
        ip(&["link", "add", &v[0], "type", "veth", "peer", "name", &v[1]])?;
        for i in 0..2 {
            if let Err(e) = ip(&["link", "set", &v[i], "netns", &h.ns[i]]) {
                let _ = ip(&["link", "del", &v[i]]);
                return Err(e);
            }
            let ns = h.ns[i].as_str();
            ip(&["-n", ns, "link", "set", &v[i], "name", DEV])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", ADDRS[i]),
                "dev",
                DEV,
            ])?;
            ip(&["-n", ns, "link", "set", DEV, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        // Called as `agent [options] HOST COMMAND...`, as ssh would be; runs COMMAND in
        // HOST's namespace through a shell, as ssh runs it through the remote one.
        let script = format!(
            "#!/bin/sh\n\
             while [ \"${{1#-}}\" != \"$1\" ]; do shift; done\n\
             host=$1; shift\n\
             case \"$host\" in\n\
             {a}) ns={na} ;;\n\
             {b}) ns={nb} ;;\n\
             *) echo \"agent: unknown host $host\" >&2; exit 255 ;;\n\
             esac\n\
             exec ip netns exec \"$ns\" sh -c \"$*\"\n",
            a = ADDRS[0],
            b = ADDRS[1],
            na = h.ns[0],
            nb = h.ns[1],
        );
        std::fs::write(&h.agent, script).map_err(|e| format!("writing the agent: {e}"))?;
        let chmod = Command::new("chmod").arg("755").arg(&h.agent).status();
        if !chmod.is_ok_and(|s| s.success()) {
            return Err("chmod of the agent failed".into());
        }
        Ok(h)
    }

    /// The job's launcher, run inside the first host: host 0 is its own, host 1 is
    /// reached through the agent. Ranks 0 and 1 run on host 0, ranks 2 and 3 on host 1.
    fn launch(&self, mpi: Mpi, exe: &Path, args: &[&str]) -> Command {
        let (_, run) = mpi.tools();
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[0], run]);
        let hosts = format!("{}:2,{}:2", ADDRS[0], ADDRS[1]);
        match mpi {
            Mpi::Open => {
                c.args([
                    "--allow-run-as-root",
                    "--oversubscribe",
                    "--bind-to",
                    "none",
                ])
                .args(["-np", "4", "-H", &hosts])
                .args(["--mca", "plm", "rsh", "--mca", "plm_rsh_agent"])
                .arg(&self.agent)
                // The daemons reach mpirun, and the ranks each other, over the veth.
                .args(["--mca", "oob_tcp_if_include", DEV])
                .args(["--mca", "btl", "self", "--mca", "pml", "ucx"])
                .args(["--mca", "osc", "ucx", "--mca", "pml_ucx_tls", "any"])
                .args(["--mca", "pml_ucx_devices", "any"]);
                for v in [
                    "LD_LIBRARY_PATH",
                    "RUCX_ANNOUNCE",
                    "UCX_TLS",
                    "UCX_NET_DEVICES",
                ] {
                    c.args(["-x", v]);
                }
                c.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
                    .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            }
            Mpi::Mpich => {
                // -iface: the proxies reach mpiexec at the veth's address.
                c.args(["-genvall", "-launcher", "ssh", "-launcher-exec"])
                    .arg(&self.agent)
                    .args(["-iface", DEV, "-hosts", &hosts, "-n", "4"]);
            }
        }
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy();
            if k.starts_with("UCX_") || k.starts_with("RUCX_") {
                c.env_remove(&*k);
            }
        }
        c.arg(exe)
            .args(args)
            .env("LD_LIBRARY_PATH", common::rucx_only_dir())
            .env("RUCX_ANNOUNCE", "1")
            .env("UCX_TLS", "tcp,self")
            .env("UCX_NET_DEVICES", DEV);
        c
    }

    /// Bytes host `i`'s end of the veth has received and sent.
    fn veth_bytes(&self, i: usize) -> (u64, u64) {
        let read = |what: &str| -> u64 {
            let path = format!("/sys/class/net/{DEV}/statistics/{what}");
            let out = Command::new("ip")
                .args(["netns", "exec", &self.ns[i], "cat", &path])
                .output()
                .expect("run ip netns exec cat");
            String::from_utf8_lossy(&out.stdout)
                .trim()
                .parse()
                .unwrap_or_else(|_| panic!("{path} in {}: {out:?}", self.ns[i]))
        };
        (read("rx_bytes"), read("tx_bytes"))
    }

    /// Takes host `i`'s end of the link down: from then on nothing it sends or is sent
    /// arrives, and no reset or close reaches anyone.
    fn cut(&self, i: usize) {
        ip(&["-n", &self.ns[i], "link", "set", DEV, "down"]).expect("cutting the link");
    }

    /// The processes in host `i`'s namespace.
    fn pids(&self, i: usize) -> Vec<i32> {
        ip(&["netns", "pids", &self.ns[i]])
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|p| p.parse().ok())
            .collect()
    }

    /// How many processes of `exe` (ranks) run in host `i`'s namespace.
    fn ranks(&self, i: usize, exe: &Path) -> usize {
        self.pids(i)
            .into_iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| {
                    c.split(|&b| b == 0).next() == Some(exe.as_os_str().as_encoded_bytes())
                })
            })
            .count()
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        for i in 0..2 {
            if self.ns[i].is_empty() {
                continue;
            }
            // Launchers, daemons and ranks: all ours, started in these namespaces.
            for _ in 0..20 {
                let pids = self.pids(i);
                if pids.is_empty() {
                    break;
                }
                for p in pids {
                    let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = ip(&["netns", "del", &self.ns[i]]);
        }
        let _ = std::fs::remove_file(&self.agent);
    }
}

/// A running launcher whose output lines are collected with the time each arrived; killed
/// on drop.
struct Job {
    child: Child,
    rx: Receiver<(Instant, String)>,
    lines: Vec<(Instant, String)>,
    started: Instant,
}

impl Job {
    fn start(mut c: Command) -> Job {
        let mut child = c
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the launcher");
        let (tx, rx) = channel();
        let out: Box<dyn std::io::Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn std::io::Read + Send> = Box::new(child.stderr.take().unwrap());
        for pipe in [out, err] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if tx.send((Instant::now(), line)).is_err() {
                        break;
                    }
                }
            });
        }
        Job {
            child,
            rx,
            lines: Vec::new(),
            started: Instant::now(),
        }
    }

    /// Takes in what arrived, waiting up to `wait` for a first line.
    fn pump(&mut self, wait: Duration) {
        if let Ok(l) = self.rx.recv_timeout(wait) {
            self.lines.push(l);
        }
        while let Ok(l) = self.rx.try_recv() {
            self.lines.push(l);
        }
    }

    /// Waits for the launcher to exit, up to `limit`.
    fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let end = Instant::now() + limit;
        loop {
            self.pump(Duration::from_millis(20));
            if let Some(st) = self.child.try_wait().expect("try_wait") {
                // The rest of its output (children may hold the pipes; not long).
                let drain = Instant::now();
                while drain.elapsed() < Duration::from_millis(300) {
                    self.pump(Duration::from_millis(20));
                }
                return Some(st);
            }
            if Instant::now() >= end {
                return None;
            }
        }
    }

    fn text(&self) -> String {
        let mut s = String::new();
        for (t, l) in &self.lines {
            s.push_str(&format!(
                "[{:7.3}s] {l}\n",
                (*t - self.started).as_secs_f64()
            ));
        }
        s
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The whole job: placement, point-to-point, collectives and RMA across the two hosts,
/// over tcp through the veth only.
fn run_checks(mpi: Mpi) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(exe) = compile(mpi) else { return };
    let hosts = match Hosts::new() {
        Ok(h) => h,
        Err(e) => {
            common::skip(&format!("network namespaces cannot be made here ({e})"));
            return;
        }
    };
    let before = hosts.veth_bytes(1);
    let mut job = Job::start(hosts.launch(mpi, &exe, &[]));
    let st = job.wait(Duration::from_secs(120));
    let all = job.text();
    assert!(
        st.is_some_and(|s| s.success()) && all.contains("hosts: OK"),
        "{mpi:?} across two hosts failed ({st:?}):\n{all}"
    );
    let warnings: Vec<&str> = all.lines().filter(|l| l.contains("] WARN ")).collect();
    assert!(warnings.is_empty(), "{mpi:?} logged warnings:\n{all}");
    // Every rank is served by Rucx, with tcp on the veth as its only network transport
    // (OpenMPI's osc ucx makes a second context, announced too).
    let mut pids = std::collections::BTreeSet::new();
    for l in all
        .lines()
        .filter(|l| l.contains("[rucx] libucp.so.0 (Rucx "))
    {
        let pid = l
            .split("serving pid ")
            .nth(1)
            .and_then(|r| r.split(':').next());
        let tls = l.split("transports ").nth(1).map(str::trim);
        assert_eq!(tls, Some("self/memory,tcp/rucx0"), "{l}");
        pids.insert(pid.unwrap_or_default().to_string());
    }
    assert_eq!(pids.len(), 4, "expected 4 ranks announcing Rucx:\n{all}");
    // Across the hosts went 4 MiB and more each way (p2p), and the RMA and collectives.
    let after = hosts.veth_bytes(1);
    let (rx, tx) = (after.0 - before.0, after.1 - before.1);
    assert!(
        rx > 8 << 20 && tx > 8 << 20,
        "the veth carried {rx} bytes in and {tx} out: the ranks did not talk across it"
    );
    eprintln!(
        "{mpi:?}: hosts: OK in {:.1} s; the second host's veth received {} MiB and sent {} MiB",
        job.started.elapsed().as_secs_f64(),
        rx >> 20,
        tx >> 20
    );
}

/// The second host's link cut while all four ranks exchange: the survivors on the first
/// host end with an error within `HANG_LIMIT`, none hangs.
fn run_cut(mpi: Mpi) {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let Some(exe) = compile(mpi) else { return };
    let hosts = match Hosts::new() {
        Ok(h) => h,
        Err(e) => {
            common::skip(&format!("network namespaces cannot be made here ({e})"));
            return;
        }
    };
    let mut job = Job::start(hosts.launch(mpi, &exe, &["cut"]));
    let start = Instant::now();
    while job
        .lines
        .iter()
        .filter(|(_, l)| l.contains(" exchanging"))
        .count()
        < 4
    {
        assert!(
            start.elapsed() < Duration::from_secs(90) && job.child.try_wait().unwrap().is_none(),
            "{mpi:?}: the ranks did not all start exchanging:\n{}",
            job.text()
        );
        job.pump(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(1));
    hosts.cut(1);
    let cut = Instant::now();
    // Until no survivor (rank on the first host) runs any more.
    let mut gone = None;
    while cut.elapsed() < HANG_LIMIT {
        job.pump(Duration::from_millis(200));
        if hosts.ranks(0, &exe) == 0 {
            gone = Some(cut.elapsed());
            break;
        }
    }
    job.pump(Duration::from_millis(300));
    let text = job.text();
    // What the survivors said after the cut (the second host's output cannot arrive).
    let errors: Vec<(Duration, String)> = job
        .lines
        .iter()
        .filter(|(t, l)| {
            *t > cut
                && (l.contains("stopped answering")
                    || l.contains("acknowledged nothing")
                    || l.contains("hosts: rank 0 error")
                    || l.contains("hosts: rank 1 error"))
        })
        .map(|(t, l)| (*t - cut, l.clone()))
        .collect();
    let Some(gone) = gone else {
        panic!("{mpi:?}: survivors of a cut link still ran {HANG_LIMIT:?} later (a hang):\n{text}");
    };
    assert!(
        !errors.is_empty(),
        "{mpi:?}: the survivors ended without reporting an error:\n{text}"
    );
    assert!(
        !text
            .lines()
            .any(|l| l.contains("hosts: rank") && l.ends_with(" no error")),
        "{mpi:?}: a rank exchanged for two minutes without an error:\n{text}"
    );
    // The launcher's own end is its business (OpenMPI's mpirun waits for its daemon
    // behind the cut link): said, not asserted.
    let launcher = job.wait(Duration::from_secs(3));
    eprintln!(
        "{mpi:?}: link cut; first survivor error after {:.2} s ({}); survivors gone after \
         {:.2} s; launcher {}",
        errors[0].0.as_secs_f64(),
        errors[0].1.trim(),
        gone.as_secs_f64(),
        match launcher {
            Some(st) => format!("exited ({st})"),
            None => "still waiting (killed)".into(),
        }
    );
}

/// OpenMPI (`mpirun` with `plm_rsh_agent`): 4 ranks on two hosts, p2p, collectives, RMA.
#[test]
fn openmpi_across_two_hosts() {
    run_checks(Mpi::Open);
}

/// MPICH (`mpiexec.mpich -launcher-exec`): the same.
#[test]
fn mpich_across_two_hosts() {
    run_checks(Mpi::Mpich);
}

/// OpenMPI: one host's link cut mid-run; the other host's ranks end with an error.
#[test]
fn openmpi_cut_link_ends_in_errors() {
    run_cut(Mpi::Open);
}

/// MPICH: the same.
#[test]
fn mpich_cut_link_ends_in_errors() {
    run_cut(Mpi::Mpich);
}
