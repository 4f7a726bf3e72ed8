#!/usr/bin/env bash
# Debian's ucx_perftest -t tag_lat, the same binary over Debian's UCX 1.13.1 libucp and over
# Rucx's libucp.so.0 (release build), in paired rounds (UCX, then Rucx, each round), server on
# CPU 0 and client on CPU 1. Prints each round's one-way latencies, the medians and their
# ratio Rucx / UCX (below 1.0: Rucx is faster).
#
#   contrib/bench/shim-lat.sh [-r ROUNDS] [-s SIZE] [-n ITERS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=9 size=8 iters=200000
while getopts "r:s:n:" o; do
  case $o in r) rounds=$OPTARG ;; s) size=$OPTARG ;; n) iters=$OPTARG ;; *) exit 2 ;; esac
done
cargo build --release -q -p rucx-bindings-c
lib=$(mktemp -d /tmp/rucx-shim-lat.XXXXXX)
trap 'rm -rf "$lib"' EXIT
ln -sf "$PWD/target/release/librucx_bindings_c.so" "$lib/libucp.so.0"

# one LIBDIR: one run, prints the overall average one-way latency (us)
one() {
  local env=(env) port=$((20000 + RANDOM % 20000)) out=""
  [ -n "$1" ] && env+=(LD_LIBRARY_PATH="$1")
  "${env[@]}" taskset -c 0 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$!
  for _ in $(seq 50); do
    sleep 0.2
    if out=$("${env[@]}" taskset -c 1 ucx_perftest -p "$port" -t tag_lat -s "$size" \
               -n "$iters" -f 127.0.0.1 2>/dev/null); then break; fi
  done
  wait "$srv" || true
  echo "$out" | awk '/^ +[0-9]+ +[0-9]/ { v=$4 } END { print v }'
}

printf "%-6s %10s %10s %8s\n" round "UCX 1.13" Rucx ratio
u=() r=()
for i in $(seq "$rounds"); do
  a=$(one "") b=$(one "$lib")
  u+=("$a") r+=("$b")
  printf "%-6s %10s %10s %8.3f\n" "$i" "$a" "$b" "$(echo "$b / $a" | bc -l)"
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
mu=$(med "${u[@]}") mr=$(med "${r[@]}")
printf "median %10s %10s %8.3f   (tag_lat %s B, one-way us)\n" "$mu" "$mr" "$(echo "$mr / $mu" | bc -l)" "$size"
