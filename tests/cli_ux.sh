#!/usr/bin/env bash
# End-to-end tests of the CLI as a newcomer meets it (issue 11, items 6, 14-17, 19, 20 and the
# carried estimate/plan items): --threads limits, help with placeholders and defaults, the tokenizer
# rule, progress on stderr, plan's verdict on --budget, estimate's labels, train lines planned as
# they stand, the timeline's format and axis, and examples that write under ignored folders.
# Usage: tests/cli_ux.sh build/memwall. Exits non-zero when any check fails.
set -u
MW=$(realpath "${1:-build/memwall}")
REPO=$(dirname "$(dirname "$(realpath "$0")")")
T=$(mktemp -d /tmp/mw_ux_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error
peak_of() { grep -o '"peak_bytes": [0-9]*' | head -1 | sed 's/.*: //'; }

cat /usr/share/common-licenses/{GPL-3,Apache-2.0} >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/c" >/dev/null || { echo "prepare failed"; exit 1; }

echo "-- item 6: --threads is checked the same way on every command"
echo "x" >"$T/x.txt"
expect_error 1 "prepare --threads 100000 (was a segfault in libgomp)" -- "$MW" prepare --in "$T/x.txt" --out "$T/p" --threads 100000
[ ! -e "$T/p.train.bin" ] && pass "nothing written" || fail "prepare --threads 100000 wrote $T/p.train.bin"
tf=$fails
for cmd in "train --data $T/c" "bench" "estimate" "plan" "tokenize" "detokenize" "eval --data $T/c --ckpt $T/none" \
  "sample --ckpt $T/none"; do
  for n in 1025 -1; do
    "$MW" $cmd --threads $n </dev/null >"$T/out" 2>"$T/err"
    rc=$?
    [ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^memwall: --threads must be in 0..1024" "$T/err" ||
      fail "${cmd%% *} --threads $n: exit $rc, $(cat "$T/err")"
  done
done
[ $fails -eq $tf ] && pass "train, bench, estimate, plan, tokenize, detokenize, eval, sample: --threads 1025 and -1 refused alike"
"$MW" estimate --threads 1024 --json >/dev/null && "$MW" estimate --threads 0 --json >/dev/null &&
  "$MW" prepare --in "$T/x.txt" --out "$T/p" --threads 64 --val-fraction 0 >/dev/null &&
  pass "--threads 0, 64 and 1024 accepted" || fail "--threads in range refused"

echo "-- item 14: help shows placeholders and the defaults actually used; one tokenizer rule"
"$MW" help train >"$T/h"
for want in "--batch N " "(default 4)" "--seq N " "(default 64)" "--lr X " "(default 0.0003)" "--budget SIZE" \
  "--preset NAME " "(default gpt2-tiny)" "--recompute POLICY" "(default none)" "--data PREFIX" "--out DIR" \
  "--resume FILE|DIR|auto" "--init hf:PATH" "--seed N " "(default 1337)"; do
  grep -qF -- "$want" "$T/h" || fail "help train lacks '$want'"
done
grep -E -- '^  --batch N +.*\(default 4\)$' "$T/h" >/dev/null && pass "help train: $(grep -E -- '^  --batch' "$T/h")" ||
  fail "help train --batch line: $(grep -- '--batch' "$T/h")"
# every option line of every command has a placeholder, unless it is a flag
bad=0
for c in train bench estimate plan prepare verify export sample eval tokenize detokenize; do
  "$MW" help "$c" | grep -E '^  --' | grep -vE '^  --(json|published|search|sp|split-blank-lines|skip-unreadable|append|reset-optimizer) ' | grep -vE '^  --[a-z0-9-]+ [A-Za-z|:.,-]+ ' &&
    bad=1
done
[ $bad -eq 0 ] && pass "every valued option of every command shows a placeholder" || fail "options without a placeholder (above)"
# the printed defaults are the ones used: estimate with them given equals estimate without them
d_b=$("$MW" help estimate | grep -E '^  --batch ' | grep -o 'default [0-9]*' | sed 's/default //')
d_t=$("$MW" help estimate | grep -E '^  --seq ' | grep -o 'default [0-9]*' | sed 's/default //')
d_p=$("$MW" help estimate | grep -E '^  --preset ' | grep -o 'default [a-z0-9-]*' | sed 's/default //')
a=$("$MW" estimate --json | peak_of)
b=$("$MW" estimate --batch "$d_b" --seq "$d_t" --preset "$d_p" --json | peak_of)
c=$("$MW" estimate --batch $((d_b + 1)) --json | peak_of)
[ -n "$a" ] && [ "$a" = "$b" ] && [ "$a" != "$c" ] && pass "help's defaults (B=$d_b T=$d_t $d_p) are estimate's ($a bytes)" ||
  fail "help defaults B=$d_b T=$d_t $d_p: $a vs $b"
"$MW" help eval | grep -E '^  --batch N .*\(default 0\)' | grep -q "checkpoint" &&
  pass "help eval: --batch 0 = the checkpoint's" || fail "help eval --batch: $("$MW" help eval | grep -- '--batch')"
for c in prepare tokenize detokenize; do
  "$MW" help "$c" | grep -E '^  --tokenizer NAME .*\(default bytes\)$' >/dev/null || fail "help $c: tokenizer default not bytes"
done
for c in sample eval; do
  "$MW" help "$c" | grep -E '^  --tokenizer NAME .*\(default auto\)$' >/dev/null || fail "help $c: tokenizer default not auto"
done
[ "$(printf 'Hi' | "$MW" tokenize)" = "72 105" ] && [ "$(echo "72 105" | "$MW" detokenize)" = "Hi" ] &&
  pass "tokenize and detokenize default to bytes, as prepare does" || fail "tokenize default: $(printf 'Hi' | "$MW" tokenize)"
grep -q "The tokenizer is bytes" "$REPO/README.md" && pass "README states the tokenizer rule" || fail "README: no tokenizer rule"

echo "-- item 15: progress on stderr, never on stdout"
"$MW" train --data "$T/c" --steps 3 --seq 16 --out "$T/run" --eval-batches 4 >"$T/out" 2>"$T/err" || fail "train: $(cat "$T/err")"
[ ! -s "$T/err" ] && pass "a quick run off a terminal prints no progress lines" || fail "progress lines in a quick run: $(cat "$T/err")"
MEMWALL_PROGRESS_SECONDS=0 "$MW" train --data "$T/c" --steps 3 --seq 16 --eval-batches 4 >"$T/out" 2>"$T/err" ||
  fail "train: $(cat "$T/err")"
grep -q "validation 4/4" "$T/err" && ! grep -q "validation" "$T/out" &&
  pass "train's final validation reports its batches on stderr: $(tail -1 "$T/err")" || fail "validation progress: $(cat "$T/err")"
MEMWALL_PROGRESS_SECONDS=0 "$MW" eval --ckpt "$T/run" --data "$T/c" --eval-batches 5 --json >"$T/out" 2>"$T/err"
[ "$(wc -l <"$T/out")" -eq 1 ] && grep -q '^{"loss": ' "$T/out" && grep -q "eval: batches 5/5" "$T/err" &&
  pass "eval --json: one JSON line on stdout, batches on stderr" || fail "eval progress: $(cat "$T/out" "$T/err")"
MEMWALL_PROGRESS_SECONDS=0 "$MW" bench --steps 2 --warmup 1 --seq 16 --json >"$T/out" 2>"$T/err"
[ "$(wc -l <"$T/out")" -eq 1 ] && grep -q '^{"tokens_per_s": ' "$T/out" && grep -q "bench: step (warm-up included) 3/3" "$T/err" &&
  pass "bench --json: one JSON line on stdout, its steps on stderr" || fail "bench progress: $(cat "$T/out" "$T/err")"
if command -v script >/dev/null; then # on a terminal: one line, updated in place, erased at the end
  script -qc "MEMWALL_PROGRESS_SECONDS=0 '$MW' eval --ckpt '$T/run' --data '$T/c' --eval-batches 30 --json" /dev/null >"$T/tty" 2>&1
  grep -q $'\r\033\[K  eval: batches' "$T/tty" && [ "$(grep -c 'eval: batches' "$T/tty")" -eq 1 ] &&
    grep -q $'\r\033\[K{"loss"' "$T/tty" && pass "on a terminal the progress line updates in place and is erased" ||
    fail "terminal progress: $(od -c "$T/tty" | head -5)"
fi

echo "-- item 16: plan says whether it fits --budget, and exits 2 when it does not"
"$MW" plan --budget 1MiB >"$T/out" 2>"$T/err"
rc=$?
[ $rc -eq 2 ] && grep -q "budget 1.00 MiB: DOES NOT FIT" "$T/out" && pass "plan over budget -> exit 2: $(tail -1 "$T/out")" ||
  fail "plan over budget: exit $rc, $(tail -2 "$T/out")"
"$MW" plan --budget 1MiB --json >"$T/out"
rc=$?
[ $rc -eq 2 ] && grep -q '"fits": false' "$T/out" && pass "plan --json over budget: \"fits\": false, exit 2" || fail "plan --json: exit $rc"
"$MW" plan --budget 1GiB >"$T/out" && grep -q "budget 1.00 GiB: fits" "$T/out" && pass "plan within budget: exit 0, $(tail -1 "$T/out")" ||
  fail "plan within budget: $(tail -1 "$T/out")"

echo "-- item 17: estimate's labels and its verdict when nothing fits"
"$MW" estimate --layers 96 --heads 8 --batch 1 --seq 8 >"$T/out"
head -1 "$T/out" | grep -q "custom (gpt2-tiny with --layers 96 --heads 8) L=96" && ! head -1 "$T/out" | grep -q "gpt2-tiny L=" &&
  pass "custom shape: $(head -1 "$T/out" | cut -d'|' -f2)" || fail "label: $(head -1 "$T/out")"
! head -1 "$T/out" | grep -qE "steps|seed|accum" && pass "no steps, seed or accum in estimate's configuration line" ||
  fail "estimate config line: $(head -1 "$T/out")"
"$MW" estimate --preset gpt2 --batch 1 --seq 8 | head -1 | grep -q "| gpt2 L=12" && pass "a preset as given keeps its name" ||
  fail "preset label: $("$MW" estimate --preset gpt2 --batch 1 --seq 8 | head -1)"
"$MW" estimate --budget 1MiB >"$T/out"
rc=$?
[ $rc -eq 2 ] && grep -q "even B=1 does not fit: it needs 16.43 MiB, 15.43 MiB more than the budget" "$T/out" &&
  ! grep -q "fits is 0" "$T/out" && pass "nothing fits: $(grep 'B=1' "$T/out" | sed 's/^ *//')" ||
  fail "nothing fits (exit $rc): $(grep budget "$T/out")"

echo "-- carried: estimate and plan take a train command line as it stands"
tl=(--data "$T/c" --batch 2 --seq 32 --steps 2 --seed 3 --lr 1e-3 --warmup 1 --eval-every 1 --eval-batches 2 --log-every 1
  --out "$T/tl/run" --save-every 1 --keep 2 --json-log "$T/tl.jsonl" --stop-at 2)
"$MW" estimate "${tl[@]}" --json >"$T/out" 2>"$T/err"
rc=$?
est=$(peak_of <"$T/out")
[ $rc -eq 0 ] && [ ! -e "$T/tl" ] && [ ! -e "$T/tl.jsonl" ] && grep -q "note: estimate ignores" "$T/err" &&
  pass "estimate accepts train's options, writes nothing: $(cat "$T/err")" || fail "estimate train line: exit $rc, $(cat "$T/err")"
"$MW" plan "${tl[@]}" --json >"$T/out" 2>/dev/null && [ "$(peak_of <"$T/out")" = "$est" ] || fail "plan of the train line"
"$MW" estimate "${tl[@]}" --resume auto --init "" --json >/dev/null 2>"$T/err"
[ $? -eq 1 ] && grep -q "init expects hf:" "$T/err" && pass "--init is not ignored (an empty --init is refused as train refuses it)" || fail "estimate --init ''"
"$MW" train "${tl[@]}" >/dev/null 2>&1 || fail "train of the same line"
got=$(tail -1 "$T/tl.jsonl" | grep -o '"plan_peak_bytes": [0-9]*' | sed 's/.*: //')
[ -n "$est" ] && [ "$est" = "$got" ] && pass "the same line: estimate $est == train's plan $got" || fail "estimate $est vs train $got"
"$MW" prepare --tokenizer gpt2 --in "$T/x.txt" --out "$T/g" --val-fraction 0 >/dev/null 2>&1 &&
  expect_error 1 "estimate --data with a vocabulary the model lacks (as train refuses)" -- "$MW" estimate --data "$T/g"
grep -q "vocabulary of 50257" "$T/err" || fail "estimate --data: not the vocabulary: $(cat "$T/err")"
expect_error 1 "estimate --data of a missing file" -- "$MW" estimate --data "$T/nope"
grep -q "nope.train.bin" "$T/err" || fail "estimate --data of a missing file: $(cat "$T/err")"
"$MW" help estimate | grep -q "also accepts every option of train" && pass "help estimate says so" || fail "help estimate"

echo "-- item 19 and carried: the timeline is SVG with round ticks; plan's rows name the op"
expect_error 1 "plan --timeline x.png" -- "$MW" plan --timeline "$T/x.png"
[ ! -e "$T/x.png" ] && [ ! -e "$T/x.png.tmp" ] && pass "no .png written" || fail "a .png was written"
"$MW" plan --preset gpt2 --batch 4 --seq 256 --timeline "$T/sub/dir/p.svg" >/dev/null && [ -s "$T/sub/dir/p.svg" ] &&
  pass "--timeline creates its folder" || fail "--timeline into a new folder"
ticks=$(grep -o '<text class="ytick"[^>]*>[^<]*' "$T/sub/dir/p.svg" | sed 's/.*>//' | tr '\n' ',')
echo "$ticks" | awk -F, '{ n = NF - 1; if (n < 3) exit 1; split($2, a, " "); s = a[1]; m = s; while (m >= 10) m /= 10; while (m < 1) m *= 10;
  if (m != 1 && m != 2 && m != 5) exit 1; for (i = 1; i <= n; i++) { split($i, b, " "); if (b[2] != a[2] || b[1] != (i - 1) * s) exit 1 } }' &&
  pass "SVG y ticks at round 1-2-5 steps: $ticks" || fail "SVG ticks: $ticks"
"$MW" plan --batch 1 --seq 8 >"$T/out"
grep -q "^fwd 0 ln1+qkv " "$T/out" && grep -q "^fwd 3 fc proj " "$T/out" && grep -q "^bwd 0 " "$T/out" &&
  [ "$(grep -E '^(fwd|bwd) ' "$T/out" | awk '{ print $1, $2, $3, $4 }' | sort | uniq -d | wc -l)" -eq 0 ] &&
  pass "every forward and backward row names its op ($(grep -c '^fwd' "$T/out") fwd rows, no two alike)" ||
  fail "plan rows: $(grep -E '^(fwd|bwd) 0' "$T/out" | cut -c1-24 | tr '\n' ',')"

echo "-- item 20: the examples of README.md and docs/commands.md write under ignored folders"
if git -C "$REPO" rev-parse >/dev/null 2>&1; then
  ign=0
  for f in runs/plan.svg runs/run.jsonl runs/a/step-00000001.mwck; do
    git -C "$REPO" check-ignore -q "$f" || { fail "$f is not ignored by git"; ign=1; }
  done
  [ $ign -eq 0 ] && pass "runs/ is ignored by git"
  outs=$(cat "$REPO/README.md" "$REPO/docs/commands.md" | grep -oE -- '--(timeline|json-log|out) [^ ]+' | awk '{ print $2 }' | sort -u)
  bad=0
  for o in $outs; do
    case "$o" in FILE* | DIR* | PREFIX* | data/* | runs/*) ;; *) fail "an example writes $o outside data/ and runs/"; bad=1 ;; esac
  done
  [ $bad -eq 0 ] && pass "the examples' --timeline, --json-log and --out write under data/ or runs/ ($(echo $outs))"
fi

echo
[ $fails -eq 0 ] && echo "cli_ux: all passed" || echo "cli_ux: $fails FAILED"
[ $fails -eq 0 ]
