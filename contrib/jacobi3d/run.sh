#!/usr/bin/env bash
# Jacobi3D on GPUs over Rucx (contrib/jacobi3d/jacobi3d.cu), on the GPU machine: builds the
# proxy with nvcc against the packed libucp.so.0 (contrib/gpu/pack.sh puts it in .gpu/bin)
# and runs GPU-direct and host-staged exchanges with 2, 4 and 8 processes on one GPU, and
# on two where there are two; then the same under MPS (processes sharing a GPU without
# time-slicing) where nvidia-cuda-mps-control exists. Every run checks its result
# against the CPU.
#
#   bash contrib/jacobi3d/run.sh [-n GRID] [-i ITERS] [-r ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
n=192
iters=100
rounds=1
while getopts "n:i:r:" o; do
  case $o in n) n=$OPTARG ;; i) iters=$OPTARG ;; r) rounds=$OPTARG ;; *) exit 2 ;; esac
done
BIN=${BIN:-.gpu/bin}
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ ! -x "$NVCC" ]; then
  echo "jacobi3d: skipped (no nvcc here)"
  exit 0
fi
exe=/tmp/jacobi3d
"$NVCC" -O2 -o "$exe" contrib/jacobi3d/jacobi3d.cu -Ibindings-c/include -L"$BIN" \
  -l:libucp.so.0 -Xlinker -rpath="$PWD/$BIN"
ngpu=$(nvidia-smi -L | grep -c '^GPU' || true)
status=0
sweep() {
  for g in 1 2; do
    if [ "$g" -gt "$ngpu" ]; then
      echo "=== two-GPU runs: SKIPPED (one GPU here)"
      break
    fi
    for p in 2 4 8; do
      for r in $(seq "$rounds"); do
        for m in direct staged; do
          timeout 300 "$exe" -p "$p" -g "$g" -n "$n" -i "$iters" -m "$m" || status=1
        done
      done
    done
  done
}
echo "##### without MPS"
sweep
if command -v nvidia-cuda-mps-control >/dev/null; then
  dir=$(mktemp -d)
  export CUDA_MPS_PIPE_DIRECTORY=$dir/mps CUDA_MPS_LOG_DIRECTORY=$dir/mpslog
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    sleep 1
    echo "##### under MPS"
    sweep
    echo quit | nvidia-cuda-mps-control
  fi
  rm -rf "$dir"
else
  echo "##### under MPS: SKIPPED (no nvidia-cuda-mps-control)"
fi
exit $status
