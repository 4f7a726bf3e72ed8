#!/usr/bin/env bash
# The GPU suite, run on the GPU machine from the repository root with the binaries
# contrib/gpu/pack.sh built here:
#
#   bash contrib/gpu/test.sh [BIN]        (BIN: default .gpu/bin)
#
# It lists the GPUs, runs the two-process GPU tests (tests/tests/gpu.rs: every memory
# pairing and path, two GPUs, the IPC cache, a peer killed mid-rendezvous, device data
# over rc_verbs on the software HCA model), the model's UMR over GPU memory, cuda_copy's
# pinning of registered host memory, then rucx-perftest with --validate (every byte
# checked) over the same paths, and prints a closing line of counts.
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
# The software HCA model (a model of an HCA) between two processes, UMR keys over GPU
# memory on both sides included.
step "software HCA model over GPU memory" "$BIN/uct-tests" --exact \
  tl::verbs::model::tests::verbs_between_two_processes --nocapture --test-threads 1
step "cuda_copy pins host memory while registered" "$BIN/uct-tests" --exact \
  tl::cuda_copy::tests::host_memory_is_pinned_while_registered --nocapture
# Deferred work in libfabric's own queue (the sockets provider) driven by a CUDA stream
# through the host bridge; the carried libfabric where the machine has none.
fab() {
  ldconfig -p | grep -q 'libfabric\.so\.1' || export LD_LIBRARY_PATH="$PWD/.gpu/fabric${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  "$BIN/uct-tests" --exact tl::ofi::tests::a_cuda_stream_drives_the_provider_through_the_bridge \
    --nocapture 2>&1 | sed 's/^skipped:/SKIPPED:/'
  return "${PIPESTATUS[0]}"
}
step "libfabric deferred work driven by a CUDA stream" fab
pt() { timeout 300 "$BIN/rucx-perftest" --loopback --validate "$@"; }
for m in cuda cuda,host host,cuda cuda-managed; do
  for s in 8 100000 4m; do
    step "tag_lat -m $m -s $s" pt -t tag_lat -m "$m" -s "$s" -n 200 -w 20
  done
  step "tag_bw -m $m -s 64m" pt -t tag_bw -m "$m" -s 64m -n 40 -w 4
done
list() { local n=$1 s=$2; printf "%s" "$s"; for _ in $(seq 2 "$n"); do printf ",%s" "$s"; done; }
# Noncontiguous device data: named layouts with every byte checked; iov lists
# with gaps (which --validate does not take: the layouts test checks those) run through.
pr() { timeout 300 "$BIN/rucx-perftest" --loopback "$@"; }
step "tag_lat -m cuda -D iov,iov 128 x 1 KiB" pr -t tag_lat -m cuda -D iov,iov \
  -s "$(list 128 1024)" -i 1024 -n 200 -w 20
step "tag_bw -m cuda -D iov,iov 1024 x 128 B" pr -t tag_bw -m cuda -D iov,iov \
  -s "$(list 1024 128)" -i 128 -n 100 -w 10
for l in stencil3d_face:64,x stencil3d_face:64,z milc_su3_zd:8 specfem3d_cm; do
  step "tag_lat -m cuda -D $l" pt -t tag_lat -m cuda -D "$l" -n 100 -w 10
done
step "tag_lat -m cuda -D stencil3d_face:64,y, UCX_TLS=tcp (packed)" env UCX_TLS=tcp \
  "$BIN/rucx-perftest" --loopback --validate -t tag_lat -m cuda -D stencil3d_face:64,y -n 50 -w 5
for tls in posix,cma tcp; do
  step "tag_lat -m cuda -s 1m, UCX_TLS=$tls (staged)" env UCX_TLS="$tls" \
    "$BIN/rucx-perftest" --loopback --validate -t tag_lat -m cuda -s 1m -n 50 -w 5
done
step "C example: GPU buffers through ucp.h" bash -c "cc -O2 -Ibindings-c/include -o /tmp/gpu_pingpong contrib/c-example/gpu_pingpong.c -L$BIN -l:libucp.so.0 -Wl,-rpath,$PWD/$BIN && /tmp/gpu_pingpong"
step "C example: GPU layouts through ucp.h and rucx.h" bash -c "cc -O2 -Ibindings-c/include -o /tmp/gpu_layouts contrib/c-example/gpu_layouts.c -L$BIN -l:libucp.so.0 -Wl,-rpath,$PWD/$BIN && /tmp/gpu_layouts"
step "ucp_put_bw -m cuda -s 64m" timeout 300 "$BIN/rucx-perftest" --loopback -t ucp_put_bw -m cuda -s 64m -n 40 -w 4
if [ "$ngpu" -ge 2 ]; then
  step "tag_lat -a cuda:0,cuda:1 -s 8" pt -t tag_lat -m cuda -a cuda:0,cuda:1 -s 8 -n 200 -w 20
  step "tag_bw -a cuda:0,cuda:1 -s 64m" pt -t tag_bw -m cuda -a cuda:0,cuda:1 -s 64m -n 40 -w 4
  step "tag_lat -a cuda:0,cuda:1 -D iov,iov 128 x 1 KiB" pr -t tag_lat -m cuda \
    -a cuda:0,cuda:1 -D iov,iov -s "$(list 128 1024)" -i 1024 -n 200 -w 20
  step "tag_lat -a cuda:1,cuda:0 -D nas_mg_y:32" pt -t tag_lat -m cuda -a cuda:1,cuda:0 \
    -D nas_mg_y:32 -n 100 -w 10
else
  echo "=== two-GPU perftest runs: SKIPPED (one GPU here)"
  skip=$((skip + 1))
fi
echo "gpu suite: $pass passed, $fail failed, $skip skipped${failed:+ (failed: ${failed[*]})}"
[ "$fail" -eq 0 ]
