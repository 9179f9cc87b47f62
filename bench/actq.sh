#!/usr/bin/env bash
# The activation quantiser's speed and what it costs a step (issue 38, "Time"):
#  1. build/actq_bench: mw_actq_quantize and mw_actq_dequantize at 8/4/2/1 bits, 1 and 2 threads,
#     beside memcpy of the same floats (GB/s of fp32 bytes, medians of interleaved rounds);
#  2. an estimate of compression's share of a GPT-2 124M step: the fp32 bytes the plan keeps for
#     the backward pass under --recompute none (estimate's activations), each quantised once in
#     the forward pass and dequantised once in the backward pass at the rates of 1, over the step
#     time that `memwall bench` measures at the same shape and threads. An estimate, and an upper
#     bound on the kernels' share: it compresses every kept byte, where --act-compress compresses
#     the values that tolerate it;
#  3. where build/memwall has --act-compress, the measured step times with it (8, 4, 2) beside
#     the same run without it.
#   bench/actq.sh [--threads N] [--reps R] [--batch B] [--seq T] [--steps S]
# Defaults: 2 threads, B=1, T=1024, 3 timed steps (the issue's shape is --batch 8: both the kept
# bytes and the step time grow with B, so the share changes little).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=2 REPS=7 B=1 T=1024 STEPS=3
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    *) echo "usage: bench/actq.sh [--threads N] [--reps R] [--batch B] [--seq T] [--steps S]" >&2; exit 1 ;;
  esac
done
make -s build/actq_bench build/memwall >/dev/null
MW=build/memwall
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($(nproc) cores), flags: $(grep -o -w -E 'sse4_2|avx2|fma|avx512f|avx512bw' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "quantiser: plain C, vectorised by the compiler for the build's BASELINE (Makefile; x86-64-v3: AVX2); memwall $(git rev-parse --short HEAD 2>/dev/null || echo '?'); load average $(cut -d' ' -f1-3 /proc/loadavg)"
q=$(build/actq_bench --reps "$REPS" --json)
echo
field() { grep -o "\"$2\": \"*[-0-9.a-z_]*" <<<"$1" | head -1 | sed 's/.*: "*//'; }
# the rates at the step's thread count (1 or 2: the figures actq_bench measures)
tkey=t2
[ "$THREADS" = 1 ] && tkey=t1
rates=$(grep -o "\"$tkey\": {[^}]*}" <<<"$q")
est=$($MW estimate --preset gpt2 --batch "$B" --seq "$T" --recompute none --threads "$THREADS" --json)
kept=$(grep -o '"categories": {[^}]*}' <<<"$est" | tail -1 | grep -o '"activations": [0-9]*' | sed 's/.*: //')
run() { $MW bench --preset gpt2 --batch "$B" --seq "$T" --steps "$STEPS" --warmup 1 --threads "$THREADS" --json --progress none "$@" | tail -1; }
base=$(run)
ms=$(field "$base" ms_per_step)
echo "GPT-2 124M, B=$B T=$T, --recompute none, $THREADS threads: kept for the backward pass $kept bytes (fp32),"
echo "step $ms ms (memwall bench, median of $STEPS steps)"
echo
echo "actq_bench: $(field "$q" values) values, median of $(field "$q" reps) interleaved rounds, GB/s of fp32 bytes"
printf "%-8s %8s" threads memcpy
for b in 8 4 2 1; do printf " %6s %6s" "q$b" "dq$b"; done
echo
for t in 1 2; do
  r=$(grep -o "\"t$t\": {[^}]*}" <<<"$q")
  printf "%-8s %8s" "$t" "$(field "$r" memcpy_gb_s)"
  for b in 8 4 2 1; do printf " %6s %6s" "$(field "$r" "q${b}_gb_s")" "$(field "$r" "dq${b}_gb_s")"; done
  echo
done
echo
printf "%-6s %12s %12s %14s %12s\n" bits "q GB/s" "dq GB/s" "q+dq, ms" "of the step"
for b in 8 4 2; do
  qr=$(field "$rates" "q${b}_gb_s") dr=$(field "$rates" "dq${b}_gb_s")
  awk -v k="$kept" -v q="$qr" -v d="$dr" -v s="$ms" -v b="$b" \
    'BEGIN { t = (k / (q * 1e9) + k / (d * 1e9)) * 1e3; printf "%-6s %12.2f %12.2f %14.1f %11.1f%%  (estimate)\n", b, q, d, t, 100 * t / s }'
done
if $MW bench --help 2>&1 | grep -q -- '--act-compress'; then
  echo
  printf "%-22s %12s %12s\n" "measured" "ms/step" "vs none"
  printf "%-22s %12s %12s\n" "--act-compress none" "$ms" "-"
  for b in 8 4 2; do
    m=$(field "$(run --act-compress "$b")" ms_per_step)
    printf "%-22s %12s %11.1f%%\n" "--act-compress $b" "$m" "$(awk -v a="$m" -v s="$ms" 'BEGIN { print 100 * (a / s - 1) }')"
  done
else
  echo
  echo "(this memwall has no --act-compress: the measured rows come when issue 38's act branch is merged)"
fi
