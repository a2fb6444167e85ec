#!/usr/bin/env bash
# Verify an optimisation: compare a graph from before the change with one from after it.
#
#   bash scripts/verify_fix.sh BEFORE.json AFTER.json [--out DIR] [--force]
#   bash scripts/verify_fix.sh BEFORE.json --collect S [--pid PID ...] [--out DIR] [--force]
#
# With --collect, the AFTER graph is collected live for S seconds first (same load, please).
# Writes DIR/compare.md and DIR/compare.json: findings resolved, new and persisting, with deltas.
# Existing files in DIR are kept unless --force is given.
set -euo pipefail

before="" after="" collect="" out="." pids=() force=()
while [ $# -gt 0 ]; do
    case "$1" in
        --collect) collect="$2"; shift 2 ;;
        --pid) pids+=(--pid "$2"); shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --force) force=(--force); shift ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "verify_fix.sh: unknown option $1" >&2; exit 2 ;;
        *) if [ -z "$before" ]; then before="$1"; else after="$1"; fi; shift ;;
    esac
done

[ -n "$before" ] || { echo "verify_fix.sh: give the BEFORE graph file" >&2; exit 2; }
command -v witty-profiler >/dev/null || { echo "verify_fix.sh: witty-profiler is not installed (pip install witty-profiler)" >&2; exit 2; }
mkdir -p "$out"
if [ -z "$after" ]; then
    [ -n "$collect" ] || { echo "verify_fix.sh: give the AFTER graph file or --collect SECONDS" >&2; exit 2; }
    after="$out/after.json"
    witty-profiler collect --duration "$collect" "${pids[@]}" -o "$after" "${force[@]}"
fi
witty-profiler compare "$before" "$after" --format md -o "$out/compare.md" "${force[@]}"
witty-profiler compare "$before" "$after" --format json -o "$out/compare.json" "${force[@]}"
cat "$out/compare.md"
