#!/usr/bin/env bash
# The software cost of the 8-byte tag path, Rucx beside UCX 1.22, in one go.
#
#   contrib/bench/inproc-pingpong.sh [-r RUNS] [-n ITERS] [-c CPU]
#
# Each program runs two workers in one process and one thread, ping-ponging 8-byte tag
# messages over shared memory (UCX_TLS=posix): `ucp/examples/tag_pingpong.rs` for Rucx,
# `contrib/bench/ucx-tag-pingpong.c` (the same loop, step for step, built here against the
# UCX 1.22 wheel's headers) for UCX. No step waits on another core, so the time per round
# trip (two sends, two receives, the progress calls) is the instruction and cache cost of
# the tag path alone: the part of the two-process `tag_lat` that software can change. Both
# run pinned to CPU (default 1), interleaved run by run; printed: every run, the medians,
# and Rucx / UCX (below 1.0: Rucx is cheaper).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=5 iters=2000000 cpu=1
while getopts "r:n:c:" o; do
  case $o in r) runs=$OPTARG ;; n) iters=$OPTARG ;; c) cpu=$OPTARG ;; *) exit 2 ;; esac
done

# shellcheck source=contrib/bench/ucx-env.sh
source contrib/bench/ucx-env.sh
# The wheel's root, as the wrapper ucx-env.sh generated names it.
root="$(sed -n 's/^D=//p' "$UCX122_PERFTEST")"
[ -f "$root/include/ucp/api/ucp.h" ] || { echo "inproc-pingpong.sh: no ucp.h under $root/include" >&2; exit 1; }
out="target/bench"
mkdir -p "$out"
cc -O2 -Wall -I"$root/include" contrib/bench/ucx-tag-pingpong.c -L"$root/lib" -lucp -lucs \
  -Wl,-rpath,"$root/lib" -o "$out/ucx-tag-pingpong"
cargo build --release -q -p ucp --example tag_pingpong

ucx_run() {
  UCX_TLS=posix LD_LIBRARY_PATH="$root/lib" UCX_MODULE_DIR="$root/lib/ucx" \
    taskset -c "$cpu" "$out/ucx-tag-pingpong" "$iters" | awk '{print $1}'
}
rucx_run() {
  UCX_TLS=posix taskset -c "$cpu" target/release/examples/tag_pingpong "$iters" | awk '{print $1}'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

r=() u=()
for i in $(seq "$runs"); do
  a=$(rucx_run) b=$(ucx_run)
  r+=("$a") u+=("$b")
  echo "run $i: rucx $a ns, ucx1.22 $b ns per round trip"
done
mr=$(printf '%s\n' "${r[@]}" | median)
mu=$(printf '%s\n' "${u[@]}" | median)
printf 'median: rucx %s ns, ucx1.22 %s ns per round trip; rucx/ucx1.22 %.2f\n' "$mr" "$mu" \
  "$(awk -v a="$mr" -v b="$mu" 'BEGIN {print a / b}')"
