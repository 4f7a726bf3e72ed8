//! The UMR layout rendezvous between two real processes, over `rc_verbs` on the software
//! HCA model (a model of an HCA, enabled here with `RUCX_SOFTHCA=1`): `rucx-perftest
//! --validate` checks every byte of every message, and the statistics it prints
//! (`RUCX_PERFTEST_STATS=1`) show which way each transfer went and what the key caches
//! did. Nothing about timing is asserted.

use std::collections::HashMap;
use std::process::Command;
use std::sync::Mutex;

/// Two spinning processes per case: one case at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The counters of one side's statistics lines (`rucx-perftest client: name n, ...`),
/// worker and rc_verbs together.
fn counters(stderr: &str, side: &str) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    let tag = format!("rucx-perftest {side}: ");
    // The two processes' lines may run together: cut at every tag.
    for part in stderr.split("rucx-perftest ").skip(1) {
        let part = format!("rucx-perftest {part}");
        let Some(rest) = part.strip_prefix(&tag) else {
            continue;
        };
        let rest = rest.strip_prefix("rc_verbs: ").unwrap_or(rest);
        for item in rest.lines().next().unwrap_or("").split(", ") {
            if let Some((name, v)) = item.rsplit_once(' ') {
                if let Ok(v) = v.trim().parse::<u64>() {
                    m.insert(name.trim().to_string(), v);
                }
            }
        }
    }
    m
}

/// Runs a validated `tag_lat` over the model with `RUCX_UMR=mode`; returns the client's
/// counters (it receives as many messages as it sends).
fn run(mode: &str, args: &[&str]) -> HashMap<String, u64> {
    run_env(mode, args, &[])
}

fn run_env(mode: &str, args: &[&str], env: &[(&str, &str)]) -> HashMap<String, u64> {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_rucx-perftest"))
        .envs(env.iter().copied())
        .args([
            "--loopback",
            "-t",
            "tag_lat",
            "--validate",
            "-n",
            "40",
            "-w",
            "4",
        ])
        .args(args)
        .env("RUCX_SOFTHCA", "1")
        .env("UCX_TLS", "rc_verbs,self")
        .env("RUCX_UMR", mode)
        .env("RUCX_PERFTEST_STATS", "1")
        .output()
        .expect("run rucx-perftest");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{mode} {args:?}: {}{err}",
        String::from_utf8_lossy(&out.stdout)
    );
    let c = counters(&err, "client");
    assert!(!c.is_empty(), "{mode} {args:?}: no statistics in {err}");
    c
}

fn get(c: &HashMap<String, u64>, k: &str) -> u64 {
    c.get(k).copied().unwrap_or(0)
}

/// The y face of a 3D stencil: 64 rows of 1 KiB (128 doubles) apart, 64 KiB. With the
/// model's 64 entries per key a chunk is 63 KiB, so 2 keys per side.
const VEC: [&str; 2] = ["-D", "stencil3d_face:128x64x64,y"];

#[test]
fn umr_moves_every_byte_and_the_second_transfer_builds_and_sends_no_keys() {
    let c = run("umr", &VEC);
    let msgs = 44; // 40 measured + 4 warm-up
    assert_eq!(get(&c, "rendezvous umr"), msgs, "{c:?}");
    // The key list went once (2 keys of 4 bytes); every later request named it.
    assert_eq!(get(&c, "umr list bytes"), 8, "{c:?}");
    assert_eq!(get(&c, "umr list hits"), msgs - 1, "{c:?}");
    // One key set as receiver, one as sender, configured once each, from the key pool
    // made when the interface opened (64 keys: no key created after that).
    assert_eq!(get(&c, "mkeys_configured"), 4, "{c:?}");
    assert_eq!(get(&c, "mkeys_created"), 64, "{c:?}");
    assert_eq!(get(&c, "umr_cache_misses"), 2, "{c:?}");
    assert_eq!(get(&c, "umr_cache_hits"), 2 * msgs - 2, "{c:?}");
    assert_eq!(get(&c, "umr_writes"), 2 * msgs, "{c:?}");
    eprintln!("umr: {c:?}");
}

#[test]
fn packed_and_block_by_block_move_every_byte_too() {
    let c = run("pack", &VEC);
    assert_eq!(get(&c, "rendezvous packed"), 44, "{c:?}");
    assert_eq!(get(&c, "mkeys_configured"), 0, "{c:?}");
    let c = run("blocks", &VEC);
    assert_eq!(
        get(&c, "rendezvous packed") + get(&c, "rendezvous umr"),
        0,
        "{c:?}"
    );
    assert!(get(&c, "rdma_reads") >= 44, "{c:?}");
}

#[test]
fn the_hybrid_picks_per_direction_for_sw4lite_as_the_paper_does() {
    // The paper's application: its x face is thousands of 48-byte blocks (packing wins),
    // its y face tens of 5 KB blocks (UMR wins); the hybrid takes each its own way.
    let env = [("UCX_RNDV_THRESH", "1k")];
    let c = run_env("auto", &["-D", "sw4lite_x"], &env);
    assert_eq!(get(&c, "rendezvous packed"), 44, "x: {c:?}");
    assert_eq!(get(&c, "rendezvous umr"), 0, "x: {c:?}");
    let c = run_env("auto", &["-D", "sw4lite_y"], &env);
    assert_eq!(get(&c, "rendezvous umr"), 44, "y: {c:?}");
    assert_eq!(get(&c, "rendezvous packed"), 0, "y: {c:?}");
}

#[test]
fn the_hybrid_packs_small_blocks_and_writes_large_ones() {
    // The x face: single doubles. A work request per 63 of them loses to packing.
    // (The endpoint's eager/rendezvous tuner may send a few eagerly.)
    let c = run("auto", &["-D", "stencil3d_face:64x64x64,x"]);
    assert!(get(&c, "rendezvous packed") > 0, "small blocks: {c:?}");
    assert_eq!(get(&c, "rendezvous umr"), 0, "small blocks: {c:?}");
    // The y face of a 2048-wide grid: rows of 16 KiB. UMR.
    let c = run("auto", &["-D", "stencil3d_face:2048x8x8,y"]);
    assert!(get(&c, "rendezvous umr") > 0, "large blocks: {c:?}");
    assert_eq!(get(&c, "rendezvous packed"), 0, "large blocks: {c:?}");
}

#[test]
fn the_papers_layouts_by_umr_and_packed() {
    // MILC, NAS MG (single doubles and rows), a nested vector (a 3D stencil's y face),
    // SPECFEM3D's indexed blocks and SW4Lite's two faces (a nested vector of 48-byte
    // blocks, a vector of 5 KB ones); every byte checked by --validate. A fixed rendezvous
    // threshold keeps every message a rendezvous (no tuner, no eager); SPECFEM3D's
    // description, too large for an RTS, goes before it in parts.
    let env = [("UCX_RNDV_THRESH", "1k"), ("UCX_RNDV_LAYOUT_PARTS", "y")];
    for l in [
        "milc_su3_zd",
        "nas_mg_x:64",
        "nas_mg_y:64",
        "stencil3d_face:64x64x64,y",
        "specfem3d_cm",
        "sw4lite_x",
        "sw4lite_y",
    ] {
        for (mode, counter) in [("umr", "rendezvous umr"), ("pack", "rendezvous packed")] {
            let c = run_env(mode, &["-D", l], &env);
            assert_eq!(get(&c, counter), 44, "{l} {mode}: {c:?}");
            eprintln!("{l} {mode}: {c:?}");
        }
    }
}

#[test]
fn a_device_out_of_keys_falls_back_to_packing() {
    // tag_bw keeps many receives of NAS MG's x face (16384 doubles: 261 keys a set) in
    // flight at once, into a ring of buffers: more key sets in use than the model's 4096
    // keys hold. Transfers that find no keys go packed (a receiver out of keys), or by the
    // active-message pipeline (a sender that cannot register its layout's span: those
    // keys may be held by the receiver's caches, which wait for this very message), and
    // every byte still arrives.
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let out = Command::new(env!("CARGO_BIN_EXE_rucx-perftest"))
        .args([
            "--loopback",
            "-t",
            "tag_bw",
            "--validate",
            "-n",
            "60",
            "-w",
            "4",
        ])
        .args(["-D", "nas_mg_x:128"])
        .env("RUCX_SOFTHCA", "1")
        .env("RUCX_SOFTHCA_MKEY_NS", "0")
        .env("UCX_TLS", "rc_verbs,self")
        .env("RUCX_UMR", "umr")
        .env("RUCX_PERFTEST_STATS", "1")
        .output()
        .expect("run rucx-perftest");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let s = counters(&err, "server");
    assert!(get(&s, "rendezvous umr") > 0, "{s:?}");
    assert!(get(&s, "rendezvous packed") > 0, "{s:?}");
    assert!(get(&s, "mkeys_configured") >= 261, "{s:?}");
    // The pool grew on demand beyond the 64 keys made at open.
    assert!(get(&s, "mkeys_created") > 64, "{s:?}");
    eprintln!("server: {s:?}");
}
