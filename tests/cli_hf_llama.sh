#!/usr/bin/env bash
# End-to-end tests of --init hf: with Hugging Face Llama checkpoints (tests/ref/hf_llama: two
# shards, F32/BF16/F16): the configuration comes from config.json and is printed with its source;
# flags that disagree with it, a missing shard, a config.json that disagrees with the tensors and
# unsupported options are refused in one line; a trained Llama exports as LlamaForCausalLM (tied
# and untied), and eval and sample of the export equal the checkpoint's.
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

echo "-- a Llama checkpoint exports as LlamaForCausalLM, and --init hf: reads the export back"
# GQA, untied, theta of Llama 3; then a tied one
"$MW" train --data "$T/d" --preset llama-tiny --layers 2 --kv-heads 2 --rope-theta 500000 --ctx 64 --batch 2 --seq 32 \
  --steps 2 --threads 2 --out "$T/ck" >"$T/out" 2>&1 || fail "llama train: $(tail -3 "$T/out")"
"$MW" export --ckpt "$T/ck" --out "$T/x/" >"$T/out" 2>&1 && [ -s "$T/x/model.safetensors" ] && [ -s "$T/x/config.json" ] &&
  grep -q "Hugging Face Llama (LlamaForCausalLM) safetensors" "$T/out" && pass "export: $(cat "$T/out")" ||
  fail "export: $(cat "$T/out")"
python3 - "$T/x/config.json" >"$T/out" 2>&1 <<'PY' && pass "config.json: $(cat "$T/out")" || fail "config.json: $(cat "$T/out")"
import json, sys
c = json.load(open(sys.argv[1]))
want = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "hidden_size": 128, "intermediate_size": 352, "vocab_size": 256,
        "max_position_embeddings": 64, "rope_theta": 500000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "rope_scaling": None, "head_dim": 32,
        "torch_dtype": "float32"}
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
if bad: sys.exit("differs: %r" % bad)
print("LlamaConfig L2 H4 KV2 C128 F352 V256 ctx64, rope_theta 500000.0, untied")
PY
"$MW" eval --init "hf:$T/x" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e1" 2>&1 &&
  "$MW" eval --ckpt "$T/ck" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e2" 2>&1 &&
  l1=$(grep -o 'loss [0-9.]*' "$T/e1" | head -1) && [ -n "$l1" ] && [ "$l1" = "$(grep -o 'loss [0-9.]*' "$T/e2" | head -1)" ] &&
  pass "eval of the export == eval of the checkpoint ($l1)" || fail "eval: $(tail -1 "$T/e1") vs $(tail -1 "$T/e2")"
"$MW" sample --init "hf:$T/x" --tokenizer bytes --prompt "The " --tokens 8 --seed 1 --temperature 0 >"$T/s1" 2>/dev/null &&
  "$MW" sample --ckpt "$T/ck" --tokenizer bytes --prompt "The " --tokens 8 --seed 1 --temperature 0 >"$T/s2" 2>/dev/null &&
  cmp -s <(grep -v "^  init: " "$T/s1") "$T/s2" && [ -s "$T/s2" ] && pass "greedy sample of the export == of the checkpoint" ||
  fail "sample: $(cat "$T/s1") vs $(cat "$T/s2")"
"$MW" train --data "$T/d" --init "hf:$T/x" --batch 2 --seq 32 --steps 1 --out "$T/ft" >"$T/out" 2>&1 &&
  grep -q "llama L=2 C=128 F=352 V=256" "$T/out" && grep -q "KV=2 F=352" "$T/out" &&
  pass "fine-tuning from the export: $(grep 'memwall train' "$T/out" | cut -c1-80)" || fail "fine-tune: $(tail -3 "$T/out")"
expect_error 1 "--kv-heads 4 against config.json's 2" -- "$MW" train --data "$T/d" --init "hf:$T/x" --arch llama --kv-heads 4 --steps 1
expect_error 1 "--rope-theta 10000 against config.json's 500000" -- "$MW" train --data "$T/d" --init "hf:$T/x" --arch llama --rope-theta 10000 --steps 1
expect_error 1 "--tied 1 against config.json's untied head" -- "$MW" train --data "$T/d" --init "hf:$T/x" --arch llama --tied 1 --steps 1
expect_error 1 "--arch gpt2 against Llama weights" -- "$MW" train --data "$T/d" --init "hf:$T/x" --arch gpt2 --steps 1
"$MW" train --data "$T/d" --preset llama-tiny --layers 1 --tied 1 --ctx 64 --batch 2 --seq 32 --steps 1 --out "$T/ckt" >"$T/out" 2>&1 ||
  fail "tied train: $(tail -3 "$T/out")"
"$MW" export --ckpt "$T/ckt" --out "$T/xt/" >/dev/null 2>&1 && grep -q '"tie_word_embeddings": true' "$T/xt/config.json" &&
  ! grep -q lm_head "$T/xt/model.safetensors" && pass "a tied model exports without lm_head.weight" || fail "tied export"
"$MW" eval --init "hf:$T/xt" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e1" 2>&1 &&
  "$MW" eval --ckpt "$T/ckt" --data "$T/d" --tokenizer bytes --seq 32 >"$T/e2" 2>&1 &&
  l1=$(grep -o 'loss [0-9.]*' "$T/e1" | head -1) && [ -n "$l1" ] && [ "$l1" = "$(grep -o 'loss [0-9.]*' "$T/e2" | head -1)" ] &&
  pass "tied: eval of the export == eval of the checkpoint ($l1)" || fail "tied eval: $(tail -1 "$T/e1") vs $(tail -1 "$T/e2")"

echo "-- a Mistral sliding_window: a context up to it is exact, one beyond it is refused (issue 30, item 6)"
sed 's/"model_type": "llama"/"model_type": "mistral", "sliding_window": 32/' "$FIX/config.json" >"$T/h/config.json"
expect_error 1 "--ctx 64 beyond sliding_window 32 (= max_position_embeddings)" -- "$MW" estimate --init "hf:$T/h" --ctx 64 --seq 16
grep -q "sliding_window 32" "$T/err" || fail "the refusal does not name sliding_window"
sed 's/"model_type": "llama"/"model_type": "mistral", "sliding_window": 16/' "$FIX/config.json" >"$T/h/config.json"
expect_error 1 "--ctx 32 beyond sliding_window 16" -- "$MW" train --data "$T/d" --init "hf:$T/h" --ctx 32 --seq 16 --steps 1
grep -q "sliding_window 16.*pass --ctx 16 or less" "$T/err" || fail "the refusal does not name sliding_window and --ctx"
"$MW" estimate --init "hf:$T/h" --ctx 16 --seq 16 >"$T/out" 2>&1 && grep -q "ctx 16 (--ctx)" "$T/out" &&
  pass "--ctx 16 within the window of 16 is accepted" || fail "--ctx 16 in the window: $(tail -2 "$T/out")"
"$MW" estimate --init "hf:$T/h" --seq 16 >"$T/out" 2>&1 &&
  grep -q "ctx 16 (config.json's sliding_window, below max_position_embeddings)" "$T/out" &&
  pass "without --ctx, the window: $(grep -o 'ctx 16 (.*' "$T/out")" || fail "default ctx in the window: $(tail -2 "$T/out")"

echo "-- sample: a Llama's tokenizer is never guessed from its size (issue 30, item 5)"
# a Llama of exactly GPT-2's 50257 tokens without tokenizer files is not GPT-2: refused, naming --tokenizer
"$MW" train --data "$T/d" --preset llama-tiny --layers 1 --dim 32 --heads 2 --kv-heads 1 --ffn 64 --vocab 50257 --ctx 32 \
  --batch 1 --seq 16 --steps 1 --out "$T/ckv" >"$T/out" 2>&1 || fail "train vocab 50257: $(tail -2 "$T/out")"
"$MW" export --ckpt "$T/ckv" --out "$T/xv/" >"$T/out" 2>&1 || fail "export vocab 50257: $(cat "$T/out")"
expect_error 1 "sample of a 50257-token Llama without tokenizer files" -- "$MW" sample --init "hf:$T/xv" --prompt "Hello world" --tokens 2
grep -q -- "--tokenizer PATH" "$T/err" || fail "the refusal does not name --tokenizer"

[ $fails -eq 0 ] && echo "cli_hf_llama: all passed" || { echo "cli_hf_llama: $fails failure(s)"; exit 1; }
