#!/usr/bin/env bash
# OpenMPI 4.1.4 (Debian, pml ucx) ping-pong and Debian's ucx_perftest tag_lat, each run once
# over UCX 1.13.1's libucp (Debian's) and once over Rucx's libucp.so.0 (release build): the
# same binaries, only LD_LIBRARY_PATH differs. Prints one-way latency in µs and the ratio
# Rucx / UCX (below 1.0: Rucx is faster).
#
#   contrib/bench/ompi-pingpong.sh [-r RUNS] [-s SCALE]
#
# RUNS (default 3): each case is run RUNS times, interleaved (UCX, Rucx, UCX, ...); the
# median and the best run are printed (a shared virtual machine's cross-core latency jumps
# for whole runs, for both libraries alike). SCALE (default 1) multiplies the ping-pong
# iteration counts.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=3 scale=1
while getopts "r:s:" o; do
  case $o in r) runs=$OPTARG ;; s) scale=$OPTARG ;; *) exit 2 ;; esac
done

cargo build --release -q -p rucx-bindings-c
work=$(mktemp -d /tmp/rucx-ompi-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lib"
ln -sf "$PWD/target/release/librucx_bindings_c.so" "$work/lib/libucp.so.0"
mpicc -O2 -o "$work/pingpong" contrib/bench/ompi-pingpong.c

mpi_flags=(--allow-run-as-root --oversubscribe -np 2 --bind-to core
           --mca plm isolated --mca btl self
           --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)

# run_mpi LIB: one ping-pong run ("case NAME VALUE" lines); LIB empty for Debian's UCX.
run_mpi() {
  if [ -n "$1" ]; then
    mpirun "${mpi_flags[@]}" -x LD_LIBRARY_PATH="$1" -x RUCX_ANNOUNCE=1 "$work/pingpong" "$scale"
  else
    mpirun "${mpi_flags[@]}" "$work/pingpong" "$scale"
  fi
}

# run_perftest LIB SIZE: tag_lat one-way latency of ucx_perftest (overall average, µs).
run_perftest() {
  local lib=$1 size=$2 port=$((20000 + RANDOM % 20000)) iters=20000
  [ "$size" -ge 1000000 ] && iters=2000
  # Small messages: more iterations, so one run's average is not a few ms of noise.
  [ "$size" -lt 1024 ] && iters=200000
  local env=(env)
  [ -n "$lib" ] && env+=(LD_LIBRARY_PATH="$lib")
  "${env[@]}" taskset -c 0 ucx_perftest -p "$port" >/dev/null 2>&1 &
  local srv=$! out=""
  for _ in $(seq 50); do
    sleep 0.2
    if out=$("${env[@]}" taskset -c 1 ucx_perftest -p "$port" -t tag_lat -s "$size" -n "$iters" \
               -f 127.0.0.1 2>/dev/null); then
      break
    fi
  done
  wait "$srv" || true
  # -f prints one line of numbers: iterations, latency 50%ile / average / overall (µs), ...
  echo "$out" | awk -v s="$size" '/^ +[0-9]+ +[0-9]/ { v=$4 } END { print "case perftest-tag_lat-" s "B", v }'
}

median() { sort -g | awk '{ a[NR]=$1 } END { print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2 }'; }

: > "$work/ucx.txt"; : > "$work/rucx.txt"
for r in $(seq "$runs"); do
  echo "run $r/$runs" >&2
  run_mpi "" | grep '^case' >> "$work/ucx.txt"
  run_mpi "$work/lib" 2>"$work/rucx.err" | grep '^case' >> "$work/rucx.txt"
  grep -q '^\[rucx\] libucp.so.0' "$work/rucx.err" || { echo "Rucx's libucp did not serve the run" >&2; cat "$work/rucx.err" >&2; exit 1; }
  for s in 8 131072 2097152; do
    run_perftest "" "$s" >> "$work/ucx.txt"
    run_perftest "$work/lib" "$s" >> "$work/rucx.txt"
  done
done

printf '%-28s %21s %21s %13s\n' "one-way latency, us" "UCX 1.13.1" "Rucx" "Rucx/UCX"
printf '%-28s %10s %10s %10s %10s %6s %6s\n' case median best median best median best
awk '{print $2}' "$work/ucx.txt" | awk '!seen[$0]++' | while read -r c; do
  u=$(awk -v c="$c" '$2==c {print $3}' "$work/ucx.txt" | median)
  x=$(awk -v c="$c" '$2==c {print $3}' "$work/rucx.txt" | median)
  ub=$(awk -v c="$c" '$2==c {print $3}' "$work/ucx.txt" | sort -g | head -1)
  xb=$(awk -v c="$c" '$2==c {print $3}' "$work/rucx.txt" | sort -g | head -1)
  printf '%-28s %10.2f %10.2f %10.2f %10.2f %6.2f %6.2f\n' "$c" "$u" "$ub" "$x" "$xb" \
    "$(awk -v a="$x" -v b="$u" 'BEGIN{print (b>0)? a/b : 0}')" \
    "$(awk -v a="$xb" -v b="$ub" 'BEGIN{print (b>0)? a/b : 0}')"
done
