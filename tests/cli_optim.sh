#!/usr/bin/env bash
# End-to-end tests of the optimizers (--optim, issue 15): each one trains (the validation loss
# falls), gives the same checkpoint bytes on 1 and 2 threads, under recomputation, and under every
# --offload placement; stop-and-resume continues bit for bit (version-2 checkpoints hold the state
# as it is stored); a resume under another --optim is refused unless --reset-optimizer; a
# corrupted state block is refused; the plan counts each optimizer's bytes. Usage:
# tests/cli_optim.sh build/memwall. Exits non-zero on any failure.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_optim_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"
has() { grep -qF -- "$2" "$1" && pass "$3" || fail "$3: '$2' not in $(head -c 600 "$1")"; }

cat /usr/share/common-licenses/{GPL-2,GPL-3} >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/nv" --val-fraction 0 >/dev/null || { echo "prepare failed"; exit 1; }
mkdir -p "$T/off"
tr=(train --data "$T/d" --batch 2 --seq 32 --lr 1e-3 --warmup 2 --steps 6 --eval-batches 2)

# run NAME ARGS..., same A B WHAT (the step-6 checkpoints and losses): lib_cli.sh

for o in adamw8bit adam4bit adafactor came sgd; do
  echo "== --optim $o"
  run "$o" --optim "$o" --recompute full
  [ -f "$T/$o/step-00000006.mwck" ] || continue
  has "$T/$o.out" "| loss" "$o trains"
  v0=$(json_field "$T/$o.jsonl" loss | head -1)
  v1=$(json_field "$T/$o.jsonl" val_loss | tail -1)
  awk -v a="$v0" -v b="$v1" 'BEGIN { exit !(b < a) }' && pass "$o: validation loss $v1 below the first step's $v0" ||
    fail "$o: validation loss $v1 not below $v0"
  run "$o.t1" --optim "$o" --recompute full --threads 1
  same "$o" "$o.t1" "$o: 1 thread against 2"
  run "$o.rn" --optim "$o" --recompute none --budget 0
  cmp -s <(json_field "$T/$o.jsonl" loss) <(json_field "$T/$o.rn.jsonl" loss) && pass "$o: --recompute none, the same losses" ||
    fail "$o: --recompute none changes the losses"
  for mode in optimizer optimizer+grads all; do
    if [ "$o" = adafactor ] && [ "$mode" = optimizer ]; then
      expect_error 1 "adafactor without momentum has nothing for --offload optimizer" -- \
        "$MW" "${tr[@]}" --optim adafactor --offload optimizer --offload-dir "$T/off"
      continue
    fi
    run "$o.$mode" --optim "$o" --recompute full --offload "$mode" --offload-dir "$T/off"
    same "$o" "$o.$mode" "$o: --offload $mode"
  done
  # stop at 3, resume to 6: the unbroken run's bytes
  "$MW" "${tr[@]}" --optim "$o" --recompute full --out "$T/$o.r" --stop-at 3 >/dev/null 2>&1 || fail "$o: stop-at"
  "$MW" "${tr[@]}" --out "$T/$o.r" --resume auto --json-log "$T/$o.r.jsonl" >"$T/$o.r.out" 2>&1 || fail "$o: resume: $(tail -1 "$T/$o.r.out")"
  cmp -s "$T/$o/step-00000006.mwck" "$T/$o.r/step-00000006.mwck" && pass "$o: stop at 3 and resume: the same checkpoint" ||
    fail "$o: resume differs"
done

echo "== the disk tier moves the planned bytes, and the arena is the plan"
for o in adamw8bit adam4bit came; do
  for mode in optimizer all; do
    "$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --optim "$o" --recompute full --offload "$mode" --json >"$T/pl.json"
    r=$(grep -o '"read_bytes_per_step": [0-9]*' "$T/pl.json" | sed 's/.*: //')
    w=$(grep -o '"write_bytes_per_step": [0-9]*' "$T/pl.json" | sed 's/.*: //')
    init=0
    [ "$mode" = all ] && init=$(grep -o '"disk": {"categories": {"parameters": [0-9]*' "$T/pl.json" | sed 's/.*: //')
    # (no validation file: evaluation would read the blocks' parameters again)
    "$MW" "${tr[@]}" --data "$T/nv" --steps 3 --optim "$o" --recompute full --offload "$mode" --offload-dir "$T/off" \
      --json-log "$T/pl.jsonl" >"$T/pl.out" 2>&1 || fail "$o $mode: $(tail -1 "$T/pl.out")"
    got=$(grep '"event": "end"' "$T/pl.jsonl" | grep -o '"bytes_read": [0-9]*, "bytes_written": [0-9]*')
    want="\"bytes_read\": $((3 * r + init)), \"bytes_written\": $((3 * w + init))"
    [ "$got" = "$want" ] && pass "$o --offload $mode: 3 steps moved 3x the planned bytes" || fail "$o $mode: moved $got, planned $want"
    grep -qE "arena peak ([0-9.]+ [KMG]iB) \(plan \1\)" "$T/pl.out" && pass "$o --offload $mode: arena peak == plan peak" ||
      fail "$o $mode: arena peak differs from the plan: $(grep -o 'arena peak.*' "$T/pl.out")"
  done
done

echo "== adamw8bit blocks cut by the disk tier's chunks (fused tensors of odd sizes)"
ll=(--arch llama --layers 2 --heads 4 --kv-heads 2 --dim 128 --ffn 100 --vocab 256 --ctx 64 --optim adamw8bit --recompute full)
run ll "${ll[@]}"
run ll.o "${ll[@]}" --offload optimizer --offload-dir "$T/off"
same ll ll.o "llama with a 100-wide SwiGLU (gate|up fused across a block), --offload optimizer"
run ll.a "${ll[@]}" --offload all --offload-dir "$T/off"
same ll ll.a "... --offload all"

echo "== resume under the disk tier"
"$MW" "${tr[@]}" --optim adam4bit --recompute full --out "$T/r4" --stop-at 3 --offload all --offload-dir "$T/off" >/dev/null 2>&1 ||
  fail "adam4bit all: stop-at"
"$MW" "${tr[@]}" --out "$T/r4" --resume auto --offload all --offload-dir "$T/off" >"$T/r4.out" 2>&1 || fail "adam4bit all: resume"
cmp -s "$T/adam4bit/step-00000006.mwck" "$T/r4/step-00000006.mwck" && pass "adam4bit: stopped and resumed under --offload all, the in-memory run's bytes" ||
  fail "adam4bit: resume under --offload all differs"

echo "== version-2 checkpoints for eval, sample and export"
"$MW" eval --ckpt "$T/adamw8bit" --data "$T/d" --eval-batches 2 >"$T/ev.out" 2>&1 && has "$T/ev.out" "perplexity" "eval reads an adamw8bit checkpoint" ||
  fail "eval of an adamw8bit checkpoint: $(tail -1 "$T/ev.out")"
"$MW" sample --ckpt "$T/came" --tokens 8 >"$T/sa.out" 2>&1 && pass "sample reads a came checkpoint" || fail "sample: $(tail -1 "$T/sa.out")"
"$MW" export --ckpt "$T/adam4bit" --out "$T/ex4.safetensors" >"$T/ex.out" 2>&1 && [ -s "$T/ex4.safetensors" ] &&
  pass "export reads an adam4bit checkpoint" || fail "export: $(tail -1 "$T/ex.out")"

echo "== another optimizer on resume"
expect_error 1 "resume under another --optim" -- "$MW" "${tr[@]}" --out "$T/came" --resume auto --optim sgd --steps 8
grep -q -- "--reset-optimizer" "$T/err" && pass "the refusal names --reset-optimizer" || fail "the refusal does not name --reset-optimizer"
"$MW" "${tr[@]}" --out "$T/came" --resume auto --optim sgd --steps 8 --override steps --reset-optimizer >"$T/reset.out" 2>&1 &&
  has "$T/reset.out" "--reset-optimizer: the parameters and step 6" "--reset-optimizer continues under sgd from step 6" ||
  fail "--reset-optimizer: $(tail -1 "$T/reset.out")"
has "$T/reset.out" "SGD lr" "the resumed run is SGD's"
expect_error 1 "--reset-optimizer without --resume" -- "$MW" "${tr[@]}" --reset-optimizer

echo "== CAME's and Adafactor's defaults: their references' tuning advice (bench/README.md)"
for o in came adafactor; do
  "$MW" train --data "$T/d" --batch 2 --seq 32 --steps 1 --eval-batches 1 --optim "$o" >"$T/def_$o.out" 2>&1 || fail "$o, 1 step"
done
# CAME: its authors' 0.5-0.9x AdamW's rate, beta2 as AdamW's, beta3 0.995 (the paper's 0.999/0.9999
# and AdamW's rate ended 22% above AdamW on bench/optim_convergence.sh)
has "$T/def_came.out" "CAME lr 0.00015 (" "came: half AdamW's default rate"
has "$T/def_came.out" "betas 0.9/0.95/0.995 " "came: betas 0.9/0.95/0.995"
has "$T/def_adafactor.out" "Adafactor lr 0.00015 (" "adafactor: half AdamW's default rate"
has "$T/def_adafactor.out" "beta1 0 decay-rate -0.8 eps 1e-30 clip-threshold 1 " "adafactor: no momentum, the paper's decay and clipping"

echo "== SGD's own learning rate (AdamW's 3e-4 barely moved it)"
# tr without its --lr: each optimizer's default
nolr=(train --data "$T/d" --batch 2 --seq 32 --warmup 2 --steps 40 --eval-batches 2)
"$MW" "${nolr[@]}" --optim sgd --json-log "$T/sgd40.jsonl" >"$T/sgd40.out" 2>&1 || fail "sgd, 40 steps: $(tail -1 "$T/sgd40.out")"
"$MW" "${nolr[@]}" --json-log "$T/adamw40.jsonl" >"$T/adamw40.out" 2>&1 || fail "adamw, 40 steps: $(tail -1 "$T/adamw40.out")"
has "$T/sgd40.out" "SGD lr 0.1 (" "--optim sgd without --lr: lr 0.1"
has "$T/adamw40.out" "AdamW lr 0.0003 (" "adamw without --lr: lr 3e-4"
s40=$(json_field "$T/sgd40.jsonl" val_loss | tail -1) a40=$(json_field "$T/adamw40.jsonl" val_loss | tail -1)
awk -v s="$s40" -v a="$a40" 'BEGIN { exit !(s != "" && s < a) }' &&
  pass "sgd's default trains: validation loss $s40 after 40 steps, adamw's default $a40" ||
  fail "sgd's default lr: validation loss $s40 after 40 steps, not below adamw's default $a40"
"$MW" "${nolr[@]}" --steps 6 --out "$T/a6" >/dev/null 2>&1 || fail "adamw, 6 steps"
expect_error 1 "--reset-optimizer from adamw to sgd without --lr (the defaults differ)" -- \
  "$MW" "${nolr[@]}" --out "$T/a6" --resume auto --optim sgd --steps 8 --override steps --reset-optimizer
grep -q -- "give --lr" "$T/err" && pass "the refusal asks for --lr" || fail "the refusal does not ask for --lr: $(cat "$T/err")"
"$MW" "${nolr[@]}" --out "$T/a6" --resume auto --optim adamw8bit --steps 8 --override steps --reset-optimizer \
  >"$T/a6r.out" 2>&1 && has "$T/a6r.out" "8-bit AdamW lr 0.0003 (" "adamw to adamw8bit without --lr: the checkpoint's lr continues" ||
  fail "adamw to adamw8bit: $(tail -1 "$T/a6r.out")"
expect_error 1 "an unknown --optim" -- "$MW" "${tr[@]}" --optim lion

echo "== a corrupted optimizer state"
cp -r "$T/adamw8bit" "$T/bad"
f="$T/bad/step-00000006.mwck"
sz=$(stat -c %s "$f")
printf '\x5a' | dd of="$f" bs=1 seek=$((sz - 200)) conv=notrunc 2>/dev/null
rm -f "$T/bad"/step-0000000[1-5].mwck
expect_error 1 "a flipped byte in the small state" -- "$MW" "${tr[@]}" --out "$T/bad" --resume auto --steps 8

echo "== the plan's bytes"
for o in adamw adamw8bit adam4bit adafactor came sgd; do
  "$MW" estimate --preset gpt2 --batch 1 --seq 64 --optim "$o" --json >"$T/est_$o.json" 2>&1 || fail "estimate $o"
done
# the plan's optimizer category (the second "categories": the first is the disk tier's)
opt() { grep -o '"categories": {[^}]*}' "$1" | sed -n 2p | grep -o '"optimizer": [0-9]*' | sed 's/.*: //'; }
np=$(grep -o '"params": [0-9]*' "$T/est_adamw.json" | head -1 | sed 's/.*: //')
a=$(opt "$T/est_adamw.json"); q8=$(opt "$T/est_adamw8bit.json"); q4=$(opt "$T/est_adam4bit.json")
af=$(opt "$T/est_adafactor.json"); cm=$(opt "$T/est_came.json")
awk -v a="$a" -v n="$np" 'BEGIN { exit !(a >= 8 * n && a < 8.01 * n) }' && pass "adamw: $a optimizer bytes, 8 per parameter" || fail "adamw: $a bytes for $np parameters"
awk -v a="$q8" -v n="$np" 'BEGIN { exit !(a >= 2 * n && a < 2.01 * n) }' && pass "adamw8bit: $q8 bytes, 2 per parameter and its scales" || fail "adamw8bit: $q8"
awk -v a="$q4" -v n="$np" 'BEGIN { exit !(a >= 1 * n && a < 1.1 * n) }' && pass "adam4bit: $q4 bytes, 1 per parameter and its scales" || fail "adam4bit: $q4"
awk -v a="$af" -v n="$np" 'BEGIN { exit !(a < 0.05 * n) }' && pass "adafactor: $af bytes, factored" || fail "adafactor: $af"
awk -v a="$cm" -v n="$np" 'BEGIN { exit !(a >= 4 * n && a < 4.05 * n) }' && pass "came: $cm bytes" || fail "came: $cm"

echo "cli_optim: $fails failure(s)"
[ "$fails" -eq 0 ]
