#!/bin/sh
# The long soak: 8 processes all to all, every kind of traffic at once, every message
# checked; the live heap, mappings and descriptors must be flat between the quiet point at
# 10% of the traffic and the end. PER=35000 is about 10 million messages in all.
set -eu
cd "$(dirname "$0")/.."
cargo build --release -p rucx-tests --bin rucx-soak
exec target/release/rucx-soak --procs "${PROCS:-8}" --per "${PER:-35000}" --warm-percent "${WARM:-10}"
