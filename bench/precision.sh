#!/usr/bin/env bash
# --precision bf16 against fp32 (issues 15, 36), side by side in one run: memwall fp32, memwall
# bf16 on the amx kernel (AMX tiles, the AMX family) where the CPU and system run it, on the
# FMA family's best kernel (the one auto picks for fp32), on the avx512bf16 kernel (vdpbf16ps)
# where the CPU has it, PyTorch fp32 and PyTorch bf16 autocast (../shared/peers/torch_gpt2_bench.py --dtype bf16;
# ../shared/peers/torch_llama_bench.py for a Llama preset: --preset smollm-135m; PEER= overrides),
# on GPT-2 124M, B=4 T=256 by default. Rounds alternate the configurations (A B C D E, then
# again) so that the shared machine's drift falls on all of them; each row is the median over
# rounds of each round's median step time. Also the planned activation bytes of each memwall
# precision (estimate), and each run's peak RSS. Prints the CPU and its flags.
#
#   bench/precision.sh [--preset gpt2] [--batch 4] [--seq 256] [--steps 4] [--rounds 3] [--no-torch-fp32]
# --no-torch-fp32 leaves PyTorch fp32 out: on a loaded machine its run takes longest, and the
# issue's targets compare bf16 with bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=gpt2 B=4 T=256 STEPS=4 ROUNDS=3 TORCH_FP32=1
while [ $# -gt 0 ]; do
  case $1 in
  --preset) PRESET=$2; shift 2 ;;
  --batch) B=$2; shift 2 ;;
  --seq) T=$2; shift 2 ;;
  --steps) STEPS=$2; shift 2 ;;
  --rounds) ROUNDS=$2; shift 2 ;;
  --no-torch-fp32) TORCH_FP32=0; shift ;;
  *) echo "usage: $0 [--preset P] [--batch B] [--seq T] [--steps N] [--rounds R] [--no-torch-fp32]" >&2; exit 1 ;;
  esac
done
MW=build/memwall
[ -x "$MW" ] || make -j"$(nproc)" build/memwall >/dev/null
# the peer of the preset's family: GPT-2's, or the Llama one for the Llama presets (SmolLM, ...)
case $PRESET in
gpt2*) PEER=${PEER:-../shared/peers/torch_gpt2_bench.py} ;;
*) PEER=${PEER:-../shared/peers/torch_llama_bench.py} ;;
esac
PY=/usr/bin/python3
BLAS=/usr/lib/x86_64-linux-gnu/openblas-openmp
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
flags=$(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "CPU: $cpu ($(nproc) cores; $flags)"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "memwall $(git rev-parse --short HEAD 2>/dev/null || echo '?'): $PRESET B=$B T=$T, $STEPS timed steps (1 warm-up) per round, $ROUNDS rounds"
"$MW" --version | sed -n '2,$p'
fk=$("$MW" --version | sed -n 's/^kernel \([a-z0-9]*\) .*/\1/p')
confs=("fp32|--precision fp32")
"$MW" --version | grep -q "runs [^;]*amx" && confs+=("bf16 amx|--precision bf16 --kernel amx")
confs+=("bf16 $fk (FMA family)|--precision bf16 --kernel $fk")
"$MW" --version | grep -q "avx512bf16" && [ "$fk" != avx512bf16 ] && confs+=("bf16 vdpbf16ps|--precision bf16 --kernel avx512bf16")
havetorch=0
if [ -f "$PEER" ] && $PY -c 'import torch' 2>/dev/null; then
  havetorch=1
  [ $TORCH_FP32 = 1 ] && confs+=("torch fp32|fp32")
  confs+=("torch bf16 autocast|bf16")
else
  echo "(no python3-torch or no $PEER: scripts/install-deps.sh --bench installs the peer; its rows are skipped)"
fi
T0=$(mktemp -d /tmp/mw_prec_bench_XXXXXX)
trap 'rm -rf "$T0"' EXIT
for r in $(seq 1 "$ROUNDS"); do
  for i in "${!confs[@]}"; do
    label=${confs[$i]%%|*} args=${confs[$i]#*|}
    if [[ $label == torch* ]]; then
      # shellcheck disable=SC2086
      LD_LIBRARY_PATH=$BLAS $PY "$PEER" --preset "$PRESET" --batch "$B" --seq "$T" --steps "$STEPS" --warmup 1 \
        --threads "$(nproc)" --dtype $args --json 2>/dev/null | grep '^{' >"$T0/$i.$r.json" || echo "{}" >"$T0/$i.$r.json"
    else
      # shellcheck disable=SC2086
      "$MW" bench --preset "$PRESET" --batch "$B" --seq "$T" --steps "$STEPS" --warmup 1 $args --json \
        >"$T0/$i.$r.json" 2>/dev/null || echo "{}" >"$T0/$i.$r.json"
    fi
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
field() { grep -o "\"$2\": [0-9.e+-]*" "$1" | head -1 | sed 's/.*: //'; }
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR) print a[int((NR + 1) / 2)] }'; }
declare -A MS RSS
for i in "${!confs[@]}"; do
  MS[$i]=$(for r in $(seq 1 "$ROUNDS"); do
    f=$(field "$T0/$i.$r.json" ms_per_step)
    [ -z "$f" ] && f=$(field "$T0/$i.$r.json" tokens_per_s | awk -v n=$((B * T)) '{ print 1000 * n / $1 }')
    echo "$f"
  done | grep . | median)
  RSS[$i]=$(for r in $(seq 1 "$ROUNDS"); do
    f=$(field "$T0/$i.$r.json" peak_rss_mib)
    [ -z "$f" ] && f=$(field "$T0/$i.$r.json" peak_rss_bytes | awk '{ print $1 / 1048576 }')
    echo "$f"
  done | grep . | median)
done
last=$((${#confs[@]} - 1))
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { if (x > 0 && y > 0) printf "%.2fx", y / x; else print "-" }'; }
printf '\n%-26s %10s %10s %12s %14s %12s\n' "" "tok/s" "ms/step" "vs mw fp32" "vs torch bf16" "peak RSS"
for i in "${!confs[@]}"; do
  label=${confs[$i]%%|*}
  [ -z "${MS[$i]}" ] && { printf '%-26s %10s\n' "$label" "failed"; continue; }
  vt="-"
  [ $havetorch = 1 ] && vt=$(ratio "${MS[$i]}" "${MS[$last]}")
  printf '%-26s %10.1f %10.0f %12s %14s %8.0f MiB\n' "$label" "$(awk -v m="${MS[$i]}" -v n=$((B * T)) 'BEGIN { print 1000 * n / m }')" \
    "${MS[$i]}" "$(ratio "${MS[$i]}" "${MS[0]}")" "$vt" "${RSS[$i]:-0}"
done
echo
for p in fp32 bf16; do
  "$MW" estimate --preset "$PRESET" --batch "$B" --seq "$T" --precision $p --json >"$T0/est_$p.json"
done
acts() { grep -o '"categories": {[^}]*}' "$1" | tail -1 | grep -o '"activations": [0-9]*' | sed 's/.*: //'; }
peak() { grep -o '"peak_bytes": [0-9]*' "$1" | head -1 | sed 's/.*: //'; }
af=$(acts "$T0/est_fp32.json") ab=$(acts "$T0/est_bf16.json")
awk -v f="$af" -v b="$ab" -v pf="$(peak "$T0/est_fp32.json")" -v pb="$(peak "$T0/est_bf16.json")" 'BEGIN {
  printf "planned activations: fp32 %.1f MiB, bf16 %.1f MiB (%.2fx); arena peak: fp32 %.1f MiB, bf16 %.1f MiB\n",
    f / 1048576, b / 1048576, b / f, pf / 1048576, pb / 1048576 }'
