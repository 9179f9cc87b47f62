#!/usr/bin/env bash
# End-to-end tests of the planner's promises: a plan larger than the memory available is refused
# (exit 2) before anything is mapped; eval plans the loss 256 positions at a time; a 4096-block
# estimate runs (its time is printed, never asserted). Usage: tests/cli_planner.sh build/memwall
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_planner_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error

echo "-- a plan beyond the memory available: refused before mapping"
# 1.2 TiB (GPT-2 XL, B=256, T=1024): more than any test machine holds; without the check the
# mapping failed (exit 1) or, below RAM + swap, the process was killed while touching pages
expect_error 2 "bench gpt2-xl at B=256 T=1024" -- "$MW" bench --preset gpt2-xl --batch 256 --seq 1024 --steps 1
grep -q "the plan needs 1.20 TiB but only .* is available (MemAvailable" "$T/err" &&
  pass "the refusal names the plan and MemAvailable" || fail "message: $(cat "$T/err")"
export MEMWALL_AVAILABLE_OVERRIDE=1MiB # the testing hook: what the machine is said to hold
expect_error 2 "bench gpt2-tiny with 1 MiB available" -- "$MW" bench --preset gpt2-tiny --batch 2 --seq 32 --steps 1 --threads 2
grep -q "but only 1.00 MiB is available (MEMWALL_AVAILABLE_OVERRIDE)" "$T/err" &&
  pass "the override is named" || fail "message: $(cat "$T/err")"
MEMWALL_AVAILABLE_OVERRIDE=bad expect_error 1 "a malformed override" -- "$MW" bench --preset gpt2-tiny --batch 2 --seq 32 --steps 1
MEMWALL_AVAILABLE_OVERRIDE=64GiB "$MW" bench --preset gpt2-tiny --batch 2 --seq 32 --steps 1 --warmup 0 --threads 2 --json \
  >"$T/out" 2>&1 && pass "with room, the same bench runs" || fail "bench with 64 GiB available: $(cat "$T/out")"
unset MEMWALL_AVAILABLE_OVERRIDE

echo "-- eval: the loss 256 positions at a time"
head -c 60000 /usr/share/common-licenses/GPL-3 >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/c" >"$T/out" 2>&1 || fail "prepare: $(cat "$T/out")"
"$MW" train --data "$T/c" --preset gpt2-tiny --layers 2 --vocab 4096 --steps 2 --batch 2 --seq 64 --threads 2 --out "$T/run" \
  >"$T/out" 2>&1 || fail "train: $(cat "$T/out")"
"$MW" eval --ckpt "$T/run" --data "$T/c" --batch 4 --seq 256 --threads 2 >"$T/out" 2>&1 &&
  grep -q "plan: .* recompute eval" "$T/out" && pass "eval prints its plan: $(grep plan: "$T/out")" ||
  fail "eval: $(cat "$T/out")"
"$MW" eval --ckpt "$T/run" --data "$T/c" --batch 4 --seq 256 --threads 2 --json >"$T/out" 2>&1 || fail "eval --json: $(cat "$T/out")"
acts=$(grep -o '"activations": [0-9]*' "$T/out" | sed 's/.*: //')
btv=$((4 * 256 * 4096 * 4)) # B*T*V floats: what eval's activations held before
[ -n "$acts" ] && [ "$acts" -lt "$btv" ] && pass "eval's activations $acts bytes < B*T*V floats ($btv)" ||
  fail "eval's activations '$acts' vs B*T*V floats $btv: $(cat "$T/out")"

echo "-- 4096 blocks: the estimate plans five policies (time printed, not asserted)"
start=$(date +%s.%N)
"$MW" estimate --layers 4096 --heads 1 --dim 16 --vocab 256 --ctx 64 --batch 1 --seq 8 >"$T/out" 2>&1 &&
  grep -q "every:sqrt" "$T/out" && pass "estimate at 4096 blocks: $(grep "planned in" "$T/out" | sed 's/^ *//'), whole command $(awk "BEGIN { printf \"%.2f\", $(date +%s.%N) - $start }") s" ||
  fail "estimate at 4096 blocks: $(tail -3 "$T/out")"

[ $fails -eq 0 ] && echo "cli_planner: all passed" || echo "cli_planner: $fails failure(s)"
exit $((fails > 0))
