#!/usr/bin/env bash
# The search's speed (issue 32 item 6: "a search over >= 1000 layouts finishes in under 10 s on one
# core"): estimate --search for gpt3-175b, deepseek-v3, llama3-70b and mixtral-8x7b on their worlds,
# at the default global batch and at large ones (gpt3-175b's --global-batch 98304: 96 sequences of
# 1024 data-parallel ranks' worth of micro-batches). Prints each search's layouts, planned, fitting
# and CPU seconds (user + system, one thread, pinned to one core: the machine may be loaded) and the
# largest. Not a test.
#   bench/search_speed.sh [BINARY]              (default build/memwall)
#   REF=other/memwall bench/search_speed.sh     also runs REF and compares the two JSONs: the same
#       header (but the times), the same ranked layouts field for field, the same dropped layouts in
#       order with the same reasons, but for "needs X" (placed) now "keeps Y alive at once (not
#       placed)" with Y <= X and Y over the memory left (mw_plan_within's bound)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${1:-build/memwall}
CASES=(
  "--preset gpt3-175b --seq 2048 --batch 1 --world 1024 --gpu a100-80g"
  "--preset gpt3-175b --seq 2048 --batch 1 --world 1024 --gpu a100-80g --global-batch 1536"
  "--preset gpt3-175b --seq 2048 --batch 1 --world 1024 --gpu a100-80g --global-batch 98304"
  "--preset gpt3-175b --seq 2048 --batch 1 --world 256 --gpu h100-80g --global-batch 16384"
  "--preset deepseek-v3 --seq 4096 --batch 1 --world 1024 --gpu h100-80g"
  "--preset deepseek-v3 --seq 4096 --batch 1 --world 1024 --gpu h100-80g --global-batch 131072"
  "--preset deepseek-v3 --seq 4096 --batch 1 --world 256 --gpu h100-80g --global-batch 8192"
  "--preset llama3-70b --seq 8192 --batch 1 --world 64 --gpu h100-80g --global-batch 128"
  "--preset llama3-70b --seq 8192 --batch 1 --world 512 --gpu h100-80g --global-batch 16384"
  "--preset mixtral-8x7b --seq 4096 --batch 1 --world 64 --gpu h100-80g --global-batch 128"
  "--preset mixtral-8x7b --seq 4096 --batch 1 --world 256 --gpu a100-80g --global-batch 32768"
)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cpu() { /usr/bin/time -f "%U %S" -o "$T/time" taskset -c 0 "$@" >"$T/out" 2>&1 || true
  awk '{printf "%.2f", $1 + $2}' "$T/time"; }
bad=0 max=0 worst=""
for args in "${CASES[@]}"; do
  t=$(cpu "$BIN" estimate $args --search --threads 1 --json)
  cp "$T/out" "$T/new.json"
  sum=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["layouts"], d["planned"], d["fit"])' "$T/new.json" 2>/dev/null || echo "? ? ?")
  line=$(printf "%6s s  layouts/planned/fit %-16s %s" "$t" "$sum" "$args")
  if [ -n "${REF:-}" ]; then
    r=$(cpu "$REF" estimate $args --search --threads 1 --json)
    cp "$T/out" "$T/ref.json"
    if python3 - "$T/ref.json" "$T/new.json" >"$T/cmp" <<'PY'; then line+="  (REF $r s: same)"; else line+="  (REF $r s: DIFFERS: $(head -c 300 "$T/cmp"))"; bad=1; fi
import json, re, sys
U = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
def b(t): v, u = t.split(); return float(v) * U[u]
a, n = (json.load(open(f)) for f in sys.argv[1:3])
bad = [k for k in a if k not in ("seconds", "cpu_seconds", "layouts_ranked", "dropped") and a[k] != n[k]]
bad += ["ranked"] if a["layouts_ranked"] != n["layouts_ranked"] else []
bad += ["dropped count"] if len(a["dropped"]) != len(n["dropped"]) else []
for x, y in zip(a["dropped"], n["dropped"]):
    if {k: v for k, v in x.items() if k != "why"} != {k: v for k, v in y.items() if k != "why"}: bad.append("order"); break
    if x["why"] == y["why"]: continue
    m1 = re.match(r"stage (\d+)'s rank needs (.+), (.+) left for the plan$", x["why"])
    m2 = re.match(r"stage (\d+)'s rank keeps (.+) alive at once \(not placed\), (.+) left for the plan$", y["why"])
    if not (m1 and m2 and m1.group(3) == m2.group(3) and b(m2.group(2)) <= b(m1.group(2)) * 1.0001
            and b(m2.group(2)) > b(m2.group(3))):
        bad.append("why: %s | %s" % (x["why"], y["why"])); break
print(" ".join(bad))
sys.exit(1 if bad else 0)
PY
  fi
  echo "$line"
  if awk -v a="$t" -v b="$max" 'BEGIN{exit !(a > b)}'; then max=$t worst=$args; fi
done
echo "== max $max s ($worst)"
exit $bad
