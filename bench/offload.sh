#!/usr/bin/env bash
# Training steps with the model states in memory and on the disk tier, side by side in one run
# (issue 14): memwall bench under --offload none and each MODE, interleaved round by round, each
# printing its median ms/step, the ratio to memory, peak RSS and the bytes the disk moved. Checks
# the disk's free space against each mode's file first and says what it skips. With the numbers
# it also prints the tokens per step below which the disk's time would exceed the step's compute
# (where I/O dominates): the disk's own time for the mode's bytes (estimate's prediction at the
# rate it measures in DIR), divided by the in-memory step's time per token. Where the time went, per
# mode (means over the timed steps of the step's clock, in ms; issue 35): compute (the ops and the
# optimizer's chunks), read and write (the disk busy reading, writing: the union of the requests'
# flight), waiting (the step's thread blocked on the disk), beside estimate's predicted step (its
# phases overlapped, from the ops' and the disk's rates measured here).
#   bench/offload.sh [--preset gpt2-medium] [--batch 8] [--seq 1024] [--recompute full]
#                    [--modes "optimizer all"] [--rounds 1] [--steps 1] [--warmup 1]
#                    [--threads N] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=gpt2-medium B=8 T=1024 RECOMPUTE=full MODES="optimizer all" ROUNDS=1 STEPS=1 WARMUP=1
THREADS=$(nproc) DIR=build/offload-bench
while [ $# -gt 0 ]; do
  case $1 in
    --preset) PRESET=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    --recompute) RECOMPUTE=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    *) echo "usage: see the head of bench/offload.sh" >&2; exit 1 ;;
  esac
done
make -s build/memwall >/dev/null
MW=build/memwall
mkdir -p "$DIR"
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
free_b=$(df -B1 --output=avail "$DIR" | tail -1 | tr -d ' ')
echo "$PRESET B=$B T=$T --recompute $RECOMPUTE, $THREADS threads, $STEPS timed step(s) after $WARMUP per run, $ROUNDS round(s); $DIR has $((free_b >> 20)) MiB free"
common=(--preset "$PRESET" --batch "$B" --seq "$T" --recompute "$RECOMPUTE" --threads "$THREADS")
run_modes="none"
for m in $MODES; do
  need=$($MW estimate "${common[@]}" --offload "$m" --json | grep -o '"file_bytes": [0-9]*' | head -1 | sed 's/.*: //')
  if [ "$need" -gt "$free_b" ]; then
    echo "skipped --offload $m: its file needs $((need >> 20)) MiB, $DIR has $((free_b >> 20)) MiB free"
  else
    run_modes="$run_modes $m"
  fi
done
declare -A ms rss rd wr cpu ior iow iowt
for r in $(seq 1 "$ROUNDS"); do
  for m in $run_modes; do
    extra=()
    [ "$m" != none ] && extra=(--offload "$m" --offload-dir "$DIR")
    out=$($MW bench "${common[@]}" --steps "$STEPS" --warmup "$WARMUP" --json "${extra[@]}" 2>/dev/null)
    ms[$m]="${ms[$m]:-} $(echo "$out" | grep -o '"ms_per_step": [0-9.]*' | sed 's/.*: //')"
    rss[$m]=$(echo "$out" | grep -o '"peak_rss_bytes": [0-9]*' | sed 's/.*: //')
    rd[$m]=$(echo "$out" | grep -o '"read_bytes_per_step": [0-9]*' | sed 's/.*: //')
    wr[$m]=$(echo "$out" | grep -o '"write_bytes_per_step": [0-9]*' | sed 's/.*: //')
    cpu[$m]="${cpu[$m]:-} $(echo "$out" | grep -o '"compute_ms": [0-9.]*' | sed 's/.*: //')"
    ior[$m]="${ior[$m]:-} $(echo "$out" | grep -o '"io_read_ms": [0-9.]*' | sed 's/.*: //')"
    iow[$m]="${iow[$m]:-} $(echo "$out" | grep -o '"io_write_ms": [0-9.]*' | sed 's/.*: //')"
    iowt[$m]="${iowt[$m]:-} $(echo "$out" | grep -o '"io_wait_ms": [0-9.]*' | sed 's/.*: //')"
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
base=$(echo "${ms[none]}" | median)
tokens=$((B * T))
printf "\n%-18s %12s %8s %14s %16s %16s\n" "--offload" "ms/step" "ratio" "peak RSS MiB" "disk read/step" "disk write/step"
for m in $run_modes; do
  med=$(echo "${ms[$m]}" | median)
  printf "%-18s %12.1f %7.3fx %14.0f %13.0f MiB %13.0f MiB\n" "$m" "$med" "$(echo "$med $base" | awk '{print $1/$2}')" \
    "$(echo "${rss[$m]}" | awk '{print $1/1048576}')" "$(echo "${rd[$m]:-0}" | awk '{print $1/1048576}')" \
    "$(echo "${wr[$m]:-0}" | awk '{print $1/1048576}')"
done
printf "\nwhere the time went (ms a step, the rounds' medians; read and write overlap each other and compute):\n"
printf "%-18s %12s %10s %10s %10s %10s %16s\n" "--offload" "ms/step" "compute" "read" "write" "waiting" "predicted ms"
for m in $run_modes; do
  pst="-"
  [ "$m" != none ] && pst=$($MW estimate "${common[@]}" --offload "$m" --offload-dir "$DIR" --json |
    grep -o '"predicted_step_seconds": [0-9.]*' | sed 's/.*: //' | awk '{printf "%.1f", $1 * 1e3}')
  printf "%-18s %12.1f %10.1f %10.1f %10.1f %10.1f %16s\n" "$m" "$(echo "${ms[$m]}" | median)" \
    "$(echo "${cpu[$m]}" | median)" "$(echo "${ior[$m]}" | median)" "$(echo "${iow[$m]}" | median)" \
    "$(echo "${iowt[$m]}" | median)" "${pst:-?}"
done
for m in $run_modes; do
  [ "$m" = none ] && continue
  med=$(echo "${ms[$m]}" | median)
  # the disk's own time for this mode's bytes, at the rate estimate measures in DIR now
  pred=$($MW estimate "${common[@]}" --offload "$m" --offload-dir "$DIR" --json | grep -o '"predicted_seconds": [0-9.]*' | sed 's/.*: //')
  echo "$m: measured $(echo "$med $base" | awk '{printf "%+.1f", $1-$2}') ms a step against memory;" \
    "the disk alone needs ${pred:-?} s for its bytes (estimate, measured in $DIR), so it would dominate below" \
    "$(echo "${pred:-0} $base $tokens" | awk '{printf "%.0f", $1*1e3/($2/$3)}') tokens per step" \
    "(the in-memory step takes $(echo "$base $tokens" | awk '{printf "%.2f", $1/$2}') ms per token)"
done
rmdir "$DIR" 2>/dev/null || true
