#!/usr/bin/env bash
# End-to-end tests of --precision bf16 (issue 15): bfloat16 products with fp32 accumulation, the
# values only products read kept as bfloat16. It trains (the validation loss falls, near fp32's);
# every recomputation policy, --offload placement and thread count gives the same checkpoint bytes;
# the blocks' gradients kept as bfloat16 give the same bits in memory and through the disk tier, with
# accumulation and every optimizer; the arena is the plan and the estimate, with fewer activation
# and gradient bytes than fp32; checkpoints record
# the precision, resume continues bit for bit, and a resume under another precision is refused
# unless --override precision; eval, sample and export read a bf16 checkpoint; the Llama family too.
# (Every kernel's bytes: tests/cli_kernel.sh.) Usage: tests/cli_precision.sh build/memwall.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_prec_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"
has() { grep -qF -- "$2" "$1" && pass "$3" || fail "$3: '$2' not in $(head -c 600 "$1")"; }

cat /usr/share/common-licenses/{GPL-2,GPL-3} >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
mkdir -p "$T/off"
# N = B*T = 320 rows: more than one 256-row chunk of d(gelu)
tr=(train --data "$T/d" --batch 5 --seq 64 --lr 1e-3 --warmup 2 --steps 6 --eval-batches 2 --eval-every 6)

# run NAME ARGS..., same A B WHAT (the step-6 checkpoints and losses): lib_cli.sh

echo "== the flag"
expect_error 1 "--precision fp16 is refused" -- "$MW" "${tr[@]}" --precision fp16 --out "$T/no"
has "$T/err" "choose fp32 or bf16" "the refusal names the choices"
"$MW" help train | grep -q -- "--precision NAME .*bf16.*(default fp32)$" && pass "help train lists --precision, default fp32" ||
  fail "help train: $("$MW" help train | grep -- --precision)"

echo "== bf16 trains, near fp32"
run f32
run b16 --precision bf16
head -1 "$T/b16.out" | grep -q "| precision bf16 |" && pass "train's header names bf16: $(head -1 "$T/b16.out" | cut -c1-120)" ||
  fail "header: $(head -1 "$T/b16.out")"
v0=$(json_field "$T/b16.jsonl" loss | head -1)
vf=$(json_field "$T/f32.jsonl" val_loss | tail -1)
vb=$(json_field "$T/b16.jsonl" val_loss | tail -1)
awk -v a="$v0" -v b="$vb" 'BEGIN { exit !(b < a) }' && pass "bf16: validation loss $vb below the first step's $v0" ||
  fail "bf16: validation loss $vb not below $v0"
awk -v f="$vf" -v b="$vb" 'BEGIN { d = (b - f) / f; if (d < 0) d = -d; exit !(d < 0.01) }' &&
  pass "bf16's validation loss $vb within 1% of fp32's $vf" || fail "bf16 $vb against fp32 $vf"
cmp -s "$T/f32/step-00000006.mwck" "$T/b16/step-00000006.mwck" && fail "bf16 gave fp32's checkpoint" ||
  pass "bf16 changes the numbers"
grep -aq "^precision=bf16$" "$T/b16/step-00000006.mwck" && pass "the bf16 checkpoint records precision=bf16" ||
  fail "no precision=bf16 in the checkpoint"
grep -aq "^precision=" "$T/f32/step-00000006.mwck" && fail "an fp32 checkpoint names a precision (fp32's format changed)" ||
  pass "an fp32 checkpoint is as before (no precision key)"

echo "== determinism within bf16"
run b16.t1 --precision bf16 --threads 1
same b16 b16.t1 "bf16: 1 thread against 2"
# weights (checkpoints record the policy, so compare the exported weights) and losses identical
same_w() { # same_w A B WHAT
  "$MW" export --ckpt "$T/$1/step-00000006.mwck" --out "$T/$1.st" >/dev/null 2>&1 || fail "export $1"
  "$MW" export --ckpt "$T/$2/step-00000006.mwck" --out "$T/$2.st" >/dev/null 2>&1 || fail "export $2"
  if cmp -s "$T/$1.st" "$T/$2.st" && [ "$(json_field "$T/$1.jsonl" loss)" = "$(json_field "$T/$2.jsonl" loss)" ]; then
    pass "$3: weights and losses identical"
  else
    fail "$3: $(cmp "$T/$1.st" "$T/$2.st" 2>&1)"
  fi
}
for r in selective full every:2; do
  run "b16.$r" --precision bf16 --recompute "$r"
  same_w b16 "b16.$r" "bf16: --recompute $r"
done
for mode in optimizer optimizer+grads all; do
  run "b16.$mode" --precision bf16 --offload "$mode" --offload-dir "$T/off"
  same b16 "b16.$mode" "bf16: --offload $mode"
done
# the blocks' gradients are kept as bfloat16: in memory (none, optimizer), or as the disk tier's 2
# bytes (optimizer+grads, all; issue 35, where forward and backward also read the parameters'
# bfloat16 copy under all, and the norm is summed at the blocks' backward): the same values, so the
# same bits as the in-memory run's
echo "== bf16 gradients: every placement, optimizer and accumulation the same bits"
run b16.acc --precision bf16 --accum 2
for mode in optimizer optimizer+grads all; do
  run "b16.acc.$mode" --precision bf16 --accum 2 --offload "$mode" --offload-dir "$T/off"
  same b16.acc "b16.acc.$mode" "bf16 --accum 2: --offload $mode"
done
for opt in adamw8bit adam4bit adafactor came; do
  run "b16.$opt" --precision bf16 --optim $opt
  modes="optimizer+grads all"
  [ $opt = adafactor ] || modes="optimizer $modes"
  for mode in $modes; do
    run "b16.$opt.$mode" --precision bf16 --optim $opt --offload "$mode" --offload-dir "$T/off"
    same "b16.$opt" "b16.$opt.$mode" "bf16 --optim $opt: --offload $mode"
  done
done

echo "== the AMX family (--kernel amx, issue 36): its own bits, the same under threads, policies, placements"
# (where the CPU has AMX-BF16, a memwall without amx fails here; where Linux refuses the tiles it
# says so, and the family is not tested)
if ! grep -qw amx_bf16 /proc/cpuinfo; then
  echo "  skip: this CPU has no AMX-BF16: the AMX family is not tested here"
elif "$MW" "${tr[@]}" --precision bf16 --kernel amx --steps 1 2>&1 | grep -q "refused AMX tile data"; then
  echo "  skip: the operating system refused the AMX tile data: the AMX family is not tested here"
else
  run amx --precision bf16 --kernel amx
  fk=$("$MW" --version | sed -n 's/^kernel \([a-z0-9]*\) .*/\1/p')
  run b16.fma --precision bf16 --kernel "$fk"
  cmp -s "$T/amx/step-00000006.mwck" "$T/b16.fma/step-00000006.mwck" && fail "amx gave the FMA family's ($fk) bytes" ||
    pass "amx's bytes are not the FMA family's ($fk)"
  run amx.t1 --precision bf16 --kernel amx --threads 1
  same amx amx.t1 "amx: 1 thread against 2"
  for r in full every:2; do
    run "amx.$r" --precision bf16 --kernel amx --recompute "$r"
    same_w amx "amx.$r" "amx: --recompute $r"
  done
  run amx.all --precision bf16 --kernel amx --offload all --offload-dir "$T/off"
  same amx amx.all "amx: --offload all"
  run amx.acc --precision bf16 --kernel amx --accum 2
  run amx.acc.og --precision bf16 --kernel amx --accum 2 --offload optimizer+grads --offload-dir "$T/off"
  same amx.acc amx.acc.og "amx --accum 2: --offload optimizer+grads"
  grep -qE "arena peak ([0-9.]+ [KMG]iB) \(plan \1\)" "$T/amx.out" && pass "amx: arena peak == plan peak" ||
    fail "amx: $(grep -o 'arena peak.*' "$T/amx.out")"
  va=$(json_field "$T/amx.jsonl" val_loss | tail -1)
  awk -v f="$vf" -v b="$va" 'BEGIN { d = (b - f) / f; if (d < 0) d = -d; exit !(d < 0.01) }' &&
    pass "amx's validation loss $va within 1% of fp32's $vf" || fail "amx $va against fp32 $vf"
fi

echo "== the plan: the arena, the estimate, the activations"
for p in fp32 bf16; do
  "$MW" estimate --data "$T/d" --batch 5 --seq 64 --precision $p --json >"$T/est_$p.json" 2>&1 || fail "estimate $p"
done
acts() { grep -o '"categories": {[^}]*}' "$1" | tail -1 | grep -o '"activations": [0-9]*' | sed 's/.*: //'; }
peak() { grep -o '"peak_bytes": [0-9]*' "$1" | head -1 | sed 's/.*: //'; }
af=$(acts "$T/est_fp32.json")
ab=$(acts "$T/est_bf16.json")
[ -n "$ab" ] && [ "$ab" -lt "$af" ] && pass "bf16 plans fewer activation bytes: $ab against fp32's $af" || fail "activations: bf16 $ab, fp32 $af"
grads() { grep -o '"categories": {[^}]*}' "$1" | tail -1 | grep -o '"gradients": [0-9]*' | sed 's/.*: //'; }
gf=$(grads "$T/est_fp32.json")
gb=$(grads "$T/est_bf16.json")
[ -n "$gb" ] && [ "$gb" -lt "$gf" ] && pass "bf16 plans fewer gradient bytes (the blocks' as bfloat16): $gb against fp32's $gf" ||
  fail "gradients: bf16 $gb, fp32 $gf"
grep -qE "arena peak ([0-9.]+ [KMG]iB) \(plan \1\)" "$T/b16.out" && pass "bf16: arena peak == plan peak" ||
  fail "bf16: $(grep -o 'arena peak.*' "$T/b16.out")"
want=$(peak "$T/est_bf16.json")
got=$(grep '"event": "end"' "$T/b16.jsonl" | grep -o '"plan_peak_bytes": [0-9]*' | sed 's/.*: //')
[ -n "$got" ] && [ "$got" = "$want" ] && pass "bf16: the run's plan peak $got (= its arena's) == estimate's $want" ||
  fail "run's plan $got, estimate $want"
"$MW" estimate --data "$T/d" --batch 5 --seq 64 --precision bf16 >"$T/est.txt" 2>&1
has "$T/est.txt" "| precision bf16 |" "estimate's header names the precision"
grep -q '"precision": "bf16"' "$T/est_bf16.json" && pass "estimate --json: \"precision\": \"bf16\"" || fail "no precision in estimate's JSON"

echo "== checkpoints and resume"
"$MW" "${tr[@]}" --precision bf16 --out "$T/r" --stop-at 3 >/dev/null 2>&1 || fail "stop-at"
"$MW" "${tr[@]}" --out "$T/r" --resume auto --json-log "$T/r.jsonl" >"$T/r.out" 2>&1 || fail "resume: $(tail -1 "$T/r.out")"
cmp -s "$T/b16/step-00000006.mwck" "$T/r/step-00000006.mwck" &&
  pass "stop at 3 and resume (no --precision given: the checkpoint's bf16): the unbroken run's bytes" || fail "resume differs"
# across placements (issue 35): a load under all writes the fp32 master and its bfloat16 copy that
# forward reads; one saved under all holds the master's bits
for ab in none:all all:optimizer+grads; do
  a=${ab%:*} b=${ab#*:}
  rm -rf "$T/rx"
  "$MW" "${tr[@]}" --precision bf16 --out "$T/rx" --stop-at 3 --offload "$a" $([ $a = none ] || echo --offload-dir "$T/off") >/dev/null 2>&1 || fail "stop-at under $a"
  "$MW" "${tr[@]}" --out "$T/rx" --resume auto --offload "$b" --offload-dir "$T/off" >"$T/rx.out" 2>&1 || fail "resume under $b: $(tail -1 "$T/rx.out")"
  cmp -s "$T/b16/step-00000006.mwck" "$T/rx/step-00000006.mwck" &&
    pass "stop at 3 under --offload $a, resume under $b: the unbroken in-memory run's bytes" || fail "resume $a -> $b differs"
done
expect_error 1 "resume of a bf16 checkpoint with --precision fp32" -- "$MW" "${tr[@]}" --out "$T/b16" --resume auto --precision fp32 --steps 8
has "$T/err" "--precision bf16" "the refusal names the checkpoint's precision"
has "$T/err" "add --override steps,precision" "and how to override it"
"$MW" "${tr[@]}" --out "$T/b16" --resume auto --precision fp32 --steps 8 --override steps,precision >"$T/ov.out" 2>&1 &&
  has "$T/ov.out" "precision bf16 -> fp32" "--override precision continues in fp32, saying so" || fail "override: $(tail -2 "$T/ov.out")"

echo "== eval, sample and export read a bf16 checkpoint (step 6: the override above saved an fp32 step 8)"
"$MW" eval --ckpt "$T/b16/step-00000006.mwck" --data "$T/d" --eval-batches 2 --json >"$T/ev.out" 2>&1 && has "$T/ev.out" "perplexity" "eval reads it" ||
  fail "eval: $(tail -1 "$T/ev.out")"
el=$(grep -o '"loss": [0-9.e+-]*' "$T/ev.out" | tail -1 | sed 's/.*: //')
[ -n "$el" ] && [ "$el" = "$vb" ] && pass "eval's loss $el is training's last validation loss (bf16 products there too)" ||
  fail "eval's loss '$el' is not training's last validation loss $vb (fp32 products?)"
"$MW" eval --ckpt "$T/b16/step-00000006.mwck" --data "$T/d" >"$T/ev2.out" 2>&1 || fail "eval: $(tail -1 "$T/ev2.out")"
has "$T/ev2.out" "eval: bf16 products (the checkpoint's; --precision fp32 for full precision)" "eval says it runs the checkpoint's bf16 products"
has "$T/ev2.out" "| precision bf16 (the checkpoint's) |" "and its result says so"
"$MW" eval --ckpt "$T/b16/step-00000006.mwck" --data "$T/d" --json >"$T/ev3.out" 2>&1 &&
  "$MW" eval --ckpt "$T/b16/step-00000006.mwck" --data "$T/d" --precision fp32 --json >"$T/ev4.out" 2>&1 || fail "eval --precision fp32: $(tail -1 "$T/ev4.out")"
eb=$(json_field "$T/ev3.out" loss) ef=$(json_field "$T/ev4.out" loss)
grep -q '"precision": "bf16"' "$T/ev3.out" && grep -q '"precision": "fp32"' "$T/ev4.out" && [ "$eb" != "$ef" ] &&
  awk -v a="$eb" -v b="$ef" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; exit !(d < 0.01) }' &&
  pass "eval --precision fp32 evaluates the bf16 checkpoint in fp32: loss $ef, bf16's $eb" ||
  fail "eval --precision fp32: $ef (bf16 $eb): $(cat "$T/ev4.out")"
"$MW" sample --ckpt "$T/b16/step-00000006.mwck" --tokens 8 >"$T/sa.out" 2>&1 && pass "sample reads it" || fail "sample: $(tail -1 "$T/sa.out")"
"$MW" export --ckpt "$T/b16/step-00000006.mwck" --out "$T/b16.safetensors" >"$T/ex.out" 2>&1 && [ -s "$T/b16.safetensors" ] &&
  pass "export reads it" || fail "export: $(tail -1 "$T/ex.out")"

echo "== the Llama family"
ll=(--arch llama --layers 2 --heads 4 --kv-heads 2 --dim 64 --ffn 96 --vocab 256 --ctx 64 --precision bf16)
run ll "${ll[@]}"
for r in selective full; do
  run "ll.$r" "${ll[@]}" --recompute "$r"
  same_w ll "ll.$r" "llama bf16: --recompute $r"
done
run ll.t1 "${ll[@]}" --threads 1
same ll ll.t1 "llama bf16: 1 thread against 2"
run ll.all "${ll[@]}" --offload all --offload-dir "$T/off"
same ll ll.all "llama bf16: --offload all"
# tied, 8-bit states, --accum 3 (the second visit plan), full recomputation, clipped by the norm
# summed at the blocks' backward (issue 35): the in-memory run's weights and losses
llt=("${ll[@]}" --layers 3 --tied 1 --optim adamw8bit --accum 3 --grad-clip 0.5)
run llt "${llt[@]}"
run llt.all "${llt[@]}" --offload all --offload-dir "$T/off" --recompute full
same_w llt llt.all "llama bf16 tied, adamw8bit, --accum 3: --offload all --recompute full"
grep -qE "arena peak ([0-9.]+ [KMG]iB) \(plan \1\)" "$T/ll.out" && pass "llama bf16: arena peak == plan peak" ||
  fail "llama: $(grep -o 'arena peak.*' "$T/ll.out")"

echo "cli_precision: $fails failure(s)"
[ "$fails" -eq 0 ]
