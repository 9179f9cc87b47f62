#!/usr/bin/env bash
# End-to-end tests of resume, checkpoints and --out (issue 11: items 1, 4, 5, 7, 13 and the
# --resume auto fix). Usage: tests/cli_resume.sh build/memwall. Exits non-zero on any failure.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_resume_XXXXXX)
bg=()
trap 'for p in "${bg[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error
# has FILE TEXT WHAT: FILE contains TEXT (fixed string)
has() { grep -qF -- "$2" "$1" && pass "$3" || fail "$3: '$2' not in $(cat "$1")"; }

cat /usr/share/common-licenses/{GPL-2,GPL-3} >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
tr=(train --data "$T/d" --threads 2)

echo "-- resume continues the stored run (item 1)"
"$MW" "${tr[@]}" --batch 2 --seq 16 --lr 1e-3 --steps 4 --stop-at 2 --out "$T/D" >"$T/out" 2>&1 ||
  fail "first run: $(tail -2 "$T/out")"
expect_error 1 "the issue's resume with other math flags is refused" -- "$MW" "${tr[@]}" --batch 8 --seq 64 --accum 3 \
  --lr 5 --seed 99 --resume auto --out "$T/D"
has "$T/err" "trained with --batch 2 --seq 16 --accum 1 --lr 0.001 --seed 1337, the command line says --batch 8 --seq 64 --accum 3 --lr 5 --seed 99" \
  "the refusal names each difference, both sides"
has "$T/err" "--override batch,seq,accum,lr,seed" "and the --override that would allow them"
ls "$T/D" | grep -q 'step-00000003' && fail "the refused run trained" || pass "the refused run trained nothing"
"$MW" "${tr[@]}" --resume auto --out "$T/D" --stop-at 3 >"$T/out" 2>&1 &&
  grep -q "B=2 T=16 accum=1 | 4 steps" "$T/out" && grep -q "AdamW lr 0.001 " "$T/out" &&
  grep -q "resumed from .*step-00000002.mwck at step 2 of 4" "$T/out" &&
  pass "flags not given come from the checkpoint (B=2 T=16, lr 0.001, 4 steps)" ||
  fail "resume without flags: $(cat "$T/out")"
"$MW" "${tr[@]}" --batch 2 --lr 0.001 --resume "$T/D/step-00000002.mwck" --out "$T/Deq" >"$T/out" 2>&1 &&
  pass "flags equal to the checkpoint's are accepted" || fail "equal flags: $(tail -2 "$T/out")"
expect_error 1 "extending --steps without --override" -- "$MW" "${tr[@]}" --steps 8 --resume auto --out "$T/D"
has "$T/err" "--override steps" "the refusal suggests --override steps"
"$MW" "${tr[@]}" --steps 8 --override steps --resume auto --out "$T/D" --json-log "$T/D.jsonl" >"$T/out" 2>&1 &&
  grep -q "resumed from .*step-00000003.mwck at step 3 of 8" "$T/out" && [ -f "$T/D/step-00000008.mwck" ] &&
  pass "--override steps extends the run to step 8" || fail "--override steps: $(tail -3 "$T/out")"
has "$T/out" "resume: --override steps: --steps 4 -> 8" "the override is printed"
has "$T/D.jsonl" '{"event": "override", "step": 3, "overrides": {"steps": [4, 8]}}' "and logged in the JSON log"
"$MW" "${tr[@]}" --resume "$T/D/step-00000008.mwck" --out "$T/D8" >"$T/out" 2>&1 && grep -q "at step 8 of 8" "$T/out" &&
  pass "the extended run's checkpoint records --steps 8" || fail "after the override: $(tail -2 "$T/out")"
expect_error 1 "--override of an unknown flag" -- "$MW" "${tr[@]}" --steps 9 --override steps,bogus --resume auto --out "$T/D"
expect_error 1 "--override of a shape flag" -- "$MW" "${tr[@]}" --layers 2 --override layers --resume auto --out "$T/D"
expect_error 1 "--override of a flag not given" -- "$MW" "${tr[@]}" --override lr --resume auto --out "$T/D"
expect_error 1 "--override without --resume" -- "$MW" "${tr[@]}" --steps 9 --override steps --out "$T/Dx"
expect_error 1 "another shape on the command line" -- "$MW" "${tr[@]}" --preset gpt2 --resume auto --out "$T/D"
has "$T/err" "another model shape" "the shape refusal says so"

echo "-- save cadence, --keep and --eval-every carry over (docs/commands.md's example)"
"$MW" "${tr[@]}" --steps 12 --save-every 2 --keep 2 --eval-every 4 --stop-at 4 --out "$T/C" >"$T/out" 2>&1 ||
  fail "first run: $(tail -2 "$T/out")"
"$MW" "${tr[@]}" --resume auto --out "$T/C" --json-log "$T/C.jsonl" >"$T/out" 2>&1 || fail "resume: $(tail -2 "$T/out")"
[ "$(grep -c '  saved ' "$T/out")" -eq 4 ] && [ "$(ls "$T/C" | tr '\n' ' ')" = "step-00000010.mwck step-00000012.mwck " ] &&
  pass "resumed without --save-every/--keep: saved at 6, 8, 10, 12 and kept the newest 2" ||
  fail "cadence after resume: $(grep saved "$T/out" | tr '\n' ' ') | $(ls "$T/C" | tr '\n' ' ')"
[ "$(grep -c '"val_loss"' "$T/C.jsonl")" -eq 2 ] && pass "validation every 4 steps carried over (8, 12)" ||
  fail "val lines: $(grep -c '"val_loss"' "$T/C.jsonl")"
"$MW" "${tr[@]}" --steps 14 --override steps --save-every 1 --keep 1 --resume auto --out "$T/C" >"$T/out" 2>&1 &&
  [ "$(grep -c '  saved ' "$T/out")" -eq 2 ] && [ "$(ls "$T/C" | tr '\n' ' ')" = "step-00000014.mwck " ] &&
  pass "--save-every and --keep given again take over" || fail "new cadence: $(ls "$T/C")"
"$MW" "${tr[@]}" --resume "$T/C/step-00000014.mwck" --steps 16 --override steps >"$T/out" 2>&1 &&
  grep -q "no --out, so this run saves no checkpoint" "$T/out" && pass "a resume without --out says it saves nothing" ||
  fail "resume without --out: $(tail -2 "$T/out")"

echo "-- --resume auto and invalid checkpoints"
"$MW" "${tr[@]}" --steps 6 --save-every 2 --keep 3 --out "$T/I" >/dev/null 2>&1 || fail "run for corruption"
cp -r "$T/I" "$T/I2"
printf '\x55' | dd of="$T/I/step-00000006.mwck" bs=1 seek=5000 conv=notrunc status=none
"$MW" "${tr[@]}" --steps 8 --override steps --resume auto --out "$T/I" >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 0 ] && grep -q "resumed from .*step-00000004.mwck at step 4" "$T/out" &&
  grep -q "resuming from the older .*step-00000004.mwck.*step-00000006.mwck: checksum mismatch" "$T/err" &&
  pass "newest invalid: resumes from the older valid one and names both on stderr" ||
  fail "newest invalid: rc $rc, $(cat "$T/err") $(grep resum "$T/out")"
for s in 2 4 6; do head -c 3000 "$T/I2/step-0000000$s.mwck" >"$T/cut" && mv "$T/cut" "$T/I2/step-0000000$s.mwck"; done
expect_error 1 "every checkpoint invalid: refused, not a restart from step 0" -- "$MW" "${tr[@]}" --resume auto --out "$T/I2"
grep -q "step-00000006.mwck: truncated.*step-00000004.mwck: truncated.*step-00000002.mwck: truncated" "$T/err" &&
  pass "the refusal names each file and why" || fail "message: $(cat "$T/err")"
[ "$(ls "$T/I2" | wc -l)" -eq 3 ] && pass "and writes nothing" || fail "files after refusal: $(ls "$T/I2")"
mkdir -p "$T/E" && echo notes >"$T/E/README"
"$MW" "${tr[@]}" --steps 2 --resume auto --out "$T/E" >"$T/out" 2>&1 && grep -q "starting from step 0" "$T/out" &&
  [ -f "$T/E/step-00000002.mwck" ] && pass "a folder without checkpoint files: a fresh start" ||
  fail "fresh start: $(tail -2 "$T/out")"

echo "-- --stop-at needs --out; a refused budget creates nothing (items 4, 5)"
expect_error 1 "--stop-at without --out" -- "$MW" "${tr[@]}" --steps 4 --stop-at 2
expect_error 2 "a plan over --budget" -- "$MW" "${tr[@]}" --steps 2 --budget 1MiB --out "$T/a/b/c" --json-log "$T/b.jsonl"
[ ! -e "$T/a" ] && [ ! -e "$T/b.jsonl" ] && pass "nothing created: no --out directories, no JSON log" ||
  fail "created: $(ls "$T" | tr '\n' ' ')"

echo "-- checkpoint names beyond 8 digits (item 7)"
"$MW" "${tr[@]}" --steps 2 --out "$T/W" >/dev/null 2>&1
mv "$T/W/step-00000002.mwck" "$T/W/step-1000000002.mwck"
expect_error 1 "a fresh run into an --out holding a 10-digit step" -- "$MW" "${tr[@]}" --steps 2 --out "$T/W"
"$MW" export --ckpt "$T/W" --out "$T/w.safetensors" >"$T/out" 2>&1 && grep -q "step-1000000002.mwck" "$T/out" &&
  pass "--ckpt DIR takes the 10-digit checkpoint" || fail "--ckpt DIR: $(cat "$T/out")"

echo "-- --out lock and live runs' temporaries (item 13)"
"$MW" "${tr[@]}" --steps 1000000 --save-every 1000000 --out "$T/L" >"$T/lout" 2>&1 &
lpid=$!
bg+=("$lpid")
for _ in $(seq 1 100); do [ -s "$T/L/.memwall.lock" ] && break; sleep 0.1; done
expect_error 1 "a second run into a locked --out" -- "$MW" "${tr[@]}" --steps 2 --resume auto --out "$T/L"
has "$T/err" "another memwall run (pid $lpid" "the refusal names the other process"
kill "$lpid" 2>/dev/null
wait "$lpid" 2>/dev/null
"$MW" "${tr[@]}" --steps 2 --out "$T/L" >"$T/out" 2>&1 && pass "the lock is free once its holder is gone" ||
  fail "after the holder: $(tail -1 "$T/out")"
sleep 600 &
spid=$!
bg+=("$spid")
dead=$(sh -c 'echo $$')
: >"$T/L/.step-00000009.mwck.tmp.$spid"
: >"$T/L/.step-00000008.mwck.tmp.$dead"
"$MW" "${tr[@]}" --steps 4 --override steps --resume auto --out "$T/L" >"$T/out" 2>&1 || fail "resume for pruning: $(tail -1 "$T/out")"
[ -e "$T/L/.step-00000009.mwck.tmp.$spid" ] && [ ! -e "$T/L/.step-00000008.mwck.tmp.$dead" ] &&
  pass "pruning keeps a live process's temporary, removes a dead one's" || fail "temporaries: $(ls -a "$T/L")"
kill "$spid" 2>/dev/null

[ $fails -eq 0 ] && echo "cli_resume: all passed" || echo "cli_resume: $fails failed"
[ $fails -eq 0 ]
