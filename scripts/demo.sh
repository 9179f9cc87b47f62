#!/usr/bin/env bash
# make demo: prepare a real English text and train a small GPT on it end to end inside a memory
# budget. The text is Debian's license collection (/usr/share/common-licenses, on every Debian
# system, ~300 KB), tokenized as bytes. Override with DEMO_TEXT=file.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p data
TEXT=${DEMO_TEXT:-data/licenses.txt}
if [ -z "${DEMO_TEXT:-}" ]; then
  ls /usr/share/common-licenses/* >/dev/null 2>&1 || {
    echo "demo: /usr/share/common-licenses is missing; run DEMO_TEXT=your.txt make demo" >&2
    exit 1
  }
  cat /usr/share/common-licenses/* >"$TEXT"
fi
build/memwall prepare --tokenizer bytes --in "$TEXT" --out data/demo
build/memwall train --data data/demo --preset gpt2-tiny --batch 8 --seq 128 --steps 800 --lr 3e-3 \
  --warmup 40 --eval-every 200 --budget 128MiB --json-log data/demo.jsonl
echo "demo: per-step log in data/demo.jsonl"
