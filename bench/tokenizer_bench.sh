#!/usr/bin/env bash
# memwall's GPT-2 tokenizer vs js-tiktoken (pure JavaScript, GPT-2 ranks), side by side on the same
# few MB of text: median MB/s over RUNS runs. memwall: one thread with a cold word cache (a fresh
# tokenizer) and a warm one, and mw_tokenizer_encode_docs on THREADS threads over ~64 KB documents.
# It also checks that both produced the same ids (count and checksum). A benchmark, not a test.
#   bench/tokenizer_bench.sh [--runs N] [--threads N] [--text FILE]
# Default text: tests/ref/tokenizer_text.txt, data/brown/*.txt when fetched (scripts/fetch-brown.sh)
# and /usr/share/common-licenses/*, repeated to at least 4 MB. Needs data/gpt2
# (scripts/fetch-gpt2-vocab.sh) and npm; js-tiktoken is installed under /tmp, not in the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=5 THREADS=2 TEXT=""
while [ $# -gt 0 ]; do
  case $1 in
    --runs) RUNS=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --text) TEXT=$2; shift 2 ;;
    *) echo "tokenizer_bench: unknown option $1" >&2; exit 1 ;;
  esac
done
scripts/fetch-gpt2-vocab.sh
NPM_DIR=${MW_NPM_DIR:-/tmp/memwall-js-tiktoken}
if [ ! -f "$NPM_DIR/node_modules/js-tiktoken/package.json" ]; then
  command -v npm >/dev/null || { echo "tokenizer_bench: needs npm (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$NPM_DIR"
  npm install --silent --no-audit --no-fund --prefix "$NPM_DIR" js-tiktoken >/dev/null
fi

# the bench program: the Makefile's flags, linked against build/libmemwall.a
make -s build/libmemwall.a
CFLAGS="-O3 -march=native -fno-math-errno -std=c11 -D_GNU_SOURCE -fopenmp -Wall -Wextra -Wshadow \
  -Wno-unused-parameter -Werror -Iinclude"
gcc $CFLAGS -o build/tokenize_bench bench/tokenize_bench.c build/libmemwall.a -fopenmp -lm

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$TEXT" ]; then
  TEXT=$tmp/text.txt
  src=(tests/ref/tokenizer_text.txt /usr/share/common-licenses/*)
  compgen -G "data/brown/*.txt" >/dev/null && src+=(data/brown/*.txt)
  cat "${src[@]}" >"$tmp/once.txt"
  while [ ! -s "$TEXT" ] || [ "$(stat -c %s "$TEXT")" -lt 4000000 ]; do cat "$tmp/once.txt" >>"$TEXT"; done
fi
field() { grep -o "\"$2\": *[-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: *//'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores;" \
  "node $(node --version), js-tiktoken $(grep -o '"version": *"[^"]*"' "$NPM_DIR/node_modules/js-tiktoken/package.json" | cut -d'"' -f4)"
M=$(build/tokenize_bench data/gpt2 "$TEXT" "$RUNS" "$THREADS")
J=$(node bench/tiktoken_bench.mjs "$NPM_DIR" "$TEXT" "$RUNS")
bytes=$(field "$M" bytes) mt=$(field "$M" tokens) jt=$(field "$J" tokens)
same="yes"
[ "$mt" = "$jt" ] && [ "$(field "$M" checksum)" = "$(field "$J" checksum)" ] || same="NO"
echo "text: $bytes bytes, $mt tokens; ids identical to js-tiktoken's: $same; median of $RUNS runs"
js=$(field "$J" mbs)
printf "%-46s %9s %9s\n" "" "MB/s" "vs js"
row() { printf "%-46s %9.2f %8.1fx\n" "$1" "$2" "$(awk "BEGIN{print $2/$js}")"; }
row "memwall, 1 thread, cold cache" "$(field "$M" mbs_1t_cold)"
row "memwall, 1 thread, warm cache" "$(field "$M" mbs_1t_warm)"
row "memwall, $THREADS threads, cold cache" "$(field "$M" mbs_nt_cold)"
row "memwall, $THREADS threads, warm cache" "$(field "$M" mbs_nt_warm)"
make -s build/memwall
pt=()
for r in $(seq "$RUNS"); do
  t0=$(date +%s.%N)
  build/memwall prepare --tokenizer gpt2 --in "$TEXT" --out "$tmp/p" --threads "$THREADS" >/dev/null
  pt+=("$(awk -v a="$t0" -v b="$(date +%s.%N)" -v n="$bytes" 'BEGIN{print n/1e6/(b-a)}')")
done
row "memwall prepare, $THREADS threads (whole command)" "$(printf '%s\n' "${pt[@]}" | sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')"
row "js-tiktoken (1 thread)" "$js"
[ "$same" = "yes" ]
