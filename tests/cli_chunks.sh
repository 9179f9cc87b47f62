#!/usr/bin/env bash
# End-to-end tests of the chunk placement of model states (issue 35, item 1): --offload's explicit
# forms (MODE:resident=K, params=R,grads=R,optim=R) put each block's parameters, gradients and
# optimizer state on disk or in memory one by one; every placement gives the in-memory run's bits
# (losses and checkpoint bytes: 1 and 2 threads, --accum, recomputation that revisits blocks, GPT-2
# and Llama, bf16 with 8-bit AdamW), its arena is its plan, the bytes it moves are the plan's,
# a run resumes under another placement exactly, an injected fault keeps the disk tier's
# guarantees, --offload auto fills the budget with chunks, and a malformed or impossible form is
# refused in one line. Usage: tests/cli_chunks.sh build/memwall. Exits non-zero on any failure.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_chunks_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"
scratch_count() { ls "$1" 2>/dev/null | grep -c '^memwall-offload-.*\.scratch$'; }

cat /usr/share/common-licenses/{GPL-2,GPL-3} >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
tr=(train --data "$T/d" --batch 2 --seq 32 --lr 1e-3 --warmup 2)

# run NAME ARGS..., same A B WHAT: lib_cli.sh
# planned N: the run's arena peak equals its plan
planned() {
  grep -qE "arena peak ([0-9.]+ [KMG]iB) \(plan \1\)" "$T/$1.out" && pass "$2: arena peak == plan" ||
    fail "$2: arena vs plan: $(grep 'arena peak' "$T/$1.out")"
}

echo "-- every placement gives the in-memory run's bits, its arena is its plan"
run mem1 --steps 3 --threads 1 --accum 3 --recompute full
P=("all:resident=1" "optimizer+grads:resident=2" "optimizer:resident=3" "params=1-2,grads=0,optim=2-3"
  "params=all,grads=none,optim=none" "grads=1-3" "optim=0" "params=3,grads=3,optim=3")
i=0
for p in "${P[@]}"; do
  i=$((i + 1))
  # (the sanitizer build, quick in lib_cli.sh: a mode with resident blocks, three categories over
  # three ranges, one category alone; the other forms are the same code with other ranges)
  quick && case $i in 2 | 3 | 5 | 7 | 8) continue ;; esac
  run "c$i" --steps 3 --threads 2 --accum 3 --recompute full --offload "$p" --offload-dir "$T/scr"
  same mem1 "c$i" "--offload $p (2 threads, --accum 3, --recompute full)"
  planned "c$i" "--offload $p"
done
grep -q "disk tier (--offload params=1-2,grads=0,optim=2-3)" "$T/c4.out" && pass "the plan names the placement" ||
  fail "the plan's disk tier line: $(grep 'disk tier (' "$T/c4.out")"
grep '"event": "end"' "$T/c4.jsonl" | grep -q '"offload": "all", .*"offload_pin": "params=1-2,grads=0,optim=2-3"' &&
  pass "the JSON log names the placement beside its widest mode" || fail "the JSON log's end: $(grep -o '"offload[a-z_]*": "[^"]*"' "$T/c4.jsonl")"
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --offload optimizer:resident=1 | grep -q "disk tier (--offload params=none,grads=none,optim=embed+0-2):" &&
  pass "estimate names the placement" || fail "estimate's disk tier line"
[ "$(scratch_count "$T/scr")" = 0 ] && pass "no scratch file stays" || fail "scratch left: $(ls "$T/scr")"
pk() { grep -o "arena peak [0-9.]* [KMG]iB" "$T/$1.out"; }
[ "$(pk c4)" != "$(pk c1)" ] && [ "$(pk c1)" != "$(pk mem1)" ] && pass "placements plan different arenas ($(pk mem1), $(pk c1), $(pk c4))" ||
  fail "arenas: $(pk mem1) $(pk c1) $(pk c4)"
run meme --steps 4 --threads 2 --recompute every:3 --layers 5
run ce --steps 4 --threads 2 --recompute every:3 --layers 5 --offload params=0-2,grads=2-4,optim=1-3 --offload-dir "$T/scr"
same meme ce "--recompute every:3 over 5 blocks (segments revisit blocks), three categories over three ranges"
ll=(--preset llama-tiny --vocab 256)
run lmem --steps 4 "${ll[@]}" --accum 2
run lc1 --steps 4 "${ll[@]}" --accum 2 --offload all:resident=1 --offload-dir "$T/scr"
same lmem lc1 "llama-tiny, --offload all:resident=1"
full run lc2 --steps 4 "${ll[@]}" --accum 2 --offload params=0,grads=1,optim=0-1 --offload-dir "$T/scr"
full same lmem lc2 "llama-tiny, --offload params=0,grads=1,optim=0-1"
b8=(--steps 4 --threads 2 --accum 2 --precision bf16 --optim adamw8bit)
run bmem "${b8[@]}"
full run bc1 "${b8[@]}" --offload all:resident=2 --offload-dir "$T/scr"
full same bmem bc1 "bf16 + adamw8bit, --offload all:resident=2 (resident blocks' gradients rounded in place)"
run bc2 "${b8[@]}" --offload params=0,grads=1-2,optim=3 --offload-dir "$T/scr"
same bmem bc2 "bf16 + adamw8bit, --offload params=0,grads=1-2,optim=3"
planned bc2 "bf16 + adamw8bit, a chunk placement"

echo "-- the bytes moved are the plan's"
cp "$T/d.train.bin" "$T/nv.train.bin"
for p in $(quick || echo "all:resident=1") "params=1-2,grads=0,optim=2-3" $(quick || echo "grads=0-1,optim=1"); do
  a=(--batch 2 --seq 32 --accum 2 --recompute every:2 --offload "$p")
  "$MW" estimate --preset gpt2-tiny "${a[@]}" --json >"$T/nv.json"
  r=$(grep -o '"read_bytes_per_step": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  w=$(grep -o '"write_bytes_per_step": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  init=$(grep -o '"disk": {"categories": {"parameters": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  "$MW" train --data "$T/nv" "${a[@]}" --steps 3 --threads 2 --offload-dir "$T/scr" --json-log "$T/nv.jsonl" >/dev/null 2>&1 ||
    fail "$p: the no-validation run failed"
  got=$(grep '"event": "end"' "$T/nv.jsonl" | grep -o '"bytes_read": [0-9]*, "bytes_written": [0-9]*')
  # the blocks' parameters on disk are written and read once by initialisation, before step 1
  want="\"bytes_read\": $((3 * r + init)), \"bytes_written\": $((3 * w + init))"
  [ -n "$r" ] && [ "$r" -gt 0 ] && [ "$got" = "$want" ] && pass "$p: 3 steps moved 3x the planned bytes ($got)" ||
    fail "$p: moved $got, planned 3 x ($r, $w) + $init"
done

echo "-- resume under another placement"
run full --steps 8 --threads 2
run part --steps 8 --threads 2 --stop-at 3 --offload all:resident=2 --offload-dir "$T/scr"
"$MW" "${tr[@]}" --out "$T/part" --json-log "$T/part.jsonl" --resume auto --threads 2 --stop-at 6 \
  --offload params=0,grads=1-3,optim=none --offload-dir "$T/scr" >"$T/part2.out" 2>&1 || fail "resume: $(tail -2 "$T/part2.out")"
"$MW" "${tr[@]}" --out "$T/part" --json-log "$T/part.jsonl" --resume auto --threads 2 >"$T/part3.out" 2>&1 ||
  fail "resume in memory: $(tail -2 "$T/part3.out")"
same full part "all:resident=2 to step 3, params=0,grads=1-3,optim=none to 6, in memory to 8"

echo "-- an I/O fault under a chunk placement: one error, exit 1, the last checkpoint resumes exactly"
run fref --steps 8 --threads 2 --save-every 2
for f in eio:read:150 enospc:write:100; do
  rm -rf "$T/f" "$T/f.jsonl"
  MEMWALL_IO_FAULT=$f "$MW" "${tr[@]}" --steps 8 --threads 2 --save-every 2 --out "$T/f" --json-log "$T/f.jsonl" \
    --offload all:resident=2 --offload-dir "$T/fscr" >"$T/out" 2>"$T/err"
  rc=$?
  [ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^memwall: disk tier: " "$T/err" &&
    pass "$f -> exit 1: $(cut -c1-120 "$T/err")" || fail "$f: exit $rc, stderr $(cat "$T/err")"
  [ "$(scratch_count "$T/fscr")" = 0 ] && pass "$f: the scratch file is removed" || fail "$f: scratch left"
  last=$(ls "$T/f"/step-*.mwck 2>/dev/null | tail -1)
  [ -n "$last" ] && "$MW" export --ckpt "$last" --out "$T/fx" >/dev/null 2>&1 && pass "$f: $(basename "$last") verifies" ||
    fail "$f: no valid checkpoint left ($last)"
  "$MW" "${tr[@]}" --steps 8 --threads 2 --save-every 2 --out "$T/f" --json-log "$T/f.jsonl" --resume auto \
    --offload optimizer+grads:resident=1 --offload-dir "$T/fscr" >"$T/out" 2>&1 || fail "$f: resume: $(tail -2 "$T/out")"
  cmp -s "$T/f/step-00000008.mwck" "$T/fref/step-00000008.mwck" &&
    pass "$f: resumed under another placement, it ends as the unbroken run" || fail "$f: the resumed run differs"
done

echo "-- --offload auto fills the budget with chunks"
g=(--preset gpt2-tiny --batch 2 --seq 32 --recompute full)
pall=$(grep -o '"peak_bytes": [0-9]*' <<<"$("$MW" estimate "${g[@]}" --offload all --json)" | head -1 | sed 's/.*: //')
pnone=$(grep -o '"peak_bytes": [0-9]*' <<<"$("$MW" estimate "${g[@]}" --json)" | head -1 | sed 's/.*: //')
prev=
ok=1
distinct=0
for q in 1 2 4 6 7; do
  b=$((pall + (pnone - pall) * q / 8))
  "$MW" estimate "${g[@]}" --budget $b --offload auto --json >"$T/a$q.json"
  pin=$(grep -o '"offload_pin": "[^"]*"' "$T/a$q.json" | sed 's/.*: "//; s/"//')
  [ -n "$pin" ] || pin=$(grep -o '"offload": "[^"]*"' "$T/a$q.json" | head -1 | sed 's/.*: "//; s/"//') # a whole mode (every block on disk: all)
  pk=$(grep -o '"peak_bytes": [0-9]*' "$T/a$q.json" | head -1 | sed 's/.*: //')
  r=$(grep -o '"read_bytes_per_step": [0-9]*' "$T/a$q.json" | sed 's/.*: //')
  w=$(grep -o '"write_bytes_per_step": [0-9]*' "$T/a$q.json" | sed 's/.*: //')
  echo "     budget $b: $pin, peak $pk, $((r + w)) bytes moved per step"
  [ -n "$pin" ] && [ "$pk" -le $b ] && grep -q '"fits": true' "$T/a$q.json" || ok=0
  [ -z "$prev" ] || [ $((r + w)) -le "$prev" ] || ok=0
  [ "$((r + w))" = "$prev" ] || distinct=$((distinct + 1))
  prev=$((r + w))
  [ $q = 4 ] && mid=$b && midpin=$pin
done
[ $ok = 1 ] && [ $distinct -ge 4 ] &&
  pass "between all's and none's peaks auto plans chunk placements that fit, moving fewer bytes per larger budget ($distinct placements)" ||
  fail "auto over the budgets (above)"
run auto --steps 5 --threads 2 --recompute full --budget "$mid" --offload auto --offload-dir "$T/scr"
run fullr --steps 5 --threads 2 --recompute full
# the budget is a run key in the checkpoint: the exported weights and the losses
"$MW" export --ckpt "$T/fullr" --out "$T/fullr.st" >/dev/null && "$MW" export --ckpt "$T/auto" --out "$T/auto.st" >/dev/null &&
  cmp -s "$T/fullr.st" "$T/auto.st" && [ "$(json_field "$T/fullr.jsonl" loss)" = "$(json_field "$T/auto.jsonl" loss)" ] &&
  pass "--offload auto under $mid bytes ($midpin): weights and losses identical to the in-memory run" ||
  fail "--offload auto ($midpin): weights or losses differ"
planned auto "--offload auto's chunk placement"
grep -q -- "--offload auto: .* -> $midpin" "$T/auto.out" && pass "train prints auto's choice and the form that pins it" ||
  fail "auto's line: $(grep -a 'offload auto' "$T/auto.out")"
grep '"event": "end"' "$T/auto.jsonl" | grep -q "\"offload_pin\": \"$midpin\"" && pass "the JSON log records auto's placement" ||
  fail "auto's JSON log: $(grep -o '"offload[a-z_]*": "[^"]*"' "$T/auto.jsonl")"
# the pinned form plans what auto planned: the same peak and bytes moved
pe() { grep -o '"peak_bytes": [0-9]*\|"read_bytes_per_step": [0-9]*\|"write_bytes_per_step": [0-9]*' | head -3 | tr '\n' ' '; }
ea=$("$MW" estimate "${g[@]}" --budget "$mid" --offload auto --json | pe)
ep=$("$MW" estimate "${g[@]}" --offload "$midpin" --json | pe)
[ -n "$ea" ] && [ "$ea" = "$ep" ] && pass "--offload $midpin plans what auto planned ($ep)" || fail "pinned $ep vs auto $ea"

# a model that fits the budget stays in memory: no bytes moved (plans only: gpt2-medium)
"$MW" plan --preset gpt2-medium --batch 1 --seq 1024 --recompute full --budget 9GiB --offload auto --json >"$T/med.json"
grep -q '"fits": true, "offload": "none", "disk_file_bytes": 0' "$T/med.json" && ! grep -q '"disk_read": [1-9]\|"disk_write": [1-9]' "$T/med.json" &&
  pass "gpt2-medium under 9 GiB: --offload auto keeps every state in memory, no bytes moved" ||
  fail "gpt2-medium auto: $(grep -o '"offload[a-z_]*": "[^"]*"' "$T/med.json")"
"$MW" plan "${g[@]}" --offload params=1-2,grads=0,optim=2-3 --timeline "$T/tl.svg" >"$T/tl.out" 2>&1 && grep -q "disk read" "$T/tl.svg" &&
  pass "plan --timeline draws a chunk placement's transfers" || fail "timeline: $(tail -1 "$T/tl.out")"

echo "-- the embeddings and the head on disk: chunks of their own, tied and untied"
# GPT-2's head is tied (the embedding read at both ends, its gradient summed from both), llama-tiny's
# untied (--tied 1: tied); each against the in-memory run's bits, its arena its plan
E=("params=embed+head,grads=embed+head,optim=none" "params=embed,grads=embed+1-2,optim=head" "all")
run emem --steps 3 --threads 2 --accum 3 --recompute full --grad-clip 0.05
i=0
for p in "${E[@]}"; do
  i=$((i + 1))
  run "e$i" --steps 3 --threads 2 --accum 3 --recompute full --grad-clip 0.05 --offload "$p" --offload-dir "$T/scr"
  same emem "e$i" "GPT-2 (tied), --offload $p (--accum 3, --recompute full, clipping)"
  planned "e$i" "GPT-2 (tied), --offload $p"
done
for t in 0 1; do
  run "lt$t" --steps 3 "${ll[@]}" --tied $t --accum 2 --recompute every:2 --optim adafactor
  for p in "params=embed+head,grads=head,optim=embed" "all"; do
    run "lt$t-$p" --steps 3 "${ll[@]}" --tied $t --accum 2 --recompute every:2 --optim adafactor --offload "$p" --offload-dir "$T/scr"
    same "lt$t" "lt$t-$p" "llama-tiny --tied $t, adafactor, --offload $p"
    planned "lt$t-$p" "llama-tiny --tied $t, --offload $p"
  done
done
run eb "${b8[@]}" --offload params=embed+head+2,grads=1-2,optim=all --offload-dir "$T/scr"
same bmem eb "bf16 + adamw8bit, the ends' parameters on disk (their fp32 gradients in memory)"
run eb2 "${b8[@]}" --offload all --offload-dir "$T/scr"
same bmem eb2 "bf16 + adamw8bit, --offload all (the blocks' bfloat16 copy, the ends' fp32 parameters on disk)"
# the ends' bytes moved are the plan's (tied: the embedding read twice a micro-batch)
for t in 0 1; do
  for p in "params=embed+head,grads=embed+head,optim=none" "params=embed,grads=embed+1,optim=head"; do
    a=("${ll[@]}" --tied $t --batch 2 --seq 32 --accum 2 --recompute every:2 --offload "$p")
    "$MW" estimate "${a[@]}" --json >"$T/ev.json"
    r=$(grep -o '"read_bytes_per_step": [0-9]*' "$T/ev.json" | sed 's/.*: //')
    w=$(grep -o '"write_bytes_per_step": [0-9]*' "$T/ev.json" | sed 's/.*: //')
    init=$(grep -o '"disk": {"categories": {"parameters": [0-9]*' "$T/ev.json" | sed 's/.*: //')
    rm -f "$T/ev.jsonl"
    "$MW" train --data "$T/nv" "${a[@]}" --steps 3 --threads 2 --offload-dir "$T/scr" --json-log "$T/ev.jsonl" >/dev/null 2>&1 ||
      fail "--tied $t $p: the no-validation run failed"
    got=$(grep '"event": "end"' "$T/ev.jsonl" | grep -o '"bytes_read": [0-9]*, "bytes_written": [0-9]*')
    want="\"bytes_read\": $((3 * r + init)), \"bytes_written\": $((3 * w + init))"
    [ -n "$r" ] && [ "$r" -gt 0 ] && [ "$got" = "$want" ] && pass "llama-tiny --tied $t, $p: 3 steps moved 3x the planned bytes ($got)" ||
      fail "llama-tiny --tied $t, $p: moved $got, planned 3 x ($r, $w) + $init"
  done
done
# the whole mode all puts the ends' parameters and gradients on disk: more on disk, a smaller peak than the blocks' alone
dp() { "$MW" estimate "${ll[@]}" --batch 2 --seq 32 --offload "$1" --json | grep -o '"disk": {"categories": {"parameters": [0-9]*' | sed 's/.*: //'; }
pkb() { "$MW" estimate "${ll[@]}" --batch 2 --seq 32 --offload "$1" --json | grep -o '"peak_bytes": [0-9]*' | head -1 | sed 's/.*: //'; }
bo=params=0-3,grads=0-3,optim=all
[ "$(dp all)" -gt "$(dp $bo)" ] && [ "$(pkb all)" -lt "$(pkb $bo)" ] &&
  pass "--offload all: the ends' parameters on disk too ($(dp all) bytes against the blocks' $(dp $bo)), peak $(pkb all) < $(pkb $bo)" ||
  fail "--offload all's ends: on disk $(dp all) vs $(dp $bo), peak $(pkb all) vs $(pkb $bo)"
"$MW" estimate "${ll[@]}" --batch 2 --seq 32 --offload all:resident=1 | grep -q "disk tier (--offload params=embed+0-2,grads=embed+0-2,optim=embed+0-2):" &&
  pass "all:resident=1 keeps the head with the last block" || fail "all:resident=1: $(grep 'disk tier (' <<<"$("$MW" estimate "${ll[@]}" --batch 2 --seq 32 --offload all:resident=1)")"

echo "-- refusals"
for f in "params=" "params=2-1" "weights=all" "params=all,params=none" "all:resident=x" "bogus:resident=1" "params=all,"; do
  expect_error 1 "--offload $f" -- "$MW" estimate "${g[@]}" --offload "$f"
done
expect_error 1 "a block past the model's" -- "$MW" estimate "${g[@]}" --offload grads=2-4
grep -q "block 4 is past the model's last (it has 4 blocks, 0-3)" "$T/err" && pass "the refusal names the blocks" ||
  fail "message: $(cat "$T/err")"
expect_error 1 "the ends' gradients under bf16" -- "$MW" estimate "${g[@]}" --precision bf16 --offload params=all,grads=head
grep -q "the head's gradients stay in memory under --precision bf16" "$T/err" && pass "the refusal says why" || fail "message: $(cat "$T/err")"
expect_error 1 "--offload params=embed+" -- "$MW" estimate "${g[@]}" --offload params=embed+
expect_error 1 "more resident blocks than the model's" -- "$MW" estimate "${g[@]}" --offload all:resident=5
expect_error 1 "under --zero" -- "$MW" estimate "${g[@]}" --world 2 --zero 1 --offload optim=0-1
expect_error 1 "optimizer state of an optimizer without any" -- "$MW" estimate "${g[@]}" --optim sgd --momentum 0 --offload optim=all

[ "$fails" = 0 ] && echo "cli_chunks: all passed" || { echo "cli_chunks: $fails failed"; exit 1; }
