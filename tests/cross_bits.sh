#!/usr/bin/env bash
# The same bits on another machine (issue 12): a short training run gives byte-identical token
# files and checkpoints on this machine and on another (aarch64, or an x86 CPU without AVX2, under
# qemu-user), and a run started here continues there to the same checkpoint. Also a smoke test of
# the other build's CLI.
# Usage: tests/cross_bits.sh NATIVE_MEMWALL "OTHER_MEMWALL_COMMAND" [NAME_OF_THE_OTHER]
#   e.g. tests/cross_bits.sh build/memwall "qemu-aarch64 -L /usr/aarch64-linux-gnu build/aarch64/memwall" aarch64
#        tests/cross_bits.sh build/memwall "qemu-x86_64 -cpu Nehalem build/v2/memwall" x86-64-v2
# Run by `make test-aarch64` and `make test-v2`. Exits non-zero on any failure.
set -u
WHERE=${3:-aarch64}
MW=$(realpath "${1:-build/memwall}")
read -r -a ARM <<<"${2:-qemu-aarch64 -L /usr/aarch64-linux-gnu build/aarch64/memwall}"
T=$(mktemp -d /tmp/mw_cross_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error
# same WHAT A B: files A and B are byte for byte the same
same() { cmp "$2" "$3" >"$T/cmp" 2>&1 && pass "$1" || fail "$1: $(cat "$T/cmp")"; }

echo "-- CLI smoke on $WHERE"
# (all but the line that says how long planning took)
"${ARM[@]}" estimate --preset gpt2 --batch 4 --seq 64 2>&1 | grep -v "planned in" >"$T/est.arm" &&
  "$MW" estimate --preset gpt2 --batch 4 --seq 64 2>&1 | grep -v "planned in" >"$T/est.x" &&
  grep -q "peak" "$T/est.x" && same "estimate --preset gpt2 prints the same plan" "$T/est.x" "$T/est.arm" ||
  fail "estimate: $(tail -2 "$T/est.arm")"
expect_error 1 "a bad flag is one line and exit 1" -- "${ARM[@]}" train --bogus
"${ARM[@]}" bench --help >"$T/out" 2>&1 && grep -q "^usage: memwall bench" "$T/out" &&
  pass "help runs" || fail "help: $(head -3 "$T/out")"

echo "-- the same token files"
cat /usr/share/common-licenses/GPL-3 >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null 2>&1 || fail "prepare (native)"
"${ARM[@]}" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/da" >/dev/null 2>&1 || fail "prepare ($WHERE)"
same "PREFIX.train.bin" "$T/d.train.bin" "$T/da.train.bin"
same "PREFIX.val.bin" "$T/d.val.bin" "$T/da.val.bin"

echo "-- the same checkpoints"
# gpt2-tiny, 4 steps with a validation every 2: forward, backward, AdamW, the schedule, the
# loader and evaluation; the x86 build runs its best GEMM kernel, the other build its own
tr=(train --data "$T/d" --threads 2 --batch 2 --seq 64 --steps 4 --save-every 2 --eval-every 2 --eval-batches 2)
"$MW" "${tr[@]}" --out "$T/x" >"$T/out.x" 2>&1 || fail "train (native): $(tail -2 "$T/out.x")"
"${ARM[@]}" "${tr[@]}" --out "$T/a" >"$T/out.a" 2>&1 || fail "train ($WHERE): $(tail -2 "$T/out.a")"
for s in 2 4; do same "step $s: native and $WHERE checkpoints" "$T/x/step-0000000$s.mwck" "$T/a/step-0000000$s.mwck"; done
diff <(grep -o 'loss [0-9.]*' "$T/out.x") <(grep -o 'loss [0-9.]*' "$T/out.a") >/dev/null &&
  pass "the same printed losses" || fail "losses: $(grep -o 'loss [0-9.]*' "$T/out.x" "$T/out.a" | tr '\n' ' ')"

echo "-- the same bf16 checkpoints (bfloat16 products: vdpbf16ps or fp32 fmas on rounded pairs, denormals flushed)"
# the FMA family's: natively its best kernel (auto would run amx, the AMX family, where it pays)
fk=$("$MW" --version | sed -n 's/^kernel \([a-z0-9]*\) .*/\1/p')
"$MW" "${tr[@]}" --precision bf16 --kernel "$fk" --out "$T/xb" >"$T/out.xb" 2>&1 || fail "train bf16 (native): $(tail -2 "$T/out.xb")"
"${ARM[@]}" "${tr[@]}" --precision bf16 --out "$T/ab" >"$T/out.ab" 2>&1 || fail "train bf16 ($WHERE): $(tail -2 "$T/out.ab")"
same "bf16 step 4: native and $WHERE checkpoints" "$T/xb/step-00000004.mwck" "$T/ab/step-00000004.mwck"

echo "-- a run started here continues on $WHERE"
mkdir -p "$T/m" && cp "$T/x/step-00000002.mwck" "$T/m/"
"${ARM[@]}" train --data "$T/d" --resume auto --out "$T/m" >"$T/out.m" 2>&1 &&
  grep -q "resumed from .*step-00000002.mwck at step 2 of 4" "$T/out.m" ||
  fail "resume ($WHERE): $(tail -2 "$T/out.m")"
same "step 4 resumed on $WHERE from native step 2 = step 4 native" "$T/x/step-00000004.mwck" "$T/m/step-00000004.mwck"

[ $fails -eq 0 ] || { echo "cross_bits ($WHERE): $fails failure(s)"; exit 1; }
echo "cross_bits ($WHERE): ok"
