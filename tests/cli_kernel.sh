#!/usr/bin/env bash
# End-to-end tests of the compute kernels (issue 12, items 2 and 3): --kernel and MEMWALL_KERNEL on
# every command, the kernel named where the run is described, byte-identical checkpoints under
# every kernel this CPU runs (and across a resume on another kernel), and, under qemu-user, other
# x86 CPUs: an AVX2-only one (Haswell) picks avx2 and gives the same bytes, one without AVX
# (Nehalem) is refused at start-up. Usage: tests/cli_kernel.sh build/memwall
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_kernel_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail, json_field, expect_error
unset MEMWALL_KERNEL
# has FILE TEXT WHAT: FILE contains TEXT (fixed string)
has() { grep -qF -- "$2" "$1" && pass "$3" || fail "$3: '$2' not in $(head -c 600 "$1")"; }
# same A B WHAT: two files are byte for byte the same
same() { cmp -s "$1" "$2" && pass "$3" || fail "$3: $(cmp "$1" "$2" 2>&1)"; }

cat /usr/share/common-licenses/GPL-3 >"$T/corpus.txt"
"$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
# a tiny run: 4 steps of gpt2-tiny, a checkpoint at step 2 and at the end
tr=(train --data "$T/d" --threads 2 --batch 2 --seq 16 --steps 4 --eval-batches 2)

echo "-- the kernels this CPU runs"
"$MW" --version >"$T/ver" 2>&1 || fail "--version: $(cat "$T/ver")"
avail=$(sed -n 's/^kernel [a-z0-9]* (this CPU runs \([^;]*\);.*/\1/p' "$T/ver")
best=$(sed -n 's/^kernel \([a-z0-9]*\) (this CPU runs.*/\1/p' "$T/ver")
[ -n "$avail" ] && [ "${avail%%,*}" = portable ] && pass "--version names the kernel in use and those this CPU runs: $(sed -n 2p "$T/ver")" ||
  fail "--version: $(cat "$T/ver")"
# auto: the newest instruction set of the FMA family, but avx512bf16 only where its vdpbf16ps is
# faster than avx512's emulation of it (the same bits either way); amx (the AMX family) only ever
# for bfloat16 products
fma_avail=${avail%, amx}
want=${fma_avail##*, }
[ "$want" = avx512bf16 ] && [ "$best" = avx512 ] && want=avx512
[ -n "$best" ] && [ "$best" = "$want" ] && pass "auto is the fastest of them ($best)" || fail "auto: $(cat "$T/ver")"
ok=() fma=()
for k in portable avx2 avx512 avx512bf16 neon amx; do
  if [[ ", $avail, " == *", $k, "* ]]; then
    ok+=("$k")
    [ $k = amx ] || fma+=("$k")
    continue
  fi
  if [ $k = amx ] && grep -qw amx_bf16 /proc/cpuinfo; then
    echo "  (this CPU has AMX-BF16, but the operating system refused its tiles: amx falls back, tested below)"
    continue
  fi
  # a kernel the CPU lacks (on x86-64 neon always is one): refused clearly, naming those it runs
  expect_error 1 "--kernel $k (not on this CPU) is refused" -- "$MW" "${tr[@]}" --kernel $k --out "$T/no_$k"
  has "$T/err" "kernel $k cannot run here" "the refusal names the kernel"
  has "$T/err" "this CPU and build run $avail" "and the kernels this CPU runs"
  expect_error 1 "MEMWALL_KERNEL=$k (not on this CPU) is refused" -- env MEMWALL_KERNEL=$k "$MW" "${tr[@]}" --out "$T/no_$k"
  has "$T/err" "MEMWALL_KERNEL=$k: kernel $k cannot run here" "the refusal names the variable"
  [ ! -e "$T/no_$k" ] && pass "a refused kernel trains nothing" || fail "$T/no_$k was created"
done
echo "  (this CPU runs: ${ok[*]})"

echo "-- every kernel gives the same checkpoint bytes (item 3)"
for k in "${ok[@]}"; do
  "$MW" "${tr[@]}" --save-every 2 --kernel "$k" --out "$T/k_$k" >"$T/out_$k" 2>&1 || fail "--kernel $k: $(tail -2 "$T/out_$k")"
  head -1 "$T/out_$k" | grep -q "| threads 2 | kernel $k |" && pass "--kernel $k: train's header line names it" ||
    fail "--kernel $k header: $(head -1 "$T/out_$k")"
  for s in 2 4; do same "$T/k_portable/step-0000000$s.mwck" "$T/k_$k/step-0000000$s.mwck" "$k = portable at step $s"; done
  env MEMWALL_KERNEL="$k" "$MW" "${tr[@]}" --save-every 2 --out "$T/e_$k" >"$T/out" 2>"$T/err" || fail "MEMWALL_KERNEL=$k: $(tail -2 "$T/err")"
  head -1 "$T/out" | grep -q "| kernel $k |" && [ ! -s "$T/err" ] && pass "MEMWALL_KERNEL=$k works as --kernel $k" ||
    fail "MEMWALL_KERNEL=$k: $(head -1 "$T/out") $(cat "$T/err")"
  same "$T/k_portable/step-00000004.mwck" "$T/e_$k/step-00000004.mwck" "MEMWALL_KERNEL=$k = portable"
done
echo "-- and the same bytes for bfloat16 products (--precision bf16: vdpbf16ps or its emulation), the FMA family"
for k in "${fma[@]}"; do
  "$MW" "${tr[@]}" --precision bf16 --kernel "$k" --out "$T/b_$k" >"$T/out_$k" 2>&1 || fail "--precision bf16 --kernel $k: $(tail -2 "$T/out_$k")"
  same "$T/b_portable/step-00000004.mwck" "$T/b_$k/step-00000004.mwck" "bf16: $k = portable at step 4"
done
cmp -s "$T/b_portable/step-00000004.mwck" "$T/k_portable/step-00000004.mwck" &&
  fail "bf16 products gave fp32's checkpoint" || pass "bf16 products change the numbers (not fp32's checkpoint)"
grep -aq "kernel" "$T/k_$best/step-00000004.mwck" && fail "the checkpoint records the kernel" ||
  pass "the checkpoint records no kernel (it does not change the bits)"
grep -aq "numerics=" "$T/b_portable/step-00000004.mwck" && fail "an FMA-family checkpoint names its numerics (the format changed)" ||
  pass "an FMA-family bf16 checkpoint is as before (no numerics key)"

echo "-- amx: bfloat16 products on AMX tiles, their own family (issue 36)"
# the refusal of the tiles by the operating system (MEMWALL_AMX_REFUSE=1 acts it out): the best
# FMA-family kernel, with a one-line note, and its bits
if grep -qw amx_bf16 /proc/cpuinfo; then
  MEMWALL_AMX_REFUSE=1 "$MW" "${tr[@]}" --precision bf16 --kernel amx --out "$T/ref" >"$T/out" 2>"$T/err" ||
    fail "--kernel amx refused by the OS: $(tail -2 "$T/err")"
  [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^memwall: note: the operating system refused AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM): bfloat16 products run $best instead$" "$T/err" &&
    pass "tiles refused: one note: $(cat "$T/err")" || fail "refused note: $(cat "$T/err")"
  head -1 "$T/out" | grep -q "| kernel amx |" && fail "tiles refused, yet the header says amx" || pass "and the header names the kernel that ran: $(head -1 "$T/out" | grep -o '| kernel [a-z0-9]* |')"
  same "$T/b_portable/step-00000004.mwck" "$T/ref/step-00000004.mwck" "tiles refused: the FMA family's bytes"
  MEMWALL_AMX_REFUSE=1 "$MW" "${tr[@]}" --precision bf16 --steps 1 >"$T/out" 2>"$T/err"
  [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "refused AMX tile data" "$T/err" && ! head -1 "$T/out" | grep -q "| kernel amx |" &&
    pass "auto with the tiles refused: the FMA family, one note" || fail "auto refused: $(head -1 "$T/out") $(cat "$T/err")"
fi
if [[ " ${ok[*]} " != *" amx "* ]]; then
  echo "  skip amx's runs: this CPU or system does not run amx ($avail)"
else
  "$MW" "${tr[@]}" --save-every 2 --precision bf16 --kernel amx --out "$T/x2" >"$T/out" 2>&1 || fail "--kernel amx: $(tail -2 "$T/out")"
  "$MW" "${tr[@]}" --save-every 2 --precision bf16 --kernel amx --threads 1 --out "$T/x1" >/dev/null 2>&1 || fail "--kernel amx --threads 1"
  same "$T/x2/step-00000004.mwck" "$T/x1/step-00000004.mwck" "bf16 on amx: 1 thread = 2 threads"
  cmp -s "$T/x2/step-00000004.mwck" "$T/b_portable/step-00000004.mwck" && fail "amx gave the FMA family's bytes" ||
    pass "amx's bf16 bytes are its own (not the FMA family's)"
  grep -aq "^numerics=amx$" "$T/x2/step-00000004.mwck" && pass "its checkpoint records numerics=amx" || fail "no numerics=amx in amx's checkpoint"
  same "$T/k_portable/step-00000004.mwck" "$T/k_amx/step-00000004.mwck" "fp32 under --kernel amx: the FMA family's bytes (fp32 never runs on the tiles)"
  # auto: bfloat16 products on amx where --version says so (it pays here), fp32 ones on $best
  bfk=$(sed -n 's/^bf16 products: kernel \([a-z0-9]*\) .*/\1/p' "$T/ver")
  "$MW" "${tr[@]}" --precision bf16 --steps 1 >"$T/out" 2>&1 && head -1 "$T/out" | grep -q "| kernel ${bfk:-$best} |" &&
    pass "auto runs bf16 products on ${bfk:-$best} (--version's line: ${bfk:-none, amx does not pay})" || fail "auto bf16: $(head -1 "$T/out")"
  echo "-- resume across the families: allowed, with a note; within one, silent and exact"
  note="the continuation's bits differ"
  "$MW" "${tr[@]}" --precision bf16 --kernel amx --stop-at 2 --out "$T/X" >/dev/null 2>&1 || fail "first half on amx"
  "$MW" "${tr[@]}" --kernel amx --resume auto --out "$T/X" >"$T/out" 2>&1 || fail "resume on amx: $(tail -2 "$T/out")"
  ! grep -q "note: .*family" "$T/out" && pass "amx -> amx: no note" || fail "amx -> amx noted: $(grep note "$T/out")"
  "$MW" "${tr[@]}" --precision bf16 --kernel amx --out "$T/XS" >/dev/null 2>&1 || fail "straight run on amx"
  same "$T/XS/step-00000004.mwck" "$T/X/step-00000004.mwck" "2 steps on amx + 2 resumed on amx = 4 straight steps"
  "$MW" "${tr[@]}" --precision bf16 --kernel amx --stop-at 2 --out "$T/Y" >/dev/null 2>&1 || fail "first half on amx"
  "$MW" "${tr[@]}" --kernel "${fma[${#fma[@]}-1]}" --resume auto --out "$T/Y" >"$T/out" 2>&1 || fail "resume on FMA: $(tail -2 "$T/out")"
  [ "$(grep -c "note: .*family" "$T/out")" -eq 1 ] &&
    grep -q "note: .*step-00000002.mwck was trained with the amx family's products, this run continues with the fma family's (kernel ${fma[${#fma[@]}-1]}): from step 2 the bits differ from an uninterrupted run's" "$T/out" &&
    pass "amx -> ${fma[${#fma[@]}-1]}: one note" || fail "amx -> FMA: $(grep -i note "$T/out")"
  grep -aq "numerics=" "$T/Y/step-00000004.mwck" && fail "continued on the FMA family, yet numerics recorded" || pass "and its checkpoint is the FMA family's"
  "$MW" "${tr[@]}" --precision bf16 --kernel portable --stop-at 2 --out "$T/Z" >/dev/null 2>&1 || fail "first half on portable"
  "$MW" "${tr[@]}" --kernel amx --resume auto --out "$T/Z" >"$T/out" 2>&1 || fail "resume on amx: $(tail -2 "$T/out")"
  grep -q "note: .*trained with the fma family's products, this run continues with the amx family's (kernel amx)" "$T/out" &&
    pass "portable -> amx: the note" || fail "FMA -> amx: $(grep -i note "$T/out")"
fi

echo "-- resume on another kernel continues exactly"
first=$best
[[ " ${ok[*]} " == *" avx512 "* ]] && first=avx512
"$MW" "${tr[@]}" --kernel "$first" --stop-at 2 --out "$T/R" >"$T/out" 2>&1 || fail "first half on $first: $(tail -2 "$T/out")"
"$MW" "${tr[@]}" --kernel portable --resume auto --out "$T/R" >"$T/out" 2>&1 &&
  grep -q "resumed from .*step-00000002.mwck at step 2 of 4" "$T/out" || fail "resume on portable: $(tail -3 "$T/out")"
"$MW" "${tr[@]}" --kernel "$first" --out "$T/S" >/dev/null 2>&1 || fail "straight run"
same "$T/S/step-00000004.mwck" "$T/R/step-00000004.mwck" "2 steps on $first + 2 resumed on portable = 4 straight steps"

echo "-- auto, the flag against the variable, bad values"
"$MW" "${tr[@]}" --steps 1 >"$T/out" 2>&1 && head -1 "$T/out" | grep -q "| kernel $best |" &&
  pass "no flag, no variable: auto picks $best" || fail "auto: $(head -1 "$T/out")"
env MEMWALL_KERNEL=auto "$MW" "${tr[@]}" --steps 1 >"$T/out" 2>&1 && head -1 "$T/out" | grep -q "| kernel $best |" &&
  pass "MEMWALL_KERNEL=auto picks $best" || fail "MEMWALL_KERNEL=auto: $(head -1 "$T/out")"
env MEMWALL_KERNEL=portable "$MW" "${tr[@]}" --steps 1 --kernel "$best" >"$T/out" 2>"$T/err" &&
  head -1 "$T/out" | grep -q "| kernel $best |" && [ "$(wc -l <"$T/err")" -eq 1 ] &&
  grep -q "^memwall: note: --kernel $best overrides MEMWALL_KERNEL=portable$" "$T/err" &&
  pass "--kernel wins over MEMWALL_KERNEL, with a one-line note" || fail "flag vs variable: $(head -1 "$T/out") $(cat "$T/err")"
env MEMWALL_KERNEL="$best" "$MW" "${tr[@]}" --steps 1 --kernel "$best" >"$T/out" 2>"$T/err" && [ ! -s "$T/err" ] &&
  pass "no note when they agree" || fail "agreeing flag and variable: $(cat "$T/err")"
expect_error 1 "--kernel bogus" -- "$MW" "${tr[@]}" --kernel bogus
has "$T/err" "unknown kernel 'bogus': expected auto, portable, avx2, avx512, avx512bf16 or amx" "the error lists the names"
expect_error 1 "MEMWALL_KERNEL=bogus (not the library's warning and fallback)" -- env MEMWALL_KERNEL=bogus "$MW" "${tr[@]}"
has "$T/err" "MEMWALL_KERNEL=bogus: unknown kernel 'bogus'" "the error names the variable"
expect_error 1 "--kernel without a value" -- "$MW" "${tr[@]}" --kernel
expect_error 1 "MEMWALL_KERNEL=bogus with --version" -- env MEMWALL_KERNEL=bogus "$MW" --version

echo "-- every command takes --kernel"
for c in train bench estimate plan prepare export sample eval tokenize detokenize; do
  "$MW" help $c | grep -q -- "--kernel NAME .*auto.*portable, avx2, avx512.*MEMWALL_KERNEL.*(default auto)$" ||
    { fail "help $c does not list --kernel with its default"; continue; }
  expect_error 1 "$c --kernel bogus" -- "$MW" $c --kernel bogus </dev/null
  grep -q "unknown kernel 'bogus'" "$T/err" || fail "$c: another error than the kernel's: $(cat "$T/err")"
done
echo hello | "$MW" tokenize --kernel portable >"$T/out" 2>&1 && [ "$(cat "$T/out")" = "104 101 108 108 111 10" ] &&
  pass "tokenize --kernel portable runs" || fail "tokenize --kernel: $(cat "$T/out")"
"$MW" sample --ckpt "$T/k_$best" --tokens 4 --kernel portable >"$T/out" 2>&1 && pass "sample --kernel portable runs" ||
  fail "sample --kernel: $(tail -2 "$T/out")"

echo "-- bench names the kernel"
"$MW" bench --threads 1 --batch 1 --seq 16 --steps 1 --warmup 0 --kernel portable --json >"$T/b.json" 2>/dev/null &&
  grep -q '"kernel": "portable"' "$T/b.json" && pass "bench --json: \"kernel\": \"portable\"" || fail "bench --json: $(cat "$T/b.json")"
"$MW" bench --threads 1 --batch 1 --seq 16 --steps 1 --warmup 0 >"$T/out" 2>&1 && head -1 "$T/out" | grep -q "| kernel $best |" &&
  pass "bench's header line names the kernel ($best)" || fail "bench header: $(head -1 "$T/out")"

echo "-- the GEMMs' packing buffer in the plan (issue 36): one block of B as wide as the model, 512 to 768"
# gemm_pack = threads x (a 120 x 256 block of A) + a 256 x NC block of B, in floats; NC is the width
# C rounded up to 32 within 512..768 for fp32 products (a weight gradient, A transposed, packs A
# once per block of B), 512 for bfloat16 ones
pack() { # pack WHAT NC FLAGS...: the plan's gemm_pack bytes at 2 threads
  local what=$1 nc=$2
  shift 2
  "$MW" plan --threads 2 --batch 1 --seq 16 --json "$@" >"$T/plan.json" 2>&1 || { fail "plan $what: $(tail -1 "$T/plan.json")"; return; }
  local got want=$((4 * (2 * 120 * 256 + 256 * nc)))
  got=$(grep -o '"name": "gemm_pack", "category": "workspace", "tier": "device", "bytes": [0-9]*' "$T/plan.json" | sed 's/.*: //')
  [ "$got" = "$want" ] && pass "$what: gemm_pack $got bytes (B's block $nc columns)" || fail "$what: gemm_pack '$got' bytes, want $want"
}
pack "gpt2 (C 768), fp32" 768 --preset gpt2
pack "gpt2 (C 768), bf16" 512 --preset gpt2 --precision bf16
pack "smollm-135m (C 576), fp32" 576 --preset smollm-135m
pack "gpt2-tiny (C 128), fp32" 512 --preset gpt2-tiny
pack "gpt2 at C 1024, fp32" 768 --preset gpt2 --layers 2 --dim 1024 --heads 16

echo "-- other x86 CPUs under qemu-user"
# OMP_WAIT_POLICY is set so that memwall does not re-execute itself (src/cli/omp_env.c): that exec
# would run the binary natively, outside qemu; for the same reason variables are set outside qemu,
# never through env(1) inside it.
qrun() { # qrun CPU CMD...: stdout in $T/out, stderr without qemu's TCG warnings in $T/err
  local cpu=$1
  shift
  OMP_WAIT_POLICY=passive qemu-x86_64 -cpu "$cpu" "$@" >"$T/out" 2>"$T/qerr"
  local rc=$?
  grep -v "^qemu-x86_64: warning: TCG doesn't support requested feature" "$T/qerr" >"$T/err"
  return $rc
}
# qerror CPU WHAT CMD...: CMD under qemu exits 1 with one "memwall: " line on stderr
qerror() {
  local cpu=$1 what=$2
  shift 2
  qrun "$cpu" "$@"
  local rc=$?
  [ $rc -eq 1 ] && [ "$(wc -l <"$T/err")" -eq 1 ] && grep -q "^memwall: " "$T/err" &&
    pass "$what -> exit 1: $(cat "$T/err")" || fail "$what: exit $rc, stderr: $(head -c 400 "$T/err")"
}
if [ "$(uname -m)" != x86_64 ]; then
  echo "  skip qemu tests: not an x86-64 machine"
elif ! command -v qemu-x86_64 >/dev/null; then
  echo "  skip qemu tests: qemu-x86_64 is missing (Debian package qemu-user)"
elif sanitized; then
  echo "  skip qemu tests: $MW is a sanitizer build: ASan does not start under qemu-user (it hangs mapping its shadow memory)"
else
  qerror Nehalem "a CPU without AVX (qemu Nehalem) is refused at start-up" "$MW" --help
  grep -q "this CPU lacks [A-Z0-9.-]*, which this build of memwall was compiled to require.*make BASELINE=x86-64-v2" "$T/err" &&
    pass "the refusal names the missing feature and the rebuild" || fail "Nehalem: $(cat "$T/err")"
  qrun Haswell "$MW" --version
  rc=$?
  if [ $rc -eq 1 ] && grep -q "this CPU lacks" "$T/err"; then
    echo "  skip qemu Haswell tests: this build requires more than Haswell has ($(cat "$T/err"))"
  else
    [ $rc -eq 0 ] && grep -q "^kernel avx2 (this CPU runs portable, avx2;" "$T/out" &&
      pass "qemu Haswell (AVX2, no AVX-512): auto picks avx2" || fail "Haswell --version: rc $rc $(cat "$T/out" "$T/err")"
    "$MW" "${tr[@]}" --steps 2 --kernel "$best" --out "$T/N" >/dev/null 2>&1 || fail "native 2 steps"
    qrun Haswell "$MW" "${tr[@]}" --steps 2 --kernel auto --out "$T/H"
    rc=$?
    [ $rc -eq 0 ] && head -1 "$T/out" | grep -q "| kernel avx2 |" && pass "training under qemu Haswell runs avx2 (no SIGILL)" ||
      fail "training under qemu Haswell: rc $rc $(head -1 "$T/out") $(tail -3 "$T/err")"
    same "$T/N/step-00000002.mwck" "$T/H/step-00000002.mwck" "Haswell's checkpoint = this CPU's ($best)"
    "$MW" "${tr[@]}" --steps 2 --precision bf16 --kernel "${fma[${#fma[@]}-1]}" --out "$T/NB" >/dev/null 2>&1 || fail "native bf16 2 steps"
    qrun Haswell "$MW" "${tr[@]}" --steps 2 --precision bf16 --out "$T/HB" || fail "bf16 under qemu Haswell: $(tail -3 "$T/err")"
    same "$T/NB/step-00000002.mwck" "$T/HB/step-00000002.mwck" "bf16: Haswell's emulation = this CPU's ${fma[${#fma[@]}-1]}"
    qerror Haswell "--kernel avx512 under qemu Haswell" "$MW" "${tr[@]}" --kernel avx512
    has "$T/err" "kernel avx512 cannot run here: this CPU lacks its instructions; this CPU and build run portable, avx2" \
      "the refusal names what Haswell runs"
    MEMWALL_KERNEL=avx512 qerror Haswell "MEMWALL_KERNEL=avx512 under qemu Haswell" "$MW" --version
    gemm=$(dirname "$MW")/tests/test_gemm
    if [ -x "$gemm" ]; then
      qrun Haswell "$gemm"
      rc=$?
      [ $rc -eq 0 ] && grep -q "^gemm: avx2 kernel in use; this CPU runs portable, avx2;" "$T/out" &&
        grep -q "test_gemm: all passed" "$T/out" && pass "test_gemm under qemu Haswell: avx2 in use, all passed" ||
        fail "test_gemm under qemu Haswell: rc $rc $(tail -3 "$T/out") $(tail -3 "$T/err")"
    else
      echo "  skip test_gemm under qemu: $gemm is not built"
    fi
  fi
fi

[ $fails -eq 0 ] && echo "cli_kernel: all passed" || echo "cli_kernel: $fails failed"
[ $fails -eq 0 ]
