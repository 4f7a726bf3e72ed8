#!/usr/bin/env bash
# Endpoint scale: contrib/bench/scale.c, the same program over Rucx's
# libucp.so.0, Debian's UCX 1.13 and UCX 1.22 (the wheel, contrib/bench/ucx-env.sh), in
# alternating rounds. A parent connects 1, 16, 64 and 256 endpoints to one child worker;
# at each count, the 8-byte ping-pong latency over the first endpoint, and the resident
# memory each added endpoint cost. Prints the medians over ROUNDS (default 3) runs.
#
#   bash contrib/bench/scale.sh [-r ROUNDS]
set -euo pipefail
rounds=3
while getopts "r:" o; do
  case $o in r) rounds=$OPTARG ;; *) exit 2 ;; esac
done
cd "$(dirname "$0")/../.."
cargo build --release -q -p rucx-bindings-c
work=$(mktemp -d /tmp/rucx-scale.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lib"
ln -sf "$PWD/target/release/librucx_bindings_c.so" "$work/lib/libucp.so.0"
cc -O2 -Wall -Ibindings-c/include -o "$work/scale" contrib/bench/scale.c -L"$work/lib" -l:libucp.so.0
libs=(rucx ucx113)
d=${RUCX_UCX_DIR:-$HOME/.cache/rucx/ucx-1.22}/libucx
if [ -d "$d/lib" ]; then libs+=(ucx122); fi
run() {
  case $1 in
    rucx) LD_LIBRARY_PATH="$work/lib" UCX_TLS=posix,cma,self "$work/scale" ;;
    ucx113) LD_LIBRARY_PATH= UCX_TLS=posix,cma,self "$work/scale" ;;
    ucx122) LD_LIBRARY_PATH="$d/lib" UCX_MODULE_DIR="$d/lib/ucx" UCX_TLS=posix,cma,self \
      "$work/scale" ;;
  esac
}
for r in $(seq "$rounds"); do
  for l in "${libs[@]}"; do
    run "$l" | sed "s/^/$l $r /" >>"$work/all"
  done
done
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# Columns of $work/all: lib round "eps" N "lat_us" L "rss_kib" R "per_ep_bytes" B.
printf '%-7s %5s %10s %14s %18s\n' lib eps lat_us bytes_per_ep 'lat(N)/lat(1)'
for l in "${libs[@]}"; do
  for n in 1 16 64 256; do
    lat=$(awk -v l="$l" -v n="$n" '$1==l && $4==n {print $6}' "$work/all" | median)
    mem=$(awk -v l="$l" -v n="$n" '$1==l && $4==n {print $10}' "$work/all" | median)
    # Flatness within each run (runs differ from each other more than counts do).
    rel=$(awk -v l="$l" -v n="$n" '$1==l && $4==1 {b[$2]=$6} $1==l && $4==n {v[$2]=$6}
      END {for (r in v) if (b[r] > 0) print v[r] / b[r]}' "$work/all" | median)
    all=$(awk -v l="$l" -v n="$n" '$1==l && $4==n {printf "%s ", $6}' "$work/all")
    printf '%-7s %5s %10s %14s %18.3f   (lat: %s)\n' "$l" "$n" "$lat" "$mem" "$rel" "$all"
  done
done
