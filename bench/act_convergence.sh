#!/usr/bin/env bash
# Convergence with compressed activations (issue 38, "Convergence"): GPT-2 small's shape (12
# blocks, 12 heads, C=768) on the Brown corpus in bytes, B=8 T=128, AdamW at 6e-4 with 10% warm-up
# and a cosine schedule, trained uncompressed (fp32) and with --act-compress 8, 4 and 2 from the same
# initialisation and data order; prints each run's final validation loss beside the uncompressed
# one (targets: 8 bits within 0.5%, 4 bits within 1.5%; 2 bits reported as it is) and draws the
# training-loss curves into the convergence SVG of bench/optim_convergence.sh, which runs them.
#
#   bench/act_convergence.sh [--steps N] [--out DIR] [--reuse] [--model FLAGS]
# MW=path/to/memwall runs another build (default build/memwall).
#
# Default 1000 steps into build/act_convergence. Needs a memwall with --act-compress (issue 38's act
# branch); says so and exits 2 without one. Time: about 5e11 FLOPs a step, about 1.5 hours a run at
# 100 GFLOP/s (two cores), 4 runs; --model with a smaller shape (e.g. --layers 4 --dim 256 ...) and
# fewer --steps checks the script itself in minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS=1000 OUT=build/act_convergence REUSE=()
MODEL="--layers 12 --heads 12 --dim 768 --vocab 256 --ctx 128 --batch 8 --seq 128"
while [ $# -gt 0 ]; do
  case $1 in
  --steps) STEPS=$2; shift 2 ;;
  --out) OUT=$2; shift 2 ;;
  --reuse) REUSE=(--reuse); shift ;;
  --model) MODEL=$2; shift 2 ;;
  *) echo "usage: $0 [--steps N] [--out DIR] [--reuse] [--model FLAGS]" >&2; exit 1 ;;
  esac
done
MW=${MW:-build/memwall}
[ -x "$MW" ] || make -j"$(nproc)" build/memwall >/dev/null
if ! "$MW" train --help 2>&1 | grep -q -- '--act-compress'; then
  echo "act_convergence: this memwall has no --act-compress (issue 38's act branch is not merged): nothing run" >&2
  exit 2
fi
exec bench/optim_convergence.sh --steps "$STEPS" --out "$OUT" "${REUSE[@]}" --model "$MODEL" --lr 6e-4 \
  --optims "adamw adamw,--act-compress=8 adamw,--act-compress=4 adamw,--act-compress=2" \
  --title "training loss (moving mean of 10 steps) by --act-compress, GPT-2 small's shape, Brown corpus, bytes"
