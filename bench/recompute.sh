#!/usr/bin/env bash
# Activation memory and time per recomputation policy, GPT-2 124M on this machine's threads.
#  1. Per-layer bytes each policy keeps from forward to backward (read from `memwall plan --json`:
#     a middle block's buffers that live across the head), beside the formulas.
#  2. Step time per policy, interleaved rounds (one step of each policy per round, after a warm-up
#     step), medians and the ratio to none. Then auto at budgets between full's plan and none's,
#     beside the fastest fixed policy whose plan fits that budget.
#  3. B=8, T=1024 with --recompute full: peak RSS beside PyTorch's (plain, and with
#     torch.utils.checkpoint per block) from bench/torch_gpt2.py (PEER= overrides), one step each.
#   bench/recompute.sh [--threads N] [--rounds N] [--configs "4x256 2x1024"] [--skip-b8]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc) ROUNDS=3 CONFIGS="4x256 2x1024" SKIP_B8=0
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --skip-b8) SKIP_B8=1; shift ;;
    *) echo "bench/recompute.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
make -s all >/dev/null
PY=/usr/bin/python3
MW=build/memwall
field() { grep -o "\"$2\": [-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: //'; }
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads $THREADS"

echo
echo "== 1. bytes kept per layer from forward to backward (GPT-2 124M, B=4, T=1024; middle block h.6)"
B=4 T=1024 C=768 H=12
printf "%-10s | %14s | %-34s | %s\n" policy "memwall plan" "memwall formula (fp32)" "Korthikanti et al. (16-bit; x2 = fp32)"
for p in none selective full; do
  kept=$("$MW" plan --preset gpt2 --batch $B --seq $T --recompute $p --json | $PY -c '
import json, sys
j = json.load(sys.stdin)
head = next(i for i, o in enumerate(j["ops"]) if o["op"] == "head+loss")
print(sum(b["bytes"] for b in j["buffers"] if b["name"].startswith("h.6.") and b["first_op"] < head < b["last_op"]))')
  case $p in
    none) f=$((64 * B * T * C + 4 * B * H * T + 16 * B * T)); fs="64BTC + 4BHT + 16BT"
          k=$((34 * B * T * C + 5 * H * B * T * T)); ks="34BTC + 5HBT^2" ;;
    selective) f=$((40 * B * T * C + 4 * B * H * T)); fs="40BTC + 4BHT"; k=$((34 * B * T * C)); ks="34BTC" ;;
    full) f=$((4 * B * T * C)); fs="4BTC"; k=$((2 * B * T * C)); ks="2BTC" ;;
  esac
  printf "%-10s | %10.1f MiB | %-20s %9.1f MiB | %-16s %9.1f MiB (x2 %.1f)\n" $p "$(awk -v a=$kept 'BEGIN{print a/1048576}')" \
    "$fs" "$(awk -v a=$f 'BEGIN{print a/1048576}')" "$ks" "$(awk -v a=$k 'BEGIN{print a/1048576}')" \
    "$(awk -v a=$k 'BEGIN{print 2*a/1048576}')"
done

for cfg in $CONFIGS; do
  B=${cfg%x*} T=${cfg#*x}
  echo
  echo "== 2. step time by policy, GPT-2 124M B=$B T=$T: $ROUNDS interleaved rounds, medians"
  declare -A ms peak
  pols="none selective full every:sqrt"
  for p in $pols; do ms[$p]=""; done
  for r in $(seq "$ROUNDS"); do
    for p in $pols; do
      j=$("$MW" bench --preset gpt2 --batch "$B" --seq "$T" --recompute "$p" --steps 1 --warmup 1 --threads "$THREADS" --json)
      ms[$p]="${ms[$p]} $(field "$j" ms_per_step)"
      peak[$p]=$(field "$j" peak_bytes)
    done
  done
  med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{a[NR]=$1} END{print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'; }
  base=$(med "${ms[none]}")
  printf "%-11s | %10s %8s | %12s\n" policy "ms/step" "vs none" "plan peak"
  for p in $pols; do
    m=$(med "${ms[$p]}")
    printf "%-11s | %10.0f %7.3fx | %8.0f MiB\n" "$p" "$m" "$(awk -v a="$m" -v b="$base" 'BEGIN{print a/b}')" \
      "$(awk -v a="${peak[$p]}" 'BEGIN{print a/1048576}')"
  done
  echo "-- auto at budgets between full's plan and none's (same rounds, medians)"
  pf=${peak[full]} ps=${peak[selective]} pn=${peak[none]}
  for bud in $((pf + (ps - pf) / 4)) $((pf + (ps - pf) * 3 / 4)) $((ps + (pn - ps) / 2)) "$pn"; do
    plan=$("$MW" estimate --preset gpt2 --batch "$B" --seq "$T" --recompute auto --budget "$bud" --json)
    choice=$(grep -o '"recompute": "[^"]*"' <<<"$plan" | head -1 | sed 's/.*: //')
    am=""
    for r in $(seq "$ROUNDS"); do
      j=$("$MW" bench --preset gpt2 --batch "$B" --seq "$T" --recompute auto --budget "$bud" --steps 1 --warmup 1 --threads "$THREADS" --json)
      am="$am $(field "$j" ms_per_step)"
    done
    a=$(med "$am") best="" bm=""
    for p in none selective full every:sqrt; do
      [ "${peak[$p]}" -le "$bud" ] || continue
      m=$(med "${ms[$p]}")
      if [ -z "$bm" ] || awk -v a="$m" -v b="$bm" 'BEGIN{exit !(a<b)}'; then bm=$m best=$p; fi
    done
    printf "  budget %8.0f MiB: auto %s %8.0f ms | fastest fixed policy that fits: %s %8.0f ms | auto/fixed %.3f\n" \
      "$(awk -v a="$bud" 'BEGIN{print a/1048576}')" "$choice" "$a" "${best:-none-fits}" "${bm:-0}" \
      "$(awk -v a="$a" -v b="${bm:-0}" 'BEGIN{print (b > 0 ? a / b : 0)}')"
  done
  unset ms peak
done

[ "$SKIP_B8" = 1 ] && exit 0
echo
echo "== 3. GPT-2 124M, B=8, T=1024, one training step: peak RSS"
j=$("$MW" bench --preset gpt2 --batch 8 --seq 1024 --recompute full --steps 1 --warmup 0 --threads "$THREADS" --json)
printf "memwall --recompute full: peak RSS %.0f MiB (%.3f GiB), plan %.0f MiB, %.0f ms/step\n" \
  "$(awk -v a="$(field "$j" peak_rss_bytes)" 'BEGIN{print a/1048576}')" \
  "$(awk -v a="$(field "$j" peak_rss_bytes)" 'BEGIN{print a/1073741824}')" \
  "$(awk -v a="$(field "$j" peak_bytes)" 'BEGIN{print a/1048576}')" "$(field "$j" ms_per_step)"
PEER=${PEER:-bench/torch_gpt2.py}
if [ -f "$PEER" ] && $PY -c "import torch" 2>/dev/null; then
  export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp
  for mode in "--checkpoint" ""; do
    # the plain one is capped (address space) below the machine's RAM; FAILED means it needed more
    cap=$(awk '/MemTotal/ {printf "%.0f", $2 * 1024 * 0.85}' /proc/meminfo)
    out=$(prlimit --as="$cap" $PY "$PEER" --preset gpt2 --batch 8 --seq 1024 --mem-probe $mode --threads "$THREADS" --json 2>&1 || true)
    if grep -q '"peak_rss_mib"' <<<"$out" && ! grep -q '"error"' <<<"$out"; then
      printf "PyTorch %-13s: peak RSS %.0f MiB, %.0f ms/step\n" "${mode:-(plain)}" "$(field "$(tail -1 <<<"$out")" peak_rss_mib)" \
        "$(field "$(tail -1 <<<"$out")" ms_median)"
    else
      printf "PyTorch %-13s: FAILED under a %.1f GiB address-space cap at peak RSS %s MiB: %s\n" "${mode:-(plain)}" \
        "$(awk -v a="$cap" 'BEGIN{print a/1073741824}')" "$(field "$(tail -1 <<<"$out")" peak_rss_mib)" \
        "$(grep -m1 FAILED <<<"$out" | cut -c1-160)"
    fi
  done
else
  echo "PyTorch: not run (needs python3-torch: scripts/install-deps.sh --bench)"
fi
