#!/usr/bin/env bash
# Fingerprints of plans and losses (issue 31, item 4): what memwall plans and computes, asserted
# against tests/ref/fingerprints.txt, so that a change that should move no byte (a refactor, a file
# split) is shown to move none, and one that moves a plan or a loss bit fails here, naming the case.
#
# Usage: tests/cli_fingerprint.sh MEMWALL            check against tests/ref/fingerprints.txt
#        tests/cli_fingerprint.sh MEMWALL --record   write tests/ref/fingerprints.txt anew
#
# A case is one command; its fingerprint is the sha256 of its output with the fields that name
# times, the machine or paths taken out (plan_seconds, ms, tokens/s, peak RSS, the disk engine, the
# kernel's name, auto's timed recomputation choice), and, for training, the sha256 of the last
# checkpoint's bytes and the losses written out (full precision, from --json-log) so that a failure
# shows them. Every case pins --threads 2; the plans and the bits do not depend on the kernel (the
# script checks it: the training cases run again under every --kernel this CPU runs, the disk tier
# under both I/O engines, and must give the same lines), so the reference holds on an AVX-512 CPU
# as on an AVX2-only one. bfloat16 products are pinned to the FMA family's kernels (below).
#
# Changes of a plan or a loss must be deliberate. After one (a new buffer, another summation
# order, a new field in estimate's JSON), re-record with the build that has it:
#     make build/memwall && tests/cli_fingerprint.sh build/memwall --record
# then read `git diff tests/ref/fingerprints.txt`: only the cases the change meant to move may
# differ; say in the commit which ones and why.
set -u
MW=$(realpath "${1:-build/memwall}")
MODE=${2:-check}
ROOT=$(realpath "$(dirname "$0")/..")
REF=$ROOT/tests/ref/fingerprints.txt
case $MODE in check | --record) ;; *) echo "usage: $0 MEMWALL [--record]" >&2; exit 2 ;; esac
T=$(mktemp -d /tmp/mw_fp_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail
# nothing from the environment chooses a kernel, an I/O engine, a fault or the memory seen
unset MEMWALL_KERNEL MEMWALL_AIO MEMWALL_IO_FAULT MEMWALL_AVAILABLE_OVERRIDE MEMWALL_VOCAB_DIR MEMWALL_AMX_REFUSE
export LC_ALL=C
# the kernels this CPU runs, and the best of them whose bfloat16 products give the FMA family's
# bits (every kernel's but a tile engine's, like AMX's, whose sums run in another order by design,
# and which auto may choose for bf16 by timing): the bf16 cases pin it, so that their reference
# holds on every machine
avail=$("$MW" --version 2>&1 | sed -n 's/^kernel [a-z0-9]* (this CPU runs \([^;]*\);.*/\1/p' | tr -d ,)
[ -n "$avail" ] || { echo "--version names no kernels: $("$MW" --version 2>&1)"; exit 1; }
FMA_FAMILY=" portable avx2 avx512 avx512bf16 neon "
fma=portable
for k in $avail; do [[ $FMA_FAMILY == *" $k "* ]] && fma=$k; done
FMA=(--kernel "$fma")
cd "$T" || exit 1 # relative paths only: no temporary folder's name in any output

# ---- normalising ---------------------------------------------------------------------------------
# estimate/plan JSON: times, the disk's measured speed and room (only with --offload-dir), and the
# policies table's "auto" row (its choice rests on op times measured now)
# (the step's predicted compute and overlapped time, both timed now, are taken out whole)
norm_json() {
  sed -E -e 's/, "(predicted_compute_seconds|predicted_step_seconds)": [^,}]*//g' \
    -e 's/"(plan_seconds|predicted_recompute_seconds|predicted_seconds|read_bytes_per_s|write_bytes_per_s|room_bytes|fits_in_room)": [^,}]*/"\1": _/g' \
    -e 's/, "auto": \{[^}]*\}//g'
}
# estimate's text: the same, as lines
norm_text() { grep -v -E '^  planned in |^    auto  |auto.s choice rests on op times|its phases overlapped: max|^ +transfers\) \+ the norm'; }
# train's, eval's JSON: times, RSS, the I/O engine
# (the step's clock, compute_ms and io_*_ms, and its optimizer's part, opt_*, are taken out whole; the weights' CRC, params_crc32c, too:
# the checkpoint's bytes, hashed below, hold the weights)
norm_log() {
  sed -E -e 's/, "(compute_ms|io_busy_ms|io_read_ms|io_write_ms|io_wait_ms)": [^,}]*//g' \
    -e 's/, "opt_(ms|compute_ms|io_busy_ms|io_read_ms|io_write_ms|io_wait_ms)": [^,}]*//g' \
    -e 's/"(ms|tokens_per_s|peak_rss_bytes|seconds)": [^,}]*/"\1": _/g' -e 's/"engine": "[^"]*"/"engine": _/g' \
    -e 's/"params_crc32c": "[0-9a-f]*", //'
}
# train's and eval's text: times, rates, RSS, the kernel's name, the disk tier's file (its name has
# the process id), engine (io_uring or threads) and O_DIRECT (the file system's), io_uring's absence,
# the folder's free space
norm_run() {
  sed -E -e '/^  disk tier: predicted .* overlapping compute/d' -e 's/can give the file [0-9.]+ [KMGT]?i?B/can give the file _/' -e 's/^  disk tier: [^ ]+ \(([0-9.]+ [KMGT]?i?B), [^,]+, .*\)$/  disk tier: _ (\1, _, _)/' \
    -e '/^  disk tier: .*I\/O threads instead$/d' -e 's/[0-9.]+ ms\b/_ ms/g' -e 's/[0-9.]+ tok\/s/_ tok\/s/g' -e 's/ETA [0-9hms]+/ETA _/g' \
    -e 's/ in [0-9.]+ s\b/ in _ s/g' -e 's/\| [0-9.]+ s$/| _ s/' -e 's/peak RSS [0-9.]+ [KMGT]?i?B/peak RSS _/g' \
    -e 's/\| kernel [a-z0-9]+ \|/| kernel _ |/'
}
sha() { sha256sum | cut -c1-64; }

# ---- the cases -----------------------------------------------------------------------------------
# Each appends "NAME FINGERPRINT" to the file $OUT; a command that fails is a failure of its case.
OUT=$T/got
# run_ok NAME CMD...: CMD's stdout into $T/o, stderr into $T/e, its exit status into RC; 0 when that
# is one of $OKRC (default 0; estimate exits 2 when the plan does not fit the budget)
run_ok() {
  local name=$1
  shift
  "$@" >"$T/o" 2>"$T/e"
  RC=$?
  [[ " ${OKRC:-0} " == *" $RC "* ]] && return 0
  fail "case $name: '$*' exited $RC: $(tail -c 300 "$T/e")"
  echo "$name FAILED" >>"$OUT"
  return 1
}
# est NAME ARGS...: estimate --json (every category, the policies, the optimizers, ZeRO's ranks)
est() {
  local name=$1
  shift
  OKRC="0 2" run_ok "$name" "$MW" estimate --threads 2 --json "$@" || return
  echo "$name $({ echo "rc=$RC"; norm_json <"$T/o"; } | sha)" >>"$OUT"
}
# est_text NAME ARGS...: estimate's table, as printed
est_text() {
  local name=$1
  shift
  OKRC="0 2" run_ok "$name" "$MW" estimate --threads 2 "$@" || return
  echo "$name $({ echo "rc=$RC"; norm_text <"$T/o"; } | sha)" >>"$OUT"
}
# pln NAME ARGS...: plan --json (every op's bytes by category, every buffer's offset and lifetime)
pln() {
  local name=$1
  shift
  OKRC="0 2" run_ok "$name" "$MW" plan --threads 2 --json "$@" || return
  echo "$name $({ echo "rc=$RC"; norm_json <"$T/o"; } | sha)" >>"$OUT"
}
# the training data: a made-up text (the same on every machine), bytes tokens
LC_ALL=C awk 'BEGIN { split("the a memory budget plan arena step loss token model layer block weight gradient", w, " ");
  for (i = 1; i <= 3000; i++) { s = ""; for (j = 0; j < 8; j++) s = s w[1 + (i * 7 + j * j * 3 + i % 11) % 14] " "; print i ": " s (i * i) % 997 } }' >corpus.txt
"$MW" prepare --tokenizer bytes --in corpus.txt --out d --threads 2 >prep.out 2>&1 || { echo "prepare failed: $(tail -2 prep.out)"; exit 1; }
TR=(train --data ../d --threads 2 --batch 2 --seq 32 --steps 4 --eval-every 2 --eval-batches 2 --log-every 1 --progress plain)
# trn NAME DIR ARGS...: 4 steps (a validation at 2 and 4) into DIR; the fingerprint covers the JSON
# log, the printed lines and the last checkpoint's bytes; the losses are written out too
trn() {
  local name=$1 dir=$2
  shift 2
  run_ok "$name" "$MW" "${TR[@]}" --out "$dir" --json-log "$dir.jsonl" "$@" || return
  local ck
  ck=$(ls "$dir"/step-*.mwck 2>/dev/null | tail -1)
  [ -n "$ck" ] || { fail "case $name: no checkpoint in $dir"; echo "$name FAILED" >>"$OUT"; return; }
  local losses
  losses=$(grep -o '"\(loss\|val_loss\)": [-0-9.e+]*' "$dir.jsonl" | sed 's/"loss": //; s/"val_loss": /v/' | paste -sd, -)
  echo "$name $({ norm_log <"$dir.jsonl"; norm_run <"$T/o"; sha <"$ck"; } | sha) loss=$losses" >>"$OUT"
}
# evl NAME CKPT ARGS...: eval's loss (JSON and the printed lines)
evl() {
  local name=$1 ck=$2
  shift 2
  run_ok "$name" "$MW" eval --ckpt "$ck" --data ../d --threads 2 --eval-batches 16 --json "$@" || return
  cp "$T/o" "$T/j"
  run_ok "$name" "$MW" eval --ckpt "$ck" --data ../d --threads 2 --eval-batches 16 "$@" || return
  echo "$name $({ norm_log <"$T/j"; norm_run <"$T/o"; } | sha) loss=$(grep -o '"loss": [-0-9.e+]*' "$T/j" | sed 's/.*: //')" >>"$OUT"
}
# smp NAME CKPT ARGS...: the bytes sample writes
smp() {
  local name=$1 ck=$2
  shift 2
  run_ok "$name" "$MW" sample --ckpt "$ck" --threads 2 --tokens 48 --prompt "12: the" "$@" || return
  echo "$name $(cat "$T/o" "$T/e" | sha)" >>"$OUT"
}

# The training cases: $1 is a name suffix, $2 "all" or "some" (under the other kernels: those whose
# bits rest most on the kernel: fp32 and bf16 products of both families, eval, sample; a few
# seconds under ASan), the rest extra flags. Each set runs in a folder of its own under the same
# relative names (../d, g, ...), so that the printed lines, which name them, are the same.
training() {
  local s=$1 all=$2 fp32=""
  shift 2
  local k=("$@")
  # a kernel outside the FMA family: its fp32 products only (its bf16 bits are its own)
  [[ $# -eq 0 || $FMA_FAMILY == *" ${k[-1]} "* ]] || fp32=1
  mkdir -p "run$s" && cd "run$s" || exit 1
  trn "train.gpt2.plain$s" g "${k[@]}"
  [ -z "$fp32" ] && trn "train.gpt2.bf16$s" gh --precision bf16 "${FMA[@]}" "${k[@]}"
  trn "train.llama.plain$s" l --preset llama-tiny "${k[@]}"
  [ -z "$fp32" ] && trn "train.llama.bf16$s" lh --preset llama-tiny --precision bf16 "${FMA[@]}" "${k[@]}"
  [ -z "$fp32" ] && evl "eval.llama.bf16$s" lh/step-00000004.mwck "${FMA[@]}" "${k[@]}"
  smp "sample.llama.seeded$s" l/step-00000004.mwck --seed 7 --top-p 0.9 "${k[@]}"
  if [ "$all" != all ]; then
    cd "$T" || exit 1
    return
  fi
  trn "train.gpt2.recompute-every$s" ge --recompute every:1 "${k[@]}"
  trn "train.gpt2.recompute-blocks$s" gb --recompute blocks:nsfn "${k[@]}"
  trn "train.gpt2.offload-all$s" go --offload all --offload-dir . "${k[@]}"
  trn "train.gpt2.accum2$s" gc --accum 2 --batch 1 "${k[@]}"
  trn "train.gpt2.adamw8bit$s" g8 --optim adamw8bit "${k[@]}"
  trn "train.gpt2.adafactor$s" gf --optim adafactor "${k[@]}"
  trn "train.llama.recompute-selective$s" ls --preset llama-tiny --recompute selective "${k[@]}"
  trn "train.llama.offload-all+every$s" lo --preset llama-tiny --offload all --offload-dir . --recompute every:2 "${k[@]}"
  trn "train.llama.adam4bit$s" l4 --preset llama-tiny --optim adam4bit "${k[@]}"
  trn "train.llama.came$s" lc --preset llama-tiny --optim came "${k[@]}"
  # 2 steps, then 2 more resumed from the checkpoint of step 2: the same bytes as 4 straight steps
  if run_ok "train.gpt2.resume$s" "$MW" "${TR[@]}" --out r --stop-at 2 "${k[@]}"; then
    trn "train.gpt2.resume$s" r --resume auto "${k[@]}"
    grep -q "resumed from .*step-00000002.mwck at step 2 of 4" "$T/o" || fail "case train.gpt2.resume$s: not resumed at step 2: $(head -3 "$T/o")"
    cmp -s r/step-00000004.mwck g/step-00000004.mwck && pass "resumed = straight (train.gpt2.resume$s)" ||
      fail "case train.gpt2.resume$s: 2 + 2 resumed steps differ from 4 straight steps"
  fi
  evl "eval.gpt2$s" g/step-00000004.mwck "${k[@]}"
  smp "sample.gpt2.greedy$s" g/step-00000004.mwck --temperature 0 "${k[@]}"
  smp "sample.gpt2.seeded$s" g/step-00000004.mwck --seed 7 --temperature 0.9 --top-k 40 "${k[@]}"
  cd "$T" || exit 1
}

echo "-- plans (estimate, plan --json)"
: >"$OUT"
G=(--preset gpt2-tiny)
L=(--preset llama-tiny)
for m in gpt2-tiny llama-tiny; do
  a=(--preset "$m")
  pln "plan.$m" "${a[@]}"
  for r in selective full every:2 every:sqrt; do pln "plan.$m.recompute-$r" "${a[@]}" --recompute $r; done
  pln "plan.$m.recompute-blocks" "${a[@]}" --recompute blocks:fnsn
  for o in optimizer optimizer+grads all; do pln "plan.$m.offload-$o" "${a[@]}" --offload $o; done
  pln "plan.$m.offload-all+full" "${a[@]}" --offload all --recompute full
  pln "plan.$m.bf16" "${a[@]}" --precision bf16 "${FMA[@]}"
  pln "plan.$m.bf16+selective" "${a[@]}" --precision bf16 --recompute selective "${FMA[@]}"
  for o in adamw8bit adam4bit adafactor came sgd; do pln "plan.$m.$o" "${a[@]}" --optim $o; done
  pln "plan.$m.b1-t256" "${a[@]}" --batch 1 --seq 256
  pln "plan.$m.b8-t32-accum2" "${a[@]}" --batch 8 --seq 32 --accum 2
  for z in 1 2 3; do pln "plan.$m.zero$z-world4" "${a[@]}" --zero $z --world 4; done
  pln "plan.$m.zero3-world4-offload-optimizer" "${a[@]}" --zero 3 --world 4 --offload optimizer
  pln "plan.$m.zero2-world4-accum2" "${a[@]}" --zero 2 --world 4 --accum 2
  est "estimate.$m" "${a[@]}"
  est "estimate.$m.budget-over" "${a[@]}" --budget 18MiB
  est "estimate.$m.budget-full" "${a[@]}" --budget 18MiB --recompute full
done
pln "plan.gpt2-tiny.shape" "${G[@]}" --layers 3 --heads 2 --dim 64 --vocab 300 --ctx 128 --seq 100 --batch 3
pln "plan.llama-tiny.shape" "${L[@]}" --layers 3 --heads 4 --kv-heads 1 --dim 64 --ffn 160 --tied 1 --seq 48
run_ok "plan.gpt2-tiny.timeline" "$MW" plan "${G[@]}" --threads 2 --recompute every:2 --offload optimizer --timeline tl.svg &&
  echo "plan.gpt2-tiny.timeline $({ norm_run <"$T/o"; cat tl.svg; } | sha)" >>"$OUT"
# large presets: estimate only (measure mode, nothing allocated), and one plan --json of each family
pln "plan.gpt2-xl" --preset gpt2-xl --batch 1 --seq 1024 --recompute every:sqrt
pln "plan.llama2-7b" --preset llama2-7b --batch 1 --seq 512 --offload all --precision bf16 "${FMA[@]}"
for p in gpt2 gpt2-xl llama2-7b llama3-8b; do
  est "estimate.$p" --preset $p
  est "estimate.$p.b8-t512-selective" --preset $p --batch 8 --seq 512 --recompute selective
  est "estimate.$p.full+offload-optimizer" --preset $p --recompute full --offload optimizer
  est "estimate.$p.offload-optimizer+grads" --preset $p --offload optimizer+grads
  est "estimate.$p.offload-all+every2" --preset $p --offload all --recompute every:2
  est "estimate.$p.bf16+adamw8bit" --preset $p --precision bf16 --optim adamw8bit "${FMA[@]}"
  est "estimate.$p.adafactor" --preset $p --optim adafactor
  for z in 1 2 3; do est "estimate.$p.zero$z-world4" --preset $p --zero $z --world 4; done
done
est "estimate.llama2-7b.budget" --preset llama2-7b --budget 24GiB --recompute every:4
est "estimate.llama2-70b.zero3-world64-offload-optimizer" --preset llama2-70b --zero 3 --world 64 --offload optimizer --recompute full
est "estimate.smollm-135m.bf16-came-b16" --preset smollm-135m --precision bf16 --optim came --batch 16 --seq 256 "${FMA[@]}"
est_text "estimate-text.gpt2" --preset gpt2 --batch 4 --seq 64
est_text "estimate-text.llama2-7b.budget" --preset llama2-7b --budget 24GiB --offload optimizer
est_text "estimate-text.llama3-8b.zero3-world4" --preset llama3-8b --zero 3 --world 4 --recompute selective
echo "  $(wc -l <"$OUT") plan cases"

echo "-- tokens (prepare, tokenize)"
echo "prepare.bytes $(cat d.train.bin d.val.bin | sha)" >>"$OUT"
# tok NAME TOKENIZER ARGS...: the ids of tests/ref/tokenizer_text.txt (every script, digits, code,
# JSON); a tokenizer.json that is not here (scripts/fetch-llama-tokenizers.sh) skips its case
tok() {
  local name=$1 t=$2
  shift 2
  if [ "${t#/}" != "$t" ] && [ ! -e "$t" ]; then
    echo "$name SKIPPED" >>"$OUT"
    return
  fi
  run_ok "$name" "$MW" tokenize --threads 2 --tokenizer "$t" "$@" <"$ROOT/tests/ref/tokenizer_text.txt" || return
  echo "$name $(sha <"$T/o")" >>"$OUT"
}
tok tokenize.bytes bytes
tok tokenize.gpt2 gpt2 --vocab-dir "$ROOT/data/gpt2"
tok tokenize.llama2 "$ROOT/data/llama2/tokenizer.json"
tok tokenize.llama3 "$ROOT/data/llama3/tokenizer.json"
if run_ok prepare.gpt2 "$MW" prepare --tokenizer gpt2 --vocab-dir "$ROOT/data/gpt2" --threads 2 --split-blank-lines \
  --in "$ROOT/tests/ref/tokenizer_text.txt" --in corpus.txt --out p2; then
  echo "prepare.gpt2 $(cat p2.train.bin p2.val.bin | sha)" >>"$OUT"
fi

echo "-- losses (train, resume, eval, sample)"
training "" all

# ---- against the reference -----------------------------------------------------------------------
if [ "$MODE" = --record ]; then
  if grep -q " FAILED$" "$OUT"; then echo "not recorded: $fails case(s) failed"; exit 1; fi
  if grep -q " SKIPPED$" "$OUT"; then echo "not recorded: $(grep " SKIPPED$" "$OUT" | cut -d' ' -f1 | paste -sd' ') had no input (scripts/fetch-llama-tokenizers.sh)"; exit 1; fi
  {
    echo "# Fingerprints of plans and losses: tests/cli_fingerprint.sh checks these, one line per case"
    echo "# (NAME SHA256 [loss=the losses, v: a validation loss]). A change here must be deliberate: re-record"
    echo "# with tests/cli_fingerprint.sh build/memwall --record, and say in the commit which cases moved and why."
    cat "$OUT"
  } >"$REF"
  echo "recorded $(wc -l <"$OUT") cases into $REF"
  exit 0
fi

# line_of NAME FILE: the fingerprint of case NAME in FILE (all but the name)
line_of() { awk -v n="$1" '$1 == n { sub(/^[^ ]+ /, ""); print; exit }' "$2"; }
echo "-- against $REF"
[ -f "$REF" ] || { echo "no reference $REF (record it: $0 MEMWALL --record)"; exit 1; }
grep -v '^#' "$REF" >"$T/want"
while read -r name rest; do
  got=$(line_of "$name" "$OUT")
  if [ -z "$got" ]; then
    fail "case $name: not run (the reference has it)"
  elif [ "$got" = SKIPPED ]; then
    echo "  skip case $name (its input is not here)"
  elif [ "$got" != "$rest" ]; then
    fail "case $name changed: reference '$rest', now '$got'"
  fi
done <"$T/want"
while read -r name _; do
  [ -n "$(line_of "$name" "$T/want")" ] || fail "case $name: not in the reference (record it: $0 MEMWALL --record)"
done <"$OUT"
[ $fails -eq 0 ] && pass "$(wc -l <"$OUT") cases as recorded"

# ---- the same lines under every kernel this CPU runs, and the disk tier under either engine -------
echo "-- every kernel gives the same fingerprints (bf16 products: every kernel of the FMA family)"
BASE=$OUT
check_same() { # SUFFIX: each case NAME$SUFFIX of $T/k has the line of NAME under --kernel auto
  local s=$1 n=0 f0=$fails want
  while read -r name rest; do
    case $name in *"$s") ;; *) continue ;; esac
    n=$((n + 1))
    want=$(line_of "${name%"$s"}" "$BASE")
    [ "$want" = "$rest" ] || fail "case ${name%"$s"} under $s: '$rest', not '$want' as under --kernel auto"
  done <"$T/k"
  [ $n -gt 0 ] || fail "$s: no cases ran"
  [ $fails -eq $f0 ] && pass "$s: the same $n fingerprints"
}
OUT=$T/k
for k in $avail; do
  : >"$T/k"
  training ".$k" some --kernel "$k"
  check_same ".$k"
done
: >"$T/k"
mkdir -p aio && cd aio || exit 1
MEMWALL_AIO=threads trn "train.gpt2.offload-all.aio-threads" go --offload all --offload-dir .
MEMWALL_AIO=threads trn "train.llama.offload-all+every.aio-threads" lo --preset llama-tiny --offload all --offload-dir . --recompute every:2
cd "$T" || exit 1
check_same ".aio-threads"

[ $fails -eq 0 ] || { echo "cli_fingerprint: $fails failure(s) (a plan or a loss moved: deliberate? then re-record, see the top of $0)"; exit 1; }
echo "cli_fingerprint: ok"
