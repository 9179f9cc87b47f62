#!/usr/bin/env bash
# End-to-end tests of tokenizer identities (issue 11, item 3) and the one-line, empty-input rules
# of tokenize/detokenize (item 18). Usage: tests/cli_tokid.sh build/memwall (from the repository
# root: GPT-2's vocabulary in data/gpt2). Exits non-zero on any failure.
set -u
MW=$(realpath "${1:-build/memwall}")
VOCAB=$(realpath data/gpt2)
[ -f "$VOCAB/encoder.json" ] || { echo "FAIL: $VOCAB/encoder.json missing (make gpt2-vocab)"; exit 1; }
T=$(mktemp -d /tmp/mw_tokid_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error
# err_has WORDS...: the last expect_error's message holds every word
err_has() {
  for w in "$@"; do grep -qF -- "$w" "$T/err" || { fail "the message lacks '$w': $(cat "$T/err")"; return; }; done
  pass "  ... and names $*"
}
GPT2_HASH=fe1712a09e6b9e60
SHAPE=(--layers 1 --dim 32 --heads 2 --vocab 50257 --batch 2 --seq 32 --threads 2)

echo "-- tokenize / detokenize: empty in, empty out; errors on one line"
printf '' | "$MW" tokenize >"$T/o" 2>"$T/e" && [ ! -s "$T/o" ] && [ ! -s "$T/e" ] &&
  pass "tokenize of an empty stdin: no output, exit 0" || fail "tokenize of empty stdin: $(cat "$T/e")"
printf '' | "$MW" tokenize --tokenizer bytes >"$T/o" 2>&1 && [ ! -s "$T/o" ] &&
  pass "tokenize --tokenizer bytes of an empty stdin: no output, exit 0" || fail "bytes empty: $(cat "$T/o")"
printf '' | "$MW" detokenize >"$T/o" 2>&1 && [ ! -s "$T/o" ] && pass "detokenize of an empty stdin: no output" ||
  fail "detokenize empty: $(cat "$T/o")"
expect_error 1 "detokenize of 'abc\\n'" -- sh -c "echo abc | '$MW' detokenize"
err_has "'abc'"
expect_error 1 "detokenize of '12abc'" -- sh -c "echo 12abc | '$MW' detokenize"
expect_error 1 "a newline inside a path" -- "$MW" train --data "$T/x
y"
expect_error 1 "a newline inside --in" -- "$MW" prepare --in "$T/a
b" --out "$T/p"

echo "-- prepare records the tokenizer (token file version 2)"
cat /usr/share/common-licenses/{Apache-2.0,GPL-2} >"$T/c.txt"
"$MW" prepare --tokenizer bytes --in "$T/c.txt" --out "$T/b" >"$T/out" 2>&1 || fail "prepare bytes: $(cat "$T/out")"
"$MW" prepare --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/c.txt" --out "$T/g" >"$T/out" 2>&1 ||
  fail "prepare gpt2: $(cat "$T/out")"
hdr() { od -A n -t x1 -j "$2" -N "$3" "$1" | tr -d ' \n'; }
[ "$(hdr "$T/b.train.bin" 8 4)" = 03000000 ] && [ "$(hdr "$T/b.train.bin" 32 6)" = 627974657300 ] &&
  [ "$(hdr "$T/g.val.bin" 32 5)" = 6770743200 ] &&
  pass "version 3 headers name bytes and gpt2" || fail "headers: $(hdr "$T/b.train.bin" 0 64)"
[ "$(hdr "$T/g.train.bin" 48 8)" = "$(echo $GPT2_HASH | sed 's/../& /g' | awk '{for(i=NF;i>0;i--) printf $i}')" ] &&
  pass "gpt2's header holds GPT-2's vocabulary hash $GPT2_HASH" || fail "gpt2 hash: $(hdr "$T/g.train.bin" 48 8)"

echo "-- train: the data's tokenizer must be the model's"
# a GPT-2-sized vocabulary exported as Hugging Face weights, with no tokenizer files beside them:
# the weights carry GPT-2's tokenizer by their vocabulary of 50257
"$MW" train --data "$T/g" "${SHAPE[@]}" --steps 2 --out "$T/gck" >"$T/out" 2>&1 || fail "train on gpt2 data: $(tail -2 "$T/out")"
grep -q "tokenizer: gpt2 (vocabulary hash $GPT2_HASH)" "$T/out" && pass "train prints the tokenizer" ||
  fail "no tokenizer line: $(cat "$T/out")"
grep -aq "^tokenizer=gpt2$" "$T"/gck/step-*.mwck && grep -aq "^tokenizer_hash=$GPT2_HASH$" "$T"/gck/step-*.mwck &&
  pass "the checkpoint records tokenizer=gpt2 and its hash" || fail "checkpoint meta lacks the tokenizer"
mkdir -p "$T/hf"
"$MW" export --ckpt "$T/gck" --tokenizer none --out "$T/hf/model.safetensors" >/dev/null 2>&1 || fail "export"
# docs/commands.md's fine-tuning example: GPT-2 weights on data prepared with --tokenizer bytes
expect_error 1 "--init hf: (GPT-2 vocabulary) on bytes data" -- \
  "$MW" train --data "$T/b" --init "hf:$T/hf/model.safetensors" "${SHAPE[@]}" --steps 2
err_has "$T/b.train.bin" "bytes (vocabulary hash" "gpt2 (vocabulary hash $GPT2_HASH)" "hf:$T/hf/model.safetensors"
"$MW" train --data "$T/g" --init "hf:$T/hf/model.safetensors" "${SHAPE[@]}" --steps 2 >"$T/out" 2>&1 &&
  grep -q "GPT-2's, by the vocabulary size 50257" "$T/out" &&
  pass "--init hf: on gpt2 data trains (tokenizer GPT-2's by its vocabulary)" || fail "hf on gpt2 data: $(tail -3 "$T/out")"
# tokenizer files beside the weights decide: GPT-2's own files, then a vocabulary with fewer merges
cp "$VOCAB/encoder.json" "$VOCAB/vocab.bpe" "$T/hf/"
"$MW" train --data "$T/g" --init "hf:$T/hf" "${SHAPE[@]}" --steps 2 >"$T/out" 2>&1 &&
  grep -q "tokenizer files in $T/hf" "$T/out" && pass "--init hf:DIR with GPT-2's files beside: trains" ||
  fail "hf with files: $(tail -3 "$T/out")"
head -n 1000 "$VOCAB/vocab.bpe" >"$T/hf/vocab.bpe"
expect_error 1 "--init hf:DIR whose own tokenizer differs from the data's" -- \
  "$MW" train --data "$T/g" --init "hf:$T/hf" "${SHAPE[@]}" --steps 2
err_has "bpe (vocabulary hash" "gpt2 (vocabulary hash $GPT2_HASH)"
# train and val of different tokenizers
cp "$T/b.train.bin" "$T/mix.train.bin" && cp "$T/g.val.bin" "$T/mix.val.bin"
expect_error 1 "train and val files of different tokenizers" -- "$MW" train --data "$T/mix" "${SHAPE[@]}" --steps 2
err_has "$T/mix.train.bin" "$T/mix.val.bin"

echo "-- resume: the checkpoint's tokenizer must be the data's"
# two token files of one length: GPT-2 ids of a text, and the bytes of as many characters
"$MW" prepare --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/c.txt" --out "$T/rg" --val-fraction 0 >/dev/null 2>&1
n=$(ntok "$T/rg.train.bin")
head -c "$n" "$T/c.txt" >"$T/rb.txt"
"$MW" prepare --tokenizer bytes --in "$T/rb.txt" --out "$T/rb" --val-fraction 0 >/dev/null 2>&1
[ "$(ntok "$T/rb.train.bin")" = "$n" ] || fail "the two files differ in length"
"$MW" train --data "$T/rb" "${SHAPE[@]}" --steps 4 --stop-at 2 --out "$T/rck" >"$T/out" 2>&1 || fail "train: $(tail -2 "$T/out")"
expect_error 1 "resume on data of another tokenizer (same length)" -- \
  "$MW" train --data "$T/rg" "${SHAPE[@]}" --steps 4 --out "$T/rck" --resume auto
err_has "$T/rg.train.bin" "gpt2 (vocabulary hash" "bytes (vocabulary hash" "$T/rck/step-00000002.mwck"
"$MW" train --data "$T/rb" "${SHAPE[@]}" --steps 4 --out "$T/rck" --resume auto >"$T/out" 2>&1 &&
  pass "resume on the same data continues" || fail "resume: $(tail -2 "$T/out")"

echo "-- eval and sample follow the checkpoint's tokenizer"
expect_error 1 "eval of a bytes-trained model on gpt2 data" -- "$MW" eval --ckpt "$T/rck" --data "$T/g"
err_has "$T/g.val.bin" "gpt2 (vocabulary hash" "bytes (vocabulary hash"
"$MW" eval --ckpt "$T/rck" --data "$T/b" >"$T/out" 2>&1 && pass "eval on the model's own tokenizer's data" ||
  fail "eval: $(cat "$T/out")"
# a 50257-token model trained on bytes: auto takes the recorded bytes, not gpt2 by the vocabulary
"$MW" sample --ckpt "$T/rck" --tokens 3 --vocab-dir "$T/none" >"$T/out" 2>&1 &&
  pass "sample --tokenizer auto takes the checkpoint's bytes tokenizer (no GPT-2 files needed)" ||
  fail "sample auto: $(cat "$T/out")"
expect_error 1 "sample --tokenizer gpt2 of a bytes-trained model" -- \
  "$MW" sample --ckpt "$T/rck" --tokens 3 --tokenizer gpt2 --vocab-dir "$VOCAB"
err_has "gpt2 (vocabulary hash $GPT2_HASH)" "bytes (vocabulary hash" "$T/rck/step-00000004.mwck"
mkdir -p "$T/short" && cp "$VOCAB/encoder.json" "$T/short/" && head -n 1000 "$VOCAB/vocab.bpe" >"$T/short/vocab.bpe"
expect_error 1 "sample of a gpt2 model through another BPE vocabulary" -- \
  "$MW" sample --ckpt "$T/gck" --tokens 3 --vocab-dir "$T/short"
err_has "bpe (vocabulary hash" "gpt2 (vocabulary hash $GPT2_HASH)"
"$MW" sample --ckpt "$T/gck" --tokens 3 --vocab-dir "$VOCAB" --prompt "The" >"$T/out" 2>&1 &&
  pass "sample of a gpt2 model through GPT-2's vocabulary" || fail "sample gpt2: $(cat "$T/out")"
"$MW" sample --init "hf:$T/hf/model.safetensors" --heads 2 --tokens 3 --prompt "The" --vocab-dir "$T/none" >"$T/out" 2>&1 &&
  pass "sample --init hf:DIR uses the tokenizer files beside the weights" || fail "sample hf: $(cat "$T/out")"

echo "-- version-1 token files: read, with a warning"
v1() { # v1 SRC DST: the same tokens under a version-1 header (32 bytes: the fields up to vocab, reserved 0)
  { head -c 8 "$1"; printf '\001\000\000\000'; head -c 28 "$1" | tail -c 16; printf '\000\000\000\000'
    tail -c +65 "$1" | head -c $(($(ntok "$1") * 2)); } >"$2" # the tokens, without version 3's checksums
}
v1 "$T/b.train.bin" "$T/v1.train.bin" && v1 "$T/b.val.bin" "$T/v1.val.bin"
"$MW" train --data "$T/v1" --layers 1 --dim 32 --heads 2 --batch 2 --seq 32 --steps 2 >"$T/out" 2>"$T/err" &&
  grep -q "warning: $T/v1.train.bin is a version-1 token file" "$T/err" && [ "$(wc -l <"$T/err")" -eq 2 ] &&
  pass "train reads version 1 with a one-line warning per file" || fail "v1 train: $(cat "$T/err")"
"$MW" eval --ckpt "$T/rck" --data "$T/v1" >"$T/out" 2>"$T/err" && grep -q "version-1" "$T/err" &&
  pass "eval reads version 1 with a warning" || fail "v1 eval: $(cat "$T/err")"

if [ $fails -ne 0 ]; then
  echo "cli_tokid: $fails failure(s)"
  exit 1
fi
echo "cli_tokid: all passed"
