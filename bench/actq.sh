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
#     Where memwall has --act-compress, the bytes are those its plan compresses (estimate --json's
#     act classes), not every kept byte;
#  3. where memwall has --act-compress, the measured step times with it (8, 4, 2) beside the same
#     run without it, in --rounds rounds that alternate the four runs (a load on the machine falls on
#     all of them), each run's median step, then the median over the rounds.
#   bench/actq.sh [--threads N] [--reps R] [--batch B] [--seq T] [--steps S] [--rounds K]
# MW=path/to/memwall measures another build (default build/memwall).
# Defaults: 2 threads, B=1, T=1024, 3 timed steps (the issue's shape is --batch 8: both the kept
# bytes and the step time grow with B, so the share changes little).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=2 REPS=7 B=1 T=1024 STEPS=3 ROUNDS=2
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --batch) B=$2; shift 2 ;;
    --seq) T=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "usage: bench/actq.sh [--threads N] [--reps R] [--batch B] [--seq T] [--steps S] [--rounds K]" >&2; exit 1 ;;
  esac
done
make -s build/actq_bench build/memwall >/dev/null
# the wait policy memwall's CLI runs with (src/cli/omp_env.c): with libgomp's spinning default, on
# a loaded machine, 2 threads wait for each other at every call's join
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
MW=${MW:-build/memwall}
ACT=0
"$MW" bench --help 2>&1 | grep -q -- '--act-compress' && ACT=1
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($(nproc) cores), flags: $(grep -o -w -E 'sse4_2|avx2|fma|avx512f|avx512bw' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "quantiser: plain C, vectorised by the compiler for the build's BASELINE (Makefile; x86-64-v3: AVX2); memwall $(git rev-parse --short HEAD 2>/dev/null || echo '?'); OMP_WAIT_POLICY=$OMP_WAIT_POLICY; load average $(cut -d' ' -f1-3 /proc/loadavg)"
q=$(build/actq_bench --reps "$REPS" --json)
echo
field() { grep -o "\"$2\": \"*[-0-9.a-z_]*" <<<"$1" | head -1 | sed 's/.*: "*//'; }
# the rates at the step's thread count (1 or 2: the figures actq_bench measures)
tkey=t2
[ "$THREADS" = 1 ] && tkey=t1
rates=$(grep -o "\"$tkey\": {[^}]*}" <<<"$q")
est=$($MW estimate --preset gpt2 --batch "$B" --seq "$T" --recompute none --threads "$THREADS" --json)
kept=$(grep -o '"categories": {[^}]*}' <<<"$est" | tail -1 | grep -o '"activations": [0-9]*' | sed 's/.*: //')
# the fp32 bytes --act-compress B stores quantised (the plan's classes of compressed values)
compressed_bytes() {
  $MW estimate --preset gpt2 --batch "$B" --seq "$T" --recompute none --threads "$THREADS" --act-compress "$1" --json |
    grep -o '{"value": [^}]*}' | awk '{ c = $0; sub(/.*"compressed": /, "", c); sub(/,.*/, "", c)
      b = $0; sub(/.*"bytes": /, "", b); sub(/,.*/, "", b); if (c + 0 > 0) t += b } END { printf "%.0f\n", t }'
}
run() { $MW bench --preset gpt2 --batch "$B" --seq "$T" --steps "$STEPS" --warmup 1 --threads "$THREADS" --json --progress none "$@" | tail -1; }
base=$(run)
ms=$(field "$base" ms_per_step)
echo "GPT-2 124M, B=$B T=$T, --recompute none, $THREADS threads: $kept bytes kept for the backward pass (fp32),"
echo "step $ms ms (memwall bench, median of $STEPS steps); load average $(cut -d' ' -f1-3 /proc/loadavg)"
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
printf "%-6s %14s %9s %9s %11s %12s\n" bits "fp32 bytes" "q GB/s" "dq GB/s" "q+dq, ms" "of the step"
for b in 8 4 2; do
  qr=$(field "$rates" "q${b}_gb_s") dr=$(field "$rates" "dq${b}_gb_s")
  k=$kept what="every kept byte"
  [ "$ACT" = 1 ] && k=$(compressed_bytes "$b") what="what --act-compress $b compresses"
  awk -v k="$k" -v q="$qr" -v d="$dr" -v s="$ms" -v b="$b" -v w="$what" \
    'BEGIN { t = (k / (q * 1e9) + k / (d * 1e9)) * 1e3
      printf "%-6s %14.0f %9.2f %9.2f %11.1f %11.1f%%  (estimate: %s)\n", b, k, q, d, t, 100 * t / s, w }'
done
if [ "$ACT" = 1 ]; then
  echo
  declare -A all
  for ((r = 1; r <= ROUNDS; r++)); do
    for c in none 8 4 2; do all[$c]+="$(field "$(run --act-compress "$c")" ms_per_step) "; done
  done
  med() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
  printf "%-22s %12s %12s   %s\n" "measured" "ms/step" "vs none" "(each round's median step)"
  mn=$(med "${all[none]}")
  for c in none 8 4 2; do
    m=$(med "${all[$c]}")
    printf "%-22s %12.1f %11.1f%%   %s\n" "--act-compress $c" "$m" "$(awk -v a="$m" -v s="$mn" 'BEGIN { print 100 * (a / s - 1) }')" "${all[$c]}"
  done
else
  echo
  echo "(this memwall has no --act-compress: the measured rows come when issue 38's act branch is merged)"
fi
