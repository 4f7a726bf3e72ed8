#!/usr/bin/env bash
# UCXX (the Python bindings Dask and RAPIDS use) over Rucx, judged by UCXX's own tests.
#
#   contrib/python/ucxx-suite.sh [--ci] [--lib DIR] [--src DIR] [--out DIR] [PYTEST_ARGS...]
#
# Installs the pinned wheels (ucxx-cu12, which brings its own UCX, distributed-ucxx-cu12,
# dask, pytest) into a virtual environment under ${RUCX_PY_VENV:-$HOME/.cache/rucx/venv-ucxx}
# on first use, then:
#
#   --ci   runs a short UCXX smoke test (contrib/python/ucxx_smoke.py) over Rucx only:
#          what the test suite runs.
#   --dask runs contrib/python/dask_ucx.py (a Dask cluster with protocol="ucx" on host
#          memory, a few array operations checked against NumPy) over Rucx, RUNS times
#          (default 10; RUCX_DASK_RUNS), and prints how many passed; every run must
#          pass. The test suite runs it three times.
#   else   runs UCXX's host-memory tests (python/ucxx/ucxx/_lib/tests and _lib_async/tests
#          of the rapidsai/ucxx source: --src DIR, or RUCX_UCXX_SRC, or the snapshot a
#          developer fetched into /work/.mirror/rapidsai+ucxx) file by file, over the UCX
#          the wheel bundles and over Rucx, and prints per file how many passed on each;
#          then lists every test that passed on the bundled UCX and not on Rucx. Exits 1
#          if there is one.
#
# Rucx is put under the bindings by RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true with Rucx's
# library names first on LD_LIBRARY_PATH (--lib DIR: default target/release/rucx-pkg/lib,
# else target/debug/rucx-pkg/lib, made by bindings-c/gen-pc.sh). UCXX's tests are not in
# its wheels and GitHub is out of reach of the test machines, so the suite's own run is the
# --ci one; the full comparison is for a developer with the source (docs/python.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
ci=0 lib="" src=${RUCX_UCXX_SRC:-} out=${RUCX_UCXX_OUT:-/tmp/rucx-ucxx}
while [ $# -gt 0 ]; do
  case $1 in
    --ci) ci=1; shift ;;
    --dask) ci=2; shift ;;
    --lib) lib=$2; shift 2 ;;
    --src) src=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) break ;;
  esac
done
venv=${RUCX_PY_VENV:-$HOME/.cache/rucx/venv-ucxx}
pins=(ucxx-cu12==0.52.0 distributed-ucxx-cu12==0.52.0 "dask[array]==2026.7.1"
      distributed==2026.7.1 pytest pytest-asyncio numpy)
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import ucxx, distributed_ucxx, pytest" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
fi
py=$venv/bin/python

if [ -z "$lib" ]; then
  for p in release debug; do
    if [ -f "target/$p/librucx_bindings_c.so" ]; then
      lib=$(bash bindings-c/gen-pc.sh "$p")/lib
      break
    fi
  done
fi
[ -n "$lib" ] && [ -e "$lib/libucp.so" ] || { echo "ucxx-suite: no Rucx library (build bindings-c, or --lib DIR)" >&2; exit 2; }
rucx_env=(env RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY=true LD_LIBRARY_PATH="$lib")

if [ $ci = 1 ]; then
  "${rucx_env[@]}" RUCX_ANNOUNCE=1 timeout 300 "$py" contrib/python/ucxx_smoke.py
  exit 0
fi
if [ $ci = 2 ]; then
  runs=${RUCX_DASK_RUNS:-10} ok=0
  for i in $(seq 1 "$runs"); do
    if "${rucx_env[@]}" timeout 300 "$py" contrib/python/dask_ucx.py; then
      ok=$((ok + 1))
    else
      echo "dask_ucx: run $i failed (exit $?)"
    fi
  done
  echo "dask_ucx: $ok of $runs runs passed"
  [ "$ok" = "$runs" ]
  exit
fi

# UCXX's tests, from a source tree or the fetched snapshot.
mkdir -p "$out"
tests=$out/tests
rm -rf "$tests"
mkdir -p "$tests"
if [ -n "$src" ]; then
  cp -r "$src/python/ucxx/ucxx/_lib/tests" "$tests/lib_tests"
  cp -r "$src/python/ucxx/ucxx/_lib_async/tests" "$tests/async_tests"
elif [ -d /work/.mirror/rapidsai+ucxx ]; then
  g=$(find /work/.mirror/rapidsai+ucxx -maxdepth 2 -name HEAD -printf '%h\n' | head -1)
  git --git-dir="$g" archive HEAD python/ucxx/ucxx/_lib/tests python/ucxx/ucxx/_lib_async/tests |
    tar -x -C "$tests"
  mv "$tests/python/ucxx/ucxx/_lib/tests" "$tests/lib_tests"
  mv "$tests/python/ucxx/ucxx/_lib_async/tests" "$tests/async_tests"
  rm -rf "$tests/python"
else
  echo "ucxx-suite: no UCXX source (--src DIR or RUCX_UCXX_SRC): run with --ci" >&2
  exit 2
fi

# run LABEL ENV... : every test file, with a junit report each.
run() {
  local label=$1
  shift
  for f in "$tests"/lib_tests/test_*.py "$tests"/async_tests/test_*.py; do
    local name
    name=$(basename "$(dirname "$f")")-$(basename "$f" .py)
    (cd "$tests" && "$@" timeout "${RUCX_UCXX_TIMEOUT:-600}" "$py" -m pytest --import-mode=append \
       -p no:cacheprovider -o asyncio_mode=auto -q --junitxml="$out/$label-$name.xml" "$f" \
       >"$out/$label-$name.log" 2>&1) || true
    echo "# $label $name done" >&2
  done
}
run ucx env -u RAPIDS_LIBUCX_PREFER_SYSTEM_LIBRARY
run rucx "${rucx_env[@]}"

"$py" - "$out" <<'EOF'
import glob, os, sys
import xml.etree.ElementTree as ET
out = sys.argv[1]
def outcomes(label):
    res = {}
    for f in sorted(glob.glob(os.path.join(out, f"{label}-*.xml"))):
        name = os.path.basename(f)[len(label) + 1:-4]
        try:
            root = ET.parse(f).getroot()
        except ET.ParseError:
            continue
        for tc in root.iter("testcase"):
            t = f"{name}::{tc.get('name')}"
            kids = {c.tag for c in tc}
            res[t] = ("skipped" if "skipped" in kids else
                      "failed" if kids & {"failure", "error"} else "passed")
    return res
ucx, rucx = outcomes("ucx"), outcomes("rucx")
files = sorted({t.split("::")[0] for t in ucx} | {t.split("::")[0] for t in rucx})
print(f"{'file':42} {'ucx passed':>10} {'rucx passed':>11} {'run':>5}")
for f in files:
    n = [t for t in ucx if t.startswith(f + "::") and ucx[t] != "skipped"]
    pu = sum(ucx[t] == "passed" for t in n)
    pr = sum(rucx.get(t) == "passed" for t in n)
    print(f"{f:42} {pu:>10} {pr:>11} {len(n):>5}")
lost = [t for t in ucx if ucx[t] == "passed" and rucx.get(t) != "passed"]
tot_u = sum(v == "passed" for v in ucx.values())
tot_r = sum(rucx.get(t) == "passed" for t in ucx if ucx[t] == "passed")
print(f"\npassed on the bundled UCX: {tot_u}; of those, on Rucx: {tot_r}")
if lost:
    print("passed on the bundled UCX, not on Rucx:")
    for t in lost:
        print(f"  {t} ({rucx.get(t, 'not run')})")
sys.exit(1 if lost else 0)
EOF
