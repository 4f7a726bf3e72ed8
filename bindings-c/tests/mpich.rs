//! Debian's MPICH 4.0.2 (device `ch4:ucx`), unmodified, over our `libucp.so.0`: the MPI
//! programs of `bindings-c/mpi/` (the ones OpenMPI runs in `openmpi.rs`), compiled with
//! `mpicc.mpich` and launched by `mpiexec.mpich` (hydra), each verifying its data and
//! printing `<name>: OK` from rank 0. Each runs over Debian's UCX 1.13 first (the program
//! must pass there), then over ours with every UCX library name ours; every rank must
//! announce (`RUCX_ANNOUNCE=1`) that Rucx's library served it, and nothing may be logged
//! as a warning. MPICH hands noncontiguous data to `ucp_dt_create_generic`, probes with
//! `ucp_tag_probe_nb`, and registers its active-message handler with the deprecated
//! `ucp_worker_set_am_handler`. Skips with a message when MPICH is missing.

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
    match (which("mpicc.mpich"), which("mpiexec.mpich")) {
        (Some(cc), Some(run)) => Some((cc, run)),
        _ => {
            common::skip(
                "mpicc.mpich/mpiexec.mpich not found (Debian: apt-get install mpich libmpich-dev)",
            );
            None
        }
    }
}

fn compile(mpicc: &Path, name: &str) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("mpi")
        .join(format!("{name}.c"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-mpich");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join(name);
    let out = Command::new(mpicc)
        .args(["-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run mpicc.mpich");
    assert!(
        out.status.success(),
        "mpicc.mpich {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// `mpiexec.mpich -n <np> exe args` over ours (`rucx`) or Debian's UCX 1.13, killed after
/// `limit`; returns (ok, stdout, stderr).
fn mpiexec(
    launcher: &Path,
    np: usize,
    exe: &Path,
    args: &[&str],
    rucx: bool,
    limit: Duration,
) -> (bool, String, String) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-mpich");
    let name = exe.file_name().unwrap().to_string_lossy().to_string();
    let tag = if rucx { "rucx" } else { "ucx113" };
    let (outp, errp) = (
        dir.join(format!("{name}-{tag}.out")),
        dir.join(format!("{name}-{tag}.err")),
    );
    let mut c = Command::new(launcher);
    // -genvall: the environment (the library path, the announcement) reaches every rank.
    c.args(["-genvall", "-n", &np.to_string()]);
    if rucx {
        c.env("LD_LIBRARY_PATH", common::rucx_only_dir())
            .env("RUCX_ANNOUNCE", "1");
    } else {
        c.env_remove("LD_LIBRARY_PATH");
    }
    c.arg(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&outp).unwrap())
        .stderr(std::fs::File::create(&errp).unwrap());
    let mut child = c.spawn().expect("spawn mpiexec.mpich");
    let start = Instant::now();
    let ok = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.success();
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            // Hydra's proxies may leave ranks behind.
            let _ = Command::new("pkill").arg("-f").arg(exe).status();
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut err = std::fs::read_to_string(&errp).unwrap_or_default();
    if start.elapsed() > limit {
        err.push_str(&format!("\n(killed after {limit:?})"));
    }
    (ok, std::fs::read_to_string(&outp).unwrap_or_default(), err)
}

/// Runs program `name` on `np` ranks over UCX 1.13 (with `ucx_args`), then over ours.
fn run_beside_ucx(name: &str, np: usize, ucx_args: &[&str]) {
    let Some((cc, launcher)) = tools() else {
        return;
    };
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let exe = compile(&cc, name);
    let limit = Duration::from_secs(120);
    let (ok, out, err) = mpiexec(&launcher, np, &exe, ucx_args, false, limit);
    assert!(
        ok && out.contains(&format!("{name}: OK")),
        "{name} over UCX 1.13 failed, so it does not encode UCX's behaviour:\n{out}\n{err}"
    );
    let (ok, out, err) = mpiexec(&launcher, np, &exe, &[], true, limit);
    assert!(
        ok && out.contains(&format!("{name}: OK")),
        "{name} (-n {np}) over Rucx failed:\nstdout:\n{out}\nstderr:\n{err}"
    );
    let all = format!("{out}\n{err}");
    let warnings: Vec<&str> = all
        .lines()
        .filter(|l| l.contains("] WARN ") || l.contains(" WARN "))
        .collect();
    assert!(
        warnings.is_empty(),
        "{name} (-n {np}) logged warnings:\n{}",
        warnings.join("\n")
    );
    let pids: BTreeSet<&str> = all
        .lines()
        .filter_map(|l| l.split("[rucx] libucp.so.0 (Rucx ").nth(1))
        .filter_map(|l| l.split("serving pid ").nth(1))
        .filter_map(|l| l.split(':').next())
        .collect();
    assert_eq!(
        pids.len(),
        np,
        "{name}: expected {np} Rucx announcements (one per rank), got {pids:?}:\n{all}"
    );
    eprintln!("{name} over Rucx: {}", out.trim());
}

/// Blocking, non-blocking and synchronous sends, 0 B .. 64 MiB, data checked both ways.
#[test]
fn mpich_p2p_sizes_and_modes() {
    run_beside_ucx("p2p", 2, &[]);
}

/// Wildcards, probe/iprobe, mprobe/improbe, cancel.
#[test]
fn mpich_wildcards_probe_cancel() {
    run_beside_ucx("match", 2, &[]);
}

/// Derived datatypes (MPICH gives them to `ucp_dt_create_generic`), eager and rendezvous.
#[test]
fn mpich_derived_datatypes() {
    run_beside_ucx("dtypes", 2, &[]);
}

/// 4 ranks: alltoall, alltoallv, an isend/irecv all-to-all.
#[test]
fn mpich_alltoall_4_ranks() {
    run_beside_ucx("alltoall", 4, &[]);
}

/// One-sided: get, put, accumulate, fetch_and_op, compare_and_swap; and the order of a
/// get and a put on every kind of window.
#[test]
fn mpich_rma() {
    run_beside_ucx("rma", 2, &[]);
    run_beside_ucx("rma_order", 2, &[]);
}

/// Synchronous sends: freed while active, and completed while the receiver sleeps.
#[test]
fn mpich_issend() {
    run_beside_ucx("issend_free", 1, &[]);
    run_beside_ucx("issend_ack", 2, &[]);
}
