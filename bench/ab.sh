#!/usr/bin/env bash
# Step time of two builds, A/B in one run (issue 31, item 4: "step time is within noise"): for each
# configuration, the old build then the new one, round after round (old, new, old, new, ...), each
# a `memwall bench` of STEPS timed steps after one warm-up step; per configuration the median over
# rounds of each build's ms/step, the ratio new/old, and the median and range of the rounds' paired
# ratios (the range is the noise to judge the ratio by). Prints the CPU and its vector flags. Also says when the two
# builds plan a configuration differently (bench's peak_bytes): a refactor must not.
#   bench/ab.sh OLD_MEMWALL NEW_MEMWALL [ROUNDS]      (ROUNDS default 5)
# Environment: THREADS (default: every core), STEPS (timed steps per run, default 3),
# OFFLOAD_DIR (the disk tier's folder for --offload all, default a temporary folder in /tmp),
# CONFIGS (a subset of the names below, space-separated).
# e.g. (cd /work/wt/base && make build/memwall) && bench/ab.sh /work/wt/base/build/memwall build/memwall
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: bench/ab.sh OLD_MEMWALL NEW_MEMWALL [ROUNDS]" >&2; exit 2; }
OLD=$(realpath "$1") NEW=$(realpath "$2") ROUNDS=${3:-5}
THREADS=${THREADS:-$(nproc)} STEPS=${STEPS:-3}
for b in "$OLD" "$NEW"; do [ -x "$b" ] || { echo "bench/ab.sh: $b is not an executable" >&2; exit 2; }; done
DIR=$(mktemp -d "${OFFLOAD_DIR:-/tmp}/mw_ab_XXXXXX")
trap 'rm -rf "$DIR"' EXIT

# name and flags of each configuration: GPT-2 of 6 blocks, C=384 (about 12M parameters), and
# llama-tiny, each plain, with every block recomputed, with every state on disk
GPT=(--preset gpt2-tiny --layers 6 --heads 6 --dim 384 --vocab 4096 --ctx 256 --batch 4 --seq 128)
LLA=(--preset llama-tiny --batch 8 --seq 256)
declare -A FLAGS=(
  [gpt2-L6-C384]="${GPT[*]}"
  [gpt2-L6-C384/every]="${GPT[*]} --recompute every:1"
  [gpt2-L6-C384/offload]="${GPT[*]} --offload all --offload-dir $DIR"
  [llama-tiny]="${LLA[*]}"
  [llama-tiny/every]="${LLA[*]} --recompute every:1"
  [llama-tiny/offload]="${LLA[*]} --offload all --offload-dir $DIR"
)
ORDER=${CONFIGS:-"gpt2-L6-C384 gpt2-L6-C384/every gpt2-L6-C384/offload llama-tiny llama-tiny/every llama-tiny/offload"}
for c in $ORDER; do [ -n "${FLAGS[$c]:-}" ] || { echo "bench/ab.sh: no configuration $c" >&2; exit 2; }; done

field() { grep -o "\"$2\": [^,}]*" <<<"$1" | head -1 | sed 's/.*: //; s/"//g'; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
  "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | paste -sd' ')"
echo "old: $OLD"
echo "new: $NEW"
echo "threads $THREADS, $STEPS timed steps after 1 warm-up step per run, $ROUNDS rounds (old, new, old, new, ...)"
declare -A MS CPU PEAK KERNEL
TIMEFORMAT='%U %S'
for r in $(seq "$ROUNDS"); do
  for c in $ORDER; do
    for w in old new; do
      b=$OLD
      [ $w = new ] && b=$NEW
      # the run's CPU seconds (user + system, the whole process) beside its wall-clock ms/step: on a
      # shared machine the CPU time is the steadier of the two
      # shellcheck disable=SC2086 # the flags are words
      { time "$b" bench ${FLAGS[$c]} --steps "$STEPS" --warmup 1 --threads "$THREADS" --json >"$DIR/j" 2>"$DIR/e"; } 2>"$DIR/t" ||
        { echo "bench/ab.sh: $w build failed on $c: $(tail -2 "$DIR/e")" >&2; exit 1; }
      j=$(cat "$DIR/j")
      MS[$c/$w]="${MS[$c/$w]:-} $(field "$j" ms_per_step)"
      CPU[$c/$w]="${CPU[$c/$w]:-} $(awk '{ print $1 + $2 }' "$DIR/t")"
      p=$(field "$j" peak_bytes)
      [ -z "${PEAK[$c/$w]:-}" ] || [ "${PEAK[$c/$w]}" = "$p" ] || PEAK[$c/$w]="varies"
      [ "${PEAK[$c/$w]:-}" = varies ] || PEAK[$c/$w]=$p
      KERNEL[$c/$w]=$(field "$j" kernel)
    done
  done
  echo "  round $r of $ROUNDS done"
done

echo
printf "%-22s %12s %12s %8s   %-24s %9s %9s %8s   %s\n" configuration "old ms/step" "new ms/step" "new/old" \
  "rounds' new/old: median" "old cpu s" "new cpu s" "new/old" "plans"
for c in $ORDER; do
  o=$(median <<<"${MS[$c/old]}") n=$(median <<<"${MS[$c/new]}")
  # the paired ratio of each round: its spread is the noise of this machine now
  read -r -a os <<<"${MS[$c/old]}"
  read -r -a ns <<<"${MS[$c/new]}"
  ratios=""
  for i in "${!os[@]}"; do ratios="$ratios $(awk -v a="${ns[$i]}" -v b="${os[$i]}" 'BEGIN { printf "%.3f", a / b }')"; done
  spread="$(median <<<"$ratios" | xargs printf "%.3f") ($(tr ' ' '\n' <<<"$ratios" | grep . | sort -g | head -1)..$(tr ' ' '\n' <<<"$ratios" | grep . | sort -g | tail -1))"
  same="same peak"
  [ "${PEAK[$c/old]}" = "${PEAK[$c/new]}" ] && [ "${PEAK[$c/old]}" != varies ] || same="DIFFER: ${PEAK[$c/old]} vs ${PEAK[$c/new]}"
  co=$(median <<<"${CPU[$c/old]}") cn=$(median <<<"${CPU[$c/new]}")
  printf "%-22s %12.1f %12.1f %8.3f   %-24s %9.2f %9.2f %8.3f   %s (kernel %s)\n" "$c" "$o" "$n" \
    "$(awk -v a="$n" -v b="$o" 'BEGIN { print a / b }')" "$spread" "$co" "$cn" "$(awk -v a="$cn" -v b="$co" 'BEGIN { print a / b }')" \
    "$same" "${KERNEL[$c/new]}"
done
