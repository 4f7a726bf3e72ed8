#!/usr/bin/env bash
# Rucx against its own past: builds BASE (a commit or tag; default the last release tag, or
# origin/main where there is none) in a git worktree, builds the working tree, and runs the
# cases that carry the project's targets with both builds in alternating rounds. Prints,
# per case, both medians, new/old, the spread of each build's own rounds, and a verdict:
#
#   same     the two builds' rounds overlap, or differ by less than either's spread
#   faster   every round of the new build is better than every round of the old, by more
#            than the spread
#   slower   the same the other way
#
#   contrib/bench/regress.sh [-r ROUNDS] [-q] [BASE]
#
# ROUNDS (default 5): rounds of every case; the order of the two builds alternates from
# round to round. -q: a shorter run (3 rounds, fewer iterations) for a quick look.
# Builds are release builds (the project's profile: fat LTO), kept under
# ${RUCX_REGRESS_DIR:-$HOME/.cache/rucx/regress}/<commit> for the base, so a second run
# against the same base builds only the working tree. Exits 1 if a case is `slower`.
#
# Cases: shared-memory tag_lat 8 B, 128 KiB and 2 MiB, tag_bw 1 MiB, iov 128 x 1 KiB and
# 16384 x 128 B (UCX_TLS=posix,cma,self); tcp tag_lat 8 B (UCX_TLS=tcp over lo);
# ucp_put_lat 8 B; OpenMPI 4.1 ping-pong 8 B and 2 MiB (pml ucx over each build's
# libucp.so.0); and the many 4-byte puts and gets of MPICH's rma/transpose tests through
# OpenMPI's osc ucx (contrib/bench/rma-transpose.c). Both processes of a run are pinned to
# CPUs 0 and 1. With RUCX_RECORD=1 each case is also written as data
# (contrib/bench/record.sh, area "regress").
set -euo pipefail
cd "$(dirname "$0")/../.."
source contrib/bench/record.sh

rounds=5 quick=0
while getopts "r:q" o; do
  case $o in
    r) rounds=$OPTARG ;;
    q) quick=1 rounds=3 ;;
    *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

base=${1:-}
if [ -z "$base" ]; then
  base=$(git describe --tags --abbrev=0 2>/dev/null || true)
  [ -n "$base" ] || base=$(git rev-parse -q --verify origin/main 2>/dev/null || true)
  [ -n "$base" ] || { echo "regress.sh: no release tag and no origin/main: name a BASE" >&2; exit 2; }
fi
base_hash=$(git rev-parse --short=12 "$base^{commit}")
cache=${RUCX_REGRESS_DIR:-$HOME/.cache/rucx/regress}
mkdir -p "$cache"

# build DIR TARGET: a release build of the tools and the C library in DIR.
build() {
  (cd "$1" && CARGO_TARGET_DIR="$2" cargo build --release -q -p rucx-perftest -p rucx-bindings-c)
}

# links TARGET: TARGET/release/lib with libucp.so.0, and the other library names where the
# build serves them (builds before 2026-11-26 export no ucs_/ucm_/uct_ symbols: Debian's
# UCX libraries stay under those names for them).
links() {
  mkdir -p "$1/release/lib"
  ln -sf ../librucx_bindings_c.so "$1/release/lib/libucp.so.0"
  for n in ucs ucm uct; do
    if nm -D --defined-only "$1/release/librucx_bindings_c.so" | grep -q " ${n}_"; then
      ln -sf ../librucx_bindings_c.so "$1/release/lib/lib$n.so.0"
    else
      rm -f "$1/release/lib/lib$n.so.0"
    fi
  done
}

old="$cache/$base_hash"
if [ ! -x "$old/target/release/rucx-perftest" ] || [ ! -f "$old/target/release/librucx_bindings_c.so" ]; then
  echo "# building $base ($base_hash) in $old"
  rm -rf "$old/src"
  git worktree prune
  git worktree add -f --detach "$old/src" "$base_hash" >/dev/null
  build "$old/src" "$old/target"
  git worktree remove --force "$old/src" >/dev/null 2>&1 || true
fi
echo "# building the working tree ($(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ", with changes"))"
new_target=${CARGO_TARGET_DIR:-$PWD/target}
build "$PWD" "$new_target"
links "$old/target"
links "$new_target"

declare -A dir=([old]="$old/target/release" [new]="$new_target/release")

# MPI programs, built once; OpenMPI is optional (the MPI cases are left out without it).
work=$(mktemp -d /tmp/rucx-regress.XXXXXX)
trap 'rm -rf "$work"' EXIT
have_mpi=0
if command -v mpicc.openmpi >/dev/null && command -v mpirun.openmpi >/dev/null; then
  mpicc.openmpi -O2 -o "$work/pingpong" contrib/bench/ompi-pingpong.c
  mpicc.openmpi -O2 -o "$work/transpose" contrib/bench/rma-transpose.c
  have_mpi=1
else
  echo "# OpenMPI (mpicc.openmpi, mpirun.openmpi) not found: the MPI cases are left out" >&2
fi

n_small=100000 n_mid=10000 n_big=1000 n_iov=200 pp_scale=1 tsize=250
if [ $quick = 1 ]; then
  n_small=20000 n_mid=2000 n_big=300 n_iov=60 pp_scale=0.3 tsize=150
fi
iov_list() { local n=$1 s=$2 out=$2 i; for ((i = 1; i < n; i++)); do out+=",$s"; done; echo "$out"; }
IOV128=$(iov_list 128 1024)
IOV16K=$(iov_list 16384 128)

# perftest BUILD COLUMN ARGS...: one rucx-perftest run; prints the Final line's column
# (3: typical latency, us; 6: average bandwidth, MB/s).
perftest() {
  local b=$1 col=$2
  shift 2
  "${dir[$b]}/rucx-perftest" --loopback -c 0,1 "$@" 2>/dev/null |
    awk -v c="$col" '/^Final:/ { v = $c } END { print (v == "" ? "nan" : v) }'
}

mpi_flags=(--allow-run-as-root --oversubscribe -np 2 --bind-to core --mca plm isolated
           --mca btl self --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
           --mca osc ucx)
# mpi BUILD PROGRAM CASE ARGS...: the value of the program's "case CASE <value>" line.
mpi() {
  local b=$1 prog=$2 case=$3
  shift 3
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LD_LIBRARY_PATH="${dir[$b]}/lib" \
    timeout 600 mpirun.openmpi "${mpi_flags[@]}" -x LD_LIBRARY_PATH "$work/$prog" "$@" 2>/dev/null |
    awk -v c="$case" '$1 == "case" && $2 == c { v = $3 } END { print (v == "" ? "nan" : v) }'
}

# The cases: name | unit | better (lo: lower is better, hi: higher) | command (BUILD is $1).
cases=(
  "shm tag_lat 8 B|us|lo|UCX_TLS=posix,cma,self perftest \$1 3 -t tag_lat -s 8 -n $n_small"
  "shm tag_lat 128 KiB|us|lo|UCX_TLS=posix,cma,self perftest \$1 3 -t tag_lat -s 128k -n $n_mid"
  "shm tag_lat 2 MiB|us|lo|UCX_TLS=posix,cma,self perftest \$1 3 -t tag_lat -s 2m -n $n_big"
  "shm tag_bw 1 MiB|MB/s|hi|UCX_TLS=posix,cma,self perftest \$1 6 -t tag_bw -s 1m -n $n_big"
  "iov 128 x 1 KiB|us|lo|UCX_TLS=posix,cma,self perftest \$1 3 -t tag_lat -D iov,iov -s $IOV128 -i 1024 -n $n_mid"
  "iov 16384 x 128 B|us|lo|UCX_TLS=posix,cma,self perftest \$1 3 -t tag_lat -D iov,iov -s $IOV16K -i 128 -n $n_iov"
  "tcp tag_lat 8 B|us|lo|UCX_TLS=tcp UCX_NET_DEVICES=lo perftest \$1 3 -t tag_lat -s 8 -n $n_mid"
  "ucp_put_lat 8 B|us|lo|perftest \$1 3 -t ucp_put_lat -s 8 -n $n_small"
)
if [ $have_mpi = 1 ]; then
  cases+=(
    "OpenMPI ping-pong 8 B|us|lo|mpi \$1 pingpong contig-8B $pp_scale"
    "OpenMPI ping-pong 2 MiB|us|lo|mpi \$1 pingpong contig-2MiB $pp_scale"
    "rma transpose put (4 B each)|us|lo|mpi \$1 transpose rma-transpose-put $tsize"
    "rma transpose get (4 B each)|us|lo|mpi \$1 transpose rma-transpose-get $tsize"
  )
fi

declare -A vals
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order=(old new); else order=(new old); fi
  echo "# round $r of $rounds (${order[*]})"
  for c in "${cases[@]}"; do
    IFS='|' read -r name _ _ cmd <<<"$c"
    for b in "${order[@]}"; do
      v=$(set -- "$b"; eval "$cmd")
      vals["$name|$b"]+="$v "
    done
  done
done

# summary OLD NEW BETTER: median_old median_new ratio spread_old spread_new verdict
summarize() {
  python3 - "$@" <<'EOF'
import statistics, sys
old = [float(x) for x in sys.argv[1].split() if x != "nan"]
new = [float(x) for x in sys.argv[2].split() if x != "nan"]
better = sys.argv[3]
if not old or not new:
    print("nan nan nan nan nan missing"); sys.exit()
mo, mn = statistics.median(old), statistics.median(new)
so = (max(old) - min(old)) / mo if mo else 0.0
sn = (max(new) - min(new)) / mn if mn else 0.0
ratio = mn / mo if mo else float("nan")
spread = max(so, sn)
# Better or worse only when the rounds do not overlap at all and the medians differ by
# more than either build's own spread.
if better == "lo":
    newbetter, newworse = max(new) < min(old), min(new) > max(old)
else:
    newbetter, newworse = min(new) > max(old), max(new) < min(old)
if newbetter and abs(ratio - 1) > spread:
    verdict = "faster"
elif newworse and abs(ratio - 1) > spread:
    verdict = "slower"
else:
    verdict = "same"
print(f"{mo:.4g} {mn:.4g} {ratio:.3f} {so*100:.0f}% {sn*100:.0f}% {verdict}")
EOF
}

echo
echo "# Rucx $(git rev-parse --short HEAD) (new) against $base ($base_hash, old), $rounds rounds, medians"
printf '%-30s %-5s %10s %10s %8s %9s %9s  %s\n' case unit old new new/old "spread old" "spread new" verdict
slower=0
for c in "${cases[@]}"; do
  IFS='|' read -r name unit better _ <<<"$c"
  read -r mo mn ratio so sn verdict <<<"$(summarize "${vals["$name|old"]}" "${vals["$name|new"]}" "$better")"
  printf '%-30s %-5s %10s %10s %8s %9s %9s  %s\n' "$name" "$unit" "$mo" "$mn" "$ratio" "$so" "$sn" "$verdict"
  [ "$verdict" = slower ] && slower=1
  record regress "$name" "$mn" "$mo" "$ratio" "old $so, new $sn" "$unit" "Rucx $base_hash" "$verdict"
done
exit $slower
