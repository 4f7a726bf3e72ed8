#!/usr/bin/env bash
# Cross-GPU tag_lat (GPU 0 sending to GPU 1; 8 B and 1 MiB), Rucx beside UCX 1.22,
# alternating, three rounds, with Rucx's protocol and cuda_ipc counters printed in the
# first round (RUCX_PERFTEST_STATS). Run on a machine with two GPUs from the repository
# root, with the binaries of contrib/gpu/pack.sh:
#
#   bash contrib/bench/gpu-xlat.sh [BIN]        (BIN: default .gpu/bin; UCX from .gpu/ucx122)
#   XLAT_ALT="VAR=value" bash contrib/bench/gpu-xlat.sh   (Rucx again with VAR set: "alt")
#   XLAT_ROUNDS=5                               (rounds, default 3)
#
# Both programs' processes get their GPU through CUDA_VISIBLE_DEVICES, one each (UCX
# 1.22's -a option selects device-initiated tests; see gpu-tag.sh).
set -uo pipefail
B=${1:-.gpu/bin}
U=.gpu/ucx122
port=26000
for round in $(seq "${XLAT_ROUNDS:-3}"); do
  for size in 8 1048576; do
    port=$((port + 1))
    (CUDA_VISIBLE_DEVICES=1 RUCX_PERFTEST_STATS=1 taskset -c 2 timeout 60 "$B/rucx-perftest" -p $port >/tmp/xlat-srv.txt 2>&1 &)
    sleep 0.5
    r=$(CUDA_VISIBLE_DEVICES=0 RUCX_PERFTEST_STATS=1 taskset -c 4 timeout 60 "$B/rucx-perftest" 127.0.0.1 -p $port \
      -a cuda:0 -t tag_lat -s $size -n 2000 -w 200 -m cuda 2>&1 | tee /tmp/xlat-cli.txt |
      grep Final: | awk '{print $3}')
    sleep 0.5
    alt=
    if [ -n "${XLAT_ALT:-}" ]; then
      port=$((port + 1))
      (env CUDA_VISIBLE_DEVICES=1 $XLAT_ALT taskset -c 2 timeout 60 "$B/rucx-perftest" -p $port >/dev/null 2>&1 &)
      sleep 0.5
      alt=$(env CUDA_VISIBLE_DEVICES=0 $XLAT_ALT taskset -c 4 timeout 60 "$B/rucx-perftest" 127.0.0.1 -p $port \
        -a cuda:0 -t tag_lat -s $size -n 2000 -w 200 -m cuda 2>&1 |
        grep Final: | awk '{print $3}')
      alt=" alt $alt"
      sleep 0.5
    fi
    port=$((port + 1))
    (CUDA_VISIBLE_DEVICES=1 LD_LIBRARY_PATH=$U/lib UCX_MODULE_DIR=$U/lib/ucx taskset -c 2 timeout 60 \
      $U/bin/ucx_perftest -p $port >/dev/null 2>&1 &)
    sleep 1
    u=$(CUDA_VISIBLE_DEVICES=0 LD_LIBRARY_PATH=$U/lib UCX_MODULE_DIR=$U/lib/ucx taskset -c 4 timeout 60 \
      $U/bin/ucx_perftest 127.0.0.1 -p $port -t tag_lat -s $size -n 2000 -w 200 -m cuda 2>&1 |
      grep Final: | awk '{print $3}')
    sleep 0.5
    echo "round $round size $size rucx $r ucx $u$alt"
    [ $round = 1 ] && grep -h "rendezvous\|cuda_ipc:" /tmp/xlat-cli.txt /tmp/xlat-srv.txt | cut -c1-250
  done
done
