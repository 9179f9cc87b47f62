#!/usr/bin/env bash
# Bytes a step moves to and from the disk tier per --budget, whole categories against chunks, side
# by side in one run (issue 35, item 1): for each budget, the category-level placement (the least
# on disk of --offload none, optimizer, optimizer+grads, all that fits, each with --recompute
# auto, as --offload auto chose before chunks) and --offload auto's chunk placement (recompute auto
# too: one decision), each with its bytes read and written per step, the disk file and the plan's
# peak. Plans only (estimate: measure mode, nothing allocated); the bytes are the plan's, which
# tests/cli_chunks.sh and cli_offload.sh hold equal to what a run moves.
#   bench/chunks.sh [--preset gpt2-xl] [--batch 1] [--seq 1024] [--budgets "4 8 12 16"] [--dir DIR]
# With --dir, the disk's room and rate are measured there: auto then also weighs the predicted step
# (the recomputation its kept chunks force against the transfers they save), and placements whose
# file the folder cannot hold do not fit. Without, auto keeps the most chunks that fit.
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=gpt2-xl B=1 T=1024 BUDGETS="4 8 12 16" DIR=
while [ $# -gt 0 ]; do
  case $1 in
    --preset) PRESET=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    --budgets) BUDGETS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    *) echo "usage: $0 [--preset P] [--batch B] [--seq T] [--budgets \"4 8 12 16\"] [--dir DIR]" >&2; exit 2 ;;
  esac
done
MW=build/memwall
[ -x $MW ] || make -s $MW
a=(--preset "$PRESET" --batch "$B" --seq "$T")
[ -n "$DIR" ] && mkdir -p "$DIR" && a+=(--offload-dir "$DIR")
jv() { grep -o "\"$2\": [0-9]*" <<<"$1" | head -1 | sed 's/.*: //'; }
gb() { awk -v b="${1:-0}" 'BEGIN { printf "%.1f", b / 1e9 }'; }
echo "$PRESET B=$B T=$T, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), commit $(git rev-parse --short HEAD)${DIR:+, disk in $DIR}"
printf "%-8s | %-16s %10s %8s | %-40s %10s %8s %8s | %s\n" budget "categories" "moved GB" "peak GB" "chunks (--offload auto)" "moved GB" "peak GB" "file GB" "ratio"
for bu in $BUDGETS; do
  cat_mode=- cat_moved= cat_peak=
  for mode in none optimizer optimizer+grads all; do
    e=$($MW estimate "${a[@]}" --budget "${bu}GiB" --offload "$mode" --recompute auto --json 2>/dev/null || true)
    if grep -q '"fits": true' <<<"$e"; then
      cat_mode=$mode cat_moved=$(($(jv "$e" read_bytes_per_step) + $(jv "$e" write_bytes_per_step))) cat_peak=$(jv "$e" peak_bytes)
      break
    fi
  done
  e=$($MW estimate "${a[@]}" --budget "${bu}GiB" --offload auto --json 2>/dev/null || true)
  pin=$(grep -o '"offload_pin": "[^"]*"' <<<"$e" | sed 's/.*: "//; s/"//')
  [ -n "$pin" ] || pin=$(grep -o '"offload": "[^"]*"' <<<"$e" | head -1 | sed 's/.*: "//; s/"//')
  grep -q '"fits": true' <<<"$e" || pin="$pin (does not fit)"
  moved=$(($(jv "$e" read_bytes_per_step) + $(jv "$e" write_bytes_per_step)))
  ratio=-
  [ -n "$cat_moved" ] && [ "$cat_moved" -gt 0 ] && ratio=$(awk -v a=$moved -v b=$cat_moved 'BEGIN { printf "%.2fx", a / b }')
  printf "%-8s | %-16s %10s %8s | %-40s %10s %8s %8s | %s\n" "${bu} GiB" "$cat_mode" "$(gb "$cat_moved")" "$(gb "$cat_peak")" \
    "$pin" "$(gb "$moved")" "$(gb "$(jv "$e" peak_bytes)")" "$(gb "$(jv "$e" file_bytes)")" "$ratio"
done
