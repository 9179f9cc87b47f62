# Helpers shared by the end-to-end CLI tests (tests/cli_*.sh), sourced after MW (the binary under
# test) and T (the test's temporary folder) are set. A test counts failures in $fails and exits
# non-zero when there is any.
fails=0
# progress lines on stderr (not a terminal: one every MEMWALL_PROGRESS_SECONDS) would break
# expect_error's one-line rule on a slow machine; tests that check progress set their own
export MEMWALL_PROGRESS_SECONDS=${MEMWALL_PROGRESS_SECONDS:-100000}
# SAN=1 when $MW is the sanitizer build (ASan + UBSan), else 0; sanitized is its test (for what only
# such a build changes: RSS bounds, LeakSanitizer's suppressions). quick: the sanitizer build, unless
# MEMWALL_TEST_FULL=1. A quick run checks each code path once for memory errors and undefined
# behaviour (each layout kind, each fault, each refusal kind) and leaves repeated layouts and
# combinations, long runs, the reference runs and the comparisons of their numbers to the plain
# build (make test), whose bits are the same code's. One place, so that every script agrees.
SAN=0
ldd "$MW" 2>/dev/null | grep -q -E 'libasan|libubsan' && SAN=1
sanitized() { [ "$SAN" = 1 ]; }
quick() { [ "$SAN" = 1 ] && [ "${MEMWALL_TEST_FULL:-0}" != 1 ]; }
pass() { echo "  ok   $*"; }
fail() { echo "  FAIL $*"; fails=$((fails + 1)); }
# json_field FILE KEY: the values of KEY in every line of a JSON-lines file
json_field() { grep -o "\"$2\": [-0-9.e+]*" "$1" | sed 's/.*: //'; }
# expect_error CODE WHAT -- CMD...: CMD must exit with CODE and print one line starting "memwall:"
expect_error() {
  local code=$1 what=$2
  shift 3
  "$@" >"$T/out" 2>"$T/err"
  local rc=$?
  local lines
  lines=$(wc -l <"$T/err")
  if [ $rc -eq "$code" ] && [ "$lines" -eq 1 ] && grep -q "^memwall: " "$T/err"; then
    pass "$what -> exit $rc: $(cat "$T/err")"
  else
    fail "$what: exit $rc (want $code), stderr: $(head -c 400 "$T/err")"
  fi
}
# ntok FILE: a token file's count, from its header
ntok() { od -An -t u8 -j 16 -N 8 "$1" | tr -d ' '; }
# toks FILE...: the sha256 of the tokens of token files, in order (after each header, without
# version 3's block checksums): the same for one file and for the shards of a set
toks() {
  local f v w
  for f in "$@"; do
    v=$(od -An -t u4 -j 8 -N 4 "$f" | tr -d ' ') w=$(od -An -t u4 -j 12 -N 4 "$f" | tr -d ' ')
    tail -c +$((v == 1 ? 33 : 65)) "$f" | head -c $(($(ntok "$f") * w))
  done | sha256sum | cut -c1-64
}
# mpi_ok: mpirun is on the PATH and $MW was built with MPI
mpi_ok() { command -v mpirun >/dev/null && ! "$MW" train --data /nonexistent --zero 0 2>&1 | grep -q "built without MPI"; }
# mpi_env: OpenMPI allowed to run as root and to start more ranks than this machine has cores; under
# the sanitizer build, OpenMPI's own leaks suppressed (its frames have no frame pointers: the slow
# unwinder)
mpi_env() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  # a rank waiting in MPI yields the core (OpenMPI polls without yielding when the ranks do not
  # exceed the cores: on a loaded 2-core machine a 2-rank run then took 2 to 4 times its CPU time)
  export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
  if sanitized; then
    export OMPI_MCA_mca_base_component_disable_dlclose=1
    export LSAN_OPTIONS="suppressions=$(realpath "$(dirname "${BASH_SOURCE[0]}")")/lsan_mpi.supp:print_suppressions=0"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
  fi
}
# mpi_setup: what a test of MPI runs (cli_parallel, cli_tp, cli_zero, cli_3d) needs before its first
# mpirun: mpirun on the PATH and a binary built with MPI (else FAIL, exit 1), then mpi_env
mpi_setup() {
  if ! command -v mpirun >/dev/null; then
    echo "FAIL: mpirun not found (scripts/install-deps.sh installs OpenMPI)"
    exit 1
  fi
  if "$MW" train --data /nonexistent --zero 0 2>&1 | grep -q "built without MPI"; then
    echo "FAIL: $MW was built without MPI, but mpirun is here: make found no mpicc?"
    exit 1
  fi
  mpi_env
}
# mpr N ARGS...: memwall ARGS on N ranks
mpr() {
  local n=$1
  shift
  mpirun -np "$n" --oversubscribe "$MW" "$@"
}
# gpl_data: $T/d, a byte-level token set of the GPL texts (about 50k tokens), or FAIL and exit 1
gpl_data() {
  cat /usr/share/common-licenses/{GPL-2,GPL-3} >"$T/corpus.txt"
  "$MW" prepare --tokenizer bytes --in "$T/corpus.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
}
# run NAME ARGS...: "$MW" "${tr[@]}" ARGS (tr: the script's array) into $T/NAME (its --out), the JSON
# log $T/NAME.jsonl and the output $T/NAME.out; FAIL (with the output's last lines) when it exits
# non-zero. (The scripts of MPI runs define their own run NAME RANKS ...)
run() {
  local n=$1
  shift
  "$MW" "${tr[@]}" --out "$T/$n" --json-log "$T/$n.jsonl" "$@" >"$T/$n.out" 2>&1 ||
    fail "run $n ($*): $(tail -2 "$T/$n.out")"
}
# same A B WHAT: the newest checkpoints of runs A and B (in $T/A and $T/B) are byte-identical and
# their logged losses the same
same() {
  local fa fb
  fa=$(ls "$T/$1"/step-*.mwck 2>/dev/null | tail -1)
  fb=$(ls "$T/$2"/step-*.mwck 2>/dev/null | tail -1)
  if [ -n "$fa" ] && [ -n "$fb" ] && cmp -s "$fa" "$fb" &&
    [ "$(json_field "$T/$1.jsonl" loss)" = "$(json_field "$T/$2.jsonl" loss)" ]; then
    pass "$3: checkpoint bytes and losses identical"
  else
    fail "$3: ${fa:-no checkpoint in $1} and ${fb:-no checkpoint in $2} (or their losses) differ"
  fi
}
# plans JSONL ESTIMATE-ARGS...: every rank's arena peak in a run's JSON log (its end event) is its
# plan and what `memwall estimate ESTIMATE-ARGS --json` plans for that rank, and the ranks are the
# estimate's; prints "rank:peak ..." and returns non-zero otherwise
plans() {
  local j=$1
  shift
  "$MW" estimate "$@" --json >"$T/est.json" 2>/dev/null || return 1
  python3 - "$j" "$T/est.json" <<'EOF'
import json, sys
end = [json.loads(l) for l in open(sys.argv[1]) if '"event": "end"' in l][0]
est = json.load(open(sys.argv[2]))
want = {}
for x in est["ranks"]:
    for lo, hi in x["ranks"]:
        for r in range(lo, hi + 1): want[r] = x["peak_bytes"]
got = {r["rank"]: (r["arena_peak_bytes"], r["plan_peak_bytes"]) for r in end["ranks"]}
ok = len(got) > 1 and sorted(got) == sorted(want) and all(a == p == want[r] for r, (a, p) in got.items())
print(" ".join("%d:%d" % (r, got[r][0]) for r in sorted(got)))
sys.exit(not ok)
EOF
}
# hit_rank SIGNAL FILE N ARGS...: memwall ARGS on N ranks in the background (ARGS name --out DIR, by
# which the ranks' processes are found; the output goes to $T/hit.out); once FILE exists (60 s at
# most), SIGNAL to the newest rank, then wait for mpirun. Sets victim (that rank's pid; empty if
# none was found), rc (mpirun's exit status) and dt (seconds from the signal to mpirun's end); the
# victim is SIGKILLed after the wait (a stopped one stays otherwise).
hit_rank() {
  local sig=$1 file=$2 n=$3 out="" i job t0
  shift 3
  for ((i = 1; i < $#; i++)); do [ "${!i}" = --out ] && { i=$((i + 1)); out=${!i}; }; done
  mpr "$n" "$@" >"$T/hit.out" 2>&1 &
  job=$!
  for _ in $(seq 600); do [ -f "$file" ] && break; sleep 0.1; done
  victim=$(pgrep -f -- "--out $out" | sort -n | tail -1)
  t0=$(date +%s)
  [ -n "$victim" ] && kill "-$sig" "$victim" 2>/dev/null
  wait $job
  rc=$?
  dt=$(($(date +%s) - t0))
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null
  return 0
}
# ref ARGS...: run ARGS (the script's run), a reference run whose numbers only the plain build
# compares; full CMD...: CMD, a repeated layout or combination. A quick run skips both (status 0).
ref() { quick || run "$@"; }
full() { quick || "$@"; }
# bits WHAT: WHAT, or in a quick run "ran (WHAT: the plain build's check)", for a pass line whose
# comparison a quick run skips
bits() { quick && echo "ran ($*: the plain build's check)" || echo "$*"; }
