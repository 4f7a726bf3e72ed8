#!/usr/bin/env bash
# Noncontiguous tag ping-pong beside UCX, in one go: `-D iov,iov` with
# gaps between the entries, as `ucx_perftest -s <list> -i <gap>` describes them, and the
# contiguous message of the same size for the "within 1.2x of our contiguous" check.
#
#   contrib/bench/ucp-iov.sh [-r RUNS]
#
# Cases: 128 x 1 KiB entries with 1 KiB gaps; 16384 x 128 B entries with 128 B gaps; 2 MiB
# contiguous. UCX_TLS=posix,cma for both programs; server on CPU 0, client on CPU 1; runs
# interleaved (Rucx, UCX 1.22, UCX 1.13, ...). Reported: the median of the runs'
# 50th-percentile one-way latencies, in µs, and Rucx / UCX 1.22.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=contrib/bench/record.sh
source contrib/bench/record.sh
runs=5
while getopts "r:" o; do
  case $o in r) runs=$OPTARG ;; *) exit 2 ;; esac
done
# shellcheck source=contrib/bench/ucx-env.sh
source contrib/bench/ucx-env.sh
cargo build --release -q -p rucx-perftest
RUCX=target/release/rucx-perftest
export UCX_TLS=posix,cma
port=$((20000 + RANDOM % 20000))
list() { local n=$1 s=$2; printf "%s" "$s"; for _ in $(seq 2 "$n"); do printf ",%s" "$s"; done; }

run() {
  local bin=$1; shift
  port=$((port + 1))
  "$bin" -p "$port" -c 0 >/dev/null 2>&1 &
  local spid=$!
  for _ in $(seq 100); do ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.05; done
  local out
  out=$("$bin" 127.0.0.1 -p "$port" -c 1 -t tag_lat "$@" 2>&1 | grep '^Final:' || true)
  wait "$spid" 2>/dev/null || true
  [ -n "$out" ] && awk '{print $3}' <<<"$out" || echo nan
}
median() { awk '$1 != "nan"' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-28s %10s %10s %10s %9s\n' case "rucx(us)" "ucx1.22" "ucx1.13" "rucx/1.22"
while IFS='|' read -r name args what; do
  # shellcheck disable=SC2206
  a=($args)
  r=() u=() d=()
  for _ in $(seq "$runs"); do
    r+=("$(run "$RUCX" "${a[@]}")")
    u+=("$(run "$UCX122_PERFTEST" "${a[@]}")")
    d+=("$(run "$UCX113_PERFTEST" "${a[@]}")")
  done
  rm=$(printf '%s\n' "${r[@]}" | median)
  um=$(printf '%s\n' "${u[@]}" | median)
  dm=$(printf '%s\n' "${d[@]}" | median)
  ratio=$(awk -v a="$rm" -v b="$um" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "nan" }')
  printf '%-28s %10s %10s %10s %9s\n' "$name" "$rm" "$um" "$dm" "$ratio"
  record datatypes "$what" "$rm" "$um" "$ratio" \
    "runs: Rucx $(record_range "${r[@]}"), UCX 1.22 $(record_range "${u[@]}")" µs "UCX 1.22" \
    "medians of $runs interleaved runs; UCX 1.13: $dm"
  echo "  runs: rucx ${r[*]} | ucx1.22 ${u[*]} | ucx1.13 ${d[*]}" >&2
done <<EOF2
iov 128 x 1K, 1K gaps|-D iov,iov -s $(list 128 1024) -i 1024 -n 20000 -w 1000|iov 128 × 1 KiB, 1 KiB gaps
iov 16384 x 128, 128 gaps|-D iov,iov -s $(list 16384 128) -i 128 -n 2000 -w 100|iov 16384 × 128 B, 128 B gaps
contig 2M|-s 2097152 -n 2000 -w 100|contiguous 2 MiB
EOF2
