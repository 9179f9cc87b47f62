#!/usr/bin/env bash
# Token sets (issue 17): prepare --shard-tokens writes numbered shards and a manifest, written
# last; train reads a set as one sequence (the same windows, losses and checkpoints as the single
# file of the same tokens, on one process and on MPI ranks); several inputs go into one set;
# --append adds shards without rewriting the old ones, and a resumed run on the grown set says so;
# a missing, truncated or replaced shard stops train before step 1 naming it; a damaged block
# stops training naming the shard and block, the last checkpoint staying good; verify checks a
# whole set, naming each damaged shard; a killed prepare leaves the old set as it was. Usage: tests/cli_sets.sh build/memwall
set -u
MW=$(realpath "${1:-build/memwall}")
T=$(mktemp -d /tmp/mw_sets_XXXXXX)
trap 'pkill -9 -f "$T/" 2>/dev/null; rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh"
has() { grep -qF -- "$2" "$1" && pass "$3" || fail "$3: '$2' not in $(head -c 600 "$1")"; }
L=/usr/share/common-licenses
mkdir -p "$T/parts"
cp $L/GPL-2 "$T/parts/a.txt"
cp $L/GPL-3 "$T/parts/b.txt"
cp $L/LGPL-2.1 "$T/parts/c.txt"
cat "$T"/parts/{a,b,c}.txt >"$T/corpus.txt" # 88 k tokens with the bytes tokenizer
P=(prepare --tokenizer bytes)

echo "== a sharded set holds the single file's tokens"
"$MW" "${P[@]}" --in "$T/corpus.txt" --out "$T/one" >"$T/one.out" 2>&1 || fail "prepare one: $(cat "$T/one.out")"
[ -f "$T/one.train.bin" ] && [ ! -f "$T/one.manifest.json" ] && pass "below one shard: PREFIX.train.bin and .val.bin, no manifest" ||
  fail "single: $(ls "$T")"
"$MW" "${P[@]}" --in "$T/corpus.txt" --out "$T/sh" --shard-tokens 1024 >"$T/sh.out" 2>&1 || fail "prepare sh: $(cat "$T/sh.out")"
ntr=$(ls "$T"/sh.train.*.bin | wc -l)
[ "$ntr" -gt 64 ] && [ -f "$T/sh.manifest.json" ] && pass "--shard-tokens 1024: $ntr train shards (more than the 64 the loader keeps open) and a manifest" ||
  fail "sharded: $ntr shards, $(ls "$T" | head)"
[ "$(toks "$T"/sh.train.*.bin)" = "$(toks "$T/one.train.bin")" ] && [ "$(toks "$T"/sh.val.*.bin)" = "$(toks "$T/one.val.bin")" ] &&
  pass "the shards in order hold the single files' tokens, train and val" || fail "the shards' tokens differ"
has "$T/sh.manifest.json" '"format": "memwall-token-set"' "the manifest names its format"
grep -q '"tokenizer": "bytes"' "$T/sh.manifest.json" && grep -q '"tokenizer_hash": "906ae160a4b83693"' "$T/sh.manifest.json" &&
  pass "and records the tokenizer and its hash" || fail "manifest: $(head -8 "$T/sh.manifest.json")"
"$MW" verify "$T/sh" >"$T/v.out" 2>&1 && grep -q "every block matches its checksum" "$T/v.out" &&
  pass "verify: $(tail -1 "$T/v.out" | cut -c1-120)" || fail "verify sh: $(tail -3 "$T/v.out")"

echo "== several inputs into one set: files, a folder, a glob, stdin"
"$MW" "${P[@]}" --in "$T/parts/a.txt" --in "$T/parts/b.txt" --in "$T/parts/c.txt" --out "$T/m1" >/dev/null 2>&1
"$MW" "${P[@]}" --in "$T/parts" --out "$T/m2" >/dev/null 2>&1
"$MW" "${P[@]}" --in "$T/parts/*.txt" --out "$T/m3" >/dev/null 2>&1
"$MW" "${P[@]}" --in "$T/parts/a.txt" --in - --in "$T/parts/c.txt" --out "$T/m4" <"$T/parts/b.txt" >"$T/m4.out" 2>&1
want=$(toks "$T/one.train.bin")
for m in m1 m2 m3 m4; do
  [ "$(toks "$T/$m.train.bin")" = "$want" ] || fail "$m: other tokens"
done
has "$T/m4.out" "3 documents" "three files, a folder, a quoted glob and stdin between files: the tokens of their concatenation, one document each"
MEMWALL_PROGRESS_SECONDS=0 "$MW" "${P[@]}" --in "$T/parts" --out "$T/pg" >/dev/null 2>"$T/pg.err" &&
  grep -q '^prepare:  \[[# ]*\] *[0-9]*%  [0-9.]* of 0.1 MB  [0-9.]* MB/s  ETA ' "$T/pg.err" &&
  pass "progress in a log (not a terminal): $(head -1 "$T/pg.err" | tr -s ' ')" || fail "progress: $(head -3 "$T/pg.err")"
mkdir -p "$T/parts/sub" "$T/parts/empty.txt.d"
cp $L/GPL-2 "$T/parts/sub/x.txt"
"$MW" "${P[@]}" --in "$T/parts/*" --out "$T/m6" >/dev/null 2>&1 && [ "$(toks "$T/m6.train.bin")" = "$want" ] &&
  pass "a glob's directories are skipped, as --in DIR's subdirectories" || fail "glob with directories"
rm -r "$T/parts/sub" "$T/parts/empty.txt.d"
expect_error 1 "a file given twice (a name and a glob)" -- "$MW" "${P[@]}" --in "$T/parts/a.txt" --in "$T/parts/*.txt" --out "$T/m7"
has "$T/err" "a.txt and $T/parts/a.txt (in --in $T/parts/*.txt) are the same file, given twice by --in" "the refusal names both"
echo "== names of one file found by listing one folder or glob (links, hard links): read once, with a note"
mkdir -p "$T/al"
cp "$T"/parts/{a,b,c}.txt "$T/al/"
ln -s c.txt "$T/al/0.txt" # sorts first: the file is read as c.txt, in c.txt's place
ln "$T/al/a.txt" "$T/al/d.txt"
for in in "$T/al/" "$T/al/*"; do
  "$MW" "${P[@]}" --in "$in" --out "$T/al1" >"$T/al.out" 2>"$T/al.err" && [ "$(toks "$T/al1.train.bin")" = "$want" ] &&
    grep -q "3 documents" "$T/al.out" && grep -qF "note: prepare: $T/al/0.txt is a link to $T/al/c.txt, found by the same --in $in: read once, as $T/al/c.txt" "$T/al.err" &&
    grep -qF "note: prepare: $T/al/d.txt is another name of $T/al/a.txt" "$T/al.err" &&
    pass "--in $in: a link and a hard link read once each, noted: the folder's three documents" ||
    fail "aliases in $in: $(cat "$T/al.out" "$T/al.err")"
done
expect_error 1 "a folder and a link to one of its files, as two --in" -- "$MW" "${P[@]}" --in "$T/al" --in "$T/al/0.txt" --out "$T/al2"
has "$T/err" "are the same file, given twice by --in" "refused: two --in reach one file"
expect_error 1 "a glob that matches nothing" -- "$MW" "${P[@]}" --in "$T/parts/*.md" --out "$T/m5"

echo "== train reads a set as one sequence"
tr=(train --layers 2 --heads 4 --dim 64 --vocab 256 --ctx 64 --batch 2 --seq 64 --lr 1e-3 --warmup 2 --steps 6
  --eval-batches 2 --eval-every 3 --threads 2 --log-every 100)
for s in one sh; do
  "$MW" "${tr[@]}" --data "$T/$s" --out "$T/D.$s" --json-log "$T/$s.jsonl" >"$T/$s.tr" 2>&1 || fail "train on $s: $(tail -2 "$T/$s.tr")"
done
losses() { grep -o '"loss": [^,]*\|"val_loss": [^,}]*' "$T/$1.jsonl" | tr '\n' ' '; }
[ -n "$(losses one)" ] && [ "$(losses one)" = "$(losses sh)" ] &&
  cmp -s "$T/D.one/step-00000006.mwck" "$T/D.sh/step-00000006.mwck" &&
  pass "$ntr shards against one file: the same losses, validation losses and checkpoint, bit for bit" ||
  fail "set against file: $(losses one) / $(losses sh)"
has "$T/sh.tr" "sh.manifest.json (train) in $ntr shards" "train names the set and its shards"
"$MW" "${tr[@]}" --steps 1 --data "$T/sh.manifest.json" >"$T/mf.tr" 2>&1 && grep -q "in $ntr shards" "$T/mf.tr" &&
  "$MW" "${tr[@]}" --steps 1 --data "$T/one.train.bin" >/dev/null 2>&1 &&
  pass "--data also takes the manifest's path, or the set's train file" || fail "--data MANIFEST: $(tail -2 "$T/mf.tr")"
"$MW" plan --data "$T/sh" --layers 2 --heads 4 --dim 64 --vocab 256 --ctx 64 --batch 2 --seq 64 >/dev/null 2>&1 &&
  pass "plan --data reads the set" || fail "plan --data set"
e1=$("$MW" eval --ckpt "$T/D.one" --data "$T/one" --eval-batches 3 2>/dev/null | tail -1 | grep -o 'loss [0-9.]*')
e2=$("$MW" eval --ckpt "$T/D.one" --data "$T/sh" --eval-batches 3 2>/dev/null | tail -1 | grep -o 'loss [0-9.]*')
[ -n "$e1" ] && [ "$e1" = "$e2" ] && pass "eval --data on the set's validation shards: $e2, as on the file" || fail "eval: '$e1' / '$e2'"
if mpi_ok; then
  mpi_env # (lib_cli.sh)
  for s in one sh; do
    mpirun -np 2 --oversubscribe "$MW" "${tr[@]}" --threads 1 --zero 1 --data "$T/$s" --out "$T/D.r2$s" --json-log "$T/r2$s.jsonl" \
      >"$T/r2$s.out" 2>&1 || fail "2 ranks on $s: $(grep -a memwall: "$T/r2$s.out" | head -2)"
  done
  [ -n "$(losses r2one)" ] && [ "$(losses r2one)" = "$(losses r2sh)" ] &&
    cmp -s "$T/D.r2one/step-00000006.mwck" "$T/D.r2sh/step-00000006.mwck" &&
    pass "2 MPI ranks (each reading only its own windows): the set gives the file's losses and checkpoint" ||
    fail "ranks on the set: $(losses r2one) / $(losses r2sh)"
else
  echo "  (no MPI build here: the ranks' check skipped)"
fi

echo "== a missing, truncated or replaced shard stops train before step 1"
cp -r "$T/D.sh" "$T/D.keep"
mv "$T/sh.train.007.bin" "$T/keep7"
expect_error 1 "a missing shard" -- "$MW" "${tr[@]}" --data "$T/sh" --out "$T/D.x"
has "$T/err" "shard 7 of $T/sh.manifest.json is missing: cannot open $T/sh.train.007.bin" "the error names the shard"
[ ! -d "$T/D.x" ] || [ -z "$(ls "$T/D.x")" ] && pass "no step ran, no checkpoint" || fail "D.x: $(ls "$T/D.x")"
cp "$T/keep7" "$T/sh.train.007.bin"
truncate -s -2 "$T/sh.train.007.bin"
expect_error 1 "a truncated shard" -- "$MW" "${tr[@]}" --data "$T/sh" --out "$T/D.x"
has "$T/err" "sh.train.007.bin: header says 1024 tokens but the file holds" "the error names it"
cp "$T/sh.train.008.bin" "$T/sh.train.007.bin"
expect_error 1 "another valid shard in its place" -- "$MW" "${tr[@]}" --data "$T/sh" --out "$T/D.x"
has "$T/err" "sh.train.007.bin is not the shard $T/sh.manifest.json lists" "the manifest's checksum tells"
cp "$T/keep7" "$T/sh.train.007.bin"
cp "$T/sh.manifest.json" "$T/keep.json"
sed -i 's/"tokens": 1024,/"tokens": 1023,/' "$T/sh.manifest.json"
expect_error 1 "a manifest whose counts do not add up" -- "$MW" "${tr[@]}" --data "$T/sh" --out "$T/D.x"
cp "$T/keep.json" "$T/sh.manifest.json"

echo "== a damaged block stops training, naming the shard and block; the last checkpoint stays good"
mkdir -p "$T/good"
cp "$T"/sh.train.*.bin "$T/good/"
for f in "$T"/sh.train.*.bin; do # one byte of the tokens of every train shard (one block each)
  printf '\x7f' | dd of="$f" bs=1 seek=66 conv=notrunc status=none
done
"$MW" verify "$T/sh" >"$T/v.out" 2>"$T/v.err"
rc=$?
[ $rc -eq 1 ] && [ "$(grep -c '^  BAD' "$T/v.out")" -eq "$ntr" ] && grep -q "$ntr of $(ls "$T"/sh.*.[0-9]*.bin | wc -l) shards damaged" "$T/v.err" &&
  pass "verify: exit 1, each damaged shard named: $(grep -m1 BAD "$T/v.out" | cut -c1-150)" || fail "verify damaged: rc $rc $(tail -n 2 "$T/v.out" "$T/v.err")"
grep '^  BAD' "$T/v.out" | grep -q "memwall verify" && fail "a BAD line tells verify's user to run verify" ||
  pass "no BAD line sends its reader to memwall verify"
expect_error 1 "resuming on damaged shards" -- "$MW" "${tr[@]}" --data "$T/sh" --steps 8 --override steps --resume auto --out "$T/D.sh"
grep -q "sh.train.[0-9]*.bin: block 0 (bytes 64 to [0-9]*) fails its checksum" "$T/err" && pass "the error names the shard, block and bytes" ||
  fail "damaged: $(cat "$T/err")"
ls "$T/D.sh" | grep -q step-00000007 && fail "a checkpoint was written after the error" || pass "no checkpoint after the error"
cp "$T"/good/*.bin "$T/"
"$MW" "${tr[@]}" --data "$T/sh" --steps 8 --override steps --resume auto --out "$T/D.sh" >"$T/r.out" 2>&1 &&
  grep -q "resumed from .*step-00000006.mwck at step 6 of 8" "$T/r.out" &&
  pass "with the shards restored the run resumes from its last checkpoint to step 8" || fail "restored: $(tail -3 "$T/r.out")"

echo "== verify reads on past a damaged shard: each one named, whatever is wrong with it, then exit 1"
truncate -s -2 "$T/sh.train.001.bin"
printf '\x7f' | dd of="$T/sh.train.002.bin" bs=1 seek=66 conv=notrunc status=none
rm "$T/sh.train.003.bin"
"$MW" verify "$T/sh" >"$T/v.out" 2>"$T/v.err"
rc=$?
nall=$(ls "$T"/sh.*.[0-9]*.bin | wc -l) # one gone
[ $rc -eq 1 ] && [ "$(grep -c '^  BAD' "$T/v.out")" -eq 3 ] && [ "$(grep -c '^  ok' "$T/v.out")" -eq $((nall - 2)) ] &&
  grep -q "3 of $((nall + 1)) shards damaged" "$T/v.err" && pass "verify: exit 1, the truncated, damaged and missing shards all named" ||
  fail "verify three: rc $rc $(grep -v '^  ok' "$T/v.out") $(cat "$T/v.err")"
has "$T/v.out" "BAD  $T/sh.train.001.bin: header says 1024 tokens but the file holds" "the truncated one"
has "$T/v.out" "BAD  $T/sh.train.002.bin: block 0 of its 1 (bytes 64 to 2112) fails its checksum" "the damaged block"
has "$T/v.out" "BAD  shard 3 of $T/sh.manifest.json is missing" "the missing one"
cp "$T"/good/*.bin "$T/"
cp "$T/one.train.bin" "$T/two.train.bin" && cp "$T/one.val.bin" "$T/two.val.bin"
truncate -s -2 "$T/two.train.bin"
printf '\x7f' | dd of="$T/two.val.bin" bs=1 seek=66 conv=notrunc status=none
"$MW" verify "$T/two" >"$T/v.out" 2>"$T/v.err"
rc=$?
[ $rc -eq 1 ] && grep -q "BAD  $T/two.train.bin: header says" "$T/v.out" && grep -q "BAD  $T/two.val.bin: block 0 of" "$T/v.out" &&
  grep -q "2 of 2 shards damaged" "$T/v.err" && pass "a two-file set: both damaged files named" ||
  fail "verify two: rc $rc $(cat "$T/v.out" "$T/v.err")"
cp "$T/one.train.bin" "$T/two.train.bin" # 3 blocks: the first and the last damaged
printf '\x7f' | dd of="$T/two.train.bin" bs=1 seek=66 conv=notrunc status=none
printf '\x7f' | dd of="$T/two.train.bin" bs=1 seek=$((64 + 2 * 65536 + 6)) conv=notrunc status=none
"$MW" verify "$T/two.train.bin" >"$T/v.out" 2>"$T/v.err"
grep -q "BAD  $T/two.train.bin: 2 of its 3 blocks fail their checksums (the first: block 0, bytes 64 to 65600)" "$T/v.out" &&
  pass "a file's damaged blocks are counted, the first named" || fail "blocks: $(cat "$T/v.out" "$T/v.err")"

echo "== --append adds shards; a resumed run on the grown set says so"
"$MW" "${P[@]}" --in "$T/parts/a.txt" --out "$T/g" --shard-tokens 8192 >/dev/null 2>&1 || fail "prepare g"
sha_before=$(sha256sum "$T"/g.train.*.bin "$T"/g.val.*.bin | cut -c1-64)
n_before=$(ls "$T"/g.train.*.bin | wc -l)
"$MW" "${tr[@]}" --data "$T/g" --steps 4 --out "$T/D.g" --json-log "$T/g.jsonl" >/dev/null 2>&1 || fail "train on g"
"$MW" "${P[@]}" --in "$T/parts/b.txt" --in "$T/parts/c.txt" --out "$T/g" --append --shard-tokens 8192 >"$T/ap.out" 2>&1 ||
  fail "append: $(cat "$T/ap.out")"
has "$T/ap.out" "(part added: train" "prepare says what the part added"
[ "$(sha256sum $(ls "$T"/g.train.*.bin | head -n "$n_before") "$T/g.val.000.bin" | cut -c1-64)" = "$sha_before" ] &&
  [ "$(ls "$T"/g.train.*.bin | wc -l)" -gt "$n_before" ] && pass "the old shards are untouched, new ones added" ||
  fail "append rewrote shards"
[ "$(grep -c '"documents"' "$T/g.manifest.json")" -eq 2 ] && pass "the manifest lists two parts" || fail "parts: $(cat "$T/g.manifest.json")"
"$MW" verify "$T/g" >/dev/null 2>&1 && pass "the grown set verifies" || fail "verify grown"
"$MW" "${tr[@]}" --data "$T/g" --steps 6 --override steps --resume auto --out "$T/D.g" --json-log "$T/g.jsonl" >"$T/gr.out" 2>&1 &&
  grep -q "note: the set grew since .*: it trained on the first [0-9]* tokens, the set now holds [0-9]*; from step 4" "$T/gr.out" &&
  grep -q '"event": "data_grown", "step": 4' "$T/g.jsonl" &&
  pass "resume on the grown set continues with a note in the log and the JSON log" || fail "grown resume: $(tail -4 "$T/gr.out")"
"$MW" "${P[@]}" --in "$T/parts/b.txt" --out "$T/g2" --shard-tokens 8192 >/dev/null 2>&1
expect_error 1 "resume on another set" -- "$MW" "${tr[@]}" --data "$T/g2" --steps 8 --override steps --resume auto --out "$T/D.g"
has "$T/err" "not the same data" "the refusal says so"
expect_error 1 "--append with another tokenizer" -- "$MW" prepare --tokenizer gpt2 --vocab-dir "$(dirname "$0")/../data/gpt2" \
  --in "$T/parts/a.txt" --out "$T/g" --append
has "$T/err" "was made by tokenizer bytes" "the refusal names both tokenizers"
expect_error 1 "--append to nothing" -- "$MW" "${P[@]}" --in "$T/parts/a.txt" --out "$T/none" --append
cp "$T/one.train.bin" "$T/o2.train.bin"
cp "$T/one.val.bin" "$T/o2.val.bin"
"$MW" "${P[@]}" --in "$T/parts/a.txt" --out "$T/o2" --append >/dev/null 2>&1 && grep -q '"file": "o2.train.bin"' "$T/o2.manifest.json" &&
  cmp -s "$T/one.train.bin" "$T/o2.train.bin" && "$MW" verify "$T/o2" >/dev/null 2>&1 &&
  pass "--append to a single-file set: a manifest listing the file as its first shard, unchanged" || fail "append to single"

echo "== prepare stopped midway leaves the earlier set as it was"
gsum() { (cd "$T" && sha256sum $(ls | grep '^g\.' | grep -v '\.tmp\.')); } # the set g's files
sha_g=$(gsum)
mkfifo "$T/fifo"
"$MW" "${P[@]}" --in "$T/fifo" --split-blank-lines --memory 32MiB --out "$T/g" --shard-tokens 1024 >/dev/null 2>&1 &
pid=$!
exec 3>"$T/fifo"
for i in $(seq 40); do cat "$T/corpus.txt" >&3; done
for i in $(seq 50); do ls "$T" | grep -q 'g\.train\.[0-9]*\.bin\.tmp\.' && break; sleep 0.1; done
ls "$T" | grep -q 'g\.train\.[0-9]*\.bin\.tmp\.' && pass "shards were being written" || fail "no temporary shard seen"
kill -9 $pid
exec 3>&-
wait $pid 2>/dev/null
[ "$(gsum)" = "$sha_g" ] && "$MW" verify "$T/g" >/dev/null 2>&1 &&
  pass "killed (SIGKILL): the old manifest and shards unchanged, the set verifies" || fail "the set changed"
rm -f "$T"/g.*.tmp.*
ln -s "$T/nowhere" "$T/parts/z.txt"
expect_error 1 "an unreadable file after the first" -- "$MW" "${P[@]}" --in "$T/parts" --out "$T/g" --shard-tokens 1024
[ "$(gsum)" = "$sha_g" ] && ! ls "$T" | grep -q '\.tmp\.' &&
  pass "an error: the old set unchanged and no temporary file left" || fail "after the error: $(ls "$T" | grep tmp)"
"$MW" "${P[@]}" --in "$T/parts" --out "$T/sk" --shard-tokens 4096 --skip-unreadable >"$T/sk.out" 2>&1 &&
  has "$T/sk.out" "1 unreadable files skipped" "--skip-unreadable skips it and counts it"
rm "$T/parts/z.txt"
for sig in TERM INT; do
  "$MW" "${P[@]}" --in "$T/fifo" --split-blank-lines --memory 32MiB --out "$T/g" --shard-tokens 1024 >/dev/null 2>&1 &
  pid=$!
  exec 3>"$T/fifo"
  for i in $(seq 40); do cat "$T/corpus.txt" >&3; done
  for i in $(seq 50); do ls "$T" | grep -q 'g\.train\.[0-9]*\.bin\.tmp\.' && break; sleep 0.1; done
  kill -$sig $pid
  exec 3>&-
  wait $pid 2>/dev/null
  [ "$(gsum)" = "$sha_g" ] && ! ls "$T" | grep -q '\.tmp\.' && pass "SIG$sig: the old set unchanged and the temporary shards removed" ||
    fail "SIG$sig: $(ls "$T" | grep tmp | head -3)"
done
"$MW" "${P[@]}" --in "$T/corpus.txt" --out "$T/o2" --shard-tokens 1024 >/dev/null 2>&1 && [ ! -f "$T/o2.train.bin" ] &&
  [ "$(ls "$T"/o2.train.*.bin | wc -l)" -eq "$ntr" ] && "$MW" verify "$T/o2" >/dev/null 2>&1 &&
  pass "a fresh sharded prepare over an appended two-file set: its files replaced, none left over" || fail "fresh over appended: $(ls "$T" | grep '^o2')"
"$MW" "${P[@]}" --in "$T/corpus.txt" --out "$T/sh" >/dev/null 2>&1 && [ ! -f "$T/sh.manifest.json" ] &&
  ! ls "$T" | grep -q '^sh\.train\.[0-9]' && pass "a single-file prepare over a set removes its manifest and shards" ||
  fail "single over set: $(ls "$T" | grep '^sh\.' | head)"
echo "cli_sets: $fails failure(s)"
[ "$fails" -eq 0 ]
