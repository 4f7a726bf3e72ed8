#!/usr/bin/env bash
# The software cost of the small-message paths, Rucx beside UCX 1.22, in one go.
#
#   contrib/bench/inproc-pingpong.sh [-r RUNS] [-n ITERS] [-c CPU]
#
# Each program runs two workers in one process and one thread over shared memory
# (UCX_TLS=posix), with the same loop for both libraries, step for step:
#   tag    8-byte tag ping-pong: `ucp/examples/tag_pingpong.rs`, `ucx-tag-pingpong.c`
#   am     8-byte active-message ping-pong, answered from the handler:
#          `ucp/examples/am_pingpong.rs`, `ucx-am-pingpong.c`
#   empty  one progress call that finds nothing (ITERS x 10 calls):
#          `ucp/examples/empty_progress.rs`, `ucx-empty-progress.c`
# No step waits on another core, so the time per round trip (two sends, two receives, the
# progress calls) is the instruction and cache cost of the path alone: the part of the
# two-process latency that software can change. The empty poll is the length of a polling
# loop's turn: a message waits, on average, half of one to be seen. All run pinned to CPU
# (default 1), interleaved run by run; printed: every run, the medians, and Rucx / UCX
# (below 1.0: Rucx is cheaper).
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
for prog in tag-pingpong am-pingpong empty-progress; do
  cc -O2 -Wall -I"$root/include" "contrib/bench/ucx-$prog.c" -L"$root/lib" -lucp -lucs \
    -Wl,-rpath,"$root/lib" -o "$out/ucx-$prog"
done
cargo build --release -q -p ucp --example tag_pingpong --example am_pingpong --example empty_progress

# ucx_run PROGRAM ITERS / rucx_run EXAMPLE ITERS: the first number the program prints.
# (UCX warns on stdout of the Rucx-only variables it does not know, such as the empty
# poll's UCX_POSIX_POLL_BACKOFF; the warning would be read as the result.)
ucx_run() {
  UCX_WARN_UNUSED_ENV_VARS=n UCX_TLS=posix LD_LIBRARY_PATH="$root/lib" UCX_MODULE_DIR="$root/lib/ucx" \
    taskset -c "$cpu" "$out/ucx-$1" "$2" | awk '{print $1}'
}
rucx_run() {
  UCX_TLS=posix taskset -c "$cpu" "target/release/examples/$1" "$2" | awk '{print $1}'
}
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# case_ NAME RUCX_EXAMPLE UCX_PROGRAM ITERS UNIT: RUNS interleaved runs of each, the medians.
case_() {
  local name=$1 rex=$2 uprog=$3 n=$4 unit=$5 a b mr mu
  local -a r=() u=()
  for i in $(seq "$runs"); do
    a=$(rucx_run "$rex" "$n") b=$(ucx_run "$uprog" "$n")
    r+=("$a") u+=("$b")
    echo "$name run $i: rucx $a ns, ucx1.22 $b ns $unit"
  done
  mr=$(printf '%s\n' "${r[@]}" | median)
  mu=$(printf '%s\n' "${u[@]}" | median)
  printf '%s median: rucx %s ns, ucx1.22 %s ns %s; rucx/ucx1.22 %.2f\n' "$name" "$mr" "$mu" "$unit" \
    "$(awk -v a="$mr" -v b="$mu" 'BEGIN {print a / b}')"
}
case_ tag tag_pingpong tag-pingpong "$iters" "per round trip"
case_ am am_pingpong am-pingpong "$iters" "per round trip"
# The empty poll without the posix spin-wait backoff (UCX_POSIX_POLL_BACKOFF, docs/uct.md):
# past 16 empty polls in a row each one pauses (~30 ns here), which is a policy, not the
# length of the path; UCX has no such pause.
UCX_POSIX_POLL_BACKOFF=inf case_ empty empty_progress empty-progress "$((iters * 10))" "per call"
