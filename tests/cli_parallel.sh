#!/usr/bin/env bash
# End-to-end tests of pipeline parallelism (issue 33): train --pp P [--pp-layers ...] --microbatches M
# under mpirun -np 1, 2 and 4 (--oversubscribe), alone and with D = N / P data-parallel replicas
# (--zero 0 to 3 over each stage's replicas), on llama-tiny, and gpt2-tiny and llama-tiny --tied 1 (a tied
# embedding: the first stage forms both parts of its gradient); --offload, --recompute selective and auto
# per stage; --pp-layers auto (the split whose largest stage's planned peak is least).
# Checked: the losses, gradient norms, validation losses and weights (params_crc32c) and the
# checkpoint bytes of every layout that fits 4 ranks are one process's with the same global batch
# (--accum M; with replicas, the data-parallel run of the same D x M micro-batches), under every
# --optim and --recompute, and --precision bf16; each rank's arena peak is its plan and estimate's for that rank; a run
# saved at one layout resumes at another (and at one process) where the unbroken run ends, with
# sharded replicas (--zero 1-3) too; the refusals before step 1 (P > L, --pp-layers not summing to
# L, ranks not a multiple of P, --pp-layers auto with --vpp); ranks given different flags are refused; a killed rank ends
# every rank with the checkpoints intact (--resume auto ends where the unbroken run does), and so does
# a replica killed in the middle of a save; a stopped
# stage makes the others exit after --comm-timeout. Usage: tests/cli_parallel.sh build/memwall.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_parallel_XXXXXX)
trap 'pkill -9 -f "$T/" 2>/dev/null; rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"

mpi_setup # and mpr N ARGS (lib_cli.sh)
# sig JSONL: every step's loss, norm and validation loss, and the final weights' CRC
sig() { grep -o '"\(loss\|grad_norm\|val_loss\)": [-0-9.e+]*\|"params_crc32c": "[0-9a-f]*"' "$1" | paste -sd' ' -; }
ck() { sha256sum "$1" 2>/dev/null | cut -c1-64; }

gpl_data
# llama-tiny: 4 blocks of 128 channels, 217k parameters (4 quanta of the norm's partial sums, cut by
# every stage boundary of these splits)
tr=(train --data "$T/d" --preset llama-tiny --batch 2 --seq 32 --lr 1e-3 --warmup 1 --steps 3 --threads 1
  --eval-every 2 --eval-batches 2)

echo "-- one process's bits (D = 1: the plain run with --accum M)"
run() { # run NAME N ARGS...: a run into $T/NAME (its --out) and $T/NAME.jsonl; 0 when it exits 0
  local name=$1 n=$2
  shift 2
  if [ "$n" = 0 ]; then
    "$MW" "${tr[@]}" "$@" --out "$T/$name" --json-log "$T/$name.jsonl" >"$T/$name.out" 2>&1
  else
    mpr "$n" "${tr[@]}" "$@" --out "$T/$name" --json-log "$T/$name.jsonl" >"$T/$name.out" 2>&1
  fi || { fail "$name: exit $?: $(grep -a memwall: "$T/$name.out" | head -2)"; return 1; }
}
same() { # same WHAT REF RUN: the signatures and the step-3 checkpoints agree (NOCRC=1: REF keeps no whole
  local a b # parameters, so its end event has no params_crc32c; the checkpoints' bytes still compare the weights)
  a=$(sig "$T/$2.jsonl") b=$(sig "$T/$3.jsonl")
  if quick; then # no reference (ref, lib_cli.sh): the run's own log and checkpoint
    [ -n "$b" ] && [ -f "$T/$3/step-00000003.mwck" ] && pass "$(bits "$1")" || fail "$1: no log or checkpoint"
    return
  fi
  [ "${NOCRC:-0}" = 1 ] && b=${b% \"params_crc32c\": *}
  if [ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$(ck "$T/$2/step-00000003.mwck")" ] &&
    [ "$(ck "$T/$2/step-00000003.mwck")" = "$(ck "$T/$3/step-00000003.mwck")" ]; then
    pass "$1: the same losses, norms, weights and checkpoint bytes"
  else
    fail "$1: '$a' vs '$b'"
  fi
}
# under the sanitizer build (quick, lib_cli.sh) each layout kind runs once, without its references
ref plain4 0 --accum 4
quick || grep -q '"params_crc32c"' "$T/plain4.jsonl" || fail "no params_crc32c in the end event"
run np1 1 --pp 1 --microbatches 4 && same "mpirun -np 1 --pp 1 --microbatches 4 = --accum 4" plain4 np1
run pp2 2 --pp 2 --microbatches 4 && same "-np 2 --pp 2 --microbatches 4" plain4 pp2
run pp4 4 --pp 4 --microbatches 4 && same "-np 4 --pp 4 --microbatches 4" plain4 pp4
# (a checkpoint records --recompute: the reference runs the same policy, which changes no bit)
ref plain4f 0 --accum 4 --recompute full
run pp31 2 --pp 2 --pp-layers 3,1 --microbatches 4 --recompute full && same "-np 2 --pp-layers 3,1 --recompute full" plain4f pp31
ref plain4b 0 --accum 4 --recompute blocks:fsnn
run pp13 2 --pp 2 --pp-layers 1,3 --microbatches 4 --recompute blocks:fsnn && same "-np 2 --pp-layers 1,3 --recompute blocks:fsnn" plain4b pp13
quick || { [ "$(sig "$T/plain4.jsonl")" = "$(sig "$T/pp13.jsonl")" ] && pass "--recompute blocks:fsnn changes no bit (against --recompute none)" || fail "recompute changed a bit"; }

ref plain2 0 --accum 2
run pp4m2 4 --pp 4 --microbatches 2 && same "-np 4 --pp 4 --microbatches 2 (M < P: stages idle in the bubble)" plain2 pp4m2
# --precision bf16: each block's gradients rounded to bfloat16 after each micro-batch's backward, as
# one process rounds them (the FMA family's kernel pinned: auto's bf16 products may run on amx)
ref plainbf 0 --accum 4 --precision bf16 --kernel avx2 && run ppbf 4 --pp 4 --microbatches 4 --precision bf16 --kernel avx2 &&
  same "--precision bf16 at --pp 4" plainbf ppbf
for o in $(quick && echo adam4bit came || echo adamw8bit adam4bit adafactor came); do # (quick: one of each kind)
  ref "plain_$o" 0 --accum 4 --optim "$o" && run "pp_$o" 2 --pp 2 --pp-layers 1,3 --microbatches 4 --optim "$o" &&
    same "--optim $o at --pp-layers 1,3" "plain_$o" "pp_$o"
done

echo "-- with data-parallel replicas (D = N / P; the reference: the data-parallel run of D x M micro-batches)"
ref dp4 1 --zero 0 --accum 4
run pp2dp2 4 --pp 2 --microbatches 2 --zero 0 && same "-np 4 --pp 2 (2 replicas) --zero 0" dp4 pp2dp2
# --zero 1 to 3: each stage's optimizer state (and under --zero 3 its parameters) sharded over its 2
# replicas; its replica 0 writes the checkpoint, gathering the others' shards: the data-parallel
# run's file, byte for byte. --zero 2 and 3: a block's gradients exchanged into the shards as its
# backward ends, the norm over the shards in one process's quanta; --zero 3 keeps no whole parameters
# (no params_crc32c): its reference is one rank's --zero 3
zrun() { # zrun NAME N ARGS...: a run into $T/NAME (its --out) and $T/NAME.jsonl
  local name=$1 n=$2
  shift 2
  mpr "$n" "${tr[@]}" "$@" --out "$T/$name" --json-log "$T/$name.jsonl" >"$T/$name.out" 2>&1 || fail "$name: exit $?: $(grep -a memwall: "$T/$name.out" | head -2)"
}
zsame() { # zsame WHAT REF RUN: the signatures and the step-3 checkpoints agree (a RUN of --zero 3 keeps no
  local a b # whole parameters: no params_crc32c to compare; its checkpoint's bytes compare the weights)
  a=$(sig "$T/$2.jsonl") b=$(sig "$T/$3.jsonl")
  if quick; then # no reference (ref, lib_cli.sh): the run's own log and checkpoint
    [ -n "$b" ] && [ -f "$T/$3/step-00000003.mwck" ] && pass "$(bits "$1")" || fail "$1: no log or checkpoint"
    return
  fi
  case "$b" in *params_crc32c*) ;; *) a=${a% \"params_crc32c\": *} ;; esac
  [ -n "$a" ] && [ "$a" = "$b" ] && [ -n "$(ck "$T/$2/step-00000003.mwck")" ] &&
    [ "$(ck "$T/$2/step-00000003.mwck")" = "$(ck "$T/$3/step-00000003.mwck")" ] &&
    pass "$1: the same losses, norms, weights and checkpoint bytes" || fail "$1: '$a' vs '$b'"
}
# (the references: dp4 for adamw, the default; dpaf and dp4b, the same run under adafactor and adam4bit)
full zrun dpaf 1 --zero 0 --accum 4 --optim adafactor
full zrun dp4b 1 --zero 0 --accum 4 --optim adam4bit
for o in adamw:dp4 $(quick || echo adafactor:dpaf adam4bit:dp4b); do
  zrun "ppz${o%:*}" 4 --pp 2 --microbatches 2 --zero 1 --optim "${o%:*}" &&
    zsame "-np 4 --pp 2 --zero 1 --optim ${o%:*}" "${o#*:}" "ppz${o%:*}"
done
zrun z2 4 --pp 2 --microbatches 2 --zero 2 && zsame "-np 4 --pp 2 --zero 2" dp4 z2
full zrun z2u 4 --pp 2 --pp-layers 1,3 --microbatches 2 --zero 2 --optim adafactor &&
  full zsame "-np 4 --pp-layers 1,3 --zero 2 --optim adafactor" dpaf z2u
zrun z3b 4 --pp 2 --pp-layers 3,1 --microbatches 2 --zero 3 --optim adam4bit &&
  zsame "-np 4 --pp-layers 3,1 --zero 3 --optim adam4bit (its 4-bit codes gathered from the shards)" dp4b z3b
full zrun dz3 1 --zero 3 --accum 4 && zrun z3 4 --pp 2 --pp-layers 3,1 --microbatches 2 --zero 3 && zsame "-np 4 --pp-layers 3,1 --zero 3" dz3 z3
full zrun gdz3 1 --preset gpt2-tiny --zero 3 --accum 4 && zrun gz3 4 --preset gpt2-tiny --pp 2 --microbatches 2 --zero 3 &&
  zsame "gpt2-tiny (tied) -np 4 --pp 2 --zero 3" gdz3 gz3

echo "-- a tied embedding (GPT-2; Llama --tied 1): the first stage forms both parts of its gradient in one process's order"
ref gplain4 0 --preset gpt2-tiny --accum 4
full run gpp2 2 --preset gpt2-tiny --pp 2 --microbatches 4 && full same "gpt2-tiny -np 2 --pp 2 --microbatches 4" gplain4 gpp2
run gpp4 4 --preset gpt2-tiny --pp 4 --microbatches 4 && same "gpt2-tiny -np 4 --pp 4 --microbatches 4" gplain4 gpp4
if ! quick; then # (the sanitizer build: the tied embedding's code paths above, at --pp 4 and with --zero 3 replicas)
  run gplain2 0 --preset gpt2-tiny --accum 2
  run gpp4m2 4 --preset gpt2-tiny --pp 4 --microbatches 2 && same "gpt2-tiny --pp 4 --microbatches 2 (M < P)" gplain2 gpp4m2
  run gplainbf 0 --preset gpt2-tiny --accum 4 --precision bf16 --kernel avx2 &&
    run gppbf 2 --preset gpt2-tiny --pp 2 --pp-layers 3,1 --microbatches 4 --precision bf16 --kernel avx2 &&
    same "gpt2-tiny --pp-layers 3,1 --precision bf16" gplainbf gppbf
  run tplain4 0 --tied 1 --accum 4
  run tpp13 2 --tied 1 --pp 2 --pp-layers 1,3 --microbatches 4 && same "llama-tiny --tied 1 --pp-layers 1,3" tplain4 tpp13
  run gdp4 1 --preset gpt2-tiny --zero 0 --accum 4
  run gpp2dp2 4 --preset gpt2-tiny --pp 2 --microbatches 2 --zero 0 && same "gpt2-tiny --pp 2 x 2 replicas --zero 0" gdp4 gpp2dp2
fi
quick || "$MW" "${tr[@]}" --steps 6 --preset gpt2-tiny --accum 4 --out "$T/gu6" >/dev/null 2>&1 || fail "gpt2-tiny's unbroken run"
mpr 2 "${tr[@]}" --steps 6 --preset gpt2-tiny --pp 2 --microbatches 4 --stop-at 2 --out "$T/gr6" >"$T/gr6a.out" 2>&1 || fail "gpt2-tiny --pp 2 to step 2"
mpr 4 "${tr[@]}" --steps 6 --preset gpt2-tiny --pp 4 --microbatches 4 --stop-at 4 --out "$T/gr6" --resume auto >"$T/gr6b.out" 2>&1 ||
  fail "gpt2-tiny --pp 4 resumed: $(grep -a memwall: "$T/gr6b.out" | head -2)"
"$MW" "${tr[@]}" --steps 6 --preset gpt2-tiny --accum 4 --out "$T/gr6" --resume auto >"$T/gr6c.out" 2>&1 || fail "gpt2-tiny one process resumed"
{ quick || { [ -n "$(ck "$T/gu6/step-00000006.mwck")" ] && [ "$(ck "$T/gu6/step-00000006.mwck")" = "$(ck "$T/gr6/step-00000006.mwck")" ]; }; } &&
  [ -f "$T/gr6/step-00000006.mwck" ] && grep -q "resumed from" "$T/gr6b.out" &&
  pass "gpt2-tiny saved at --pp 2, resumed at --pp 4, then at one process: $(bits "step 6 is the unbroken run's bytes")" ||
  fail "gpt2-tiny resume across layouts: $(ck "$T/gu6/step-00000006.mwck") vs $(ck "$T/gr6/step-00000006.mwck")"

echo "-- the disk tier (each stage its own scratch file) and every --recompute policy, per stage"
for o in $(quick || echo optimizer) optimizer+grads; do
  run "opp_$o" 2 --pp 2 --microbatches 4 --offload "$o" --offload-dir "$T/off_$o" && same "--offload $o at --pp 2" plain4 "opp_$o"
done
# a stage's resume reads AdamW's moments on the disk tier too (main's load skipped them: they restarted from zero)
"$MW" "${tr[@]}" --accum 4 --stop-at 1 --out "$T/oprs" >/dev/null 2>&1 || fail "one process to step 1"
mpr 2 "${tr[@]}" --pp 2 --microbatches 4 --offload optimizer --offload-dir "$T/off_rs" --out "$T/oprs" --resume auto >"$T/oprs.out" 2>&1 &&
  grep -q "resumed from" "$T/oprs.out" && [ -f "$T/oprs/step-00000003.mwck" ] &&
  { quick || [ "$(ck "$T/plain4/step-00000003.mwck")" = "$(ck "$T/oprs/step-00000003.mwck")" ]; } &&
  pass "saved at one process, resumed at --pp 2 --offload optimizer: $(bits "step 3 is the unbroken run's bytes")" ||
  fail "resume at --pp 2 --offload optimizer: $(grep -a memwall: "$T/oprs.out" | head -2) $(ck "$T/oprs/step-00000003.mwck")"
full run gpp4og 4 --preset gpt2-tiny --pp 4 --microbatches 4 --offload optimizer+grads --offload-dir "$T/off_g4" &&
  full same "gpt2-tiny --pp 4 --offload optimizer+grads (one block a stage)" gplain4 gpp4og
# --offload all keeps no whole parameters in memory: no params_crc32c; the reference is one process's --offload all
ref oplain_all 0 --accum 4 --offload all --offload-dir "$T/off_p_all"
run opp_all 2 --pp 2 --microbatches 4 --offload all --offload-dir "$T/off_pp_all" && same "--offload all at --pp 2" oplain_all opp_all
# --precision bf16 on the disk tier (issue 35): the blocks' gradients as their 2 bytes, under all the
# parameters' bfloat16 copy; a stage's norm reads the 2 bytes (one process sums them at the backward)
ref oplain_bf 0 --accum 4 --precision bf16 --kernel avx2 --offload all --offload-dir "$T/off_p_bf" &&
  run opp_bf_g 2 --pp 2 --microbatches 4 --precision bf16 --kernel avx2 --offload optimizer+grads --offload-dir "$T/off_pp_bf" &&
  NOCRC=1 same "--precision bf16 --offload optimizer+grads at --pp 2" oplain_bf opp_bf_g &&
  run opp_bf_a 2 --pp 2 --microbatches 4 --precision bf16 --kernel avx2 --offload all --offload-dir "$T/off_pp_bf" &&
  same "--precision bf16 --offload all at --pp 2" oplain_bf opp_bf_a
ref plain4s 0 --accum 4 --recompute selective
full run pps 4 --pp 4 --microbatches 4 --recompute selective && full same "--recompute selective at --pp 4" plain4s pps
# auto's choices come from timings (a sanitizer build chooses otherwise): each budget below leaves no
# choice of none, so whatever each stage picks it recomputes (or offloads), and the bits stay the plain run's
run ppauto 2 --pp 2 --microbatches 4 --recompute auto --budget 8.5MiB &&
  { quick || [ "$(sig "$T/plain4.jsonl")" = "$(sig "$T/ppauto.jsonl")" ]; } && grep -q "| recompute [a-z]" "$T/ppauto.out" && ! grep -q "| recompute none" "$T/ppauto.out" &&
  pass "--recompute auto --budget 8.5MiB at --pp 2 (stage 0: none does not fit): $(grep -o '| recompute [^ ]*' "$T/ppauto.out" | head -1), $(bits "the plain run's losses, norms and weights")" ||
  fail "--recompute auto at --pp 2: $(grep -a 'memwall:\|recompute' "$T/ppauto.out" | head -2)"
run ppoauto 2 --pp 2 --microbatches 4 --recompute none --offload auto --budget 7MiB --offload-dir "$T/off_auto" &&
  { quick || [ "$(sig "$T/plain4.jsonl")" = "$(sig "$T/ppoauto.jsonl")" ]; } && grep -q -- "--offload auto: .* -> optimizer" "$T/ppoauto.out" &&
  pass "--offload auto --budget 7MiB at --pp 2 (stage 0: none does not fit): $(grep -o -- '-> optimizer[+a-z]*' "$T/ppoauto.out" | head -1), $(bits "the plain run's losses, norms and weights")" ||
  fail "--offload auto at --pp 2: $(grep -a 'memwall:\|offload auto' "$T/ppoauto.out" | head -2)"
for r in opp_optimizer+grads opp_all ppauto ppoauto; do
  python3 -c 'import json,sys; e=[json.loads(l) for l in open(sys.argv[1]) if "\"event\": \"end\"" in l][0]; sys.exit(not all(r["arena_peak_bytes"] == r["plan_peak_bytes"] for r in e["ranks"]) or len(e["ranks"]) != 2)' "$T/$r.jsonl" &&
    pass "$r: each rank's arena peak is its plan" || fail "$r: a rank's arena is not its plan"
done

echo "-- the planner-chosen split (--pp-layers auto: the largest stage's planned peak least)"
au=(--layers 8 --batch 4 --seq 64)
"$MW" estimate --data "$T/d" --preset llama-tiny "${au[@]}" --threads 1 --pp 4 --microbatches 4 --pp-layers auto --json >"$T/au.json" &&
  "$MW" estimate --data "$T/d" --preset llama-tiny "${au[@]}" --threads 1 --pp 4 --microbatches 4 --json >"$T/ev.json" &&
  python3 - "$T/au.json" "$T/ev.json" <<'EOF' && pass "estimate --pp 4 --pp-layers auto: $(cat "$T/au.txt")" || fail "--pp-layers auto's split: $(cat "$T/au.txt" 2>/dev/null)"
import json, sys
a, e = (json.load(open(f)) for f in sys.argv[1:3])
mx = lambda d: max(x["peak_bytes"] for x in d["ranks"])
split = a["layout"]["pp_layers"]
open(sys.argv[1][:-5] + ".txt", "w").write("chose %s, largest stage %d bytes, the even split's %d" % (",".join(map(str, split)), mx(a), mx(e)))
sys.exit(not (split == [1, 2, 2, 3] and mx(a) < mx(e)))
EOF
ref auplain 0 "${au[@]}" --accum 4
run aupp 4 "${au[@]}" --pp 4 --microbatches 4 --pp-layers auto && same "train --pp 4 --pp-layers auto" auplain aupp
grep -q "pipeline split: --pp-layers auto chose 1,2,2,3" "$T/aupp.out" && pass "train prints the split it chose (1,2,2,3)" ||
  fail "train --pp-layers auto: $(grep -a 'split\|memwall:' "$T/aupp.out" | head -2)"

echo "-- each rank's arena is its plan, and estimate's"
pe=(--data "$T/d" --preset llama-tiny --batch 2 --seq 32 --threads 1) # plans JSONL ESTIMATE-ARGS (lib_cli.sh)
x=$(plans "$T/pp4.jsonl" "${pe[@]}" --pp 4 --microbatches 4) && pass "--pp 4: arena = plan = estimate --pp 4 per rank ($x)" || fail "--pp 4 per rank: $x"
x=$(plans "$T/pp13.jsonl" "${pe[@]}" --pp 2 --pp-layers 1,3 --microbatches 4 --recompute blocks:fsnn) &&
  pass "--pp-layers 1,3: arena = plan = estimate per rank ($x)" || fail "--pp-layers 1,3 per rank: $x"
x=$(plans "$T/ppzadamw.jsonl" "${pe[@]}" --pp 2 --dp 2 --zero 1 --microbatches 2) &&
  pass "--pp 2 --dp 2 --zero 1: arena = plan = estimate per rank ($x)" || fail "--pp 2 --zero 1 per rank: $x"

x=$(plans "$T/opp_optimizer+grads.jsonl" "${pe[@]}" --pp 2 --microbatches 4 --offload optimizer+grads --offload-dir "$T/off_est") &&
  pass "--pp 2 --offload optimizer+grads: arena = plan = estimate per rank ($x)" || fail "--offload optimizer+grads per rank: $x"
x=$(plans "$T/z2.jsonl" "${pe[@]}" --pp 2 --dp 2 --zero 2 --microbatches 2) &&
  pass "--pp 2 --dp 2 --zero 2: arena = plan = estimate per rank ($x)" || fail "--pp 2 --zero 2 per rank: $x"
x=$(plans "$T/z3.jsonl" "${pe[@]}" --pp 2 --pp-layers 3,1 --dp 2 --zero 3 --microbatches 2) &&
  pass "--pp-layers 3,1 --dp 2 --zero 3: arena = plan = estimate per rank ($x)" || fail "--pp 2 --zero 3 per rank: $x"
x=$(plans "$T/gpp4.jsonl" "${pe[@]/llama-tiny/gpt2-tiny}" --pp 4 --microbatches 4) &&
  pass "gpt2-tiny --pp 4 (the last stage's copy of the tied embedding): arena = plan = estimate per rank ($x)" || fail "gpt2-tiny --pp 4 per rank: $x"

echo "-- the schedule drawn (plan --timeline)"
"$MW" plan --preset llama-tiny --layers 32 --world 4 --pp 4 --microbatches 8 --timeline "$T/s.svg" >"$T/s.out" 2>&1 || fail "plan --timeline: exit $?"
nf=$(grep -c 'fill="#4e79a7"' "$T/s.svg") nb=$(grep -c 'fill="#f28e2b"' "$T/s.svg")
[ "$nf" = 32 ] && [ "$nb" = 32 ] && grep -q "bubble 0.426 of the busy time ((p - 1) / m = 0.375)" "$T/s.out" &&
  pass "plan --pp 4 --microbatches 8 --timeline: 4 lanes of 8 forwards and 8 backwards, bubble 0.426 ((p - 1) / m = 0.375)" ||
  fail "the schedule's drawing: $nf forwards, $nb backwards, $(grep timeline "$T/s.out")"
"$MW" plan --preset llama-tiny --world 4 --pp 4 --microbatches 1 --timeline "$T/s1.svg" | grep -q "bubble 3.000 of the busy time ((p - 1) / m = 3.000)" &&
  pass "one micro-batch: the bubble is (p - 1) / m = 3 exactly" || fail "one micro-batch's bubble"

echo "-- layout-free checkpoints: resume across layouts"
long6=(--steps 6)
quick || "$MW" "${tr[@]}" "${long6[@]}" --accum 4 --out "$T/u6" >/dev/null 2>&1 || fail "the unbroken run"
mpr 4 "${tr[@]}" "${long6[@]}" --pp 4 --microbatches 4 --stop-at 2 --out "$T/r6" >"$T/r6a.out" 2>&1 || fail "--pp 4 to step 2"
mpr 2 "${tr[@]}" "${long6[@]}" --pp 2 --pp-layers 1,3 --microbatches 4 --stop-at 4 --out "$T/r6" --resume auto >"$T/r6b.out" 2>&1 ||
  fail "--pp 2 resumed: $(grep -a memwall: "$T/r6b.out" | head -2)"
"$MW" "${tr[@]}" "${long6[@]}" --accum 4 --out "$T/r6" --resume auto >"$T/r6c.out" 2>&1 || fail "one process resumed"
{ quick || { [ -n "$(ck "$T/u6/step-00000006.mwck")" ] && [ "$(ck "$T/u6/step-00000006.mwck")" = "$(ck "$T/r6/step-00000006.mwck")" ]; }; } &&
  [ -f "$T/r6/step-00000006.mwck" ] && grep -q "resumed from" "$T/r6b.out" &&
  pass "saved at --pp 4, resumed at --pp-layers 1,3, then at one process: $(bits "step 6 is the unbroken run's bytes")" ||
  fail "resume across layouts: $(ck "$T/u6/step-00000006.mwck") vs $(ck "$T/r6/step-00000006.mwck")"
# a layout's --microbatches is its --accum: another value is refused, as --accum's is (main ran the checkpoint's 4)
mpr 2 "${tr[@]}" "${long6[@]}" --pp 2 --microbatches 2 --out "$T/r6" --resume auto >"$T/rmb.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "trained with 4 micro-batches per step, the command line says 2" "$T/rmb.out" &&
  pass "resumed at --microbatches 2 (the checkpoint's 4): refused (exit 1)" || fail "--microbatches 2 on a 4's checkpoint: exit $rc, $(grep -a 'memwall:\|accum=' "$T/rmb.out" | head -2)"
quick || mpr 1 "${tr[@]}" "${long6[@]}" --zero 0 --accum 4 --save-every 2 --out "$T/du6" >/dev/null 2>&1 || fail "the unbroken data-parallel run"
# sharded replicas both ways: --zero 1's checkpoint resumed at 2 data-parallel ranks, whose
# checkpoint resumes at --zero 3 (each stage's replicas keeping their shard of what they read)
mpr 4 "${tr[@]}" "${long6[@]}" --pp 2 --microbatches 2 --zero 1 --save-every 2 --stop-at 2 --out "$T/dr6" >"$T/dr6a.out" 2>&1 || fail "--pp 2 x 2 replicas --zero 1 to step 2"
mpr 2 "${tr[@]}" "${long6[@]}" --zero 0 --accum 2 --save-every 2 --stop-at 4 --out "$T/dr6" --resume auto >"$T/dr6b.out" 2>&1 ||
  fail "--zero 0 on 2 ranks resumed: $(grep -a memwall: "$T/dr6b.out" | head -2)"
mpr 4 "${tr[@]}" "${long6[@]}" --pp 2 --pp-layers 3,1 --microbatches 2 --zero 3 --save-every 2 --out "$T/dr6" --resume auto >"$T/dr6c.out" 2>&1 ||
  fail "--pp 2 x 2 replicas --zero 3 resumed: $(grep -a memwall: "$T/dr6c.out" | head -2)"
{ quick || { [ -n "$(ck "$T/du6/step-00000006.mwck")" ] && [ "$(ck "$T/du6/step-00000002.mwck")" = "$(ck "$T/dr6/step-00000002.mwck")" ] &&
  [ "$(ck "$T/du6/step-00000006.mwck")" = "$(ck "$T/dr6/step-00000006.mwck")" ]; }; } &&
  [ -f "$T/dr6/step-00000006.mwck" ] && grep -q "resumed from" "$T/dr6c.out" &&
  pass "saved at --pp 2 x 2 replicas --zero 1, resumed at 2 data-parallel ranks, then at --zero 3: $(bits "steps 2 and 6 are the unbroken run's bytes")" ||
  fail "resume from --pp 2 x 2 replicas: $(ck "$T/du6/step-00000006.mwck") vs $(ck "$T/dr6/step-00000006.mwck")"

echo "-- refused before step 1 (exit 1, one line, nothing written)"
refuse() { # refuse N WHAT PATTERN ARGS...: memwall ARGS on N ranks (0: without mpirun) exits 1 saying PATTERN
  local n=$1 what=$2 pat=$3
  shift 3
  rm -rf "$T/no"
  if [ "$n" = 0 ]; then "$MW" "${tr[@]}" --out "$T/no" "$@" >"$T/rf.out" 2>&1; else mpr "$n" "${tr[@]}" --out "$T/no" "$@" >"$T/rf.out" 2>&1; fi
  local rc=$?
  [ $rc -ne 0 ] && grep -q -- "$pat" "$T/rf.out" && [ ! -e "$T/no" ] && pass "$what -> exit $rc: $(grep -a -m1 -- "$pat" "$T/rf.out")" ||
    fail "$what: exit $rc, $(grep -a memwall: "$T/rf.out" | head -2)"
}
refuse 2 "--pp 5 (P > L)" "more stages than the model's 4 blocks" --pp 5 --microbatches 4
refuse 2 "--pp-layers 1,2 on 4 blocks" "sums to 3 blocks, the model has 4" --pp 2 --pp-layers 1,2
refuse 3 "3 ranks of --pp 2" "a multiple of the stages" --pp 2
"$MW" estimate --preset llama-tiny --pp 2 --vpp 2 --pp-layers auto --microbatches 4 >"$T/vau.out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -q "interleaved schedule needs an even split" "$T/vau.out" && pass "--pp-layers auto with --vpp 2: refused (exit 1)" ||
  fail "--pp-layers auto --vpp 2: exit $rc, $(head -c 200 "$T/vau.out")"
mpr 2 "${tr[@]}" --pp 2 --eval-batches 100000 >"$T/ev.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "fewer than --eval-batches 100000" "$T/ev.out" && ! grep -q "^step 1" "$T/ev.out" &&
  pass "--eval-batches past the validation split's whole batches: refused before step 1 (exit $rc)" ||
  fail "--eval-batches 100000: exit $rc, $(grep -a memwall: "$T/ev.out" | head -2)"
mpirun -np 1 "$MW" "${tr[@]}" --pp 2 --lr 1e-3 : -np 1 "$MW" "${tr[@]}" --pp 2 --lr 2e-3 >"$T/mpmd.out" 2>&1
rc=$?
[ $rc -ne 0 ] && grep -q "rank 1's configuration" "$T/mpmd.out" && pass "stages given different --lr: refused (exit $rc)" ||
  fail "different --lr: exit $rc, $(grep -a memwall: "$T/mpmd.out" | head -2)"
if ! quick; then # (the same refusal as --lr's)
  mpirun -np 1 "$MW" "${tr[@]}" --pp 2 --pp-layers 1,3 : -np 1 "$MW" "${tr[@]}" --pp 2 --pp-layers 3,1 >"$T/mpmd2.out" 2>&1
  rc=$?
  [ $rc -ne 0 ] && grep -q "rank 1's configuration" "$T/mpmd2.out" && pass "stages given different --pp-layers: refused (exit $rc)" ||
    fail "different --pp-layers: exit $rc, $(grep -a memwall: "$T/mpmd2.out" | head -2)"
fi

echo "-- faults"
long=(train --data "$T/d" --preset llama-tiny --batch 2 --seq 32 --lr 1e-3 --warmup 2 --steps 40 --threads 1
  --log-every 1000 --save-every 10 --keep 20 --pp 2 --microbatches 2)
quick || "$MW" train --data "$T/d" --preset llama-tiny --batch 2 --seq 32 --lr 1e-3 --warmup 2 --steps 40 --threads 1 \
  --log-every 1000 --save-every 10 --keep 20 --accum 2 --out "$T/unbroken" >"$T/unbroken.out" 2>&1 || fail "the unbroken run"
hit_rank KILL "$T/killed/step-00000020.mwck" 2 "${long[@]}" --out "$T/killed" # (lib_cli.sh)
[ $rc -ne 0 ] && [ $dt -le 30 ] && pass "a stage killed (SIGKILL): every rank stops in ${dt} s, exit $rc" ||
  fail "killed stage: exit $rc after ${dt} s"
[ -f "$T/killed/step-00000040.mwck" ] && echo "  note: the run ended before the kill; the resume below checks nothing new"
ls "$T/killed"/.step-* >/dev/null 2>&1 && echo "  note: a temporary file of the interrupted save is left (never taken as a checkpoint)"
mpr 2 "${long[@]}" --out "$T/killed" --resume auto >"$T/resumed.out" 2>&1 || fail "resume after the kill: $(grep -a memwall: "$T/resumed.out" | head -2)"
grep -q "resumed from" "$T/resumed.out" && pass "--resume auto after the kill: $(grep -o 'resumed from [^ ]* at step [0-9]*' "$T/resumed.out")" ||
  fail "no resume: $(head -c 300 "$T/resumed.out")"
a=$(ck "$T/unbroken/step-00000040.mwck") b=$(ck "$T/killed/step-00000040.mwck")
[ -n "$b" ] && { quick || [ "$a" = "$b" ]; } && pass "killed, resumed: $(bits "step 40 is the unbroken run's bytes")" || fail "after the kill: $a vs $b"
# a replica killed in the middle of step 4's save (MEMWALL_CKPT_KILL: after its shards went to replica 0,
# before the ranks agree): no step-4 checkpoint, step 2's intact, and the resume ends on the unbroken bytes
rm -rf "$T/ks"
t0=$(date +%s)
mpirun -np 3 "$MW" "${tr[@]}" "${long6[@]}" --pp 2 --microbatches 2 --zero 1 --save-every 2 --out "$T/ks" : \
  -np 1 env MEMWALL_CKPT_KILL=4 "$MW" "${tr[@]}" "${long6[@]}" --pp 2 --microbatches 2 --zero 1 --save-every 2 --out "$T/ks" >"$T/ks.out" 2>&1
rc=$?
dt=$(($(date +%s) - t0))
[ $rc -ne 0 ] && [ $dt -le 120 ] && [ ! -e "$T/ks/step-00000004.mwck" ] && [ -f "$T/ks/step-00000002.mwck" ] &&
  { quick || [ "$(ck "$T/du6/step-00000002.mwck")" = "$(ck "$T/ks/step-00000002.mwck")" ]; } &&
  pass "--pp 2 x 2 --zero 1, a replica killed while saving step 4: the run ends (${dt} s from its start, exit $rc), no step 4, $(bits "step 2 intact")" ||
  fail "a replica killed while saving: exit $rc after ${dt} s, $(ls -a "$T/ks" | tr '\n' ' ')"
mpr 4 "${tr[@]}" "${long6[@]}" --pp 2 --microbatches 2 --zero 1 --save-every 2 --out "$T/ks" --resume auto >"$T/ks2.out" 2>&1 &&
  grep -q "resumed from $T/ks/step-00000002.mwck" "$T/ks2.out" && [ -f "$T/ks/step-00000006.mwck" ] &&
  { quick || [ "$(ck "$T/du6/step-00000006.mwck")" = "$(ck "$T/ks/step-00000006.mwck")" ]; } &&
  pass "resumed from step 2 after the killed save: $(bits "step 6 is the unbroken run's bytes")" ||
  fail "resume after the killed save: $(grep -a 'memwall:\|resumed' "$T/ks2.out" | head -2)"
# (with the disk tier: the rank the watchdog ends removes its scratch file, as on mpirun's SIGTERM)
hit_rank STOP "$T/stalled/step-00000010.mwck" 2 "${long[@]}" --out "$T/stalled" --comm-timeout 3 --offload optimizer --offload-dir "$T/stall_off"
[ $rc -ne 0 ] && [ $dt -le 30 ] && grep -q "waited more than 3 s (--comm-timeout)" "$T/hit.out" &&
  pass "a stage stopped (SIGSTOP): the other exits after --comm-timeout 3 (${dt} s, exit $rc)" ||
  fail "stopped stage: exit $rc after ${dt} s: $(grep -a memwall: "$T/hit.out" | head -2)"
left=$(find "$T/stall_off" -name 'memwall-offload-*.scratch' ! -name "memwall-offload-$victim.scratch" 2>/dev/null)
[ -z "$left" ] && pass "the rank ended by --comm-timeout removed its disk tier's scratch file" ||
  fail "the watchdog's rank left its scratch file: $left"

[ $fails -eq 0 ] && echo "cli_parallel: all passed" || { echo "cli_parallel: $fails failed"; exit 1; }
