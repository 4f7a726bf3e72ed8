#!/usr/bin/env bash
# UCP tag matching between two processes, Rucx beside UCX, in one go:
#   tag_lat, 8 bytes:  one-way latency, 50th percentile, µs   (lower is better)
#   tag_bw, 1 MiB:     bandwidth, overall, MB/s                (higher is better)
#
#   contrib/bench/ucp-tag.sh [-n LAT_ITERS] [-N BW_ITERS] [-r RUNS] [CONFIG...]
#   LAT_SIZES="8 131072 2097152" contrib/bench/ucp-tag.sh ...   (latency sizes, default 8)
#   LAT_TESTS="ucp_put_lat ucp_am_lat" NO_BW=1 contrib/bench/ucp-tag.sh ...  (other 8-byte
#   latency tests beside tag_lat; NO_BW leaves out tag_bw)
#
# CONFIG (default: shm sm tcp) picks the transports, through UCX_TLS as ucx_perftest takes
# them, the same for both programs:
#   shm   UCX_TLS=posix,cma     shared-memory mailbox, CMA for rendezvous
#   sm    UCX_TLS=sm            UCX's alias for its shared-memory transports (posix, sysv,
#                               cma, knem, xpmem: whichever load); Rucx's names the same set
#   tcp   UCX_TLS=tcp UCX_NET_DEVICES=lo
#
# Each program runs `-t tag_lat` / `-t tag_bw` with the same arguments: server pinned to
# CPU 0, client to CPU 1. Each case is run RUNS times, interleaved (Rucx, UCX 1.22, UCX
# 1.13, Rucx, ...), so a change in the machine's state hits all of them alike. Reported per
# case: the median and the best run, and "fast": the median over the runs made while the
# machine was in its fast state (each program's runs worse than twice its own best run are
# left out; a shared virtual machine's cross-core latency sometimes jumps for a whole run,
# for every program alike). The ratio is Rucx / UCX 1.22: for latency below 1.0 means Rucx
# is faster, for bandwidth above 1.0 means Rucx is faster.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=contrib/bench/record.sh
source contrib/bench/record.sh
record_vars LAT_SIZES LAT_TESTS NO_BW
lat_iters=200000 bw_iters=5000 runs=7
while getopts "n:N:r:" o; do
  case $o in n) lat_iters=$OPTARG ;; N) bw_iters=$OPTARG ;; r) runs=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
configs=("$@")
[ $# -eq 0 ] && configs=(shm sm tcp)

# shellcheck source=contrib/bench/ucx-env.sh
source contrib/bench/ucx-env.sh
cargo build --release -q -p rucx-perftest --bin rucx-perftest
RUCX=target/release/rucx-perftest
port=$((20000 + RANDOM % 20000))

# env_of CONFIG: the environment both sides run with.
env_of() {
  case $1 in
    shm) echo "UCX_TLS=posix,cma" ;;
    sm) echo "UCX_TLS=sm" ;;
    tcp) echo "UCX_TLS=tcp UCX_NET_DEVICES=lo" ;;
    *) echo "ucp-tag.sh: unknown config '$1' (shm, sm, tcp)" >&2; exit 2 ;;
  esac
}

# run_pair BIN CONFIG TEST SIZE ITERS WARMUP COLUMN: prints the Final: line's COLUMN of one
# run (3: 50%ile latency, 7: overall bandwidth), or nan.
run_pair() {
  local bin=$1 cfg=$2 test=$3 size=$4 iters=$5 warmup=$6 col=$7 out spid
  local -a envv
  read -r -a envv <<<"$(env_of "$cfg")"
  port=$((port + 1))
  env "${envv[@]}" timeout 300 "$bin" -p "$port" -c 0 >/dev/null 2>&1 &
  spid=$!
  for _ in $(seq 100); do ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.05; done
  # No -f: UCX 1.13 prints its final line without the "Final:" label under -f.
  out=$(env "${envv[@]}" timeout 300 "$bin" 127.0.0.1 -p "$port" -c 1 -t "$test" -s "$size" \
    -n "$iters" -w "$warmup" 2>&1 | grep '^Final:' || true)
  wait "$spid" 2>/dev/null || true
  [ -n "$out" ] || { echo "nan"; return; }
  awk -v c="$col" '{print $c}' <<<"$out"
}

median() { awk '$1 != "nan"' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

printf '%-4s %-8s %8s %-6s %10s %10s %10s %9s  %s\n' cfg test size stat rucx ucx1.22 ucx1.13 rucx/1.22 unit
for cfg in "${configs[@]}"; do
  env_of "$cfg" >/dev/null
  cases=()
  for ls in ${LAT_SIZES:-8}; do
    # Fewer iterations for large messages: about 2 GB moved per run at most.
    it=$(( ls > 0 && 2000000000 / ls < lat_iters ? 2000000000 / ls : lat_iters ))
    [ "$it" -lt 200 ] && it=200
    cases+=("tag_lat $ls $it $(( it / 20 + 10 )) 3 us lower")
  done
  for t in ${LAT_TESTS:-}; do
    cases+=("$t 8 $lat_iters 10000 3 us lower")
  done
  [ -n "${NO_BW:-}" ] || cases+=("tag_bw 1048576 $bw_iters 200 7 MB/s higher")
  for c in "${cases[@]}"; do
    read -r test size iters warmup col unit better <<<"$c"
    r=() u=() d=()
    for _ in $(seq "$runs"); do
      r+=("$(run_pair "$RUCX" "$cfg" "$test" "$size" "$iters" "$warmup" "$col")")
      u+=("$(run_pair "$UCX122_PERFTEST" "$cfg" "$test" "$size" "$iters" "$warmup" "$col")")
      if [ -x "${UCX113_PERFTEST:-}" ]; then
        d+=("$(run_pair "$UCX113_PERFTEST" "$cfg" "$test" "$size" "$iters" "$warmup" "$col")")
      fi
    done
    # fast: the median of a program's runs within a factor 2 of its own best run.
    if [ "$better" = lower ]; then
      best() { awk '$1 != "nan"' | sort -g | head -1; }
      fast() { local v; v=$(cat); awk -v f="$(best <<<"$v")" '$1 != "nan" && $1 <= 2 * f' <<<"$v" | median; }
    else
      best() { awk '$1 != "nan"' | sort -g | tail -1; }
      fast() { local v; v=$(cat); awk -v f="$(best <<<"$v")" '$1 != "nan" && $1 >= f / 2' <<<"$v" | median; }
    fi
    for stat in median best fast; do
      rm=$(printf '%s\n' "${r[@]}" | $stat)
      um=$(printf '%s\n' "${u[@]}" | $stat)
      dm=$([ ${#d[@]} -gt 0 ] && printf '%s\n' "${d[@]}" | $stat || echo "-")
      ratio=$(awk -v a="$rm" -v b="$um" 'BEGIN { if (a != "nan" && b > 0) printf "%.2f", a / b; else print "nan" }')
      printf '%-4s %-8s %8s %-6s %10s %10s %10s %9s  %s (%s is better)\n' \
        "$cfg" "$test" "$size" "$stat" "${rm:-nan}" "${um:-nan}" "${dm:-nan}" "$ratio" "$unit" "$better"
      if [ "$stat" = median ]; then
        area=host-p2p
        case $test in ucp_*) area=rma-am ;; esac
        record "$area" "$cfg $test $(record_size "$size")" "$rm" "$um" "$ratio" \
          "runs: Rucx $(record_range "${r[@]}"), UCX 1.22 $(record_range "${u[@]}")" \
          "${unit/us/µs}" "UCX 1.22" "medians of $runs interleaved runs; UCX 1.13: ${dm:-nan}"
      fi
    done
    echo "  $cfg $test runs: rucx ${r[*]} | ucx1.22 ${u[*]} | ucx1.13 ${d[*]:-}" >&2
  done
done
