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

[ $fails -eq 0 ] && echo "cli_hf: all passed" || { echo "cli_hf: $fails failure(s)"; exit 1; }
