#!/usr/bin/env bash
# End-to-end tests of --init hf: and export: the head count is never guessed, each value of the
# shape is labelled with its source, flags that disagree with the weights are refused; export
# creates --out's directory and writes config.json, which --init hf: reads back.
# Usage: tests/cli_hf.sh build/memwall. Exits non-zero on any failure.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_cli_hf_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error

head -c 200000 /usr/share/common-licenses/GPL-3 >"$T/c.txt"
"$MW" prepare --tokenizer bytes --in "$T/c.txt" --out "$T/d" >/dev/null 2>&1 || { echo "prepare failed"; exit 1; }
# an 8-head model (the default preset has 4): its export without config.json must not load as 4
small=(--layers 2 --heads 8 --dim 64 --ctx 64 --batch 2 --seq 32)
"$MW" train --data "$T/d" "${small[@]}" --steps 2 --out "$T/ck" >"$T/out" 2>&1 || fail "train: $(tail -2 "$T/out")"

echo "-- export: --out's directory is created, config.json is written beside the weights"
"$MW" export --ckpt "$T/ck" --out "$T/new/a/b/model.safetensors" >"$T/out" 2>&1 &&
  [ -s "$T/new/a/b/model.safetensors" ] && [ -s "$T/new/a/b/config.json" ] &&
  pass "export into a missing directory: $(cat "$T/out")" || fail "export into a missing directory: $(cat "$T/out")"
python3 - "$T/new/a/b/config.json" >"$T/out" 2>&1 <<'EOF' && pass "config.json: $(cat "$T/out")" || fail "config.json: $(cat "$T/out")"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_head": 8, "n_embd": 64,
        "vocab_size": 256, "n_positions": 64, "n_ctx": 64, "activation_function": "gelu_new",
        "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True, "n_inner": None}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
if bad: sys.exit("differs: %r" % bad)
print("GPT2Config with n_layer 2, n_head 8, n_embd 64, vocab_size 256, n_positions 64")
EOF
"$MW" export --ckpt "$T/ck" --out "$T/dirout/" >"$T/out" 2>&1 && [ -s "$T/dirout/model.safetensors" ] &&
  [ -s "$T/dirout/config.json" ] && pass "export --out DIR/ writes DIR/model.safetensors" || fail "export to DIR/: $(cat "$T/out")"
touch "$T/afile"
expect_error 1 "export where a file stands in for the directory" -- "$MW" export --ckpt "$T/ck" --out "$T/afile/x.safetensors"

echo "-- --init hf: reads the export back (round trip), each value labelled with its source"
"$MW" train --data "$T/d" --init "hf:$T/new/a/b" --steps 1 --batch 1 --seq 16 >"$T/out" 2>&1 &&
  grep -q "L=2 C=64 V=256 ctx=64 (safetensors shapes; config.json agrees), heads 8 (config.json)" "$T/out" &&
  grep -q "hf L=2 H=8 C=64" "$T/out" && pass "round trip: $(grep init: "$T/out")" ||
  fail "round trip: $(head -3 "$T/out")"
"$MW" eval --init "hf:$T/new/a/b" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e1" 2>&1 &&
  "$MW" eval --ckpt "$T/ck" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e2" 2>&1 &&
  l1=$(grep -o 'loss [0-9.]*' "$T/e1" | head -1) && [ -n "$l1" ] && [ "$l1" = "$(grep -o 'loss [0-9.]*' "$T/e2" | head -1)" ] &&
  pass "eval of the export == eval of the checkpoint ($l1)" || fail "eval: $(tail -1 "$T/e1") vs $(tail -1 "$T/e2")"

echo "-- the head count is never guessed"
mkdir -p "$T/noconf" && cp "$T/new/a/b/model.safetensors" "$T/noconf/"
expect_error 1 "no config.json and no --heads" -- "$MW" train --data "$T/d" --init "hf:$T/noconf" --steps 1
grep -q "pass --heads N" "$T/err" || fail "the refusal does not say to pass --heads"
expect_error 1 "sample: no config.json and no --heads" -- "$MW" sample --init "hf:$T/noconf" --tokens 2 --tokenizer bytes
"$MW" train --data "$T/d" --init "hf:$T/noconf" --heads 8 --steps 1 --batch 1 --seq 16 >"$T/out" 2>&1 &&
  grep -q "L=2 C=64 V=256 ctx=64 (safetensors shapes), heads 8 (--heads)" "$T/out" &&
  pass "--heads without config.json: $(grep init: "$T/out")" || fail "--heads 8: $(head -3 "$T/out")"
echo '{"model_type": "gpt2", "n_layer": 2}' >"$T/noconf/config.json"
expect_error 1 "config.json without n_head, no --heads" -- "$MW" train --data "$T/d" --init "hf:$T/noconf" --steps 1
"$MW" train --data "$T/d" --init "hf:$T/noconf" --heads 8 --steps 1 --batch 1 --seq 16 >"$T/out" 2>&1 &&
  grep -q "(safetensors shapes; config.json agrees), heads 8 (--heads)" "$T/out" &&
  pass "config.json without n_head, --heads 8: $(grep init: "$T/out")" || fail "n_head-less config: $(head -3 "$T/out")"

echo "-- flags against the weights are refused"
expect_error 1 "--heads 4 against config.json's 8" -- "$MW" train --data "$T/d" --init "hf:$T/new/a/b" --heads 4 --steps 1
expect_error 1 "--layers 3 against 2 blocks" -- "$MW" train --data "$T/d" --init "hf:$T/new/a/b" --layers 3 --steps 1
expect_error 1 "--dim 32 against width 64" -- "$MW" train --data "$T/d" --init "hf:$T/new/a/b" --dim 32 --steps 1
"$MW" train --data "$T/d" --init "hf:$T/new/a/b" --heads 8 --layers 2 --steps 1 --batch 1 --seq 16 >"$T/out" 2>&1 &&
  pass "flags equal to the weights' are accepted" || fail "--heads 8 --layers 2: $(tail -1 "$T/out")"
cp "$T/new/a/b/config.json" "$T/conf.bak"
sed 's/"n_layer": 2/"n_layer": 12/' "$T/conf.bak" >"$T/new/a/b/config.json"
expect_error 1 "config.json's n_layer 12 against 2 blocks" -- "$MW" train --data "$T/d" --init "hf:$T/new/a/b" --steps 1
sed 's/"model_type": "gpt2"/"model_type": "llama"/' "$T/conf.bak" >"$T/new/a/b/config.json"
expect_error 1 "config.json of another model type" -- "$MW" train --data "$T/d" --init "hf:$T/new/a/b" --steps 1
head -c $((17 << 20)) /dev/zero | tr '\0' ' ' >"$T/new/a/b/config.json"
expect_error 1 "a 17 MiB config.json" -- "$MW" train --data "$T/d" --init "hf:$T/new/a/b" --steps 1
grep -q "16 MiB" "$T/err" || fail "the size refusal does not name the limit"
{ head -c 70000 /dev/zero | tr '\0' ' '; cat "$T/conf.bak"; } >"$T/new/a/b/config.json"
"$MW" train --data "$T/d" --init "hf:$T/new/a/b" --steps 1 --batch 1 --seq 16 >"$T/out" 2>&1 &&
  grep -q "heads 8 (config.json)" "$T/out" && pass "a config.json past 64 KiB is read whole" ||
  fail "70 kB config.json: $(head -2 "$T/out")"

echo "-- GPT2Config options that change the math are refused, naming the key and its value (issue 30, item 6)"
cp "$T/conf.bak" "$T/new/a/b/config.json"
for kv in '"activation_function": "relu"' '"layer_norm_epsilon": 0' '"scale_attn_weights": false' \
  '"scale_attn_by_inverse_layer_idx": true' '"tie_word_embeddings": false' '"n_inner": 100'; do
  key=${kv%%:*}
  python3 - "$T/conf.bak" "$T/new/a/b/config.json" "{$kv}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1])); c.update(json.loads(sys.argv[3])); json.dump(c, open(sys.argv[2], "w"))
PY
  expect_error 1 "config.json with $kv" -- "$MW" eval --init "hf:$T/new/a/b" --data "$T/d" --tokenizer bytes --seq 32
  grep -q "config.json: ${key//\"/}" "$T/err" || fail "the refusal of $kv does not name ${key//\"/}"
done
cp "$T/conf.bak" "$T/new/a/b/config.json"
"$MW" eval --init "hf:$T/new/a/b" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e3" 2>&1 && [ "$(grep -o 'loss [0-9.]*' "$T/e3" | head -1)" = "$l1" ] &&
  pass "the stock config.json back: the same loss ($l1)" || fail "stock config.json: $(tail -1 "$T/e3")"
# layer_norm_epsilon is implemented: another loss, kept by training, its checkpoint and export
mkdir -p "$T/eps" && cp "$T/new/a/b/model.safetensors" "$T/eps/"
sed 's/"layer_norm_epsilon": 1e-05/"layer_norm_epsilon": 0.25/' "$T/conf.bak" >"$T/eps/config.json"
"$MW" eval --init "hf:$T/eps" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e4" 2>&1 && grep -q "layer_norm_epsilon 0.25 (config.json)" "$T/e4" &&
  l4=$(grep -o 'loss [0-9.]*' "$T/e4" | head -1) && [ -n "$l4" ] && [ "$l4" != "$l1" ] &&
  pass "layer_norm_epsilon 0.25: the model computes it ($l4, stock $l1)" || fail "layer_norm_epsilon 0.25: $(tail -2 "$T/e4")"
"$MW" train --data "$T/d" --init "hf:$T/eps" --steps 2 --batch 1 --seq 16 --out "$T/cke" >"$T/out" 2>&1 &&
  grep -aq "^norm_eps=0.25$" "$T"/cke/step-*.mwck && "$MW" export --ckpt "$T/cke" --out "$T/xe/" >"$T/out" 2>&1 &&
  grep -q '"layer_norm_epsilon": 0.25,' "$T/xe/config.json" &&
  "$MW" eval --init "hf:$T/xe" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e5" 2>&1 &&
  "$MW" eval --ckpt "$T/cke" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e6" 2>&1 &&
  l5=$(grep -o 'loss [0-9.]*' "$T/e5" | head -1) && [ -n "$l5" ] && [ "$l5" = "$(grep -o 'loss [0-9.]*' "$T/e6" | head -1)" ] &&
  pass "its checkpoint records norm_eps=0.25, its export layer_norm_epsilon 0.25: eval of both $l5" ||
  fail "layer_norm_epsilon through train/export: $(tail -2 "$T/out") $(tail -1 "$T/e5") $(tail -1 "$T/e6" 2>/dev/null)"

echo "-- sample: a model's tokenizer is never guessed from its size (issue 30, item 5)"
# a GPT-2 of vocabulary 50304 (not GPT-2's 50257) without tokenizer files: no GPT-2 text, a refusal
"$MW" train --data "$T/d" --layers 1 --heads 2 --dim 16 --vocab 50304 --ctx 32 --batch 1 --seq 16 --steps 1 --out "$T/ckv" >"$T/out" 2>&1 ||
  fail "train vocab 50304: $(tail -2 "$T/out")"
"$MW" export --ckpt "$T/ckv" --out "$T/xv/" >"$T/out" 2>&1 || fail "export vocab 50304: $(cat "$T/out")"
expect_error 1 "sample of a 50304-token GPT-2 without tokenizer files" -- "$MW" sample --init "hf:$T/xv" --prompt "Hello world" --tokens 2
grep -q -- "--tokenizer" "$T/err" || fail "the refusal does not name --tokenizer"
"$MW" sample --init "hf:$T/xv" --tokenizer bytes --prompt "Hello world" --tokens 2 >"$T/out" 2>&1 &&
  pass "--tokenizer bytes samples it" || fail "sample --tokenizer bytes: $(tail -1 "$T/out")"

echo "-- export writes the model's tokenizer beside config.json; --init hf: reads it back (issue 30, item 21)"
VOCAB=$(realpath data/gpt2)
[ -f "$VOCAB/encoder.json" ] || { echo "FAIL: $VOCAB/encoder.json missing (make gpt2-vocab)"; exit 1; }
# GPT-2's: vocab.json + merges.txt, its encoder.json + vocab.bpe under Hugging Face's names
"$MW" prepare --tokenizer gpt2 --vocab-dir "$VOCAB" --in "$T/c.txt" --out "$T/g" >"$T/out" 2>&1 || fail "prepare gpt2: $(cat "$T/out")"
"$MW" train --data "$T/g" --layers 1 --heads 2 --dim 16 --vocab 50257 --ctx 32 --batch 1 --seq 16 --steps 1 --out "$T/ckg" >"$T/out" 2>&1 ||
  fail "train gpt2: $(tail -2 "$T/out")"
"$MW" export --ckpt "$T/ckg" --vocab-dir "$VOCAB" --out "$T/xg/" >"$T/out" 2>&1 && cmp -s "$T/xg/vocab.json" "$VOCAB/encoder.json" &&
  cmp -s "$T/xg/merges.txt" "$VOCAB/vocab.bpe" && [ ! -e "$T/xg/tokenizer.json" ] &&
  pass "GPT-2: vocab.json + merges.txt beside config.json ($(grep tokenizer: "$T/out" | cut -c1-60)...)" || fail "GPT-2 export: $(cat "$T/out")"
"$MW" train --data "$T/g" --init "hf:$T/xg" --steps 1 --batch 1 --seq 16 >"$T/out" 2>&1 &&
  grep -q "tokenizer: gpt2 (vocabulary hash fe1712a09e6b9e60), the tokenizer files in $T/xg" "$T/out" &&
  pass "GPT-2: the export reads back as gpt2 from its own files" || fail "GPT-2 re-import: $(grep -i tokenizer "$T/out")"
# a tokenizer.json (a small byte-level BPE): the checkpoint records it, export needs it named
mkdir -p "$T/tiny"
python3 - "$T/tiny/tokenizer.json" <<'PY' || fail "tiny tokenizer.json"
import json, sys
bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
cs, n = bs[:], 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256 + n); n += 1
vocab = {chr(c): b for b, c in zip(bs, cs)}
merges = [("t", "h"), ("th", "e"), ("\u0120", "t"), ("i", "n")]
for a, b in merges: vocab[a + b] = len(vocab)
bl = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": bl, "post_processor": None,
           "decoder": bl, "model": {"type": "BPE", "dropout": None, "unk_token": None, "fuse_unk": False,
           "byte_fallback": False, "vocab": vocab, "merges": [a + " " + b for a, b in merges]}}, open(sys.argv[1], "w"))
PY
echo '{"add_bos_token": false, "model_max_length": 32}' >"$T/tiny/tokenizer_config.json"
"$MW" prepare --tokenizer "$T/tiny" --in "$T/c.txt" --out "$T/b" >"$T/out" 2>&1 || fail "prepare tiny: $(cat "$T/out")"
"$MW" train --data "$T/b" --preset llama-tiny --layers 1 --dim 32 --heads 2 --kv-heads 1 --ffn 64 --vocab 300 --ctx 32 --batch 1 \
  --seq 16 --steps 1 --out "$T/ckb" >"$T/out" 2>&1 || fail "train tiny: $(tail -2 "$T/out")"
id=$(grep -o "tokenizer: bpe (vocabulary hash [0-9a-f]*)" "$T/out" | sed 's/tokenizer: //')
expect_error 1 "export of a tokenizer.json model without --tokenizer" -- "$MW" export --ckpt "$T/ckb" --out "$T/xb/"
grep -q -- "--tokenizer PATH" "$T/err" && [ ! -e "$T/xb" ] || fail "the refusal does not name --tokenizer PATH, or wrote $T/xb"
expect_error 1 "export with GPT-2's files for a tokenizer.json model" -- "$MW" export --ckpt "$T/ckb" --tokenizer "$VOCAB" --out "$T/xb/"
grep -q "is gpt2 .*but the model reads tokenizer bpe" "$T/err" && [ ! -e "$T/xb" ] || fail "the refusal does not name both, or wrote $T/xb"
"$MW" export --ckpt "$T/ckb" --tokenizer "$T/tiny/tokenizer.json" --out "$T/xb/" >"$T/out" 2>&1 &&
  cmp -s "$T/xb/tokenizer.json" "$T/tiny/tokenizer.json" && cmp -s "$T/xb/tokenizer_config.json" "$T/tiny/tokenizer_config.json" &&
  pass "tokenizer.json and its tokenizer_config.json beside config.json" || fail "export tiny: $(cat "$T/out")"
"$MW" train --data "$T/b" --init "hf:$T/xb" --steps 1 --batch 1 --seq 16 >"$T/out" 2>&1 &&
  grep -q "tokenizer: $id, the tokenizer files in $T/xb" "$T/out" &&
  pass "the export reads back as $id, and its data is accepted" || fail "tiny re-import: $(grep -i tokenizer "$T/out")"
"$MW" sample --init "hf:$T/xb" --prompt "the " --tokens 3 --temperature 0 >"$T/s1" 2>&1 &&
  "$MW" sample --ckpt "$T/ckb" --tokenizer "$T/tiny" --prompt "the " --tokens 3 --temperature 0 >"$T/s2" 2>&1 &&
  cmp -s <(grep -av "^  init: " "$T/s1") "$T/s2" && pass "sample of the export (its own tokenizer) == of the checkpoint" ||
  fail "sample: $(cat "$T/s1") vs $(cat "$T/s2")"
# a tokenizer file the export would not write is refused: --init hf: would read it instead
cp "$VOCAB/encoder.json" "$T/xb/"
expect_error 1 "a stale encoder.json in the output directory" -- "$MW" export --ckpt "$T/ckb" --tokenizer "$T/tiny" --out "$T/xb/"
cmp -s "$T/xb/tokenizer.json" "$T/tiny/tokenizer.json" || fail "the refused export changed $T/xb"
rm "$T/xb/encoder.json"
expect_error 1 "a bytes model into a directory holding tokenizer.json" -- "$MW" export --ckpt "$T/ck" --out "$T/xb/"
"$MW" export --ckpt "$T/ckb" --tokenizer none --out "$T/xn/" >"$T/out" 2>&1 && [ ! -e "$T/xn/tokenizer.json" ] &&
  pass "--tokenizer none: the weights alone" || fail "--tokenizer none: $(cat "$T/out")"

[ $fails -eq 0 ] && echo "cli_hf: all passed" || { echo "cli_hf: $fails failure(s)"; exit 1; }
