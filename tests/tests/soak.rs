//! The soak in its CI size: 8 processes all to all, 60 messages of each kind to each peer
//! (`rucx-soak`; `contrib/soak.sh` runs the long one), every message checked, the live
//! heap, mappings and descriptors flat between the two quiet points, `/dev/shm` as it was.

use std::process::Command;

#[test]
fn eight_processes_all_to_all_every_kind_checked_and_nothing_grows() {
    let out = Command::new(env!("CARGO_BIN_EXE_rucx-soak"))
        .args(["--procs", "8", "--per", "60", "--warm-percent", "50"])
        .output()
        .expect("spawning rucx-soak");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success() && stdout.contains("SOAK OK procs 8 messages 16800"),
        "soak failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}
