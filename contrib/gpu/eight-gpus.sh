#!/usr/bin/env bash
# Everything the eight-GPU runs need, in one call on a GPU machine of the device tool
# (4 or 8 GPUs of one host), from the repository root, with what contrib/gpu/pack.sh
# built here (.gpu/bin, .gpu/ucx122):
#
#   bash contrib/gpu/eight-gpus.sh [OUT]        (OUT: where logs go, default $OUT or /tmp)
#
# 1. The GPU suite (contrib/gpu/test.sh) on this host.
# 2. An all-to-all of GPU buffers (contrib/gpu/alltoall.cu through the machine's OpenMPI,
#    pml ucx), one process per GPU, 8 B to 64 MiB, every byte checked: over Rucx, then
#    over UCX 1.22 (the wheel, CUDA transports), the same binary.
# 3. PyTorch CUDA tensors between every pair of GPUs through mpi4py
#    (contrib/python/torch_p2p.py), 4 B to 256 MiB, over Rucx and over UCX 1.22.
# 4. Faces (contrib/bench/faces.sh): 3D 2x2x2 over 8 GPUs, 1D over 4 and 8, one process
#    per GPU (where there are that many).
# 5. Jacobi3D (contrib/jacobi3d/run.sh) and Charm++'s GPU Jacobi3D
#    (contrib/charm/gpu-jacobi3d.sh) as those scripts run them on this host.
# On a host with fewer GPUs every part runs with what there is and says so.
# PARTS="2 3" runs only those parts; NP=N runs parts 2 and 3 with N processes (more than
# the GPUs: several share one, a check of the scripts on a smaller host).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-/tmp}}
mkdir -p "$out"
BIN=.gpu/bin
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
echo "# $ngpu GPUs: $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | tr '\n' ' ')"
nvidia-smi topo -m > "$out/topo.txt" 2>&1 || true
np=${NP:-$ngpu}
[ "$np" -gt 8 ] && np=8
parts=" ${PARTS:-1 2 3 4 5} "
part() { [[ $parts == *" $1 "* ]]; }

# The machine's OpenMPI (not CUDA-aware) and its compiler wrapper.
mpicc=$(command -v mpicc || true)
mpirun_=$(command -v mpirun || true)
mpi_inc=$($mpicc --showme:incdirs 2>/dev/null | awk '{print $1}')
mpi_lib=$($mpicc --showme:libdirs 2>/dev/null | awk '{print $1}')
rucx_lib=$PWD/.gpu/rucx-lib
mkdir -p "$rucx_lib"
for n in ucp ucs ucm uct; do ln -sf "$PWD/$BIN/libucp.so.0" "$rucx_lib/lib$n.so.0"; done
u122=$PWD/.gpu/ucx122
mpi_flags=(--allow-run-as-root --oversubscribe --bind-to none --mca pml ucx
           --mca pml_ucx_tls any --mca pml_ucx_devices any --mca btl self)

if part 1; then
echo "=== 1. GPU suite"
bash contrib/gpu/test.sh "$BIN" > "$out/gpu-suite.log" 2>&1
tail -n 1 "$out/gpu-suite.log"
fi

if part 2; then
echo "=== 2. all-to-all, $np processes"
if [ -n "$mpicc" ] && nvcc -O2 -o /tmp/alltoall contrib/gpu/alltoall.cu -I"$mpi_inc" -L"$mpi_lib" -lmpi \
     > "$out/alltoall-build.log" 2>&1; then
  for lib in rucx ucx122; do
    if [ $lib = rucx ]; then env=(-x LD_LIBRARY_PATH="$rucx_lib"); else
      env=(-x LD_LIBRARY_PATH="$u122/lib" -x UCX_MODULE_DIR="$u122/lib/ucx"); fi
    timeout 900 "$mpirun_" "${mpi_flags[@]}" -np "$np" "${env[@]}" /tmp/alltoall \
      > "$out/alltoall-$lib.log" 2>&1
    echo "# $lib"; grep -E "^alltoall" "$out/alltoall-$lib.log"
  done
else
  echo "alltoall: SKIPPED (no mpicc or nvcc; see $out/alltoall-build.log)"
fi
# The NVLink limit for concurrent peers, as the driver's copies measure it.
if nvcc -O2 -o /tmp/probe contrib/gpu/probe.cu -lcuda > /dev/null 2>&1; then
  /tmp/probe > "$out/probe.txt" 2>&1 || true
  grep -iE "peer|nvlink|GB/s" "$out/probe.txt" | head -n 20
fi
fi

if part 3; then
echo "=== 3. PyTorch tensors through mpi4py, $np processes"
# The interpreter that has torch, by its full path, and its search path: mpirun starts
# ranks with neither PATH's order nor PYTHONPATH unless told.
py=$(python3 -c "import torch, mpi4py, sys; print(sys.executable)" 2>/dev/null)
pyenv=(-x PATH)
[ -n "${PYTHONPATH:-}" ] && pyenv+=(-x PYTHONPATH)
if [ -n "$py" ]; then
  for lib in rucx ucx122; do
    if [ $lib = rucx ]; then env=(-x LD_LIBRARY_PATH="$rucx_lib"); else
      env=(-x LD_LIBRARY_PATH="$u122/lib" -x UCX_MODULE_DIR="$u122/lib/ucx"); fi
    timeout 1200 "$mpirun_" "${mpi_flags[@]}" -np "$np" "${env[@]}" "${pyenv[@]}" \
      "$py" contrib/python/torch_p2p.py > "$out/torch-$lib.log" 2>&1
    echo "# $lib: $(grep -c '^torch_p2p [0-9]' "$out/torch-$lib.log") pairs x sizes, $(tail -n 1 "$out/torch-$lib.log")"
  done
else
  echo "torch_p2p: SKIPPED (no torch or mpi4py)"
fi
fi

if part 4; then
echo "=== 4. Faces"
cases="2,1,1:2"
[ "$ngpu" -ge 4 ] && cases="$cases 4,1,1:4"
[ "$ngpu" -ge 8 ] && cases="$cases 8,1,1:8 2,2,2:8"
FACES_CASES="$cases" FACES_MPS=no bash contrib/bench/faces.sh "$BIN" > "$out/faces.log" 2>&1
tail -n 30 "$out/faces.log"
fi

if part 5; then
echo "=== 5. Jacobi3D"
bash contrib/jacobi3d/run.sh > "$out/jacobi3d.log" 2>&1
tail -n 20 "$out/jacobi3d.log"
if [ -f .gpu/charm-src.tar.gz ]; then
  bash contrib/charm/gpu-jacobi3d.sh > "$out/charm-jacobi3d.log" 2>&1
  tail -n 20 "$out/charm-jacobi3d.log"
else
  echo "Charm++ GPU Jacobi3D: SKIPPED (no .gpu/charm-src.tar.gz)"
fi
fi
