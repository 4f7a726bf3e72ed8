# shellcheck shell=bash
# Results as data: a benchmark script sources this file (from the repository root, before
# it parses its options, so that the command line is still whole) and calls `record` where
# it prints a ratio:
#
#   source contrib/bench/record.sh     (no arguments: it reads the script's own)
#   record_vars VAR...                 environment variables that shape the run (LAT_SIZES
#                                      ...): those set are written before the command
#   record AREA CASE OURS UCX RATIO SPREAD UNIT [BASELINE [NOTE]]
#
# With RUCX_RECORD=1, `record` appends one row to docs/results/data/AREA.csv (with
# RUCX_RECORD=DIR, to DIR/AREA.csv): the fields given, then the machine (RUCX_MACHINE, or
# "hostname/CPU model"; name it as the data does, e.g. RUCX_MACHINE="AMD VM", so that the new
# row replaces the old one in the table), the date, `git rev-parse --short HEAD` and the
# command. Without RUCX_RECORD it does nothing. `python3 contrib/bench/results.py` then
# rewrites docs/results.md from the data: the last row of each case and machine is shown.
# record_size BYTES prints a size as the case names write it ("8 B", "128 KiB", "2 MiB").

# _record_q WORD: the word as a shell would need it written.
_record_q() {
  if [[ $1 =~ ^[A-Za-z0-9_./,:=+@%-]+$ ]]; then printf '%s' "$1"
  else printf '"%s"' "$(sed 's/[\\"$`]/\\&/g' <<<"$1")"; fi
}

_record_cmd="bash $0"
for _record_a in "$@"; do _record_cmd+=" $(_record_q "$_record_a")"; done
unset _record_a
_record_env=""

# record_vars VAR...: environment variables to put before the command, when set.
record_vars() {
  local v
  for v in "$@"; do
    if [ -n "${!v+x}" ]; then _record_env+="$v=$(_record_q "${!v}") "; fi
  done
}

# record_range VALUE...: "min–max" of the values that are numbers ("nan" and "-" left out).
record_range() {
  printf '%s\n' "$@" | awk '$1 ~ /^-?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$/ {print $1}' | sort -g |
    awk 'NR == 1 {lo = $1} {hi = $1} END {if (NR) printf "%s–%s", lo, hi}'
}

record_size() {
  local b=$1
  if [ "$b" -ge 1048576 ] && [ $((b % 1048576)) -eq 0 ]; then echo "$((b / 1048576)) MiB"
  elif [ "$b" -ge 1024 ] && [ $((b % 1024)) -eq 0 ]; then echo "$((b / 1024)) KiB"
  else echo "$b B"; fi
}

# _record_csv FIELD...: one CSV line (RFC 4180 quoting).
_record_csv() {
  local f out="" sep=""
  for f in "$@"; do
    if [[ $f == *[,\"$'\n']* ]]; then f="\"${f//\"/\"\"}\""; fi
    out+="$sep$f"
    sep=","
  done
  printf '%s\n' "$out"
}

record() {
  [ -n "${RUCX_RECORD:-}" ] || return 0
  local area=$1 what=$2 ours=$3 ucx=$4 ratio=$5 spread=$6 unit=$7 baseline=${8:-} note=${9:-}
  local root dir file machine cpu commit
  root=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
  if [ "$RUCX_RECORD" = 1 ]; then dir=$root/docs/results/data; else dir=$RUCX_RECORD; fi
  mkdir -p "$dir"
  file=$dir/$area.csv
  cpu=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null)
  machine=${RUCX_MACHINE:-$(hostname)/${cpu:-unknown CPU}}
  commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
  if [ ! -s "$file" ]; then
    echo "area,case,ours,ucx,ratio,spread,unit,machine,date,commit,command,baseline,note" >"$file"
  fi
  _record_csv "$area" "$what" "$ours" "$ucx" "$ratio" "$spread" "$unit" "$machine" \
    "$(date +%F)" "$commit" "${_record_env}${_record_cmd}" "$baseline" "$note" >>"$file"
}
