#!/usr/bin/env bash
# The memory plan against real runs: for a matrix of shapes (presets x batch x sequence x
# accumulation), GPT-2 and Llama families, `memwall estimate` (the plan, run dry) next to the arena peak and the peak RSS
# that one real training step measures (`memwall bench --steps 1`). Prints a table; not a test
# (tests/cli_test.sh asserts estimate == arena peak on small shapes).
#   bench/plan_matrix.sh [--quick]     (--quick: skip gpt2-medium, gpt2-large and smollm-360m)
set -euo pipefail
cd "$(dirname "$0")/.."
make -s all >/dev/null
QUICK=${1:-}
field() { grep -o "\"$2\": [-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: //'; }
configs=(
  "--preset gpt2-tiny --batch 1 --seq 64" "--preset gpt2-tiny --batch 8 --seq 64"
  "--preset gpt2-tiny --batch 1 --seq 256" "--preset gpt2-tiny --batch 8 --seq 256"
  "--preset gpt2-tiny --batch 4 --seq 128 --accum 4" "--preset gpt2-tiny --batch 16 --seq 256 --accum 2"
  "--preset gpt2-tiny --batch 3 --seq 100" "--preset gpt2-tiny --batch 32 --seq 32"
  "--layers 6 --heads 6 --dim 384 --vocab 8192 --batch 4 --seq 128"
  "--layers 6 --heads 6 --dim 384 --vocab 8192 --batch 16 --seq 64 --accum 2"
  "--preset gpt2 --batch 1 --seq 64" "--preset gpt2 --batch 4 --seq 64" "--preset gpt2 --batch 8 --seq 64"
  "--preset gpt2 --batch 2 --seq 128 --accum 2" "--preset gpt2 --batch 4 --seq 256" "--preset gpt2 --batch 1 --seq 1024"
  "--preset gpt2-tiny --batch 8 --seq 256 --recompute every:2" "--preset gpt2 --batch 4 --seq 256 --recompute selective"
  "--preset gpt2 --batch 8 --seq 256 --recompute full" "--preset gpt2 --batch 2 --seq 1024 --recompute auto --budget 2500MiB"
  "--preset llama-tiny --batch 4 --seq 64" "--preset llama-tiny --batch 8 --seq 256 --recompute selective"
  "--preset llama-tiny --batch 3 --seq 100 --kv-heads 1 --tied 1"
  "--preset smollm-135m --batch 1 --seq 256" "--preset smollm-135m --batch 4 --seq 256"
  "--preset smollm-135m --batch 4 --seq 512 --recompute full"
  "--preset smollm-135m --batch 2 --seq 1024 --recompute auto --budget 3GiB"
)
[ "$QUICK" = "--quick" ] || configs+=(
  "--preset gpt2-medium --batch 1 --seq 64" "--preset gpt2-medium --batch 2 --seq 256"
  "--preset gpt2-medium --batch 1 --seq 512 --accum 2" "--preset gpt2-large --batch 1 --seq 64"
  "--preset gpt2-large --batch 1 --seq 256" "--preset smollm-360m --batch 2 --seq 512"
)
FIXED_MIB=2.5 # the documented fixed overhead: code, libraries, stacks, small heap (docs/memory.md)
printf "%-58s %14s %14s %5s %12s %10s %14s\n" "shape" "estimate B" "arena peak B" "same" "peak RSS MiB" "RSS-est" "vs est+$FIXED_MIB"
n=0 same=0
for cfg in "${configs[@]}"; do
  E=$(build/memwall estimate $cfg --json) || true
  R=$(build/memwall bench $cfg --steps 1 --warmup 0 --json)
  est=$(field "$E" peak_bytes) got=$(field "$R" peak_bytes) rss=$(field "$R" peak_rss_bytes)
  n=$((n + 1))
  [ "$est" = "$got" ] && same=$((same + 1))
  printf "%-58s %14s %14s %5s %12.1f %7.1f MiB %+13.2f%%\n" "$cfg" "$est" "$got" "$([ "$est" = "$got" ] && echo yes || echo NO)" \
    "$(awk -v r="$rss" 'BEGIN{print r/1048576}')" "$(awk -v r="$rss" -v e="$est" 'BEGIN{print (r-e)/1048576}')" \
    "$(awk -v r="$rss" -v e="$est" -v f="$FIXED_MIB" 'BEGIN{x=e+f*1048576; print 100*(r-x)/x}')"
done
echo "estimate == arena peak, to the byte: $same of $n shapes"
[ "$same" -eq "$n" ]
