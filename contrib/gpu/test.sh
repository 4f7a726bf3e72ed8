#!/usr/bin/env bash
# The GPU suite, run on the GPU machine from the repository root with the binaries
# contrib/gpu/pack.sh built here:
#
#   bash contrib/gpu/test.sh [BIN]        (BIN: default .gpu/bin)
#
# It lists the GPUs, runs the two-process GPU tests (tests/tests/gpu.rs: every memory
# pairing and path, two GPUs, the IPC cache, a peer killed mid-rendezvous), then
# rucx-perftest with --validate (every byte checked) over the same paths, and prints a
# closing line of counts.
set -uo pipefail
BIN=${1:-.gpu/bin}
pass=0 fail=0 skip=0
failed=()
step() {
  local name=$1
  shift
  echo "=== $name"
  local log
  log=$(mktemp)
  if "$@" >"$log" 2>&1; then
    if grep -q "SKIPPED" "$log"; then skip=$((skip + 1)); else pass=$((pass + 1)); fi
  else
    fail=$((fail + 1))
    failed+=("$name")
  fi
  tail -n 40 "$log"
  rm -f "$log"
}
ngpu=$("$BIN/rucx-info" -d | grep -c '^# GPU cuda:')
step "rucx-info -d" "$BIN/rucx-info" -d
step "two-process GPU tests" env RUCX_GPU_PEER="$BIN/rucx-gpu-peer" "$BIN/gpu-tests" \
  --test-threads 1 --nocapture
pt() { timeout 300 "$BIN/rucx-perftest" --loopback --validate "$@"; }
for m in cuda cuda,host host,cuda cuda-managed; do
  for s in 8 100000 4m; do
    step "tag_lat -m $m -s $s" pt -t tag_lat -m "$m" -s "$s" -n 200 -w 20
  done
  step "tag_bw -m $m -s 64m" pt -t tag_bw -m "$m" -s 64m -n 40 -w 4
done
for tls in posix,cma tcp; do
  step "tag_lat -m cuda -s 1m, UCX_TLS=$tls (staged)" env UCX_TLS="$tls" \
    "$BIN/rucx-perftest" --loopback --validate -t tag_lat -m cuda -s 1m -n 50 -w 5
done
step "C example: GPU buffers through ucp.h" bash -c "cc -O2 -Ibindings-c/include -o /tmp/gpu_pingpong contrib/c-example/gpu_pingpong.c -L$BIN -l:libucp.so.0 -Wl,-rpath,$PWD/$BIN && /tmp/gpu_pingpong"
step "ucp_put_bw -m cuda -s 64m" timeout 300 "$BIN/rucx-perftest" --loopback -t ucp_put_bw -m cuda -s 64m -n 40 -w 4
if [ "$ngpu" -ge 2 ]; then
  step "tag_lat -a cuda:0,cuda:1 -s 8" pt -t tag_lat -m cuda -a cuda:0,cuda:1 -s 8 -n 200 -w 20
  step "tag_bw -a cuda:0,cuda:1 -s 64m" pt -t tag_bw -m cuda -a cuda:0,cuda:1 -s 64m -n 40 -w 4
else
  echo "=== two-GPU perftest runs: SKIPPED (one GPU here)"
  skip=$((skip + 1))
fi
echo "gpu suite: $pass passed, $fail failed, $skip skipped${failed:+ (failed: ${failed[*]})}"
[ "$fail" -eq 0 ]
