#!/usr/bin/env bash
# Charm++ as a conformance client of Rucx. Builds Charm++ (the source tarball given, by
# default the project's vendored snapshot) against an install of Rucx made by the top-level
# Makefile (`make install`, docs/install.md), as a user would: `./build ... --basedir=PREFIX`
# — no UCX headers or libraries involved — and runs Charm++'s own tests (`make test`,
# launched by its charmrun through OpenMPI's mpirun) with every UCX library name pointing
# at Rucx (the prefix's lib/ on LD_LIBRARY_PATH):
#   - benchmarks/charm++/pingpong on 1 and 2 PEs,
#   - tests/charm++/megatest on 1 to 4 PEs,
#   - the zero-copy API examples (examples/charm++/zerocopy: direct, entry-method,
#     broadcast and post APIs, large readonly), with and without +noCMAForZC;
#   - AMPI (built in the same tree): its tests in tests/ampi that pass over UCX 1.13 here,
#     under `setarch -R` (isomalloc migration needs the same addresses everywhere).
# Pass or fail is Charm++'s own (the exit status of its test target); the script also
# checks that no program needs a UCX library other than Rucx's soname and that every
# process announced Rucx.
#
#   bash contrib/charm/test.sh [path/to/charm-src.tar.gz]
#
# The Charm++ build (about 6 minutes on 2 cores, AMPI included) is cached under
# ~/.cache/rucx/, keyed by the tarball and Rucx's headers; Rucx's release build is installed
# into the prefix rucx/ inside that cache on every run. Needs g++, make, autoconf,
# automake, libtool, libpmix-dev and openmpi-bin (contrib/test-all.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
tarball=${1:-${RUCX_CHARM_TARBALL:-$root/../shared/vendor/charm-src.tar.gz}}
if [ ! -f "$tarball" ]; then
  echo "charm: SKIPPED (no Charm++ source tarball at $tarball)"
  exit 0
fi
pmix=/usr/lib/x86_64-linux-gnu/pmix2
for need in g++ make autoreconf aclocal readelf mpirun "$pmix/include/pmix.h"; do
  if ! command -v "$need" >/dev/null && [ ! -e "$need" ]; then
    echo "charm: FAILED ($need missing: apt-get install g++ make autoconf automake libtool binutils libpmix-dev openmpi-bin)"
    exit 1
  fi
done

# (The build target is part of the key: trees built for charm++ alone lack AMPI.)
key=$( (sha256sum "$tarball"; echo "target AMPI"; find bindings-c/include -type f -print0 | sort -z |
  xargs -0 sha256sum) | sha256sum | cut -c1-16)
cache=${RUCX_CACHE:-$HOME/.cache/rucx}/charm-$key
arch=ucx-linux-x86_64-openpmix
prefix=$cache/rucx
lib=$prefix/lib
# A cached tree is used only if it was configured against this prefix (trees cached before
# Charm++ was built against an install were configured against the source tree).
if [ -f "$cache/built" ] &&
  ! grep -qF -- "-I$prefix/include" "$cache/charm/$arch/include/conv-mach-pre.sh" 2>/dev/null; then
  rm -f "$cache/built"
fi
[ -f "$cache/built" ] || rm -rf "$cache"
mkdir -p "$cache"
# Rucx's release build (library, headers, pkg-config files; the tools are not needed),
# installed afresh on every run: the library changes with Rucx, while Charm++'s build
# depends only on the headers, which the key covers.
make -s -C "$root" install PREFIX="$prefix" PROFILE=release BINS= CARGO_FLAGS=-q >/dev/null || {
  echo "charm: FAILED (make install PREFIX=$prefix)"
  exit 1
}
if [ ! -f "$cache/built" ]; then
  echo "=== building Charm++ against Rucx installed in $prefix (a few minutes)"
  tar xzf "$tarball" -C "$cache"
  (cd "$cache/charm" &&
    ./build AMPI ucx-linux-x86_64 openpmix --with-production -j"$(nproc)" \
      --basedir="$prefix" \
      --incdir="$pmix/include" --libdir="$pmix/lib") >"$cache/build.log" 2>&1 || {
    tail -n 40 "$cache/build.log"
    echo "charm: FAILED (Charm++ did not build against Rucx's install; log: $cache/build.log)"
    exit 1
  }
  grep -qF -- "-I$prefix/include" "$cache/charm/$arch/include/conv-mach-pre.sh" || {
    echo "charm: FAILED (Charm++'s build did not record --basedir=$prefix)"
    exit 1
  }
  # Every UCX header Charm++'s machine layer includes, and every one those include, is in
  # the installed header set (searched first), so no header of an installed UCX is read.
  missing=$(cd "$cache/charm/src/arch/ucx" && cat ./*.C ./*.h "$prefix"/include/*/*/*.h \
    "$prefix"/include/*.h | grep -o '#include <uc[mpst]/[^>]*>' | sort -u |
    sed 's/#include <\(.*\)>/\1/' | while read -r h; do
      [ -f "$prefix/include/$h" ] || echo "$h"
    done)
  if [ -n "$missing" ]; then
    echo "charm: FAILED (headers Rucx does not ship: $missing)"
    exit 1
  fi
  touch "$cache/built"
fi
charm=$cache/charm/$arch
# Charm++'s CMake build makes AMPI's targets only when asked for the target AMPI (above,
# which includes charm++); this step checks that they are there and up to date.
if [ ! -f "$cache/ampi-built" ]; then
  echo "=== building AMPI in the same tree"
  make -C "$charm/tmp" AMPI -j"$(nproc)" >"$cache/ampi-build.log" 2>&1 || {
    tail -n 40 "$cache/ampi-build.log"
    echo "charm: FAILED (AMPI did not build; log: $cache/ampi-build.log)"
    exit 1
  }
  touch "$cache/ampi-built"
fi

# Charm++'s own tests (`make test`) launch through its charmrun, which calls mpirun with
# the environment set here: local launch, every UCX library name ours.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_plm=isolated OMPI_MCA_btl=self
export LD_LIBRARY_PATH=$lib UCX_TLS=${UCX_TLS:-posix,cma,self} RUCX_ANNOUNCE=1
pass=0 fail=0
failed=()
# check NAME DIR: builds DIR's programs, checks that they need no library but ours of the
# UCX names, and runs Charm++'s own `make test` there (its exit status is the verdict).
check() {
  local name=$1 dir=$2
  local wrap=()
  # AMPI migrates ranks with isomalloc, which needs the same addresses in every process.
  [ "${3:-}" = norandom ] && wrap=(setarch "$(uname -m)" -R)
  echo "=== $name"
  local log
  log=$(mktemp)
  if ! make -C "$charm/$dir" >"$log" 2>&1; then
    tail -n 20 "$log"
    fail=$((fail + 1))
    failed+=("$name (build)")
    rm -f "$log"
    return
  fi
  local foreign
  foreign=$(find "$charm/$dir" -type f -perm -u+x ! -name '*.sh' -exec sh -c \
    'readelf -d "$1" 2>/dev/null | grep NEEDED | grep -E "libuc[pmst]" | grep -v "libucp.so.0"' _ {} \; | head -n 3)
  if [ -n "$foreign" ]; then
    echo "  a program needs a UCX library that is not Rucx's soname: $foreign"
    fail=$((fail + 1))
    failed+=("$name (links UCX)")
    rm -f "$log"
    return
  fi
  local ok=0
  timeout 900 "${wrap[@]}" make -C "$charm/$dir" test >"$log" 2>&1 && ok=1
  # make itself, not a test, failing: "wait: No child processes" (seen once in the
  # zero-copy examples on 2026-12-07, their programs having passed; make lost track of
  # its child). That case runs again, once, and says so.
  if [ $ok = 0 ] && grep -q "wait: No child processes" "$log"; then
    echo "  make lost its child process (wait: No child processes); running the tests again"
    timeout 900 "${wrap[@]}" make -C "$charm/$dir" test >"$log" 2>&1 && ok=1
  fi
  if [ $ok = 1 ] && grep -q "serving pid" "$log"; then
    local runs
    runs=$(grep -c "^charmrun>" "$log" || true)
    echo "  passed: $runs runs, every process on Rucx ($(grep -c 'serving pid' "$log") announcements)"
    pass=$((pass + 1))
  else
    grep -v "serving pid" "$log" | tail -n 30
    fail=$((fail + 1))
    failed+=("$name")
  fi
  rm -f "$log"
}
check "pingpong (+p1, +p2)" benchmarks/charm++/pingpong
check "megatest (+p1 .. +p4)" tests/charm++/megatest
check "zero-copy API examples (with and without +noCMAForZC)" examples/charm++/zerocopy
# AMPI's tests that pass over Debian's UCX 1.13 here (all of tests/ampi but mpich-test,
# which is long, and chkpt and jacobi3d, whose test targets run nothing in this build).
for t in megampi datatype migration pmpi privatization exit fallreduce intercomm_coll \
  stacksize; do
  check "AMPI $t" "tests/ampi/$t" norandom
done
echo "charm suite: $pass passed, $fail failed${failed:+ (failed: ${failed[*]})}"
[ "$fail" -eq 0 ]
