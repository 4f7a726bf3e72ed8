//! MPICH's own test suite (`test/mpi` of MPICH 4.0.2), the subset of
//! `contrib/mpich/ci.list`, run by Debian's MPICH 4.0.2 and OpenMPI 4.1.4, each unmodified,
//! over our library: `contrib/mpich/suite.sh --ci --lib rucx` (`docs/mpich.md`). Every
//! test of the subset passes over Debian's UCX 1.13 under both MPIs (the list says when
//! that was checked; `suite.sh --ci` without `--lib` checks it again, at twice the time),
//! so here every one must pass over Rucx. The script checks that Rucx's library served
//! every rank. Skips with a message when an MPI is missing or MPICH's source cannot be
//! downloaded.

mod common;

use std::path::Path;
use std::process::Command;

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn mpich_test_suite_subset_over_rucx() {
    for tool in [
        "mpicc.mpich",
        "mpiexec.mpich",
        "mpicc.openmpi",
        "mpirun.openmpi",
    ] {
        if !have(tool) {
            return common::skip(&format!(
                "{tool} not found (Debian: mpich libmpich-dev openmpi-bin libopenmpi-dev)"
            ));
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpich-suite-ci");
    let _ = std::fs::remove_dir_all(&out_dir);
    let lib = common::rucx_only_dir();
    let out = Command::new("bash")
        .arg(root.join("contrib/mpich/suite.sh"))
        .args(["--ci", "--lib", "rucx", "--rucx-lib"])
        .arg(&lib)
        .arg("--out")
        .arg(&out_dir)
        .current_dir(&root)
        .output()
        .expect("run contrib/mpich/suite.sh");
    let (so, se) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if out.status.code() == Some(2) && se.contains("download of") {
        return common::skip(&format!("MPICH's source could not be downloaded:\n{se}"));
    }
    assert!(
        out.status.success(),
        "suite.sh --ci failed (exit {:?}):\n{so}\n{se}",
        out.status.code()
    );
    let summary = std::fs::read_to_string(out_dir.join("summary.txt")).expect("summary.txt");
    for mpi in ["MPICH 4.0.2", "OpenMPI 4.1.4"] {
        let section = summary
            .split("=== ")
            .find(|s| s.starts_with(mpi))
            .unwrap_or_else(|| panic!("no {mpi} section:\n{summary}"));
        // Every test of the subset passes over Rucx: "over Rucx:  N/N  passed".
        let line = section
            .lines()
            .find(|l| l.trim_start().starts_with("over Rucx:"))
            .unwrap_or_else(|| panic!("{mpi}: no Rucx line:\n{section}"));
        let counts = line
            .split_whitespace()
            .find(|w| w.contains('/'))
            .and_then(|w| w.split_once('/'))
            .map(|(a, b)| (a.parse::<u32>().unwrap(), b.parse::<u32>().unwrap()))
            .unwrap_or_else(|| panic!("{mpi}: {line}"));
        assert!(counts.1 >= 30, "{mpi}: only {} tests ran: {line}", counts.1);
        assert_eq!(
            counts.0, counts.1,
            "{mpi}: not every test passed over Rucx:\n{section}"
        );
    }
    eprintln!("{summary}");
}
