#!/usr/bin/env bash
# Planning speed at many micro-batches (issue 32 item 6: "any layout of a 671B model plans in under a
# second"): deepseek-v3 (--seq 4096) and gpt3-175b (--seq 2048) over --pp 2..61/96 (even splits,
# the later stages taking the remainder), each as plain 1F1B with no and full recomputation, with
# --tp 8 --sp --dp 8 [--ep 8] --zero 1 --recompute selective, and with --dp 64 [--ep 64] --zero 3;
# at each --microbatches given. Prints each layout's CPU seconds (user + system, one thread, pinned
# to one core: the machine may be loaded) and the largest per model and M. Not a test.
#   bench/plan_speed.sh [BINARY] [M ...]        (default build/memwall, M = 512 1024 4096 16384)
#   REF=other/memwall bench/plan_speed.sh ...   also compares each --json output with REF's, byte for byte
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/memwall}
shift || true
MS=("$@")
[ ${#MS[@]} -gt 0 ] || MS=(512 1024 4096 16384)
split() { # L P: the stages' blocks, the remainder on the last stages
  local L=$1 P=$2 s out=""
  for ((s = 0; s < P; s++)); do out+="${out:+,}$((L / P + (s >= P - L % P ? 1 : 0)))"; done
  echo "$out"
}
cpu() { /usr/bin/time -f "%U %S" -o /tmp/plan_speed.$$ taskset -c 0 "$@" >/tmp/plan_speed_out.$$ 2>&1 || true
  awk '{printf "%.2f", $1 + $2}' /tmp/plan_speed.$$; }
bad=0
for model in deepseek-v3 gpt3-175b; do
  if [ $model = deepseek-v3 ]; then L=61 PS="2 4 8 16 32 61" BASE="--preset deepseek-v3 --seq 4096" EP8="--ep 8" EP64="--ep 64"
  else L=96 PS="2 4 8 16 32 96" BASE="--preset gpt3-175b --seq 2048" EP8="" EP64=""; fi
  for M in "${MS[@]}"; do
    max=0 worst=""
    for P in $PS; do
      for v in "--recompute none" "--recompute full" "--tp 8 --sp --dp 8 $EP8 --zero 1 --recompute selective" \
               "--dp 64 $EP64 --zero 3"; do
        args="$BASE --batch 1 --threads 1 --pp $P --pp-layers $(split $L $P) --microbatches $M $v"
        t=$(cpu "$BIN" estimate $args --json)
        if [ -n "${REF:-}" ]; then
          cp /tmp/plan_speed_out.$$ /tmp/plan_speed_new.$$
          "$REF" estimate $args --json >/tmp/plan_speed_ref.$$ 2>&1 || true
          cmp -s /tmp/plan_speed_new.$$ /tmp/plan_speed_ref.$$ || { echo "DIFFERS from $REF: $args"; bad=1; }
        fi
        printf "%6s s  %s\n" "$t" "$args"
        if awk -v a="$t" -v b="$max" 'BEGIN{exit !(a > b)}'; then max=$t worst=$args; fi
      done
    done
    echo "== $model M=$M: max $max s ($worst)"
  done
done
rm -f /tmp/plan_speed.$$ /tmp/plan_speed_out.$$ /tmp/plan_speed_new.$$ /tmp/plan_speed_ref.$$
exit $bad
