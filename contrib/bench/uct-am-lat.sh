#!/usr/bin/env bash
# 8-byte active-message round trip between two processes, Rucx beside UCX, in one go.
#
#   contrib/bench/uct-am-lat.sh [-n ITERS] [-r RUNS] [-s SIZE] [TL...]     (default: posix tcp)
#
# For each transport it runs `rucx-perftest -t am_lat` and UCX 1.22's `ucx_perftest -t
# am_lat` (and Debian's UCX 1.13.1 when installed) with the same arguments: server pinned to
# CPU 0, client to CPU 1. Each pair is run RUNS times, interleaved (Rucx, UCX 1.22, UCX
# 1.13, Rucx, ...), so a change in the machine's state hits all of them alike. Reported:
# the median and the best of the runs' 50th-percentile one-way latencies, and the ratios
# Rucx / UCX 1.22 (below 1.0 means Rucx is faster), and "fast": the median over the runs
# made while the machine was in its fast state. A shared virtual machine's cross-core
# latency sometimes jumps 3-4x for a whole run, for UCX and Rucx alike; "fast" leaves out
# runs slower than twice the best run of Rucx or UCX 1.22.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=contrib/bench/record.sh
source contrib/bench/record.sh
iters=200000 runs=7 size=8
while getopts "n:r:s:" o; do
  case $o in n) iters=$OPTARG ;; r) runs=$OPTARG ;; s) size=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
tls=("${@:-posix}")
[ $# -eq 0 ] && tls=(posix tcp)

# shellcheck source=contrib/bench/ucx-env.sh
source contrib/bench/ucx-env.sh
cargo build --release -q -p rucx-perftest --bin rucx-perftest
RUCX=target/release/rucx-perftest
port=$((20000 + RANDOM % 20000))

dev_of() { case $1 in tcp) echo lo ;; *) echo memory ;; esac; }

# run_pair BIN TL: prints the 50%ile one-way latency in µs of one run.
run_pair() {
  local bin=$1 tl=$2 dev out
  dev=$(dev_of "$tl")
  port=$((port + 1))
  "$bin" -p "$port" -c 0 -x "$tl" -d "$dev" >/dev/null 2>&1 &
  local spid=$!
  for _ in $(seq 100); do ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.05; done
  out=$("$bin" 127.0.0.1 -p "$port" -c 1 -t am_lat -x "$tl" -d "$dev" -s "$size" -n "$iters" -w 10000 2>&1 | grep '^Final:' || true)
  wait "$spid" 2>/dev/null || true
  [ -n "$out" ] || { echo "nan"; return; }
  awk '{print $3}' <<<"$out"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-6s %5s %-6s %9s %11s %11s %9s\n' tl size stat "rucx(us)" "ucx1.22(us)" "ucx1.13(us)" "rucx/1.22"
for tl in "${tls[@]}"; do
  r=() u=() d=()
  for _ in $(seq "$runs"); do
    r+=("$(run_pair "$RUCX" "$tl")")
    u+=("$(run_pair "$UCX122_PERFTEST" "$tl")")
    if [ -x "${UCX113_PERFTEST:-}" ]; then d+=("$(run_pair "$UCX113_PERFTEST" "$tl")"); fi
  done
  best() { sort -g | head -1; }
  # The median over runs in the machine's fast state: runs slower than twice the best run of
  # any of the programs are left out (the VM's slow state hits every program alike).
  floor=$(printf '%s\n' "${r[@]}" "${u[@]}" | best)
  fast() { awk -v f="$floor" '$1 <= 2 * f' | median; }
  for stat in median best fast; do
    rm=$(printf '%s\n' "${r[@]}" | $stat)
    um=$(printf '%s\n' "${u[@]}" | $stat)
    dm=$( [ ${#d[@]} -gt 0 ] && printf '%s\n' "${d[@]}" | $stat || echo "-")
    ratio=$(awk -v a="$rm" -v b="$um" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }')
    printf '%-6s %5s %-6s %9s %11s %11s %9s\n' "$tl" "$size" "$stat" "$rm" "$um" "$dm" "$ratio"
    if [ "$stat" = median ]; then
      record host-p2p "$tl am_lat $(record_size "$size")" "$rm" "$um" "$ratio" \
        "runs: Rucx $(record_range "${r[@]}"), UCX 1.22 $(record_range "${u[@]}")" µs "UCX 1.22" \
        "UCT layer alone; medians of $runs interleaved runs; UCX 1.13: $dm"
    fi
  done
  echo "  runs: rucx ${r[*]} | ucx1.22 ${u[*]} | ucx1.13 ${d[*]:-}" >&2
done
