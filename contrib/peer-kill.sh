#!/bin/sh
# The peer-kill matrix: every transport configuration (shared memory with get and with put
# rendezvous, tcp) x every kind of operation (eager, rendezvous, layouts, AM, put, get,
# atomics, stream) x TRIALS kills during the operation (default 100), alternating the
# killed side; each survivor must report an error within 2 s. Prints the worst time per
# cell. The test suite runs a sample of 100 trials across the cells.
set -eu
cd "$(dirname "$0")/.."
RUCX_KILL_TRIALS="${TRIALS:-100}" exec cargo test --release -p rucx-tests --test ucp_more \
  peer_killed_during_every_kind_of_operation -- --nocapture
