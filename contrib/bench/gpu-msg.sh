#!/usr/bin/env bash
# Device messaging two ways (contrib/bench/gpu-msg.c), on the GPU machine: Charm++'s GPU
# Messaging path (a host metadata message, then the receive posted on the device buffer)
# and Rucx's channels, host and GPU memory, 8 B to 4 MiB, OSU latency shape. Rucx runs both;
# UCX 1.22 (the wheel's libraries, packed by contrib/gpu/pack.sh into .gpu/ucx122) runs the
# metadata path, the same binary on its libucp.so.0 (channels are Rucx's: skipped there).
# ROUNDS alternating rounds (default 1); processes pinned to CPUs 2 and 4.
#
#   bash contrib/bench/gpu-msg.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-1}
BIN=${BIN:-.gpu/bin}
U=.gpu/ucx122
exe=/tmp/gpu-msg
cc -O2 -Ibindings-c/include -o "$exe" contrib/bench/gpu-msg.c -L"$BIN" -l:libucp.so.0 \
  -Wl,--enable-new-dtags,-rpath,"$PWD/$BIN"
for r in $(seq "$rounds"); do
  echo "##### round $r: Rucx"
  timeout 600 taskset -c 2,4 "$exe"
  if [ -d "$U/lib" ]; then
    echo "##### round $r: UCX 1.22"
    LD_LIBRARY_PATH="$PWD/$U/lib" UCX_MODULE_DIR="$PWD/$U/lib/ucx" timeout 600 taskset -c 2,4 "$exe"
  else
    echo "##### UCX 1.22: SKIPPED (not packed: run contrib/bench/ucx-env.sh, then contrib/gpu/pack.sh)"
  fi
done
