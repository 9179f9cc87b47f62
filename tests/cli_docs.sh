#!/usr/bin/env bash
# The documentation's commands parse (issue 31, item 3): every memwall command line quoted in
# README.md and docs/*.md (code blocks, continuation lines with \ joined, and inline code;
# `memwall SUB ...`, `build/memwall SUB ...`, `mpirun ... build/memwall SUB ...`) names a command
# that exists, and every --flag it gives is one that `memwall SUB --help` lists; a choice value
# (--optim adamw8bit, --recompute every:2, --offload optimizer|all, --override steps,lr) must be
# one that the flag's help line names; every command has an example in a code block of README.md
# or docs/commands.md (a project rule). Also every relative link of those pages reaches a file,
# and its #anchor a heading there. A renamed flag then fails `make test` naming file:line.
# Usage: tests/cli_docs.sh build/memwall [FILE.md ...] (default: README.md and docs/*.md).
# Exits non-zero when any check fails. Runs in well under a second: one --help per command.
set -u
MW=$(realpath "${1:-build/memwall}")
REPO=$(dirname "$(dirname "$(realpath "$0")")")
T=$(mktemp -d /tmp/mw_docs_XXXXXX)
trap 'rm -rf "$T"' EXIT
. "$(dirname "$0")/lib_cli.sh" # pass, fail
shift
checkex=0 # one example per command: checked on the repository's own pages
if [ $# -gt 0 ]; then
  files=("$@")
else
  cd "$REPO" || exit 1
  files=(README.md docs/*.md)
  checkex=1
fi

# the commands, from `memwall help`; each one's options (and whether it takes a value), from its --help
"$MW" help >"$T/help" 2>&1 || { echo "memwall help failed: $(cat "$T/help")"; exit 1; }
cmds=$(awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 }' "$T/help" | grep -v '^help$')
[ -n "$cmds" ] || { echo "no commands in memwall help: $(cat "$T/help")"; exit 1; }
: >"$T/opts"
for c in $cmds; do
  "$MW" "$c" --help >"$T/h.$c" 2>&1 || fail "memwall $c --help: exit $?"
  grep -q "^usage: memwall $c" "$T/h.$c" || fail "memwall $c --help: no usage line: $(head -c 200 "$T/h.$c")"
  # "  --flag VALUE  description" (one space before a placeholder; the description after 2 or more)
  awk -v c="$c" '/^  --[a-z0-9-]+/ {
      line = substr($0, 3); f = $1; rest = substr(line, length(f) + 1)
      val = (rest ~ /^ [^ ]/) ? 1 : 0
      sub(/^ +/, "", rest); if (val) sub(/^[^ ]+ */, "", rest)
      printf "%s\t%s\t%d\t%s\n", c, f, val, rest }' "$T/h.$c" >>"$T/opts"
done
n_opts=$(wc -l <"$T/opts")
[ "$n_opts" -gt 50 ] && pass "$(echo $cmds | wc -w) commands, $n_opts options read from their --help" ||
  fail "only $n_opts options read from --help"
"$MW" --version >/dev/null 2>&1 || fail "memwall --version fails"

# every quoted command line, as "FILE:LINE<TAB>word<TAB>word..." (quotes kept out of the words)
awk '
function flush_words(s, loc, inline,   i, ch, q, w, out, n, inw) {
  # shell words of s; separators |, ;, &&, ||, #-comments and redirections as their own words;
  # a | inside a word (--offload optimizer|all), and any | in inline code, is a list of choices
  n = 0; w = ""; q = ""; inw = 0; out = loc "\t" (inline ? "inline" : "block")
  for (i = 1; i <= length(s); i++) {
    ch = substr(s, i, 1)
    if (ch == "\001") { if (inw) { out = out "\t" w; w = ""; inw = 0 } out = out "\t\001"; continue } # a line break
    if (q != "") { if (ch == q) q = ""; else w = w ch; continue }
    if (ch == "\047" || ch == "\"") { q = ch; inw = 1; continue }
    if (ch == " " || ch == "\t") { if (inw) { out = out "\t" w; w = ""; inw = 0 } continue }
    if (!inw && ch == "#") { out = out "\t#"; break }
    if (ch == "|" && (inw || inline)) { w = w ch; inw = 1; continue }
    if (ch == "|" || ch == ";" || ch == "&" || ch == ">" || ch == "<") {
      if (inw) { out = out "\t" w; w = ""; inw = 0 }
      out = out "\t" ch; continue
    }
    w = w ch; inw = 1
  }
  if (inw) out = out "\t" w
  if (out ~ /memwall/) print out
}
function spans(s, loc,   i, j, rest, code) {
  rest = s
  while ((i = index(rest, "`")) > 0) {
    rest = substr(rest, i + 1); j = index(rest, "`"); if (j == 0) break
    code = substr(rest, 1, j - 1); rest = substr(rest, j + 1)
    gsub(/\\\|/, "|", code) # a table cell escapes its pipes
    flush_words(code, loc, 1)
  }
}
FNR == 1 { incode = 0; pend = ""; ppend = "" }
/^ *```/ { incode = !incode; pend = ""; next }
incode {
  line = $0
  if (pend == "") start = FNR
  if (line ~ /\\$/) { pend = pend substr(line, 1, length(line) - 1) " \001 "; next }
  flush_words(pend line, FILENAME ":" start, 0); pend = ""; next
}
{
  # inline code may run over a line break inside a paragraph: join until the backticks pair up
  if (ppend == "") pstart = FNR
  ppend = ppend (ppend == "" ? "" : " \001 ") $0
  tmp = ppend; nb = gsub(/`/, "", tmp)
  if (nb % 2 == 1 && $0 != "") next
  spans(ppend, FILENAME ":" pstart); ppend = ""
}' "${files[@]}" >"$T/cmds"

# check each against the options
awk -F'\t' -v cmds="$cmds" -v checkex="$checkex" '
function placeholder(v) { return v ~ /^[A-Z][A-Z0-9_]*([.|:][A-Z0-9_.|]*)?$/ || v ~ /\.\.\./ || v ~ /^[$<]/ }
function named(desc, p,   s, i, b, a) {
  # p appears in desc as a whole name: not inside another name
  s = desc
  while ((i = index(s, p)) > 0) {
    b = (i == 1) ? " " : substr(s, i - 1, 1); a = substr(s, i + length(p), 1)
    if (b !~ /[a-z0-9+:-]/ && a !~ /[a-z0-9+-]/) return 1
    s = substr(s, i + 1)
  }
  return 0
}
function check_value(loc, sub_, f, v,   n, parts, k, p, desc, sep) {
  if (!(f in choice)) return
  desc = opt[sub_ SUBSEP f]
  sep = (f == "--override") ? "," : "|"
  n = split(v, parts, sep)
  for (k = 1; k <= n; k++) {
    p = parts[k]
    if (p == "" || placeholder(p)) continue
    if (f == "--override") {
      if (!((sub_ SUBSEP "--" p) in opt)) bad(loc, "memwall " sub_ " --override " v ": " p " is no option of " sub_)
      continue
    }
    if (f == "--tokenizer" && (p ~ /[\/.]/ || p ~ /^[A-Z]/)) continue # a path
    if (f == "--recompute") { if (p ~ /^every:[0-9]+$/) p = "every:K"; if (p ~ /^blocks:[nsf]+$/) p = "blocks:LETTERS" }
    if (!named(desc, p)) bad(loc, "memwall " sub_ " " f " " v ": " p " is not a value `memwall " sub_ " --help` names for " f)
  }
}
function bad(loc, msg) { print loc ": " msg; nbad++ }
function runs(i,   k, other) {
  # W[i] is where a shell runs a program: first in its command (after VAR=value, time, env), or
  # under mpirun; not a word of prose in an output block ("isa auto: memwall picks its kernel")
  other = 0
  for (k = i - 1; k >= 1 && W[k] !~ /^[|;&#]$/; k--) {
    if (W[k] ~ /(^|\/)(mpirun|mpiexec)$/) return 1
    if (W[k] !~ /^[A-Za-z_][A-Za-z0-9_]*=/ && W[k] !~ /^(\$|time|env|nohup|exec)$/) other = 1
  }
  return !other
}
BEGIN {
  n = split(cmds, cl, "\n"); for (i = 1; i <= n; i++) iscmd[cl[i]] = 1
  split("--optim --precision --kernel --offload --arch --progress --format --preset --recompute --tokenizer --override", cs, " ")
  for (i in cs) choice[cs[i]] = 1
}
FILENAME ~ /opts$/ { opt[$1 SUBSEP $2] = $4; hasval[$1 SUBSEP $2] = $3; next }
{
  # the words, each with its line (a \001 word marks a line break of the quoted command)
  file = $1; sub(/:[0-9]+$/, "", file); line = substr($1, length(file) + 2) + 0; NW = 0
  for (k = 3; k <= NF; k++) { if ($k == "\001") line++; else { NW++; W[NW] = $k; L[NW] = line } }
  for (i = 1; i <= NW; i++) {
    if (W[i] !~ /(^|\/)memwall$/ || !runs(i)) continue
    if (i == NW || W[i + 1] ~ /^[|;&#<>]$/) continue # the program named, not run
    s = W[i + 1]; ncmd++
    if (s == "--version" || s == "--help" || s == "-h") continue
    if (placeholder(s) || s !~ /^[a-z][a-z0-9-]*$/) continue # prose such as "the memwall command:"
    if (s == "help") {
      if (i + 2 <= NW && W[i + 2] !~ /^[|;&#<>]$/ && !placeholder(W[i + 2]) && !(W[i + 2] in iscmd))
        bad(file ":" L[i], "memwall help " W[i + 2] ": no such command")
      continue
    }
    if (!(s in iscmd)) { bad(file ":" L[i], "memwall " s ": no such command (memwall help lists them)"); continue }
    if ($2 == "block" && (file == "README.md" || file ~ /(^|\/)docs\/commands\.md$/)) example[s]++
    for (j = i + 2; j <= NW; j++) {
      w = W[j]
      if (w ~ /^[|;&#]$/) break
      sub(/^\[/, "", w); sub(/[],]$/, "", w) # [--out DIR], a comma after a flag
      if (w ~ /^[<>]$/) { j++; continue } # a redirection and its file
      if (w !~ /^--[a-z0-9]/) continue
      f = w; v = ""; eq = index(w, "=")
      if (eq > 0) { f = substr(w, 1, eq - 1); v = substr(w, eq + 1) }
      nflag++
      if (!((s SUBSEP f) in opt)) { bad(file ":" L[j], "memwall " s " " f ": not an option of " s " (memwall " s " --help)"); continue }
      if (hasval[s SUBSEP f] && eq == 0 && j < NW && W[j + 1] !~ /^[|;&#<>]$/) { j++; v = W[j] }
      if (v != "") check_value(file ":" L[j], s, f, v)
    }
  }
}
END {
  # the project rule: README.md or docs/commands.md shows every command in a code block
  if (checkex) for (c in iscmd) if (!(c in example)) bad("docs/commands.md", "memwall " c ": no example in a code block of README.md or docs/commands.md")
  printf "%d %d %d\n", ncmd, nflag, nbad > "/dev/stderr"
}' "$T/opts" "$T/cmds" >"$T/bad" 2>"$T/count"
read -r ncmd nflag nbad <"$T/count"
if [ "${nbad:-1}" -eq 0 ] && [ "${ncmd:-0}" -gt 0 ]; then
  pass "$ncmd memwall command lines quoted in ${#files[@]} pages, $nflag flags: every command exists and has an example, every flag and choice is in its --help"
else
  while read -r l; do fail "$l"; done <"$T/bad"
  [ "${ncmd:-0}" -gt 0 ] || fail "no memwall command lines found in ${files[*]}"
fi

# relative links: the file exists, and an #anchor in a .md file is one of its headings (GitHub's
# slugs: lower case, punctuation dropped, spaces to -)
awk '
function slugs(file,   line, s, incode) {
  if (file in seen) return
  seen[file] = 1; incode = 0
  while ((getline line < file) > 0) {
    if (line ~ /^ *```/) { incode = !incode; continue }
    if (incode || line !~ /^#+ /) continue
    s = tolower(line); sub(/^#+ +/, "", s); gsub(/[^a-z0-9 _-]/, "", s); gsub(/ /, "-", s)
    anchor[file SUBSEP s] = 1
    if ((file SUBSEP s) in cnt) anchor[file SUBSEP s "-" cnt[file SUBSEP s]] = 1
    cnt[file SUBSEP s]++
  }
  close(file)
}
FNR == 1 { incode = 0; dir = FILENAME; if (!sub(/\/[^\/]*$/, "", dir)) dir = "." }
/^ *```/ { incode = !incode; next }
incode { next }
{
  rest = $0
  while (match(rest, /\]\([^) ]+\)/)) {
    t = substr(rest, RSTART + 2, RLENGTH - 3); rest = substr(rest, RSTART + RLENGTH)
    if (t ~ /^[a-z]+:/) continue # http:, mailto:
    path = t; a = ""
    if ((h = index(t, "#")) > 0) { path = substr(t, 1, h - 1); a = substr(t, h + 1) }
    file = (path == "") ? FILENAME : dir "/" path
    nlink++
    if (path != "" && system("test -e \"" file "\"") != 0) { print FILENAME ":" FNR ": link " t ": no such file"; continue }
    if (a != "" && file ~ /\.md$/) { slugs(file); if (!((file SUBSEP a) in anchor)) print FILENAME ":" FNR ": link " t ": no heading #" a " in " path }
  }
}
END { print nlink > "/dev/stderr" }' "${files[@]}" >"$T/links" 2>"$T/nlinks"
if [ -s "$T/links" ]; then
  while read -r l; do fail "$l"; done <"$T/links"
else
  pass "$(cat "$T/nlinks") relative links reach their file and heading"
fi

echo
[ $fails -eq 0 ] && echo "cli_docs: all passed" || echo "cli_docs: $fails FAILED"
[ $fails -eq 0 ]
