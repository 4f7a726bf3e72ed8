#!/usr/bin/env bash
# Faces, the nearest-neighbour benchmark of "Stream-triggered MPI", over Rucx's
# stream-triggered queues: baseline (stream synchronize, then tag send/receive) against the
# queue with stream memory operations, trigger kernels, a mix of the two, a progress
# thread, and receives posted an iteration ahead (with and without the thread). Every variant is checked against a CPU reference before it is timed. Run on the
# GPU machine from the repository root, with the binaries contrib/gpu/pack.sh built:
#
#   bash contrib/bench/faces.sh [BIN] [extra rucx-faces options]
#
# Decompositions: 1D with 2 and 4 processes and 3D 2x2x2 with 8, on one GPU and on two
# (where there are two); then the same under MPS (several processes sharing a GPU without
# time-slicing) where nvidia-cuda-mps-control exists. Needs nvcc (the kernels in
# contrib/bench/faces/faces.cu are compiled to PTX here; the driver JIT-compiles them).
# Defaults: block 64^3, work 500, 200 iterations x 3 interleaved rounds.
#   FACES_ROUNDS=7                     more rounds
#   FACES_CASES="2,2,2:2 2,1,1:2"      only these decompositions (grid:GPUs)
#   FACES_MPS=only|no                  only the MPS sweep, or none of it
set -euo pipefail
BIN=${1:-.gpu/bin}
shift || true
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
dir=$(mktemp -d)
"$NVCC" -ptx -arch=sm_80 contrib/bench/faces/faces.cu -o "$dir/faces.ptx"
ngpu=$("$BIN/rucx-info" -d | grep -c '^# GPU cuda:' || true)
nvidia-smi --query-gpu=name --format=csv,noheader | head -n 2
run() {
  echo "=== rucx-faces $*"
  timeout 300 "$BIN/rucx-faces" --ptx "$dir/faces.ptx" --work 500 --iters 200 \
    --rounds "${FACES_ROUNDS:-3}" "$@" |
    grep -v '^faces:'
}
sweep() {
  if [ -n "${FACES_CASES:-}" ]; then
    for c in $FACES_CASES; do
      if [ "${c#*:}" -gt "$ngpu" ]; then
        echo "=== $c: SKIPPED (${ngpu} GPU(s) here)"
        continue
      fi
      run --grid "${c%:*}" --gpus "${c#*:}" "$@"
    done
    return
  fi
  for g in 1 2; do
    if [ "$g" -gt "$ngpu" ]; then
      echo "=== two-GPU runs: SKIPPED (one GPU here)"
      break
    fi
    run --grid 2,1,1 --gpus "$g" "$@"
    run --grid 4,1,1 --gpus "$g" "$@"
    run --grid 2,2,2 --gpus "$g" "$@"
  done
}
if [ "${FACES_MPS:-}" != only ]; then
  echo "##### without MPS"
  sweep "$@"
fi
if [ "${FACES_MPS:-}" = no ]; then
  :
elif command -v nvidia-cuda-mps-control >/dev/null; then
  export CUDA_MPS_PIPE_DIRECTORY=$dir/mps CUDA_MPS_LOG_DIRECTORY=$dir/mpslog
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  if nvidia-cuda-mps-control -d; then
    sleep 1
    echo "##### under MPS"
    sweep "$@"
    echo quit | nvidia-cuda-mps-control
  fi
else
  echo "##### under MPS: SKIPPED (no nvidia-cuda-mps-control)"
fi
rm -rf "$dir"
