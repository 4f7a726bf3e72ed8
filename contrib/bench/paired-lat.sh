#!/usr/bin/env bash
# Paired 8-byte shared-memory latency runs, Rucx and UCX 1.22 alternating round by round.
#
#   contrib/bench/paired-lat.sh TEST ROUNDS BIN... [ucx]
#
# TEST is a ucx_perftest test name (tag_lat, ucp_am_lat, ...); each BIN is a rucx-perftest
# binary (e.g. target/release/rucx-perftest, or a saved older build), and `ucx` stands for
# UCX 1.22's ucx_perftest (contrib/bench/ucx-env.sh). Every round runs each program once:
# server pinned to CPU 0, client to CPU 1, 200 000 iterations after 1000 warm-up, over
# UCX_TLS=posix,cma. Printed per program: the median and mean over rounds of each run's
# 50th percentile, and of each run's average (µs); and for each program but the last, the
# median over rounds of its ratio to the last program in the same round (the last is the
# reference, e.g. `ucx`). Alternating runs keeps the machine's slow and fast states from
# favouring one program, and the per-round ratios compare runs made in the same state.
# With PAIRED_RAW=FILE, every run is also appended to FILE as "ROUND PROGRAM P50 AVERAGE".
set -euo pipefail
cd "$(dirname "$0")/../.."
t=$1 r=$2
shift 2
# shellcheck source=contrib/bench/ucx-env.sh
source contrib/bench/ucx-env.sh >/dev/null
export UCX_TLS=posix,cma

one() { # one BIN: prints "p50 average"
  local bin=$1 port=$((20000 + RANDOM % 20000))
  taskset -c 0 "$bin" -p $port >/dev/null 2>&1 &
  local spid=$!
  for _ in $(seq 100); do ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.05; done
  taskset -c 1 "$bin" 127.0.0.1 -p $port -t "$t" -s 8 -n 200000 -w 1000 2>&1 |
    awk '/^Final:/ {print $3, $4}'
  wait $spid || true
}

declare -A p50 avg
for round in $(seq "$r"); do
  for b in "$@"; do
    bin=$b
    [ "$b" = ucx ] && bin=$UCX122_PERFTEST
    read -r a v <<<"$(one "$bin")"
    [ -n "${PAIRED_RAW:-}" ] && echo "$round $b $a $v" >>"$PAIRED_RAW"
    p50[$b]+="$a "
    avg[$b]+="$v "
  done
done
stats() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1; s+=$1} END{printf "median %.3f mean %.4f", a[int((NR+1)/2)], s/NR}'; }
# ratios ROUND_VALUES_A ROUND_VALUES_B: the median over rounds of A / B, each round's pair
# run back to back in the same state of the machine.
ratios() { paste <(tr ' ' '\n' <<<"$1" | grep .) <(tr ' ' '\n' <<<"$2" | grep .) |
  awk '$2 > 0 {print $1 / $2}' | sort -g | awk '{a[NR]=$1} END{printf "%.3f", a[int((NR+1)/2)]}'; }
last=${*: -1}
for b in "$@"; do
  line="$b: p50 $(echo "${p50[$b]}" | stats) | average $(echo "${avg[$b]}" | stats) | rounds $r"
  if [ "$b" != "$last" ]; then
    line+=" | per-round ratio to $last: p50 $(ratios "${p50[$b]}" "${p50[$last]}"), average $(ratios "${avg[$b]}" "${avg[$last]}")"
  fi
  echo "$line"
done
