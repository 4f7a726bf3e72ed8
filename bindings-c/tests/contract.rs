//! The `ucp.h` contract suite (`bindings-c/contract/*.c`, listed with `contract -l`): one C
//! test per promise of UCX's API that a consumer may rely on. The suite is built three
//! times, and each build runs over UCX and over our `libucp.so.0`:
//!
//! * against Debian's UCX 1.13 headers: over Debian's UCX 1.13, over UCX 1.22 (the PyPI
//!   wheel that `contrib/bench/ucx-env.sh` installs; `RUCX_UCX122_LIB` names its `lib`
//!   directory) and over ours — a program built for 1.13 keeps working on the 1.19 ABI we
//!   present;
//! * against UCX 1.22's headers (the wheel's `include`, where it is installed): over UCX
//!   1.22 and over ours — this build has the tests of what 1.14 to 1.19 added (the
//!   `abi119` area, compiled only where `UCP_API_VERSION` is 1.19 or more);
//! * against our own headers: over ours.
//!
//! A test encodes the contract when it passes on UCX: every test must pass on at least one
//! UCX version (a test only the newer headers build is checked against UCX 1.22 alone; it
//! goes unchecked against UCX when the wheel is missing), and ours must pass it in every
//! build that has it. The tests UCX 1.13 fails are the ones `docs/c-abi.md` lists as its
//! own breaks of the contract (`UCX113_BREAKS`), and those it keeps only sometimes
//! (`UCX113_FLAKY`).

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

/// The headers (and library) a build of the suite is compiled and linked against.
enum Headers<'a> {
    /// Debian's UCX 1.13 (`/usr/include`, `-lucp`).
    Debian,
    /// UCX 1.22 of the wheel: its `lib` directory, with `include` beside it.
    Ucx122(&'a Path),
    /// Ours, and our library in this directory.
    Ours(&'a Path),
}

/// Builds the suite against `headers`.
fn build(name: &str, headers: Headers) -> PathBuf {
    let exe = scratch().join(name);
    let mut c = Command::new("cc");
    c.args(["-O1", "-g", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&exe);
    c.args(sources());
    match headers {
        Headers::Ours(lib) => {
            c.arg(format!(
                "-I{}",
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("include")
                    .display()
            ))
            .arg(format!("-L{}", lib.display()))
            .arg("-l:libucp.so.0");
        }
        Headers::Ucx122(lib) => {
            c.arg(format!("-I{}", lib.join("../include").display()))
                .arg(format!("-L{}", lib.display()))
                .arg("-l:libucp.so.0")
                .arg(format!("-Wl,-rpath-link,{}", lib.display()));
        }
        Headers::Debian => {
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

/// The verdicts of one build of the suite over one library (`None`: it did not run).
type Verdicts = Option<BTreeMap<String, String>>;

/// Whether `n` passed in `v`.
fn passed(v: &Verdicts, n: &str) -> bool {
    v.as_ref()
        .is_some_and(|m| m.get(n).map(String::as_str) == Some("PASS"))
}

#[test]
fn contract_suite_passes_on_ours_wherever_it_passes_on_ucx() {
    if !Path::new("/usr/include/ucp/api/ucp.h").exists() {
        return common::skip("Debian's UCX headers are missing (apt-get install libucx-dev)");
    }
    let ours = common::libucp_dir();
    let ucx122 = match std::env::var("RUCX_UCX122_LIB") {
        Ok(lib) if Path::new(&lib).join("libucp.so.0").exists() => Some(PathBuf::from(lib)),
        _ => {
            common::skip(
                "UCX 1.22 is not installed (RUCX_UCX122_LIB unset; contrib/test-all.sh installs \
                 it with contrib/bench/ucx-env.sh): the suite runs over UCX 1.13 only, and the \
                 tests of the 1.19 additions are not checked against UCX",
            );
            None
        }
    };
    let ucx_exe = build("contract-ucx-headers", Headers::Debian);
    let new_exe = ucx122
        .as_deref()
        .map(|lib| build("contract-ucx122-headers", Headers::Ucx122(lib)));
    let our_exe = build("contract-rucx-headers", Headers::Ours(&ours));
    let old_names = tests_listed(&ucx_exe);
    let new_names = new_exe.as_deref().map(tests_listed).unwrap_or_default();
    let our_names = tests_listed(&our_exe);
    let mut names: Vec<String> = old_names.clone();
    for n in new_names.iter().chain(&our_names) {
        if !names.contains(n) {
            names.push(n.clone());
        }
    }
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
    assert!(
        our_names.len() > old_names.len(),
        "built against our (1.19) headers the suite has no more tests than against 1.13's"
    );

    let (v, t) = run(&ucx_exe, &[]);
    eprintln!("--- UCX 1.13 (Debian)\n{t}");
    let u113 = Some(v);
    let ucx_env = |lib: &Path| {
        let lib = lib.display().to_string();
        vec![
            ("LD_LIBRARY_PATH", lib.clone()),
            ("UCX_MODULE_DIR", format!("{lib}/ucx")),
        ]
    };
    let (u122, u122_new) = match (&ucx122, &new_exe) {
        (Some(lib), Some(exe)) => {
            let (v, t) = run(&ucx_exe, &ucx_env(lib));
            eprintln!("--- UCX 1.22 (wheel; built against UCX 1.13's headers)\n{t}");
            let (vn, tn) = run(exe, &ucx_env(lib));
            eprintln!("--- UCX 1.22 (wheel; built against its own headers)\n{tn}");
            (Some(v), Some(vn))
        }
        _ => (None, None),
    };
    let lib = ours.display().to_string();
    let announce = |l: &str| {
        vec![
            ("LD_LIBRARY_PATH", l.to_string()),
            ("RUCX_ANNOUNCE", "1".into()),
        ]
    };
    let (v, t_ucxh) = run(&ucx_exe, &announce(&lib));
    eprintln!("--- Rucx (built against UCX 1.13's headers)\n{t_ucxh}");
    assert!(
        t_ucxh.contains("[rucx] libucp.so.0"),
        "our library did not serve the run"
    );
    let r_ucxh = Some(v);
    let r_new = new_exe.as_deref().map(|exe| {
        let (v, t) = run(exe, &announce(&lib));
        eprintln!("--- Rucx (built against UCX 1.22's headers)\n{t}");
        v
    });
    let (v, t_ours) = run(&our_exe, &announce(&lib));
    eprintln!("--- Rucx (built against our headers)\n{t_ours}");
    let r_ours = Some(v);

    let mut problems = Vec::new();
    for n in &names {
        let in_old = old_names.contains(n);
        let breaks = UCX113_BREAKS.contains(&n.as_str());
        let flaky = UCX113_FLAKY.contains(&n.as_str());
        let ucx_pass = passed(&u113, n) || passed(&u122, n) || passed(&u122_new, n);
        // Ours, in every build that has the test.
        let builds = [
            (&r_ucxh, in_old, "UCX 1.13's headers"),
            (&r_new, new_names.contains(n), "UCX 1.22's headers"),
            (&r_ours, our_names.contains(n), "our headers"),
        ];
        let ours_fail: Vec<&str> = builds
            .iter()
            .filter(|(v, has, _)| *has && v.is_some() && !passed(v, n))
            .map(|(_, _, h)| *h)
            .collect();
        if !ucx_pass && u122.is_none() && (breaks || !in_old) {
            eprintln!("{n}: not checked against UCX (UCX 1.22 did not run)");
        } else if !ucx_pass {
            problems.push(format!(
                "{n}: passes on no UCX version, so it does not encode UCX's contract"
            ));
            continue;
        }
        for h in ours_fail {
            problems.push(format!("{n}: fails on Rucx ({h})"));
        }
        if in_old && !flaky && passed(&u113, n) == breaks {
            problems.push(format!(
                "{n}: UCX 1.13 {} it, but docs/c-abi.md says it {}",
                if passed(&u113, n) { "passes" } else { "fails" },
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
