#!/usr/bin/env bash
# prepare streams (issue 17): bounded memory whatever the input's size (--memory), and the same
# files as the whole-input prepare it replaced, for any --memory and thread count. The checksums
# below are of the tokens of files the whole-input prepare wrote (commit 57c8be3) from Debian's licence texts.
# Also: a document longer than --memory allows is one clear error that leaves nothing behind;
# --memory below what the tokenizer takes is refused; the peak RSS it reports stays under
# --memory. Usage: tests/cli_prepare.sh build/memwall
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_prep_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"
VOCAB=$(realpath "$(dirname "$0")/../data/gpt2")
# A sanitizer build carries ASan's shadow memory and quarantine: its RSS is not bounded by
# --memory, and the tokenizer alone takes about 12 MiB; there the files are checked, not the RSS.
SMALL=20MiB # several pieces of the 1.8 MB corpus
sanitized && SMALL=32MiB
# rss_ok KIB MIB: a peak of KIB KiB is within MIB MiB (always, for a sanitizer build)
rss_ok() { [ -n "$1" ] && { sanitized || [ "$1" -le $(($2 * 1024)) ]; }; }
L=/usr/share/common-licenses
for i in $(seq 20); do cat $L/GPL-2 $L/GPL-3 $L/LGPL-2.1 $L/Apache-2.0; done >"$T/corpus.txt"
mkdir -p "$T/dir"
for i in 1 2 3 4 5; do cat $L/GPL-2; done >"$T/dir/a.txt"
for i in 1 2 3 4 5; do cat $L/GPL-3; done >"$T/dir/b.txt"
for i in 1 2 3 4 5; do cat $L/Apache-2.0; done >"$T/dir/c.txt"

# sums PREFIX: the tokens' sha256 of PREFIX.train.bin and PREFIX.val.bin on one line
sums() { echo "$(toks "$1.train.bin") $(toks "$1.val.bin") "; } # toks: lib_cli.sh
# check NAME WANT_TRAIN WANT_VAL ARGS...: prepare ARGS into $T/NAME; its files must have those sums
check() {
  local n=$1 wt=$2 wv=$3
  shift 3
  if ! "$MW" prepare "$@" --out "$T/$n" >"$T/$n.out" 2>&1; then
    fail "prepare $n ($*): $(tail -1 "$T/$n.out")"
    return
  fi
  [ "$(sums "$T/$n")" = "$wt $wv " ] && pass "$n ($*): the whole-input prepare's files" ||
    fail "$n ($*): $(sums "$T/$n") against $wt $wv"
}
B1=b348edc4c2f3ff5875a446e6526285a74e04c14aee29192e39bf632796342a1b
B2=79dcbe401d775abba64aad0275d4d5383c1ca04f78df6be96ddb168735eebf54
G1=b59ced2a4ff7e00c473ce5e4b51015802264dbbd054a041755d331b7206e8e1c
G2=714de3a6efdd527f6df29953cc24cefb471b6cb7cf5f87107800c9199ffa63bf
W1=197798b943754f6a84a60c762949b59ed9822f0e660dd020a68e4d36f819bf32
W2=930f32433e718e8df3eb40dd8fac687e1a4740d86d46e375b8ab187641b9585d
D1=88b8358a4f6e46143cbda60912ef89cbc2044590221e99146a8d895d5bda3607
D1V=6e83ca50e5950b198aa6de58edb716f59ae73490aa3cf6369e4487aad70ba7c6
D2=ab91eb4e42c7a311bf2f581e602706de2be4e955050593001906b2ef685ac808
D2V=7b72e720a3737d5383b2542fbbcb04986258f9ac1e0b382780c4447ad41ea434

echo "== the same files for any --memory and thread count"
# 1.8 MB of text: one piece at the default 256 MiB, several at 20 MiB (pieces of about 1 MiB)
for mem in 256MiB $SMALL; do
  for th in 1 2; do
    check "b.$mem.$th" $B1 $B2 --tokenizer bytes --in "$T/corpus.txt" --split-blank-lines --memory $mem --threads $th
  done
done
check g.big $G1 $G2 --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/corpus.txt" --split-blank-lines
gbase=$(grep -o 'peak RSS [0-9.]* [KMG]iB' "$T/g.big.out")
check g.small $G1 $G2 --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/corpus.txt" --split-blank-lines --memory 80MiB --threads 1
check w.whole $W1 $W2 --tokenizer bytes --in "$T/corpus.txt" --val-fraction 0.1
check d.files $D1 $D1V --tokenizer bytes --in "$T/dir" --memory $SMALL
check d.split $D2 $D2V --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/dir" --split-blank-lines --memory 80MiB
"$MW" prepare --tokenizer bytes --in - --split-blank-lines --memory $SMALL --out "$T/stdin" <"$T/corpus.txt" >"$T/stdin.out" 2>&1 &&
  [ "$(sums "$T/stdin")" = "$B1 $B2 " ] && pass "stdin, streamed: the same files" || fail "stdin: $(tail -1 "$T/stdin.out")"
grep -q "5741 documents" "$T/b.$SMALL.1.out" && pass "the documents counted across pieces: $(grep -o '[0-9]* documents' "$T/b.$SMALL.1.out")" ||
  fail "document count: $(head -c 200 "$T/b.$SMALL.1.out")"

echo "== memory"
sanitized && echo "  (a sanitizer build: peak RSS reported, not bounded)"
# peak RSS as prepare reports it (getrusage) against --memory, for a 18 MB input
for i in $(seq 10); do cat "$T/corpus.txt"; done >"$T/big.txt"
"$MW" prepare --tokenizer bytes --in "$T/big.txt" --split-blank-lines --memory 32MiB --out "$T/m" >"$T/m.out" 2>&1 ||
  fail "prepare --memory 32MiB: $(tail -1 "$T/m.out")"
rss=$(grep -o 'peak RSS [0-9.]* [KMG]iB' "$T/m.out")
# rss_kb ARGS...: the peak RSS in KiB of a prepare that succeeded (empty when it failed)
rss_kb() { /usr/bin/time -f %M -o "$T/time" "$MW" prepare "$@" >/dev/null 2>&1 && tail -1 "$T/time"; }
kb=$(rss_kb --tokenizer bytes --in "$T/big.txt" --split-blank-lines --memory 32MiB --out "$T/m2")
rss_ok "$kb" 32 && pass "18 MB with --memory 32MiB: peak RSS $((kb / 1024)) MiB (/usr/bin/time; prepare says $rss)" ||
  fail "18 MB with --memory 32MiB: peak RSS ${kb:-?} KiB"
kb=$(rss_kb --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/big.txt" --split-blank-lines --memory 96MiB --out "$T/m3")
rss_ok "$kb" 96 && pass "GPT-2 BPE, 18 MB with --memory 96MiB: peak RSS $((kb / 1024)) MiB ($gbase at the default)" ||
  fail "GPT-2 BPE with --memory 96MiB: peak RSS ${kb:-?} KiB"
cmp -s "$T/m.train.bin" "$T/m2.train.bin" && pass "and the same files twice" || fail "two runs differ"
# what costs memory besides text: many small files, tiny documents, a long run of blank lines
mkdir -p "$T/many"
awk '{ for (i = 0; i < 3; i++) print "line " NR ": " $0 }' $L/GPL-3 | head -6000 | (cd "$T/many" && split -l 1 -a 5 - f)
awk 'BEGIN { for (i = 0; i < 2000000; i++) printf "ab\n\n" }' >"$T/tiny.txt"
{ echo "hello world"; awk 'BEGIN { for (i = 0; i < 4000000; i++) printf "\n" }'; echo "second doc"; cat "$T/corpus.txt"; } >"$T/blank.txt"
for c in "many|--in $T/many" "tiny|--in $T/tiny.txt --split-blank-lines" "blank|--in $T/blank.txt --split-blank-lines"; do
  n=${c%%|*}
  read -r -a a <<<"${c#*|}"
  "$MW" prepare --tokenizer bytes "${a[@]}" --out "$T/$n.ref" >/dev/null 2>&1 || fail "$n at the default --memory"
  kb=$(rss_kb --tokenizer bytes "${a[@]}" --memory 32MiB --out "$T/$n.small")
  rss_ok "$kb" 32 && [ "$(sums "$T/$n.small")" = "$(sums "$T/$n.ref")" ] &&
    pass "$n: --memory 32MiB peaks at $((kb / 1024)) MiB, the default's files" || fail "$n: peak ${kb:-?} KiB, or other files"
done

echo "== a document of any length streams, its ids those of the whole document (issue 30)"
# long.txt: 1.2 MB with no blank line but those of its runs: prose, and every 40 lines runs of
# 1500 letters, spaces (before a letter and before a newline), digits, newlines, tabs, é, an
# invalid byte and punctuation, each one word for a BPE (within the word limit); long.2.txt: the
# same with runs of 200 KB (3.5 MB), for the bytes tokenizer; digits.txt: 1 MB of digits in prose
# (Llama 3's pre-tokenizer splits digits in threes). With --split-blank-lines, long.sp.txt: long.txt
# without its runs of newlines (blank lines), one document. --memory makes half a piece 0.5 MiB or so:
# prepare must say it cut documents into parts.
grep -v '^[[:space:]]*$' $L/GPL-3 >"$T/prose.txt"
mklong() { # R EVERY OUT [NL: the runs of newlines, 1 (default) or 0]
  awk -v R="$1" -v E="$2" -v NL="${4:-1}" 'function run(u, n,  i) { for (i = 0; i < n; i++) printf "%s", u }
    { print; if (NR % E == 0) { run("a", R); printf " "; run(" ", R); printf "x"; run("7", R); run(" ", R)
      printf "\n"; run("\n", NL * R); run("\t", R / 2); run("\303\251", R / 2); printf "\377"; run(".", R); print "" } }' \
    "$T/prose.txt" "$T/prose.txt" "$T/prose.txt" "$T/prose.txt" "$T/prose.txt" >"$3"
}
mklong 1500 40 "$T/long.txt"
mklong 1500 40 "$T/long.sp.txt" 0
mklong 200000 1000 "$T/long.2.txt"
{ cat "$T/prose.txt"; awk 'BEGIN { for (i = 0; i < 1000000; i++) printf "%d", i % 10 }'; cat "$T/prose.txt"; } >"$T/digits.txt"
# base_mib TOKENIZER...: what the tokenizer alone takes (prepare's refusal of a tiny --memory), MiB rounded up
base_mib() {
  "$MW" prepare --tokenizer "$@" --in "$T/prose.txt" --memory 1MiB --out "$T/x" 2>&1 |
    grep -o 'alone takes [0-9.]* MiB' | awk '{ printf "%d", $3 + 1 }'
}
# --memory: what the tokenizer takes and 12-18 MiB more (a sanitizer build's tokenizer takes more)
for spec in "bytes|bytes|long.2|14" "gpt2|gpt2 --vocab-dir $VOCAB|long|13" "llama2|$(realpath data/llama2)|long|18" \
  "llama3|$(realpath data/llama3)|long|12" "llama3|$(realpath data/llama3)|digits|12"; do
  IFS='|' read -r name tok in mem <<<"$spec"
  if [ "$name" != bytes ] && [ "$name" != gpt2 ] && [ ! -f "$tok/tokenizer.json" ]; then
    echo "  skip $name: $tok/tokenizer.json is missing (scripts/fetch-llama-tokenizers.sh)"
    continue
  fi
  read -r -a targs <<<"$tok"
  mem=$(($(base_mib "${targs[@]}") + mem))
  for sp in "" --split-blank-lines; do
    [ -n "$sp" ] && [ -f "$T/$in.sp.txt" ] && in=$in.sp
    # the reference in one part: at 1 GiB half a piece is over 40 MiB, so each document is tokenized whole
    "$MW" prepare --tokenizer "${targs[@]}" --in "$T/$in.txt" --val-fraction 0 --memory 1GiB $sp --out "$T/$name.whole" >/dev/null 2>&1 ||
      fail "$name $in $sp: the whole-document prepare failed"
    kb=$(/usr/bin/time -f %M -o "$T/time" "$MW" prepare --tokenizer "${targs[@]}" --in "$T/$in.txt" --val-fraction 0 --memory ${mem}MiB \
      --threads 2 $sp --out "$T/$name.parts" >"$T/parts.out" 2>&1 && tail -1 "$T/time")
    if [ -z "$kb" ]; then
      fail "$name $in $sp at --memory ${mem}MiB: $("$MW" prepare --tokenizer "${targs[@]}" --in "$T/$in.txt" --memory ${mem}MiB $sp --out "$T/x" 2>&1 | tail -1)"
    elif ! grep -q "documents\? over .* in parts" "$T/parts.out"; then
      fail "$name $in $sp: no document was cut into parts: $(cat "$T/parts.out")"
    elif [ "$(toks "$T/$name.parts.train.bin")" != "$(toks "$T/$name.whole.train.bin")" ]; then
      fail "$name $in $sp: the streamed ids are not the whole document's ($(ntok "$T/$name.parts.train.bin") against $(ntok "$T/$name.whole.train.bin"))"
    else
      rss_ok "$kb" "$mem" && pass "$name $sp: $in.txt ($(stat -c %s "$T/$in.txt") bytes) in parts at --memory ${mem}MiB, peak RSS $((kb / 1024)) MiB: the ids of the whole document ($(ntok "$T/$name.whole.train.bin"); $(grep -o '[0-9]* documents\? over [^|]*' "$T/parts.out"))" ||
        fail "$name $in $sp: peak RSS $kb KiB over --memory ${mem}MiB"
    fi
  done
done
# the word cache within --memory: 6 MB of distinct 100-letter words (the cache alone would take
# about 14 MiB) at 12 MiB more than the tokenizer takes
awk 'BEGIN { srand(7); for (i = 0; i < 60000; i++) { w = ""; for (j = 0; j < 100; j++) w = w sprintf("%c", 97 + int(rand() * 26)); print w } }' >"$T/words.txt"
mem=$(($(base_mib gpt2 --vocab-dir "$VOCAB") + 12))
kb=$(rss_kb --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/words.txt" --memory ${mem}MiB --out "$T/words")
rss_ok "$kb" $mem && pass "GPT-2 BPE, 6 MB of distinct 100-letter words at --memory ${mem}MiB: peak RSS $((kb / 1024)) MiB" ||
  fail "GPT-2 BPE, distinct words at --memory ${mem}MiB: peak RSS ${kb:-?} KiB"

echo "== bad input loses nothing"
cp "$T/b.256MiB.1.train.bin" "$T/keep.train.bin"
cp "$T/b.256MiB.1.val.bin" "$T/keep.val.bin"
# one word (a pre-token) longer than --memory lets a thread merge: GPT-2's BPE of a 200 KB run of
# letters at what the tokenizer takes + 37 MiB (48 MiB here: about 3 MiB a piece, a word of at most
# 14 KB on 2 threads; a sanitizer build's tokenizer takes 39 MiB of RSS, its pieces about 1 MiB, 5 KB)
awk 'BEGIN { printf "Some text, then "; for (i = 0; i < 200000; i++) printf "a"; print " and more." }' >"$T/word.txt"
wmem=$(($(base_mib gpt2 --vocab-dir "$VOCAB") + 37))
expect_error 1 "a word longer than --memory allows" -- "$MW" prepare --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/word.txt" --memory ${wmem}MiB --threads 2 --out "$T/keep"
grep -q "a single word .* of 200001 bytes, over the [0-9]* bytes .*give a larger --memory" "$T/err" && pass "the error says what to do" || fail "$(cat "$T/err")"
# with --split-blank-lines a run of white space after a newline cannot be cut (it may end in a
# blank line): 3 MB of it at 24 MiB (bytes: half a piece under 1 MiB) is refused, saying so
awk 'BEGIN { printf "x\n"; for (i = 0; i < 3000000; i++) printf " "; print "y" }' >"$T/spaces.txt"
expect_error 1 "a run of white space longer than --split-blank-lines can cut" -- "$MW" prepare --tokenizer bytes --in "$T/spaces.txt" --split-blank-lines --memory 24MiB --out "$T/keep"
cmp -s "$T/keep.train.bin" "$T/b.256MiB.1.train.bin" && cmp -s "$T/keep.val.bin" "$T/b.256MiB.1.val.bin" &&
  pass "the earlier files stay as they were" || fail "the earlier files changed"
ls "$T" | grep -q '\.tmp\.' && fail "a temporary file was left: $(ls "$T" | grep '\.tmp\.')" || pass "no temporary file left"
expect_error 1 "--memory below what the tokenizer takes" -- "$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --memory 4MiB --out "$T/keep"
grep -q "is too small: the tokenizer alone takes" "$T/err" && pass "the refusal says why" || fail "$(cat "$T/err")"
# a file of a folder that cannot be opened (a dangling link: root reads any mode): one error, or
# skipped and counted with --skip-unreadable
ln -s "$T/nowhere" "$T/dir/d.txt"
expect_error 1 "an unreadable file in --in DIR" -- "$MW" prepare --tokenizer bytes --in "$T/dir" --out "$T/keep"
grep -q "d.txt: No such file or directory (--skip-unreadable skips" "$T/err" && pass "the error names the file and the flag" || fail "$(cat "$T/err")"
cmp -s "$T/keep.train.bin" "$T/b.256MiB.1.train.bin" && pass "the earlier files stay as they were" || fail "the earlier files changed"
"$MW" prepare --tokenizer bytes --in "$T/dir" --memory $SMALL --skip-unreadable --out "$T/skip" >"$T/skip.out" 2>"$T/skip.err" &&
  [ "$(sums "$T/skip")" = "$D1 $D1V " ] && grep -q "| 1 unreadable files skipped" "$T/skip.out" && grep -q "skipping .*d.txt" "$T/skip.err" &&
  pass "--skip-unreadable: the other files' tokens, one skipped, said on stderr and in the summary" ||
  fail "--skip-unreadable: $(cat "$T/skip.out" "$T/skip.err")"
rm "$T/dir/d.txt"
expect_error 1 "--memory nonsense" -- "$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --memory lots --out "$T/keep"
echo "cli_prepare: $fails failure(s)"
[ "$fails" -eq 0 ]
