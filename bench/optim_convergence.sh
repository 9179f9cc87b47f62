#!/usr/bin/env bash
# Convergence of each --optim and --precision (issue 15): trains the same model on the Brown
# corpus (scripts/fetch-brown.sh) with every optimizer, in fp32 and with bf16 products, for the
# same steps and tokens, from the same initialisation and data order, and prints the final
# validation loss beside fp32 AdamW's with the relative difference, then draws the training-loss
# curves into one SVG.
#
#   bench/optim_convergence.sh [--steps N] [--out DIR] [--optims "adamw adamw8bit ..."]
#                              [--model "FLAGS"] [--lr X] [--title TEXT] [--seed N] [--amx]
#
# Model: 4 blocks, C=256, 4 heads, byte tokens, B=8 T=128 (1024 tokens a step), cosine schedule
# with 10% warm-up. Learning rate 2e-3 for the Adam family, half that (1e-3) for Adafactor and
# CAME, whose default rates are half AdamW's (docs/optimizers.md says why), and 0.2 for SGD (its
# row is for reference, it has no target). Every other hyperparameter is the optimizer's default.
# An entry NAME,--flag=value,... adds flags (and a --lr there replaces the rate): the defaults run
# Adafactor also with momentum at AdamW's rate, and CAME also at AdamW's rate;
# NAME,--precision=bf16 runs it with bf16 products. Targets
# (the issue's): bf16 AdamW and adamw8bit within 1% of fp32 AdamW, adafactor, came and adam4bit
# within 3%, in either precision. --model replaces the model and batch flags below (--layers ..
# --seq), --lr the default rate of entries without their own, --title the SVG's title;
# bench/act_convergence.sh runs it on GPT-2 small's shape with --act-compress entries (issue 38's
# targets: 8 bits within 0.5%, 4 bits within 1.5% of the uncompressed run). --amx (issue 36) runs
# AdamW three ways instead: fp32, bf16 on the FMA family's vdpbf16ps kernel (--kernel avx512bf16:
# the bits every FMA kernel gives) and bf16 on AMX tiles (--kernel amx, the AMX family's own
# bits), and prints the amx run's final validation loss against the FMA family's and fp32's
# (target: within 0.5% of both); it needs a CPU with AMX-BF16. --seed sets the initialisation and
# data order (default 7). MW=path/to/memwall runs another build.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=400
REUSE=0 # --reuse: keep the runs of OUT that reached --steps (their logs), train the rest
OUT=build/optim_convergence
OPTIMS="adamw adamw8bit adam4bit adafactor adafactor,--beta1=0.9,--lr=2e-3 came came,--lr=2e-3 sgd"
OPTIMS="$OPTIMS adamw,--precision=bf16 adamw8bit,--precision=bf16 adam4bit,--precision=bf16"
OPTIMS="$OPTIMS adafactor,--precision=bf16 came,--precision=bf16"
MODEL="--layers 4 --heads 4 --dim 256 --vocab 256 --ctx 128 --batch 8 --seq 128"
LR=""
SEED=7
AMX=0
TITLE="training loss (moving mean of 10 steps) by --optim, Brown corpus, bytes"
while [ $# -gt 0 ]; do
  case $1 in
  --steps) STEPS=$2; shift 2 ;;
  --out) OUT=$2; shift 2 ;;
  --optims) OPTIMS=$2; shift 2 ;;
  --reuse) REUSE=1; shift ;;
  --model) MODEL=$2; shift 2 ;;
  --lr) LR=$2; shift 2 ;;
  --title) TITLE=$2; shift 2 ;;
  --seed) SEED=$2; shift 2 ;;
  --amx)
    OPTIMS="adamw adamw,--precision=bf16,--kernel=avx512bf16 adamw,--precision=bf16,--kernel=amx"
    TITLE="training loss (moving mean of 10 steps): AdamW fp32, bf16 FMA family, bf16 AMX"
    AMX=1
    shift ;;
  *) echo "usage: $0 [--steps N] [--out DIR] [--optims LIST] [--reuse] [--model FLAGS] [--lr X] [--title TEXT] [--seed N] [--amx]" >&2; exit 1 ;;
  esac
done
MW=${MW:-build/memwall}
[ -x "$MW" ] || make -j"$(nproc)" build/memwall >/dev/null
scripts/fetch-brown.sh
mkdir -p "$OUT"
[ -f "$OUT/brown.train.bin" ] || "$MW" prepare --tokenizer bytes --in data/brown --out "$OUT/brown" >/dev/null
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
flags=$(grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "CPU: $cpu ($(nproc) cores; $flags)"
echo "$MW (checkout $(git rev-parse --short HEAD 2>/dev/null || echo '?')), $STEPS steps, Brown corpus (bytes), model: $MODEL"
warm=$((STEPS / 10))
# entry -> optimizer name, flags, learning rate, a file-safe label
name_of() { echo "${1%%,*}"; }
flags_of() { [ "${1#*,}" = "$1" ] || echo "${1#*,}" | tr ',' ' '; }
lr_of() {
  local f
  f=$(flags_of "$1" | tr ' ' '\n' | grep '^--lr=' | sed 's/--lr=//')
  [ -n "$f" ] && { echo "$f"; return; }
  [ -n "$LR" ] && { echo "$LR"; return; }
  case $(name_of "$1") in sgd) echo 0.2 ;; adafactor | came) echo 1e-3 ;; *) echo 2e-3 ;; esac
}
label_of() { echo "$1" | sed 's/,--/ /g; s/=/ /g' | awk '{ out = $1; for (i = 2; i <= NF; i += 2) out = out "_" $i $(i + 1); print out }'; }
for e in $OPTIMS; do
  o=$(name_of "$e") lb=$(label_of "$e")
  [ "$REUSE" = 1 ] && grep -q "\"step\": $STEPS," "$OUT/$lb.jsonl" 2>/dev/null && continue
  # shellcheck disable=SC2046,SC2086
  "$MW" train --data "$OUT/brown" $MODEL \
    --steps "$STEPS" --warmup "$warm" --optim "$o" $(flags_of "$e" | tr ' ' '\n' | grep -v '^--lr=') --lr "$(lr_of "$e")" \
    --eval-every "$((STEPS / 8))" --eval-batches 32 --seed "$SEED" --json-log "$OUT/$lb.jsonl" >"$OUT/$lb.out" 2>&1 ||
    { echo "$e failed: $(tail -1 "$OUT/$lb.out")"; exit 1; }
done
val() { grep -o '"val_loss": [0-9.e+-]*' "$OUT/$1.jsonl" | tail -1 | sed 's/.*: //'; }
ms() { grep -o '"ms": [0-9.e+-]*' "$OUT/$1.jsonl" | sed 's/.*: //' | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
base=$(val adamw)
printf '%-26s %6s %12s %10s %8s %10s\n' optim lr "val loss" "vs adamw" target "ms/step"
for e in $OPTIMS; do
  o=$(name_of "$e") lb=$(label_of "$e")
  case $o in adamw) t="-" ;; adamw8bit) t="1%" ;; sgd) t="none" ;; *) t="3%" ;; esac
  [ "$lb" = adamw_precisionbf16 ] && t="1%"
  case $lb in *kernelamx) t="0.5%" ;; *kernelavx512bf16) t="1%" ;; esac
  case $lb in *act-compress8*) t="0.5%" ;; *act-compress4*) t="1.5%" ;; *act-compress2*) t="none" ;; esac
  v=$(val "$lb")
  printf '%-26s %6s %12s %+9.2f%% %8s %10s\n' "$lb" "$(lr_of "$e")" "$v" "$(awk -v a="$v" -v b="$base" 'BEGIN { print (a / b - 1) * 100 }')" "$t" "$(ms "$lb")"
done
if [ "$AMX" = 1 ]; then # the AMX family against the FMA family's bf16 and fp32 (issue 36: 0.5%)
  a=$(val adamw_precisionbf16_kernelamx) f=$(val adamw_precisionbf16_kernelavx512bf16)
  awk -v a="$a" -v f="$f" -v b="$base" 'BEGIN {
    df = (a / f - 1) * 100; db = (a / b - 1) * 100
    printf "amx against the FMA family (avx512bf16): %+.3f%%, against fp32: %+.3f%% (target: within 0.5%%): %s\n", df, db,
      (df <= 0.5 && df >= -0.5 && db <= 0.5 && db >= -0.5) ? "met" : "MISSED" }'
fi
# the curves: training loss per step (a moving mean of 10 steps), one line per optimizer
svg="$OUT/optim_convergence.svg"
for e in $OPTIMS; do
  lb=$(label_of "$e")
  grep -o '"step": [0-9]*, "loss": [0-9.e+-]*' "$OUT/$lb.jsonl" | sed 's/"step": //; s/, "loss": / /' | sed "s/^/$lb@$(lr_of "$e") /"
done | awk -v steps="$STEPS" -v out="$svg" -v title="$TITLE" '
  { n[$1]++; s[$1, n[$1]] = $2; l[$1, n[$1]] = $3; if (!($1 in seen)) { seen[$1] = 1; order[++no] = $1 } }
  END {
    W = 960; H = 500; x0 = 70; y0 = 30; pw = W - x0 - 220; ph = H - y0 - 50
    lo = 1e9; hi = -1e9
    for (k = 1; k <= no; k++) { o = order[k]
      for (i = 1; i <= n[o]; i++) { a = 0; c = 0; for (j = i - 9; j <= i; j++) if (j >= 1) { a += l[o, j]; c++ }
        m[o, i] = a / c; if (i > 20) { if (m[o, i] < lo) lo = m[o, i]; if (m[o, i] > hi) hi = m[o, i] } } }
    if (hi <= lo) hi = lo + 1
    col[1] = "#1f77b4"; col[2] = "#ff7f0e"; col[3] = "#2ca02c"; col[4] = "#d62728"; col[5] = "#9467bd"; col[6] = "#8c564b"
    col[7] = "#e377c2"; col[8] = "#7f7f7f"; col[9] = "#bcbd22"; col[10] = "#17becf"
    printf "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" font-family=\"sans-serif\" font-size=\"12\">\n", W, H > out
    printf "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H > out
    printf "<text x=\"%d\" y=\"18\">%s</text>\n", x0, title > out
    for (g = 0; g <= 5; g++) { v = lo + (hi - lo) * g / 5; y = y0 + ph - ph * g / 5
      printf "<line x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text x=\"5\" y=\"%.1f\">%.3f</text>\n", x0, x0 + pw, y, y, y + 4, v > out }
    for (g = 0; g <= 4; g++) { x = x0 + pw * g / 4
      printf "<text x=\"%.1f\" y=\"%d\">%d</text>\n", x - 10, y0 + ph + 20, steps * g / 4 > out }
    printf "<text x=\"%d\" y=\"%d\">step</text>\n", x0 + pw / 2, y0 + ph + 40 > out
    for (k = 1; k <= no; k++) { o = order[k]; pts = ""
      for (i = 1; i <= n[o]; i++) { v = m[o, i]; if (v > hi) v = hi; if (v < lo) v = lo
        pts = pts sprintf("%.1f,%.1f ", x0 + pw * s[o, i] / steps, y0 + ph - ph * (v - lo) / (hi - lo)) }
      printf "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"%s\"/>\n", col[k], pts > out
      printf "<line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/><text x=\"%d\" y=\"%d\">%s</text>\n", \
        x0 + pw + 15, x0 + pw + 40, y0 + 20 * k, y0 + 20 * k, col[k], x0 + pw + 45, y0 + 20 * k + 4, o > out }
    print "</svg>" > out
  }'
echo "curves: $svg"
