//! Rucx's own header set (`bindings-c/include`: `ucp/api/ucp.h` and what it includes, plus
//! `rucx.h`) and pkg-config file (`rucx.pc.in`):
//!
//! * the C example (`contrib/c-example/pingpong.c`) and the extension test
//!   (`tests/c/layout_dt.c`) build with `pkg-config --cflags --libs rucx` and run over our
//!   library;
//! * the ABI program (every size, offset and constant of [`rucx_bindings_c::layouts`] and
//!   [`rucx_bindings_c::constants`]) compiled against our headers prints our Rust values;
//! * against every UCX header set installed (Debian's 1.13, the UCX 1.22 wheel beside
//!   `RUCX_UCX122_LIB`, a directory in `RUCX_UCX_INCLUDE`): every enumerator, `#define`
//!   constant and typedef size of our headers equals UCX's, less what is younger than that
//!   version and what it numbers differently from 1.19 (`rucx_bindings_c::since`,
//!   `other_abi`); every prototype we declare is compatible with UCX's declaration of the
//!   same function (the C compiler checks the redeclaration);
//! * every `ucp_*`/`ucpx_*` symbol the library exports is declared, and every declared
//!   function is exported.

mod common;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const DEBIAN_UCP_H: &str = "/usr/include/ucp/api/ucp.h";

fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn include_dir() -> PathBuf {
    crate_dir().join("include")
}

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-headers");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// A pkg-config directory for the freshly built library: `lib/libucp.so{,.0}` links and
/// `rucx.pc` made from `rucx.pc.in` (what `bindings-c/gen-pc.sh` does for a cargo profile).
fn pkg_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(make_pkg_dir).clone()
}

/// `common::libucp_dir` once per test binary: it re-creates the link, which must not happen
/// while another test's program is loading the library.
fn libucp_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(common::libucp_dir).clone()
}

fn make_pkg_dir() -> PathBuf {
    let libdir = libucp_dir();
    let so = std::fs::read_link(libdir.join("libucp.so.0")).unwrap();
    let dev = libdir.join("libucp.so");
    let _ = std::fs::remove_file(&dev);
    std::os::unix::fs::symlink(&so, &dev).unwrap();
    let dir = scratch().join("pkgconfig");
    std::fs::create_dir_all(&dir).unwrap();
    let pc = std::fs::read_to_string(crate_dir().join("rucx.pc.in"))
        .unwrap()
        .replace("@prefix@", &libdir.to_string_lossy())
        .replace("@libdir@", &libdir.to_string_lossy())
        .replace("@includedir@", &include_dir().to_string_lossy());
    std::fs::write(dir.join("rucx.pc"), pc).unwrap();
    dir
}

/// `pkg-config --cflags --libs rucx` (split into words).
fn rucx_flags() -> Vec<String> {
    let dir = pkg_dir();
    let out = Command::new("pkg-config")
        .args(["--cflags", "--libs", "rucx"])
        .env("PKG_CONFIG_PATH", &dir)
        .output()
        .expect("run pkg-config");
    assert!(
        out.status.success(),
        "pkg-config --cflags --libs rucx: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let flags: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    assert!(
        flags.iter().any(|f| f == "-lucp")
            && flags.contains(&format!("-I{}", include_dir().display())),
        "rucx.pc flags: {flags:?}"
    );
    flags
}

/// Compiles `src` to `exe` with `cc` and extra arguments; panics with the compiler's output.
fn cc(src: &Path, exe: &Path, args: &[String]) {
    let out = Command::new("cc")
        .args([
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror=implicit-function-declaration",
            "-o",
        ])
        .arg(exe)
        .arg(src)
        .args(args)
        .output()
        .expect("run cc");
    assert!(
        out.status.success(),
        "cc {} {args:?}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs `exe` with a time limit, `RUCX_ANNOUNCE=1` and without `LD_LIBRARY_PATH` (the
/// pkg-config flags carry an rpath to our library).
fn run_limited(exe: &Path, limit: Duration) -> (bool, String, String) {
    run_limited_env(exe, limit, &[])
}

/// [`run_limited`] with extra environment.
fn run_limited_env(exe: &Path, limit: Duration, env: &[(&str, &str)]) -> (bool, String, String) {
    let dir = scratch();
    let name = exe.file_name().unwrap().to_string_lossy().to_string();
    let (o, e) = (
        dir.join(format!("{name}.out")),
        dir.join(format!("{name}.err")),
    );
    let mut child = Command::new(exe)
        .env_remove("LD_LIBRARY_PATH")
        .env("RUCX_ANNOUNCE", "1")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .expect("spawn");
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
        std::thread::sleep(Duration::from_millis(20));
    };
    (
        ok,
        std::fs::read_to_string(o).unwrap_or_default(),
        std::fs::read_to_string(e).unwrap_or_default(),
    )
}

fn announcements(text: &str) -> usize {
    text.lines()
        .filter(|l| l.starts_with("[rucx] libucp.so.0 (Rucx "))
        .count()
}

/// The C example, built as its Makefile builds it (pkg-config), runs over our library.
#[test]
fn c_example_builds_with_pkg_config_and_runs() {
    if !have("cc") || !have("pkg-config") {
        return common::skip("cc or pkg-config not installed (Debian: gcc, pkgconf)");
    }
    let flags = rucx_flags();
    let exe = scratch().join("pingpong");
    let src = crate_dir().join("../contrib/c-example/pingpong.c");
    cc(&src, &exe, &flags);
    let (ok, out, err) = run_limited(&exe, Duration::from_secs(60));
    assert!(
        ok && out.contains("pingpong: OK"),
        "pingpong failed:\n{out}\n{err}"
    );
    assert_eq!(announcements(&err), 2, "both processes on Rucx:\n{err}");
    // With RUCX_STATS=1 each process prints its worker's counters when it destroys it.
    let (ok, out, err) = run_limited_env(&exe, Duration::from_secs(60), &[("RUCX_STATS", "1")]);
    assert!(ok && out.contains("pingpong: OK"), "{out}\n{err}");
    let stats: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("worker statistics:"))
        .collect();
    assert_eq!(stats.len(), 2, "one line per process:\n{err}");
    assert!(
        stats.iter().all(|l| l.contains("eager")),
        "the messages are counted:\n{err}"
    );
}

/// The GPU example (`contrib/c-example/gpu_pingpong.c`: device memory from `ucp_mem_map`
/// moved host to device, device to device and device to host) builds with pkg-config, and
/// runs: every byte checked where there is a GPU; without one, it must say it skipped
/// (its context reports no CUDA memory type).
#[test]
fn gpu_example_builds_and_runs_or_skips() {
    if !have("cc") || !have("pkg-config") {
        return common::skip("cc or pkg-config not installed (Debian: gcc, pkgconf)");
    }
    let exe = scratch().join("gpu_pingpong");
    cc(
        &crate_dir().join("../contrib/c-example/gpu_pingpong.c"),
        &exe,
        &rucx_flags(),
    );
    let (ok, out, err) = run_limited(&exe, Duration::from_secs(120));
    if out.contains("skipped") {
        return common::say_skipped(&format!(
            "gpu_pingpong: {}",
            out.lines().next().unwrap_or("")
        ));
    }
    assert!(
        ok && out.contains("gpu_pingpong: OK"),
        "gpu_pingpong failed:\n{out}\n{err}"
    );
}

/// The MPIX-style example over the stream-triggered queue exports
/// (`contrib/c-example/mpix_queue.c`): four processes in a ring, each iteration's sends and
/// receives enqueued, started and waited for as one batch, every element checked, then the
/// queue's counts and refusals of bad arguments.
#[test]
fn mpix_queue_example_runs_a_ring_through_enqueued_operations() {
    if !have("cc") || !have("pkg-config") {
        return common::skip("cc or pkg-config not installed (Debian: gcc, pkgconf)");
    }
    let exe = scratch().join("mpix_queue");
    cc(
        &crate_dir().join("../contrib/c-example/mpix_queue.c"),
        &exe,
        &rucx_flags(),
    );
    let (ok, out, err) = run_limited(&exe, Duration::from_secs(120));
    assert!(
        ok && out.contains("mpix_queue: OK"),
        "mpix_queue failed:\n{out}\n{err}"
    );
    assert_eq!(announcements(&err), 4, "every rank on Rucx:\n{err}");
}

/// The GPU layouts example (`contrib/c-example/gpu_layouts.c`: a vector and 3D faces
/// sent from device memory with `ucpx_dt_*` layouts, into host and into another layout in
/// device memory) builds, and runs where there is a GPU; without one it says it skipped.
#[test]
fn gpu_layouts_example_builds_and_runs_or_skips() {
    if !have("cc") || !have("pkg-config") {
        return common::skip("cc or pkg-config not installed (Debian: gcc, pkgconf)");
    }
    let exe = scratch().join("gpu_layouts");
    cc(
        &crate_dir().join("../contrib/c-example/gpu_layouts.c"),
        &exe,
        &rucx_flags(),
    );
    // The example's own steps, on host memory, everywhere.
    let (ok, out, err) = run_limited_env(
        &exe,
        Duration::from_secs(120),
        &[("GPU_LAYOUTS_ON_HOST", "1")],
    );
    assert!(
        ok && out.contains("gpu_layouts: OK"),
        "gpu_layouts on host memory:\n{out}\n{err}"
    );
    let (ok, out, err) = run_limited(&exe, Duration::from_secs(120));
    if out.contains("skipped") {
        return common::say_skipped(&format!(
            "gpu_layouts: {}",
            out.lines().next().unwrap_or("")
        ));
    }
    assert!(
        ok && out.contains("gpu_layouts: OK"),
        "gpu_layouts failed:\n{out}\n{err}"
    );
}

/// Tag schemes, the wrap-safe generator and channels from C (`tests/c/channels.c`): two
/// processes, 300 messages on a channel whose 3-bit counter wraps while the receiver lags,
/// every byte checked in order, completions by callback; a close cancelling a receive; a
/// receive ending with an error when its peer exits.
#[test]
fn tag_schemes_and_channels_from_c() {
    if !have("cc") || !have("pkg-config") {
        return common::skip("cc or pkg-config not installed (Debian: gcc, pkgconf)");
    }
    let exe = scratch().join("channels");
    cc(&crate_dir().join("tests/c/channels.c"), &exe, &rucx_flags());
    let (ok, out, err) = run_limited(&exe, Duration::from_secs(120));
    assert!(
        ok && out.contains("channels: OK"),
        "channels failed:\n{out}\n{err}"
    );
    assert_eq!(announcements(&err), 2, "both processes on Rucx:\n{err}");
}

/// `ucpx_dt_create_vector/indexed/subarray` from C: tag send/receive between layouts and
/// contiguous buffers (eager, rendezvous, count > 1), the `_nb` entry point, put/get with a
/// layout, and bad input.
#[test]
fn layout_datatypes_from_c() {
    if !have("cc") || !have("pkg-config") {
        return common::skip("cc or pkg-config not installed (Debian: gcc, pkgconf)");
    }
    let flags = rucx_flags();
    let exe = scratch().join("layout_dt");
    cc(&crate_dir().join("tests/c/layout_dt.c"), &exe, &flags);
    let (ok, out, err) = run_limited(&exe, Duration::from_secs(60));
    assert!(
        ok && out.contains("layout_dt: OK"),
        "layout_dt failed:\n{out}\n{err}"
    );
    assert_eq!(announcements(&err), 1, "{err}");
}

/// Memory from `ucp_mem_map(UCP_MEM_MAP_ALLOCATE)` between two processes: put, get, a
/// refused out-of-bounds put, and a rendezvous-sized tag message between allocated
/// buffers, every byte checked (`tests/c/mem_alloc.c`).
#[test]
fn allocated_memory_between_processes_from_c() {
    if !have("cc") || !have("pkg-config") {
        return common::skip("cc or pkg-config not installed (Debian: gcc, pkgconf)");
    }
    let flags = rucx_flags();
    let exe = scratch().join("mem_alloc");
    cc(&crate_dir().join("tests/c/mem_alloc.c"), &exe, &flags);
    let (ok, out, err) = run_limited(&exe, Duration::from_secs(60));
    assert!(
        ok && out.contains("mem_alloc: OK"),
        "mem_alloc failed:\n{out}\n{err}"
    );
    assert_eq!(announcements(&err), 2, "both processes on Rucx:\n{err}");
}

/// `ucs_log_dispatch` (UCXX's log macros): the message formatted with all its variadic
/// arguments, in UCX's layout with the component's name and the level; messages above
/// the component's level left out, `PRINT` always shown, one line per line of text.
#[test]
fn ucs_log_dispatch_formats_what_ucxx_logs() {
    if !have("cc") || !have("pkg-config") {
        return common::skip("cc or pkg-config not installed (Debian: gcc, pkgconf)");
    }
    let exe = scratch().join("log_dispatch");
    cc(
        &crate_dir().join("tests/c/log_dispatch.c"),
        &exe,
        &rucx_flags(),
    );
    let (ok, out, err) = run_limited(&exe, Duration::from_secs(30));
    assert!(ok && out.contains("log_dispatch: OK"), "{out}\n{err}");
    let warned: Vec<&str> = err.lines().filter(|l| l.contains("warned")).collect();
    assert_eq!(warned.len(), 1, "{err}");
    assert!(
        warned[0].contains("worker.cpp:42")
            && warned[0].contains("UCXX WARN")
            && warned[0].ends_with("warned 7 text 2.50 123456789012 9 beef z"),
        "{err}"
    );
    assert!(
        !err.contains("hidden"),
        "a DEBUG message above WARN was printed:\n{err}"
    );
    assert!(err.contains("shown always"), "{err}");
    assert!(
        err.lines().any(|l| l.ends_with("ERROR two"))
            && err.lines().any(|l| l.ends_with("ERROR lines")),
        "{err}"
    );
}

/// The ABI test's program, compiled against our headers, prints our Rust layout table.
#[test]
fn our_headers_match_the_layout_table() {
    if !have("cc") {
        return common::skip("no C compiler");
    }
    let layouts = rucx_bindings_c::layouts();
    let consts = rucx_bindings_c::constants();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <ucp/api/ucp.h>\n#include <rucx.h>\nint main(void) {\n",
    );
    for l in &layouts {
        if l.field.is_empty() {
            writeln!(c, "  printf(\"%zu\\n\", sizeof({}));", l.ty).unwrap();
        } else {
            writeln!(c, "  printf(\"%zu\\n\", offsetof({}, {}));", l.ty, l.field).unwrap();
        }
    }
    for (n, _) in &consts {
        writeln!(c, "  printf(\"%lld\\n\", (long long)({n}));").unwrap();
    }
    c.push_str("  return 0;\n}\n");
    let src = scratch().join("abi_ours.c");
    let exe = scratch().join("abi_ours");
    std::fs::write(&src, c).unwrap();
    cc(&src, &exe, &[format!("-I{}", include_dir().display())]);
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    let mut bad = Vec::new();
    for l in &layouts {
        let v: usize = lines.next().unwrap().parse().unwrap();
        if v != l.value {
            bad.push(format!(
                "{} {}: header {v}, ours {}",
                l.ty, l.field, l.value
            ));
        }
    }
    for (n, want) in &consts {
        let v: i64 = lines.next().unwrap().parse().unwrap();
        if v != *want {
            bad.push(format!("{n}: header {v}, ours {want}"));
        }
    }
    assert!(
        bad.is_empty(),
        "our headers disagree with the shim:\n{}",
        bad.join("\n")
    );
}

/// Our header files declaring the ucp API (not `rucx.h`).
fn ucp_headers() -> Vec<PathBuf> {
    let inc = include_dir();
    [
        "ucp/api/ucp.h",
        "ucp/api/ucp_def.h",
        "ucp/api/ucp_compat.h",
        "ucp/api/ucp_version.h",
        "ucs/type/status.h",
        "ucs/type/thread_mode.h",
        "ucs/type/cpu_set.h",
        "ucs/memory/memory_type.h",
        "ucs/config/types.h",
        "ucs/debug/log_def.h",
        "ucs/debug/debug.h",
        "ucs/sys/compiler_def.h",
        "ucs/datastruct/mpool.h",
        "ucm/api/ucm.h",
    ]
    .iter()
    .map(|p| inc.join(p))
    .collect()
}

fn strip_comments(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("/*") {
        out.push_str(&rest[..i]);
        match rest[i..].find("*/") {
            Some(j) => rest = &rest[i + j + 2..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}

/// Enumerators, argument-less `#define` constants and typedef names of a header.
fn symbols(text: &str) -> (Vec<String>, Vec<String>) {
    let text = strip_comments(text);
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut consts = Vec::new();
    let mut types = Vec::new();
    let mut in_enum = false;
    for line in text.lines() {
        let t = line.trim();
        if t.contains("enum") && t.ends_with('{') {
            in_enum = true;
            continue;
        }
        if let Some(rest) = t.strip_prefix('}') {
            let name = ident(rest.trim());
            // (`} cb;` closes a member union, not a type)
            if name.ends_with("_t") && rest.trim_end().ends_with(';') {
                types.push(name);
            }
            in_enum = false;
            continue;
        }
        if in_enum && t.starts_with("UC") {
            consts.push(ident(t));
        }
        if let Some(rest) = t.strip_prefix("#define ") {
            let name = ident(rest);
            let after = &rest[name.len()..];
            let value = after.trim();
            let attribute = value.starts_with("__attribute__");
            if name.starts_with("UC") && !after.starts_with('(') && !value.is_empty() && !attribute
            {
                consts.push(name);
            }
        }
        // One-line typedefs; an opaque `typedef struct x x_t;` has no size to compare.
        let opaque = t.starts_with("typedef struct") && !t.contains('*');
        if t.starts_with("typedef") && t.ends_with(';') && !t.contains('(') && !opaque {
            let last = t.trim_end_matches(';').split_whitespace().last().unwrap();
            types.push(ident(last.trim_start_matches('*')));
        }
    }
    (consts, types)
}

/// Function prototypes of a header, one normalized line each (no `static inline`).
fn prototypes(text: &str) -> Vec<(String, String)> {
    let text = strip_comments(text);
    // Preprocessor lines go, with the lines a trailing backslash continues them onto (a
    // macro's body may call a function).
    let mut directive = false;
    let code: String = text
        .lines()
        .filter(|l| {
            let keep = !directive && !l.trim_start().starts_with('#');
            directive = (directive || l.trim_start().starts_with('#')) && l.ends_with('\\');
            keep
        })
        .collect::<Vec<_>>()
        .join(" ");
    let mut v = Vec::new();
    for stmt in code.split(';') {
        let stmt = stmt.rsplit(['{', '}']).next().unwrap();
        let stmt = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
        if stmt.contains("typedef")
            || stmt.contains("static")
            || stmt.starts_with("return")
            || !stmt.ends_with(')')
        {
            continue;
        }
        let Some(open) = stmt.find('(') else { continue };
        let head = &stmt[..open];
        let name = head
            .split([' ', '*'])
            .rfind(|w| !w.is_empty())
            .unwrap_or("")
            .to_string();
        // (A name ending in `_t` is the return type of a function-pointer field.)
        if ["ucp_", "ucpx_", "ucs_", "ucm_"]
            .iter()
            .any(|p| name.starts_with(p))
            && !name.ends_with("_t")
        {
            v.push((name, format!("{stmt};")));
        }
    }
    v
}

/// The UCX header sets here: a label, the `-I` directory (`None`: the system's) and the
/// minor version its `ucp_version.h` says.
fn ucx_header_sets() -> Vec<(String, Option<PathBuf>, u32)> {
    let mut dirs: Vec<(String, Option<PathBuf>)> = Vec::new();
    if Path::new(DEBIAN_UCP_H).exists() {
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
            let v = std::fs::read_to_string(root.join("ucp/api/ucp_version.h")).unwrap();
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

/// Against every UCX header set installed, every constant and type of ours equals UCX's
/// (less what that version lacks or numbers differently from 1.19), and every prototype of
/// ours is a compatible redeclaration of UCX's.
#[test]
fn our_headers_agree_with_ucx_headers() {
    let sets = ucx_header_sets();
    if sets.is_empty() || !have("cc") {
        return common::skip(&format!(
            "no UCX headers ({DEBIAN_UCP_H}: Debian libucx-dev; or the UCX 1.22 wheel via \
             RUCX_UCX122_LIB) or no cc"
        ));
    }
    let mut consts = BTreeSet::new();
    let mut types = BTreeSet::new();
    let mut protos = Vec::new();
    for h in ucp_headers() {
        let text = std::fs::read_to_string(&h).unwrap();
        let (c, t) = symbols(&text);
        consts.extend(c);
        types.extend(t);
        protos.extend(prototypes(&text));
    }
    assert!(consts.len() > 150, "parsed only {} constants", consts.len());
    assert!(types.len() > 40, "parsed only {} types", types.len());
    assert!(protos.len() > 90, "parsed only {} prototypes", protos.len());
    // Our values, and the lines the program prints (name, then value).
    let program = |minor: u32| -> (String, Vec<String>) {
        let mut c = String::from(
            "#include <stdio.h>\n#include <ucp/api/ucp.h>\n#include <ucm/api/ucm.h>\n\
             #include <ucs/datastruct/mpool.h>\n#include <ucs/debug/log_def.h>\n\
             int main(void) {\n",
        );
        let mut names = Vec::new();
        for n in consts.iter().filter(|n| rucx_bindings_c::since(n) <= minor) {
            writeln!(c, "  printf(\"%lld\\n\", (long long)({n}));").unwrap();
            names.push(n.clone());
        }
        for t in types.iter().filter(|t| rucx_bindings_c::since(t) <= minor) {
            writeln!(c, "  printf(\"%zu\\n\", sizeof({t}));").unwrap();
            names.push(t.clone());
        }
        c.push_str("  return 0;\n}\n");
        (c, names)
    };
    let run = |src: &str, inc: Option<&Path>, tag: &str| -> Vec<i64> {
        let file = scratch().join(format!("consts_{tag}.c"));
        std::fs::write(&file, src).unwrap();
        let exe = scratch().join(format!("consts_{tag}"));
        let args: Vec<String> = inc.iter().map(|i| format!("-I{}", i.display())).collect();
        cc(&file, &exe, &args);
        let out = Command::new(&exe).output().unwrap();
        assert!(out.status.success());
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    };
    let mut diffs = Vec::new();
    for (label, inc, minor) in &sets {
        let (src, names) = program(*minor);
        let ours = run(&src, Some(&include_dir()), &format!("ours_1_{minor}"));
        let ucx = run(&src, inc.as_deref(), &format!("ucx_1_{minor}"));
        for ((n, o), u) in names.iter().zip(&ours).zip(&ucx) {
            let want = rucx_bindings_c::other_abi(n, *minor).unwrap_or(*o);
            if *u != want {
                diffs.push(format!(
                    "{label} (UCX 1.{minor}): {n} is {u}, ours {o} (expected {want})"
                ));
            }
        }

        // Prototypes: UCX's header, then ours again; the compiler rejects incompatible types.
        let mut p = String::from(
            "#include <ucp/api/ucp.h>\n#include <ucm/api/ucm.h>\n#include <ucs/debug/log_def.h>\n",
        );
        for (name, decl) in &protos {
            if rucx_bindings_c::since(name) <= *minor {
                p.push_str(decl);
                p.push('\n');
            }
        }
        let src = scratch().join(format!("protos_1_{minor}.c"));
        std::fs::write(&src, &p).unwrap();
        let out = Command::new("cc")
            .args(["-fsyntax-only", "-Wno-deprecated-declarations"])
            .args(inc.iter().map(|i| format!("-I{}", i.display())))
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "our prototypes conflict with {label}'s (UCX 1.{minor}):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        println!(
            "{} constants and types and {} prototypes agree with {label}'s (UCX 1.{minor})",
            names.len(),
            p.lines().count() - 3
        );
    }
    assert!(diffs.is_empty(), "headers differ:\n{}", diffs.join("\n"));
}

/// Every exported `ucp_*`/`ucpx_*`/`ucs_*`/`ucm_*` function is declared in our headers and
/// vice versa.
#[test]
fn exports_and_declarations_agree() {
    if !have("nm") {
        return common::skip("nm not installed (Debian binutils)");
    }
    let so = std::fs::read_link(libucp_dir().join("libucp.so.0")).unwrap();
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&so)
        .output()
        .unwrap();
    let exported: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let (_, kind, name) = (w.next()?, w.next()?, w.next()?);
            (kind == "T"
                && ["ucp_", "ucpx_", "ucs_", "ucm_"]
                    .iter()
                    .any(|p| name.starts_with(p)))
            .then(|| name.to_string())
        })
        .collect();
    let mut declared = BTreeSet::new();
    for h in ucp_headers()
        .into_iter()
        .chain([include_dir().join("rucx.h")])
    {
        let text = std::fs::read_to_string(&h).unwrap();
        declared.extend(prototypes(&text).into_iter().map(|(n, _)| n));
    }
    let undeclared: Vec<_> = exported.difference(&declared).collect();
    let missing: Vec<_> = declared.difference(&exported).collect();
    assert!(
        undeclared.is_empty() && missing.is_empty(),
        "exported but not declared: {undeclared:?}\ndeclared but not exported: {missing:?}"
    );
}
