//! Finding the built `libucp.so.0` for tests that run real consumers.

use std::path::PathBuf;

/// A directory holding `libucp.so.0` → our cdylib, for `LD_LIBRARY_PATH`.
#[allow(dead_code)]
pub fn libucp_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // Integration tests live in target/<profile>/deps; the cdylib is built next to them
    // (and uplifted to target/<profile>).
    let deps = exe.parent().expect("deps dir").to_path_buf();
    let candidates = [
        deps.join("librucx_bindings_c.so"),
        deps.parent().unwrap().join("librucx_bindings_c.so"),
    ];
    let so = candidates
        .iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("librucx_bindings_c.so not found in {candidates:?}"))
        .clone();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rucx-libucp");
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("libucp.so.0");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&so, &link).unwrap();
    dir
}

/// A directory where every UCX library name a consumer may load — `libucp.so.0`,
/// `libucs.so.0`, `libucm.so.0`, `libuct.so.0`, `libucs_signal.so.0`, and the
/// unversioned names Python's `libucx.load_library()` opens — is our cdylib: with it first on
/// `LD_LIBRARY_PATH`, a program loads no UCX library at all (UCX's libucs would otherwise
/// come in beside ours for `ucs_status_string`).
#[allow(dead_code)]
pub fn rucx_only_dir() -> PathBuf {
    let so = std::fs::read_link(libucp_dir().join("libucp.so.0")).expect("libucp link");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("rucx-only");
    std::fs::create_dir_all(&dir).unwrap();
    for lib in [
        "libucp.so.0",
        "libucs.so.0",
        "libucm.so.0",
        "libuct.so.0",
        "libucs_signal.so.0",
        "libucp.so",
        "libucs.so",
        "libucm.so",
        "libuct.so",
        "libucs_signal.so",
    ] {
        let link = dir.join(lib);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&so, &link).unwrap();
    }
    dir
}

/// A TCP port free right now.
#[allow(dead_code)]
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Whether this run is CI's (`.ci/run` sets `RUCX_CI=1`): there, a tool a test needs must be
/// present, and a missing one fails the test instead of skipping it.
#[allow(dead_code)]
pub fn in_ci() -> bool {
    std::env::var("RUCX_CI").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A test that cannot run here for `why` (a tool `contrib/test-all.sh` installs is
/// missing): fails in CI, otherwise says "SKIPPED" and why, past libtest's capture.
#[allow(dead_code)]
pub fn skip(why: &str) {
    assert!(!in_ci(), "RUCX_CI is set, so this must run, but: {why}");
    say_skipped(why);
}

/// A case that cannot run for want of hardware no CI machine has (a GPU): says
/// "SKIPPED" and why, past libtest's capture, everywhere.
#[allow(dead_code)]
pub fn say_skipped(why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}
