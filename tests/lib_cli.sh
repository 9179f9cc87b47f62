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
