//! ABI conformance: a C program compiled against UCX's real `ucp.h` prints `sizeof`/`offsetof`
//! of every struct the shim reads or writes, and the values of the enum constants it relies
//! on; they must equal our `#[repr(C)]` side, which is UCX 1.19's ABI.
//!
//! Every UCX header set found is used: Debian's 1.13 (`/usr/include`), UCX 1.22's (the
//! wheel's `include`, beside `RUCX_UCX122_LIB`) and any other named by `RUCX_UCX_INCLUDE`
//! (a directory, e.g. the `libucx-cu12==1.19.0` wheel's). A name younger than the header set
//! is left out (`rucx_bindings_c::since`), and where that version numbers or sizes something
//! differently from 1.19, its value must be the one `rucx_bindings_c::other_abi` records —
//! so the table of differences is checked too.

mod common;

use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The UCX header sets here: a label, the `-I` directory (`None`: the system's) and its
/// minor version (from `ucp_version.h`).
fn header_sets() -> Vec<(String, Option<PathBuf>, u32)> {
    let mut dirs: Vec<(String, Option<PathBuf>)> = Vec::new();
    if Path::new("/usr/include/ucp/api/ucp.h").exists() {
        dirs.push(("Debian's UCX".into(), None));
    }
    if let Ok(lib) = std::env::var("RUCX_UCX122_LIB") {
        let inc = Path::new(&lib).join("../include");
        if inc.join("ucp/api/ucp.h").exists() {
            dirs.push(("the UCX 1.22 wheel".into(), Some(inc)));
        }
    }
    if let Ok(inc) = std::env::var("RUCX_UCX_INCLUDE") {
        dirs.push((format!("RUCX_UCX_INCLUDE={inc}"), Some(PathBuf::from(inc))));
    }
    dirs.into_iter()
        .map(|(label, inc)| {
            let root = inc.clone().unwrap_or_else(|| PathBuf::from("/usr/include"));
            let v = std::fs::read_to_string(root.join("ucp/api/ucp_version.h"))
                .unwrap_or_else(|e| panic!("{label}: ucp_version.h: {e}"));
            let minor = v
                .lines()
                .find_map(|l| {
                    let mut w = l.split_whitespace();
                    (w.next() == Some("#define") && w.next() == Some("UCP_API_MINOR"))
                        .then(|| w.next()?.parse().ok())
                        .flatten()
                })
                .unwrap_or_else(|| panic!("{label}: no UCP_API_MINOR"));
            (label, inc, minor)
        })
        .collect()
}

/// Compiles the layout and constant program against one header set and returns every
/// mismatch, and how many values were compared.
fn check(label: &str, inc: Option<&Path>, minor: u32) -> (Vec<String>, usize) {
    let layouts: Vec<(String, usize)> = rucx_bindings_c::layouts()
        .iter()
        .map(|l| {
            let name = if l.field.is_empty() {
                l.ty.to_string()
            } else {
                format!("{}.{}", l.ty, l.field)
            };
            (name, l.value)
        })
        .filter(|(n, _)| rucx_bindings_c::since(n) <= minor)
        .collect();
    let consts: Vec<(&str, i64)> = rucx_bindings_c::constants()
        .into_iter()
        .filter(|(n, _)| rucx_bindings_c::since(n) <= minor)
        .collect();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <ucp/api/ucp.h>\nint main(void) {\n",
    );
    for (n, _) in &layouts {
        match n.split_once('.') {
            None => writeln!(c, "  printf(\"%zu\\n\", sizeof({n}));").unwrap(),
            Some((t, f)) => writeln!(c, "  printf(\"%zu\\n\", offsetof({t}, {f}));").unwrap(),
        }
    }
    for (n, _) in &consts {
        writeln!(c, "  printf(\"%lld\\n\", (long long)({n}));").unwrap();
    }
    c.push_str("  return 0;\n}\n");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("abi");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join(format!("abi_1_{minor}.c"));
    let exe = dir.join(format!("abi_1_{minor}"));
    std::fs::write(&src, &c).unwrap();
    let mut cc = Command::new("cc");
    cc.arg("-o").arg(&exe).arg(&src);
    if let Some(i) = inc {
        cc.arg(format!("-I{}", i.display()));
    }
    let out = cc.output().expect("run cc");
    assert!(
        out.status.success(),
        "cc against {label} (UCX 1.{minor}) failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let mut bad = Vec::new();
    let values = layouts
        .iter()
        .map(|(n, v)| (n.as_str(), *v as i64))
        .chain(consts.iter().copied());
    let mut compared = 0;
    for (n, ours) in values {
        let c_val: i64 = lines.next().unwrap().parse().unwrap();
        let want = rucx_bindings_c::other_abi(n, minor).unwrap_or(ours);
        if c_val != want {
            let why = if want == ours {
                String::new()
            } else {
                format!(" (recorded for 1.{minor}: {want})")
            };
            bad.push(format!(
                "{label} (UCX 1.{minor}): {n} = {c_val}, ours {ours}{why}"
            ));
        }
        compared += 1;
    }
    (bad, compared)
}

#[test]
fn layouts_and_constants_match_ucx_headers() {
    let sets = header_sets();
    if sets.is_empty() {
        return common::skip(
            "no UCX headers (Debian libucx-dev, or the UCX 1.22 wheel via RUCX_UCX122_LIB)",
        );
    }
    if Command::new("cc").arg("--version").output().is_err() {
        return common::skip("no C compiler");
    }
    let mut bad = Vec::new();
    for (label, inc, minor) in &sets {
        let (b, n) = check(label, inc.as_deref(), *minor);
        println!("{label} (UCX 1.{minor}): {n} sizes, offsets and constants compared");
        bad.extend(b);
    }
    assert!(bad.is_empty(), "ABI mismatches:\n{}", bad.join("\n"));
}
