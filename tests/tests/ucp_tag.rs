//! `ucp` tag matching and its protocols between two real processes, over every transport
//! pairing the worker can choose: shared memory with CMA (`UCX_TLS=posix,cma`), the same
//! with the put-zcopy rendezvous, and tcp over loopback (`UCX_TLS=tcp`). Each case runs
//! `rucx-ucp-peer a <case>` against `rucx-ucp-peer b <case>`; the peers check every byte
//! and report `DONE` or `FAIL`.

use rucx_tests::ucp_peer::{kill_one, CONFIGS};

const PEER: &str = env!("CARGO_BIN_EXE_rucx-ucp-peer");

fn run_case(case: &str) {
    rucx_tests::ucp_peer::run_case(PEER, case);
}

#[test]
fn pingpong_every_size_class_0_to_64mib() {
    run_case("pingpong");
}

#[test]
fn stream_of_mixed_sizes_keeps_order() {
    run_case("stream");
}

#[test]
fn ten_thousand_outstanding_sends() {
    run_case("outstanding");
}

#[test]
fn unexpected_storm_with_probe_and_wildcards() {
    run_case("storm");
}

#[test]
fn cancel_and_truncation() {
    run_case("misc");
}

#[test]
fn iov_on_both_sides() {
    run_case("iov");
}

/// A peer killed mid-rendezvous: the survivor's operations end in an error within 2 s,
/// whichever side dies, over each transport configuration.
#[test]
fn peer_killed_mid_rendezvous_fails_the_survivor_quickly() {
    for &(name, tls, dev, scheme) in CONFIGS {
        for victim in ["a", "b"] {
            let t = kill_one(PEER, "tag", (tls, dev, scheme), victim);
            eprintln!("{name}: {victim} killed, survivor failed after {t:?}");
        }
    }
}
