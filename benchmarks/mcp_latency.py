"""witty-mcp tool latency on a 100k-entity graph, against the direct library call doing the same work.

    python3 benchmarks/mcp_latency.py [--entities 100000] [--rounds 5] [--repeat 3]

The graph is benchmarks/synthetic.py's training host. Each tool is called through `mcp.Client`
in memory (the server's own cost: argument validation, the token budget, JSON of the answer) and
over real stdio to the installed `witty-mcp` (what an assistant sees, pipes and framing included);
the direct column, the baseline, runs the library call the tool wraps. The three are measured in the
same rounds, their order reversed every other round, each round on a freshly loaded graph and a new
server with its own state directory; a figure is the median over the rounds of the per-round ratio to
the direct call (wall clock: the stdio server is another process), with its range, beside the direct
call's own median and range. Within a round each call is made once, in the server's order on both sides
(the direct load_graph also renders the summary view, which the tool answers with), except a query's next
page and a second match_patterns, made --repeat times (median kept): the server keeps a query's rows for
its next pages and a graph's diagnosis for the next match. These two have no library call of their own:
they are set against what they spare, the first page's query and the diagnosis.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
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
from timing import Ratio, load, machine  # noqa: E402


async def timed(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall clock of `repeat` calls (awaited where fn returns an awaitable), and the last result."""
    walls, last = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        last = fn()
        if asyncio.iscoroutine(last):
            last = await last
        walls.append(time.perf_counter() - t)
    return statistics.median(walls), last


async def direct_calls(path: Path, repeat: int) -> dict[str, float]:
    """The library calls each tool wraps, in the server's order, each once on a freshly loaded graph."""
    out: dict[str, float] = {}
    # load_graph answers with the graph's summary view, which builds the views' per-graph context
    out["load_graph"], graph = await timed(lambda: (g := load_graph(path), witty_profiler.convert(g, "summary"))[0], 1)
    out["graph_summary"], _ = await timed(lambda: (graph.counts_by_type(), witty_profiler.convert(graph, "summary")), 1)
    out["query_graph page"], _ = await timed(lambda: graph.find("thread", ["cpu_util_pct>5"])[:20], 1)
    out["query_graph top"], _ = await timed(lambda: graph.top("cpu_util_pct", 20, "thread"), 1)
    out["convert_layer compute"], _ = await timed(lambda: witty_profiler.convert(graph, "compute", max_tokens=8000), 1)
    out["match_patterns"], _ = await timed(lambda: witty_profiler.diagnose(graph), 1)
    # what a kept page and a cached diagnosis spare
    out["query_graph next page"], out["match_patterns (cached)"] = out["query_graph page"], out["match_patterns"]
    return out


async def tool_calls(client: mcp.Client, path: Path, repeat: int, tokens: dict[str, int]) -> dict[str, float]:
    times: dict[str, float] = {}

    async def tool(label: str, name: str, n: int = repeat, **args: Any) -> dict[str, Any]:
        elapsed, result = await timed(lambda: client.call_tool(name, args), n)
        assert not result.is_error, f"{name}: {result.content[0].text}"
        times[label] = elapsed
        tokens[label] = count_tokens(result.content[0].text)
        return result.structured_content

    gid = (await tool("load_graph", "load_graph", 1, path=str(path)))["graph_id"]
    await tool("graph_summary", "graph_summary", 1, graph_id=gid)
    # a query's rows are kept for its next pages, so its first page is timed once, on its own
    page = await tool("query_graph page", "query_graph", 1, graph_id=gid, type="thread", where=["cpu_util_pct>5"])
    await tool("query_graph next page", "query_graph", graph_id=gid, type="thread", where=["cpu_util_pct>5"],
               cursor=page["next_cursor"])
    await tool("query_graph top", "query_graph", 1, graph_id=gid, type="thread", top_by_metric="cpu_util_pct")
    await tool("convert_layer compute", "convert_layer", 1, graph_id=gid, layer="compute", max_tokens=8000)
    await tool("match_patterns", "match_patterns", 1, graph_id=gid)
    await tool("match_patterns (cached)", "match_patterns", graph_id=gid)
    return times


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of direct, in-memory and stdio")
    parser.add_argument("--repeat", type=int, default=3, help="calls per round of a next page and of a cached match")
    args = parser.parse_args()
    exe = shutil.which("witty-mcp")
    print(machine(), flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic-100k.json"
        graph = synthetic_graph(args.entities)
        dump_graph(graph, path)
        print(f"graph: {graph.entity_count()} entities, {graph.edge_count()} edges, "
              f"{path.stat().st_size / 2**20:.1f} MiB; {args.rounds} rounds, {args.repeat} calls per round of a "
              f"next page and a cached match; stdio server: {exe or 'witty-mcp not installed'}", flush=True)
        del graph
        witty_profiler.diagnose(synthetic_graph(2000))  # import the pattern modules before timing
        tokens: dict[str, int] = {}
        times: dict[str, list[dict[str, float]]] = {"direct": [], "memory": [], "stdio": []}

        async def in_memory(r: int) -> dict[str, float]:
            tools = WittyTools(GraphStore(Path(tmp) / f"mem{r}"), workdir=Path(tmp))
            async with mcp.Client(build_server(tools)) as c:
                return await tool_calls(c, path, args.repeat, tokens)

        async def over_stdio(r: int) -> dict[str, float]:
            params = StdioServerParameters(command=exe, env={**os.environ, "WITTY_STATE_DIR": str(Path(tmp) / f"io{r}")})
            async with mcp.Client(params, read_timeout_seconds=600) as c:
                return await tool_calls(c, path, args.repeat, {})

        forms = {"direct": lambda r: direct_calls(path, args.repeat), "memory": in_memory}
        if exe:
            forms["stdio"] = over_stdio
        for r in range(args.rounds):
            for form in list(forms) if r % 2 == 0 else list(reversed(forms)):
                times[form].append(await forms[form](r))
    print("\nwall clock; ratio to the direct library call of the same round, median (min-max) over the rounds")
    print("\n| call | direct library (baseline) | MCP in memory / direct | MCP over stdio / direct | answer tokens |")
    print("|---|---|---|---|---|")
    base_of = {label: [t[label] for t in times["direct"]] for label in times["direct"][0]}
    for label in times["memory"][0]:
        base = base_of[label]
        memory = Ratio([t[label] for t in times["memory"]], base)
        stdio = Ratio([t[label] for t in times["stdio"]], base).text(rounds=False) if times["stdio"] else "-"
        direct = "(the first page's query)" if label.endswith("next page") else (
            "(the diagnosis)" if label.endswith("(cached)") else memory.base_text())
        print(f"| {label} | {direct} | {memory.text(rounds=False)} | {stdio} | {tokens[label]} |")
    print(f"load average at the end: {load()}")


if __name__ == "__main__":
    asyncio.run(main())
