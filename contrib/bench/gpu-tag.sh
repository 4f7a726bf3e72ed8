#!/usr/bin/env bash
# GPU messages between two processes, Rucx beside UCX 1.22's CUDA build, in one go, on the
# GPU machine (with the binaries contrib/gpu/pack.sh put in .gpu):
#
#   bash contrib/bench/gpu-tag.sh [-r ROUNDS] [-c staged] [-t TLS] [BIN]     (BIN: default .gpu/bin)
#
# -k REGEX: only the cases whose "name test size" matches.
# -c staged: the staged rendezvous instead (device data through pinned host fragments,
# where no lane maps the peer's GPU memory): GPU to GPU, GPU to host and host to GPU
# bandwidth and GPU 1 MiB latency, run with UCX_TLS=TLS for both programs (default
# tcp,cuda_copy; posix,cuda_copy for shared memory without cuda_ipc).
#
# The cases of the GPU memory issue's table: on one GPU and from GPU 0 to GPU 1, tag_lat
# 8 B and 1 MiB (one-way
# latency, 50th percentile, µs), tag_bw and ucp_put_bw 64 MiB (GB/s), plus GPU to host
# bandwidth (against the pinned copy limit contrib/gpu/probe.cu measures). Each case runs
# ROUNDS times (default 5), alternating Rucx and UCX; the medians and their ratio are
# printed (latency below 1.0 and bandwidth above 1.0: Rucx is faster).
set -uo pipefail
rounds=5
set_=table
tls=""
only=""
while getopts "r:c:t:k:" o; do
  case $o in r) rounds=$OPTARG ;; c) set_=$OPTARG ;; t) tls=$OPTARG ;; k) only=$OPTARG ;; *) exit 2 ;; esac
done
if [ "$set_" = staged ] && [ -z "$tls" ]; then tls=tcp,cuda_copy; fi
shift $((OPTIND - 1))
BIN=${1:-.gpu/bin}
U=.gpu/ucx122
RUCX="$BIN/rucx-perftest"
# A command (not a shell function: it runs under env, taskset and timeout).
UCX=(env LD_LIBRARY_PATH="$U/lib" UCX_MODULE_DIR="$U/lib/ucx" "$U/bin/ucx_perftest")
# Which GPU each side uses: UCX 1.22's -a selects its device-initiated (GDAKI) tests
# ("Invalid test case" for tag_lat), so its processes get their GPU through
# CUDA_VISIBLE_DEVICES (server: the receive GPU, client: the send GPU). Rucx's get the same
# placement: between two GPUs each process sees only its own (rucx-perftest's -a
# cuda:SEND,cuda:RECV would put every process's send buffers on one GPU and its receive
# buffers on the other, a different test).
port=$((20000 + RANDOM % 20000))

# one PROG TEST SIZE ITERS COL MEM SEND_GPU RECV_GPU: the Final line's COL of one run (3: p50
# latency us, 7: overall bandwidth MB/s), or nan.
one() {
  local prog=$1 test=$2 size=$3 iters=$4 col=$5 mem=$6 sg=$7 rg=$8
  port=$((port + 1))
  local srv=("$RUCX" -p "$port" -a cuda:0)
  local cli=("$RUCX" 127.0.0.1 -p "$port" -a cuda:0)
  local senv=(CUDA_VISIBLE_DEVICES="$rg") cenv=(CUDA_VISIBLE_DEVICES="$sg")
  if [ -n "$tls" ]; then senv+=(UCX_TLS="$tls") cenv+=(UCX_TLS="$tls"); fi
  if [ "$prog" = ucx ]; then
    srv=("${UCX[@]}" -p "$port") cli=("${UCX[@]}" 127.0.0.1 -p "$port")
  fi
  env "${senv[@]}" taskset -c 2 timeout 300 "${srv[@]}" >/dev/null 2>&1 &
  local spid=$! out=""
  for _ in $(seq 100); do ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.05; done
  out=$(env "${cenv[@]}" taskset -c 4 timeout 300 "${cli[@]}" -t "$test" -s "$size" \
    -n "$iters" -w $((iters / 10 + 2)) -m "$mem" 2>&1 | grep '^Final:' || true)
  wait "$spid" 2>/dev/null || true
  [ -n "$out" ] || { echo nan; return; }
  awk -v c="$col" '{print $c}' <<<"$out"
}
median() { awk '$1 != "nan"' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
# name test size iters column memory send-gpu recv-gpu
cases=(
  "same-gpu tag_lat 8 2000 3 cuda 0 0"
  "same-gpu tag_lat 1048576 1000 3 cuda 0 0"
  "same-gpu tag_bw 67108864 100 7 cuda 0 0"
  "gpu-to-host tag_bw 67108864 100 7 cuda,host 0 0"
  "host-to-gpu tag_bw 67108864 100 7 host,cuda 0 0"
)
if [ "$ngpu" -ge 2 ]; then
  cases+=(
    "gpu0-gpu1 tag_lat 8 2000 3 cuda 0 1"
    "gpu0-gpu1 tag_lat 1048576 1000 3 cuda 0 1"
    "gpu0-gpu1 tag_bw 67108864 100 7 cuda 0 1"
    "gpu0-gpu1 ucp_put_bw 67108864 100 7 cuda 0 1"
  )
fi
if [ "$set_" = staged ]; then
  g1=0
  [ "$ngpu" -ge 2 ] && g1=1
  cases=(
    "gpu0-gpu$g1 tag_bw 67108864 40 7 cuda 0 $g1"
    "gpu0-gpu$g1 tag_bw 4194304 200 7 cuda 0 $g1"
    "gpu0-gpu$g1 tag_lat 1048576 300 3 cuda 0 $g1"
    "gpu-to-host tag_bw 67108864 40 7 cuda,host 0 0"
    "host-to-gpu tag_bw 67108864 40 7 host,cuda 0 0"
  )
  echo "UCX_TLS=$tls for both"
fi
nvidia-smi -L
printf '%-12s %-10s %9s %12s %12s %8s  %s\n' case test size rucx ucx1.22 ratio unit
for c in "${cases[@]}"; do
  read -r name test size iters col mem sg rg <<<"$c"
  if [ -n "$only" ] && ! grep -qE "$only" <<<"$name $test $size"; then continue; fi
  r=() u=()
  for _ in $(seq "$rounds"); do
    r+=("$(one rucx "$test" "$size" "$iters" "$col" "$mem" "$sg" "$rg")")
    u+=("$(one ucx "$test" "$size" "$iters" "$col" "$mem" "$sg" "$rg")")
  done
  mr=$(printf '%s\n' "${r[@]}" | median)
  mu=$(printf '%s\n' "${u[@]}" | median)
  unit=us
  if [ "$col" = 7 ]; then
    # MB/s (2^20 bytes) to GB/s (10^9 bytes).
    mr=$(awk -v v="$mr" 'BEGIN { print (v == "nan") ? v : v * 1048576 / 1e9 }')
    mu=$(awk -v v="$mu" 'BEGIN { print (v == "nan") ? v : v * 1048576 / 1e9 }')
    unit=GB/s
  fi
  ratio=$(awk -v a="$mr" -v b="$mu" 'BEGIN { print (a == "nan" || b == "nan" || b == 0) ? "nan" : sprintf("%.3f", a / b) }')
  printf '%-12s %-10s %9s %12s %12s %8s  %s   (rucx: %s; ucx: %s)\n' "$name" "$test" "$size" "$mr" "$mu" "$ratio" "$unit" "${r[*]}" "${u[*]}"
done
