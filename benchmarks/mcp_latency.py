"""witty-mcp tool latency on a 100k-entity graph, next to the direct library call doing the same work.

    python3 benchmarks/mcp_latency.py [--entities 100000] [--repeat 5]

The graph is benchmarks/synthetic.py's training host. Each tool is called through `mcp.Client`
in memory (the server's own cost: argument validation, the token budget, JSON of the answer) and
over real stdio to the installed `witty-mcp` (what an assistant sees, pipes and framing included);
the direct column runs the library call the tool wraps. Figures are medians of --repeat calls, in
milliseconds: wall clock, and in brackets the CPU time of this process (all threads), which a busy
shared host disturbs much less. The server keeps the rows of its last queries for their next pages,
so the first page of a query is one call, and "next page" the median of the following ones. match_patterns is timed on its first call (the diagnosis is then cached
per graph and thresholds: "match_patterns (cached)" is the next call). load_graph is one call each (a
native file is parsed, validated and saved under the state directory as it is).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import mcp  # noqa: E402
from mcp import StdioServerParameters  # noqa: E402

import witty_profiler  # noqa: E402
from witty_profiler.mcp_server.budget import count_tokens  # noqa: E402
from witty_profiler.mcp_server.server import build_server  # noqa: E402
from witty_profiler.app.graphs import GraphStore  # noqa: E402
from witty_profiler.mcp_server.tools import WittyTools  # noqa: E402
from witty_profiler.topology import dump_graph, load_graph  # noqa: E402

from synthetic import synthetic_graph  # noqa: E402


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


Timing = tuple[float, float]  # median wall clock, median CPU time of this process (all its threads)


def timed(fn: Callable[[], Any], repeat: int) -> Timing:
    walls, cpus = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return statistics.median(walls), statistics.median(cpus)


async def timed_async(fn: Callable[[], Awaitable[Any]], repeat: int) -> tuple[Timing, Any]:
    walls, cpus, last = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        last = await fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return (statistics.median(walls), statistics.median(cpus)), last


def direct_calls(path: Path, repeat: int) -> dict[str, Timing]:
    graph = load_graph(path)
    out = {"load_graph": timed(lambda: load_graph(path), 1)}
    if hasattr(witty_profiler, "convert"):
        out["graph_summary"] = timed(lambda: (graph.counts_by_type(), witty_profiler.convert(graph, "summary")),
                                     repeat)
        out["convert_layer compute"] = timed(lambda: witty_profiler.convert(graph, "compute", max_tokens=8000),
                                             repeat)
    out["query_graph page"] = timed(lambda: graph.find("thread", ["cpu_util_pct>5"])[:20], repeat)
    out["query_graph top"] = timed(lambda: graph.top("cpu_util_pct", 20, "thread"), repeat)
    if hasattr(witty_profiler, "diagnose"):
        witty_profiler.diagnose(synthetic_graph(2000))  # import the pattern modules before timing
        fresh = load_graph(path)  # the first diagnosis of a graph also builds its lazy indexes, as in the server
        out["match_patterns"] = timed(lambda: witty_profiler.diagnose(fresh), 1)
    return out


async def tool_calls(client: mcp.Client, path: Path, repeat: int) -> tuple[dict[str, Timing], dict[str, int]]:
    times: dict[str, Timing] = {}
    tokens: dict[str, int] = {}

    async def tool(label: str, name: str, n: int = repeat, **args: Any) -> dict[str, Any]:
        elapsed, result = await timed_async(lambda: client.call_tool(name, args), n)
        assert not result.is_error, f"{name}: {result.content[0].text}"
        times[label] = elapsed
        tokens[label] = count_tokens(result.content[0].text)
        return result.structured_content

    gid = (await tool("load_graph", "load_graph", 1, path=str(path)))["graph_id"]
    await tool("graph_summary", "graph_summary", graph_id=gid)
    # a query's rows are kept for its next pages, so its first page is timed once, on its own
    page = await tool("query_graph page", "query_graph", 1, graph_id=gid, type="thread", where=["cpu_util_pct>5"])
    await tool("query_graph next page", "query_graph", graph_id=gid, type="thread", where=["cpu_util_pct>5"],
               cursor=page["next_cursor"])
    await tool("query_graph top", "query_graph", 1, graph_id=gid, type="thread", top_by_metric="cpu_util_pct")
    if hasattr(witty_profiler, "convert"):
        await tool("convert_layer compute", "convert_layer", graph_id=gid, layer="compute")
    if hasattr(witty_profiler, "diagnose"):
        await tool("match_patterns", "match_patterns", 1, graph_id=gid)
        await tool("match_patterns (cached)", "match_patterns", graph_id=gid)
    return times, tokens


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic-100k.json"
        graph = synthetic_graph(args.entities)
        dump_graph(graph, path)
        print(f"graph: {graph.entity_count()} entities, {graph.edge_count()} edges, "
              f"{path.stat().st_size / 2**20:.1f} MiB; python {platform.python_version()}, {platform.machine()}, "
              f"{os.cpu_count()} CPUs", flush=True)
        del graph
        direct = direct_calls(path, args.repeat)
        async with mcp.Client(build_server(WittyTools(GraphStore(Path(tmp) / "mem"), workdir=Path(tmp)))) as c:
            memory, tokens = await tool_calls(c, path, args.repeat)
        stdio: dict[str, Timing] = {}
        exe = shutil.which("witty-mcp")
        if exe:
            params = StdioServerParameters(command=exe, env={**os.environ, "WITTY_STATE_DIR": str(Path(tmp) / "io")})
            async with mcp.Client(params, read_timeout_seconds=600) as c:
                stdio, _ = await tool_calls(c, path, args.repeat)
    print("\nwall clock ms (CPU ms of this process); stdio: wall clock only, the server is another process")
    print("\n| call | direct library | MCP in memory | MCP over stdio | answer tokens |")
    print("|---|---|---|---|---|")
    for label in memory:
        d = direct.get(label)
        print(f"| {label} | {cell(d)} | {cell(memory[label])} | {ms(stdio[label][0]) if label in stdio else '-'} "
              f"| {tokens[label]} |")


def cell(t: Timing | None) -> str:
    return "-" if t is None else f"{ms(t[0])} ({ms(t[1])})"


if __name__ == "__main__":
    asyncio.run(main())
