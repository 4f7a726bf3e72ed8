#!/usr/bin/env bash
# Runs chosen tests of MPICH's test suite many times over each library and prints how often
# each passed: for a test whose outcome varies from run to run (suite.sh reruns a failure
# once, so one table can show such a test as passing over one library only).
#
#   contrib/mpich/repeat.sh [--mpi mpich|openmpi] [--lib ucx|rucx|both] [--runs N]
#                           [--rucx-lib DIR] dir/prog ...
#
# Every entry of prog in dir's testlist (its arguments, its process count) runs N times
# (default 6) through contrib/mpich/mpiexec.sh, as suite.sh runs it; a run passes when it
# prints "No Errors", as runtests requires. The suite must have been configured and built
# by suite.sh first (in ${RUCX_MPICH_WORK:-$HOME/.cache/rucx/mpich-suite}/build-<mpi>).
# --mpi defaults to openmpi, --lib to both, --rucx-lib to target/release/rucx-pkg/lib.
#
# Example (docs/mpich.md, OpenMPI's dynamic windows):
#   contrib/mpich/repeat.sh --runs 6 rma/win_dynamic_rma_flush_get \
#     rma/win_dynamic_rma_flush_get_collattach
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=${RUCX_MPICH_WORK:-$HOME/.cache/rucx/mpich-suite}
mpi=openmpi libs="ucx rucx" runs=6 rucx_lib=$root/target/release/rucx-pkg/lib
tests=()
while [ $# -gt 0 ]; do
  case $1 in
    --mpi) mpi=${2:?}; shift 2 ;;
    --lib) case ${2:?} in both) libs="ucx rucx" ;; *) libs=$2 ;; esac; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --rucx-lib) rucx_lib=${2:?}; shift 2 ;;
    -h | --help) sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "repeat.sh: unknown option $1" >&2; exit 2 ;;
    *) tests+=("$1"); shift ;;
  esac
done
[ ${#tests[@]} -gt 0 ] || { echo "repeat.sh: name at least one dir/prog" >&2; exit 2; }
src=$(ls -d "$work"/mpich-*/test/mpi 2>/dev/null | head -1)
build=$work/build-$mpi
[ -n "$src" ] && [ -d "$build" ] || {
  echo "repeat.sh: no configured suite in $work (run contrib/mpich/suite.sh --mpi $mpi first)" >&2
  exit 2
}
if [[ " $libs " == *" rucx "* ]] && [ ! -e "$rucx_lib/libucp.so.0" ]; then
  echo "repeat.sh: no Rucx library in $rucx_lib (bash bindings-c/gen-pc.sh release)" >&2
  exit 2
fi

export RUCX_SUITE_MPI=$mpi RUCX_SUITE_LIBDIR=$rucx_lib MPIEXEC_TIMEOUT=${MPIEXEC_TIMEOUT:-120}
printf '%-64s' "test"
for lib in $libs; do printf ' %10s' "$lib"; done
echo
for t in "${tests[@]}"; do
  dir=${t%%/*} prog=${t#*/}
  [ -x "$build/$dir/$prog" ] || make -C "$build/$dir" "$prog" >/dev/null 2>&1 || {
    echo "repeat.sh: $dir/$prog does not build" >&2
    exit 1
  }
  # testlist lines: "prog np arg=A arg=B ..." (other keys, such as timeLimit=, ignored).
  # The testlist configure generated in the build tree, or the source's plain one.
  list=$build/$dir/testlist
  [ -f "$list" ] || list=$src/$dir/testlist
  grep -E "^$prog( |$)" "$list" | while read -r name np rest; do
    case $np in
      '' | *[!0-9]*) rest="$np $rest" np=2 ;;
    esac
    args=()
    for kv in $rest; do
      case $kv in arg=*) args+=("${kv#arg=}") ;; esac
    done
    printf '%-64s' "$dir/$name ${args[*]}"
    for lib in $libs; do
      pass=0
      for _ in $(seq "$runs"); do
        out=$(cd "$build/$dir" && RUCX_SUITE_LIB=$lib "$here/mpiexec.sh" -n "$np" \
          "./$name" "${args[@]}" 2>&1)
        case $out in *"No Errors"*) pass=$((pass + 1)) ;; esac
      done
      printf ' %6d of %d' "$pass" "$runs"
    done
    echo
  done
done
