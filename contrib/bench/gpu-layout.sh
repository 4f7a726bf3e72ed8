#!/usr/bin/env bash
# Noncontiguous GPU messages (the targets of docs/results.md), on the GPU machine with the binaries
# contrib/gpu/pack.sh put in .gpu:
#
#   bash contrib/bench/gpu-layout.sh [-r ROUNDS] [-p PARTS] [BIN]   (BIN: default .gpu/bin)
#
# Part 1, beside UCX 1.22's CUDA build: `tag_lat` (one-way latency, p50, µs) of an iov
# list in device memory, `-D iov,iov`, 128 × 1 KiB (1 KiB gaps) on one GPU and from GPU 0
# to GPU 1, and 1024 × 128 B (128 B gaps) on one GPU; ROUNDS rounds (default 3),
# alternating Rucx and UCX, medians and their ratio.
# Part 2, against ourselves: each layout (3D faces of a 256^3 array of doubles in each
# orientation, MILC, NAS MG, SPECFEM3D) beside a contiguous device message of the same
# bytes, on one GPU: the ratio layout / contiguous.
# Part 3: the model against each method forced (RUCX_GPU_DT_METHOD) for the same cases:
# the pick's time over the best method's.
# PARTS: which parts to run (default 123). GPU_LAYOUT_ONLY=<text>: only the part 2 and 3
# cases whose arguments hold the text (a regular expression for grep -E).
set -uo pipefail
rounds=3
parts=123
while getopts "r:p:" o; do
  case $o in r) rounds=$OPTARG ;; p) parts=$OPTARG ;; *) exit 2 ;; esac
done
shift $((OPTIND - 1))
BIN=${1:-.gpu/bin}
U=.gpu/ucx122
RUCX="$BIN/rucx-perftest"
UCX=(env LD_LIBRARY_PATH="$U/lib" UCX_MODULE_DIR="$U/lib/ucx" "$U/bin/ucx_perftest")
port=$((20000 + RANDOM % 20000))
list() { local n=$1 s=$2; printf "%s" "$s"; for _ in $(seq 2 "$n"); do printf ",%s" "$s"; done; }

# one PROG SEND_GPU RECV_GPU ENV ARGS...: the p50 latency (µs) of one tag_lat run, or nan.
one() {
  local prog=$1 sg=$2 rg=$3 env1=$4
  shift 4
  port=$((port + 1))
  local srv=("$RUCX" -p "$port" -a cuda:0)
  local cli=("$RUCX" 127.0.0.1 -p "$port" -a cuda:0)
  # One GPU per process for both programs, as in gpu-tag.sh.
  local senv=("$env1" CUDA_VISIBLE_DEVICES="$rg") cenv=("$env1" CUDA_VISIBLE_DEVICES="$sg")
  if [ "$prog" = ucx ]; then
    srv=("${UCX[@]}" -p "$port") cli=("${UCX[@]}" 127.0.0.1 -p "$port")
  fi
  env "${senv[@]}" taskset -c 2 timeout 90 "${srv[@]}" >/dev/null 2>&1 &
  local spid=$! out=""
  for _ in $(seq 100); do ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.05; done
  out=$(env "${cenv[@]}" taskset -c 4 timeout 90 "${cli[@]}" -t tag_lat -m cuda "$@" 2>&1 | grep '^Final:' || true)
  wait "$spid" 2>/dev/null || true
  [ -n "$out" ] || { echo nan; return; }
  awk '{print $3}' <<<"$out"
}
median() { awk '$1 != "nan"' | sort -g | awk '{a[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { print (a == "nan" || b == "nan" || b == 0) ? "nan" : sprintf("%.4f", a / b) }'; }

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
nvidia-smi -L
"$BIN/rucx-info" -d | grep -E '^# GPU' || true

if [[ $parts == *1* ]]; then
echo "## Part 1: iov lists in device memory, tag_lat p50 (us), beside UCX 1.22"
printf '%-26s %10s %12s %9s  %s\n' case rucx ucx1.22 ratio runs
p1=(
  "iov 128x1KiB same GPU|0|0|-D iov,iov -s $(list 128 1024) -i 1024|200|20"
  "iov 1024x128B same GPU|0|0|-D iov,iov -s $(list 1024 128) -i 128|200|10"
)
[ "$ngpu" -ge 2 ] && p1+=("iov 128x1KiB GPU0->GPU1|0|1|-D iov,iov -s $(list 128 1024) -i 1024|200|20")
for c in "${p1[@]}"; do
  IFS='|' read -r name sg rg args rn un <<<"$c"
  # shellcheck disable=SC2206
  a=($args)
  r=() u=()
  for _ in $(seq "$rounds"); do
    r+=("$(one rucx "$sg" "$rg" RUCX_=1 "${a[@]}" -n "$rn" -w 20)")
    u+=("$(one ucx "$sg" "$rg" UCX_=1 "${a[@]}" -n "$un" -w 2)")
  done
  mr=$(printf '%s\n' "${r[@]}" | median)
  mu=$(printf '%s\n' "${u[@]}" | median)
  printf '%-26s %10s %12s %9s  (rucx: %s; ucx: %s)\n' "$name" "$mr" "$mu" "$(ratio "$mr" "$mu")" "${r[*]}" "${u[*]}"
done

fi
p2=(stencil3d_face:256,x stencil3d_face:256,y stencil3d_face:256,z milc_su3_zd:16 nas_mg_x:128 nas_mg_y:128 nas_mg_z:128 specfem3d_cm)
only=${GPU_LAYOUT_ONLY:-}
keep() { [ -z "$only" ] || grep -Eq -- "$only" <<<"$1"; }
if [[ $parts == *2* ]]; then
echo "## Part 2: layouts against a contiguous device message of the same bytes, one GPU"
printf '%-24s %9s %10s %10s %8s\n' layout bytes layout contig ratio
for l in "${p2[@]}"; do
  keep "$l" || continue
  bytes=$("$BIN/rucx-info" --layout "$l" 2>/dev/null | awk '/^size/ {print $2}')
  r=() c=()
  for _ in $(seq "$rounds"); do
    r+=("$(one rucx 0 0 RUCX_=1 -D "$l" -n 500 -w 50)")
    c+=("$(one rucx 0 0 RUCX_=1 -s "${bytes:-0}" -n 500 -w 50)")
  done
  mr=$(printf '%s\n' "${r[@]}" | median)
  mc=$(printf '%s\n' "${c[@]}" | median)
  printf '%-24s %9s %10s %10s %8s  (layout: %s; contig: %s)\n' "$l" "${bytes:-?}" "$mr" "$mc" "$(ratio "$mr" "$mc")" "${r[*]}" "${c[*]}"
done

fi
[[ $parts == *3* ]] || exit 0
echo "## Part 3: the model's pick against each method alone (tag_lat p50 us, one GPU)"
printf '%-24s %9s %9s %9s %9s %9s %8s\n' case model direct 2d-copy per-block pack-unp pick/best
p3=("-D iov,iov -s $(list 128 1024) -i 1024" "-D iov,iov -s $(list 1024 128) -i 128")
for l in "${p2[@]}"; do p3+=("-D $l"); done
for args in "${p3[@]}"; do
  keep "$args" || continue
  # shellcheck disable=SC2206
  a=($args)
  row=()
  for m in model direct copy-engine per-block pack-unpack; do
    e=RUCX_=1
    [ "$m" = model ] || e=RUCX_GPU_DT_METHOD=$m
    v=()
    for _ in $(seq "$rounds"); do v+=("$(one rucx 0 0 "$e" "${a[@]}" -n 200 -w 20)"); done
    row+=("$(printf '%s\n' "${v[@]}" | median)")
  done
  best=$(printf '%s\n' "${row[@]:1}" | awk '$1 != "nan"' | sort -g | head -n 1)
  name=$(awk '{print $2}' <<<"$args" | cut -c1-24)
  [ "${a[0]}" = "-D" ] && [ "${a[1]}" = "iov,iov" ] && name="iov $(awk -F, '{print NF}' <<<"${a[3]}")x${a[3]%%,*}"
  printf '%-24s %9s %9s %9s %9s %9s %8s\n' "$name" "${row[@]}" "$(ratio "${row[0]}" "$best")"
done
