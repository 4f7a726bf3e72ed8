//! The install a user points `--with-ucx` at (the top-level Makefile, docs/install.md):
//! `make install` of this test build into a fresh prefix, then, with nothing of the build
//! tree in sight,
//!   - the prefix's layout: one library file, every UCX library name a link to it, the
//!     headers, the pkg-config files with the prefix in them, the tools;
//!   - a C program (contrib/c-example/pingpong.c) built with only
//!     `pkg-config --cflags --libs ucx-ucp` runs over the installed library;
//!   - Debian's OpenMPI (`mpicc.openmpi`, `mpirun.openmpi`, pml ucx) runs a 2-rank program
//!     (bindings-c/mpi/p2p.c) with only the prefix's lib/ on `LD_LIBRARY_PATH`: both ranks
//!     announce Rucx, and every UCX-named library the loader initializes is the prefix's;
//!   - `make uninstall` leaves nothing it installed, and keeps a file of the user's.
//!
//! The install is of the dev build the suite made (`PROFILE=debug NO_BUILD=1`), not a
//! release build. Skips with a message when make, cc, pkg-config or OpenMPI is missing.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(tool))
        .find(|p| p.is_file())
}

/// Runs `c`, killed after `limit`; returns its output (stdout and stderr from files, so
/// that a chatty child never blocks on a pipe).
fn run(mut c: Command, what: &str, limit: Duration) -> Output {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-install");
    let (outp, errp) = (dir.join("cmd.out"), dir.join("cmd.err"));
    let mut child = c
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&outp).unwrap())
        .stderr(std::fs::File::create(&errp).unwrap())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let start = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = std::fs::read(&errp).unwrap_or_default();
    if start.elapsed() > limit {
        stderr.extend_from_slice(format!("\n(killed after {limit:?})").as_bytes());
    }
    Output {
        status,
        stdout: std::fs::read(&outp).unwrap_or_default(),
        stderr,
    }
}

/// `run`, which must succeed; returns stdout and stderr.
fn ok(c: Command, what: &str, limit: Duration) -> (String, String) {
    let o = run(c, what, limit);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    );
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout:\n{out}\nstderr:\n{err}",
        o.status
    );
    (out, err)
}

/// Every path under `dir`, relative to it, sorted.
fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, d: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            out.push(p.strip_prefix(base).unwrap().display().to_string());
            if p.is_dir() && !p.is_symlink() {
                walk(base, &p, out);
            }
        }
    }
    let mut v = Vec::new();
    if dir.exists() {
        walk(dir, dir, &mut v);
    }
    v.sort();
    v
}

/// The process ids that announced Rucx (`RUCX_ANNOUNCE=1`) in `text`.
fn announced_pids(text: &str) -> std::collections::BTreeSet<&str> {
    text.lines()
        .filter_map(|l| l.split("[rucx] libucp.so.0 (Rucx ").nth(1))
        .filter_map(|l| l.split("serving pid ").nth(1))
        .filter_map(|l| l.split(':').next())
        .collect()
}

#[test]
fn make_install_serves_pkg_config_and_openmpi_then_uninstalls() {
    let need = [
        "make",
        "cc",
        "pkg-config",
        "readelf",
        "mpicc.openmpi",
        "mpirun.openmpi",
    ];
    if let Some(missing) = need.iter().find(|t| which(t).is_none()) {
        common::skip(&format!(
            "{missing} not found (Debian: apt-get install make gcc pkgconf binutils \
             openmpi-bin libopenmpi-dev)"
        ));
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    // The build this test belongs to: target/<profile> (this executable is in its deps/),
    // holding the cdylib and (built for perftest's tests, or by `cargo build --workspace`)
    // the tools.
    let exe = std::env::current_exe().unwrap();
    let build_dir = exe.parent().unwrap().parent().unwrap();
    assert!(
        build_dir.join("librucx_bindings_c.so").is_file(),
        "librucx_bindings_c.so not in {}",
        build_dir.display()
    );
    let tools = ["rucx-perftest", "rucx-info"];
    let have_tools = tools.iter().all(|t| build_dir.join(t).is_file());
    assert!(
        have_tools || !common::in_ci(),
        "rucx-perftest/rucx-info not built in {}",
        build_dir.display()
    );
    if !have_tools {
        eprintln!("(rucx-perftest/rucx-info not built: installing without bin/)");
    }

    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rucx-install");
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    // A prefix that does not exist yet: the install makes it, the uninstall removes it.
    let prefix = scratch.join("prefix");
    let make = |target: &str| {
        let mut c = Command::new("make");
        // Nothing of an enclosing make (`make test`) reaches this one.
        for v in ["MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"] {
            c.env_remove(v);
        }
        c.arg("-C")
            .arg(root)
            .arg(target)
            .arg(format!("PREFIX={}", prefix.display()))
            .args(["PROFILE=debug", "NO_BUILD=1"])
            .arg(format!("BUILD_DIR={}", build_dir.display()));
        if !have_tools {
            c.arg("BINS=");
        }
        ok(c, &format!("make {target}"), Duration::from_secs(120))
    };

    // Installed twice: the second install replaces the first.
    make("install");
    make("install");
    let lib = prefix.join("lib");
    let real = std::fs::canonicalize(lib.join("libucp.so.0")).unwrap();
    assert!(
        real.parent() == Some(&*std::fs::canonicalize(&lib).unwrap())
            && real
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("librucx.so."),
        "libucp.so.0 resolves to {}",
        real.display()
    );
    for l in ["ucp", "ucs", "ucm", "uct", "ucs_signal"] {
        for name in [format!("lib{l}.so.0"), format!("lib{l}.so")] {
            assert_eq!(
                std::fs::canonicalize(lib.join(&name)).unwrap(),
                real,
                "{name} is not the library"
            );
        }
    }
    let (dynamic, _) = ok(
        {
            let mut c = Command::new("readelf");
            c.arg("-d").arg(&real);
            c
        },
        "readelf",
        Duration::from_secs(30),
    );
    assert!(
        dynamic.contains("Library soname: [libucp.so.0]"),
        "{dynamic}"
    );
    let headers = tree(&root.join("bindings-c/include"));
    assert_eq!(
        tree(&prefix.join("include")),
        headers,
        "include/ is not bindings-c/include"
    );
    if have_tools {
        for t in tools {
            assert!(prefix.join("bin").join(t).is_file(), "bin/{t} missing");
        }
        ok(
            {
                let mut c = Command::new(prefix.join("bin/rucx-info"));
                c.arg("-v");
                c
            },
            "rucx-info -v",
            Duration::from_secs(30),
        );
    }

    // pkg-config: UCX's module names, describing the prefix.
    let pc = prefix.join("lib/pkgconfig");
    let pkg_config = |args: &[&str]| {
        let mut c = Command::new("pkg-config");
        c.args(args).env("PKG_CONFIG_PATH", &pc);
        ok(c, &format!("pkg-config {args:?}"), Duration::from_secs(30)).0
    };
    for m in ["ucx", "ucx-ucp", "ucx-uct", "ucx-ucs", "rucx"] {
        assert!(pc.join(format!("{m}.pc")).is_file(), "{m}.pc missing");
    }
    assert_eq!(
        pkg_config(&["--variable=prefix", "ucx"]).trim(),
        prefix.display().to_string()
    );
    let flags = pkg_config(&["--cflags", "--libs", "ucx-ucp"]);
    assert!(
        flags.contains(&format!("-I{}/include", prefix.display()))
            && flags.contains(&format!("-L{}/lib", prefix.display()))
            && flags.contains("-lucp"),
        "pkg-config ucx-ucp: {flags}"
    );

    // A C program built with only those flags, run with no LD_LIBRARY_PATH: it finds the
    // prefix's libucp.so.0 through the rpath ucx.pc gives it.
    let pingpong = scratch.join("pingpong");
    let mut cc = Command::new("cc");
    cc.args(["-O2", "-Wall", "-o"])
        .arg(&pingpong)
        .arg(root.join("contrib/c-example/pingpong.c"))
        .args(flags.split_whitespace());
    ok(
        cc,
        "cc pingpong.c $(pkg-config ucx-ucp)",
        Duration::from_secs(60),
    );
    let (needed, _) = ok(
        {
            let mut c = Command::new("readelf");
            c.arg("-d").arg(&pingpong);
            c
        },
        "readelf",
        Duration::from_secs(30),
    );
    let ucx_needed: Vec<&str> = needed
        .lines()
        .filter(|l| l.contains("NEEDED") && l.contains("libuc"))
        .collect();
    assert!(
        ucx_needed.len() == 1 && ucx_needed[0].contains("[libucp.so.0]"),
        "pingpong needs {ucx_needed:?}"
    );
    let mut c = Command::new(&pingpong);
    c.arg("20")
        .env_remove("LD_LIBRARY_PATH")
        .env("RUCX_ANNOUNCE", "1");
    let (out, err) = ok(c, "pingpong", Duration::from_secs(60));
    assert!(out.contains("pingpong: OK"), "pingpong:\n{out}\n{err}");
    assert!(
        !announced_pids(&err).is_empty(),
        "pingpong did not run over Rucx:\n{err}"
    );

    // Debian's OpenMPI, built against UCX 1.13, over the prefix alone.
    let p2p = scratch.join("p2p");
    let ld_trace = scratch.join("ld-trace");
    let mut c = Command::new("mpicc.openmpi");
    c.args(["-O2", "-Wall", "-o"])
        .arg(&p2p)
        .arg(root.join("bindings-c/mpi/p2p.c"));
    ok(c, "mpicc.openmpi p2p.c", Duration::from_secs(60));
    let mut c = Command::new("mpirun.openmpi");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np", "2"])
        .args(["--mca", "plm", "isolated", "--mca", "btl", "self"])
        .args(["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any"])
        .args(["--mca", "pml_ucx_devices", "any"])
        .args([
            "-x",
            "LD_LIBRARY_PATH",
            "-x",
            "RUCX_ANNOUNCE",
            "-x",
            "LD_DEBUG",
            "-x",
            "LD_DEBUG_OUTPUT",
        ])
        .arg(&p2p)
        .env("LD_LIBRARY_PATH", &lib)
        .env("RUCX_ANNOUNCE", "1")
        .env("LD_DEBUG", "libs")
        // The loader's trace goes to files (ld-trace.<pid>), not to stderr: CI once found
        // one rank's announcement missing among its many lines there (mpirun forwards each
        // rank's output in chunks, which may split a line around the other rank's).
        .env("LD_DEBUG_OUTPUT", &ld_trace)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
    let (out, err) = ok(c, "mpirun.openmpi -np 2 p2p", Duration::from_secs(120));
    assert!(out.contains("p2p: OK"), "p2p:\n{out}\n{err}");
    let pids = announced_pids(&err);
    assert_eq!(
        pids.len(),
        2,
        "expected 2 ranks on Rucx, got {pids:?}:\n{err}"
    );
    let mut trace = String::new();
    for e in std::fs::read_dir(&scratch).unwrap() {
        let e = e.unwrap();
        if e.file_name().to_string_lossy().starts_with("ld-trace.") {
            trace.push_str(&std::fs::read_to_string(e.path()).unwrap());
        }
    }
    let inits: Vec<&str> = trace
        .lines()
        .filter(|l| l.contains("calling init:") && l.contains("/libuc"))
        .collect();
    assert!(!inits.is_empty(), "no UCX-named library initialized?");
    let lib_s = lib.display().to_string();
    let foreign: Vec<&&str> = inits.iter().filter(|l| !l.contains(&lib_s)).collect();
    assert!(
        foreign.is_empty(),
        "UCX libraries loaded from outside the prefix:\n{foreign:#?}"
    );

    // Uninstall: nothing installed is left; a file of the user's stays, with its directory.
    std::fs::write(lib.join("user-file"), "mine").unwrap();
    make("uninstall");
    assert_eq!(
        tree(&prefix),
        ["lib", "lib/user-file"],
        "left in the prefix"
    );
    std::fs::remove_file(lib.join("user-file")).unwrap();
    std::fs::remove_dir(&lib).unwrap();
    std::fs::remove_dir(&prefix).unwrap();
    eprintln!(
        "installed, ran pingpong and OpenMPI p2p ({} UCX-named library initializations, all \
         from the prefix), uninstalled",
        inits.len()
    );
}
