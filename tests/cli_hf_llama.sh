#!/usr/bin/env bash
# End-to-end tests of --init hf: with Hugging Face Llama checkpoints (tests/ref/hf_llama: two
# shards, F32/BF16/F16): the configuration comes from config.json and is printed with its source;
# flags that disagree with it, a missing shard, a config.json that disagrees with the tensors and
# unsupported options are refused in one line.
# Usage: tests/cli_hf_llama.sh build/memwall. Exits non-zero on any failure.
set -u
MW=$(realpath "${1:-build/memwall}")
FIX=$(realpath "$(dirname "$0")/ref/hf_llama")
T=$(mktemp -d /tmp/mw_cli_hf_llama_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error

head -c 100000 /usr/share/common-licenses/GPL-3 >"$T/c.txt"
"$MW" prepare --tokenizer bytes --in "$T/c.txt" --out "$T/d" >/dev/null 2>&1 || { echo "prepare failed"; exit 1; }

echo "-- the configuration of Llama weights comes from config.json, each value with its source"
"$MW" train --data "$T/d" --init "hf:$FIX" --seq 16 --steps 1 >"$T/out" 2>&1
grep -q "init: $FIX: llama L=2 C=48 F=128 V=97 (safetensors shapes; config.json agrees), heads 4, kv heads 2, rope_theta 50000, rms_norm_eps 1e-06, untied head (config.json), ctx 32 (config.json)" "$T/out" &&
  pass "$(grep init: "$T/out")" || fail "init line: $(head -3 "$T/out")"
"$MW" train --data "$T/d" --init "hf:$FIX/model.safetensors.index.json" --ctx 16 --seq 16 --steps 1 >"$T/out" 2>&1
grep -q "untied head (config.json), ctx 16 (--ctx)" "$T/out" &&
  pass "the index.json itself, --ctx 16: $(grep init: "$T/out")" || fail "index.json path: $(head -3 "$T/out")"

echo "-- flags against config.json and the tensors are refused"
expect_error 1 "--heads 8 against config.json's 4" -- "$MW" train --data "$T/d" --init "hf:$FIX" --heads 8 --steps 1
expect_error 1 "--dim 64 against width 48" -- "$MW" train --data "$T/d" --init "hf:$FIX" --dim 64 --steps 1
expect_error 1 "--layers 3 against 2 layers" -- "$MW" train --data "$T/d" --init "hf:$FIX" --layers 3 --steps 1

echo "-- a broken checkpoint is refused in one line"
mkdir -p "$T/h" && cp "$FIX"/* "$T/h/"
rm "$T/h/model-00002-of-00002.safetensors"
expect_error 1 "a missing shard" -- "$MW" train --data "$T/d" --init "hf:$T/h" --steps 1
grep -q "names shard model-00002-of-00002.safetensors: cannot open" "$T/err" || fail "the refusal does not name the shard"
cp "$FIX"/* "$T/h/"
sed 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' "$FIX/config.json" >"$T/h/config.json"
expect_error 1 "config.json's num_key_value_heads 4 against k_proj [24, 48]" -- "$MW" train --data "$T/d" --init "hf:$T/h" --steps 1
grep -q "model.layers.0.self_attn.k_proj.weight has shape \[24, 48\], but config.json implies \[48, 48\]" "$T/err" ||
  fail "the refusal does not name the tensor"
sed 's/"rope_scaling": null/"rope_scaling": {"rope_type": "llama3", "factor": 8.0}/' "$FIX/config.json" >"$T/h/config.json"
expect_error 1 "rope_scaling llama3" -- "$MW" sample --init "hf:$T/h" --tokens 2 --tokenizer bytes
sed 's/"model_type": "llama"/"model_type": "qwen2"/' "$FIX/config.json" >"$T/h/config.json"
expect_error 1 "model_type qwen2" -- "$MW" eval --init "hf:$T/h" --data "$T/d" --tokenizer bytes
grep -q "q/k/v biases" "$T/err" || fail "the qwen2 refusal does not say why"
rm "$T/h/config.json"
expect_error 1 "Llama weights without config.json" -- "$MW" train --data "$T/d" --init "hf:$T/h" --steps 1

[ $fails -eq 0 ] && echo "cli_hf_llama: all passed" || { echo "cli_hf_llama: $fails failure(s)"; exit 1; }
