#!/usr/bin/env bash
# Application layouts beside OpenMPI: `rucx-perftest -t tag_lat -D <layout>` and
# an OpenMPI 4.1.4 ping-pong of the same layout built as an MPI derived datatype
# (contrib/bench/ompi-layouts.c), run with `mpirun -np 2 --mca pml ucx` over Debian's UCX
# 1.13.1. Prints the one-way latency of each (µs, median of the runs' medians, and of the
# runs' averages) and the ratio Rucx / OpenMPI+UCX (below 1.0: Rucx is faster).
#
#   contrib/bench/ompi-layouts.sh [-r RUNS] [-s SCALE] [-v] [LAYOUT ...]
#
# LAYOUT: rucx-perftest's -D spec (default: milc:16 milc:32 nas_mg_x:64 nas_mg_y:64
# nas_mg_z:64 nas_mg_x:128 nas_mg_y:128 nas_mg_z:128 specfem3d_cm:c1 specfem3d_cm:c4).
# RUNS (default 3): runs per program, interleaved (Rucx, MPI, Rucx, ...). SCALE (default
# 1) multiplies the iteration counts (about 64 MiB of messages per run, 200..20000
# iterations). -v prints every run.
#
# Before any number is kept, the MPI datatype is checked against Rucx's layout: the same
# size, lb and extent, true bounds, number of contiguous blocks, and fingerprint of the
# packed bytes (FNV-1a of the type packed from a known buffer), as both programs print
# them. A mismatch stops the script. Both programs run on CPUs 0 and 1 and take their
# transports from the environment (UCX_TLS unset: each picks its own, shared memory here).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=3 scale=1 verbose=0
while getopts "r:s:v" o; do
  case $o in r) runs=$OPTARG ;; s) scale=$OPTARG ;; v) verbose=1 ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
layouts=("$@")
[ ${#layouts[@]} -gt 0 ] || layouts=(milc:16 milc:32 nas_mg_x:64 nas_mg_y:64 nas_mg_z:64
  nas_mg_x:128 nas_mg_y:128 nas_mg_z:128 specfem3d_cm:c1 specfem3d_cm:c4)

command -v mpicc >/dev/null || { echo "ompi-layouts: mpicc missing (apt-get install libopenmpi-dev openmpi-bin)" >&2; exit 1; }
cargo build --release -q -p rucx-perftest
RUCX=target/release/rucx-perftest
work=$(mktemp -d /tmp/rucx-ompi-layouts.XXXXXX)
trap 'rm -rf "$work"' EXIT
mpicc -O2 -Wall -o "$work/ompi-layouts" contrib/bench/ompi-layouts.c

mpi_flags=(--allow-run-as-root --oversubscribe -np 2 --bind-to core
           --mca plm isolated --mca btl self
           --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any)
[ -n "${UCX_TLS:-}" ] && mpi_flags+=(-x UCX_TLS)

median() { sort -g | awk '{ a[NR]=$1 } END { if (NR == 0) print "nan"; else print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "nan" && b > 0) printf "%.2f", a / b; else print "nan" }'; }

printf '%-34s %8s %7s | %10s %10s %6s | %10s %10s %6s\n' "" "" "" "median" "" "" "average" "" ""
printf '%-34s %8s %7s | %10s %10s %6s | %10s %10s %6s\n' layout bytes blocks Rucx "OMPI+UCX" ratio Rucx "OMPI+UCX" ratio
for spec in "${layouts[@]}"; do
  # The layout as Rucx builds it: full spec, size and the facts to check MPI's against.
  probe=$("$RUCX" --loopback -t tag_lat -D "$spec" -n 10 -w 0) ||
    { echo "ompi-layouts: rucx-perftest -D $spec failed" >&2; exit 1; }
  line=$(grep -m1 '^# send layout .*: size=' <<<"$probe")
  full=$(awk '{ sub(/:$/, "", $4); print $4 }' <<<"$line")
  facts=${line#*: }
  size=$(sed 's/.*size=\([0-9]*\).*/\1/' <<<"$facts")
  blocks=$(sed 's/.*blocks=\([0-9]*\).*/\1/' <<<"$facts")
  iters=$(awk -v s="$size" -v k="$scale" 'BEGIN { n = int(67108864 / s); if (n < 200) n = 200; if (n > 20000) n = 20000; print int(n * k) }')
  warm=$((iters / 10))
  : >"$work/rucx" ; : >"$work/mpi"
  for r in $(seq "$runs"); do
    out=$("$RUCX" --loopback -c 1,0 -t tag_lat -D "$spec" -n "$iters" -w "$warm")
    # Final: iterations, latency 50%ile, average, overall, ...
    awk '/^Final:/ { print $3, $5 }' <<<"$out" >>"$work/rucx"
    mout=$(mpirun "${mpi_flags[@]}" "$work/ompi-layouts" "$full" "$iters")
    mfacts=$(awk -v s="$full" '$1 == "layout" && $2 == s { $1 = ""; $2 = ""; sub(/^ +/, ""); print }' <<<"$mout")
    if [ "$mfacts" != "$facts" ]; then
      echo "ompi-layouts: the MPI datatype differs from Rucx's layout $full" >&2
      echo "  rucx: $facts" >&2
      echo "  mpi:  $mfacts" >&2
      exit 1
    fi
    sed -n 's/^latency .* median=\([0-9.]*\) average=\([0-9.]*\) us.*/\1 \2/p' <<<"$mout" >>"$work/mpi"
    [ "$verbose" = 1 ] && echo "  run $r $full: rucx $(tail -1 "$work/rucx"), mpi $(tail -1 "$work/mpi") (median, average us)" >&2
  done
  rm=$(awk '{ print $1 }' "$work/rucx" | median); ra=$(awk '{ print $2 }' "$work/rucx" | median)
  mm=$(awk '{ print $1 }' "$work/mpi" | median); ma=$(awk '{ print $2 }' "$work/mpi" | median)
  printf '%-34s %8s %7s | %10.3f %10.3f %6s | %10.3f %10.3f %6s\n' "$full" "$size" "$blocks" \
    "$rm" "$mm" "$(ratio "$rm" "$mm")" "$ra" "$ma" "$(ratio "$ra" "$ma")"
done
echo "(one-way latency in us; ${runs} interleaved runs per program; datatypes checked against Rucx's layouts)"
