//! Shared helpers for Rucx's multi-process tests: a peer process driven by line commands
//! ([`peer`]), data patterns that the receiver checks ([`pattern`]), and the list of
//! transports to run each case over ([`transports`]).

pub mod pattern;
pub mod peer;
pub mod ucp_peer;

use ucs::Config;

/// Says that a case is skipped and why, on stderr past libtest's capture (`eprintln!` is
/// captured and shown only when a test fails, which would make a skip silent).
pub fn skipped(why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED: {why}");
}

/// The two-process transports available here, as (tl, device). Transports that cannot run
/// are printed with the reason so a skipped case is never silent.
pub fn transports() -> Vec<(String, String)> {
    let d = uct::discover(&Config::default());
    for a in &d.absent {
        skipped(&format!("transport {a}"));
    }
    let mut v: Vec<(String, String)> = Vec::new();
    for r in d.available {
        if r.tl == "self" {
            skipped(
                "self in two-process cases: it only reaches its own interface (covered in-process)",
            );
            continue;
        }
        // One device per transport is enough for conformance; prefer loopback for tcp.
        if let Some(existing) = v.iter_mut().find(|(tl, _)| tl == r.tl) {
            if r.device == "lo" {
                existing.1 = r.device.clone();
            }
            continue;
        }
        v.push((r.tl.to_string(), r.device.clone()));
    }
    v
}

/// Transports that carry active messages (everything but cma).
pub fn am_transports() -> Vec<(String, String)> {
    transports()
        .into_iter()
        .filter(|(tl, _)| tl != "cma")
        .collect()
}

/// Hex encoding for addresses on the command channel.
pub fn to_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if s == "-" {
        return Some(Vec::new());
    }
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}
