#!/usr/bin/env bash
# Drive witty-mcp with a client this project did not write: the MCP Inspector CLI.
#
#   benchmarks/mcp_inspector.sh [GRAPH]     (default: ../shared/fixtures/witty-profiler-vllm-8npu.json)
#
# Lists the tools, loads GRAPH, then summarises, queries, views a layer and matches patterns on it,
# and checks that a bad graph id comes back as an isError result. Each answer is saved under
# $OUT (default: a temporary directory) as <step>.json; STEPS="load_graph match_patterns" runs only
# those steps (tools_list and load_graph always run). Needs node/npx; the first run downloads
# @modelcontextprotocol/inspector from the npm registry. Graphs go to a throwaway state directory.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
graph="${1:-$here/../shared/fixtures/witty-profiler-vllm-8npu.json}"
out="${OUT:-$(mktemp -d)}"
export WITTY_STATE_DIR="${WITTY_STATE_DIR:-$(mktemp -d)}"
# Without INSPECTOR_VERSION npm picks the newest release whose engines accept the installed node.
inspector=(npx -y "@modelcontextprotocol/inspector${INSPECTOR_VERSION:+@$INSPECTOR_VERSION}" --cli witty-mcp)

[ -f "$graph" ] || { echo "mcp_inspector.sh: $graph: no such file" >&2; exit 2; }
command -v witty-mcp >/dev/null || { echo "mcp_inspector.sh: witty-mcp not installed (pip install -e .)" >&2; exit 2; }

step() {  # step NAME ARGS... : one inspector call; its answer in $out/NAME.json, one line printed
    local name="$1"; shift
    local t0 rc=0
    case " tools_list load_graph ${STEPS:-$name} " in *" $name "*) ;; *) return 0 ;; esac
    t0=$(date +%s%N)
    "${inspector[@]}" "$@" > "$out/$name.json" 2> "$out/$name.err" || rc=$?
    printf '%-15s rc=%d %6.2f s  %s\n' "$name" "$rc" "$(( ($(date +%s%N) - t0) / 1000000 ))e-3" \
        "$(tr -d '\n' < "$out/$name.json" | tr -s ' ' | head -c 140)"
    if [ "$rc" -ne 0 ] && ! grep -q '"isError": true\|tool_is_error' "$out/$name.json"; then
        grep -v '^npm warn' "$out/$name.err" >&2 || true
        echo "mcp_inspector.sh: $name failed (exit $rc)" >&2
        exit 1
    fi
}
field() {  # field FILE EXPR : a value from a saved answer (python, no jq needed)
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

step tools_list --method tools/list
step load_graph --method tools/call --tool-name load_graph --tool-arg "path=$graph"
gid=$(field "$out/load_graph.json" 'd["structuredContent"]["graph_id"]')
step graph_summary --method tools/call --tool-name graph_summary --tool-arg "graph_id=$gid"
step query_graph --method tools/call --tool-name query_graph --tool-arg "graph_id=$gid" --tool-arg type=process \
    --tool-arg limit=5
step convert_layer --method tools/call --tool-name convert_layer --tool-arg "graph_id=$gid" \
    --tool-arg layer=interconnect
step match_patterns --method tools/call --tool-name match_patterns --tool-arg "graph_id=$gid"
step unknown_graph --method tools/call --tool-name graph_summary --tool-arg graph_id=no-such-graph
step list_graphs --method tools/call --tool-name list_graphs

echo "tools: $(field "$out/tools_list.json" 'len(d["tools"])'); graph: $gid"
if [ -f "$out/match_patterns.json" ]; then
    echo "findings: $(field "$out/match_patterns.json" \
        '[f["pattern"] for f in d.get("structuredContent", {}).get("findings", [])]')"
fi
echo "answers in $out"
