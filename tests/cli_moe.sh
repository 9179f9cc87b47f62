#!/usr/bin/env bash
# End-to-end tests of the deepseek family (issue 32 item 1, docs/moe.md) through the CLI: the
# published parameter counts of the presets, to the precision each source gives; their plans in
# well under a second; estimate equal to the arena's peak for the tiny mixture (with a capacity
# that drops tokens) and latent-attention models; training under every recomputation policy and
# on 1 or 2 threads byte-identical; stop + resume exact; export with Hugging Face's names and --init hf: of the export (the checkpoint's loss, its refusals);
# --recompute auto and --offload auto with the bits of what they chose; --precision bf16 byte-identical
# across kernels, threads and policies, near fp32, planned exactly; the refusals. Numerics against PyTorch: tests/test_moe_ref.c. Usage: tests/cli_moe.sh build/memwall.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_moe_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error

# refused CODE WHAT PATTERN -- CMD...: expect_error, and the one line says PATTERN
refused() {
  local pat=$3
  expect_error "$1" "$2" "$4" "${@:5}"
  grep -q -- "$pat" "$T/err" || fail "$2: the message does not say '$pat'"
}
# jv JSON KEY: a number of a one-line JSON object
jv() { grep -o "\"$2\": [-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: //'; }

echo "-- the presets' parameter counts, as published"
# preset, params to the published precision (a printf format of the count in units), the unit,
# the published figure, its source; rounded as each source rounds
check_count() {
  local preset=$1 key=$2 unit=$3 fmt=$4 want=$5 src=$6 E got
  E=$("$MW" estimate --preset "$preset" --batch 1 --seq 256 --recompute full --json) || { fail "$preset: estimate"; return; }
  got=$(awk -v n="$(jv "$E" "$key")" -v u="$unit" -v f="$fmt" 'BEGIN { printf f, n / u }')
  [ "$got" = "$want" ] && pass "$preset $key $(jv "$E" "$key") = $want ($src)" || fail "$preset $key: $got, published $want ($src)"
}
check_count deepseek-v3 params 1e9 %.0f 671 "DeepSeek-V3 report: 671B total, the MTP module aside"
check_count deepseek-v3 active_params_no_embed 1e9 %.0f 37 "DeepSeek-V3 report: 37B activated"
check_count deepseek-v3 active_params_no_embed 1e9 %.1f 36.6 "DeepSeek-V3 README_WEIGHTS: 36.6B activated, the output head's 0.9B in, the input embedding out"
check_count deepseek-v2-lite params 1e9 %.1f 15.7 "DeepSeek-V2 report: V2-Lite 15.7B"
check_count mixtral-8x7b params 1e9 %.1f 46.7 "Mixtral of Experts: 46.7B total"
check_count mixtral-8x7b active_params 1e9 %.1f 12.9 "Mixtral of Experts: 12.9B active, the embedding counted"
check_count gpt3-175b params 1e9 %.0f 175 "Brown et al. 2020, Table 2.1"
check_count llama3-70b params 1e9 %d 70 "Llama 3: 70B, the name truncating its 70.55B"
E=$("$MW" estimate --preset deepseek-v3 --batch 1 --seq 4096 --recompute full --json)
pb=$(grep -o '"categories": {"parameters": [0-9]*' <<<"$E" | sed -n 2p | sed 's/.*: //') # memory's (the disk's first)
[ "$pb" = $(($(jv "$E" params) * 4)) ] && pass "deepseek-v3's parameter table holds the count: $pb bytes" ||
  fail "deepseek-v3: parameters $pb bytes, 4 x $(jv "$E" params) counted"
s=$(jv "$E" plan_seconds)
awk -v s="$s" 'BEGIN { exit !(s < 1.0) }' && pass "deepseek-v3 at T=4096 plans in $s s" || fail "deepseek-v3 plans in $s s"
"$MW" estimate --preset deepseek-v3 --batch 1 --seq 1024 --recompute full >"$T/out" 2>&1 &&
  grep -q "active parameters per token: 37.55B of 671.03B" "$T/out" && grep -q "MLA q=1536 kv=512" "$T/out" &&
  pass "estimate prints the active parameters and the shape" || fail "estimate's text: $(grep -m2 'active\|MLA' "$T/out")"
E=$("$MW" estimate --preset llama-tiny --json)
[ "$(jv "$E" params)" = "$(jv "$E" active_params)" ] && pass "a dense model's active parameters are its parameters" ||
  fail "llama-tiny active $(jv "$E" active_params) of $(jv "$E" params)"

echo "-- the estimate is the allocation"
for extra in "--preset moe-tiny" "--preset moe-tiny --capacity-factor 1 --recompute selective" \
  "--preset moe-tiny --moe-gate 1 --routed-scale 2.5 --recompute every:2" "--preset mla-tiny" \
  "--preset mla-tiny --q-lora-rank 0 --recompute full"; do
  E=$("$MW" estimate $extra --batch 2 --seq 48 --json)
  R=$("$MW" bench $extra --batch 2 --seq 48 --steps 1 --warmup 0 --threads 2 --json)
  est=$(jv "$E" peak_bytes) got=$(jv "$R" peak_bytes)
  [ -n "$est" ] && [ "$est" = "$got" ] && pass "estimate $est == arena peak ($extra)" ||
    fail "estimate $est != arena peak $got ($extra)"
done

cat /usr/share/common-licenses/GPL-3 >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
# same_tensors A B: the checkpoints' tensor records byte-identical (the configuration text, which
# records the policy, and the trailer aside), as tests/cli_llama.sh compares them
same_tensors() {
  local n=$(($(stat -c %s "$1") - 4096 - 24))
  cmp -s <(tail -c $((n + 24)) "$1" | head -c $n) <(tail -c $((n + 24)) "$2" | head -c $n)
}
for shape in "moe-tiny --capacity-factor 1" "mla-tiny"; do
  blocks=$([ "${shape%% *}" = moe-tiny ] && echo sfnf || echo sfn) # one letter per block
  echo "-- $shape: every recompute policy, and 1 or 2 threads, give the same bits"
  tr=(train --data "$T/d" --preset $shape --batch 2 --seq 48 --steps 3 --warmup 1 --lr 1e-3 --threads 2)
  rm -rf "$T/none" "$T/p" "$T/t1" "$T/r"
  "$MW" "${tr[@]}" --out "$T/none" >"$T/out" 2>&1 || fail "$shape train: $(tail -3 "$T/out")"
  ref="$T/none/step-00000003.mwck"
  for pol in selective full every:2 blocks:$blocks; do
    "$MW" "${tr[@]}" --recompute "$pol" --out "$T/p" >"$T/out" 2>&1 || fail "--recompute $pol: $(tail -2 "$T/out")"
    same_tensors "$ref" "$T/p/step-00000003.mwck" && pass "--recompute $pol: parameters and moments byte-identical to none" ||
      fail "--recompute $pol changes the bits"
    rm -rf "$T/p"
  done
  "$MW" "${tr[@]}" --threads 1 --out "$T/t1" >"$T/out" 2>&1 || fail "1 thread: $(tail -2 "$T/out")"
  cmp -s "$ref" "$T/t1/step-00000003.mwck" && pass "1 thread: byte-identical to 2" || fail "1 thread changes the bits"
  rm -rf "$T/k"
  "$MW" "${tr[@]}" --kernel portable --out "$T/k" >"$T/out" 2>&1 || fail "--kernel portable: $(tail -2 "$T/out")"
  cmp -s "$ref" "$T/k/step-00000003.mwck" && pass "--kernel portable: byte-identical to --kernel auto" ||
    fail "--kernel portable changes the bits"
  "$MW" "${tr[@]}" --stop-at 1 --out "$T/r" >"$T/out" 2>&1 || fail "stop-at: $(tail -2 "$T/out")"
  "$MW" train --data "$T/d" --threads 2 --resume auto --out "$T/r" >"$T/out" 2>&1 || fail "resume: $(tail -2 "$T/out")"
  cmp -s "$ref" "$T/r/step-00000003.mwck" && pass "stop at 1 + resume = the straight run, byte for byte" ||
    fail "resume differs from the straight run"
done
"$MW" train --data "$T/d" --preset moe-tiny --capacity-factor 1 --batch 2 --seq 48 --steps 2 --stop-at 1 --threads 2 \
  --out "$T/moe" >"$T/out" 2>&1 || fail "moe-tiny train: $(tail -2 "$T/out")"
refused 1 "a resume under another capacity factor" "capacity-factor 1, the command line says --capacity-factor 2" -- "$MW" train --data "$T/d" --preset moe-tiny --capacity-factor 2 \
  --batch 2 --seq 48 --steps 2 --threads 2 --resume auto --out "$T/moe"

echo "-- the disk tier and ZeRO give the same bits"
mkdir -p "$T/off"
"$MW" train --data "$T/d" --preset moe-tiny --capacity-factor 1 --batch 2 --seq 48 --steps 2 --threads 2 --out "$T/m0" \
  >"$T/out" 2>&1 || fail "moe-tiny: $(tail -2 "$T/out")"
"$MW" train --data "$T/d" --preset moe-tiny --capacity-factor 1 --batch 2 --seq 48 --steps 2 --threads 2 --out "$T/m1" \
  --offload all --offload-dir "$T/off" >"$T/out" 2>&1 || fail "--offload all: $(tail -2 "$T/out")"
same_tensors "$T/m0/step-00000002.mwck" "$T/m1/step-00000002.mwck" && pass "--offload all: byte-identical to memory" ||
  fail "--offload all changes the bits"
if mpi_ok; then
  mpi_env # (lib_cli.sh)
  z=(train --data "$T/d" --preset moe-tiny --capacity-factor 1 --batch 2 --seq 48 --steps 2 --threads 1)
  mpirun -np 1 "$MW" "${z[@]}" --accum 2 --zero 0 --out "$T/z1" >"$T/out" 2>&1 || fail "1 rank: $(tail -2 "$T/out")"
  mpirun -np 2 --oversubscribe "$MW" "${z[@]}" --zero 3 --out "$T/z2" >"$T/out" 2>&1 || fail "2 ranks: $(tail -2 "$T/out")"
  cmp -s "$T/z1/step-00000002.mwck" "$T/z2/step-00000002.mwck" &&
    pass "--zero 3 over 2 ranks = 1 rank with --accum 2, byte for byte" || fail "--zero 3 changes the bits"
fi

echo "-- export: Hugging Face's names and config.json"
"$MW" export --ckpt "$T/moe" --out "$T/e/" >"$T/out" 2>&1 && fail "moe-tiny (GQA with a shared expert) exported" ||
  { grep -q "no Hugging Face architecture" "$T/out" && [ ! -e "$T/e/model.safetensors" ] &&
      pass "moe-tiny's shape has no Hugging Face architecture: refused, nothing written" || fail "refusal: $(cat "$T/out")"; }
"$MW" export --ckpt "$T/t1" --out "$T/e2/" >"$T/out" 2>&1 && grep -q '"DeepseekV2ForCausalLM"' "$T/e2/config.json" &&
  grep -q '"kv_lora_rank": 16' "$T/e2/config.json" && grep -q '"q_lora_rank": 32' "$T/e2/config.json" &&
  grep -q 'model.layers.2.self_attn.kv_a_proj_with_mqa.weight' "$T/e2/model.safetensors" &&
  pass "mla-tiny exports as DeepseekV2ForCausalLM" || fail "mla-tiny export: $(cat "$T/out")"
"$MW" train --data "$T/d" --preset moe-tiny --shared-experts 0 --first-dense 0 --batch 2 --seq 48 --steps 1 --threads 2 \
  --out "$T/mx" >/dev/null 2>&1 && "$MW" export --ckpt "$T/mx" --out "$T/e3/" >"$T/out" 2>&1 &&
  grep -q '"MixtralForCausalLM"' "$T/e3/config.json" && grep -q '"num_local_experts": 8' "$T/e3/config.json" &&
  grep -q 'model.layers.3.block_sparse_moe.experts.7.w2.weight' "$T/e3/model.safetensors" &&
  pass "a Mixtral-shaped moe-tiny exports as MixtralForCausalLM" || fail "Mixtral export: $(cat "$T/out")"

"$MW" train --data "$T/d" --preset mla-tiny --experts 4 --experts-per-tok 2 --moe-ffn 32 --norm-topk 1 --batch 2 --seq 48 \
  --steps 1 --threads 2 --out "$T/v2n" >/dev/null 2>&1 || fail "mla-tiny with experts: train"
refused 1 "export of a softmax-routed MLA model with --norm-topk 1 (DeepSeek's code and transformers' disagree)" \
  "norm_topk_prob true DeepSeek's code and transformers' compute differently" -- "$MW" export --ckpt "$T/v2n" --out "$T/e5/"
[ ! -e "$T/e5/model.safetensors" ] || fail "the refused export wrote $T/e5/model.safetensors"

echo "-- import: --init hf: of each export computes what the checkpoint computed"
"$MW" train --data "$T/d" --preset mla-tiny --experts 4 --experts-per-tok 2 --moe-ffn 32 --shared-experts 1 --first-dense 1 \
  --moe-gate 1 --norm-topk 1 --routed-scale 2.5 --batch 2 --seq 48 --steps 2 --threads 2 --out "$T/v3" >/dev/null 2>&1 &&
  "$MW" export --ckpt "$T/v3" --out "$T/e4/" >"$T/out" 2>&1 && grep -q '"DeepseekV3ForCausalLM"' "$T/e4/config.json" ||
  fail "a V3-shaped mla-tiny: train and export: $(cat "$T/out")"
for ce in "t1 e2 DeepseekV2ForCausalLM" "v3 e4 DeepseekV3ForCausalLM" "mx e3 MixtralForCausalLM"; do
  set -- $ce
  ev=(--data "$T/d" --eval-batches 3 --batch 2 --seq 48 --threads 2 --json)
  want=$("$MW" eval --ckpt "$T/$1" "${ev[@]}" 2>"$T/err" | grep -o '"loss": [0-9.]*')
  got=$("$MW" eval --init "hf:$T/$2" "${ev[@]}" 2>"$T/err" | grep -o '"loss": [0-9.]*')
  sm=(--prompt "The " --tokens 24 --temperature 0 --threads 2)
  "$MW" sample --ckpt "$T/$1" "${sm[@]}" >"$T/s1" 2>/dev/null && "$MW" sample --init "hf:$T/$2" "${sm[@]}" 2>>"$T/err" | grep -av '^  init: ' >"$T/s2"
  [ -n "$want" ] && [ "$got" = "$want" ] && cmp -s "$T/s1" "$T/s2" &&
    pass "$3 ($1): eval --init hf: ${got#*: } = eval --ckpt's, greedy sampling the same text" ||
    fail "$3 ($1): eval --init '$got', --ckpt '$want'; $(tail -2 "$T/err")"
done
# and trains, its configuration from config.json alone
"$MW" train --init "hf:$T/e3" --data "$T/d" --batch 2 --seq 48 --steps 1 --threads 2 --out "$T/mxi" \
  --json-log "$T/mxi.jsonl" >"$T/out" 2>&1 && grep -q "init: .*8 experts of 32 top-2" "$T/out" &&
  pass "train --init hf: (Mixtral) trains, the configuration from config.json" || fail "train --init: $(tail -2 "$T/out")"
mkdir -p "$T/ioff"
"$MW" train --init "hf:$T/e3" --data "$T/d" --batch 2 --seq 48 --steps 1 --threads 2 --out "$T/mxo" --offload all \
  --offload-dir "$T/ioff" >"$T/out" 2>&1 && same_tensors "$T/mxi/step-00000001.mwck" "$T/mxo/step-00000001.mwck" &&
  pass "train --init hf: with --offload all (the weights streamed to the disk tier): the bits of the in-memory run" ||
  fail "--init with --offload all: $(tail -2 "$T/out")"
# edit SED [DIR]: a copy of the V3 export (or DIR) with its config.json edited by a sed expression
edit() {
  rm -rf "$T/ed" && cp -r "$T/${2:-e4}" "$T/ed" && sed -i "$1" "$T/ed/config.json"
}
ev=(eval --data "$T/d" --eval-batches 1 --batch 2 --seq 48 --threads 2 --init "hf:$T/ed")
edit 's/"rope_scaling": null/"rope_scaling": {"type": "yarn", "factor": 40}/'
refused 1 "import: YaRN rope scaling" 'rope_scaling is not null ("yarn")' -- "$MW" "${ev[@]}"
edit 's/"model_type": "deepseek_v3"/"model_type": "deepseek_v2"/'
refused 1 "import: a V2 config with V3's sigmoid router" 'scoring_func is "sigmoid"' -- "$MW" "${ev[@]}"
edit 's/"n_group": 1/"n_group": 2/; s/"topk_group": 1/"topk_group": 1/'
refused 1 "import: group-limited routing" "group-limited routing is not modelled" -- "$MW" "${ev[@]}"
edit '/"first_k_dense_replace"/d'
refused 1 "import: a key whose default differs between the codes, absent" "first_k_dense_replace is absent" -- "$MW" "${ev[@]}"
edit 's/"norm_topk_prob": true/"norm_topk_prob": false/'
refused 1 "import: a flag against config.json (its normalisation)" "norm-topk 1 disagrees with --init" -- \
  "$MW" estimate --batch 2 --seq 48 --init "hf:$T/ed" --norm-topk 1
edit 's/"use_cache": true/"use_cache": true, "quantization_config": {"quant_method": "fp8"}/'
refused 1 "import: quantized weights" "quantization_config is given" -- "$MW" "${ev[@]}"
edit 's/"n_routed_experts": 4/"n_routed_experts": 3/'
refused 1 "import: fewer experts than the weights" "mlp.gate.weight has shape \[4, 64\], but config.json implies \[3, 64\]" -- "$MW" "${ev[@]}"
edit 's/"num_hidden_layers": 4/"num_hidden_layers": 3/' e3
refused 1 "import: fewer layers than the weights (Mixtral)" "model.layers.3.[a-z0-9_.]* is not part of the model config.json describes (a block past num_hidden_layers 3)" -- "$MW" "${ev[@]}"
edit 's/"kv_lora_rank": 16/"kv_lora_rank": 8/' e2
refused 1 "import: another latent rank than the weights (V2)" "kv_a_proj_with_mqa.weight has shape \[24, 64\], but config.json implies \[16, 64\]" -- "$MW" "${ev[@]}"
edit 's/"num_key_value_heads": 2/"num_key_value_heads": 4/' e3
refused 1 "import: more key/value heads than the weights" "k_proj.weight has shape \[32, 64\], but config.json implies \[64, 64\]" -- "$MW" "${ev[@]}"
edit 's/"topk_method": "noaux_tc"/"topk_method": "group_limited_greedy"/'
refused 1 "import: another V3 routing" 'topk_method is "group_limited_greedy"' -- "$MW" "${ev[@]}"
refused 1 "import: a flag against config.json (its experts)" "experts 4 disagrees with --init" -- "$MW" estimate --batch 2 \
  --seq 48 --init "hf:$T/e3" --experts 4
refused 1 "import: a deepseek flag with Llama weights" "is for the deepseek family" -- "$MW" estimate --batch 2 --seq 48 \
  --init "hf:$(dirname "$0")/ref/hf_llama" --experts 4

echo "-- eval reads a deepseek checkpoint: the loss training measured on the same batches"
for shape in "moe-tiny --capacity-factor 1" "mla-tiny"; do
  rm -rf "$T/ev"
  "$MW" train --data "$T/d" --preset $shape --batch 2 --seq 48 --steps 2 --threads 2 --eval-every 2 --eval-batches 3 \
    --out "$T/ev" --json-log "$T/ev.jsonl" >"$T/out" 2>&1 || fail "$shape: $(tail -2 "$T/out")"
  want=$(json_field "$T/ev.jsonl" val_loss | tail -1)
  got=$("$MW" eval --ckpt "$T/ev" --data "$T/d" --eval-batches 3 --threads 2 --json 2>"$T/err" | grep -o '"loss": [0-9.]*' | sed 's/.*: //')
  [ -n "$want" ] && [ "$got" = "$want" ] && pass "${shape%% *}: eval --ckpt $got = training's validation loss" ||
    fail "${shape%% *}: eval '$got' ($(cat "$T/err")), training's validation loss '$want'"
done

"$MW" sample --ckpt "$T/ev" --prompt "The " --tokens 20 --temperature 0 --threads 2 >"$T/s1" 2>"$T/err" &&
  "$MW" sample --ckpt "$T/ev" --prompt "The " --tokens 20 --temperature 0 --threads 1 >"$T/s2" 2>>"$T/err" &&
  cmp -s "$T/s1" "$T/s2" && [ "$(wc -c <"$T/s1")" -ge 20 ] &&
  pass "sample --ckpt (mla-tiny): greedy decoding through the latent cache, the same text on 1 and 2 threads" ||
  fail "sample: $(cat "$T/err")"

echo "-- --recompute auto and --offload auto: the bits of the policy and the placement they chose"
# auto times each op kind on a 2-block calibration model the family scales (deepseek.c's
# calib_config; tests/test_calib.c checks that it times every kind): between none's and full's
# peaks it must choose per-block policies that fit, and train with the bits of that pinned policy
for shape in "moe-tiny --capacity-factor 1" "mla-tiny"; do
  sh=${shape%% *}
  a=(--preset $shape --batch 2 --seq 48)
  tr=(train --data "$T/d" "${a[@]}" --steps 3 --warmup 1 --lr 1e-3 --threads 2)
  # plan, not estimate: estimate's tables also plan the family's other presets under auto, each
  # calibrated (Mixtral's and DeepSeek-V3's take seconds)
  pn=$(jv "$("$MW" plan "${a[@]}" --recompute none --json)" peak_bytes)
  pf=$(jv "$("$MW" plan "${a[@]}" --recompute full --json)" peak_bytes)
  mid=$(((pn + pf) / 2))
  E=$("$MW" plan "${a[@]}" --recompute auto --budget $mid --json)
  pin=$(grep -o '"recompute_pin": "[a-z:]*"' <<<"$E" | sed 's/.*: "//; s/"//')
  [ -n "$pin" ] && grep -q '"fits": true' <<<"$E" && [ "$(jv "$E" peak_bytes)" -le $mid ] &&
    pass "$sh: --recompute auto under $mid bytes (none $pn, full $pf) plans $pin, peak $(jv "$E" peak_bytes)" ||
    fail "$sh: --recompute auto: $(head -c 300 <<<"$E")"
  rm -rf "$T/ra" "$T/rp" "$T/n0" "$T/oa"
  "$MW" "${tr[@]}" --out "$T/n0" >"$T/out" 2>&1 || fail "$sh: $(tail -2 "$T/out")"
  "$MW" "${tr[@]}" --recompute auto --budget $mid --out "$T/ra" >"$T/out" 2>&1 || fail "$sh auto: $(tail -2 "$T/out")"
  "$MW" "${tr[@]}" --recompute "$pin" --out "$T/rp" >"$T/out2" 2>&1 || fail "$sh $pin: $(tail -2 "$T/out2")"
  same_tensors "$T/rp/step-00000003.mwck" "$T/ra/step-00000003.mwck" &&
    same_tensors "$T/n0/step-00000003.mwck" "$T/ra/step-00000003.mwck" &&
    pass "$sh: --recompute auto trains with the bits of --recompute $pin (and of none)" ||
    fail "$sh: --recompute auto's bits differ from $pin's or none's"
  # a budget under full's in-memory peak: --offload auto must move something to the disk
  mkdir -p "$T/oscr"
  E=$("$MW" plan "${a[@]}" --recompute full --budget $((pf - 1)) --offload auto --offload-dir "$T/oscr" --json)
  off=$(grep -o '"offload": "[a-z+]*"' <<<"$E" | head -1 | sed 's/.*: "//; s/"//')
  [ -n "$off" ] && [ "$off" != none ] && grep -q '"fits": true' <<<"$E" &&
    pass "$sh: --offload auto under full's peak - 1 chooses --offload $off (by predicted time, the disk measured)" ||
    fail "$sh: --offload auto: $(grep -o '"offload[a-z_]*": "[^"]*"' <<<"$E")"
  "$MW" "${tr[@]}" --recompute full --budget $((pf - 1)) --offload auto --offload-dir "$T/oscr" --out "$T/oa" \
    >"$T/out" 2>&1 || fail "$sh --offload auto: $(tail -2 "$T/out")"
  same_tensors "$T/n0/step-00000003.mwck" "$T/oa/step-00000003.mwck" &&
    pass "$sh: --offload auto ($off) trains with the bits of the in-memory run" || fail "$sh: --offload auto changes the bits"
done

echo "-- --precision bf16: the products in bfloat16 (docs/precision.md), the same bits everywhere"
# the FMA family's kernels (amx, where the CPU has it, gives its own bits: cli_precision.sh); the
# reference run pinned to auto's fp32 kernel, since auto's bf16 products may run on amx
avail=$("$MW" --version 2>&1 | sed -n 's/^kernel [a-z0-9]* (this CPU runs \([^;]*\);.*/\1/p' | tr -d , | sed 's/\bamx\b//')
fk=$("$MW" --version | sed -n 's/^kernel \([a-z0-9]*\) .*/\1/p')
for shape in "moe-tiny --capacity-factor 1" "mla-tiny"; do
  sh=${shape%% *}
  blocks=$([ "$sh" = moe-tiny ] && echo sfnf || echo sfn)
  a=(--preset $shape --batch 2 --seq 48)
  tr=(train --data "$T/d" "${a[@]}" --steps 3 --warmup 1 --lr 1e-3 --threads 2 --precision bf16 --kernel "$fk")
  rm -rf "$T/b" "$T/b1" "$T/f"
  "$MW" "${tr[@]}" --out "$T/b" >"$T/out" 2>&1 || fail "$sh bf16: $(tail -2 "$T/out")"
  "$MW" "${tr[@]}" --precision fp32 --out "$T/f" >"$T/out" 2>&1 || fail "$sh fp32: $(tail -2 "$T/out")"
  grep -aq "^precision=bf16$" "$T/b/step-00000003.mwck" && ! cmp -s "$T/b/step-00000003.mwck" "$T/f/step-00000003.mwck" &&
    pass "$sh: bf16 trains, records precision=bf16, and changes the numbers" || fail "$sh: bf16 checkpoint"
  "$MW" "${tr[@]}" --threads 1 --out "$T/b1" >"$T/out" 2>&1 || fail "$sh bf16 1 thread: $(tail -2 "$T/out")"
  cmp -s "$T/b/step-00000003.mwck" "$T/b1/step-00000003.mwck" && pass "$sh bf16: 1 thread byte-identical to 2" ||
    fail "$sh bf16: 1 thread changes the bits"
  for k in $avail; do
    rm -rf "$T/bk"
    "$MW" "${tr[@]}" --kernel $k --out "$T/bk" >"$T/out" 2>&1 || fail "$sh bf16 --kernel $k: $(tail -2 "$T/out")"
    cmp -s "$T/b/step-00000003.mwck" "$T/bk/step-00000003.mwck" && pass "$sh bf16: --kernel $k byte-identical" ||
      fail "$sh bf16: --kernel $k changes the bits"
  done
  for pol in selective full every:2 blocks:$blocks; do
    rm -rf "$T/bp"
    "$MW" "${tr[@]}" --recompute $pol --out "$T/bp" >"$T/out" 2>&1 || fail "$sh bf16 --recompute $pol: $(tail -2 "$T/out")"
    same_tensors "$T/b/step-00000003.mwck" "$T/bp/step-00000003.mwck" &&
      pass "$sh bf16: --recompute $pol byte-identical to none" || fail "$sh bf16: --recompute $pol changes the bits"
  done
  # the activations are stored as Llama's: the norms' outputs, q|k|v (MLA's q, kv_b, k_pe) and
  # the attention output, the experts' inputs, the MLPs' and the experts' gate|up and act as
  # bfloat16 (docs/moe.md)
  af=$(grep -o '"activations": [0-9]*' <<<"$("$MW" estimate "${a[@]}" --json)" | sed -n 2p | sed 's/.*: //')
  ab=$(grep -o '"activations": [0-9]*' <<<"$("$MW" estimate "${a[@]}" --precision bf16 --json)" | sed -n 2p | sed 's/.*: //')
  [ -n "$ab" ] && [ "$ab" -lt "$af" ] && pass "$sh bf16: activations $ab bytes, fp32's $af (bfloat16 values)" ||
    fail "$sh bf16: activations '$ab' bytes, fp32's '$af'"
  for extra in "" "--recompute selective"; do
    E=$("$MW" estimate "${a[@]}" --precision bf16 $extra --json)
    R=$("$MW" bench "${a[@]}" --precision bf16 $extra --steps 1 --warmup 0 --threads 2 --json)
    [ -n "$(jv "$E" peak_bytes)" ] && [ "$(jv "$E" peak_bytes)" = "$(jv "$R" peak_bytes)" ] &&
      pass "$sh bf16${extra:+ $extra}: estimate $(jv "$E" peak_bytes) == arena peak" ||
      fail "$sh bf16 $extra: estimate $(jv "$E" peak_bytes) != arena peak $(jv "$R" peak_bytes)"
  done
  # near fp32: 30 steps, the validation loss within 0.2% (measured: 0.0002% moe-tiny, 0.004% mla-tiny)
  l=(train --data "$T/d" --preset $shape --batch 4 --seq 64 --steps 30 --warmup 2 --lr 1e-3 --threads 2 --eval-every 30
    --eval-batches 4)
  rm -rf "$T/lf" "$T/lb"
  "$MW" "${l[@]}" --out "$T/lf" --json-log "$T/lf.jsonl" >/dev/null 2>&1 &&
    "$MW" "${l[@]}" --precision bf16 --out "$T/lb" --json-log "$T/lb.jsonl" >/dev/null 2>&1 || fail "$sh: 30 steps"
  vf=$(json_field "$T/lf.jsonl" val_loss | tail -1) vb=$(json_field "$T/lb.jsonl" val_loss | tail -1)
  v0=$(json_field "$T/lb.jsonl" loss | head -1)
  awk -v f="$vf" -v b="$vb" -v z="$v0" 'BEGIN { d = (b - f) / f; if (d < 0) d = -d; exit !(f != "" && d < 0.002 && b < z - 1) }' &&
    pass "$sh bf16: validation loss $vb after 30 steps within 0.2% of fp32's $vf (first step $v0)" ||
    fail "$sh bf16: validation loss $vb, fp32's $vf, first step $v0"
done

echo "-- refusals"
refused 1 "--experts on a Llama preset" "is for the deepseek family" -- "$MW" estimate --preset llama-tiny --experts 4
refused 1 "--experts-per-tok above --experts" "experts-per-tok must be in 1..--experts=8" -- "$MW" estimate --preset moe-tiny --experts-per-tok 9
refused 1 "--qk-rope-dim without latent attention" "give --kv-lora-rank" -- "$MW" estimate --preset moe-tiny --qk-rope-dim 8
# a layout is planned, never trained: its collectives (the all-to-alls, the sends) have no CPU kernel
for lay in "--tp 2" "--ep 2" "--pp 2" "--sp --tp 2"; do
  rm -rf "$T/lay"
  refused 1 "train $lay (the deepseek family)" "runs in a later version: estimate and plan only" -- "$MW" train \
    --data "$T/d" --preset moe-tiny --batch 2 --seq 48 --steps 1 --threads 2 --out "$T/lay" $lay
  [ ! -e "$T/lay" ] || fail "train $lay wrote $T/lay"
done

[ "$fails" -eq 0 ] && echo "cli_moe: ok" || { echo "cli_moe: $fails failure(s)"; exit 1; }
