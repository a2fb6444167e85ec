"""Byte-for-byte check of what the project renders: every view at every budget and every report of
every graph the tests use, digested, so that a change that should not alter output can be shown not to.

    WITTY_CORPUS=DIR python3 -m pytest -q -m "not live and not slow" -p benchmarks.corpus
        saves every graph the tests diagnose into DIR (one file per distinct graph)
    python3 benchmarks/corpus.py render DIR OUT.json [--shared]
        renders each graph of DIR (and, with --shared, the real samples of ../shared/fixtures): the nine
        views at each budget of BUDGETS, with CLI and MCP hints, and the md, json and html reports;
        writes the sha256 of each output (an error's one line in its place)
    python3 benchmarks/corpus.py diff BEFORE.json AFTER.json
        lists every output whose bytes differ, grouped by what differs

Run `render` before a change and after it, on the same DIR, then `diff`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BUDGETS = (None, 200, 230, 259, 300, 500, 1000, 3000, 8000)
SHARED = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


# -- capture (a pytest plugin: -p benchmarks.corpus) -----------------------------------------------
def pytest_configure(config) -> None:  # noqa: ANN001 - pytest's hook
    folder = os.environ.get("WITTY_CORPUS")
    if not folder:
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    from witty_profiler.diagnosis import matcher
    from witty_profiler.topology import dumps_graph
    plain = matcher.diagnose

    def diagnose(graph, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003 - the matcher's own signature
        try:
            text = dumps_graph(graph)
        except Exception:  # noqa: BLE001 - a graph the writer refuses is the test's business
            text = None
        if text is not None:
            path = Path(folder) / f"{hashlib.sha256(text.encode()).hexdigest()[:16]}.json"
            if not path.exists():
                path.write_text(text, encoding="utf-8")
        return plain(graph, *args, **kwargs)
    matcher.diagnose = diagnose


# -- render --------------------------------------------------------------------------------------
def _digest(make) -> str:  # noqa: ANN001 - a callable returning text
    from witty_profiler.topology.errors import InputError
    try:
        text = make()
    except InputError as exc:
        return f"error: {exc}"
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def render_graph(path: Path) -> dict[str, str]:
    import witty_profiler as wp
    from witty_profiler.converters import McpHints
    from witty_profiler.converters.layers import LAYER_VIEWS
    from witty_profiler.topology.errors import InputError
    try:
        graph = wp.load(path)
    except InputError as exc:  # a test's deliberately broken graph: the reader's answer is the output
        return {"load": f"error: {exc}"}
    diagnosis = wp.diagnose(graph)
    out: dict[str, str] = {}
    for layer in LAYER_VIEWS:
        for budget in BUDGETS:
            out[f"view {layer} {budget}"] = _digest(lambda: wp.convert(graph, layer, budget, ref="GRAPH",
                                                                        diagnosis=diagnosis).text)
        out[f"mcp-view {layer} 3000"] = _digest(lambda: wp.convert(graph, layer, 3000, hints=McpHints("g"),
                                                                   diagnosis=diagnosis).text)
    for fmt in ("md", "json", "html"):
        out[f"report {fmt}"] = _digest(lambda: wp.report(diagnosis, graph, fmt))
    return out


def render(folder: Path, shared: bool) -> dict[str, dict[str, str]]:
    paths = sorted(folder.glob("*.json"))
    if shared and SHARED.is_dir():
        paths.append(SHARED / "witty-profiler-vllm-8npu.json")
    result = {}
    for n, path in enumerate(paths, 1):
        result[path.name] = render_graph(path)
        if n % 50 == 0:
            print(f"{n}/{len(paths)}", file=sys.stderr)
    return result


def diff(before: dict[str, dict[str, str]], after: dict[str, dict[str, str]]) -> int:
    changed = Counter()
    examples: dict[str, list[str]] = {}
    for graph in sorted(set(before) | set(after)):
        a, b = before.get(graph, {}), after.get(graph, {})
        for item in sorted(set(a) | set(b)):
            if a.get(item) != b.get(item):
                kind = " ".join(item.split()[:2])
                changed[kind] += 1
                examples.setdefault(kind, []).append(f"{graph} {item}: {a.get(item)} -> {b.get(item)}")
    total = sum(len(v) for v in before.values())
    print(f"{len(before)} graphs, {total} outputs before; {len(after)} graphs after; {sum(changed.values())} differ")
    for kind, count in changed.most_common():
        print(f"  {kind}: {count}")
        for line in examples[kind][:3]:
            print(f"    {line[:300]}")
    return 1 if changed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    r = sub.add_parser("render")
    r.add_argument("folder", type=Path)
    r.add_argument("output", type=Path)
    r.add_argument("--shared", action="store_true", help="add the real sample of ../shared/fixtures")
    d = sub.add_parser("diff")
    d.add_argument("before", type=Path)
    d.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.action == "render":
        result = render(args.folder, args.shared)
        args.output.write_text(json.dumps(result, indent=1, sort_keys=True), encoding="utf-8")
        print(f"{len(result)} graphs, {sum(len(v) for v in result.values())} outputs -> {args.output}")
        return 0
    return diff(json.loads(args.before.read_text()), json.loads(args.after.read_text()))


if __name__ == "__main__":
    sys.exit(main())
