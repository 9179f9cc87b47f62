#!/usr/bin/env bash
# memwall vs PyTorch (CPU, fp32, OpenBLAS OpenMP build), side by side in one run on the same
# machine and threads: GPT-2 124M training steps at B=4,T=64, B=4,T=256, B=1,T=1024.
# memwall runs its own GEMM; PyTorch runs OpenBLAS, with this environment's OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE removed so that OpenBLAS picks its best kernels for the CPU (AVX-512 here;
# PEER_KEEP_ENV=1 keeps them).
# --isa avx2 measures both sides as on a CPU without AVX-512: memwall with MEMWALL_KERNEL=avx2,
# PyTorch with OpenBLAS's Haswell kernels (OPENBLAS_CORETYPE=Haswell) and ATen's AVX2 code
# (ATEN_CPU_CAPABILITY=avx2). --isa avx512 forces the AVX-512 paths likewise; auto (default)
# lets each pick.
# Prints medians, the ratio, peak RSS, and memwall's model FLOP/s as a fraction of the rate of its
# own GEMM on a 2048^3 product measured in the same run (OpenBLAS's rate printed beside it). Needs python3-torch (scripts/install-deps.sh --bench).
# --arch llama measures the Llama family instead: smollm-135m at B=4,T=256 and tinyllama-1.1b at
# B=1,T=512 against the workplace's peer ../shared/peers/torch_llama_bench.py (PEER= overrides),
# and prints each side's parameter count (a check that both build the same model).
#   bench/run.sh [--arch gpt2|llama] [--threads N] [--steps N] [--warmup N]
#                [--configs "4x64 4x256 1x1024" | "smollm-135m:4x256 tinyllama-1.1b:1x512"]
#                [--isa auto|avx2|avx512] [--rounds R]
# A configuration is [PRESET:]BxT; the preset defaults to gpt2 (--arch gpt2) or smollm-135m.
# --rounds R (default 1) runs every configuration R times, memwall then the peer, round after
# round (so that a shared machine's drift falls on both sides), and prints per configuration the
# median over rounds of each side's tokens/s and the median of the rounds' ratios with their
# lowest and highest (the ratio of one round is the figure; a loaded machine moves both rates).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS=$(nproc) STEPS=6 WARMUP=2 CONFIGS="" ISA=auto ARCH=gpt2 ROUNDS=1
while [ $# -gt 0 ]; do
  case $1 in
    --arch) ARCH=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --configs) CONFIGS=$2; shift 2 ;;
    --isa) ISA=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "bench/run.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
# The peer is bench/torch_gpt2.py (PEER= overrides). Where the workplace's shared peer
# (../shared/peers/torch_gpt2_bench.py, SHARED_PEER= overrides) exists, it runs beside it on the
# first configuration, as a check that the two measure the same model at the same speed.
# For --arch llama the peer is the shared ../shared/peers/torch_llama_bench.py (no copy here).
case $ARCH in
  gpt2) PEER=${PEER:-bench/torch_gpt2.py} DEF_PRESET=gpt2 CONFIGS=${CONFIGS:-"4x64 4x256 1x1024"} LABELW=10 ;;
  llama) PEER=${PEER:-../shared/peers/torch_llama_bench.py} DEF_PRESET=smollm-135m LABELW=26
    CONFIGS=${CONFIGS:-"smollm-135m:4x256 tinyllama-1.1b:1x512"} ;;
  *) echo "bench/run.sh: --arch gpt2|llama, not $ARCH" >&2; exit 1 ;;
esac
SHARED_PEER=${SHARED_PEER:-../shared/peers/torch_gpt2_bench.py}
[ "$ARCH" = gpt2 ] || SHARED_PEER=/nonexistent # the llama peer is the shared one already
[ -f "$PEER" ] || { echo "bench/run.sh: peer benchmark $PEER not found (PEER= names it)" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "bench/run.sh: needs python3-torch: scripts/install-deps.sh --bench" >&2; exit 1; }
# MW= and SGEMM_RATE= run other builds (a copy of the binaries, while the tree is rebuilt)
MW=${MW:-build/memwall} SGEMM_RATE=${SGEMM_RATE:-build/sgemm_rate}
[ "$MW" = build/memwall ] && [ "$SGEMM_RATE" = build/sgemm_rate ] && make -s all build/sgemm_rate >/dev/null
export LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-openmp
PEER_ENV="-u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"
[ "${PEER_KEEP_ENV:-0}" = 1 ] && PEER_ENV=""
case $ISA in
  auto) MW_ENV="" ;;
  avx2) MW_ENV="MEMWALL_KERNEL=avx2" PEER_ENV="OPENBLAS_CORETYPE=Haswell ATEN_CPU_CAPABILITY=avx2" ;;
  avx512) MW_ENV="MEMWALL_KERNEL=avx512" PEER_ENV="OPENBLAS_CORETYPE=SkylakeX ATEN_CPU_CAPABILITY=avx512" ;;
  *) echo "bench/run.sh: --isa auto|avx2|avx512, not $ISA" >&2; exit 1 ;;
esac
field() { grep -o "\"$2\": [-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: //'; }

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores" \
  "($(grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | xargs)); threads $THREADS;" \
  "$STEPS timed steps after $WARMUP warm-up, medians"
echo "isa $ISA: memwall ${MW_ENV:-picks its kernel}; PyTorch $([ "$ISA" = auto ] && { [ -n "$PEER_ENV" ] && echo "and its OpenBLAS pick their kernels" || echo "with OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}"; } || echo "$PEER_ENV")"
SG=$(env $PEER_ENV $MW_ENV "$SGEMM_RATE" "$THREADS" 2048)
SGEMM=$(field "$SG" sgemm_gflops)
echo "GEMM ceiling (2048^3, same threads): memwall's GEMM ($(grep -o '"kernel": "[a-z0-9]*"' <<<"$SG" | cut -d'"' -f4) kernel) $SGEMM GFLOP/s; OpenBLAS $(field "$SG" openblas_gflops) GFLOP/s"
hdr() { printf "\n%-${LABELW}s | %12s %12s %7s | %12s %12s | %14s %8s\n" "$([ "$ARCH" = gpt2 ] && echo "B x T" || echo "model, B x T")" "memwall tok/s" "torch tok/s" "$1" \
  "memwall RSS" "torch RSS" "memwall GFLOP/s" "of GEMM"; }
[ "$ROUNDS" = 1 ] && hdr ratio
med() { sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
declare -A RES
for r in $(seq "$ROUNDS"); do
  [ "$ROUNDS" = 1 ] || echo "round $r of $ROUNDS: load average $(cut -d' ' -f1-3 /proc/loadavg)"
  for cfg in $CONFIGS; do
  PRESET=$DEF_PRESET bt=$cfg
  case $cfg in *:*) PRESET=${cfg%%:*} bt=${cfg#*:} ;; esac
  B=${bt%x*} T=${bt#*x}
  label="$B x $T"
  [ "$ARCH" = gpt2 ] || label="$PRESET $B x $T"
  M=$(env $MW_ENV "$MW" bench --preset "$PRESET" --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP" \
    --threads "$THREADS" --json)
  P=$(env $PEER_ENV /usr/bin/python3 "$PEER" --preset "$PRESET" --batch "$B" --seq "$T" --steps "$STEPS" --warmup "$WARMUP" \
    --threads "$THREADS" --json | tail -1)
  mt=$(field "$M" tokens_per_s) pt=$(field "$P" tokens_per_s)
  mr=$(field "$M" peak_rss_bytes) pr=$(field "$P" peak_rss_mib) mg=$(field "$M" model_gflops)
  [ -n "$mt" ] && [ -n "$pt" ] || { echo "bench/run.sh: $label: no tokens/s from memwall or the peer:" \
    "$M | $P" >&2; exit 1; }
  RES[$cfg.$r]="$mt $pt $mr $pr $mg"
  [ "$ROUNDS" = 1 ] || printf "  %-${LABELW}s memwall %8.1f tok/s, torch %8.1f tok/s: %.2fx\n" "$label" "$mt" "$pt" \
    "$(awk -v a="$mt" -v b="$pt" 'BEGIN{print a/b}')"
  if [ "$ROUNDS" = 1 ]; then
    printf "%-${LABELW}s | %12.1f %12.1f %6.2fx | %8.0f MiB %8.0f MiB | %14.1f %7.0f%%\n" "$label" "$mt" "$pt" \
      "$(awk -v a="$mt" -v b="$pt" 'BEGIN{print a/b}')" "$(awk -v a="$mr" 'BEGIN{print a/1048576}')" "$pr" \
      "$mg" "$(awk -v a="$mg" -v b="$SGEMM" 'BEGIN{print 100*a/b}')"
  fi
  echo "  memwall: $M" >>"${BENCH_LOG:-/dev/null}"
  echo "  torch:   $P" >>"${BENCH_LOG:-/dev/null}"
  if [ "$ARCH" != gpt2 ] && [ "$r" = 1 ]; then
    mp=$(field "$M" params) pp=$(field "$P" params)
    printf "%-${LABELW}s   parameters: memwall %s, torch %s: %s\n" "" "$mp" "$pp" "$([ "$mp" = "$pp" ] && echo same || echo DIFFERENT)"
  fi
  if [ -f "$SHARED_PEER" ] && [ -z "${checked:-}" ]; then
    checked=1
    S=$(env $PEER_ENV /usr/bin/python3 "$SHARED_PEER" --preset gpt2 --batch "$B" --seq "$T" --steps "$STEPS" \
      --warmup "$WARMUP" --threads "$THREADS" --json | tail -1)
    pp=$(field "$P" params) sp=$(field "$S" params) st=$(field "$S" tokens_per_s)
    printf "%-10s | %12s %12.1f %6.2fx | %12s %8.0f MiB | shared peer (params %s vs %s: %s)\n" "  check" \
      "" "$st" "$(awk -v a="$pt" -v b="$st" 'BEGIN{print a/b}')" "" "$(field "$S" peak_rss_mib)" "$pp" "$sp" \
      "$([ "$pp" = "$sp" ] && echo same || echo DIFFERENT)"
    echo "  shared:  $S" >>"${BENCH_LOG:-/dev/null}"
  fi
  done
done
[ "$ROUNDS" = 1 ] && exit 0
# the medians over rounds: each side's tokens/s, RSS and GFLOP/s, and the rounds' ratios
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
hdr "ratio (min-max), median of the rounds"
for cfg in $CONFIGS; do
  PRESET=$DEF_PRESET bt=$cfg
  case $cfg in *:*) PRESET=${cfg%%:*} bt=${cfg#*:} ;; esac
  label="${bt%x*} x ${bt#*x}"
  [ "$ARCH" = gpt2 ] || label="$PRESET $label"
  col() { for r in $(seq "$ROUNDS"); do read -r -a v <<<"${RES[$cfg.$r]}"; echo "${v[$1]}"; done; }
  rat=$(for r in $(seq "$ROUNDS"); do read -r -a v <<<"${RES[$cfg.$r]}"; awk -v a="${v[0]}" -v b="${v[1]}" 'BEGIN{print a/b}'; done)
  mt=$(col 0 | med) pt=$(col 1 | med) mr=$(col 2 | med) pr=$(col 3 | med) mg=$(col 4 | med)
  printf "%-${LABELW}s | %12.1f %12.1f %6.2fx (%.2f-%.2f) | %8.0f MiB %8.0f MiB | %14.1f %7.0f%%\n" "$label" "$mt" "$pt" \
    "$(med <<<"$rat")" "$(sort -g <<<"$rat" | head -1)" "$(sort -g <<<"$rat" | tail -1)" \
    "$(awk -v a="$mr" 'BEGIN{print a/1048576}')" "$pr" "$mg" "$(awk -v a="$mg" -v b="$SGEMM" 'BEGIN{print 100*a/b}')"
done
