#!/usr/bin/env bash
# One-shot diagnosis without MCP: collect a live window (or take a GRAPH file), then write
# report.md and report.json next to each other.
#
#   bash scripts/diagnose.sh [GRAPH] [--duration S] [--pid PID ...] [--out DIR] [--force]
#
# Without GRAPH it collects DURATION seconds (default 10) on this host first and keeps the
# graph as DIR/witty-graph.json, so the same window can be compared after a fix.
# Existing files in DIR are kept unless --force is given.
set -euo pipefail

graph="" duration=10 out="." pids=() force=()
while [ $# -gt 0 ]; do
    case "$1" in
        --duration) duration="$2"; shift 2 ;;
        --pid) pids+=(--pid "$2"); shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --force) force=(--force); shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "diagnose.sh: unknown option $1" >&2; exit 2 ;;
        *) graph="$1"; shift ;;
    esac
done

command -v witty-profiler >/dev/null || { echo "diagnose.sh: witty-profiler is not installed (pip install witty-profiler)" >&2; exit 2; }
mkdir -p "$out"
if [ -z "$graph" ]; then
    graph="$out/witty-graph.json"
    witty-profiler collect --duration "$duration" "${pids[@]}" -o "$graph" "${force[@]}"
fi
witty-profiler diagnose "$graph" "${pids[@]}" --format md -o "$out/report.md" "${force[@]}"
witty-profiler diagnose "$graph" "${pids[@]}" --format json -o "$out/report.json" "${force[@]}"
echo "graph:  $graph"
echo "report: $out/report.md"
echo "json:   $out/report.json"
