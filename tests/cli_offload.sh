#!/usr/bin/env bash
# End-to-end tests of the disk tier (issue 14): --offload optimizer gives the in-memory run's bits
# (losses and checkpoint bytes) under recomputation, accumulation, 1 and 2 threads, both engines
# and both model families; the plan's estimate is the arena; resume and SIGKILL in offloaded runs;
# injected I/O faults (EIO, a short read, ENOSPC) each give one error, exit 1, and leave the last
# checkpoint good to resume from; --offload auto; the refusals. Usage: tests/cli_offload.sh
# build/memwall. Exits non-zero on any failure.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_offload_XXXXXX)
bg=()
trap 'for p in "${bg[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"
has() { grep -qF -- "$2" "$1" && pass "$3" || fail "$3: '$2' not in $(head -c 600 "$1")"; }
# scratch_count DIR: scratch files in DIR
scratch_count() { ls "$1" 2>/dev/null | grep -c '^memwall-offload-.*\.scratch$'; }

cat /usr/share/common-licenses/{GPL-2,GPL-3} >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
tr=(train --data "$T/d" --batch 2 --seq 32 --lr 1e-3 --warmup 2)

# run NAME ARGS..., same A B WHAT: lib_cli.sh
# same_weights A B WHAT: runs with other run keys in their checkpoints (--budget): the same losses,
# and the exported weights (which the moments of every step shaped) byte for byte
same_weights() {
  "$MW" export --ckpt "$T/$1" --out "$T/$1.st" >/dev/null && "$MW" export --ckpt "$T/$2" --out "$T/$2.st" >/dev/null &&
    cmp -s "$T/$1.st" "$T/$2.st" &&
    [ "$(json_field "$T/$1.jsonl" loss)" = "$(json_field "$T/$2.jsonl" loss)" ] &&
    pass "$3: weights and losses identical" || fail "$3: weights or losses differ"
}

echo "-- the same bits as the in-memory run"
run mem --steps 6 --threads 2
run off --steps 6 --threads 2 --offload optimizer --offload-dir "$T/scr"
same mem off "--offload optimizer"
has "$T/off.out" "disk tier (--offload optimizer): optimizer" "the plan prints the disk tier"
grep -qE "disk tier: .*memwall-offload-[0-9]+\.scratch \(.*(io_uring|threads)" "$T/off.out" &&
  pass "the run names its scratch file and engine" || fail "no disk tier line: $(grep disk "$T/off.out")"
grep -qE "arena peak ([0-9.]+ [KMG]iB) \(plan \1\)" "$T/off.out" && pass "arena peak == plan peak, offloaded" ||
  fail "arena vs plan: $(grep 'arena peak' "$T/off.out")"
[ "$(scratch_count "$T/scr")" = 0 ] && pass "the scratch file is removed at exit" || fail "scratch left: $(ls "$T/scr")"
[ -z "$(ls -A "$T/scr")" ] && pass "nothing else stays in --offload-dir (the folder lock is removed too)" ||
  fail "left in --offload-dir: $(ls -A "$T/scr")"
mp=$(grep -o "arena peak [0-9.]* [KMG]iB" "$T/mem.out"); op=$(grep -o "arena peak [0-9.]* [KMG]iB" "$T/off.out")
[ "$mp" != "$op" ] && pass "the offloaded arena is smaller ($op vs $mp)" || fail "same arena: $op"
MEMWALL_AIO=threads run offth --steps 6 --threads 2 --offload optimizer --offload-dir "$T/scr"
same mem offth "the thread-pool engine"
has "$T/offth.out" "threads" "MEMWALL_AIO=threads picks the thread pool"
run mem1 --steps 5 --threads 1 --accum 3 --recompute full
full run mems --steps 5 --threads 2 --recompute selective
run meme --steps 5 --threads 2 --recompute every:3 --layers 5
ll=(--preset llama-tiny --vocab 256)
run lmem --steps 4 "${ll[@]}" --accum 2
for mode in optimizer optimizer+grads all; do
  o=(--offload "$mode" --offload-dir "$T/scr")
  # (the sanitizer build, quick in lib_cli.sh: 2 threads, --recompute every:3 and Llama; 1 thread and
  # selective are the same code paths)
  full run "o1$mode" --steps 5 --threads 1 --accum 3 --recompute full "${o[@]}"
  full same mem1 "o1$mode" "$mode: 1 thread, --accum 3, --recompute full"
  run "o2$mode" --steps 5 --threads 2 --accum 3 --recompute full "${o[@]}"
  same mem1 "o2$mode" "$mode: on 2 threads against 1 thread in memory"
  full run "os$mode" --steps 5 --threads 2 --recompute selective "${o[@]}"
  full same mems "os$mode" "$mode: --recompute selective"
  run "oe$mode" --steps 5 --threads 2 --recompute every:3 --layers 5 "${o[@]}"
  same meme "oe$mode" "$mode: --recompute every:3 over 5 blocks (segments revisit blocks)"
  run "ol$mode" --steps 4 "${ll[@]}" --accum 2 "${o[@]}"
  same lmem "ol$mode" "$mode: the Llama family, --accum 2"
  grep -qE "arena peak ([0-9.]+ [KMG]iB) \(plan \1\)" "$T/ol$mode.out" && pass "$mode: arena peak == plan peak" ||
    fail "$mode: arena vs plan: $(grep 'arena peak' "$T/ol$mode.out")"
done
# the bytes moved are the plan's: 3 steps, no validation or checkpoint
cp "$T/d.train.bin" "$T/nv.train.bin"
for mode in optimizer optimizer+grads all; do
  "$MW" train --data "$T/nv" --batch 2 --seq 32 --steps 3 --accum 2 --threads 2 --offload "$mode" --offload-dir "$T/scr" \
    --recompute every:2 >"$T/nv.out" 2>&1 || fail "$mode: no-val run: $(tail -1 "$T/nv.out")"
  pr=$(grep -o 'per step [0-9.]* [KMG]*i*B read, [0-9.]* [KMG]*i*B written' "$T/nv.out" | head -1)
  moved=$(grep -o 'disk tier: [0-9.]* [KMG]*i*B read, [0-9.]* [KMG]*i*B written' "$T/nv.out" | tail -1)
  "$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --accum 2 --recompute every:2 --offload "$mode" --json >"$T/nv.json"
  r=$(grep -o '"read_bytes_per_step": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  w=$(grep -o '"write_bytes_per_step": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  "$MW" train --data "$T/nv" --batch 2 --seq 32 --steps 3 --accum 2 --threads 2 --offload "$mode" --offload-dir "$T/scr" \
    --recompute every:2 --json-log "$T/nv.jsonl" >/dev/null 2>&1
  got=$(grep '"event": "end"' "$T/nv.jsonl" | grep -o '"bytes_read": [0-9]*, "bytes_written": [0-9]*')
  # --offload all: initialisation reads and writes every block's parameters once, before step 1
  init=0
  [ "$mode" = all ] && init=$(grep -o '"disk": {"categories": {"parameters": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  want="\"bytes_read\": $((3 * r + init)), \"bytes_written\": $((3 * w + init))"
  [ "$got" = "$want" ] && pass "$mode: 3 steps moved 3x the planned bytes ($got)" || fail "$mode: moved $got, planned 3 x ($r, $w)"
done

# --precision bf16 (issue 35): the blocks' gradients move as their 2 bytes, forward and backward read
# the parameters' bfloat16 copy, the norm sums at the blocks' backward; still exactly the plan's bytes
# (initialisation reads each block's fp32 parameters and writes them and their copy), and fewer than
# fp32's (main moved the same bytes for both)
for mode in optimizer+grads all; do
  nv=(--batch 2 --seq 32 --accum 2 --recompute every:2 --offload "$mode")
  "$MW" estimate --preset gpt2-tiny "${nv[@]}" --json >"$T/nv32.json"
  "$MW" estimate --preset gpt2-tiny "${nv[@]}" --precision bf16 --json >"$T/nv.json"
  r32=$(grep -o '"read_bytes_per_step": [0-9]*' "$T/nv32.json" | sed 's/.*: //')
  w32=$(grep -o '"write_bytes_per_step": [0-9]*' "$T/nv32.json" | sed 's/.*: //')
  r=$(grep -o '"read_bytes_per_step": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  w=$(grep -o '"write_bytes_per_step": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  "$MW" train --data "$T/nv" "${nv[@]}" --steps 3 --threads 2 --offload-dir "$T/scr" --precision bf16 \
    --json-log "$T/nv.jsonl" >/dev/null 2>&1 || fail "bf16 $mode: no-val run"
  got=$(grep '"event": "end"' "$T/nv.jsonl" | grep -o '"bytes_read": [0-9]*, "bytes_written": [0-9]*')
  ir=0 iw=0
  if [ "$mode" = all ]; then
    ir=$(grep -o '"disk": {"categories": {"parameters": [0-9]*' "$T/nv32.json" | sed 's/.*: //')
    iw=$(grep -o '"disk": {"categories": {"parameters": [0-9]*' "$T/nv.json" | sed 's/.*: //')
  fi
  want="\"bytes_read\": $((3 * r + ir)), \"bytes_written\": $((3 * w + iw))"
  [ "$got" = "$want" ] && pass "bf16 $mode: 3 steps moved 3x the planned bytes ($got)" || fail "bf16 $mode: moved $got, planned 3 x ($r, $w) + ($ir, $iw)"
  awk -v a=$((r + w)) -v b=$((r32 + w32)) 'BEGIN { exit !(a <= 0.75 * b) }' &&
    pass "bf16 $mode: a step moves $((r + w)) bytes, $(awk -v a=$((r + w)) -v b=$((r32 + w32)) 'BEGIN { printf "%.3f", a / b }')x fp32's $((r32 + w32))" ||
    fail "bf16 $mode: a step moves $((r + w)) bytes, fp32 $((r32 + w32))"
done

# a per-category form that puts every block as a whole mode does is that mode (under bf16: its
# bfloat16 copy and fused norm; main planned the chunk path's 17219584 bytes read for all's 13643776),
# and --offload auto under bf16 compares its chain's choice with the whole mode below it, which has
# those formats (llama2-7b at 8 GiB chose 1 of 96 chunks resident: 112.2 GB read, not all's 77.0)
for fm in "params=all,grads=all,optim=all all" "all:resident=0 all" "grads=all,optim=all optimizer+grads"; do
  f1=${fm% *} f2=${fm#* }
  a=$("$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --precision bf16 --offload "$f1" --json | grep -o '"[rw][a-z]*_bytes_per_step": [0-9]*')
  b=$("$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --precision bf16 --offload "$f2" --json | grep -o '"[rw][a-z]*_bytes_per_step": [0-9]*')
  [ -n "$a" ] && [ "$a" = "$b" ] && pass "bf16 --offload $f1 plans $f2's bytes: $(echo $a)" || fail "bf16 --offload $f1: $(echo $a), $f2: $(echo $b)"
done
# auto under bf16 weighs every whole mode (all, optimizer+grads, optimizer) below its chain's most
# that fit against the chain's placements, and never takes a predicted-slower one: the chosen
# step's seconds ("this") at most each it compared, in one process (one measurement of the ops)
for b in 10MiB 12MiB 20MiB; do
  "$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --precision bf16 --offload auto --budget $b --offload-dir "$T/scr" --json >"$T/ab.json"
  why=$(grep -o '"offload_why": "[^"]*"' "$T/ab.json")
  t=$(echo "$why" | sed -n 's/.*; this \([0-9.]*\) s.*/\1/p')
  # the others: the most that fit, each tried, each whole mode that fits
  o=$(echo "$why" | sed -n 's/.*the most that fit: [0-9]*, \([0-9.]*\) s.step.*/\1/p')
  o="$o $(echo "$why" | sed -n 's/.*; tried \([^;)]*\).*/\1/p' | tr ',' '\n' | grep -v 'over budget' | awk '{ print $2 }' | tr '\n' ' ')"
  wm=$(echo "$why" | sed -n 's/.*the whole modes: \([^;)]*\).*/\1/p')
  o="$o $(echo "$wm" | tr ',' '\n' | grep -v 'over budget' | awk 'NF > 1 { print $(NF - 1) }' | tr '\n' ' ')"
  n=$(echo "$wm" | tr ',' '\n' | grep -c '[a-z]')
  [ -n "$t" ] && [ "$n" = 3 ] && awk -v t="$t" -v o="$o" 'BEGIN { k = split(o, a, " "); for (i = 1; i <= k; i++) if (t > a[i] + 0) exit 1 }' &&
    pass "bf16 auto at $b: its choice ($t s) no slower than any it compared (the whole modes: $wm)" || fail "bf16 auto at $b: $why"
done

# --accum under all (issue 35): a micro-batch after the first starts from the slots the one before
# left, so it reads fewer parameter bytes than the first. From the plans: the first micro-batch's
# visits read V = E1 - O1 - P (all against optimizer+grads at --accum 1, less the optimizer's read of
# the parameters), a later one's E2 - E1 - (O2 - O1) (main's build: the same V)
rb() { "$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --offload "$1" --accum "$2" --json |
  grep -o '"read_bytes_per_step": [0-9]*' | sed 's/.*: //'; }
e1=$(rb all 1) e2=$(rb all 2) o1=$(rb optimizer+grads 1) o2=$(rb optimizer+grads 2)
pb=$("$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --offload all --json |
  grep -o '"disk": {"categories": {"parameters": [0-9]*' | sed 's/.*: //')
v0=$((e1 - o1 - pb)) v1=$((e2 - e1 - o2 + o1))
[ "$v1" -lt "$v0" ] && [ "$v1" -gt 0 ] && pass "--accum: a later micro-batch reads $v1 parameter bytes, the first $v0" ||
  fail "--accum: a later micro-batch reads $v1 parameter bytes, the first $v0"

echo "-- resume in offloaded runs"
run full --steps 8 --threads 2
run part --steps 8 --threads 2 --stop-at 3 --offload optimizer --offload-dir "$T/scr"
"$MW" "${tr[@]}" --out "$T/part" --json-log "$T/part.jsonl" --resume auto --threads 2 --offload optimizer \
  --offload-dir "$T/scr" >"$T/part2.out" 2>&1 || fail "offloaded resume: $(tail -2 "$T/part2.out")"
same full part "stop at 3, resume offloaded"
run mix --steps 8 --threads 2 --stop-at 4 --offload optimizer --offload-dir "$T/scr"
"$MW" "${tr[@]}" --out "$T/mix" --json-log "$T/mix.jsonl" --resume auto --threads 2 >"$T/mix2.out" 2>&1 ||
  fail "in-memory resume of an offloaded checkpoint: $(tail -2 "$T/mix2.out")"
same full mix "offloaded checkpoint resumed in memory"
run mix3 --steps 8 --threads 2 --stop-at 5
"$MW" "${tr[@]}" --out "$T/mix3" --json-log "$T/mix3.jsonl" --resume auto --threads 2 --offload optimizer \
  --offload-dir "$T/scr" >"$T/mix3b.out" 2>&1 || fail "offloaded resume of an in-memory checkpoint"
same full mix3 "in-memory checkpoint resumed offloaded"

echo "-- SIGKILL (--offload all): the next run removes the stale scratch file and continues exactly"
run long --steps 40 --threads 2 --save-every 2
"$MW" "${tr[@]}" --steps 40 --threads 2 --save-every 2 --out "$T/kill" --json-log "$T/kill.jsonl" \
  --offload all --offload-dir "$T/kscr" --log-every 1 >"$T/kill.out" 2>&1 &
pid=$!
bg+=("$pid")
for _ in $(seq 1 1200); do # until a checkpoint exists and training goes on (a sanitizer build is slow)
  [ -n "$(ls "$T/kill" 2>/dev/null | grep 'step-0000000[4-9]')" ] && break
  sleep 0.05
done
kill -9 "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
[ "$(scratch_count "$T/kscr")" = 1 ] && pass "the killed run left its scratch file" ||
  fail "killed run: $(ls "$T/kscr" 2>&1) (did it finish before the kill? $(tail -1 "$T/kill.out"))"
"$MW" "${tr[@]}" --steps 40 --threads 2 --save-every 2 --out "$T/kill" --json-log "$T/kill.jsonl" --resume auto \
  --offload all --offload-dir "$T/kscr" >"$T/kill2.out" 2>&1 || fail "resume after SIGKILL: $(tail -2 "$T/kill2.out")"
has "$T/kill2.out" "removed 1 stale scratch file(s) of killed runs" "the stale file is recognised and removed"
[ "$(scratch_count "$T/kscr")" = 0 ] && pass "and no scratch file remains" || fail "left: $(ls "$T/kscr")"
same long kill "SIGKILL, then resume"

echo "-- I/O faults: one error, exit 1, the last checkpoint stays good"
# 16 chunks of m and v: 32 reads and 32 writes a step, and 32 reads a checkpoint (every 2 steps):
# read 110 and write 80 fail step 3, write 140 step 5, and read 170 the save at step 4, which
# must leave step 2 good
run fref --steps 8 --threads 2 --save-every 2
# --offload all: the blocks' parameter reads and gradient writes fail too (past step 2's save)
for f in eio:read:110 short:read:110 enospc:write:80 eio:write:140 eio:read:170 all:eio:read:400 all:enospc:write:300; do
  mode=optimizer
  case $f in all:*) mode=all; f=${f#all:} ;; esac
  rm -rf "$T/f" "$T/f.jsonl"
  MEMWALL_IO_FAULT=$f "$MW" "${tr[@]}" --steps 8 --threads 2 --save-every 2 --out "$T/f" --json-log "$T/f.jsonl" \
    --offload $mode --offload-dir "$T/fscr" >"$T/out" 2>"$T/err"
  rc=$?
  if [ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^memwall: disk tier: .*memwall-offload-.*errno\|^memwall: disk tier: short read" "$T/err"; then
    pass "$mode, $f -> exit 1: $(cut -c1-150 "$T/err")"
  else
    fail "$f: exit $rc, stderr $(cat "$T/err")"
  fi
  [ "$(scratch_count "$T/fscr")" = 0 ] && pass "$f: the scratch file is removed on the way out" || fail "$f: scratch left"
  last=$(ls "$T/f"/step-*.mwck 2>/dev/null | tail -1)
  [ -n "$last" ] && "$MW" export --ckpt "$last" --out "$T/fx" >/dev/null 2>&1 && pass "$f: $(basename "$last") verifies" ||
    fail "$f: no valid checkpoint left ($last)"
  "$MW" "${tr[@]}" --steps 8 --threads 2 --save-every 2 --out "$T/f" --json-log "$T/f.jsonl" --resume auto \
    --offload $mode --offload-dir "$T/fscr" >"$T/out" 2>&1 || fail "$f: resume: $(tail -2 "$T/out")"
  cmp -s "$T/f/step-00000008.mwck" "$T/fref/step-00000008.mwck" && pass "$f: the resumed run ends as the unbroken one" ||
    fail "$f: the resumed run differs"
done
expect_error 1 "ENOSPC while preallocating, before step 1" -- env MEMWALL_IO_FAULT=enospc:alloc:1 "$MW" "${tr[@]}" \
  --steps 2 --out "$T/nospace" --offload optimizer --offload-dir "$T/nscr"
grep -q "needs [0-9]* bytes .* which has [0-9]* bytes .* free" "$T/err" && pass "the refusal names the bytes needed and free" ||
  fail "ENOSPC message: $(cat "$T/err")"
[ ! -e "$T/nospace" ] && pass "nothing was created in --out" || fail "--out created: $(ls "$T/nospace")"

echo "-- --offload auto and the budget"
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --json >"$T/e_none.json"
peak=$(grep -o '"peak_bytes": [0-9]*' "$T/e_none.json" | head -1 | sed 's/.*: //')
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --offload optimizer --json >"$T/e_off.json"
opeak=$(grep -o '"peak_bytes": [0-9]*' "$T/e_off.json" | head -1 | sed 's/.*: //')
grep -q '"offload": "optimizer"' "$T/e_off.json" && grep -q '"read_bytes_per_step": [1-9]' "$T/e_off.json" &&
  pass "estimate --json gives the disk tier" || fail "estimate json: $(head -c 400 "$T/e_off.json")"
mid=$(( (peak + opeak) / 2 ))
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --budget "$mid" --offload auto --json >"$T/e_auto.json"
grep -q '"offload": "optimizer"' "$T/e_auto.json" && grep -q '"fits": true' "$T/e_auto.json" &&
  pass "auto offloads when memory alone does not fit the budget" || fail "auto: $(head -c 300 "$T/e_auto.json")"
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --budget "$peak" --offload auto --json >"$T/e_auto2.json"
grep -q '"offload": "none"' "$T/e_auto2.json" && pass "auto stays in memory when that fits" ||
  fail "auto in memory: $(head -c 300 "$T/e_auto2.json")"
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --budget 1GiB --offload auto --offload-dir "$T/escr" --json >"$T/e_auto3.json"
grep -q '"offload_why": "18 of 18 chunks resident (the most that fit: 18, [0-9.]* s/step predicted; this [0-9.]* s' "$T/e_auto3.json" &&
  grep -q '"offload": "none"' "$T/e_auto3.json" &&
  pass "auto with a folder predicts the step of the chunks it keeps (the disk measured there)" || fail "auto why: $(grep -o '"offload_why": "[^"]*"' "$T/e_auto3.json")"
[ "$(scratch_count "$T/escr")" = 0 ] && pass "the measurement leaves no scratch file" || fail "measurement left $(ls "$T/escr")"
# --offload auto times ops on a 2-block calibration model: a pinned every:K larger than 2 was
# copied into it and refused ("needs K in 1..--layers=2")
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --budget 1GiB --offload auto --offload-dir "$T/escr" \
  --recompute every:3 >"$T/e_auto4.out" 2>&1 && grep -q 'recompute every:3' "$T/e_auto4.out" &&
  pass "auto with --recompute every:3 plans (the calibration model keeps its own policy)" ||
  fail "auto with every:3: $(tail -1 "$T/e_auto4.out")"
run auto --steps 6 --threads 2 --budget "$mid" --offload auto --offload-dir "$T/scr"
same_weights mem auto "--offload auto under a budget"
has "$T/auto.out" "--offload auto with --budget and no --recompute chose the recomputation too: --recompute auto -> " \
  "train says that auto chose the recomputation too"
# one budget, one decision: no placement keeps every activation within 16 MB here, recomputing
# some does; with --budget and no --recompute, --offload auto chooses both (it said "no placement
# fits" and exit 2 while --recompute auto fitted)
ob=(--layers 4 --heads 4 --dim 64 --vocab 256 --ctx 256 --batch 4 --seq 256 --budget 16MB --offload auto)
"$MW" plan "${ob[@]}" --recompute none --json >"$T/p_rn.json"
rc=$?
[ $rc -eq 2 ] && grep -q '"fits": false' "$T/p_rn.json" && pass "--recompute none: no placement fits (exit 2)" ||
  fail "--recompute none: exit $rc, $(head -c 200 "$T/p_rn.json")"
"$MW" plan "${ob[@]}" >"$T/p_ra.out"
rc=$?
[ $rc -eq 0 ] && grep -q "chose the recomputation too: --recompute auto -> .* (to run exactly this plan: --recompute blocks:" "$T/p_ra.out" &&
  grep -q "budget 15.26 MiB: fits" "$T/p_ra.out" && pass "no --recompute: auto chooses it too, fits, and says what it chose" ||
  fail "no --recompute: exit $rc, $(grep -a "auto\|budget\|memwall:" "$T/p_ra.out" | head -3)"
"$MW" plan "${ob[@]}" --json >"$T/p_ra.json" && grep -q '"fits": true' "$T/p_ra.json" &&
  grep -q '"recompute_by_offload_auto": true' "$T/p_ra.json" && pass "plan --json: recompute_by_offload_auto" ||
  fail "plan --json: $(grep -o '"recompute[a-z_]*": [^,]*' "$T/p_ra.json")"
expect_error 2 "the in-memory plan over the budget" -- "$MW" "${tr[@]}" --steps 2 --budget "$mid"
has "$T/err" "--offload optimizer --offload-dir DIR moves the optimizer state" "the refusal suggests offloading"

"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --budget "$mid" --recompute auto --offload optimizer --json >"$T/e_ra.json" 2>&1 &&
  grep -q '"fits": true' "$T/e_ra.json" && pass "--recompute auto with --offload optimizer plans (its calibration runs in memory)" ||
  fail "recompute auto + offload: $(head -c 300 "$T/e_ra.json")"
run rauto --steps 2 --threads 2 --budget "$mid" --recompute auto --offload optimizer --offload-dir "$T/rscr"
[ "$(scratch_count "$T/rscr")" = 0 ] && pass "and trains, leaving no scratch file" || fail "scratch left: $(ls "$T/rscr")"

echo "-- the disk is part of the budget"
# Llama 2 70B's disk tier under --offload all is a 1.0 TiB file: more than this disk gives, so
# estimate says it does not fit (exit 2), auto takes no placement whose file the folder cannot
# hold, and train refuses before it writes anything (estimate said "fits" and exit 0 here)
big=(--preset llama2-70b --batch 1 --seq 64 --recompute full --offload-dir "$T/big")
"$MW" estimate "${big[@]}" --offload all --json >"$T/big.json"
rc=$?
fb=$(grep -o '"file_bytes": [0-9]*' "$T/big.json" | cut -d' ' -f2)
avail=$(df -B1 --output=avail "$T" | tail -1 | tr -d ' ')
if [ -n "$fb" ] && [ "$avail" -ge "$fb" ]; then
  echo "  skip the disk-room checks: this disk has $avail bytes free, more than the $fb-byte file"
else
  [ $rc -eq 2 ] && grep -q '"room_bytes": [0-9]*, "fits_in_room": false' "$T/big.json" && grep -q '"fits": false, "budget_bytes"' "$T/big.json" &&
    pass "estimate: a $fb-byte file in $avail free bytes does not fit (exit 2)" ||
    fail "estimate --offload all past the disk: exit $rc, $(grep -o '"room_bytes": [^,]*, "fits_in_room": [a-z]*' "$T/big.json")"
  "$MW" estimate "${big[@]}" --offload all >"$T/big.out"
  grep -q "^  room .*--offload-dir can give it" "$T/big.out" && grep -q "^ *DOES NOT FIT (.* over)" "$T/big.out" &&
    pass "estimate prints the folder's room and the verdict" || fail "no room line: $(grep -A1 room "$T/big.out")"
  "$MW" plan "${big[@]}" --offload auto --budget 30GiB >"$T/bigauto.out"
  rc=$?
  [ $rc -eq 2 ] && grep -q "disk tier: a file of .* DOES NOT FIT" "$T/bigauto.out" &&
    pass "--offload auto under 30 GiB: only all fits memory, its file not the disk: no placement (exit 2)" ||
    fail "auto past the disk: exit $rc, $(tail -2 "$T/bigauto.out")"
  expect_error 2 "train with a disk tier the folder cannot hold" -- "$MW" train --data "$T/d" "${big[@]}" --offload all \
    --steps 1 --out "$T/bigout"
  grep -q "the disk tier's file needs $fb bytes .* but --offload-dir $T/big can give it" "$T/err" &&
    [ ! -e "$T/bigout" ] && [ "$(scratch_count "$T/big")" = 0 ] &&
    pass "the refusal names the file and the room; nothing written" || fail "refusal: $(cat "$T/err"); $(ls -A "$T/big" "$T/bigout" 2>&1)"
fi
# 64 ranks on this machine, each with its shard of the optimizer state on disk: each file fits the
# folder, all of them together do not
"$MW" estimate "${big[@]}" --zero 1 --world 64 --offload optimizer --json >"$T/bigz.json"
rc=$?
all=$(grep -o '"disk_file_bytes_all_ranks": [0-9]*' "$T/bigz.json" | cut -d' ' -f2)
if [ -n "$all" ] && [ "$avail" -ge "$all" ]; then
  echo "  skip the ranks' disk-room check: this disk has $avail bytes free, more than the ranks' $all"
else
  [ $rc -eq 2 ] && grep -q '"room_bytes": [0-9]*, "fits_in_room": true' "$T/bigz.json" && grep -q '"disk_fits": false' "$T/bigz.json" &&
    pass "estimate --zero 1 --world 64: each rank's file fits, the 64 together ($all bytes) do not (exit 2)" ||
    fail "ranks' files: exit $rc, all $all, $(grep -o '"disk_fits": [a-z]*' "$T/bigz.json")"
fi

echo "-- plan: the transfers in the timeline"
"$MW" plan --preset gpt2-tiny --batch 2 --seq 32 --offload all --timeline "$T/tl.svg" --json >"$T/plan.json" ||
  fail "plan --offload all: $(head -c 300 "$T/plan.json")"
grep -q 'id="lane-disk-read"' "$T/tl.svg" && grep -q 'id="lane-disk-write"' "$T/tl.svg" &&
  pass "the SVG timeline has a disk read and a disk write lane" || fail "no transfer lanes in the timeline"
nr=$(grep -o '"disk_read": [1-9][0-9]*' "$T/plan.json" | wc -l)
nw=$(grep -o '"disk_write": [1-9][0-9]*' "$T/plan.json" | wc -l)
# gpt2-tiny's 4 blocks: reads at the visits that start them, writes after each block's backward,
# the head's and the embedding's gradients after their ops (the ends on disk: 18 chunks above)
[ "$nr" -ge 3 ] && [ "$nw" -eq 7 ] && pass "transfers sit on their ops: $nr ops read, $nw write (4 blocks' gradients, the ends', the optimizer)" ||
  fail "ops with transfers: $nr reading, $nw writing"

"$MW" help train | grep -- "--offload MODE" >"$T/help_off"
grep -q "auto (fills --budget with the chunks, the embeddings' and head's among the blocks'" "$T/help_off" && grep -q "params=R,grads=R,optim=R" "$T/help_off" &&
  ! grep -q "none or optimizer" "$T/help_off" &&
  pass "--offload's help: auto over the chunks, the explicit forms" || fail "--offload help: $(cat "$T/help_off")"

echo "-- refusals"
expect_error 1 "--offload optimizer without --offload-dir" -- "$MW" "${tr[@]}" --steps 2 --offload optimizer
expect_error 1 "an unknown --offload" -- "$MW" "${tr[@]}" --steps 2 --offload disk
expect_error 1 "--offload-dir without --offload" -- "$MW" "${tr[@]}" --steps 2 --offload-dir "$T/scr"
: >"$T/afile"
expect_error 1 "--offload-dir under a file" -- "$MW" "${tr[@]}" --steps 2 --offload optimizer --offload-dir "$T/afile/x"

[ "$fails" -eq 0 ] && echo "cli_offload: all passed" || { echo "cli_offload: $fails failure(s)"; exit 1; }
