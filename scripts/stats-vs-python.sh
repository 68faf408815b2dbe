#!/usr/bin/env bash
# stats-vs-python.sh times Orrery's trace loading and statistics (engine/trace)
# against the seed's Python (exo PR #1345, tracing.py: load_trace_file and
# compute_stats) on the same synthetic Chrome trace, checks that both compute
# the same statistics, and prints the speed-ups.
#
#   scripts/stats-vs-python.sh            # 1,000,000 spans
#   SPANS=200000 scripts/stats-vs-python.sh
#
# The seed's tracing.py is extracted from the seed file at run time into a
# temporary directory and deleted afterwards; no exo code is kept in this
# repository. The seed page lost the file's leading white space, so the
# extraction re-indents it (see reindent below) and then checks the result on
# known inputs before using it. Its two exo imports are replaced: the tracing
# switch by a constant, the logger by a stdlib logger.
#
# The trace holds only X spans and M metadata with whole-microsecond times:
# exo's loader counts every non-M event as a span, and reads times as floats.
set -euo pipefail
cd "$(dirname "$0")/.."

SPANS=${SPANS:-1000000}
SEED=${SEED:-}
if [[ -z "$SEED" ]]; then
	for dir in ../shared/seeds /work/shared/seeds; do
		for f in "$dir"/000_*.txt; do
			[[ -f "$f" ]] && SEED=$f && break 2
		done
	done
fi
[[ -f "$SEED" ]] || { echo "stats-vs-python: seed 000_*.txt not found (set SEED=path)" >&2; exit 1; }
command -v python3 >/dev/null || { echo "stats-vs-python: python3 not found" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# --- Extract the seed's tracing.py -----------------------------------------
cat >"$tmp/extract.py" <<'PY'
"""Extracts src/exo/shared/tracing.py from the seed diff and re-indents it."""
import hashlib, sys

seed, out = sys.argv[1], sys.argv[2]
lines = open(seed, encoding="utf-8").read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith("diff --git a/src/exo/shared/tracing.py"))
end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("diff --git")), len(lines))
body = [l[1:] for l in lines[start + 1:end] if l.startswith("+") and not l.startswith("+++")]

REPLACE = {
    "from exo.shared.constants import EXO_TRACING_ENABLED": ["EXO_TRACING_ENABLED = False"],
    "from exo.worker.runner.bootstrap import logger": ["import logging", 'logger = logging.getLogger("seed-tracing")'],
}

# The page kept one space where an indented line had its indentation, so a
# line is known to be top level or not, but not how deep. Depth follows from
# the block structure (a line ending in ':' opens a block; else/elif/except/
# finally match their opener; def/@ inside a class sit one level below it; a
# return/continue/break/raise ends its block) except where a block simply ends
# and the code goes on one or two levels up: those statements are listed here
# with their depth, and the self-check after the extraction proves the result.
DEDENT = {  # sha256(line)[:16] -> indent level; the lines themselves are not copied here
    "27f64518817bccd2": 2,
    "1f05ef2d0080be97": 1,
    "fea38cec3983a9b3": 1,
    "62056f366b20a2bd": 1,
    "cfb316263a3f9fc5": 2,
    "ff3f862b4561c699": 1,
    "b470d220639101cd": 1,
}
CLAUSE_OPENERS = {"else": ("if", "elif", "for", "while", "try", "except"), "elif": ("if", "elif"),
                  "except": ("try", "except"), "finally": ("try", "except", "else")}
ENDERS = ("return", "continue", "break", "raise", "pass")


def code_part(s):
    """s without a trailing comment; tracks quotes, not triple quotes."""
    q = None
    for i, c in enumerate(s):
        if q:
            if c == "\\":
                continue
            if c == q:
                q = None
        elif c in "'\"":
            q = c
        elif c == "#":
            return s[:i].rstrip()
    return s.rstrip()


def depth_change(s):
    d, q = 0, None
    for c in s:
        if q:
            if c == q:
                q = None
        elif c in "'\"":
            q = c
        elif c in "([{":
            d += 1
        elif c in ")]}":
            d -= 1
    return d


out_lines = []
stack = []  # open blocks: (level, keyword)
cur = 0  # level of the next statement
brackets = 0  # open brackets of the current logical line
in_doc = False  # inside a triple-quoted string
stmt_level = 0  # level of the current logical line
first_word = ""
for raw in body:
    text = raw.strip()
    for old, new in REPLACE.items():
        if text == old and not raw.startswith(" "):
            out_lines.extend(new)
            text = None
    if text is None:
        continue
    if not text:
        out_lines.append("")
        continue
    if in_doc or brackets > 0:  # continuation of a logical line
        out_lines.append("    " * (stmt_level + 1) + text)
        if in_doc:
            in_doc = text.count('"""') % 2 == 0
        else:
            brackets += depth_change(code_part(text))
        if in_doc or brackets > 0:
            continue
        last = code_part(text)
    else:
        if text.startswith("#"):
            out_lines.append("    " * cur + text)
            continue
        word = text.split(None, 1)[0].rstrip(":")
        if not raw.startswith(" "):
            level = 0
        elif hashlib.sha256(text.encode()).hexdigest()[:16] in DEDENT:
            level = DEDENT[hashlib.sha256(text.encode()).hexdigest()[:16]]
        elif word in CLAUSE_OPENERS:
            level = next(l for l, k in reversed(stack) if k in CLAUSE_OPENERS[word])
        elif word in ("def", "@", "class", "async") or text.startswith("@"):
            level = next((l + 1 for l, k in reversed(stack) if k == "class"), cur)
        else:
            level = cur
        while stack and stack[-1][0] >= level:
            stack.pop()
        stmt_level, first_word = level, word
        out_lines.append("    " * level + text)
        code = code_part(text)
        if code.count('"""') % 2 == 1:
            in_doc = True
            continue
        brackets = depth_change(code)
        if brackets > 0:
            continue
        last = code
    # The logical line is complete.
    if last.endswith(":"):
        stack.append((stmt_level, first_word if not first_word.startswith("@") else "@"))
        cur = stmt_level + 1
    elif first_word in ENDERS:
        cur = max(stmt_level - 1, 0)
    else:
        cur = stmt_level

open(out, "w", encoding="utf-8").write("\n".join(out_lines) + "\n")
PY
python3 "$tmp/extract.py" "$SEED" "$tmp/seed_tracing.py"

# --- Check the extraction on inputs with known results ----------------------
cat >"$tmp/selfcheck.py" <<'PY'
import json, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import seed_tracing as st

ev = [st.TraceEvent("a", 10, 5, 0, "x"), st.TraceEvent("b", 12, 9, 1, "x"), st.TraceEvent("c", 30, 1, 1, "y")]
s = st.compute_stats(ev)
c = s.by_category["x"]
assert (s.total_wall_time_us, c.total_us, c.count, c.min_us, c.max_us, c.avg_us) == (21, 14, 2, 5, 9, 7.0), vars(c)
assert set(s.by_rank) == {0, 1} and s.by_rank[1]["y"].count == 1
with tempfile.TemporaryDirectory() as d:
    p = Path(d) / "t.json"
    p.write_text(json.dumps({"traceEvents": [
        {"name": "m", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "Rank 0"}},
        {"name": "a", "cat": "k", "ph": "X", "ts": 5, "dur": 2, "tid": 3},
        {"name": "b", "cat": "k", "ph": "X", "ts": 9, "dur": 1, "tid": 3, "args": {"rank": 1}},
    ]}))
    got = [(t.name, t.start_us, t.duration_us, t.rank) for t in st.load_trace_file(p)]
    assert got == [("a", 5, 2, 3), ("b", 9, 1, 1)], got
PY
python3 "$tmp/selfcheck.py" "$tmp" || {
	echo "stats-vs-python: the extracted seed tracing.py does not behave as expected:" >&2
	cat -n "$tmp/seed_tracing.py" >&2
	exit 1
}

# --- Run both on one file --------------------------------------------------
cat >"$tmp/run_seed.py" <<'PY'
import json, sys, time, gc
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import seed_tracing as st

path, out, runs = Path(sys.argv[2]), sys.argv[3], 3
t0 = time.perf_counter()
traces = st.load_trace_file(path)
load = time.perf_counter() - t0
best = float("inf")
for _ in range(runs):
    gc.collect()
    t0 = time.perf_counter()
    stats = st.compute_stats(traces)
    best = min(best, time.perf_counter() - t0)

def cat(c):
    return {"totalUs": c.total_us, "count": c.count, "minUs": c.min_us, "maxUs": c.max_us, "avgUs": c.avg_us}

json.dump({
    "totalWallTimeUs": stats.total_wall_time_us,
    "byCategory": {k: cat(v) for k, v in stats.by_category.items()},
    "byRank": {str(r): {"byCategory": {k: cat(v) for k, v in cats.items()}} for r, cats in stats.by_rank.items()},
}, open(out, "w"))
print(f"spans={len(traces)} load_ms={load * 1000:.1f} stats_ms={best * 1000:.2f}")
PY

cat >"$tmp/compare.py" <<'PY'
import json, math, sys
go, py = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
bad = []
if go["totalWallTimeUs"] != py["totalWallTimeUs"]:
    bad.append(f"totalWallTimeUs {go['totalWallTimeUs']} != {py['totalWallTimeUs']}")

def same(a, b, where):
    if set(a) != set(b):
        bad.append(f"{where}: categories {sorted(a)} != {sorted(b)}")
        return
    for k in a:
        x, y = a[k], b[k]
        for f in ("totalUs", "count", "minUs", "maxUs"):
            if x[f] != y[f]:
                bad.append(f"{where}[{k}].{f}: {x[f]} != {y[f]}")
        if not math.isclose(x["avgUs"], y["avgUs"], rel_tol=1e-12):
            bad.append(f"{where}[{k}].avgUs: {x['avgUs']} != {y['avgUs']}")

same(go["byCategory"], py["byCategory"], "byCategory")
if set(go["byRank"]) != set(py["byRank"]):
    bad.append(f"ranks {sorted(go['byRank'])} != {sorted(py['byRank'])}")
else:
    for r in go["byRank"]:
        same(go["byRank"][r]["byCategory"], py["byRank"][r]["byCategory"], f"byRank[{r}]")
if bad:
    print("results: DIFFERENT\n  " + "\n  ".join(bad[:20]))
    sys.exit(1)
print(f"results: identical (totalWallTimeUs, byCategory: {len(go['byCategory'])} categories, "
      f"byRank: {len(go['byRank'])} ranks)")
PY

echo "building tracebench and writing a $SPANS-span trace..."
go build -o "$tmp/tracebench" ./engine/trace/internal/tracebench
"$tmp/tracebench" gen -spans "$SPANS" -o "$tmp/trace.json"
echo "running Orrery (Go)..."
gol=$("$tmp/tracebench" stats -json "$tmp/go.json" "$tmp/trace.json")
echo "running the seed (Python $(python3 -c 'import platform; print(platform.python_version())'))..."
pyl=$(python3 "$tmp/run_seed.py" "$tmp" "$tmp/trace.json" "$tmp/py.json")

field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
python3 - "$(field spans "$gol")" "$(field bytes "$gol")" "$(field load_ms "$gol")" "$(field stats_ms "$gol")" \
	"$(field spans "$pyl")" "$(field load_ms "$pyl")" "$(field stats_ms "$pyl")" "$(field first_load_ms "$gol")" <<'PY'
import sys
spans, size, gl, gs, pspans, pl, ps, gfirst = sys.argv[1:]
gl, gs, pl, ps, gfirst = map(float, (gl, gs, pl, ps, gfirst))
print(f"trace: {int(spans):,} spans ({int(pspans):,} as the seed loads it), {int(size) / 1e6:.1f} MB")
print(f"{'':16}{'load ms':>12}{'stats ms':>12}{'load+stats ms':>16}")
print(f"{'Orrery (Go)':16}{gl:12.1f}{gs:12.2f}{gl + gs:16.1f}")
print(f"{'seed (Python)':16}{pl:12.1f}{ps:12.2f}{pl + ps:16.1f}")
print(f"{'speed-up':16}{pl / gl:11.1f}x{ps / gs:11.1f}x{(pl + ps) / (gl + gs):15.1f}x")
# Go's figures are the best of 3 runs; the seed's load is one run. Go's
# first run, in a fresh process whose memory is still to be faulted in:
print(f"Orrery's first load in its process: {gfirst:.1f} ms ({pl / gfirst:.1f}x the seed's load)")
PY
python3 "$tmp/compare.py" "$tmp/go.json" "$tmp/py.json"
