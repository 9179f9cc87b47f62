#!/usr/bin/env bash
# The disk tier's overlap, measured (issue 35 item 3): every step's JSON log line carries its
# compute, I/O-busy (read, write, either) and I/O-wait milliseconds, consistent with each other and
# with the step, and the same of its norm's and optimizer's passes (opt_*), within the step's; a disk slower than measured (MEMWALL_IO_THROTTLE_MBPS, both I/O engines) gives the
# same losses and checkpoint bytes, at least its bytes' time busy, and shows up as waiting; estimate
# predicts the step as overlapped phases (printed beside the measured steps, never compared on
# time: this machine is shared). Usage: tests/cli_overlap.sh build/memwall. Exits non-zero on any
# failure.
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_overlap_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"

head -c 200000 /usr/share/common-licenses/GPL-3 >"$T/c.txt"
"$MW" prepare --tokenizer bytes --in "$T/c.txt" --out "$T/d" >/dev/null || { echo "prepare failed"; exit 1; }
tr=(train --data "$T/d" --batch 2 --seq 32 --lr 1e-3 --warmup 2 --steps 3 --threads 2)
off=(--offload all --offload-dir "$T/scr")
RATE=100 # MB/s: a step of gpt2-tiny under --offload all moves ~34 MB, ~0.34 s at this rate

# run NAME ARGS..., same A B WHAT: lib_cli.sh
# steps FILE: one line per step of a JSON log: ms compute busy read write wait
steps() {
  grep '"step"' "$1" | awk '{
    split("ms compute_ms io_busy_ms io_read_ms io_write_ms io_wait_ms", k, " ")
    line = ""
    for (i = 1; i <= 6; i++) {
      v = "missing"
      if (match($0, "\"" k[i] "\": [-0-9.e+]+")) { v = substr($0, RSTART, RLENGTH); sub(/.*: /, "", v) }
      line = line (i > 1 ? " " : "") v
    }
    print line
  }'
}
# consistent FILE WHAT: every step has the keys; compute and waiting (one thread, disjoint) within the
# step; read and write busy within busy, busy within their sum (intervals' unions); 0.002 ms: rounding
consistent() {
  local bad
  bad=$(steps "$1" | awk '/missing/ { print "a key is missing: " $0; next }
    $2 + $6 > $1 + 0.002 { print "compute + wait > step: " $0 }
    $4 > $3 + 0.002 || $5 > $3 + 0.002 { print "read or write busy > busy: " $0 }
    $3 > $4 + $5 + 0.002 { print "busy > read + write: " $0 }
    $2 <= 0 { print "no compute: " $0 }')
  [ -z "$bad" ] && [ "$(steps "$1" | wc -l)" -eq 3 ] && pass "$2: 3 steps logged, their figures consistent" ||
    fail "$2: $bad ($(grep -c '"step"' "$1") step lines)"
}

# optsteps FILE: one line per step: the step's ms compute busy read write wait, then the same of its
# norm's and optimizer's passes (opt_*)
optsteps() {
  grep '"step"' "$1" | awk '{
    split("ms compute_ms io_busy_ms io_read_ms io_write_ms io_wait_ms", k, " ")
    line = ""
    for (j = 0; j < 2; j++)
      for (i = 1; i <= 6; i++) {
        key = (j ? "opt_" : "") k[i]
        v = "missing"
        if (match($0, "\"" key "\": [-0-9.e+]+")) { v = substr($0, RSTART, RLENGTH); sub(/.*: /, "", v) }
        line = line (line != "" ? " " : "") v
      }
    print line
  }'
}
# optpart FILE WHAT DISK: each step's optimizer part is within the step, figure by figure (0.002 ms:
# rounding), and took time; DISK 1: its passes read and wrote the disk tier, 0: no I/O time
optpart() {
  local bad
  bad=$(optsteps "$1" | awk -v d="$3" '/missing/ { print "a key is missing: " $0; next }
    { for (i = 1; i <= 6; i++) if ($(i + 6) > $i + 0.002 || $(i + 6) < 0) print "opt part " i " outside the step: " $0 }
    $7 <= 0 || $8 <= 0 { print "no optimizer time: " $0 }
    d == 1 && ($10 <= 0 || $11 <= 0) { print "the optimizer read or wrote nothing: " $0 }
    d == 0 && ($9 != 0 || $10 != 0 || $11 != 0 || $12 != 0) { print "I/O time without a disk tier: " $0 }')
  [ -z "$bad" ] && [ "$(optsteps "$1" | wc -l)" -eq 3 ] && pass "$2: each step's norm and optimizer part (opt_*) lies within it" ||
    fail "$2: $bad ($(grep -c '"step"' "$1") step lines)"
}

echo "-- the step's clock in the JSON log"
run mem
consistent "$T/mem.jsonl" "in memory"
[ -z "$(steps "$T/mem.jsonl" | awk '$3 != 0 || $4 != 0 || $5 != 0 || $6 != 0')" ] &&
  pass "in memory: no disk tier, no I/O time" || fail "in memory: I/O time without a disk tier: $(steps "$T/mem.jsonl")"
run off "${off[@]}"
consistent "$T/off.jsonl" "--offload all"
optpart "$T/mem.jsonl" "in memory" 0
optpart "$T/off.jsonl" "--offload all" 1
[ -z "$(steps "$T/off.jsonl" | awk '$4 <= 0 || $5 <= 0')" ] && pass "--offload all: reads and writes were in flight" ||
  fail "--offload all: no read or write time: $(steps "$T/off.jsonl")"
same mem off "--offload all against memory"

echo "-- a disk slower than measured: waiting, never a wrong result"
bytes=$(grep '"event": "end"' "$T/off.jsonl" | grep -o '"read_bytes_per_step": [0-9]*, "write_bytes_per_step": [0-9]*' |
  grep -o '[0-9]*' | awk '{ s += $1 } END { print s }')
floor=$(awk -v b="$bytes" -v r="$RATE" 'BEGIN { printf "%.3f", b / (r * 1e6) * 1e3 }') # ms the throttle takes at least
# io_uring where this build and kernel have it (the run above says which engine it took), and always the pool
engines=threads
grep -q '"engine": "io_uring"' "$T/off.jsonl" && engines="io_uring threads"
for eng in $engines; do
  MEMWALL_AIO=$eng MEMWALL_IO_THROTTLE_MBPS=$RATE run "slow$eng" "${off[@]}"
  consistent "$T/slow$eng.jsonl" "$eng at $RATE MB/s"
  same off "slow$eng" "$eng at $RATE MB/s against the unthrottled run"
  # the throttle serves the step's $bytes bytes one request after another: busy >= their time, and
  # the step's thread, computing little, waits for most of it (half, less its compute: loose)
  bad=$(steps "$T/slow$eng.jsonl" | awk -v f="$floor" '$3 < f - 0.002 { print "busy " $3 " < " f } $6 < f / 2 - $2 { print "wait " $6 " < " f "/2 - compute " $2 }')
  [ -z "$bad" ] && pass "$eng at $RATE MB/s: each step busy >= $floor ms (its $bytes bytes) and mostly waiting" ||
    fail "$eng at $RATE MB/s: $bad"
  ws=$(json_field "$T/slow$eng.jsonl" io_wait_ms | awk '{ s += $1 } END { print s }')
  wf=$(json_field "$T/off.jsonl" io_wait_ms | awk '{ s += $1 } END { print s }')
  awk -v a="$ws" -v b="$wf" 'BEGIN { exit !(a > b) }' && pass "$eng at $RATE MB/s: waited $ws ms against $wf ms unthrottled" ||
    fail "$eng at $RATE MB/s: waited $ws ms, not more than the unthrottled $wf ms"
done
MEMWALL_IO_THROTTLE_MBPS=fast run badthrottle "${off[@]}"
grep -q "MEMWALL_IO_THROTTLE_MBPS=fast is not a rate" "$T/badthrottle.out" && pass "a malformed throttle is named" ||
  fail "a malformed throttle passes unsaid: $(head -3 "$T/badthrottle.out")"

echo "-- the predicted step: overlapped phases"
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 "${off[@]}" --json >"$T/e.json" || fail "estimate: $(head -c 300 "$T/e.json")"
pc=$(json_field "$T/e.json" predicted_compute_seconds) ps=$(json_field "$T/e.json" predicted_step_seconds)
pd=$(json_field "$T/e.json" predicted_seconds)
awk -v c="$pc" -v s="$ps" -v d="$pd" 'BEGIN { exit !(c > 0 && d > 0 && s >= c - 1e-6 && s <= c + d + 1e-6 && s >= d * 0 + 0) }' &&
  pass "estimate: compute $pc s <= step $ps s <= compute + transfers $(awk -v c="$pc" -v d="$pd" 'BEGIN { print c + d }') s" ||
  fail "estimate: predicted compute '$pc', transfers '$pd', step '$ps'"
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 "${off[@]}" >"$T/e.txt"
grep -q "predicted .* s per step, its phases overlapped" "$T/e.txt" && pass "estimate prints the overlapped step" ||
  fail "estimate's text has no overlapped step: $(grep predicted "$T/e.txt")"
# a disk tier of swapped activations alone (no model state on disk): their bytes are the micro-batches'
"$MW" estimate --preset gpt2-tiny --batch 2 --seq 32 --act-offload checkpoints --offload-dir "$T/scr" --json >"$T/ea.json" &&
  [ -n "$(json_field "$T/ea.json" predicted_step_seconds)" ] && pass "estimate predicts the step of swapped activations alone" ||
  fail "estimate --act-offload checkpoints: $(head -c 300 "$T/ea.json")"
# the figures side by side (not compared: a loaded machine's times are not a test's)
echo "  info: predicted step $ps s (compute $pc s, transfers $pd s if serial); measured steps (ms, compute, busy, read, write, wait):"
steps "$T/off.jsonl" | sed 's/^/  info:   /'
[ "$fails" -eq 0 ] && echo "cli_overlap: all passed" || { echo "cli_overlap: $fails failed"; exit 1; }
