#!/usr/bin/env bash
# End-to-end tests of tokenizers from Hugging Face tokenizer.json files (issue 13, item 4):
# --tokenizer PATH in tokenize, detokenize, prepare, sample and eval with Llama 2's and Llama 3's
# files (scripts/fetch-llama-tokenizers.sh puts them in data/llama2, data/llama3; without them
# this test skips, saying so). Usage: tests/cli_tokjson.sh build/memwall (from the repository root).
set -u
MW=$(realpath "${1:-build/memwall}")
L2=data/llama2
L3=data/llama3
if [ ! -f "$L2/tokenizer.json" ] || [ ! -f "$L3/tokenizer.json" ]; then
  echo "  SKIP cli_tokjson: $L2/tokenizer.json or $L3/tokenizer.json is missing (scripts/fetch-llama-tokenizers.sh)"
  exit 0
fi
L2=$(realpath $L2)
L3=$(realpath $L3)
TEXT=$(realpath tests/ref/tokenizer_text.txt)
T=$(mktemp -d /tmp/mw_tokjson_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error
hdr() { od -A n -t x1 -j "$2" -N "$3" "$1" | tr -d ' \n'; }
# u32 little-endian at offset $2 of file $1, in decimal
u32() { echo $((16#$(od -A n -t x1 -j "$2" -N 4 "$1" | awk '{print $4 $3 $2 $1}'))); }

echo "-- tokenize: transformers.js's ids; detokenize gives the text back"
for v in llama2 llama3; do
  dir=$([ $v = llama2 ] && echo "$L2" || echo "$L3")
  want=$(grep '^"all": ' tests/ref/${v}_tokens.json | sed 's/^"all": \[//; s/\],$//; s/,/ /g')
  "$MW" tokenize --tokenizer "$dir" <"$TEXT" >"$T/ids" 2>"$T/err" || fail "$v tokenize: $(cat "$T/err")"
  [ "$(cat "$T/ids")" = "$want" ] && pass "$v: tokenize gives transformers.js's $(wc -w <"$T/ids") ids" ||
    fail "$v: tokenize ids differ from tests/ref/${v}_tokens.json"
  "$MW" detokenize --tokenizer "$dir/tokenizer.json" <"$T/ids" >"$T/back" 2>"$T/err" &&
    cmp -s "$T/back" "$TEXT" && pass "$v: detokenize(tokenize(text)) is the text, byte for byte" ||
    fail "$v: detokenize: $(cat "$T/err") $(cmp "$T/back" "$TEXT")"
done
printf 'Hello world' | "$MW" tokenize --tokenizer "$L2" >"$T/o" && [ "$(cat "$T/o")" = "22557 1526" ] &&
  pass "llama2: 'Hello world' -> 22557 1526 (the ▁ normalizer)" || fail "llama2 hello: $(cat "$T/o")"
printf '1 128000 2' | "$MW" detokenize --tokenizer "$L3" >"$T/o" && [ "$(cat "$T/o")" = '"<|begin_of_text|>#' ] &&
  pass "llama3: detokenize prints special tokens as text" || fail "llama3 specials: $(cat "$T/o")"

echo "-- prepare: BOS at each document, the identity, 4-byte ids for 128256 tokens"
printf 'one doc\n\nanother doc\n' >"$T/d.txt"
"$MW" prepare --tokenizer "$L3" --split-blank-lines --in "$T/d.txt" --out "$T/l3" --val-fraction 0 >"$T/out" 2>&1 ||
  fail "prepare llama3: $(cat "$T/out")"
[ "$(u32 "$T/l3.train.bin" 12)" = 4 ] && [ "$(u32 "$T/l3.train.bin" 24)" = 128256 ] &&
  [ "$(hdr "$T/l3.train.bin" 32 7)" = "$(printf 'llama3\0' | od -A n -t x1 | tr -d ' \n')" ] &&
  pass "llama3 token file: width 4, vocabulary 128256, tokenizer llama3" || fail "llama3 header: $(hdr "$T/l3.train.bin" 0 64)"
# the ids after the header: <|begin_of_text|> one doc <|begin_of_text|> another doc
ids=$(od -A n -t u4 -j 64 "$T/l3.train.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
b3=$(printf 'one doc\n' | "$MW" tokenize --tokenizer "$L3")
[ "${ids%% *}" = 128000 ] && [ "$(echo "$ids" | tr ' ' '\n' | grep -c '^128000$')" = 2 ] &&
  case "$ids" in "128000 $b3 128000 "*) true ;; *) false ;; esac &&
  pass "prepare llama3: <|begin_of_text|> (tokenizer_config.json's bos_token) starts each document" ||
  fail "llama3 ids: $ids (one doc: $b3)"
"$MW" prepare --tokenizer "$L2/tokenizer.json" --split-blank-lines --in "$T/d.txt" --out "$T/l2" --val-fraction 0 >"$T/out" 2>&1 ||
  fail "prepare llama2: $(cat "$T/out")"
ids=$(od -A n -t u2 -j 64 "$T/l2.train.bin" | tr -s ' \n' ' ' | sed 's/^ //; s/ $//')
[ "$(u32 "$T/l2.train.bin" 12)" = 2 ] && [ "$(hdr "$T/l2.train.bin" 32 7)" = "$(printf 'llama2\0' | od -A n -t x1 | tr -d ' \n')" ] &&
  [ "${ids%% *}" = 1 ] && [ "$(echo "$ids" | tr ' ' '\n' | grep -c '^1$')" = 2 ] &&
  pass "prepare llama2: width 2, tokenizer llama2, <s> (the template's) starts each document" ||
  fail "llama2 file: $(hdr "$T/l2.train.bin" 0 64) ids $ids"

echo "-- checkpoints and data of one tokenizer refuse another"
cat /usr/share/common-licenses/{Apache-2.0,GPL-2} >"$T/c.txt"
"$MW" prepare --tokenizer "$L2" --in "$T/c.txt" --out "$T/c2" >/dev/null 2>&1 || fail "prepare c2"
"$MW" prepare --tokenizer "$L3" --in "$T/c.txt" --out "$T/c3" >/dev/null 2>&1 || fail "prepare c3"
SHAPE=(--layers 1 --dim 32 --heads 2 --vocab 32000 --batch 2 --seq 32 --threads 2)
"$MW" train --data "$T/c2" "${SHAPE[@]}" --steps 2 --out "$T/ck" >"$T/out" 2>&1 &&
  grep -q "tokenizer: llama2 (vocabulary hash fc45e868b7d696f0)" "$T/out" &&
  pass "train on llama2 data: the checkpoint reads llama2" || fail "train llama2: $(tail -3 "$T/out")"
"$MW" sample --ckpt "$T/ck" --tokenizer "$L2" --prompt "The" --tokens 4 --temperature 0 >"$T/out" 2>&1 &&
  pass "sample --tokenizer data/llama2 on the llama2 checkpoint" || fail "sample llama2: $(tail -2 "$T/out")"
expect_error 1 "sample of a llama2 checkpoint without --tokenizer" -- "$MW" sample --ckpt "$T/ck" --tokens 2
expect_error 1 "sample of a llama2 checkpoint with --tokenizer gpt2" -- "$MW" sample --ckpt "$T/ck" --tokenizer gpt2 --tokens 2
expect_error 1 "eval of llama3 data on a llama2 checkpoint" -- "$MW" eval --ckpt "$T/ck" --data "$T/c3"
"$MW" eval --ckpt "$T/ck" --data "$T/c2" --tokenizer "$L2" --eval-batches 1 >"$T/out" 2>&1 &&
  pass "eval --tokenizer data/llama2 of llama2 data on the llama2 checkpoint" || fail "eval llama2: $(tail -2 "$T/out")"
cp "$T/c2.train.bin" "$T/mix.train.bin" && cp "$T/c3.val.bin" "$T/mix.val.bin"
expect_error 1 "train on llama2 train data with llama3 val data" -- "$MW" train --data "$T/mix" "${SHAPE[@]}" --steps 2
grep -q "llama3 (vocabulary hash df474bfae843d19c)" "$T/err" && grep -q "llama2 (vocabulary hash fc45e868b7d696f0)" "$T/err" &&
  pass "  ... naming both tokenizers" || fail "mix message: $(cat "$T/err")"

echo "-- refusals, on one line"
expect_error 1 "--tokenizer of a path that does not exist" -- sh -c "echo hi | '$MW' tokenize --tokenizer '$T/none'"
sed 's/"type": "Split"/"type": "Digits"/' "$L3/tokenizer.json" >"$T/tokenizer.json"
expect_error 1 "a tokenizer.json with an unsupported pre-tokenizer" -- sh -c "echo hi | '$MW' tokenize --tokenizer '$T/tokenizer.json'"
grep -q 'Digits' "$T/err" && pass "  ... and names it" || fail "no type named: $(cat "$T/err")"
sed 's/\\\\p{N}{1,3}/\\\\p{Nd}{1,3}/' "$L3/tokenizer.json" >"$T/tokenizer.json"
expect_error 1 "a pre-tokenizer regex outside the subset" -- sh -c "echo hi | '$MW' tokenize --tokenizer '$T/tokenizer.json'"
grep -q 'p{Nd}' "$T/err" && pass "  ... and names it" || fail "no construct named: $(cat "$T/err")"

[ $fails -eq 0 ] && echo "cli_tokjson: all passed" || { echo "cli_tokjson: $fails failed"; exit 1; }
