#!/usr/bin/env bash
# prepare on a corpus larger than the memory it may use (issue 17): a text file of SIZE (default
# 2 GB) made at benchmark time from the Brown corpus's 500 texts (scripts/fetch-brown.sh), a blank
# line apart, repeated; prepared
# with GPT-2's BPE and with bytes at the default --memory (256 MiB), blank-line documents, on every
# core and on one. Prints each run's MB/s (per thread too), its peak RSS (/usr/bin/time), and the
# per-thread rate against the one-thread figure of bench/tokenizer_bench.sh's table (docs/data.md: 42.9
# MB/s, cold cache, on its machine). Checks the free disk first (the text, and token files of up
# to 4 bytes per input byte for bytes) and says what it skips.
#
#   bench/prepare.sh [--size-mb 2048] [--dir DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE_MB=2048
DIR=build/prepare_bench
while [ $# -gt 0 ]; do
  case $1 in
  --size-mb) SIZE_MB=$2; shift 2 ;;
  --dir) DIR=$2; shift 2 ;;
  *) echo "usage: $0 [--size-mb N] [--dir DIR]" >&2; exit 1 ;;
  esac
done
MW=build/memwall
[ -x "$MW" ] || make -j"$(nproc)" build/memwall >/dev/null
scripts/fetch-brown.sh >/dev/null
scripts/fetch-gpt2-vocab.sh >/dev/null
mkdir -p "$DIR"
cpu=$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')
flags=$(grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')
echo "CPU: $cpu ($(nproc) cores; $flags)"
echo "memwall $(git rev-parse --short HEAD 2>/dev/null || echo '?'): prepare of ${SIZE_MB} MB of text (the Brown corpus repeated), --split-blank-lines, default --memory"
free_mb=$(df -Pm "$DIR" | awk 'NR == 2 { print $4 }')
need_bpe=$((SIZE_MB + SIZE_MB / 2 + 64))    # the text, and GPT-2 token files (about 2 bytes per 4.2 input bytes, the validation part once more while it is copied)
need_bytes=$((SIZE_MB * 3 + 64))            # the text, and 2-byte ids per byte
if [ "$free_mb" -lt "$need_bpe" ]; then
  echo "skipped: $free_mb MB free in $DIR, $need_bpe MB needed (the text and GPT-2's token files)"
  exit 0
fi
txt="$DIR/corpus.txt"
want=$((SIZE_MB * 1000 * 1000))
if [ ! -f "$txt" ] || [ "$(stat -c %s "$txt")" -lt "$want" ]; then
  for f in data/brown/*; do cat "$f"; printf '\n\n'; done >"$DIR/brown.txt" # its 500 texts, a blank line apart
  : >"$txt"
  while [ "$(stat -c %s "$txt")" -lt "$want" ]; do cat "$DIR/brown.txt" "$DIR/brown.txt" "$DIR/brown.txt" "$DIR/brown.txt" >>"$txt"; done
fi
echo "text: $(stat -c %s "$txt") bytes in $txt"
printf '%-10s %8s %12s %14s %14s %12s\n' tokenizer threads "MB/s" "MB/s/thread" "vs 42.9/thr" "peak RSS"
run() { # run TOKENIZER THREADS
  local out="$DIR/p_$1_$2"
  /usr/bin/time -f %M -o "$DIR/time" "$MW" prepare --tokenizer "$1" --in "$txt" --split-blank-lines --threads "$2" \
    --out "$out" >"$DIR/out" 2>&1 || { echo "$1 x$2 failed: $(tail -1 "$DIR/out")"; return; }
  local rate kb
  rate=$(grep -o 'encoded at [0-9.]* MB/s' "$DIR/out" | grep -o '[0-9.]*')
  kb=$(tail -1 "$DIR/time")
  printf '%-10s %8s %12s %14.1f %13.2fx %9d MiB\n' "$1" "$2" "$rate" "$(awk -v r="$rate" -v t="$2" 'BEGIN { print r / t }')" \
    "$(awk -v r="$rate" -v t="$2" 'BEGIN { print r / t / 42.9 }')" $((kb / 1024))
  rm -f "$out".train.bin "$out".val.bin "$out".manifest.json "$out".train.[0-9]*.bin "$out".val.[0-9]*.bin
}
run gpt2 "$(nproc)"
run gpt2 1
if [ "$free_mb" -ge "$need_bytes" ]; then
  run bytes "$(nproc)"
else
  echo "bytes: skipped ($free_mb MB free, $need_bytes MB needed)"
fi
grep -o 'prepare: .*' "$DIR/out" | head -1 | cut -c1-200
