#!/usr/bin/env bash
# Every --optim's step on a preset's parameter table (build/optim_bench, in memory, medians), beside
# PyTorch's torch.optim.AdamW.step() on the same parameters in the same run
# (../shared/peers/torch_gpt2_bench.py --opt-only). PyTorch 1.13 has no Adafactor and Debian has
# no bitsandbytes, so AdamW is the one peer; the other rows read against memwall's AdamW.
#   bench/optim.sh [--threads N] [--reps R] [--preset gpt2]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc) REPS=5 PRESET=gpt2
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --preset) PRESET=$2; shift 2 ;;
    *) echo "usage: bench/optim.sh [--threads N] [--reps R] [--preset gpt2]" >&2; exit 1 ;;
  esac
done
PEER=${PEER:-../shared/peers/torch_gpt2_bench.py}
PY=/usr/bin/python3
export OMP_NUM_THREADS=$THREADS
make -s build/optim_bench >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "threads $THREADS, memwall $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
# one run of every optimizer, printed beside the peer's AdamW (timed right after it)
mw=$(build/optim_bench --preset "$PRESET" --reps "$REPS" --json)
pms=""
if $PY -c 'import torch' 2>/dev/null; then
  peer=$(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp $PY "$PEER" --preset "$PRESET" --opt-only \
    --threads "$THREADS" --steps "$REPS" --json 2>/dev/null | grep '^{' | tail -1)
  pms=$(echo "$peer" | grep -o '"ms_median": [0-9.]*' | sed 's/.*: //')
  [ -n "$pms" ] || echo "the peer printed no step time: $peer"
  [ -n "$pms" ] && echo "PyTorch $($PY -c 'import torch; print(torch.__version__)') AdamW.step(): $(printf '%.1f' "$pms") ms"
else
  echo "(no python3-torch: scripts/install-deps.sh --bench installs the peer)"
fi
printf '%-10s %10s %14s %10s %12s\n' "--optim" "ms" "state B/param" "x AdamW" "x PyTorch"
for o in adamw adamw8bit adam4bit adafactor came sgd; do
  row=$(echo "$mw" | grep -o "\"$o\": {[^}]*}")
  ms=$(echo "$row" | grep -o '"ms": [0-9.]*' | sed 's/.*: //')
  bpp=$(echo "$row" | grep -o '"state_bytes_per_param": [0-9.]*' | sed 's/.*: //')
  va=$(echo "$row" | grep -o '"vs_adamw": [0-9.]*' | sed 's/.*: //')
  vp=$([ -n "$pms" ] && echo "$ms $pms" | awk '{printf "%.2f", $1/$2}' || echo -)
  printf '%-10s %10.1f %14.3f %10.2f %12s\n' "$o" "$ms" "$bpp" "$va" "$vp"
done
