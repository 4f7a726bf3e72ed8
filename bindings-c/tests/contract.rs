//! The `ucp.h` contract suite (`bindings-c/contract/*.c`, listed with `contract -l`): one C
//! test per promise of UCX's API that a consumer may rely on. The same program, built
//! against Debian's UCX 1.13 headers, runs over Debian's UCX 1.13, over UCX 1.22 (the PyPI
//! wheel that `contrib/bench/ucx-env.sh` installs; `RUCX_UCX122_LIB` names its `lib`
//! directory) and over our `libucp.so.0`; built against our own headers, it runs over ours
//! again.
//!
//! A test encodes the contract when it passes on UCX: every test must pass on at least one
//! of the two UCX versions, and ours must pass every test that either passes. The tests
//! UCX 1.13 fails are the ones `docs/c-abi.md` lists as its own breaks of the contract
//! (`UCX113_BREAKS`), and those it keeps only sometimes (`UCX113_FLAKY`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The promises UCX 1.13.1 itself breaks (docs/c-abi.md, "Where UCX breaks its contract").
const UCX113_BREAKS: &[&str] = &["callbacks.immediate_receive_with_info"];

/// The promises UCX 1.13.1 keeps only sometimes (same section): either result of 1.13 is
/// accepted, and the test then counts as the contract through UCX 1.22.
const UCX113_FLAKY: &[&str] = &["ep.close_after_the_peer_left"];

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-contract");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sources() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("contract");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .collect();
    v.sort();
    v
}

/// Builds the suite: against Debian's UCX headers and library (`ours == None`), or against
/// our headers and library.
fn build(name: &str, ours: Option<&Path>) -> PathBuf {
    let exe = scratch().join(name);
    let mut c = Command::new("cc");
    c.args(["-O1", "-g", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&exe);
    c.args(sources());
    match ours {
        Some(lib) => {
            c.arg(format!(
                "-I{}",
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("include")
                    .display()
            ))
            .arg(format!("-L{}", lib.display()))
            .arg("-l:libucp.so.0");
        }
        None => {
            c.arg("-lucp");
        }
    }
    let out = c.output().expect("run cc");
    assert!(
        out.status.success(),
        "building the contract suite ({name}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

/// Runs the suite with `env`; returns each test's verdict (`PASS`, `FAIL`, `SKIP`) and the
/// whole output.
fn run(exe: &Path, env: &[(&str, String)]) -> (BTreeMap<String, String>, String) {
    let mut c = Command::new(exe);
    c.env_remove("LD_LIBRARY_PATH").env_remove("UCX_MODULE_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run the contract suite");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut verdicts = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut w = line.split_whitespace();
        if let (Some(v @ ("PASS" | "FAIL" | "SKIP")), Some(name)) = (w.next(), w.next()) {
            verdicts.insert(name.to_string(), v.to_string());
        }
    }
    assert!(
        text.contains("contract: "),
        "the suite did not finish:\n{text}"
    );
    (verdicts, text)
}

fn tests_listed(exe: &Path) -> Vec<String> {
    let out = Command::new(exe).arg("-l").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_string))
        .collect()
}

#[test]
fn contract_suite_passes_on_ours_wherever_it_passes_on_ucx() {
    if !Path::new("/usr/include/ucp/api/ucp.h").exists() {
        return common::skip("Debian's UCX headers are missing (apt-get install libucx-dev)");
    }
    let ours = common::libucp_dir();
    let ucx_exe = build("contract-ucx-headers", None);
    let our_exe = build("contract-rucx-headers", Some(&ours));
    let names = tests_listed(&ucx_exe);
    // Every promise is in docs/c-abi.md's table.
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/c-abi.md"))
            .expect("docs/c-abi.md");
    let undocumented: Vec<&String> = names
        .iter()
        .filter(|n| !doc.contains(&format!("| `{n}` |")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "contract tests missing from docs/c-abi.md's table: {undocumented:?}"
    );
    assert!(names.len() >= 30, "only {} tests listed", names.len());

    let (u113, t113) = run(&ucx_exe, &[]);
    eprintln!("--- UCX 1.13 (Debian)\n{t113}");
    let u122 = match std::env::var("RUCX_UCX122_LIB") {
        Ok(lib) if Path::new(&lib).join("libucp.so.0").exists() => {
            let (v, t) = run(
                &ucx_exe,
                &[
                    ("LD_LIBRARY_PATH", lib.clone()),
                    ("UCX_MODULE_DIR", format!("{lib}/ucx")),
                ],
            );
            eprintln!("--- UCX 1.22 (wheel)\n{t}");
            Some(v)
        }
        _ => {
            common::skip(
                "UCX 1.22 is not installed (RUCX_UCX122_LIB unset; contrib/test-all.sh installs \
                 it with contrib/bench/ucx-env.sh): the suite runs over UCX 1.13 only",
            );
            None
        }
    };
    let lib = ours.display().to_string();
    let announce = |l: &str| {
        vec![
            ("LD_LIBRARY_PATH", l.to_string()),
            ("RUCX_ANNOUNCE", "1".into()),
        ]
    };
    let (r_ucxh, t_ucxh) = run(&ucx_exe, &announce(&lib));
    eprintln!("--- Rucx (built against UCX's headers)\n{t_ucxh}");
    assert!(
        t_ucxh.contains("[rucx] libucp.so.0"),
        "our library did not serve the run"
    );
    let (r_ours, t_ours) = run(&our_exe, &announce(&lib));
    eprintln!("--- Rucx (built against our headers)\n{t_ours}");

    let mut problems = Vec::new();
    for n in &names {
        let on = |m: &BTreeMap<String, String>| m.get(n).map(String::as_str) == Some("PASS");
        let breaks = UCX113_BREAKS.contains(&n.as_str());
        let flaky = UCX113_FLAKY.contains(&n.as_str());
        let ucx_pass = on(&u113) || u122.as_ref().is_some_and(on);
        if !ucx_pass && breaks && u122.is_none() {
            eprintln!("{n}: not checked (UCX 1.13 breaks it and UCX 1.22 did not run)");
            continue;
        }
        if !ucx_pass {
            problems.push(format!(
                "{n}: passes on no UCX version, so it does not encode UCX's contract"
            ));
            continue;
        }
        if !on(&r_ucxh) {
            problems.push(format!("{n}: passes on UCX, fails on Rucx (UCX's headers)"));
        }
        if !on(&r_ours) {
            problems.push(format!("{n}: passes on UCX, fails on Rucx (our headers)"));
        }
        if !flaky && on(&u113) == breaks {
            problems.push(format!(
                "{n}: UCX 1.13 {} it, but docs/c-abi.md says it {}",
                if on(&u113) { "passes" } else { "fails" },
                if breaks { "breaks it" } else { "keeps it" }
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "contract suite:\n{}",
        problems.join("\n")
    );
}
