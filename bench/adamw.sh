#!/usr/bin/env bash
# memwall's AdamW step beside PyTorch's, in one run on the same machine and threads (issue 14,
# item 4): build/adamw_bench (the step in memory against the memory bandwidth of the same traffic;
# with the moments on disk against the disk's sequential bandwidth, interleaved round by round)
# and ../shared/peers/torch_gpt2_bench.py --opt-only (torch.optim.AdamW.step() on GPT-2 124M's
# parameters). Medians; the ratio is the figure to read.
#   bench/adamw.sh [--threads N] [--reps R] [--dir DIR] [--preset gpt2]
# DIR (default build/adamw-scratch) must hold 16 bytes per parameter (2 GB for 124M); the disk
# part is skipped, saying so, when it does not. Needs python3-torch (scripts/install-deps.sh --bench)
# for the peer; without it only memwall's figures are printed.
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc) REPS=5 DIR=build/adamw-scratch PRESET=gpt2
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --preset) PRESET=$2; shift 2 ;;
    *) echo "usage: bench/adamw.sh [--threads N] [--reps R] [--dir DIR] [--preset gpt2]" >&2; exit 1 ;;
  esac
done
PEER=${PEER:-../shared/peers/torch_gpt2_bench.py}
PY=/usr/bin/python3
export OMP_NUM_THREADS=$THREADS
make -s build/adamw_bench build/memwall >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'), flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "threads $THREADS, disk: $(df -h "$(dirname "$DIR")" | tail -1 | awk '{print $4 " free on " $1}')"
params=$(build/memwall estimate --preset "$PRESET" --json | grep -o '"params": [0-9]*' | sed 's/.*: //')
mkdir -p "$DIR"
mw=$(build/adamw_bench --params "$params" --reps "$REPS" --dir "$DIR" --json)
rmdir "$DIR" 2>/dev/null || true
field() { echo "$1" | grep -o "\"$2\": \"*[-0-9.a-z_]*" | head -1 | sed 's/.*: "*//'; }
ms=$(field "$mw" adamw_ms)
echo
printf "%-44s %12s %12s\n" "AdamW step, $PRESET ($params parameters)" "ms" "GB/s (28 B)"
printf "%-44s %12.1f %12.2f\n" "memory: the same traffic without the math" "$(echo "$params $(field "$mw" mem_gb_s_28)" | awk '{print 28*$1/($2*1e9)*1e3}')" "$(field "$mw" mem_gb_s_28)"
printf "%-44s %12.1f %12.2f   (%s of the memory bandwidth)\n" "memwall, in memory" "$ms" "$(field "$mw" adamw_gb_s_28)" \
  "$(echo "$(field "$mw" adamw_fraction_of_mem)" | awk '{printf "%.0f%%", 100*$1}')"
if [ -n "$(field "$mw" offloaded_ms)" ]; then
  printf "%-44s %12.1f   write %s GB/s, read %s GB/s (%s)\n" "disk: sequential, the same bytes" "$(field "$mw" disk_only_ms)" \
    "$(field "$mw" disk_write_gb_s)" "$(field "$mw" disk_read_gb_s)" "$(field "$mw" engine)"
  printf "%-44s %12.1f\n" "disk: the stream's transfers, no update" "$(field "$mw" transfers_only_ms)"
  printf "%-44s %12.1f   (%s of the disk's sequential bandwidth)\n" "memwall, m and v on disk" "$(field "$mw" offloaded_ms)" \
    "$(echo "$(field "$mw" offloaded_fraction_of_disk)" | awk '{printf "%.0f%%", 100*$1}')"
else
  echo "  $(echo "$mw" | grep -o '"disk": "[^"]*"' | sed 's/"disk": //')"
fi
if $PY -c 'import torch' 2>/dev/null; then
  peer=$(LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp $PY "$PEER" --preset "$PRESET" --opt-only \
    --threads "$THREADS" --steps "$REPS" --json 2>/dev/null | grep '^{' | tail -1)
  pms=$(echo "$peer" | grep -o '"ms_median": [0-9.]*' | sed 's/.*: //')
  if [ -n "$pms" ]; then
    printf "%-44s %12.1f %12.2f\n" "PyTorch $($PY -c 'import torch; print(torch.__version__)') AdamW.step()" "$pms" \
      "$(echo "$params $pms" | awk '{print 28*$1/($2/1e3)/1e9}')"
    echo "memwall in memory / PyTorch: $(echo "$pms $ms" | awk '{printf "%.2fx faster", $1/$2}')"
  else
    echo "the peer printed no step time: $peer"
  fi
else
  echo "(PyTorch not installed: scripts/install-deps.sh --bench; the peer's figure is missing)"
fi
