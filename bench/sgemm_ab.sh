#!/usr/bin/env bash
# memwall's GEMM against OpenBLAS under two configurations, A/B in one run (issue 36): runs
# `sgemm_rate THREADS --TABLE [OP]` under configuration A, then B, round after round (A, B, A, B,
# ...), and prints for each product the median over rounds of each configuration's ratio
# memwall/OpenBLAS (each round's ratio is itself the median of 7 interleaved rounds inside one
# process, memwall beside OpenBLAS), with the lowest and highest round (the spread to judge a
# difference by), and B's median over A's. A configuration is a command line: environment
# assignments, then the sgemm_rate binary (another build's, for an old/new comparison).
#   bench/sgemm_ab.sh [--rounds R] [--threads T] [--table gpt2|smollm] [--op OP] "A" "B"
# e.g. bench/sgemm_ab.sh --rounds 9 --threads 1 "SGEMM_CLOCK=cpu SGEMM_NC=512 build/sgemm_rate" \
#                                               "SGEMM_CLOCK=cpu SGEMM_NC=768 build/sgemm_rate"
#      MEMWALL_KERNEL=avx2 OPENBLAS_CORETYPE=Haswell in both: the avx2 kernels of both sides.
# Prints the CPU, its vector flags and the load average before and after.
set -euo pipefail
ROUNDS=5 THREADS=1 TABLE=gpt2 OP=""
while [ $# -gt 2 ]; do
  case $1 in
  --rounds) ROUNDS=$2; shift 2 ;;
  --threads) THREADS=$2; shift 2 ;;
  --table) TABLE=$2; shift 2 ;;
  --op) OP=$2; shift 2 ;;
  *) break ;;
  esac
done
[ $# -eq 2 ] || { echo "usage: bench/sgemm_ab.sh [--rounds R] [--threads T] [--table gpt2|smollm] [--op OP] \"A\" \"B\"" >&2; exit 2; }
A=$1 B=$2
T=$(mktemp -d /tmp/mw_sgemm_ab_XXXXXX)
trap 'rm -rf "$T"' EXIT
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //') ($(nproc) cores; $(grep -o -w -E 'avx2|avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '))"
echo "A: $A"
echo "B: $B"
echo "$ROUNDS rounds of A then B, $THREADS threads, --$TABLE${OP:+ $OP}; load average $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq "$ROUNDS"); do
  for c in A B; do
    cmd=${!c}
    # shellcheck disable=SC2086
    env $cmd "$THREADS" "--$TABLE" ${OP:+"$OP"} >"$T/$c.$r" || { echo "$c failed: $(tail -2 "$T/$c.$r")" >&2; exit 1; }
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
# the table rows: op (one or two words), shape, beta, memwall, OpenBLAS, ratio "0.97x", diff
rows() { grep -h -E '^[a-z].* [0-9.]+x ' "$T"/"$1".* | sed -E 's/^(.*[a-z]) +([NT][NT] [0-9x]+ b[01]) +.* ([0-9.]+)x .*/\1|\2|\3/'; }
rows A | sort -t'|' -k1,1 -s >"$T/ra"
rows B | sort -t'|' -k1,1 -s >"$T/rb"
printf '%-16s %-24s %22s %22s %8s\n' op shape "A: median (min-max)" "B: median (min-max)" "B/A"
grep -h -E '^[a-z].* [0-9.]+x ' "$T/A.1" | sed -E 's/^(.*[a-z]) +([NT][NT] [0-9x]+ b[01]) +.*/\1|\2/' | while IFS='|' read -r op sh; do
  med() { grep -F "$op|$sh|" "$1" | cut -d'|' -f3 | sort -g | awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f %.2f %.2f", m, v[1], v[NR] }'; }
  read -r ma la ha <<<"$(med "$T/ra")"
  read -r mb lb hb <<<"$(med "$T/rb")"
  printf '%-16s %-24s %9.3fx (%.2f-%.2f) %9.3fx (%.2f-%.2f) %7.3f\n' "$op" "$sh" "$ma" "$la" "$ha" "$mb" "$lb" "$hb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN { print b / a }')"
done
