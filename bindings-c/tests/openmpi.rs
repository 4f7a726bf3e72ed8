//! Debian's OpenMPI 4.1.4 (`pml ucx`, `osc ucx`), unmodified, over our `libucp.so.0`: MPI
//! programs of ours (`bindings-c/mpi/*.c`), compiled with `mpicc`, each verifying its data and
//! printing `<name>: OK` from rank 0. Every rank must announce (through `RUCX_ANNOUNCE=1`)
//! that Rucx's library served it. Skips with a message when `mpicc`/`mpirun` are missing.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The runs share two cores and busy-poll: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

fn tools() -> Option<(PathBuf, PathBuf)> {
    match (which("mpicc"), which("mpirun")) {
        (Some(cc), Some(run)) => Some((cc, run)),
        _ => {
            common::skip(
                "mpicc/mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)",
            );
            None
        }
    }
}

/// Compiles `bindings-c/mpi/<name>.c` into the test's scratch directory.
fn compile(mpicc: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("mpi")
        .join(format!("{name}.c"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-mpi");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = Command::new(mpicc)
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc");
    assert!(
        out.status.success(),
        "mpicc {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Which `libucp.so.0` an MPI program runs over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lib {
    Rucx,
    /// Debian's UCX 1.13, which OpenMPI links by default.
    Ucx113,
}

/// Where the ranks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cpus {
    /// OpenMPI's default binding.
    Default,
    /// Every rank on this one CPU (`taskset`), OpenMPI yielding it when idle: processes
    /// taking turns on a core, as `ucp::Worker::cpu_shared` watches for.
    One(usize),
}

/// `mpirun -np <np>` of `exe` over `lib`, killed after `limit`; returns (ok, stdout,
/// stderr).
#[allow(clippy::too_many_arguments)]
fn mpirun(
    mpirun: &Path,
    np: usize,
    osc: bool,
    exe: &Path,
    args: &[&str],
    lib: Lib,
    limit: Duration,
    extra: &[(&str, &str)],
    cpus: Cpus,
) -> (bool, String, String) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-mpi");
    let name = exe.file_name().unwrap().to_string_lossy().to_string();
    let (outp, errp) = (
        dir.join(format!("{name}-{lib:?}.out")),
        dir.join(format!("{name}-{lib:?}.err")),
    );
    let mut c = match cpus {
        Cpus::Default => Command::new(mpirun),
        Cpus::One(cpu) => {
            let mut c = Command::new("taskset");
            c.args(["-c", &cpu.to_string()]).arg(mpirun);
            c.args(["--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]);
            c
        }
    };
    c.args([
        "--allow-run-as-root",
        "--oversubscribe",
        "-np",
        &np.to_string(),
    ])
    // Local launch without ssh/rsh; only the self BTL (pml ucx carries all
    // point-to-point traffic).
    .args(["--mca", "plm", "isolated", "--mca", "btl", "self"])
    .args(["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any"])
    .args(["--mca", "pml_ucx_devices", "any"]);
    if osc {
        c.args(["--mca", "osc", "ucx"]);
    }
    if lib == Lib::Rucx {
        // Every UCX library name is ours: no UCX library is loaded at all.
        c.args(["-x", "LD_LIBRARY_PATH", "-x", "RUCX_ANNOUNCE"])
            .env("LD_LIBRARY_PATH", common::rucx_only_dir())
            .env("RUCX_ANNOUNCE", "1");
    } else {
        c.env_remove("LD_LIBRARY_PATH");
    }
    for (k, v) in extra {
        c.args(["-x", k]).env(k, v);
    }
    c.arg(exe)
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&outp).unwrap())
        .stderr(std::fs::File::create(&errp).unwrap());
    let mut child = c.spawn().expect("spawn mpirun");
    let start = Instant::now();
    let ok = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.success();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let timed_out = start.elapsed() > limit;
    let mut err = std::fs::read_to_string(&errp).unwrap_or_default();
    if timed_out {
        err.push_str(&format!("\n(killed after {limit:?})"));
    }
    (ok, std::fs::read_to_string(&outp).unwrap_or_default(), err)
}

/// Runs program `name` on `np` ranks over our library and checks its success line, our
/// announcements (`procs` processes: the ranks, and any they spawn), and that nothing was
/// logged as a warning (a clean run and a clean finalize are quiet).
fn run(name: &str, np: usize, osc: bool) {
    run_procs(name, np, np, osc)
}

fn run_procs(name: &str, np: usize, procs: usize, osc: bool) {
    run_on(name, np, procs, osc, Cpus::Default)
}

fn run_on(name: &str, np: usize, procs: usize, osc: bool, cpus: Cpus) {
    let Some((cc, run)) = tools() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = compile(&cc, name);
    let limit = Duration::from_secs(60);
    let (ok, out, err) = mpirun(&run, np, osc, &exe, &[], Lib::Rucx, limit, &[], cpus);
    let all = format!("{out}\n{err}");
    assert!(
        ok && out.contains(&format!("{name}: OK")),
        "{name} (-np {np}) failed:\nstdout:\n{out}\nstderr:\n{err}"
    );
    let warnings: Vec<&str> = all.lines().filter(|l| l.contains("] WARN ")).collect();
    assert!(
        warnings.is_empty(),
        "{name} (-np {np}) logged warnings:\n{}",
        warnings.join("\n")
    );
    // Every rank's process loaded Rucx's libucp (osc ucx makes a second context: count pids).
    let pids: BTreeSet<&str> = all
        .lines()
        .filter_map(|l| l.split("[rucx] libucp.so.0 (Rucx ").nth(1))
        .filter_map(|l| l.split("serving pid ").nth(1))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(
        pids.len(),
        procs,
        "{name}: expected {procs} Rucx announcements (one per process), got {pids:?}:\n{all}"
    );
    eprintln!("{name}: {}", out.trim());
}

/// Runs `name` over Debian's UCX 1.13 first (the program must pass there: it encodes what
/// UCX does), then over ours.
fn run_beside_ucx(name: &str, np: usize) {
    run_beside_ucx_with(name, np, false, &[]);
}

/// [`run_beside_ucx`] with osc ucx on or off and with `ucx_args` given to the program over
/// UCX 1.13 (to leave out what UCX itself gets wrong); over ours it runs with none.
fn run_beside_ucx_with(name: &str, np: usize, osc: bool, ucx_args: &[&str]) {
    let Some((cc, launcher)) = tools() else {
        return;
    };
    {
        let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let exe = compile(&cc, name);
        let (ok, out, err) = mpirun(
            &launcher,
            np,
            osc,
            &exe,
            ucx_args,
            Lib::Ucx113,
            Duration::from_secs(60),
            &[],
            Cpus::Default,
        );
        assert!(
            ok && out.contains(&format!("{name}: OK")),
            "{name} over UCX 1.13 failed, so it does not encode UCX's behaviour:\n{out}\n{err}"
        );
        eprintln!("{name} over UCX 1.13: {}", out.trim());
    }
    run(name, np, osc);
}

/// Blocking, non-blocking and synchronous sends, 0 B .. 64 MiB, data checked both ways.
#[test]
fn mpi_p2p_sizes_and_modes() {
    run("p2p", 2, false);
}

/// The same with both ranks taking turns on one CPU, where a worker that finds its CPU
/// shared answers empty polls before it enters the message path: every message still
/// arrives whole and in order, and completes its request.
#[test]
fn mpi_p2p_with_both_ranks_on_one_cpu() {
    use nix::sched::{sched_getaffinity, CpuSet};
    use nix::unistd::Pid;
    let mine = sched_getaffinity(Pid::from_raw(0)).expect("this thread's affinity");
    let cpu = (0..CpuSet::count())
        .find(|&c| mine.is_set(c).unwrap_or(false))
        .expect("a CPU in this thread's affinity mask");
    run_on("p2p", 2, 2, false, Cpus::One(cpu));
}

/// OpenMPI with pml and osc ucx where no UCX library is loaded: every UCX soname it needs
/// (`libucp`, `libucs`, `libucm`) is ours, and the loader's own record (`LD_DEBUG=libs`)
/// shows no library of Debian's UCX initialized in any process.
#[test]
fn mpi_runs_with_no_ucx_library_loaded() {
    let Some((cc, launcher)) = tools() else {
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = compile(&cc, "p2p");
    // The loader's trace goes to files (ld-trace.<pid>), not to stderr, where mpirun may
    // forward a rank's lines in chunks split around the other rank's output.
    let traces = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-mpi-ld-trace");
    let _ = std::fs::remove_dir_all(&traces);
    std::fs::create_dir_all(&traces).unwrap();
    let trace_base = traces.join("ld-trace");
    let (ok, out, err) = mpirun(
        &launcher,
        2,
        true,
        &exe,
        &[],
        Lib::Rucx,
        Duration::from_secs(60),
        &[
            ("LD_DEBUG", "libs"),
            ("LD_DEBUG_OUTPUT", &trace_base.to_string_lossy()),
        ],
        Cpus::Default,
    );
    assert!(ok && out.contains("p2p: OK"), "p2p failed:\n{out}\n{err}");
    let ours = common::rucx_only_dir();
    let mut trace = String::new();
    for e in std::fs::read_dir(&traces).unwrap() {
        trace.push_str(&std::fs::read_to_string(e.unwrap().path()).unwrap());
    }
    let inits: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains("calling init:") && l.contains("/libuc"))
        .collect();
    assert!(
        !inits.is_empty(),
        "no UCX-named library initialized at all?\n{err}\n{trace}"
    );
    let foreign: Vec<&&str> = inits
        .iter()
        .filter(|l| !l.contains(&*ours.to_string_lossy()))
        .collect();
    assert!(foreign.is_empty(), "UCX libraries loaded:\n{foreign:#?}");
    eprintln!(
        "{} UCX-named library initializations, all ours",
        inits.len()
    );
}

/// MPI_ANY_SOURCE/MPI_ANY_TAG, MPI_Probe/Iprobe/Mprobe+Mrecv/Improbe+Imrecv, MPI_Cancel.
#[test]
fn mpi_wildcards_probe_cancel() {
    run("match", 2, false);
}

/// MPI_Type_vector/indexed/create_subarray (generic datatypes in pml ucx), eager and
/// rendezvous, into the type and into contiguous.
#[test]
fn mpi_derived_datatypes() {
    run("dtypes", 2, false);
}

/// 4 ranks: MPI_Alltoall, MPI_Alltoallv and an Isend/Irecv all-to-all.
#[test]
fn mpi_alltoall_4_ranks() {
    run("alltoall", 4, false);
}

/// osc ucx: MPI_Put/MPI_Get/MPI_Accumulate/MPI_Fetch_and_op/MPI_Compare_and_swap.
#[test]
fn mpi_rma_osc_ucx() {
    run("rma", 2, true);
}

/// One-sided operations whose result depends on the order the library performs them in
/// (`bindings-c/mpi/rma_order.c`): the swap of `MPI_REPLACE` on `MPI_Win_create`,
/// `MPI_Win_allocate` and dynamic windows, on one rank (every operation to itself) and on
/// two. Over UCX 1.13 without the 1- and 2-byte atomics, which UCX refuses (osc/ucx then
/// returns its result buffer unchanged); over ours with them, done right.
#[test]
fn mpi_rma_order_on_every_window_kind() {
    for np in [1, 2] {
        run_beside_ucx_with("rma_order", np, true, &["no-small-atomics"]);
    }
}

/// Issue 22, fault 1: `MPI_Request_free` on an `MPI_Issend` that may still be active (one
/// process, `MPI_COMM_SELF`, 20 rounds with `MPI_Mprobe` + `MPI_Imrecv`): no callback may
/// run after `ucp_request_free` (it crashed on the second round).
#[test]
fn mpi_request_free_on_an_active_issend() {
    run_beside_ucx("issend_free", 1);
}

/// Issue 22, fault 2: a receiver that matches a waiting synchronous message and then stays
/// out of MPI does not hold up the sender (it took the receiver's whole sleep).
#[test]
fn mpi_issend_completes_while_the_receiver_sleeps() {
    run_beside_ucx("issend_ack", 2);
}

/// Issue 22, teardown: spawn, disconnect, children finalize while the parent progresses;
/// nobody logs a warning.
#[test]
fn mpi_spawn_disconnect_is_quiet() {
    run_procs("spawn", 1, 3, false);
}
