#!/usr/bin/env bash
# The UMR layout rendezvous over rc_verbs on the software HCA model (a model of an HCA,
# not one: the targets are stated on it).
#
#   bash contrib/bench/umr.sh [-r ROUNDS] [-n ITERS] [-t TOTAL]
#
# A vector of N blocks of B bytes with B-byte gaps (an iov list shaped like a vector
# travels as a vector layout), B from 8 B to 64 KiB and N = TOTAL / B (TOTAL default
# 256 KiB), between two processes with `rucx-perftest -t tag_lat` (one-way latency, p50,
# µs): by UMR (RUCX_UMR=umr), packed (RUCX_UMR=pack), and as the model chooses (auto),
# beside a contiguous message of the same bytes. ROUNDS rounds (default 3) alternate the
# modes; the table gives medians, the auto pick, whether it was the faster one, and UMR
# over contiguous. (A list of a few blocks travels as an iov list, not a layout, and is
# read block by block: picked "-".)
# Part 2: UMR against a contiguous message of 1 MiB (16 and 64 KiB blocks), alternating,
# ROUNDS rounds: medians and their ratio. The key creation cost is the model's default (RUCX_SOFTHCA_MKEY_NS);
# repeated transfers reuse cached keys, so it shows only in the first.
set -uo pipefail
rounds=3
iters=200
total=262144
while getopts "r:n:t:" o; do
  case $o in r) rounds=$OPTARG ;; n) iters=$OPTARG ;; t) total=$OPTARG ;; *) exit 2 ;; esac
done
cd "$(dirname "$0")/../.."
cargo build --release -q -p rucx-perftest --bin rucx-perftest || exit 1
P=target/release/rucx-perftest
export RUCX_SOFTHCA=1 UCX_TLS=rc_verbs,self

# run MODE ARGS...: "p50 way" of one tag_lat run (way: umr, packed or -).
run() {
  local mode=$1
  shift
  local out
  out=$(RUCX_UMR=$mode RUCX_PERFTEST_STATS=1 timeout 300 "$P" --loopback -t tag_lat \
    -n "$iters" -w 10 -c 0,1 "$@" 2>&1)
  local p50 way=-
  # (The two processes' statistics may share a line with the table's.)
  p50=$(grep -o "Final:.*" <<<"$out" | awk '{print $3}')
  grep -q "client: .*rendezvous umr" <<<"$out" && way=umr
  grep -q "client: .*rendezvous packed" <<<"$out" && way=packed
  echo "${p50:-nan} $way"
}

median() { sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else print a[int((NR+1)/2)]}'; }

declare -A T W
blocks="8 64 256 512 1024 2048 4096 16384 65536"
for r in $(seq "$rounds"); do
  read -r t _ < <(run auto -s "$total")
  T[contig]+="$t "
  for b in $blocks; do
    n=$((total / b))
    for mode in umr pack auto; do
      read -r t way < <(run "$mode" -D iov -s "$b:$n" -i "$b")
      T[$b,$mode]+="$t "
      [ "$mode" = auto ] && W[$b]=$way
    done
  done
  echo "# round $r done" >&2
done
c=$(tr ' ' '\n' <<<"${T[contig]}" | grep . | median)
echo "# tag_lat p50 (us), $total bytes, median of $rounds rounds; contiguous: $c us"
printf "%-8s %-6s %10s %10s %10s %-7s %-8s %10s\n" block blocks umr packed auto picked fastest umr/contig
for b in $blocks; do
  u=$(tr ' ' '\n' <<<"${T[$b,umr]}" | grep . | median)
  p=$(tr ' ' '\n' <<<"${T[$b,pack]}" | grep . | median)
  a=$(tr ' ' '\n' <<<"${T[$b,auto]}" | grep . | median)
  best=$(awk -v u="$u" -v p="$p" 'BEGIN {print (u <= p) ? "umr" : "packed"}')
  ok=$([ "${W[$b]}" = "$best" ] && echo yes || echo "no")
  [ "${W[$b]}" = - ] && ok=n/a
  ratio=$(awk -v u="$u" -v c="$c" 'BEGIN {printf "%.2f", u / c}')
  printf "%-8s %-6s %10s %10s %10s %-7s %-8s %10s\n" "$b" $((total / b)) "$u" "$p" "$a" \
    "${W[$b]}" "$ok" "$ratio"
done

# Part 2: 1 MiB.
declare -A U
for r in $(seq "$rounds"); do
  read -r t _ < <(run auto -s 1048576)
  U[contig]+="$t "
  for b in 16384 65536; do
    read -r t _ < <(run umr -D iov -s "$b:$((1048576 / b))" -i "$b")
    U[$b]+="$t "
  done
done
c=$(tr ' ' '\n' <<<"${U[contig]}" | grep . | median)
echo "# 1 MiB: contiguous $c us"
for b in 16384 65536; do
  u=$(tr ' ' '\n' <<<"${U[$b]}" | grep . | median)
  echo "# 1 MiB in blocks of $b: UMR $u us, $(awk -v u="$u" -v c="$c" 'BEGIN {printf "%.2f", u / c}')x contiguous"
done
