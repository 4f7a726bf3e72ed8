#!/usr/bin/env bash
# Charm++'s own GPU Jacobi3D (examples/charm++/cuda/gpudirect/jacobi3d) over Rucx and over
# UCX 1.22, on the GPU machine: builds Charm++ from the vendored source with its `cuda`
# option against Rucx's headers and library (as contrib/charm/test.sh does on CI), builds
# the example with nvcc, and runs it with host staging (default) and GPU-direct zero copy
# (-d) on 2 and 4 PEs, over each library (the same binary; LD_LIBRARY_PATH picks the
# library). Needs the Charm++ tarball (CHARM_TARBALL, default .gpu/charm-src.tar.gz), the
# packed binaries (.gpu/bin, .gpu/ucx122: contrib/gpu/pack.sh), nvcc, PMIx headers and
# OpenMPI's mpirun.
#
#   bash contrib/charm/gpu-jacobi3d.sh [GRID] [ITERS] [ROUNDS]
#
# ROUNDS (default 1) alternate the libraries; with MPS=1 the runs are repeated under MPS
# (PEs sharing the GPU without time-slicing) where nvidia-cuda-mps-control exists; with
# RUCX_STATS=1 each Rucx process prints its protocol counters at the end.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
grid=${1:-192}
iters=${2:-100}
rounds=${3:-1}
tarball=${CHARM_TARBALL:-.gpu/charm-src.tar.gz}
BIN=$root/.gpu/bin
U=$root/.gpu/ucx122
pmix=${PMIX_DIR:-/usr/lib/x86_64-linux-gnu/pmix2}
export CUDA_DIR=${CUDA_DIR:-/usr/local/cuda}
export PATH=$CUDA_DIR/bin:$PATH
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -f "$tarball" ] || { echo "gpu-jacobi3d: SKIPPED (no Charm++ tarball at $tarball)"; exit 0; }
command -v nvcc >/dev/null || { echo "gpu-jacobi3d: SKIPPED (no nvcc)"; exit 0; }
work=$(mktemp -d)
lib=$work/lib
mkdir -p "$lib"
for l in ucp ucs ucm uct; do
  ln -sf "$BIN/libucp.so.0" "$lib/lib$l.so"
  ln -sf "$BIN/libucp.so.0" "$lib/lib$l.so.0"
done
tar xzf "$tarball" -C "$work"
echo "=== building Charm++ (ucx-linux-x86_64 openpmix cuda) against Rucx's headers"
t0=$(date +%s)
if ! (cd "$work/charm" && timeout 480 ./build charm++ ucx-linux-x86_64 openpmix cuda \
  --with-production -j"$(nproc)" --incdir="$root/bindings-c/include" --libdir="$lib" \
  --incdir="$pmix/include" --libdir="$pmix/lib") >"$work/build.log" 2>&1; then
  grep -n -i -E "error|fatal" "$work/build.log" | head -n 30
  tail -n 30 "$work/build.log"
  echo "gpu-jacobi3d: FAILED (Charm++ with cuda did not build)"
  exit 1
fi
echo "built in $(($(date +%s) - t0)) s"
ex=$(ls -d "$work"/charm/ucx-linux-x86_64*/examples/charm++/cuda/gpudirect/jacobi3d | head -n 1)
if ! make -C "$ex" >"$work/ex.log" 2>&1; then
  tail -n 30 "$work/ex.log"
  echo "gpu-jacobi3d: FAILED (the example did not build)"
  exit 1
fi
status=0
sweep() {
  for p in 2 4; do
    for d in "" -d; do
      for r in $(seq "$rounds"); do
        for which in rucx ucx122; do
          if [ "$which" = rucx ]; then
            envs=(LD_LIBRARY_PATH="$lib")
          else
            [ -d "$U/lib" ] || continue
            envs=(LD_LIBRARY_PATH="$U/lib" UCX_MODULE_DIR="$U/lib/ucx")
          fi
          out=$(cd "$ex" && env "${envs[@]}" timeout 180 ./charmrun +p"$p" ./jacobi3d \
            -x "$grid" -y "$grid" -z "$grid" -i "$iters" $d 2>&1)
          avg=$(grep -o "Average iteration time: [0-9.]* us" <<<"$out")
          echo "jacobi3d +p$p ${d:-(staged)} on $which: ${avg:-FAILED}"
          # RUCX_STATS=1: each Rucx process's protocol counters.
          grep "worker statistics" <<<"$out" || true
          if [ -z "$avg" ]; then
            tail -n 15 <<<"$out"
            status=1
          fi
        done
      done
    done
  done
}
echo "##### without MPS"
sweep
if [ "${MPS:-0}" = 1 ] && command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$work/mps CUDA_MPS_LOG_DIRECTORY=$work/mpslog
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    sleep 1
    echo "##### under MPS"
    sweep
    echo quit | nvidia-cuda-mps-control
  fi
fi
rm -rf "$work"
exit $status
