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
    if !v.iter().any(|(tl, _)| tl == "rc_verbs") {
        // No HCA here: rc_verbs runs on the software HCA model, which is a model of an HCA
        // and is opened only by name (`open_iface`), never discovered unless configured.
        skipped("rc_verbs on an HCA: none here; its cases run on the software HCA model");
        v.push((
            "rc_verbs".to_string(),
            uct::tl::rc_verbs::MODEL_DEVICE.to_string(),
        ));
    }
    v
}

/// Opens transport `tl` on `dev` as the two-process tests do: by discovery, or for
/// `rc_verbs` on the software HCA model, opened directly (discovery offers the model only
/// with `RUCX_SOFTHCA=1`).
pub fn open_iface(tl: &str, dev: &str, cfg: &Config) -> Result<Box<dyn uct::Iface>, String> {
    if tl == "rc_verbs" && dev == uct::tl::rc_verbs::MODEL_DEVICE {
        return uct::tl::rc_verbs::RcIface::open(cfg, dev)
            .map(|i| Box::new(i) as Box<dyn uct::Iface>)
            .map_err(|e| e.to_string());
    }
    uct::component::open_by_name(tl, Some(dev), cfg).map_err(|e| e.to_string())
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
