//! ABI conformance: a C program compiled against Debian's real `ucp.h` (libucx-dev 1.13)
//! prints `sizeof`/`offsetof` of every struct the shim reads or writes, and the values of
//! the enum constants it relies on; they must equal our `#[repr(C)]` side.

mod common;

use std::fmt::Write;
use std::path::Path;
use std::process::Command;

#[test]
fn layouts_and_constants_match_ucx_headers() {
    if !Path::new("/usr/include/ucp/api/ucp.h").exists() {
        return common::skip("/usr/include/ucp/api/ucp.h not installed (Debian libucx-dev)");
    }
    let layouts = rucx_bindings_c::layouts();
    let consts = rucx_bindings_c::constants();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <ucp/api/ucp.h>\nint main(void) {\n",
    );
    for l in &layouts {
        if l.field.is_empty() {
            writeln!(c, "  printf(\"{} - %zu\\n\", sizeof({}));", l.ty, l.ty).unwrap();
        } else {
            writeln!(
                c,
                "  printf(\"{t} {f} %zu\\n\", offsetof({t}, {f}));",
                t = l.ty,
                f = l.field
            )
            .unwrap();
        }
    }
    for (n, _) in &consts {
        writeln!(c, "  printf(\"const {n} %lld\\n\", (long long)({n}));").unwrap();
    }
    c.push_str("  return 0;\n}\n");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("abi");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("abi.c");
    let exe = dir.join("abi");
    std::fs::write(&src, &c).unwrap();
    let cc = Command::new("cc").arg("-o").arg(&exe).arg(&src).output();
    let cc = match cc {
        Ok(o) => o,
        Err(e) => {
            return common::skip(&format!("no C compiler ({e})"));
        }
    };
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let mut bad = Vec::new();
    for l in &layouts {
        let line = lines.next().unwrap();
        let c_val: usize = line.rsplit(' ').next().unwrap().parse().unwrap();
        if c_val != l.value {
            bad.push(format!("{line} (ours {})", l.value));
        }
    }
    for (n, v) in &consts {
        let line = lines.next().unwrap();
        let c_val: i64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        if c_val != *v {
            bad.push(format!("{n}: ucp.h {c_val}, ours {v}"));
        }
    }
    assert!(bad.is_empty(), "ABI mismatches:\n{}", bad.join("\n"));
    println!(
        "{} sizes/offsets and {} constants match ucp.h",
        layouts.len(),
        consts.len()
    );
}
