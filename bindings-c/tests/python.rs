//! UCXX (RAPIDS' Python bindings of UCX) over our library: `contrib/python/ucxx-suite.sh
//! --ci`, which installs the pinned wheels into a virtual environment (cached under
//! `~/.cache/rucx`) and runs `contrib/python/ucxx_smoke.py` with every UCX library name
//! ours (`docs/python.md`). The process must announce Rucx, and the bindings must see
//! UCX 1.19. Then a Dask cluster over UCXX (`--dask`, three runs of
//! `contrib/python/dask_ucx.py`), every run passing.

mod common;

use std::path::Path;
use std::process::Command;

fn have_venv() -> bool {
    Command::new("python3")
        .args(["-c", "import venv, ensurepip"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Runs `ucxx-suite.sh MODE --lib <ours>`: its stdout and stderr, or `None` (said as
/// skipped) where the pinned wheels cannot be installed.
fn suite(mode: &str, env: &[(&str, &str)]) -> Option<(bool, String, String)> {
    // One at a time: the first run makes the virtual environment both use.
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
    if !have_venv() {
        common::skip("python3 with venv and ensurepip not found (Debian: python3-venv)");
        return None;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let lib = common::rucx_only_dir();
    let out = Command::new("bash")
        .arg(root.join("contrib/python/ucxx-suite.sh"))
        .args([mode, "--lib"])
        .arg(&lib)
        .envs(env.iter().copied())
        .current_dir(&root)
        .output()
        .expect("run ucxx-suite.sh");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    if !out.status.success() && se.contains("Could not find a version") {
        // The package index answered without the pinned wheels: nothing of ours ran.
        common::skip(&format!("the UCXX wheels could not be installed:\n{se}"));
        return None;
    }
    Some((out.status.success(), so, se))
}

/// A Dask cluster of a scheduler and two worker processes talking through UCXX over
/// Rucx: array results checked against NumPy, three runs, each must pass (connections
/// from one process to a listener of its own worker once paired the wrong endpoints
/// here, and Python's heap was overwritten in some runs).
#[test]
fn dask_runs_over_rucx() {
    let Some((ok, so, se)) = suite("--dask", &[("RUCX_DASK_RUNS", "3")]) else {
        return;
    };
    assert!(ok, "ucxx-suite.sh --dask failed:\n{so}\n{se}");
    assert!(so.contains("dask_ucx: 3 of 3 runs passed"), "{so}\n{se}");
    assert_eq!(
        so.matches("dask_ucx: OK (UCX 1.19.0").count(),
        3,
        "{so}\n{se}"
    );
    assert!(
        !se.contains("Connection reset") && !se.contains("length mismatch"),
        "a connection failed during the runs:\n{se}"
    );
    eprintln!("{so}");
}

#[test]
fn ucxx_runs_over_rucx() {
    let Some((ok, so, se)) = suite("--ci", &[]) else {
        return;
    };
    assert!(ok, "ucxx-suite.sh --ci failed:\n{so}\n{se}");
    assert!(so.contains("ucxx_smoke: OK"), "{so}\n{se}");
    assert!(
        so.contains("UCX 1.19.0"),
        "the bindings did not load Rucx:\n{so}"
    );
    let announced = se
        .lines()
        .filter(|l| l.contains("[rucx] libucp.so.0 (Rucx "))
        .count();
    assert!(
        announced >= 1,
        "{announced} processes announced Rucx:\n{se}"
    );
    eprintln!("{so}");
}
