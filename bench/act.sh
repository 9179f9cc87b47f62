#!/usr/bin/env bash
# Stored activations (issue 38): what --act-compress and --act-offload take off the plan, and what
# they cost in step time, side by side, on this machine (its CPU and the disk rate of --dir named).
#  1. GPT-2 124M, B=8, T=1024, --recompute none: the activations' peak per --act-compress (and with
#     --act-offload all), against none (plans: `memwall estimate`).
#  2. GPT-2 124M, B=1, T=65536, --recompute full --offload all, 12 and 48 layers: the plan without
#     stored activations, with --act-offload checkpoints, and with --act-compress 8 added.
#  2b. Llama 2 7B at T=4096: the activations of each choice beside recomputation alone.
#  3. Step time of a GPT-2 124M shape at --bt BxT (default 1x256), interleaved rounds (one step of
#     each configuration per round, after a warm-up step), medians and the ratio to the plain run.
#   bench/act.sh [--threads N] [--rounds N] [--bt BxT] [--dir DIR] [--skip-time]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc) ROUNDS=3 BT=1x256 DIR=/tmp/mw_act_bench SKIP_TIME=0
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --bt) BT=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --skip-time) SKIP_TIME=1; shift ;;
    *) echo "bench/act.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
make -s all >/dev/null
MW=build/memwall
mkdir -p "$DIR"
field() { grep -o "\"$2\": [-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: //'; }
gib() { awk -v a="$1" 'BEGIN { printf "%.3f", a / 1073741824 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
acts() { grep -o '"categories": {[^}]*' <<<"$1" | tail -1 | grep -o '"activations": [0-9]*' | sed 's/.*: //'; }
rate=$("$MW" estimate --preset gpt2 --batch 1 --seq 256 --act-offload all --offload-dir "$DIR" | grep -o 'measured in .*' | head -1)
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads $THREADS"
echo "disk: --offload-dir $DIR, $rate"

echo
echo "== 1. GPT-2 124M, B=8, T=1024, --recompute none: the activations' peak (estimate)"
printf "%-36s %12s %12s %10s %10s\n" flags "activations" "plan peak" "x none" "target"
base=""
for f in "" "--act-compress 8" "--act-compress 4" "--act-compress 2" "--act-offload all" "--act-offload all --act-compress 8"; do
  j=$("$MW" estimate --preset gpt2 --batch 8 --seq 1024 --recompute none $f --offload-dir "$DIR" --json 2>/dev/null ||
    "$MW" estimate --preset gpt2 --batch 8 --seq 1024 --recompute none $f --json)
  a=$(acts "$j")
  [ -z "$base" ] && base=$a
  case $f in "--act-compress 8") t="<= 0.30" ;; "--act-compress 4") t="<= 0.18" ;; "--act-compress 2") t="<= 0.12" ;; *) t="" ;; esac
  printf "%-36s %8s GiB %8s GiB %10s %10s\n" "${f:-(none)}" "$(gib "$a")" "$(gib "$(field "$j" peak_bytes)")" "$(ratio "$a" "$base")" "$t"
done

echo
echo "== 2. GPT-2 124M, B=1, T=65536, --recompute full --offload all (estimate)"
printf "%-6s %-44s %12s %12s %12s\n" layers flags "plan peak" "activations" "disk file"
declare -A pk
for L in 12 48; do
  for f in "" "--act-offload checkpoints" "--act-offload checkpoints --act-compress 8"; do
    j=$("$MW" estimate --preset gpt2 --layers $L --batch 1 --seq 65536 --ctx 65536 --recompute full --offload all $f --json)
    pk[$L$f]=$(field "$j" peak_bytes)
    printf "%-6s %-44s %8s GiB %8s GiB %8s GiB\n" $L "${f:-(none)}" "$(gib "${pk[$L$f]}")" "$(gib "$(acts "$j")")" \
      "$(gib "$(field "$j" file_bytes)")"
  done
done
c="--act-offload checkpoints"
echo "checkpoints / today (12 layers): $(ratio "${pk[12$c]}" "${pk[12]}") (target <= 0.7)"
echo "48 layers / 12 layers with checkpoints: $(ratio "${pk[48$c]}" "${pk[12$c]}") (target within 5%; without: $(ratio "${pk[48]}" "${pk[12]}"))"
echo "+ --act-compress 8 / checkpoints alone (12 layers): $(ratio "${pk[12$c --act-compress 8]}" "${pk[12$c]}") (target <= 0.85)"

echo
echo "== 2b. Llama 2 7B, B=1, T=4096, --offload all: activations per choice beside recomputation alone (estimate)"
printf "%-12s %-28s %12s %12s\n" recompute flags "plan peak" "activations"
for r in none full; do
  for f in "" "--act-compress 8" "--act-compress 4" "--act-compress 2" "--act-offload checkpoints" "--act-offload all"; do
    j=$("$MW" estimate --preset llama2-7b --batch 1 --seq 4096 --recompute $r --offload all $f --json)
    printf "%-12s %-28s %8s GiB %8s GiB\n" $r "${f:-(none)}" "$(gib "$(field "$j" peak_bytes)")" "$(gib "$(acts "$j")")"
  done
done

[ "$SKIP_TIME" = 1 ] && exit 0
B=${BT%x*} T=${BT#*x}
echo
echo "== 3. step time, GPT-2 124M at B=$B, T=$T, $ROUNDS rounds (bench --steps 1 --warmup 1), median ms"
CONF=("" "--act-compress 8" "--act-compress 4" "--act-compress 2" "--act-offload checkpoints" "--act-offload all"
  "--act-offload all --act-compress 8" "--recompute full" "--recompute full --act-offload checkpoints"
  "--recompute full --act-compress 8")
declare -A ms sh
for r in $(seq "$ROUNDS"); do
  for i in "${!CONF[@]}"; do
    f=${CONF[$i]}
    j=$("$MW" bench --preset gpt2 --batch "$B" --seq "$T" $f --offload-dir "$DIR" --steps 1 --warmup 1 --threads "$THREADS" --json 2>/dev/null ||
      "$MW" bench --preset gpt2 --batch "$B" --seq "$T" $f --steps 1 --warmup 1 --threads "$THREADS" --json)
    ms[$i]="${ms[$i]:-} $(field "$j" ms_per_step)"
    # the stored activations' own cost in the same run (quantising, waiting for swaps): its share
    # of that run's step, robust to a loaded machine's drift between runs
    sh[$i]="${sh[$i]:-} $(awk -v q="$(field "$j" act_compress_ms_per_step)" -v w="$(field "$j" act_swap_wait_ms_per_step)" \
      -v t="$(field "$j" ms_per_step)" 'BEGIN { printf "%.1f/%.1f", 100 * q / t, 100 * w / t }')"
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
m0=$(med "${ms[0]}")
m7=$(med "${ms[7]}")
printf "%-44s %10s %8s  %-30s %s\n" flags "median ms" "x plain" "% quantising/% waiting, per run" "ms, per run"
for i in "${!CONF[@]}"; do
  m=$(med "${ms[$i]}")
  ref=$m0
  [[ ${CONF[$i]} == --recompute\ full* ]] && ref=$m7
  printf "%-44s %10s %8s  %-30s %s\n" "${CONF[$i]:-(none)}" "$m" "$(ratio "$m" "$ref")" "${sh[$i]}" "${ms[$i]}"
done
echo "(the --recompute full rows are against --recompute full alone; the shares are each run's own, measured in it)"
