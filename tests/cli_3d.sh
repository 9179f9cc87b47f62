#!/usr/bin/env bash
# End-to-end tests of tensor parallelism composed with pipeline and data parallelism (issue 33, "3D"
# layouts): train --tp T --pp P [--sp] [--zero 0|1] under mpirun -np T x P x D (--oversubscribe), on
# 4 ranks, (T, P, D) = (2, 2, 1) and (2, 1, 2). Checked: the losses, norms, validation losses,
# weights (params_crc32c) and checkpoint bytes are --tp 2 alone's with the same global batch, bit for
# bit (the pipeline against --accum M; the replicas against --tp 2 --zero 0 at D = 1, whose
# gradients are summed micro-batch by micro-batch as the replicas' are), with and without --sp, on
# llama-tiny, and on gpt2-tiny's and llama-tiny --tied 1's tied embedding (each tensor rank's shard of
# the table on the first stage, its copy on the last; with --sp, bf16, and D = 2); every --optim and
# --init hf: at (2, 2, 1) and (2, 2, 2) on 8 ranks (the plain build only: ~18 s a 4-rank run under
# ASan), every --optim's checkpoint at (2, 2, 1) --tp 2's bytes and --tp 2's resumed there (under ASan
# adam4bit's, saved and resumed at (2, 2, 1)); 50 steps at (2, 2, 1) stay within 1e-5 relative of one process and a
# rerun (with --recompute full on each stage) gives the same bits; every rank's arena peak is its plan and estimate --world 4's;
# --sp with the gradients on disk at (2, 2, 1) is the in-memory run's bits, and with --zero 2 at (2, 2, 2)
# --zero 1's; --recompute auto at (2, 2, 1) and (2, 2, 2): a stage's ranks agree on one choice, the
# stages' joined into one blocks: value, bitwise that value given, estimate agreeing the same way; a run
# saved at (2, 2, 1) resumes at (2, 1, 2), then (1, 1, 4), (4, 1, 1), one process, and (2, 2, 1)
# again with another split of the blocks, within 1e-5 of the unbroken run; sharded replicas' checkpoints
# ((2, 1, 2) --zero 1 saved, resumed at (2, 1, 1), then at (2, 2, 2) --zero 1; and at (2, 1, 2)
# --zero 3, then --zero 2) are the unbroken run's bytes, and a replica killed while saving leaves the earlier checkpoint; what is not built
# is refused before step 1; a killed rank of a 3D layout ends every rank within 30 s (under ASan too:
# tests/cli_3d.sh build/asan/memwall, which runs every 3D layout and hop but leaves the references
# (--tp alone, one process) and the comparisons of numbers to the plain build: the same code's bits).
# Usage: tests/cli_3d.sh build/memwall.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_3d_XXXXXX)
trap 'pkill -9 -f "$T/" 2>/dev/null; rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"
mpi_setup # and mpr N ARGS (lib_cli.sh)
gpl_data
# the sanitizer build (quick, lib_cli.sh) runs the 3D layouts, not their references (ref, lib_cli.sh:
# the plain build compares the numbers)
# llama-tiny with 4 key/value heads (so that --tp 4 divides them), 4 blocks of 128 channels
L=(--data "$T/d" --preset llama-tiny --kv-heads 4 --batch 2 --seq 32 --lr 1e-3 --warmup 1 --threads 1 --log-every 1000
  --eval-every 2 --eval-batches 2)
G=(--data "$T/d" --preset gpt2-tiny --vocab 259 --batch 2 --seq 32 --lr 1e-3 --warmup 1 --threads 1 --log-every 1000
  --eval-every 2 --eval-batches 2)
# llama-tiny with a tied embedding, its vocabulary padded at --tp 2 as gpt2-tiny's
LT=(--data "$T/d" --preset llama-tiny --kv-heads 4 --tied 1 --vocab 259 --batch 2 --seq 32 --lr 1e-3 --warmup 1 --threads 1
  --log-every 1000 --eval-every 2 --eval-batches 2)

run() { # run NAME N MODEL-ARRAY-NAME ARGS...: train on N ranks (0: one process) into $T/NAME and $T/NAME.jsonl
  local name=$1 n=$2
  local -n model=$3
  shift 3
  if [ "$n" = 0 ]; then
    "$MW" train "${model[@]}" "$@" --out "$T/$name" --json-log "$T/$name.jsonl" >"$T/$name.out" 2>&1
  else
    mpr "$n" train "${model[@]}" "$@" --out "$T/$name" --json-log "$T/$name.jsonl" >"$T/$name.out" 2>&1
  fi || { fail "$name: exit $?: $(grep -a memwall: "$T/$name.out" | head -2)"; return 1; }
}
nout() { # nout NAME N MODEL-ARRAY-NAME ARGS...: as run, without a checkpoint (--json-log alone)
  local name=$1 n=$2
  local -n nm=$3
  shift 3
  if [ "$n" = 0 ]; then "$MW" train "${nm[@]}" "$@" --json-log "$T/$name.jsonl" >"$T/$name.out" 2>&1
  else mpr "$n" train "${nm[@]}" "$@" --json-log "$T/$name.jsonl" >"$T/$name.out" 2>&1; fi ||
    { fail "$name: exit $?: $(grep -a memwall: "$T/$name.out" | head -2)"; return 1; }
}
# sig NAME: every step's loss, norm and validation loss, and the final weights' CRC
sig() { grep -o '"\(loss\|grad_norm\|val_loss\)": [-0-9.e+]*\|"params_crc32c": "[0-9a-f]*"' "$T/$1.jsonl" 2>/dev/null | paste -sd' ' -; }
ck() { sha256sum "$T/$1/step-0000000$2.mwck" 2>/dev/null | cut -c1-64; }
same() { # same WHAT REF RUN [STEP]: the signatures agree, and the checkpoints of step STEP (if given)
  local a b
  a=$(sig "$2") b=$(sig "$3")
  if quick; then # no reference: the run's own log, complete
    [ -n "$b" ] && pass "$(bits "$1")" || fail "$1: no log"
    return
  fi
  if [ -n "$a" ] && [ "$a" = "$b" ] && { [ -z "${4:-}" ] || { [ -n "$(ck "$2" "$4")" ] && [ "$(ck "$2" "$4")" = "$(ck "$3" "$4")" ]; }; }; then
    pass "$1: the same losses, norms, weights${4:+ and checkpoint bytes}"
  else
    fail "$1: '$a' vs '$b'"
  fi
}
losses() { grep -o '"loss": [^,]*\|"val_loss": [^,}]*' "$T/$1.jsonl" 2>/dev/null | sed 's/.*: //'; }
within() { # within A B N WHAT: A's last N losses and B's (each of N), each within 1e-5 relative
  local r
  quick && return # the plain build's check
  r=$(paste <(losses "$1" | tail -n "$3") <(losses "$2") | awk -v want="$3" 'NF != 2 { bad = 1 }
    NF == 2 { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > mx) mx = d; n++ } END { if (bad || n != want) print "bad " n; else printf "%.2e\n", mx }')
  case "$r" in
  bad*) fail "$4: the logs differ in length ($r)" ;;
  *) awk -v x="$r" 'BEGIN { exit !(x <= 1e-5) }' && pass "$4: $3 losses, largest relative difference $r" || fail "$4: $r > 1e-5" ;;
  esac
}

echo "-- (T, P, D) = (2, 2, 1): --tp 2 alone's bits (the pipeline's M micro-batches against --accum M)"
ref t2 2 L --steps 3 --tp 2 --accum 4
run t22 4 L --steps 3 --tp 2 --pp 2 --microbatches 4 && same "-np 4 --tp 2 --pp 2 --microbatches 4 = --tp 2 --accum 4" t2 t22 3
ref t2s 2 L --steps 3 --tp 2 --sp --accum 4
run t22s 4 L --steps 3 --tp 2 --sp --pp 2 --microbatches 4 && same "-np 4 --tp 2 --sp --pp 2 = --tp 2 --sp --accum 4" t2s t22s 3

echo "-- (2, 2, 1) --sp with the gradients on disk: the in-memory run's bits (main refused it)"
# fp32: a block's norms' gradients (each tensor rank's rows') summed over the ranks in its slot after the
# stage's last micro-batch's backward (the norm's sum in memory); bf16: after each, as in memory
run t22so 4 L --steps 3 --tp 2 --sp --pp 2 --microbatches 4 --offload optimizer+grads --offload-dir "$T/scr" &&
  same "(2, 2, 1) --sp --offload optimizer+grads = in memory" t22s t22so 3
if ! quick; then # (--offload all logs no weights' CRC: the losses, norms and checkpoint bytes)
  run t22sa 4 L --steps 3 --tp 2 --sp --pp 2 --microbatches 4 --offload all --offload-dir "$T/scr" &&
    [ -n "$(ck t22s 3)" ] && [ "$(ck t22s 3)" = "$(ck t22sa 3)" ] && [ "$(sig t22s | sed 's/ "params_crc32c.*//')" = "$(sig t22sa)" ] &&
    pass "(2, 2, 1) --sp --offload all = in memory: the same losses, norms and checkpoint bytes" || fail "(2, 2, 1) --sp --offload all: '$(sig t22sa)'"
fi
x=$(plans "$T/t22so.jsonl" "${L[@]}" --world 4 --tp 2 --sp --pp 2 --microbatches 4 --offload optimizer+grads --offload-dir "$T/scr") &&
  pass "(2, 2, 1) --sp --offload optimizer+grads: arena = plan = estimate per rank ($x)" || fail "(2, 2, 1) --sp on disk per rank: $x"

echo "-- (2, 2, 1) --recompute auto: a stage's ranks agree on one choice, the stages' joined into one blocks: value"
# llama-tiny (4 blocks, 2 a stage): stage 0's ranks plan 5,955,008 bytes without recomputation and
# 4,935,872 with every block's, stage 1's 5,171,904 and 4,871,872; at 5,200,000 stage 0 recomputes
# some of its blocks (blocks:fs here) and stage 1 none. (main refused --recompute auto with --tp --pp)
RB=5200000
run ra22 4 L --steps 3 --tp 2 --pp 2 --microbatches 4 --recompute auto --budget $RB
pin=$(grep -o "every rank runs --recompute blocks:[nsf]*" "$T/ra22.out" | head -1 | sed 's/.* //')
case "$pin" in
blocks:*[sf]*)
  if ! quick; then # (the sanitizer build runs the agreement; the pinned policy's run is the plain build's check)
    run rp22 4 L --steps 3 --tp 2 --pp 2 --microbatches 4 --recompute "$pin" --budget $RB &&
      same "(2, 2, 1) --recompute auto chose $pin: bit for bit that policy given (checkpoint bytes too)" rp22 ra22 3
  fi
  same "(2, 2, 1) --recompute auto = no recomputation (losses, norms, weights)" t22 ra22
  x=$(plans "$T/ra22.jsonl" "${L[@]}" --world 4 --tp 2 --pp 2 --microbatches 4 --recompute "$pin" --budget $RB) &&
    pass "(2, 2, 1) --recompute auto: arena = plan = estimate --recompute $pin per rank ($x)" || fail "(2, 2, 1) auto per rank: $x"
  e=$("$MW" estimate "${L[@]}" --world 4 --tp 2 --pp 2 --microbatches 4 --recompute auto --budget $RB --json 2>&1 |
    grep -o '"recompute_joined": "[^"]*"' | sed 's/.*: "//; s/"$//')
  [ "$e" = "$pin" ] && pass "estimate --recompute auto at the same layout and budget shows $e" || fail "estimate's choice '$e', train's $pin"
  [ "$(grep -o '"arena_peak_bytes": [0-9]*' "$T/ra22.jsonl" | sed 's/.*: //' | sort -n | tail -1)" -le $RB ] &&
    pass "each rank's arena peak within --budget $RB" || fail "an arena peak over --budget $RB" ;;
*) fail "(2, 2, 1) --recompute auto chose '$pin' (some recomputation expected): $(grep -a 'recompute\|memwall:' "$T/ra22.out" | head -3)" ;;
esac

echo "-- (T, P, D) = (2, 1, 2): --tp 2 --zero 0 at D = 1's bits (each micro-batch's gradient summed in order)"
ref t2z 2 L --steps 3 --tp 2 --zero 0 --accum 4
run t212 4 L --steps 3 --tp 2 --zero 0 --accum 2 && same "-np 4 --tp 2 --zero 0 (2 replicas) = -np 2 --tp 2 --zero 0 --accum 4" t2z t212 3
# --zero 1: each tensor rank's replica 0 gathers the other's shard of AdamW's moments to write
run t212z1 4 L --steps 3 --tp 2 --zero 1 --accum 2 &&
  same "-np 4 --tp 2 --zero 1 (2 replicas, optimizer state sharded)" t2z t212z1 3
ref t2sz 2 L --steps 3 --tp 2 --sp --zero 0 --accum 4
run t212s 4 L --steps 3 --tp 2 --sp --zero 0 --accum 2 && same "-np 4 --tp 2 --sp --zero 0 (2 replicas)" t2sz t212s 3
ref g2z 2 G --steps 3 --tp 2 --zero 0 --accum 4
run g212 4 G --steps 3 --tp 2 --zero 0 --accum 2 && same "gpt2-tiny (tied, vocabulary 259 padded) -np 4 --tp 2 --zero 0 (2 replicas)" g2z g212 3

echo "-- a tied embedding at (2, 2, 1): the first stage's tensor rank t owns its vocabulary shard, the last stage's head a copy"
ref g2 2 G --steps 3 --tp 2 --accum 4
run g22 4 G --steps 3 --tp 2 --pp 2 --microbatches 4 && same "gpt2-tiny (tied) -np 4 --tp 2 --pp 2 = --tp 2 --accum 4" g2 g22 3
if ! quick; then # the sanitizer build runs the tied path twice (gpt2-tiny, llama-tiny --sp bf16): each 4-rank run costs it ~18 s
  run g2s 2 G --steps 3 --tp 2 --sp --accum 4
  run g22s 4 G --steps 3 --tp 2 --sp --pp 2 --microbatches 4 && same "gpt2-tiny (tied) --tp 2 --sp --pp 2 = --tp 2 --sp --accum 4" g2s g22s
fi
ref lt2 2 LT --steps 3 --tp 2 --sp --precision bf16 --accum 4
run lt22 4 LT --steps 3 --tp 2 --sp --precision bf16 --pp 2 --microbatches 4 &&
  same "llama-tiny --tied 1 --sp --precision bf16 (2, 2, 1) = --tp 2 --sp --precision bf16 --accum 4" lt2 lt22
# ... with its gradients on disk (bf16: the norms' summed before each micro-batch's rounding, as in memory)
if ! quick; then
  run lt22so 4 LT --steps 3 --tp 2 --sp --precision bf16 --pp 2 --microbatches 4 --offload optimizer+grads --offload-dir "$T/scr" &&
    same "llama-tiny --tied 1 --sp --precision bf16 (2, 2, 1) --offload optimizer+grads = in memory" lt22 lt22so 3
fi

echo "-- every --optim and --init hf: at (2, 2, 1), their checkpoints --tp 2's bytes, --tp 2's step 2 resumed at (2, 2, 1)"
# the stage's optimizer state in one process's layout (8/4-bit codes gathered, the small state's
# 1-D second moments joined over the group); the sanitizer build saves and resumes adam4bit alone
# (the runs of every --optim are --tp alone's code, which cli_tp.sh runs under ASan)
# ohop O WHAT SRC ARGS...: SRC's step 2 (a copy in $T/r$O) resumed at ARGS to step 3: step 3's
# bytes are --tp 2's (o2$O's)
ohop() {
  local o=$1 what=$2 src=$3
  shift 3
  rm -rf "$T/r$o" && mkdir -p "$T/r$o" && cp "$T/$src/step-00000002.mwck" "$T/r$o/" &&
    mpr 4 train "${L[@]}" --steps 3 --save-every 2 --optim "$o" --out "$T/r$o" --resume auto "$@" >"$T/r$o.out" 2>&1 ||
    { fail "$what: exit $?: $(grep -a memwall: "$T/r$o.out" | head -2)"; return; }
  grep -q "resumed from" "$T/r$o.out" && [ -f "$T/r$o/step-00000003.mwck" ] &&
    { quick || { [ -n "$(ck "o2$o" 3)" ] && [ "$(ck "o2$o" 3)" = "$(ck "r$o" 3)" ]; }; } &&
    pass "$(bits "$what: step 3 is --tp 2's bytes")" || fail "$what: $(ck "o2$o" 3) vs $(ck "r$o" 3)"
}
if quick; then
  run o22adam4bit 4 L --steps 3 --save-every 2 --stop-at 2 --tp 2 --pp 2 --microbatches 4 --optim adam4bit &&
    ohop adam4bit "--optim adam4bit saved at (2, 2, 1), resumed at (2, 2, 1)" o22adam4bit --tp 2 --pp 2 --microbatches 4
else
  for o in adamw8bit adam4bit adafactor came sgd; do
    run "o2$o" 2 L --steps 3 --tp 2 --accum 4 --optim $o --save-every 2
    run "o22$o" 4 L --steps 3 --tp 2 --pp 2 --microbatches 4 --optim $o --save-every 2 &&
      same "--optim $o (2, 2, 1) = --tp 2 --accum 4 (steps 2 and 3: the bytes of step 3 here)" "o2$o" "o22$o" 3
    [ -n "$(ck "o2$o" 2)" ] && [ "$(ck "o2$o" 2)" = "$(ck "o22$o" 2)" ] || fail "--optim $o: step 2's checkpoints differ"
    ohop $o "--optim $o: --tp 2's step 2 resumed at (2, 2, 1)" "o2$o" --tp 2 --pp 2 --microbatches 4
  done
  # another split of the blocks: the stages' pieces of M, V and the small state at other offsets
  ohop adam4bit "--optim adam4bit: --tp 2's step 2 resumed at (2, 2, 1) with --pp-layers 3,1" o2adam4bit --tp 2 --pp 2 \
    --pp-layers 3,1 --microbatches 4
  if "$MW" export --ckpt "$T/g22/step-00000003.mwck" --out "$T/hfg/model.safetensors" >"$T/export.out" 2>&1; then
    I=(--init "hf:$T/hfg" --data "$T/d" --batch 2 --seq 32 --lr 1e-3 --warmup 1 --threads 1 --log-every 1000 --eval-every 2 --eval-batches 2)
    run i2 2 I --steps 3 --tp 2 --accum 4
    run i22 4 I --steps 3 --tp 2 --pp 2 --microbatches 4 && same "--init hf: (gpt2-tiny's export) at (2, 2, 1) = at --tp 2 --accum 4" i2 i22
  else
    fail "export of (2, 2, 1)'s step 3: $(tail -1 "$T/export.out")"
  fi
fi

echo "-- (T, P, D) = (2, 2, 2) on 8 ranks: --tp 2 --zero 0 at D = 1's bits (the plain build only)"
if ! quick; then
  run g222 8 G --steps 3 --tp 2 --pp 2 --microbatches 2 --zero 0 && same "gpt2-tiny (tied) -np 8 --tp 2 --pp 2 --zero 0 (2 replicas) = -np 2 --tp 2 --zero 0 --accum 4" g2z g222 3
  mpr 8 train "${G[@]}" --steps 3 --tp 2 --pp 2 --microbatches 2 --zero 1 --json-log "$T/g222z1.jsonl" >"$T/g222z1.out" 2>&1 ||
    fail "(2, 2, 2) --zero 1: $(grep -a memwall: "$T/g222z1.out" | head -2)"
  same "gpt2-tiny (tied) -np 8 --tp 2 --pp 2 --zero 1 (2 replicas, optimizer state sharded)" g2z g222z1
  # --sp with --zero 2: the norms' gradients summed over the tensor ranks in the replicas' shards (--zero 1's bits)
  nout g222s1 8 G --steps 3 --tp 2 --pp 2 --microbatches 2 --sp --zero 1 --grad-clip 1 &&
    nout g222s2 8 G --steps 3 --tp 2 --pp 2 --microbatches 2 --sp --zero 2 --grad-clip 1 &&
    same "gpt2-tiny -np 8 --tp 2 --pp 2 --sp --zero 2 = --zero 1 (2 replicas, the gradient sharded)" g222s1 g222s2
  # --recompute auto: stage 0's replicas (ZeRO shards of unequal lengths) choose apart alone (blocks:fs and
  # blocks:sn at 6,200,000 bytes) and agree on the largest plan's choice that fits both; estimate agrees the same way
  nout q222 8 L --steps 3 --tp 2 --pp 2 --microbatches 2 --zero 1 --recompute auto --budget 6200000 &&
    pin=$(grep -o "every rank runs --recompute blocks:[nsf]*" "$T/q222.out" | head -1 | sed 's/.* //') &&
    e=$("$MW" estimate "${L[@]}" --world 8 --tp 2 --pp 2 --dp 2 --zero 1 --microbatches 2 --recompute auto --budget 6200000 --json 2>&1 |
      grep -o '"recompute_joined": "[^"]*"' | sed 's/.*: "//; s/"$//') &&
    x=$(plans "$T/q222.jsonl" "${L[@]}" --world 8 --tp 2 --pp 2 --dp 2 --zero 1 --microbatches 2 --recompute auto --budget 6200000) &&
    [ -n "$pin" ] && [ "$e" = "$pin" ] && pass "(2, 2, 2) --zero 1 --recompute auto: the stages' ranks agree on $pin, as estimate does; arena = plan = estimate per rank ($x)" ||
    fail "(2, 2, 2) --recompute auto: train '$pin', estimate '$e', ranks $x: $(grep -a 'recompute:\|memwall:' "$T/q222.out" | head -2)"
else
  echo "  (the sanitizer build: 8 ranks under ASan are the plain build's check)"
fi

echo "-- the bound: 50 steps of (2, 2, 1) within 1e-5 relative of one process, and the same bits twice"
if quick; then # the same numbers as the plain build's: the sanitizer build skips the long runs
  echo "  (the sanitizer build: the 50 steps are the plain build's check)"
else
  run l1 0 L --steps 50 --accum 2 --eval-every 25
  run l22 4 L --steps 50 --tp 2 --pp 2 --microbatches 2 --eval-every 25 && within l1 l22 52 "llama-tiny (2, 2, 1) over 50 steps"
fi
run t22b 4 L --steps 3 --tp 2 --pp 2 --microbatches 4 --recompute full &&
  same "(2, 2, 1) twice, the second with --recompute full on each stage (its checkpoint's header names it)" t22 t22b

echo "-- each rank's arena is its plan, and estimate --world 4's for that rank (plans JSONL ESTIMATE-ARGS, lib_cli.sh)"
x=$(plans "$T/t22.jsonl" "${L[@]}" --world 4 --tp 2 --pp 2 --microbatches 4) && pass "(2, 2, 1): arena = plan = estimate per rank ($x)" || fail "(2, 2, 1) per rank: $x"
x=$(plans "$T/t22s.jsonl" "${L[@]}" --world 4 --tp 2 --sp --pp 2 --microbatches 4) && pass "(2, 2, 1) --sp: arena = plan = estimate per rank ($x)" || fail "(2, 2, 1) --sp per rank: $x"
x=$(plans "$T/t212z1.jsonl" "${L[@]}" --world 4 --tp 2 --dp 2 --zero 1 --accum 2) && pass "(2, 1, 2) --zero 1: arena = plan = estimate per rank ($x)" || fail "(2, 1, 2) per rank: $x"
x=$(plans "$T/g22.jsonl" "${G[@]}" --world 4 --tp 2 --pp 2 --microbatches 4) && pass "(2, 2, 1) tied (gpt2-tiny): arena = plan = estimate per rank ($x)" || fail "(2, 2, 1) tied per rank: $x"
x=$(plans "$T/lt22.jsonl" "${LT[@]}" --world 4 --tp 2 --sp --precision bf16 --pp 2 --microbatches 4) && pass "(2, 2, 1) tied --sp bf16 (llama-tiny): arena = plan = estimate per rank ($x)" || fail "(2, 2, 1) tied --sp bf16 per rank: $x"
if ! quick; then
  x=$(plans "$T/g222.jsonl" "${G[@]}" --world 8 --tp 2 --pp 2 --dp 2 --zero 0 --microbatches 2) && pass "(2, 2, 2) tied: arena = plan = estimate per rank ($x)" || fail "(2, 2, 2) per rank: $x"
fi
# --zero 0 replicas hold their shard's accumulator (--accum > 1): unequal shards, unequal plans
x=$(plans "$T/t212.jsonl" "${L[@]}" --world 4 --tp 2 --dp 2 --zero 0 --accum 2) && pass "(2, 1, 2) --zero 0 --accum 2: arena = plan = estimate per rank ($x)" || fail "(2, 1, 2) --zero 0 per rank: $x"

echo "-- layout-free checkpoints: saved at (2, 2, 1), resumed at (2, 1, 2), (1, 1, 4), (4, 1, 1), one process, (2, 2, 1)"
ref u 0 L --steps 6 --accum 4
hop() { # hop WHAT N STOP ARGS...: the chain in $T/c continued to step STOP on N ranks
  local what=$1 n=$2 stop=$3
  shift 3
  mkdir -p "$T/c"
  if [ "$n" = 0 ]; then "$MW" train "${L[@]}" --steps 6 "$@" --stop-at "$stop" --out "$T/c" --resume auto --json-log "$T/c$stop.jsonl" >"$T/c$stop.out" 2>&1
  else mpr "$n" train "${L[@]}" --steps 6 "$@" --stop-at "$stop" --out "$T/c" --resume auto --json-log "$T/c$stop.jsonl" >"$T/c$stop.out" 2>&1; fi ||
    fail "$what to step $stop: $(grep -a memwall: "$T/c$stop.out" | head -2)"
  [ "$stop" = 1 ] || grep -q "resumed from" "$T/c$stop.out" || fail "$what did not resume"
}
hop "(2, 2, 1)" 4 1 --tp 2 --pp 2 --microbatches 4
hop "(2, 1, 2)" 4 2 --tp 2 --zero 0 --accum 2
hop "(1, 1, 4)" 4 3 --zero 1 --accum 1
hop "(4, 1, 1)" 4 4 --tp 4 --accum 4
hop "one process" 0 5 --accum 4
hop "(2, 2, 1) with --pp-layers 3,1" 4 6 --tp 2 --pp 2 --pp-layers 3,1 --microbatches 4
for k in 2 3 4 5 6; do cat "$T/c$k.jsonl"; done >"$T/chain.jsonl"
within u chain 8 "saved at (2, 2, 1), resumed at (2, 1, 2), (1, 1, 4), (4, 1, 1), one process and (2, 2, 1): steps 2-6 against the unbroken run"

echo "-- sharded replicas' checkpoints: saved at (2, 1, 2) --zero 1, resumed at (2, 1, 1), then at (2, 2, 2) --zero 1"
# the reference: --tp 2 --zero 0 at D = 1 (the replicas' bits); (2, 2, 2) runs 8 ranks, the plain build
# alone (the sanitizer build ends the chain at (2, 1, 2) --zero 1 instead)
ref tu 2 L --steps 6 --tp 2 --zero 0 --accum 4 --save-every 2
zhop() { # zhop N STOP ARGS...: the chain in $T/$zd (z unless set) continued to step STOP on N ranks
  local n=$1 stop=$2 d=${zd:-z}
  shift 2
  mpr "$n" train "${L[@]}" --steps 6 --save-every 2 "$@" --stop-at "$stop" --out "$T/$d" --resume auto >"$T/$d$stop.out" 2>&1 ||
    fail "step $stop on $n ranks: $(grep -a memwall: "$T/$d$stop.out" | head -2)"
}
zhop 4 2 --tp 2 --zero 1 --accum 2
zhop 2 4 --tp 2 --zero 0 --accum 4
if quick; then zhop 4 6 --tp 2 --zero 1 --accum 2; else zhop 8 6 --tp 2 --pp 2 --microbatches 2 --zero 1; fi
if quick; then
  [ -f "$T/z/step-00000006.mwck" ] && grep -q "resumed from" "$T/z6.out" && pass "the chain ran (the bits are the plain build's check)" ||
    fail "the chain: $(ls "$T/z")"
else
  [ -n "$(ck tu 2)" ] && [ "$(ck tu 2)" = "$(ck z 2)" ] && [ "$(ck tu 6)" = "$(ck z 6)" ] && grep -q "resumed from" "$T/z6.out" &&
    pass "step 2 of (2, 1, 2) --zero 1 and step 6 of (2, 2, 2) --zero 1, resumed through (2, 1, 1): the unbroken run's bytes" ||
    fail "the sharded chain: $(ck tu 2) $(ck z 2), $(ck tu 6) $(ck z 6)"
fi
# --tp with --zero 2 and 3 (a tensor rank's replicas shard M and V, and at 3 the parameters: the
# same gather and load): (2, 1, 2) --zero 3 writes --zero 1's file byte for byte (no params_crc32c in
# its log: the checkpoints compare the weights), and the chain's step 2 resumed at (2, 1, 2) --zero 3,
# then at --zero 2, ends on the unbroken run's bytes
run t212z3 4 L --steps 3 --tp 2 --zero 3 --accum 2 &&
  { quick || { [ -n "$(ck t212z1 3)" ] && [ "$(ck t212z1 3)" = "$(ck t212z3 3)" ] && [ "$(losses t212z1)" = "$(losses t212z3)" ]; }; } &&
  [ -f "$T/t212z3/step-00000003.mwck" ] && pass "(2, 1, 2) --zero 3: $(bits "--zero 1's losses and checkpoint bytes")" ||
  fail "(2, 1, 2) --zero 3 against --zero 1: $(ck t212z1 3) vs $(ck t212z3 3)"
rm -rf "$T/y" && mkdir -p "$T/y" && cp "$T/z/step-00000002.mwck" "$T/y/"
zd=y zhop 4 4 --tp 2 --zero 3 --accum 2
zd=y zhop 4 6 --tp 2 --zero 2 --accum 2
[ -f "$T/y/step-00000006.mwck" ] && grep -q "resumed from" "$T/y4.out" && grep -q "resumed from" "$T/y6.out" &&
  { quick || { [ -n "$(ck tu 4)" ] && [ "$(ck tu 4)" = "$(ck y 4)" ] && [ "$(ck tu 6)" = "$(ck y 6)" ]; }; } &&
  pass "(2, 1, 2) --zero 1's step 2 resumed at --zero 3, then at --zero 2: $(bits "steps 4 and 6 are the unbroken run's bytes")" ||
  fail "--tp 2 --zero 3 and 2 resumed: $(ck tu 4) $(ck y 4), $(ck tu 6) $(ck y 6)"
# a replica's rank killed in the middle of step 4's save (MEMWALL_CKPT_KILL: its shard sent, before the
# ranks agree): no step 4, step 2 intact (the chain's own, above)
rm -rf "$T/zk" && mkdir -p "$T/zk" && cp "$T/z/step-00000002.mwck" "$T/zk/"
mpirun -np 3 "$MW" train "${L[@]}" --steps 6 --save-every 2 --tp 2 --zero 1 --accum 2 --out "$T/zk" --resume auto : \
  -np 1 env MEMWALL_CKPT_KILL=4 "$MW" train "${L[@]}" --steps 6 --save-every 2 --tp 2 --zero 1 --accum 2 --out "$T/zk" --resume auto >"$T/zk.out" 2>&1
rc=$?
[ $rc -ne 0 ] && [ ! -e "$T/zk/step-00000004.mwck" ] && cmp -s "$T/z/step-00000002.mwck" "$T/zk/step-00000002.mwck" &&
  grep -q "resumed from" "$T/zk.out" && pass "(2, 1, 2) --zero 1, a replica killed while saving step 4: exit $rc, no step 4, step 2 intact" ||
  fail "a replica killed while saving: exit $rc, $(ls -a "$T/zk" | tr '\n' ' ')"

echo "-- refused before step 1 (exit 1, naming it, nothing written)"
refuse() { # refuse N WHAT PATTERN ARGS...
  local n=$1 what=$2 pat=$3
  shift 3
  rm -rf "$T/no"
  mpr "$n" train "${L[@]}" --steps 3 --out "$T/no" "$@" >"$T/rf.out" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && grep -q -- "$pat" "$T/rf.out" && [ ! -e "$T/no" ] && pass "$what -> exit $rc: $(grep -a -m1 -- "$pat" "$T/rf.out")" ||
    fail "$what: exit $rc, $(grep -a memwall: "$T/rf.out" | head -2)"
}
refuse 6 "--tp 2 --pp 2 on 6 ranks" "a multiple of --tp x --pp" --tp 2 --pp 2
# (--tp 2 --zero 2 and 3 over 2 replicas run: cli_tp.sh checks them against --zero 1; their checkpoints above)
# (--tp 2 --zero 1-3 replicas save and resume under every --optim: cli_tp.sh checks the quantised and factored ones;
#  --tp 2 --pp 2 stages save every --optim: the checks above)
if ! quick; then # (refused once the ranks have started: ~10 s under ASan; the model's refusal, said once
  # by a vote, every rank exiting with its code: main printed it once per rank)
  mpr 4 train "${L[@]}" --steps 3 --tp 2 --zero 1 --budget 4MiB >"$T/rf.out" 2>&1
  rc=$?
  [ $rc -eq 2 ] && grep -q "^memwall: the plan needs" "$T/rf.out" && ! grep -q '"loss"\|^step' "$T/rf.out" &&
    [ "$(grep -c '^memwall: ' "$T/rf.out")" = 1 ] &&
    pass "--tp 2 --zero 1 over 2 replicas past --budget -> exit $rc, said once: $(grep -a -m1 memwall: "$T/rf.out" | cut -c1-100)" ||
    fail "--tp 2 --zero 1 past --budget: exit $rc, $(grep -c '^memwall: ' "$T/rf.out") lines: $(grep -a memwall: "$T/rf.out" | head -2)"
fi

echo "-- faults: a killed rank of (2, 2, 1) ends every rank"
hit_rank KILL "$T/killed/step-00000005.mwck" 4 train "${L[@]}" --steps 100000 --tp 2 --pp 2 --microbatches 2 --eval-every 0 \
  --save-every 5 --out "$T/killed" # (lib_cli.sh)
[ -n "$victim" ] && [ $rc -ne 0 ] && [ $dt -le 30 ] && pass "a rank of (2, 2, 1) killed (SIGKILL): every rank stops in ${dt} s, exit $rc" ||
  fail "killed rank: victim '$victim', exit $rc after ${dt} s"
[ -z "$(pgrep -f -- "--out $T/killed")" ] && pass "no rank left running" || fail "ranks left: $(pgrep -f -- "--out $T/killed" | tr '\n' ' ')"

[ $fails -eq 0 ] && echo "cli_3d: all passed" || { echo "cli_3d: $fails failed"; exit 1; }
