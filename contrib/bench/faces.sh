#!/usr/bin/env bash
# Faces, the nearest-neighbour benchmark of "Stream-triggered MPI", over Rucx's
# stream-triggered queues: baseline (stream synchronize, then tag send/receive) against the
# queue with stream memory operations, with trigger kernels, and with a progress thread.
# Every variant is checked against a CPU reference before it is timed. Run on the GPU
# machine from the repository root, with the binaries contrib/gpu/pack.sh built:
#
#   bash contrib/bench/faces.sh [BIN] [extra rucx-faces options]
#
# Decompositions: 1D with 2 and 4 processes and 3D 2x2x2 with 8, on one GPU, and on two
# where there are two. Needs nvcc (the kernels in contrib/bench/faces/faces.cu are
# compiled to PTX here; the driver JIT-compiles them).
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
  timeout 300 "$BIN/rucx-faces" --ptx "$dir/faces.ptx" "$@"
}
for g in 1 2; do
  if [ "$g" -gt "$ngpu" ]; then
    echo "=== two-GPU runs: SKIPPED (one GPU here)"
    break
  fi
  run --grid 2,1,1 --gpus "$g" "$@"
  run --grid 4,1,1 --gpus "$g" "$@"
  run --grid 2,2,2 --gpus "$g" "$@"
done
rm -rf "$dir"
