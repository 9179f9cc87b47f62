#!/usr/bin/env bash
# The disk tier's narrow formats under --precision bf16 (issue 35 items 2 and 4), side by side in one
# run on the same disk: an older memwall (--old BIN, e.g. main's build before the narrow formats:
# fp32 parameters read by forward and backward, fp32 gradients on disk, the norm's pass over them)
# and this one (build/memwall), one after the other, ROUNDS times, each a `memwall bench` of STEPS
# timed steps after WARMUP. Prints per binary the medians of ms/step, the bytes read and written
# per step (measured by the engine, and the plan's), and where the time went: compute (the ops and
# the optimizer's chunks), read and write (the disk busy: they overlap each other and compute) and
# waiting (the step's thread blocked on the disk), and of the step the norm's and optimizer's passes
# (optimizer, opt compute: binaries that report opt_ms). Checks the folder's free space against each
# binary's file first (each run removes its file when it ends), and says what it skips.
#   bench/narrow.sh --old /work/main/build/memwall [--dir DIR] [--rounds 1] [--steps 1] [--warmup 0]
#                   -- MEMWALL BENCH ARGS (default: gpt2-xl B=1 T=1024 bf16 adamw8bit, auto at 4GiB)
# The 7B step of issue 35:
#   bench/narrow.sh --old OLD -- --preset llama2-7b --batch 1 --seq 512 --precision bf16 \
#     --optim adamw8bit --offload auto --recompute auto --budget 8GiB
set -euo pipefail
cd "$(dirname "$0")/.."
OLD="" DIR=build/narrow-bench ROUNDS=1 STEPS=1 WARMUP=0
while [ $# -gt 0 ]; do
  case $1 in
    --old) OLD=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "usage: see the head of bench/narrow.sh" >&2; exit 1 ;;
  esac
done
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(--preset gpt2-xl --batch 1 --seq 1024 --precision bf16 --optim adamw8bit --offload auto --budget 4GiB)
[ -n "$OLD" ] && [ -x "$OLD" ] || { echo "bench/narrow.sh: give --old BIN, the memwall to compare with" >&2; exit 1; }
make -s build/memwall >/dev/null
NEW=build/memwall
mkdir -p "$DIR"
ERR=$(mktemp -d /tmp/mw_narrow_XXXXXX)
trap 'rm -rf "$ERR"' EXIT
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), $(nproc) cores, flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "memwall bench ${args[*]} --offload-dir $DIR --steps $STEPS --warmup $WARMUP; $ROUNDS round(s); load $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A ms rd wr prd pwr cpu ior iow iowt opt optc
bins="old new"
for r in $(seq 1 "$ROUNDS"); do
  for b in $bins; do
    bin=$OLD
    [ $b = new ] && bin=$NEW
    est=$($bin estimate "${args[@]}" --offload-dir "$DIR" --json 2>/dev/null || true)
    need=$(echo "$est" | grep -o '"file_bytes": [0-9]*' | head -1 | sed 's/.*: //')
    free_b=$(df -B1 --output=avail "$DIR" | tail -1 | tr -d ' ')
    prd[$b]=$(echo "$est" | grep -o '"read_bytes_per_step": [0-9]*' | head -1 | sed 's/.*: //')
    pwr[$b]=$(echo "$est" | grep -o '"write_bytes_per_step": [0-9]*' | head -1 | sed 's/.*: //')
    if [ -n "$need" ] && [ "$need" -gt "$free_b" ]; then
      echo "round $r: skipped $b ($bin): its file needs $((need >> 20)) MiB, $DIR has $((free_b >> 20)) MiB free"
      continue
    fi
    out=$($bin bench "${args[@]}" --offload-dir "$DIR" --steps "$STEPS" --warmup "$WARMUP" --json 2>"$ERR/$b.err") ||
      { echo "round $r: $b failed: $(tail -2 "$ERR/$b.err")"; continue; }
    ms[$b]="${ms[$b]:-} $(echo "$out" | grep -o '"ms_per_step": [0-9.]*' | sed 's/.*: //')"
    rd[$b]=$(echo "$out" | grep -o '"read_bytes_per_step": [0-9]*' | sed 's/.*: //')
    wr[$b]=$(echo "$out" | grep -o '"write_bytes_per_step": [0-9]*' | sed 's/.*: //')
    cpu[$b]="${cpu[$b]:-} $(echo "$out" | grep -o '"compute_ms": [0-9.]*' | sed 's/.*: //')"
    ior[$b]="${ior[$b]:-} $(echo "$out" | grep -o '"io_read_ms": [0-9.]*' | sed 's/.*: //')"
    iow[$b]="${iow[$b]:-} $(echo "$out" | grep -o '"io_write_ms": [0-9.]*' | sed 's/.*: //')"
    iowt[$b]="${iowt[$b]:-} $(echo "$out" | grep -o '"io_wait_ms": [0-9.]*' | sed 's/.*: //')"
    opt[$b]="${opt[$b]:-} $(echo "$out" | { grep -o '"opt_ms": [0-9.]*' || true; } | sed 's/.*: //')" # none: a binary before opt_ms
    optc[$b]="${optc[$b]:-} $(echo "$out" | { grep -o '"opt_compute_ms": [0-9.]*' || true; } | sed 's/.*: //')"
    echo "round $r: $b $(echo "${ms[$b]}" | awk '{print $NF}') ms/step (load $(cut -d' ' -f1-3 /proc/loadavg))"
  done
done
median() { tr ' ' '\n' | { grep . || true; } | sort -g | awk '{a[NR]=$1} END {if (NR) print NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
gib() { awk -v b="${1:-0}" 'BEGIN { printf "%.2f", b / 1073741824 }'; }
printf "\n%-5s %11s %9s %9s %9s %9s %14s %14s %16s %10s %12s\n" "" "ms/step" "compute" "read" "write" "waiting" "read GiB" "written GiB" \
  "planned r+w GiB" "optimizer" "opt compute"
for b in $bins; do
  [ -n "${ms[$b]:-}" ] || continue
  o1=$(echo "${opt[$b]:-}" | median) o2=$(echo "${optc[$b]:-}" | median)
  printf "%-5s %11.0f %9.0f %9.0f %9.0f %9.0f %14s %14s %16s %10s %12s\n" "$b" "$(echo "${ms[$b]}" | median)" "$(echo "${cpu[$b]}" | median)" \
    "$(echo "${ior[$b]}" | median)" "$(echo "${iow[$b]}" | median)" "$(echo "${iowt[$b]}" | median)" \
    "$(gib "${rd[$b]}")" "$(gib "${wr[$b]}")" "$(gib $((${prd[$b]:-0} + ${pwr[$b]:-0})))" "${o1:--}" "${o2:--}"
done
echo "optimizer: the step's norm and optimizer passes (wall ms; opt compute: their compute); the rest of ms/step is the micro-batches'; - where a binary does not report them"
if [ -n "${ms[old]:-}" ] && [ -n "${ms[new]:-}" ]; then
  echo "new/old: step $(echo "$(echo "${ms[new]}" | median) $(echo "${ms[old]}" | median)" | awk '{printf "%.3f", $1/$2}')x," \
    "bytes moved $(echo "${rd[new]} ${wr[new]} ${rd[old]} ${wr[old]}" | awk '{printf "%.3f", ($1+$2)/($3+$4)}')x"
fi
rmdir "$DIR" 2>/dev/null || true
