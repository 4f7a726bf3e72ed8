#!/usr/bin/env bash
# Charm++'s own pingpong benchmark (benchmarks/charm++/pingpong, 2 PEs) over Debian's
# UCX 1.13 and over Rucx, in alternating rounds; prints each variant's median round trip
# and the ratio Rucx / UCX.
#
#   bash contrib/bench/charm-pingpong.sh [ROUNDS] [charm-src.tar.gz]
#
# The Rucx build is contrib/charm/test.sh's (run it first); the UCX build is made here once
# (about 4 minutes) and cached beside it. UCX_TLS=posix,cma,self for both.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
rounds=${1:-5}
tarball=${2:-${RUCX_CHARM_TARBALL:-$root/../shared/vendor/charm-src.tar.gz}}
[ -f "$tarball" ] || { echo "no Charm++ tarball at $tarball"; exit 1; }
pmix=/usr/lib/x86_64-linux-gnu/pmix2
arch=ucx-linux-x86_64-openpmix
key=$( (sha256sum "$tarball"; find bindings-c/include -type f -print0 | sort -z |
  xargs -0 sha256sum) | sha256sum | cut -c1-16)
cache=${RUCX_CACHE:-$HOME/.cache/rucx}
ours=$cache/charm-$key/charm/$arch
[ -x "$ours/../bin/charmc" ] || { echo "run contrib/charm/test.sh first (no build at $ours)"; exit 1; }
ukey=$(sha256sum "$tarball" | cut -c1-16)
ucx=$cache/charm-ucx113-$ukey/charm/$arch
if [ ! -f "$cache/charm-ucx113-$ukey/built" ]; then
  echo "=== building Charm++ against Debian's UCX 1.13 in $cache/charm-ucx113-$ukey"
  rm -rf "$cache/charm-ucx113-$ukey"
  mkdir -p "$cache/charm-ucx113-$ukey"
  tar xzf "$tarball" -C "$cache/charm-ucx113-$ukey"
  (cd "$cache/charm-ucx113-$ukey/charm" &&
    ./build charm++ ucx-linux-x86_64 openpmix --with-production -j"$(nproc)" \
      --incdir="$pmix/include" --libdir="$pmix/lib") >"$cache/charm-ucx113-$ukey/build.log" 2>&1
  touch "$cache/charm-ucx113-$ukey/built"
fi
lib=$(bindings-c/gen-pc.sh release)/lib
for t in "$ours" "$ucx"; do make -s -C "$t/benchmarks/charm++/pingpong" >/dev/null; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_plm=isolated OMPI_MCA_btl=self
export UCX_TLS=posix,cma,self
out=$(mktemp -d)
# Over UCX 1.13 the program aborts at exit (an rcache assertion in ucp_cleanup) after
# printing its results: exit statuses are not the measure here, the printed times are.
run_ucx() {
  (cd "$ucx/benchmarks/charm++/pingpong" && env -u LD_LIBRARY_PATH mpirun -np 2 ./pingpong) \
    >"$out/ucx.$1" 2>&1 || echo "(round $1: the UCX run exited with status $?)"
}
run_rucx() {
  (cd "$ours/benchmarks/charm++/pingpong" && LD_LIBRARY_PATH=$lib mpirun -np 2 ./pingpong) \
    >"$out/rucx.$1" 2>&1 || echo "(round $1: the Rucx run exited with status $?)"
}
# The order within a round moves the figures on this VM (docs/benchmarks.md, method: the
# second run of a round is faster): odd rounds run UCX first, even rounds Rucx first, so
# the order favours each library in half the rounds.
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then run_ucx "$r"; run_rucx "$r"; else run_rucx "$r"; run_ucx "$r"; fi
done
python3 - "$out" "$rounds" <<'EOF'
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def read(lib):
    v = {}
    for r in range(1, rounds + 1):
        for m in re.finditer(r"Roundtrip time for (.*?) is ([0-9.]+) us", open(f"{out}/{lib}.{r}").read()):
            v.setdefault(m.group(1), []).append(float(m.group(2)))
    return v
u, o = read("ucx"), read("rucx")
print(f"{'variant':58} {'UCX 1.13':>9} {'Rucx':>9} {'ratio':>6} {'paired':>6}"
      f"  {'UCX min..max':>14} {'Rucx min..max':>14}   (µs, medians of {rounds})")
worst = 0
for k in u:
    if k in o and len(u[k]) == len(o[k]):
        a, b = statistics.median(u[k]), statistics.median(o[k])
        # The median of the per-round ratios: the two runs of a round share the VM's state.
        paired = statistics.median(y / x for x, y in zip(u[k], o[k]))
        worst = max(worst, b / a)
        print(f"{k:58} {a:9.2f} {b:9.2f} {b / a:6.2f} {paired:6.2f}"
              f"  {min(u[k]):6.2f}..{max(u[k]):<6.2f} {min(o[k]):6.2f}..{max(o[k]):<6.2f}")
print(f"worst ratio of medians {worst:.2f}")
EOF
rm -rf "$out"
