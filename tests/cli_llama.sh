#!/usr/bin/env bash
# End-to-end tests of the Llama family through the CLI (issue 13): training under every
# recomputation policy and thread count gives byte-identical checkpoints; resume continues
# exactly; the estimate is the arena's peak to the byte; sample and eval read Llama checkpoints;
# mismatched families and shapes are refused. Usage: tests/cli_llama.sh build/memwall.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_llama_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error

cat /usr/share/common-licenses/{GPL-2,GPL-3} >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
# GQA (4 heads, 2 kv heads), untied, 3 blocks, theta of Llama 3, a sequence that crosses the
# attention tile (128) and batch x seq the loss quantum (256)
tr=(train --data "$T/d" --preset llama-tiny --layers 3 --kv-heads 2 --rope-theta 500000 --batch 2 --seq 160
    --steps 3 --warmup 1 --lr 1e-3 --threads 2)

# same_tensors A B: the checkpoints' tensor records (all but the configuration text, which records
# the policy, and the 24-byte trailer with its CRC over both) are byte-identical
same_tensors() {
  local n=$(($(stat -c %s "$1") - 4096 - 24))
  [ "$(stat -c %s "$1")" = "$(stat -c %s "$2")" ] || [ $((($(stat -c %s "$1") - $(stat -c %s "$2")) ** 2)) -lt 4096 ] || return 1
  cmp -s <(tail -c $((n + 24)) "$1" | head -c $n) <(tail -c $((n + 24)) "$2" | head -c $n)
}
echo "-- every recompute policy, and 1 or 2 threads, give the same bits"
"$MW" "${tr[@]}" --out "$T/none" >"$T/out" 2>&1 || fail "llama train: $(tail -3 "$T/out")"
grep -q "llama-tiny with --layers 3 --rope-theta 500000" "$T/out" && grep -q "KV=2 F=352" "$T/out" &&
  pass "the header names the family's shape" || fail "header: $(head -2 "$T/out")"
ref="$T/none/step-00000003.mwck"
[ -f "$ref" ] || fail "no checkpoint"
for pol in selective full every:1 every:2 blocks:sfn; do
  "$MW" "${tr[@]}" --recompute "$pol" --out "$T/p" >"$T/out" 2>&1 || fail "--recompute $pol: $(tail -2 "$T/out")"
  same_tensors "$ref" "$T/p/step-00000003.mwck" && pass "--recompute $pol: parameters and moments byte-identical to none" ||
    fail "--recompute $pol changes the bits"
  rm -rf "$T/p"
done
"$MW" "${tr[@]}" --threads 1 --out "$T/t1" >"$T/out" 2>&1 || fail "1 thread: $(tail -2 "$T/out")"
cmp -s "$ref" "$T/t1/step-00000003.mwck" && pass "1 thread: byte-identical to 2" || fail "1 thread changes the bits"

echo "-- resume continues exactly"
"$MW" "${tr[@]}" --stop-at 1 --out "$T/r" >"$T/out" 2>&1 || fail "stop-at: $(tail -2 "$T/out")"
"$MW" train --data "$T/d" --threads 2 --resume auto --out "$T/r" >"$T/out" 2>&1 || fail "resume: $(tail -2 "$T/out")"
grep -q "llama-tiny" "$T/out" || grep -q "L=3 H=4 KV=2" "$T/out" || fail "the resume does not show the Llama shape: $(head -2 "$T/out")"
cmp -s "$ref" "$T/r/step-00000003.mwck" && pass "stop at 1 + resume = the straight run, byte for byte" ||
  fail "resume differs from the straight run"

echo "-- the estimate is the allocation"
for extra in "" "--recompute selective" "--recompute every:2" "--batch 3 --seq 100 --tied 1"; do
  E=$("$MW" estimate --preset llama-tiny --layers 3 --kv-heads 2 --batch 2 --seq 160 $extra --json)
  R=$("$MW" bench --preset llama-tiny --layers 3 --kv-heads 2 --batch 2 --seq 160 $extra --steps 1 --warmup 0 --json)
  est=$(grep -o '"peak_bytes": [0-9]*' <<<"$E" | head -1 | sed 's/.*: //')
  got=$(grep -o '"peak_bytes": [0-9]*' <<<"$R" | head -1 | sed 's/.*: //')
  [ -n "$est" ] && [ "$est" = "$got" ] && pass "estimate $est == arena peak ($extra)" ||
    fail "estimate $est != arena peak $got ($extra)"
done
grep -q '"arch": "llama"' <<<"$E" && grep -q '"korthikanti_16bit_by_policy": null' <<<"$E" &&
  pass "estimate --json names the family and gives no Korthikanti figure for it" || fail "estimate json: $E"
"$MW" estimate --preset llama2-70b --batch 1 --seq 4096 --recompute full >"$T/out" 2>&1 &&
  grep -q "L=80 H=64 KV=8 F=28672" "$T/out" && pass "llama2-70b estimates ($(grep -o 'peak .*GiB' "$T/out" | head -1))" ||
  fail "llama2-70b estimate: $(tail -3 "$T/out")"
"$MW" estimate --preset smollm-135m --json >"$T/out" 2>&1 && grep -q '"params": 134515008' "$T/out" &&
  pass "smollm-135m has its published 134515008 parameters" || fail "smollm-135m params: $(cat "$T/out")"

echo "-- sample and eval read a Llama checkpoint"
"$MW" sample --ckpt "$T/none" --prompt "The " --tokens 20 --temperature 0 >"$T/s1" 2>"$T/err" &&
  "$MW" sample --ckpt "$T/none" --prompt "The " --tokens 20 --temperature 0 >"$T/s2" 2>>"$T/err" &&
  cmp -s "$T/s1" "$T/s2" && [ "$(wc -c <"$T/s1")" -ge 20 ] && pass "greedy sampling is deterministic" ||
  fail "sample: $(cat "$T/err")"
"$MW" eval --ckpt "$T/none" --data "$T/d" --eval-batches 4 --json >"$T/e" 2>"$T/err" &&
  loss=$(grep -o '"loss": [0-9.]*' "$T/e" | sed 's/.*: //') && [ -n "$loss" ] &&
  awk -v l="$loss" 'BEGIN{exit !(l > 0 && l < 6)}' && pass "eval: loss $loss" || fail "eval: $(cat "$T/e" "$T/err")"

echo "-- refusals"
expect_error 1 "a GPT-2 run resuming a Llama checkpoint" -- "$MW" train --data "$T/d" --preset gpt2-tiny --resume "$ref" --out "$T/x"
expect_error 1 "a Llama flag on GPT-2" -- "$MW" train --data "$T/d" --kv-heads 2 --steps 1
expect_error 1 "heads not a multiple of kv heads" -- "$MW" train --data "$T/d" --preset llama-tiny --kv-heads 3 --steps 1
expect_error 1 "an odd head size (rotary pairs)" -- "$MW" train --data "$T/d" --arch llama --dim 36 --heads 4 --steps 1
expect_error 1 "an unknown family" -- "$MW" train --data "$T/d" --arch mamba --steps 1
expect_error 1 "another kv-heads on resume" -- "$MW" train --data "$T/d" --kv-heads 4 --preset llama-tiny --layers 3 --rope-theta 500000 --resume "$ref" --out "$T/x"
"$MW" train --data "$T/d" --arch llama --steps 1 --batch 1 --seq 8 --out "$T/a" >"$T/out" 2>&1 &&
  grep -q "gpt2-tiny with --kv-heads 4 --ffn 512 --tied 0 --arch llama" "$T/out" &&
  pass "--arch llama on the default shape: kv heads = heads, ffn by Llama's rule (512), untied" ||
  fail "--arch llama defaults: $(head -2 "$T/out")"

[ $fails -eq 0 ] && echo "cli_llama: all passed" || echo "cli_llama: $fails failed"
exit $((fails > 0))
