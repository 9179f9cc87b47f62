# Helpers shared by the end-to-end CLI tests (tests/cli_*.sh), sourced after MW (the binary under
# test) and T (the test's temporary folder) are set. A test counts failures in $fails and exits
# non-zero when there is any.
fails=0
# progress lines on stderr (not a terminal: one every MEMWALL_PROGRESS_SECONDS) would break
# expect_error's one-line rule on a slow machine; tests that check progress set their own
export MEMWALL_PROGRESS_SECONDS=${MEMWALL_PROGRESS_SECONDS:-100000}
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
# mpi_setup: what a test of MPI runs (cli_parallel, cli_tp, cli_zero) needs before its first mpirun:
# mpirun on the PATH and a binary built with MPI (else FAIL, exit 1); OpenMPI allowed to run as root
# and to start more ranks than this machine has cores; under the sanitizer build, OpenMPI's own
# leaks suppressed (its frames have no frame pointers: the slow unwinder)
mpi_setup() {
  if ! command -v mpirun >/dev/null; then
    echo "FAIL: mpirun not found (scripts/install-deps.sh installs OpenMPI)"
    exit 1
  fi
  if "$MW" train --data /nonexistent --zero 0 2>&1 | grep -q "built without MPI"; then
    echo "FAIL: $MW was built without MPI, but mpirun is here: make found no mpicc?"
    exit 1
  fi
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  # a rank waiting in MPI yields the core (OpenMPI polls without yielding when the ranks do not
  # exceed the cores: on a loaded 2-core machine a 2-rank run then took 2 to 4 times its CPU time)
  export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
  if ldd "$MW" | grep -q libasan; then
    export OMPI_MCA_mca_base_component_disable_dlclose=1
    export LSAN_OPTIONS="suppressions=$(realpath "$(dirname "${BASH_SOURCE[0]}")")/lsan_mpi.supp:print_suppressions=0"
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
  fi
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
