#!/usr/bin/env bash
# One decision per kept value (issue 38 item 3): --recompute auto alone (recompute-only) against
# --recompute auto --act-compress-max 8 (keep, compress or recompute) and with --act-offload auto too
# (keep, compress, swap or recompute), at the same --budget, on this machine (its CPU, the disk rate of
# --dir).
#  1. predicted: GPT-2 124M, B=8, T=1024 at --budgets (default 3GiB 2600MiB): each choice's pins, plan
#     and predicted seconds per micro-batch of recomputation, (de)quantisation and swaps not hidden;
#  2. predicted: Llama 2 7B, B=1, T=4096, --offload all at --llama-budgets: the activations of each choice
#     beside recompute-only;
#  3. measured: GPT-2 124M at --bt BxT (default 1x1024) at --mbudget (default 2100MiB, where recompute-only
#     auto recomputes most blocks in full): each choice planned once (its pins), then run with those pins,
#     interleaved rounds (bench --steps 1 --warmup 1), median ms per step beside the prediction.
#   bench/act_choice.sh [--threads N] [--rounds N] [--bt BxT] [--mbudget SIZE] [--budgets "SIZE ..."]
#                       [--llama-budgets "SIZE ..."] [--dir DIR] [--skip-time] [--skip-plans (1 and 2)]
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc) ROUNDS=3 BT=1x1024 MBUD=2100MiB DIR=/tmp/mw_act_choice SKIP_TIME=0 SKIP_PLANS=0
BUDGETS="3GiB 2600MiB" LBUDGETS="12GiB 9GiB"
while [ $# -gt 0 ]; do
  case $1 in
    --threads) THREADS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --bt) BT=$2; shift 2 ;;
    --mbudget) MBUD=$2; shift 2 ;;
    --budgets) BUDGETS=$2; shift 2 ;;
    --llama-budgets) LBUDGETS=$2; shift 2 ;;
    --dir) DIR=$2; shift 2 ;;
    --skip-time) SKIP_TIME=1; shift ;;
    --skip-plans) SKIP_PLANS=1; shift ;;
    *) echo "bench/act_choice.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
make -s all >/dev/null
MW=build/memwall
mkdir -p "$DIR"
field() { grep -o "\"$2\": [-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: //'; }
sfield() { grep -o "\"$2\": \"[^\"]*\"" <<<"$1" | head -1 | sed 's/.*: "//; s/"$//'; }
gib() { awk -v a="$1" 'BEGIN { printf "%.3f", a / 1073741824 }'; }
acts() { grep -o '"categories": {[^}]*' <<<"$1" | tail -1 | grep -o '"activations": [0-9]*' | sed 's/.*: //'; }
rate=$("$MW" estimate --preset gpt2 --batch 1 --seq 256 --act-offload all --offload-dir "$DIR" | grep -o 'measured in .*' | head -1)
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; threads $THREADS; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "disk: --offload-dir $DIR, $rate"
CH=("" "--act-compress-max 8" "--act-compress-max 8 --act-offload auto --offload-dir $DIR")
NAME=("recompute-only" "+ compress" "+ compress + swap")
# plan ARGS...: estimate --json of a choice; prints "pin act_pin peak activations pred_s"
plan() {
  local j
  j=$("$MW" estimate "$@" --threads "$THREADS" --json)
  local rp ap p
  rp=$(sfield "$j" recompute_pin) ap=$(grep -o '"act": {.*' <<<"$j" | grep -o '"pin": "[^"]*"' | sed 's/.*: "//; s/"$//' || true)
  p=$(grep -o '"act": {.*' <<<"$j" | grep -o '"pred_s": [-0-9.e+]*' | sed 's/.*: //' || true)
  echo "$rp ${ap:--} $(field "$j" peak_bytes) $(acts "$j") ${p:--}"
}

[ "$SKIP_PLANS" = 1 ] && BUDGETS="" LBUDGETS=""
echo
echo "== 1. GPT-2 124M, B=8, T=1024 (estimate): each choice at the same --budget"
printf "%-9s %-18s %10s %10s %10s  %s\n" budget choice "plan GiB" "acts GiB" "pred s" "pins (--recompute, --act-layers)"
for b in $BUDGETS; do
  for i in 0 1 2; do
    read -r rp ap pk ac pr <<<"$(plan --preset gpt2 --batch 8 --seq 1024 --recompute auto --budget "$b" ${CH[$i]})"
    [ "$i" = 0 ] && pr=$("$MW" estimate --preset gpt2 --batch 8 --seq 1024 --recompute auto --budget "$b" --act-compress-max 8 \
      --threads "$THREADS" | grep -o 'recompute-only [0-9.]* s' | grep -o '[0-9.]*' || echo -)
    printf "%-9s %-18s %10s %10s %10s  %s %s\n" "$b" "${NAME[$i]}" "$(gib "$pk")" "$(gib "$ac")" "$pr" "$rp" "$ap"
  done
done
echo "(recompute-only's pred s: the recompute-only figure the per-value search printed beside its own)"

echo
echo "== 2. Llama 2 7B, B=1, T=4096, --offload all (estimate): activations per choice beside recompute-only"
printf "%-9s %-18s %10s %10s %10s  %s\n" budget choice "plan GiB" "acts GiB" "pred s" "pins"
for b in $LBUDGETS; do
  for i in 0 1 2; do
    read -r rp ap pk ac pr <<<"$(plan --preset llama2-7b --batch 1 --seq 4096 --offload all --offload-dir "$DIR" --recompute auto \
      --budget "$b" ${CH[$i]/--offload-dir $DIR/})"
    printf "%-9s %-18s %10s %10s %10s  %s %s\n" "$b" "${NAME[$i]}" "$(gib "$pk")" "$(gib "$ac")" "$pr" "$rp" "$ap"
  done
done

[ "$SKIP_TIME" = 1 ] && exit 0
B=${BT%x*} T=${BT#*x}
echo
echo "== 3. GPT-2 124M, B=$B, T=$T, --budget $MBUD: planned once, run with the pins, $ROUNDS rounds, median ms per step"
declare -a RUN PRED
for i in 0 1 2; do
  read -r rp ap pk ac pr <<<"$(plan --preset gpt2 --batch "$B" --seq "$T" --recompute auto --budget "$MBUD" ${CH[$i]})"
  RUN[$i]="--recompute $rp"
  [ "$ap" != - ] && RUN[$i]+=" --act-layers $ap"
  [[ $ap == *[xa]* ]] && RUN[$i]+=" --offload-dir $DIR"
  PRED[$i]=$pr
  [ "$i" = 0 ] && PRED[0]=$("$MW" estimate --preset gpt2 --batch "$B" --seq "$T" --recompute auto --budget "$MBUD" --act-compress-max 8 \
    --threads "$THREADS" | grep -o 'recompute-only [0-9.]* s' | grep -o '[0-9.]*' || echo -)
  echo "${NAME[$i]}: ${RUN[$i]} (plan $(gib "$pk") GiB, predicted ${PRED[$i]} s of recomputation, (de)quantisation and swaps not hidden)"
done
declare -A ms
for r in $(seq "$ROUNDS"); do
  for i in 0 1 2; do
    j=$("$MW" bench --preset gpt2 --batch "$B" --seq "$T" ${RUN[$i]} --budget "$MBUD" --steps 1 --warmup 1 --threads "$THREADS" --json)
    ms[$i]="${ms[$i]:-} $(field "$j" ms_per_step)"
  done
done
med() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
m0=$(med "${ms[0]}")
printf "%-18s %10s %10s %10s  %s\n" choice "median ms" "x r-only" "pred s" "ms, per round"
for i in 0 1 2; do
  m=$(med "${ms[$i]}")
  printf "%-18s %10s %10s %10s  %s\n" "${NAME[$i]}" "$m" "$(awk -v a="$m" -v b="$m0" 'BEGIN { printf "%.3f", a / b }')" "${PRED[$i]}" "${ms[$i]}"
done
