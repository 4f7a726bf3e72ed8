#!/usr/bin/env bash
# UCX 1.22 (the PyPI wheel libucx-cu13, CUDA transports) ucx_perftest on GPU buffers: the
# cases of the GPU memory issue's table, on one GPU and between GPU 0 and GPU 1.
#   contrib/gpu/ucx-baseline.sh UCX_ROOT      (UCX_ROOT holds bin/ucx_perftest and lib/)
set -uo pipefail
root=$1
export LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UCX_MODULE_DIR="$root/lib/ucx"
P="$root/bin/ucx_perftest"
port=13400
# case SRV_DEV CLI_DEV TEST SIZE ITERS
case_() {
  port=$((port + 1))
  local log
  log=$(mktemp)
  taskset -c 2 "$P" -p "$port" -a "cuda:$1" >"$log" 2>&1 &
  local srv=$! out=""
  for _ in $(seq 20); do
    sleep 0.5
    kill -0 "$srv" 2>/dev/null || break
    out=$(timeout 120 taskset -c 4 "$P" 127.0.0.1 -p "$port" -a "cuda:$2" -m cuda -t "$3" -s "$4" -n "$5" -f 2>&1) && break
  done
  wait "$srv" 2>/dev/null
  if ! grep -q "^ \+[0-9]\+ \+[0-9]" <<<"$out"; then echo "server log:"; tail -5 "$log"; fi
  rm -f "$log"
  local line
  line=$(echo "$out" | awk '/^ +[0-9]+ +[0-9]/ { v=$0 } END { print v }')
  echo "ucx122 gpu$1->gpu$2 $3 $4: $line"
  [ -n "$line" ] || echo "$out" | tail -5
}
for pair in "0 0" "0 1"; do
  case_ $pair tag_lat 8 2000
  case_ $pair tag_lat 1048576 1000
  case_ $pair tag_bw 67108864 200
  case_ $pair ucp_put_bw 67108864 200
done
