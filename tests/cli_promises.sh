#!/usr/bin/env bash
# End-to-end tests of the CLI's own promises (issue 30, items 7, 8, 15, 18 and 22): no option is
# dropped however many are given, the JSON log stays JSON after a resume with long lines, a
# --stop-at is never trained past, logs under mpirun, and the smaller things (one key per JSON
# object, help without doubled defaults, refusals before the header, plurals).
# Usage: tests/cli_promises.sh build/memwall. Exits non-zero when any check fails.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_promises_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error
# has FILE TEXT WHAT: FILE contains TEXT (fixed string)
has() { grep -qF -- "$2" "$1" && pass "$3" || fail "$3: '$2' not in $(head -c 600 "$1")"; }

cat /usr/share/common-licenses/{GPL-2,GPL-3} >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
tr=(train --data "$T/d" --threads 1 --batch 2 --seq 16 --lr 1e-3 --log-every 100)

echo "-- item 7: an option after the 128th counts as given"
ins=()
for i in $(seq 130); do
  echo "document $i" >"$T/in$i.txt"
  ins+=(--in "$T/in$i.txt")
done
"$MW" prepare "${ins[@]}" --shard-tokens 1000000 --val-fraction 0 --out "$T/many" >"$T/out" 2>&1 &&
  [ -f "$T/many.manifest.json" ] && [ ! -e "$T/many.train.bin" ] &&
  pass "130 --in, then --shard-tokens: a sharded set, as --shard-tokens promises" ||
  fail "130 --in then --shard-tokens: $(ls "$T" | grep many) $(tail -1 "$T/out")"
rep=()
for i in $(seq 130); do rep+=(--threads 1); done
"$MW" "${tr[@]}" "${rep[@]}" --optim adafactor --steps 1 >"$T/out" 2>&1 &&
  grep -q "Adafactor lr 0.001 .* beta1 0 decay-rate -0.8 eps 1e-30 .* wd 0 " "$T/out" &&
  pass "train: --optim adafactor after 130 options gets Adafactor's defaults" ||
  fail "--optim adafactor after 130 options: $(grep -i 'lr 0.001' "$T/out")"
"$MW" estimate "${rep[@]}" --log-every 5 --eval-every=3 --log-every 6 --eval-every=4 >"$T/out" 2>"$T/err" &&
  [ "$(cat "$T/err")" = "memwall: note: estimate ignores --log-every, --eval-every (no effect on memory)" ] &&
  pass "estimate's note names each ignored option once, given twice (with =VALUE too) after 130 options" ||
  fail "estimate's ignored note: $(cat "$T/err")"

echo "-- item 8: every line of --json-log is JSON after a resume, whatever the lines' length"
"$MW" "${tr[@]}" --steps 4 --stop-at 2 --out "$T/R" --json-log "$T/R.jsonl" >"$T/out" 2>&1 ||
  fail "first run: $(tail -2 "$T/out")"
pad=$(head -c 3000 /dev/zero | tr '\0' x)
# an end line of a many-rank run is long (1.2 KB at 6 ranks); another event line too
echo "{\"event\": \"end\", \"steps\": 2, \"pad\": \"$pad\"}" >>"$T/R.jsonl"
echo "{\"event\": \"note\", \"pad\": \"$pad\"}" >>"$T/R.jsonl"
"$MW" "${tr[@]}" --resume auto --out "$T/R" --json-log "$T/R.jsonl" >"$T/out" 2>&1 || fail "resume: $(tail -2 "$T/out")"
bad=$(grep -vc '^{.*}$' "$T/R.jsonl")
if command -v jq >/dev/null; then jq -c . "$T/R.jsonl" >/dev/null 2>&1 || bad=$((bad + 1)); fi
[ "$bad" -eq 0 ] && [ "$(grep -c '"event": "end"' "$T/R.jsonl")" -eq 1 ] &&
  [ "$(grep -c "\"event\": \"note\", \"pad\": \"$pad\"}" "$T/R.jsonl")" -eq 1 ] &&
  [ "$(json_field "$T/R.jsonl" step | tr '\n' ' ')" = "1 2 3 4 " ] &&
  pass "after the resume: steps 1-4 once, one end line, the long event line whole, every line JSON" ||
  fail "the resumed log: $bad bad lines; $(cut -c1-80 "$T/R.jsonl")"

echo "-- item 15: --stop-at at or before the resumed step trains nothing"
ls "$T/R" >"$T/before"
"$MW" "${tr[@]}" --steps 4 --stop-at 2 --out "$T/S" --save-every 1 --keep 2 >"$T/out" 2>&1 ||
  fail "run to step 2: $(tail -2 "$T/out")"
ls "$T/S" >"$T/before"
"$MW" "${tr[@]}" --resume auto --out "$T/S" --stop-at 2 --json-log "$T/S.jsonl" >"$T/out" 2>&1 &&
  grep -q "is at step 2, which is --stop-at 2: nothing to train" "$T/out" && ! grep -q "^step\|^  saved" "$T/out" &&
  [ "$(ls "$T/S")" = "$(cat "$T/before")" ] && [ ! -s "$T/S.jsonl" ] &&
  pass "--stop-at 2 at step 2: exit 0, says so, trains, saves and prunes nothing" ||
  fail "--stop-at at the resumed step: $(ls "$T/S" | tr '\n' ' ') $(tail -3 "$T/out")"
expect_error 1 "--stop-at 1 before the resumed step 2 is refused" -- "$MW" "${tr[@]}" --resume auto --out "$T/S" --stop-at 1
[ "$(ls "$T/S")" = "$(cat "$T/before")" ] && pass "and nothing in --out changed" || fail "--out changed: $(ls "$T/S")"

echo "-- item 22: refusals come before the header"
"$MW" prepare --tokenizer gpt2 --vocab-dir "$(dirname "$0")/../data/gpt2" --in "$T/corpus.txt" --out "$T/g" >/dev/null ||
  fail "prepare with gpt2"
expect_error 1 "GPT-2 tokens for a model of --vocab 256" -- "$MW" "${tr[@]/$T\/d/$T/g}" --steps 1
has "$T/err" "give --vocab 50257" "the refusal suggests --vocab 50257"
[ ! -s "$T/out" ] && pass "and comes before the header and the plan" || fail "printed before the refusal: $(cat "$T/out")"
expect_error 1 "--recompute auto without --budget" -- "$MW" "${tr[@]}" --steps 1 --recompute auto
[ ! -s "$T/out" ] && pass "refused before the header and the plan" || fail "printed before the refusal: $(cat "$T/out")"
expect_error 2 "a plan over --budget" -- "$MW" "${tr[@]}" --steps 1 --budget 1MiB
[ ! -s "$T/out" ] && pass "refused before the header and the plan" || fail "printed before the refusal: $(cat "$T/out")"
expect_error 2 "bench: a plan over --budget" -- "$MW" bench --steps 1 --budget 1MiB
[ ! -s "$T/out" ] && pass "refused before bench's header" || fail "bench printed before the refusal: $(cat "$T/out")"

echo "-- item 22: the smaller things"
"$MW" bench --steps 1 --warmup 0 --json >"$T/b.json" 2>/dev/null && [ "$(grep -o '"peak_rss_bytes"' "$T/b.json" | wc -l)" -eq 1 ] &&
  pass "bench --json: peak_rss_bytes once in its object" || fail "bench --json: $(grep -o '"peak_rss_bytes": [0-9]*' "$T/b.json")"
tf=$fails
for cmd in train bench estimate plan prepare export sample eval; do
  "$MW" help $cmd >"$T/h"
  grep -n "(default .*(default \|SIZE .*(default [0-9]\{7,\})" "$T/h" | while read -r l; do echo "$cmd: $l"; done >"$T/dd"
  [ -s "$T/dd" ] && fail "help $cmd: a doubled or unreadable default: $(cat "$T/dd")"
done
[ $fails -eq $tf ] && pass "help: no option shows two defaults, no size as a bare byte count"
"$MW" help prepare | grep -q -- "--memory SIZE .*(default 256MiB)$" && pass "prepare --memory: (default 256MiB)" ||
  fail "prepare --memory's default: $("$MW" help prepare | grep -- --memory)"
"$MW" help | head -1 | grep -q "train GPT-2 and Llama models" && pass "the top line names both families" ||
  fail "top line: $("$MW" help | head -1)"
"$MW" help export | grep -q -- "--format NAME .*GPT-2 or Llama" && pass "export --format: GPT-2 or Llama" ||
  fail "export --format: $("$MW" help export | grep -- --format)"
"$MW" estimate --preset llama-tiny | head -1 | grep -q "KV=2 F=352 untied" && "$MW" estimate --preset smollm-135m |
  head -1 | grep -q "F=1536 tied" && "$MW" help train | grep -q -- "--tied N .*llama-tiny.* untied" &&
  pass "llama-tiny's head is said untied (header and help), smollm-135m's tied" ||
  fail "tied: $("$MW" estimate --preset llama-tiny | head -1)"
echo "one" >"$T/one.txt"
"$MW" prepare --in "$T/one.txt" --out "$T/one" --val-fraction 0 --threads 1 | grep -q "prepare: 1 document, .* 4 tokens .* on 1 thread," &&
  pass "prepare: 1 document, on 1 thread" || fail "prepare plurals: $("$MW" prepare --in "$T/one.txt" --out "$T/one2" --val-fraction 0 --threads 1)"
"$MW" "${tr[@]}" --steps 1 --out "$T/P" --save-every 1 >"$T/out" 2>&1 && grep -q "accum=1 | 1 step |" "$T/out" &&
  grep -q "every 1 step and" "$T/out" && grep -q "^done: 1 step in" "$T/out" && pass "train: 1 step, every 1 step, done: 1 step" ||
  fail "train plurals: $(grep -E 'step' "$T/out" | head -3)"
# the timeline's disk labels: each names its op, stands clear of every bar of its lane, and the lane's
# total in the margin is the optimizer step's (estimate's per step, over --accum micro-batches)
pl=(--preset gpt2-tiny --batch 2 --seq 32 --offload all --accum 2)
"$MW" plan "${pl[@]}" --timeline "$T/tl.svg" >/dev/null || fail "plan --offload all --timeline"
"$MW" estimate "${pl[@]}" >"$T/est"
rd=$(grep "read per optimizer step" "$T/est" | awk '{ print $4, $5 }')
wr=$(grep "written per optimizer step" "$T/est" | awk '{ print $2, $3 }')
verdict=$(awk -v rd="$rd" -v wr="$wr" '
  /<g id="lane-disk-/ { lane = ($0 ~ /read/) ? "read" : "write"; nb = 0; nl = 0; next }
  /<\/g>/ { if (lane != "") { for (i = 0; i < nl; i++) for (j = 0; j < nb; j++)
               if (lx0[i] < bx1[j] && lx1[i] > bx0[j]) bad = bad " overlap:" lt[i];
             for (i = 0; i < nl; i++) if (!(lt[i] in ops)) bad = bad " unnamed:" lt[i] }
           lane = ""; next }
  lane != "" && /<rect / { match($0, /x="[0-9.]+"/); x = substr($0, RSTART + 3, RLENGTH - 4) + 0
           match($0, /width="[0-9.]+"/); wd = substr($0, RSTART + 7, RLENGTH - 8) + 0
           bx0[nb] = x; bx1[nb] = x + wd; nb++
           match($0, /<title>[^:]*:/); ops[substr($0, RSTART + 7, RLENGTH - 8)] = 1; next }
  lane != "" && /<text / && !/disk-total/ && !/>disk (read|write)</ {
           match($0, /x="[0-9.]+"/); x = substr($0, RSTART + 3, RLENGTH - 4) + 0
           match($0, />[^<]*<\/text>/); t = substr($0, RSTART + 1, RLENGTH - 8)
           sub(/ [0-9.]+ [KMG]?i?B$/, "", t); n = length(t) + 10
           if ($0 ~ /text-anchor="end"/) { lx0[nl] = x - 6 * n; lx1[nl] = x } else { lx0[nl] = x; lx1[nl] = x + 6 * n }
           lt[nl] = t; nl++; labels++; next }
  lane != "" && /disk-total/ { match($0, /<\/title>[^<]*/); tot = substr($0, RSTART + 8, RLENGTH - 8)
           want = (lane == "read" ? rd : wr) " per step"; if (tot != want) bad = bad " total:" tot "!=" want; totals++ }
  END { if (labels == 0) bad = bad " no labels"; if (totals != 2) bad = bad " totals:" totals; print bad == "" ? "ok" : bad }' "$T/tl.svg")
[ "$verdict" = ok ] && pass "timeline: disk labels name their op, clear of the bars; margin totals = estimate's per step ($rd read, $wr written)" ||
  fail "timeline disk labels:$verdict"

echo "-- item 18: logs under mpirun"
if ! mpi_ok; then
  fail "mpirun or the MPI build is missing (scripts/install-deps.sh installs OpenMPI)"
else
  mpi_env # (lib_cli.sh)
  mpirun -np 2 --oversubscribe "$MW" "${tr[@]}" --zero 1 --steps 4 --save-every 2 --out "$T/M" --log-every 1 >"$T/mout" 2>"$T/merr"
  rc=$?
  [ $rc -eq 0 ] && ! grep -q $'\r\|\033' "$T/mout" && [ "$(grep -c '^step [1-4]/4 ' "$T/mout")" -eq 4 ] &&
    pass "2 ranks into a file: a line per step, no carriage return or erase code (OpenMPI's pseudo-terminal)" ||
    fail "2 ranks into a file: exit $rc, $(cat -A "$T/mout" | grep step | head -c 400)"
  [ "$(grep -c "^  saved $T/M/step-0000000[24].mwck" "$T/mout")" -eq 2 ] && pass "and the two 'saved' lines" ||
    fail "'saved' lines under mpirun: $(grep saved "$T/mout")"
  mpirun -np 2 --oversubscribe "$MW" "${tr[@]}" --zero 1 --steps 2 --progress tty >"$T/mout" 2>"$T/merr" &&
    grep -q $'\r\033\[Kstep 2/2' "$T/mout" && pass "--progress tty draws in place under mpirun when asked" ||
    fail "--progress tty under mpirun: $(cat -A "$T/mout" | grep step | head -c 300)"
  mpirun -np 3 --oversubscribe "$MW" "${tr[@]}" --zero 1 --steps 1 --budget 1MiB >"$T/mout" 2>"$T/merr"
  rc=$?
  [ $rc -eq 2 ] && [ "$(grep -c '^memwall:' "$T/merr")" -eq 1 ] && grep -q "^memwall: .*the plan needs" "$T/merr" &&
    ! grep -q MPI_ABORT "$T/merr" && [ ! -s "$T/mout" ] &&
    pass "3 ranks over --budget: exit 2, the refusal once, before the header, no MPI_ABORT banner" ||
    fail "3 ranks over --budget: exit $rc, stdout $(head -c 200 "$T/mout"), stderr $(grep -c '^memwall:' "$T/merr") memwall lines: $(head -c 600 "$T/merr")"
  mpirun -np 3 --oversubscribe "$MW" "${tr[@]}" --zero 1 --steps 1 --recompute bogus >"$T/mout" 2>"$T/merr"
  rc=$?
  [ $rc -eq 1 ] && [ "$(grep -c '^memwall:' "$T/merr")" -eq 1 ] && ! grep -q MPI_ABORT "$T/merr" &&
    pass "3 ranks, a bad flag: exit 1, the refusal once" ||
    fail "3 ranks, a bad flag: exit $rc, $(head -c 600 "$T/merr")"
  mpirun -np 3 --oversubscribe "$MW" "${tr[@]}" --zero 1 --steps 1 --data "$T/g" >"$T/mout" 2>"$T/merr"
  rc=$?
  [ $rc -eq 1 ] && [ "$(grep -c '^memwall:' "$T/merr")" -eq 1 ] && grep -q "give --vocab 50257" "$T/merr" &&
    ! grep -q MPI_ABORT "$T/merr" && [ ! -s "$T/mout" ] &&
    pass "3 ranks, data of another vocabulary: exit 1, the refusal once, before the header" ||
    fail "3 ranks, another vocabulary: exit $rc, $(head -c 600 "$T/merr")"
fi

if [ $fails -ne 0 ]; then
  echo "cli_promises: $fails check(s) failed"
  exit 1
fi
echo "cli_promises: all checks passed"
