#!/usr/bin/env bash
# Drive witty-mcp with a client this project did not write: the MCP Inspector CLI.
#
#   benchmarks/mcp_inspector.sh [GRAPH]     (default: ../shared/fixtures/witty-profiler-vllm-8npu.json)
#
# A whole session, one inspector call per step: list the tools, collect a 2 s live window, then
# summarise it, rank its processes by CPU, view its compute layer, match patterns on it and write
# the report (report.md in the server's report directory, reports/ under $WITTY_STATE_DIR); ask for a graph that does not exist (an isError answer); load
# GRAPH and match its interconnect layer (skipped, saying so, when the default sample is absent);
# list the graphs. Each answer is saved under $OUT (default: a temporary directory) as <step>.json
# and one line per step is printed with its wall time. Needs node/npx; the first run downloads
# @modelcontextprotocol/inspector from the npm registry. Graphs go to a throwaway state directory,
# which is how the steps share them: the inspector starts a new server for every call.
#
# ROUNDS=N runs the session N times; at the end each step's wall time is given as the median of its
# per-round ratios to the same round's tools/list (the baseline: starting node, the inspector and a new
# server, and listing the tools, which every step pays), with their range, beside tools/list's own time.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
default_graph="$here/../shared/fixtures/witty-profiler-vllm-8npu.json"
graph="${1:-$default_graph}"
out="${OUT:-$(mktemp -d)}"
mkdir -p "$out" && out="$(cd "$out" && pwd)"  # absolute: the steps run inside it
export WITTY_STATE_DIR="${WITTY_STATE_DIR:-$(mktemp -d)}"
# Pinned: the releases after 0.15.0 need node >= 22.7.5, and 2.x changed the CLI's exit codes and
# argument handling; the answers below are what 0.15.0 prints. INSPECTOR_VERSION picks another.
version="${INSPECTOR_VERSION:-0.15.0}"
inspector=(npx -y "@modelcontextprotocol/inspector@$version" --cli witty-mcp)

if [ ! -f "$graph" ]; then
    if [ $# -gt 0 ]; then echo "mcp_inspector.sh: $graph: no such file" >&2; exit 2; fi
    echo "mcp_inspector.sh: no sample graph at $graph: the load_graph steps are skipped" >&2
    graph=""
else
    graph="$(cd "$(dirname "$graph")" && pwd)/$(basename "$graph")"  # the server runs in $out
fi
command -v witty-mcp >/dev/null || { echo "mcp_inspector.sh: witty-mcp not installed (pip install -e .)" >&2; exit 2; }
command -v npx >/dev/null || { echo "mcp_inspector.sh: npx not found: install Node.js" >&2; exit 2; }

# one line per answer: the tool count, or isError and the start of the text the model reads
brief='import json,sys; d=json.load(open(sys.argv[1]))
if "tools" in d: print(len(d["tools"]), "tools:", ", ".join(t["name"] for t in d["tools"]))
else: print("isError" if d.get("isError") else "ok", " ".join(d["content"][0]["text"].split())[:100])'
step() {  # step NAME ARGS... : one inspector call; its answer in $out/NAME.json, one line printed
    local name="$1"; shift
    local t0 rc=0
    t0=$(date +%s%N)
    # in $out, where relative graph paths are read from
    (cd "$out" && "${inspector[@]}" "$@") > "$out/$name.json" 2> "$out/$name.err" || rc=$?
    local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    printf '%s\t%s\t%s\n' "$round" "$name" "$ms" >> "$out/times.tsv"
    printf '%-19s rc=%d %6.2f s  %s\n' "$name" "$rc" "${ms}e-3" \
        "$(python3 -c "$brief" "$out/$name.json" 2>/dev/null || head -c 100 "$out/$name.json")"
    if [ "$rc" -ne 0 ] && ! grep -q '"isError": true' "$out/$name.json"; then
        grep -v '^npm warn' "$out/$name.err" >&2 || true
        echo "mcp_inspector.sh: $name failed (exit $rc)" >&2
        exit 1
    fi
}
field() {  # field STEP EXPR : a value from a saved answer, d being its JSON (python, no jq needed)
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$out/$1.json"
}
call() {  # call STEP TOOL KEY=VALUE... : tools/call with those arguments
    local name="$1" tool="$2"; shift 2
    local args=()
    for a in "$@"; do args+=(--tool-arg "$a"); done
    step "$name" --method tools/call --tool-name "$tool" "${args[@]}"
}

rounds="${ROUNDS:-1}"
: > "$out/times.tsv"
python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); from timing import machine; print(machine())' "$here/benchmarks"
echo "MCP Inspector $version, witty-mcp $(witty-mcp --version | cut -d' ' -f2), answers in $out"
for round in $(seq 1 "$rounds"); do
step tools_list --method tools/list
call collect collect duration_s=2 interval_s=0.5
live=$(field collect 'd["structuredContent"]["graph_id"]')
call graph_summary graph_summary "graph_id=$live"
call query_graph query_graph "graph_id=$live" type=process top_by_metric=cpu_util_pct limit=5
call convert_layer convert_layer "graph_id=$live" layer=compute
call match_patterns match_patterns "graph_id=$live"
call generate_report generate_report "graph_id=$live" format=md output_path=report.md overwrite=true
call unknown_graph graph_summary graph_id=no-such-graph
if [ -n "$graph" ]; then
    call load_graph load_graph "path=$graph"
    sample=$(field load_graph 'd["structuredContent"]["graph_id"]')
    call match_interconnect match_patterns "graph_id=$sample" layer=interconnect
    call view_interconnect convert_layer "graph_id=$sample" layer=interconnect max_tokens=2000
fi
call list_graphs list_graphs
done

echo "tools: $(field tools_list 'len(d["tools"])'); live graph: $live"
echo "live findings: $(field match_patterns 'd["structuredContent"]["findings"]')"
echo "report: $WITTY_STATE_DIR/reports/report.md"
if [ -n "$graph" ]; then
    echo "sample findings: $(field match_interconnect 'd["structuredContent"]["findings"]')"
fi
python3 - "$here/benchmarks" "$out/times.tsv" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
from timing import Ratio, load
rows = [line.split("\t") for line in open(sys.argv[2]).read().splitlines()]
by = {}
for r, name, ms in rows:
    by.setdefault(name, {})[r] = int(ms) / 1000
base = by["tools_list"]
print(f"wall / the same round's tools/list, median (min-max) over {len(base)} round(s); load average {load()}")
for name, times in by.items():
    rounds = sorted(times)
    ratio = Ratio([times[r] for r in rounds], [base[r] for r in rounds])
    what = f"{ratio.base_text(1, 's', 2)} (baseline)" if name == "tools_list" else ratio.text(rounds=False)
    print(f"  {name}: {what}")
PY
