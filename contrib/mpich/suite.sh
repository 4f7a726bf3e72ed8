#!/usr/bin/env bash
# MPICH's own MPI test suite (test/mpi of MPICH 4.0.2) run by unmodified, installed MPIs
# over Debian's UCX 1.13 and over Rucx, and a comparison of the two.
#
#   contrib/mpich/suite.sh [--mpi mpich|openmpi|both] [--lib ucx|rucx|both]
#                          [--dirs "basic pt2pt ..."] [--ci] [--tests "dir/prog[:np] ..."]
#                          [--rucx-lib DIR] [--out DIR] [--timeout SECS] [--maxnp N]
#                          [--no-rerun]
#
#   --mpi      which MPI runs the tests (default both):
#                mpich    Debian's MPICH 4.0.2 (ch4:ucx), mpicc.mpich and mpiexec.mpich (hydra)
#                openmpi  Debian's OpenMPI 4.1.4, mpicc.openmpi and mpirun.openmpi with
#                         pml ucx and osc ucx (the options are in mpiexec.sh)
#   --lib      which libucp.so.0 the ranks load (default both): ucx is Debian's UCX 1.13
#              (LD_LIBRARY_PATH unset), rucx is Rucx (LD_LIBRARY_PATH = a copy of --rucx-lib)
#   --dirs     test directories of test/mpi (default: basic pt2pt datatype rma coll comm group
#              attr info init errhan topo)
#   --ci       a subset (contrib/mpich/ci.list) that takes a few minutes on 2 cores
#   --tests    only these tests: dir/prog (every entry of prog in dir's testlist, np <= maxnp)
#              or dir/prog:np; overrides --ci and --dirs
#   --rucx-lib a directory holding libucp.so.0 etc. as links to Rucx's cdylib (default
#              target/release/rucx-pkg/lib if present, else target/debug/rucx-pkg/lib; make
#              it with `bash bindings-c/gen-pc.sh debug|release`). The library is copied into
#              OUT/rucx-lib first, so that a rebuild during the run does not change it.
#   --out      where results go (default $RUCX_MPICH_WORK/results)
#   --timeout  each test's time limit in seconds, runtests' MPITEST_TIMEOUT (default 180;
#              testlist entries with their own timeLimit keep it)
#   --maxnp    run only testlist entries with at most this many processes (default 4)
#   --no-rerun do not rerun failed tests
#
# What it does:
#   1. Downloads Debian's MPICH source tarball into ~/.cache/rucx (if absent; $RUCX_CACHE
#      overrides the directory), checks its sha256, and unpacks test/mpi (and confdb) into
#      the work directory ${RUCX_MPICH_WORK:-$HOME/.cache/rucx/mpich-suite}.
#   2. Configures test/mpi once per MPI, out of tree, in WORK/build-<mpi> (see configure_args).
#   3. Writes for each directory a testlist (testlist.rucx-suite) of the entries of its own
#      testlist (not testlist.dtp or testlist.cvar) with np <= maxnp (for basic, which has
#      none, contrib/mpich/basic.testlist); with --ci or --tests, only the chosen ones.
#   4. For each (mpi, lib): checks in one run of basic/simple, with RUCX_ANNOUNCE=1, that
#      Rucx's library served every rank (lib rucx) or none (lib ucx); then runs MPICH's
#      `runtests` on each directory with mpiexec.sh as its launcher, and reads its JUnit
#      output. A failed test is rerun alone: passing then, it counts as a pass, marked flaky
#      (over Rucx, a test that fails over UCX 1.13 too, in OUT's results, is not rerun).
#   5. Writes OUT/<mpi>-<lib>.tsv, one line per test:
#        dir/test[ args]<TAB>np<TAB>pass|fail|timeout<TAB>note
#      (note: empty, "flaky (first run: fail)", "rerun: fail", "did not build", ...), and
#      OUT/<mpi>-<lib>/
#      with runtests' logs and JUnit files, and failures/<test>.txt with each failure's
#      output. Then prints (and writes to OUT/summary.txt) per MPI the tests passed over
#      UCX 1.13 and over Rucx, the regressions (pass over UCX 1.13, fail over Rucx), and the
#      tests that fail over UCX 1.13 as well. Columns not run this time are taken from
#      earlier results in OUT, if there.
#
# Exit status: 0, or 1 if there is a regression, or 2 when the suite could not run.
#
# Needs: mpich libmpich-dev openmpi-bin libopenmpi-dev libucx0 (Debian bookworm), gcc, make,
# perl, curl (only to download), xz-utils. Runs as root (OpenMPI is told to allow it).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

# MPICH 4.0.2 as Debian bookworm ships it (its test suite matches the installed MPICH).
tarball_url=http://deb.debian.org/debian/pool/main/m/mpich/mpich_4.0.2.orig.tar.xz
tarball_sha256=b27039f964afeb6b8a3e009c56b441cbe368c26d6d6476ad3bb7190996875860
top=mpich-4.0.2

all_dirs="basic pt2pt datatype rma coll comm group attr info init errhan topo"
mpi_opt=both lib_opt=both dirs=$all_dirs ci=0 tests="" rucx_lib="" out="" timeout=180
maxnp=4 rerun=1
work=${RUCX_MPICH_WORK:-$HOME/.cache/rucx/mpich-suite}
cache=${RUCX_CACHE:-$HOME/.cache/rucx}

die() { echo "mpich-suite: $*" >&2; exit 2; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit "${1:-0}"; }

while [ $# -gt 0 ]; do
  case $1 in
    --mpi) mpi_opt=${2:?}; shift 2 ;;
    --lib) lib_opt=${2:?}; shift 2 ;;
    --dirs) dirs=${2:?}; shift 2 ;;
    --ci) ci=1; shift ;;
    --tests) tests=${2:?}; shift 2 ;;
    --rucx-lib) rucx_lib=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --timeout) timeout=${2:?}; shift 2 ;;
    --maxnp) maxnp=${2:?}; shift 2 ;;
    --no-rerun) rerun=0; shift ;;
    -h|--help) usage 0 ;;
    *) echo "mpich-suite: unknown argument $1" >&2; usage 2 >&2 ;;
  esac
done
case $mpi_opt in mpich|openmpi) mpis=$mpi_opt ;; both) mpis="mpich openmpi" ;; *) die "--mpi $mpi_opt" ;; esac
case $lib_opt in ucx|rucx) libs=$lib_opt ;; both) libs="ucx rucx" ;; *) die "--lib $lib_opt" ;; esac
out=${out:-$work/results}

# The selection (--tests, or --ci's list): "dir/prog" or "dir/prog:np" words.
if [ -z "$tests" ] && [ $ci = 1 ]; then
  tests=$(sed 's/#.*//' "$here/ci.list" | xargs)
fi
if [ -n "$tests" ]; then
  dirs=$(for t in $tests; do echo "${t%%/*}"; done | awk '!seen[$0]++' | xargs)
fi

for tool in perl make gcc tar xz sha256sum flock timeout ldd; do
  command -v $tool >/dev/null || die "$tool missing (apt-get install perl make gcc tar xz-utils coreutils util-linux libc-bin)"
done
perl -MTime::HiRes -e1 2>/dev/null || die "perl's Time::HiRes missing (apt-get install perl)"
for mpi in $mpis; do
  case $mpi in
    mpich) need="mpicc.mpich mpiexec.mpich" pkgs="mpich libmpich-dev" ;;
    openmpi) need="mpicc.openmpi mpirun.openmpi" pkgs="openmpi-bin libopenmpi-dev" ;;
  esac
  for tool in $need; do
    command -v "$tool" >/dev/null || die "$tool missing (apt-get install $pkgs libucx0)"
  done
done

mkdir -p "$work" "$out" "$cache"
# One suite at a time per work directory (builds and results are shared).
exec 9>"$work/.lock"
flock -n 9 || die "another suite.sh is running on $work"

# --- 1. The test suite's source ---------------------------------------------------------
tarball=$cache/mpich_4.0.2.orig.tar.xz
if [ ! -f "$tarball" ]; then
  command -v curl >/dev/null || die "curl missing (apt-get install curl) to download $tarball_url"
  echo "=== downloading $tarball_url"
  curl -fL --retry 3 -o "$tarball.part" "$tarball_url" || die "download of $tarball_url failed"
  mv "$tarball.part" "$tarball"
fi
echo "$tarball_sha256  $tarball" | sha256sum -c --quiet - >/dev/null 2>&1 ||
  die "$tarball: sha256 is not $tarball_sha256 (delete it to download again)"
src=$work/$top/test/mpi
if [ ! -f "$work/$top/.unpacked" ]; then
  echo "=== unpacking $top/test/mpi into $work"
  rm -rf "${work:?}/$top"
  tar -xJf "$tarball" -C "$work" "$top/test/mpi" "$top/confdb"
  touch "$work/$top/.unpacked"
fi

for dir in $dirs; do
  [ -d "$src/$dir" ] || die "no directory $dir in $top/test/mpi"
done

# --- 2. One configured build tree per MPI -----------------------------------------------
# --disable-fortran --disable-cxx: C tests only. MPICC (not only CC) must name the MPI's
# compiler: configure looks MPICC up itself and would otherwise take /usr/bin/mpicc, which
# is whichever MPI the alternatives system chose.
# OpenMPI: --enable-strictmpi, as MPICH's test/mpi/README says for other MPIs: entries
# marked strict=false (MPICH extensions, here the coll persistent-collective tests that
# need MPI 4.0's MPI_Bcast_init etc., which OpenMPI 4.1 lacks) are skipped, tests use only
# the MPI standard's predefined op/type pairs, and xfail entries (MPICH's known failures)
# run. -DOMPI_OMIT_MPI1_COMPAT_DECLS=0 lets OpenMPI's mpi.h declare the MPI-1 functions
# removed in MPI-3.0 (MPI_Type_hindexed, MPI_Address, ...) that libmpi.so.40 still
# exports and that dtpools (used by every test of pt2pt, rma, ...) and the *_oldapi tests
# call; without it they do not compile.
configure_args() {
  case $1 in
    mpich) echo "MPICC=$(command -v mpicc.mpich) CC=$(command -v mpicc.mpich) --disable-fortran --disable-cxx" ;;
    openmpi) echo "MPICC=$(command -v mpicc.openmpi) CC=$(command -v mpicc.openmpi) CPPFLAGS=-DOMPI_OMIT_MPI1_COMPAT_DECLS=0 --disable-fortran --disable-cxx --enable-strictmpi" ;;
  esac
}
libmpi_of() { case $1 in mpich) echo libmpich.so.12 ;; openmpi) echo libmpi.so.40 ;; esac; }

configure_mpi() {
  local mpi=$1 build=$work/build-$1 args
  args=$(configure_args "$mpi")
  if [ "$(cat "$build/.suite-configured" 2>/dev/null)" != "$args" ]; then
    echo "=== configuring test/mpi for $mpi in $build"
    rm -rf "$build"
    mkdir -p "$build"
    # shellcheck disable=SC2086 # the words of args are separate arguments
    (cd "$build" && "$src/configure" $args) >"$work/configure-$mpi.log" 2>&1 ||
      { tail -n 30 "$work/configure-$mpi.log"; die "configure for $mpi failed (log: $work/configure-$mpi.log)"; }
    echo "$args" >"$build/.suite-configured"
  fi
}

# --- 3. The test lists -------------------------------------------------------------------
# Writes BUILD/DIR/testlist.rucx-suite: the entries of DIR's own testlist (generated by
# configure in the build tree from testlist.in, or the source's plain testlist) with
# np <= maxnp (an entry without np runs on runtests' default, 2), and with a selection, only
# the selected. Prints the number of entries.
make_list() {
  local mpi=$1 dir=$2 build=$work/build-$1 from sel=""
  if [ "$dir" = basic ]; then
    from=$here/basic.testlist
  elif [ -f "$build/$dir/testlist" ]; then
    from=$build/$dir/testlist
  elif [ -f "$src/$dir/testlist" ]; then
    from=$src/$dir/testlist
  else
    die "no testlist for $dir"
  fi
  if [ -n "$tests" ]; then
    sel=$(for t in $tests; do [ "${t%%/*}" = "$dir" ] && echo "${t#*/}"; done | xargs)
  fi
  awk -v maxnp="$maxnp" -v sel="$sel" '
    BEGIN { n = split(sel, s, " "); for (i = 1; i <= n; i++) want[s[i]] = 1 }
    { sub(/#.*/, "") }
    NF == 0 || /^[ \t]*!/ { next }
    {
      np = ($2 ~ /^[0-9]+$/) ? $2 : 2
      if (np > maxnp) next
      if (sel != "" && !want[$1] && !want[$1 ":" np]) next
      print
    }' "$from" >"$build/$dir/testlist.rucx-suite"
  wc -l <"$build/$dir/testlist.rucx-suite"
}

# --- 4. The runs ---------------------------------------------------------------------------
# Rucx's library, copied (a rebuild during the run must not change it under the tests).
snapshot_rucx() {
  if [ -z "$rucx_lib" ]; then
    rucx_lib=$root/target/debug/rucx-pkg/lib
    [ -e "$root/target/release/rucx-pkg/lib/libucp.so.0" ] && rucx_lib=$root/target/release/rucx-pkg/lib
  fi
  [ -e "$rucx_lib/libucp.so.0" ] ||
    die "no libucp.so.0 in $rucx_lib (cargo build -p rucx-bindings-c && bash bindings-c/gen-pc.sh debug)"
  local so
  so=$(readlink -f "$rucx_lib/libucp.so.0")
  rm -rf "$out/rucx-lib"
  mkdir -p "$out/rucx-lib"
  cp "$so" "$out/rucx-lib/librucx_bindings_c.so"
  for l in ucp ucs ucm uct; do ln -s librucx_bindings_c.so "$out/rucx-lib/lib$l.so.0"; done
  {
    echo "copied from $so ($(date -r "$so" '+%Y-%m-%d %H:%M:%S'))"
    sha256sum "$out/rucx-lib/librucx_bindings_c.so"
    git -C "$root" log -1 --format='the checkout was at %H (%cd) when it was copied' 2>/dev/null || true
  } >"$out/rucx-lib/ORIGIN"
  echo "=== Rucx: $(head -n 1 "$out/rucx-lib/ORIGIN")"
}

# The environment of one column: which MPI and library mpiexec.sh uses, runtests' settings.
column_env() {
  export RUCX_SUITE_MPI=$1 RUCX_SUITE_LIB=$2 RUCX_SUITE_LIBDIR=$out/rucx-lib
  export MPITEST_TIMEOUT=$timeout
  # Keep the built programs: the second library's column reuses them.
  export MPITEST_CLEANUP=0
  # runtests skips tests annotated with more memory (mem=GB) than this (its default: 20).
  MPITEST_MEMORY_TOTAL=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo)
  export MPITEST_MEMORY_TOTAL
  unset RUCX_ANNOUNCE
}

# One run of basic/simple on 2 ranks with RUCX_ANNOUNCE=1: Rucx's library must announce
# itself in both processes (lib rucx) or in none (lib ucx). It also checks that the build
# tree's programs link the right MPI.
check_library() {
  local mpi=$1 lib=$2 build=$work/build-$1 outp n
  make -C "$build/basic" simple >"$out/$mpi-$lib/check-build.log" 2>&1 ||
    die "building basic/simple for $mpi failed (log: $out/$mpi-$lib/check-build.log)"
  [[ $(ldd "$build/basic/simple") == *"$(libmpi_of "$mpi")"* ]] ||
    die "$build/basic/simple does not link $(libmpi_of "$mpi"): wrong compiler in $build"
  outp=$(cd "$build/basic" && RUCX_ANNOUNCE=1 MPIEXEC_TIMEOUT=120 "$here/mpiexec.sh" -n 2 ./simple 2>&1) || true
  n=$( (grep -o 'libucp.so.0 (Rucx [^)]*) serving pid [0-9]*' <<<"$outp" || true) | sort -u | wc -l)
  if [ "$lib" = rucx ] && [ "$n" -ne 2 ]; then
    printf '%s\n' "$outp" >&2
    die "$mpi over Rucx: $n of 2 processes announced Rucx's library"
  elif [ "$lib" = ucx ] && [ "$n" -ne 0 ]; then
    printf '%s\n' "$outp" >&2
    die "$mpi over UCX 1.13: Rucx's library was loaded"
  fi
  echo "$mpi over $lib: sample run checked ($n processes announced Rucx)"
}

# runtests on one directory's list LISTNAME (in BUILD/DIR), JUnit output to JUNIT.
runtests_on() {
  local mpi=$1 dir=$2 listname=$3 junit=$4 log=$5
  (cd "$work/build-$mpi" &&
    ./runtests -srcdir="$src" -tests="$listname" -testdirs="$dir" \
      -mpiexec="$here/mpiexec.sh" -junitfile="$junit") </dev/null >"$log" 2>&1 || true
}

fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

run_column() {
  local mpi=$1 lib=$2 col=$out/$1-$2 start dir n line name np st t st2 note
  local build=$work/build-$1
  rm -rf "$col" "$out/$mpi-$lib.tsv" "$out/$mpi-$lib.seconds"
  mkdir -p "$col/failures"
  column_env "$mpi" "$lib"
  check_library "$mpi" "$lib"
  start=$SECONDS
  : >"$col/results.tsv"
  : >"$col/known-failures"
  if [ "$lib" = rucx ] && [ -f "$out/$mpi-ucx.tsv" ]; then
    awk -F'\t' '$3 != "pass" { print $1 "\t" $2 }' "$out/$mpi-ucx.tsv" >"$col/known-failures"
  fi
  for dir in $dirs; do
    n=$(make_list "$mpi" "$dir")
    [ "$n" -gt 0 ] || continue
    local dstart=$SECONDS
    runtests_on "$mpi" "$dir" testlist.rucx-suite "$col/$dir.junit.xml" "$col/$dir.log"
    perl "$here/junit2tsv.pl" "$dir" "$build/$dir/testlist.rucx-suite" "$col/$dir.junit.xml" \
      "$col/failures" >"$col/$dir.first.tsv"
    # Each failure again, alone (under less load: a flake passes now); over Rucx, not those
    # that fail over UCX 1.13 too (no regression either way). A program that did not build
    # counts as failed, and is not rerun.
    : >"$col/$dir.tsv"
    while IFS=$'\t' read -r -u 3 name np st t line; do
      note=""
      [ "$st" = nobuild ] && { st=fail; note="did not build"; }
      if [ $rerun = 1 ] && [ -z "$note" ] &&
        { [ "$st" = fail ] || [ "$st" = timeout ] || [ "$st" = notrun ]; } &&
        ! grep -qxF "$name"$'\t'"$np" "$col/known-failures"; then
        printf '%s\n' "$line" >"$build/$dir/testlist.rucx-rerun"
        mkdir -p "$col/failures-rerun"
        runtests_on "$mpi" "$dir" testlist.rucx-rerun "$col/rerun.junit.xml" "$col/rerun.log"
        cat "$col/rerun.log" >>"$col/$dir.rerun.log"
        st2=$(perl "$here/junit2tsv.pl" "$dir" "$build/$dir/testlist.rucx-rerun" \
          "$col/rerun.junit.xml" "$col/failures-rerun" | cut -f3)
        if [ "$st2" = pass ]; then
          note="flaky (first run: $st)"
        else
          note="rerun: $st2"
        fi
        case $st2 in notrun|nobuild|'') st2=fail ;; esac
        st=$st2
      fi
      [ "$st" = notrun ] && { st=fail; note="not run${note:+, $note}"; }
      [ "$st" = skip ] && continue
      printf '%s\t%s\t%s\t%s\n' "$name" "$np" "$st" "$note" >>"$col/$dir.tsv"
    done 3<"$col/$dir.first.tsv"
    cat "$col/$dir.tsv" >>"$col/results.tsv"
    awk -F'\t' -v d="$dir" -v col="$mpi/$lib" -v skipped="$(grep -c $'\tskip\t' "$col/$dir.first.tsv" || true)" \
      -v took="$(fmt_time $((SECONDS - dstart)))" '
      { n[$3]++; if ($4 ~ /^flaky/) f++ }
      END { printf "  %-13s %-8s %3d pass, %3d fail, %3d timeout (%d flaky, %d skipped) %s\n",
            col, d, n["pass"], n["fail"], n["timeout"], f, skipped, took }' "$col/$dir.tsv"
  done
  mv "$col/results.tsv" "$out/$mpi-$lib.tsv"
  echo $((SECONDS - start)) >"$out/$mpi-$lib.seconds"
  echo "$mpi over $lib: $(fmt_time $((SECONDS - start)))"
}

echo "=== MPICH test suite ($top test/mpi), np <= $maxnp, timeout ${timeout}s: mpi $mpis, lib $libs"
echo "    dirs: $dirs${tests:+ (tests: $tests)}"
for lib in $libs; do
  [ "$lib" = rucx ] && snapshot_rucx
done
for mpi in $mpis; do
  configure_mpi "$mpi"
  for lib in $libs; do
    run_column "$mpi" "$lib"
  done
done

# --- 5. The comparison ------------------------------------------------------------------
echo
rc=0
# shellcheck disable=SC2086 # mpis is a list of words
perl "$here/compare.pl" "$out" $mpis >"$out/summary.txt" || rc=1
cat "$out/summary.txt"
echo "results: $out"
exit $rc
