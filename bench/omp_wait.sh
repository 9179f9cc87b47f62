#!/usr/bin/env bash
# OpenMP's wait policy on an idle machine and on a busy one: median ms per training step of
# `memwall bench` under libgomp's default (GOMP_SPINCOUNT=300000, the count libgomp uses when no
# policy is set), OMP_WAIT_POLICY=passive (memwall's default: src/cli/omp_env.c) and =active, and a
# short spin (GOMP_SPINCOUNT=10000), with 1 thread
# and with all cores. "busy" runs one competing CPU-bound process (a shell loop) for the whole
# measurement, as another user's job would. Rounds are interleaved so that drift hits every
# setting alike; each cell is the median over rounds of each run's median step.
#   bench/omp_wait.sh [--rounds N] [--shapes "gpt2-tiny:8x128 gpt2:4x64"] [--steps N]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3 STEPS=8 SHAPES="gpt2-tiny:8x128 gpt2:4x64"
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --shapes) SHAPES=$2; shift 2 ;;
    *) echo "bench/omp_wait.sh: unknown option $1" >&2; exit 1 ;;
  esac
done
make -s build/memwall >/dev/null
NC=$(nproc)
POLICIES="libgomp passive active spin10k"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $NC cores," \
  "flags: $(grep -o -w -E 'avx2|avx512f|avx512_bf16' /proc/cpuinfo | sort -u | xargs);" \
  "libgomp; $STEPS timed steps after 2 warm-up, median of $ROUNDS interleaved rounds"
field() { grep -o "\"$2\": [-0-9.e+]*" <<<"$1" | head -1 | sed 's/.*: //'; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
hog=""
stop_hog() {
  if [ -n "$hog" ]; then kill "$hog" 2>/dev/null || true; wait "$hog" 2>/dev/null || true; fi
  hog=""
}
R=$(mktemp -d)
trap 'stop_hog; rm -rf "$R"' EXIT
for load in idle busy; do
  [ $load = busy ] && { bash -c 'while :; do :; done' & hog=$!; }
  for ((r = 0; r < ROUNDS; r++)); do
    for shape in $SHAPES; do
      preset=${shape%%:*} bt=${shape#*:}
      for th in 1 "$NC"; do
        for pol in $POLICIES; do
          envs=()
          case $pol in
            passive | active) envs=(OMP_WAIT_POLICY=$pol) ;;
            spin10k) envs=(GOMP_SPINCOUNT=10000) ;;
            libgomp) envs=(GOMP_SPINCOUNT=300000) ;; # libgomp's own default count (memwall then keeps it)
          esac
          j=$(env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "${envs[@]}" build/memwall bench --preset "$preset" \
            --batch "${bt%x*}" --seq "${bt#*x}" --steps "$STEPS" --warmup 2 --threads "$th" --json 2>/dev/null | tail -1)
          field "$j" ms_per_step >>"$R/$load.$shape.$th.$pol"
        done
      done
    done
  done
  stop_hog
done
printf "\n%-18s %-5s %7s | %10s %10s %10s %10s | %s\n" "shape" "load" "threads" $POLICIES \
  "ms per step (median); best"
for shape in $SHAPES; do
  for load in idle busy; do
    for th in 1 "$NC"; do
      row=() best="" bv=""
      for pol in $POLICIES; do
        v=$(median <"$R/$load.$shape.$th.$pol")
        row+=("$v")
        if [ -z "$bv" ] || awk -v a="$v" -v b="$bv" 'BEGIN{exit !(a < b)}'; then bv=$v best=$pol; fi
      done
      printf "%-18s %-5s %7s | %10.1f %10.1f %10.1f %10.1f | %s\n" "$shape" "$load" "$th" "${row[@]}" "$best"
    done
  done
done
