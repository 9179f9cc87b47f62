#!/usr/bin/env bash
# Data parallelism (issue 16) on this machine, three tables:
#  1. per-rank memory for GPT-2 124M and gpt2-medium, ZeRO stages 0-3 at N = 2 and 4 ranks: the
#     plan's peak and model states (estimate --world N --zero S: exact, as tests/cli_zero.sh checks
#     rank by rank) beside ZeRO's per-rank formula for memwall's fp32 bytes (4 + 4 + 8 per parameter)
#     and the paper's mixed-precision figure (2 + 2 + 12);
#  2. measured training steps of GPT-2 124M and gpt2-medium at N = 2 and 4 (mpirun --oversubscribe,
#     1 thread per rank; a configuration whose ranks' plans do not fit 80% of the available memory is
#     skipped, saying so): each rank's arena peak against its plan, peak RSS, and the floats a rank
#     sent per step per parameter (the ranks' mean) against the textbook 2(N-1)/N (stages 0-2) and
#     3(N-1)/N (stage 3);
#  3. step time of 2 ranks x 1 thread against 1 rank x 2 threads at the same global batch
#     (GPT-2 124M, B=2 T=128 per micro-batch, 2 micro-batches per step), medians of alternating rounds,
#     and what the canonical sum costs one process: --zero 0 on one rank (each micro-batch's
#     gradient from zero, summed in order into a shard-sized sum) against the plain run (the
#     backward accumulates into the gradients directly).
#
#   bench/zero.sh [--steps 4] [--rounds 3] [--sections 123]
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=4
ROUNDS=3
SECTIONS=123
while [ $# -gt 0 ]; do
  case $1 in
  --steps) STEPS=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --sections) SECTIONS=$2; shift 2 ;;
  *) echo "usage: $0 [--steps N] [--rounds R] [--sections 123]" >&2; exit 1 ;;
  esac
done
want() { [[ $SECTIONS == *$1* ]]; }
MW=build/memwall
[ -x "$MW" ] && [ -f build/memwall-mpi.so ] || make -j"$(nproc)" build/memwall build/memwall-mpi.so >/dev/null
command -v mpirun >/dev/null || { echo "mpirun not found: scripts/install-deps.sh installs OpenMPI"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
scripts/fetch-gpt2-vocab.sh >/dev/null
D=build/zero_bench
mkdir -p "$D"
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
flags=$(grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "CPU: $cpu ($(nproc) cores; $flags); memwall $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
jnum() { grep -o "\"$2\": [-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: //'; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f", b / 1048576 }'; }

if want 1; then
echo
echo "## 1. Per-rank memory, planned (B=1 T=64, fp32 AdamW, recompute none)"
echo
echo "| model | N | stage | peak per rank (MiB) | model states (MiB) | ZeRO formula, fp32 (MiB) | paper, mixed precision (MiB) | states / formula |"
echo "|---|---|---|---|---|---|---|---|"
for preset in gpt2 gpt2-medium; do
  for n in 2 4; do
    for s in 0 1 2 3; do
      j=$("$MW" estimate --preset $preset --batch 1 --seq 64 --zero $s --world $n --json | grep -o '"zero": {.*}, "arch"')
      st=$(jnum "$j" model_state_bytes)
      fo=$(jnum "$j" formula_bytes)
      echo "| $preset | $n | $s | $(mib "$(jnum "$j" rank_peak_bytes_max)") | $(mib "$st") | $(mib "$fo") | $(mib "$(jnum "$j" paper_mixed_precision_bytes)") | $(awk -v a="$st" -v b="$fo" 'BEGIN { printf "%.3f", a / b }') |"
    done
  done
done

fi

# GPT-2 token ids of the licence texts, for GPT-2 124M's vocabulary
cat /usr/share/common-licenses/{GPL-2,GPL-3,Apache-2.0,Artistic,MPL-2.0} >"$D/corpus.txt" 2>/dev/null || true
"$MW" prepare --tokenizer gpt2 --in "$D/corpus.txt" --out "$D/d" --val-fraction 0 >/dev/null

if want 2; then
echo
echo "## 2. Measured: $STEPS steps of B=1 T=64 per rank, 1 thread per rank"
echo
echo "| model | N | stage | arena peak per rank (MiB) | = plan | peak RSS per rank (MiB) | floats sent per parameter per step (mean of the ranks) | textbook |"
echo "|---|---|---|---|---|---|---|---|"
avail=$(awk '/MemAvailable/ { printf "%.0f", $2 * 1024 }' /proc/meminfo)
for preset in gpt2 gpt2-medium; do
  psi=$("$MW" estimate --preset $preset --batch 1 --seq 64 --json | grep -o '"params": [0-9]*' | tail -1 | sed 's/.*: //')
  for n in 2 4; do
    for s in 0 1 2 3; do
      need=$("$MW" estimate --preset $preset --batch 1 --seq 64 --threads 1 --zero $s --world $n --json | grep -o '"rank_peak_bytes_max": [0-9]*' | sed 's/.*: //')
      if [ $((need * n + n * 64 * 1048576)) -gt $((avail * 8 / 10)) ]; then
        echo "| $preset | $n | $s | skipped: $n x $(mib "$need") MiB planned, $(mib "$avail") MiB available | | | | |"
        continue
      fi
      log="$D/m_${preset}_${n}_$s.jsonl"
      mpirun -np $n --oversubscribe "$MW" train --data "$D/d" --preset $preset --batch 1 --seq 64 --steps "$STEPS" \
        --threads 1 --zero $s --json-log "$log" --log-every 1000 >"$D/m.out" 2>&1 ||
        { echo "| $preset | $n | $s | failed: $(grep -a memwall: "$D/m.out" | head -1) | | | | |"; continue; }
      end=$(grep '"event": "end"' "$log")
      peaks="" same=yes rss=""
      for r in $(seq 0 $((n - 1))); do
        blk=$(grep -o "{\"rank\": $r, [^}]*}" <<<"$end")
        a=$(jnum "$blk" arena_peak_bytes)
        p=$(jnum "$blk" plan_peak_bytes)
        [ "$a" = "$p" ] || same=NO
        peaks="$peaks${peaks:+ / }$(mib "$a")"
        rss="$rss${rss:+ / }$(mib "$(jnum "$blk" peak_rss_bytes)")"
      done
      sent=$(grep -o '"sent_bytes": [0-9]*' <<<"$end" | awk '{ t += $2 } END { printf "%.0f", t / NR }')
      f=$(awk -v b="$sent" -v s="$STEPS" -v p="$psi" 'BEGIN { printf "%.3f", b / s / 4 / p }')
      tb=$(awk -v n=$n -v s=$s 'BEGIN { printf "%.3f", (s == 3 ? 3 : 2) * (n - 1) / n }')
      echo "| $preset | $n | $s | $peaks | $same | $rss | $f | $tb |"
    done
  done
done

fi
want 3 || exit 0
echo
echo "## 3. Step time, the same global batch of 2 x (B=2, T=128): 2 ranks x 1 thread against 1 rank x 2 threads"
echo
med() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
tr=(train --data "$D/d" --preset gpt2 --batch 2 --seq 128 --steps "$STEPS" --log-every 1000)
: >"$D/t_dp"
: >"$D/t_one"
: >"$D/t_z0"
times() { grep '"step"' "$1" | tail -n +2 | grep -o '"ms": [0-9.]*' | sed 's/.*: //'; }
peak() { grep -o '"plan_peak_bytes": [0-9]*' "$1" | head -1 | sed 's/.*: //'; }
for r in $(seq "$ROUNDS"); do
  mpirun -np 2 --oversubscribe "$MW" "${tr[@]}" --threads 1 --zero 1 --json-log "$D/t_dp.jsonl" >/dev/null 2>&1
  times "$D/t_dp.jsonl" >>"$D/t_dp"
  "$MW" "${tr[@]}" --accum 2 --threads 2 --json-log "$D/t_one.jsonl" >/dev/null 2>&1
  times "$D/t_one.jsonl" >>"$D/t_one"
  mpirun -np 1 --bind-to none "$MW" "${tr[@]}" --accum 2 --threads 2 --zero 0 --json-log "$D/t_z0.jsonl" >/dev/null 2>&1
  times "$D/t_z0.jsonl" >>"$D/t_z0"
done
a=$(med <"$D/t_dp")
b=$(med <"$D/t_one")
c=$(med <"$D/t_z0")
echo "| run | median ms/step ($ROUNDS rounds x $((STEPS - 1)) steps) | vs 1 rank x 2 threads | plan peak (MiB, per rank) |"
echo "|---|---|---|---|"
echo "| 2 ranks x 1 thread, --zero 1 | $a | $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.2fx", b / a }') | $(mib "$(peak "$D/t_dp.jsonl")") |"
echo "| 1 rank x 2 threads, --accum 2 (plain) | $b | 1.00x | $(mib "$(peak "$D/t_one.jsonl")") |"
echo "| 1 rank x 2 threads, --accum 2 --zero 0 (canonical sums) | $c | $(awk -v a="$c" -v b="$b" 'BEGIN { printf "%.2fx", b / a }') | $(mib "$(peak "$D/t_z0.jsonl")") |"
