#!/usr/bin/env bash
# MPI point-to-point patterns (contrib/bench/osu.c, in the OSU micro-benchmarks' shapes)
# with OpenMPI 4.1.4 (or, with OSU_MPI=mpich, Debian's MPICH 4.0.2, device ch4:ucx) over
# Debian's UCX 1.13.1 and over Rucx's libucp.so.0 (release build),
# in alternating rounds (the order of the libraries reversed every other round); prints, per pattern and size, the median of each library, the
# spread (min..max) of each library's rounds, the ratio Rucx / UCX of the medians and the
# median of the per-round ratios ("paired": latency below 1.0, bandwidth above 1.0 means
# Rucx is better).
#
#   contrib/bench/osu.sh [-r ROUNDS] [-s SIZES] [PATTERN ...]
#
# PATTERN: lat sendrecv bw bibw mlat2 mlat4 put_lat get_lat put_bw get_bw (default: all), lat1c.
# mlatN is the multi-pair latency with N pairs (2N ranks; this 2-core machine then runs
# more ranks than cores, so those figures measure oversubscription as much as the library).
# lat1c is the ping-pong with both ranks on CPU 0, OpenMPI yielding the CPU when idle.
# With UCX122=1, UCX 1.22 (the wheel, contrib/bench/ucx-env.sh) is a third column.
# OSU_SCALE=k runs k times the iterations (the small-message bandwidth loops take a few
# milliseconds by default).
# On a machine without a Rust toolchain (the GPU machine): RUCX_LIB=path/to/libucp.so.0
# (contrib/gpu/pack.sh's) instead of building, and OSU_SYS_LABEL names the system's UCX
# column (default ucx113, Debian 12's). RUCX_BEFORE=path/to/libucp.so.0 adds an earlier
# build of Rucx as a column ("before", with its own ratio to UCX), in the same rounds.
# OSU_AA=1 runs the system's UCX twice in each round (the second time as column "aa") and
# judges each figure against that A/A pair, which is the machine's run-to-run spread:
# "met" when the ratio of medians is on the right side of 1.0; otherwise "miss" when
# Rucx's per-round ratios to UCX are worse than the A/A pair's (exact Mann-Whitney test,
# one-sided p < 0.025, i.e. a two-sided test at 0.05), "spread" when they are not. Three
# rounds can never show a difference at that level; use -r 7 or more.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=3 sizes="1,8,64,512,4096,32768,262144,1048576,4194304"
while getopts "r:s:" o; do
  case $o in r) rounds=$OPTARG ;; s) sizes=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
pats=("$@")
[ $# -eq 0 ] && pats=(lat sendrecv bw bibw mlat2 mlat4 put_lat get_lat put_bw get_bw)

lib=${RUCX_LIB:-}
if [ -z "$lib" ]; then
  cargo build --release -q -p rucx-bindings-c
  lib=$PWD/target/release/librucx_bindings_c.so
fi
work=$(mktemp -d /tmp/rucx-osu.XXXXXX)
trap 'rm -rf "$work"' EXIT
# Every UCX library name is Rucx's (MPICH links libucs and libuct too; a program that loads
# one of Debian's beside ours would mix two libraries).
mkdir -p "$work/lib"
for n in ucp ucs ucm uct; do ln -sf "$(readlink -f "$lib")" "$work/lib/lib$n.so.0"; done
if [ -n "${RUCX_BEFORE:-}" ]; then
  mkdir -p "$work/before"
  for n in ucp ucs ucm uct; do ln -sf "$(readlink -f "$RUCX_BEFORE")" "$work/before/lib$n.so.0"; done
fi
mpi=${OSU_MPI:-openmpi}
case $mpi in
  openmpi) mpicc -O2 -o "$work/osu" contrib/bench/osu.c ;;
  mpich) mpicc.mpich -O2 -o "$work/osu" contrib/bench/osu.c ;;
  *) echo "osu.sh: OSU_MPI is openmpi or mpich" >&2; exit 2 ;;
esac
base=${OSU_SYS_LABEL:-ucx113}
libs=("$base" rucx)
if [ -n "${UCX122:-}" ]; then
  # shellcheck source=contrib/bench/ucx-env.sh
  source contrib/bench/ucx-env.sh
  libs+=(ucx122)
fi
[ -n "${RUCX_BEFORE:-}" ] && libs+=(before)
[ -n "${OSU_AA:-}" ] && libs+=(aa)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# run LIB PATTERN: "size value" lines of one run.
run() {
  local lib=$1 pat=$2 np=2 bind=(--bind-to core) osc=() env=() cpus=()
  case $pat in
    mlat*) np=$((2 * ${pat#mlat})); pat=mlat; bind=(--bind-to none) ;;
    lat1c) pat=lat; cpus=(taskset -c 0); bind=(--bind-to none --mca mpi_yield_when_idle 1) ;;
    put_* | get_*) osc=(--mca osc ucx) ;;
  esac
  case $lib in
    rucx) env=(-x LD_LIBRARY_PATH="$work/lib") ;;
    before) env=(-x LD_LIBRARY_PATH="$work/before") ;;
    ucx122)
      local d=${RUCX_UCX_DIR:-$HOME/.cache/rucx/ucx-1.22}/libucx
      env=(-x LD_LIBRARY_PATH="$d/lib" -x UCX_MODULE_DIR="$d/lib/ucx") ;;
  esac
  if [ "$mpi" = mpich ]; then
    # Hydra: -genv NAME VALUE for what OpenMPI's -x NAME=VALUE says; its own binding; one
    # device (ch4:ucx), so nothing to select but UCX's transports. RMA needs no option.
    local genv=(-genv UCX_TLS posix,cma,self) i
    for ((i = 1; i < ${#env[@]}; i += 2)); do
      genv+=(-genv "${env[i]%%=*}" "${env[i]#*=}")
    done
    [ -n "${OSU_SCALE:-}" ] && genv+=(-genv OSU_SCALE "$OSU_SCALE")
    local mbind=(-bind-to core)
    [ "${bind[1]}" = none ] && mbind=(-bind-to none)
    timeout 600 "${cpus[@]}" mpiexec.mpich -n "$np" "${mbind[@]}" "${genv[@]}" \
      "$work/osu" "$pat" "$sizes" 2>/dev/null | awk '{print $2, $3}'
    return
  fi
  timeout 600 "${cpus[@]}" mpirun --allow-run-as-root --oversubscribe -np "$np" "${bind[@]}" \
    --mca plm isolated --mca btl self --mca pml ucx --mca pml_ucx_tls any \
    --mca pml_ucx_devices any "${osc[@]}" -x UCX_TLS=posix,cma,self ${OSU_SCALE:+-x OSU_SCALE} "${env[@]}" \
    "$work/osu" "$pat" "$sizes" 2>/dev/null | awk '{print $2, $3}'
}

# per_round LIB SIZE PATTERN: LIB's value over the system UCX's, one line per round.
per_round() {
  for r in $(seq "$rounds"); do
    a=$(awk -v n="$2" '$1 == n {print $2}' "$work/$3.$1.$r" 2>/dev/null)
    b=$(awk -v n="$2" '$1 == n {print $2}' "$work/$3.$base.$r" 2>/dev/null)
    [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { if (b > 0) print a / b }'
  done
}

# verdict PATTERN SIZE RATIO: met / spread / miss (OSU_AA above).
verdict() {
  local better=low
  case $1 in bw | bibw | put_bw | get_bw) better=high ;; esac
  { per_round rucx "$2" "$1" | sed 's/^/r /'; per_round aa "$2" "$1" | sed 's/^/a /'; } |
    awk -v m="$3" -v better="$better" '
      $1 == "r" { r[++n1] = $2 } $1 == "a" { a[++n2] = $2 }
      END {
        if (m == "nan" || n1 == 0 || n2 == 0) { print "nan"; exit }
        if ((better == "low" && m <= 1) || (better == "high" && m >= 1)) { print "met"; exit }
        # U: pairs where Rucx is above the A/A ratio (ties count a half).
        u = 0
        for (i = 1; i <= n1; i++) for (j = 1; j <= n2; j++) u += (r[i] > a[j]) + 0.5 * (r[i] == a[j])
        # Exact null distribution of U without ties: f[i,j,k] ways for i and j values.
        for (i = 0; i <= n1; i++) for (j = 0; j <= n2; j++) for (k = 0; k <= n1 * n2; k++) {
          if (i == 0 || j == 0) { f[i, j, k] = (k == 0); continue }
          f[i, j, k] = (k >= j ? f[i - 1, j, k - j] : 0) + f[i, j - 1, k]
        }
        tot = 0; lo = 0; hi = 0
        for (k = 0; k <= n1 * n2; k++) {
          tot += f[n1, n2, k]
          if (k <= u + 0.5) lo += f[n1, n2, k]
          if (k >= u - 0.5) hi += f[n1, n2, k]
        }
        # The bad side: Rucx slower (time) or lower (bandwidth) than the A/A pair.
        p = (better == "low" ? hi : lo) / tot
        print (p < 0.025 ? "miss" : "spread")
      }'
}

printf '%-9s %9s' pattern size
for l in "${libs[@]}"; do printf ' %11s %19s' "$l" "(min..max)"; done
printf ' %9s %9s' "rucx/$base" paired
[ -n "${RUCX_BEFORE:-}" ] && printf ' %11s' "before/$base"
[ -n "${OSU_AA:-}" ] && printf ' %9s %7s' "aa/$base" verdict
printf '\n'
for pat in "${pats[@]}"; do
  for r in $(seq "$rounds"); do
    # The order within a round moves the figures on this VM (docs/benchmarks.md, method):
    # odd rounds run the libraries in the listed order, even rounds in reverse.
    order=("${libs[@]}")
    if [ $((r % 2)) -eq 0 ]; then
      order=()
      for ((k = ${#libs[@]} - 1; k >= 0; k--)); do order+=("${libs[k]}"); done
    fi
    for l in "${order[@]}"; do
      run "$l" "$pat" >"$work/$pat.$l.$r" || true
    done
  done
  for n in ${sizes//,/ }; do
    printf '%-9s %9s' "$pat" "$n"
    declare -A med=()
    for l in "${libs[@]}"; do
      vals=$(cat "$work/$pat.$l".* 2>/dev/null | awk -v n="$n" '$1 == n {print $2}' | sort -g)
      m=$(awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}' <<<"$vals")
      lo=$(head -n1 <<<"$vals"); hi=$(tail -n1 <<<"$vals")
      med[$l]=$m
      printf ' %11s %19s' "$m" "(${lo:-nan}..${hi:-nan})"
    done
    # The ratio of the medians, and the median of each round's own ratio (the two runs of
    # a round are seconds apart, so a slow spell of the machine hits both).
    paired=$(per_round rucx "$n" "$pat" | sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) printf "%.3f", v[(NR+1)/2]; else printf "%.3f", (v[NR/2]+v[NR/2+1])/2}')
    ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "nan" || b == "nan" || b == 0) ? "nan" : sprintf("%.3f", a / b) }'; }
    printf ' %9s %9s' "$(ratio "${med[rucx]}" "${med[$base]}")" "$paired"
    [ -n "${RUCX_BEFORE:-}" ] && printf ' %11s' "$(ratio "${med[before]}" "${med[$base]}")"
    if [ -n "${OSU_AA:-}" ]; then
      printf ' %9s %7s' "$(ratio "${med[aa]}" "${med[$base]}")" \
        "$(verdict "$pat" "$n" "$(ratio "${med[rucx]}" "${med[$base]}")")"
    fi
    printf '\n'
  done
done
