"""What witty-mcp's tool definitions cost an assistant's context: the tokens of the tools/list result.

    python3 benchmarks/mcp_definitions.py [--json]

The server runs in memory (`mcp.Client(build_server(...))`, as the tests do) and the tools/list result
is counted with `converters.tokens.count_tokens` (cl100k_base, offline) as the client receives it:
the JSON the server writes on the wire (compact, no null fields). The total counts the whole result
(its `_meta` included); each tool's row counts that tool's definition, and its description, input
schema and output schema on their own. The figure is deterministic: the same code gives the same
count on any machine. Python's `json.dumps` with its default ", " and ": " separators gives about
a third more tokens for the same definitions; that figure is printed too, for comparison.

--json prints the tools/list result itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mcp  # noqa: E402

from witty_profiler.converters.tokens import count_tokens  # noqa: E402
from witty_profiler.mcp_server.server import build_server  # noqa: E402
from witty_profiler.app.graphs import GraphStore  # noqa: E402
from witty_profiler.mcp_server.tools import WittyTools  # noqa: E402


async def tools_list() -> dict[str, Any]:
    """The tools/list result of a fresh server, as JSON values, the way the server sends it."""
    with tempfile.TemporaryDirectory() as tmp:
        server = build_server(WittyTools(GraphStore(Path(tmp) / "state"), workdir=Path(tmp)))
        async with mcp.Client(server) as client:
            result = await client.list_tools()
    return json.loads(result.model_dump_json(by_alias=True, exclude_none=True))


def tokens(value: Any, spaced: bool = False) -> int:
    """The tokens of `value` as compact JSON (the wire), or with json.dumps' default separators."""
    return count_tokens(value if isinstance(value, str) else
                        json.dumps(value, separators=None if spaced else (",", ":")))


def definition_tokens(listed: dict[str, Any]) -> dict[str, Any]:
    """Total and per-tool token counts of a tools/list result."""
    rows = {t["name"]: {"tool": tokens(t), "description": tokens(t.get("description", "")),
                        "input": tokens(t.get("inputSchema", {})), "output": tokens(t.get("outputSchema", {}))}
            for t in listed["tools"]}
    return {"total": tokens(listed), "total_spaced": tokens(listed, spaced=True), "tools": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true", help="print the tools/list result itself")
    args = parser.parse_args()
    listed = asyncio.run(tools_list())
    if args.json:
        print(json.dumps(listed, indent=2))
        return
    counted = definition_tokens(listed)
    print(f"{'tool':<16} {'tokens':>6} {'description':>11} {'input':>6} {'output':>6}")
    for name, row in counted["tools"].items():
        print(f"{name:<16} {row['tool']:>6} {row['description']:>11} {row['input']:>6} {row['output']:>6}")
    print(f"{'tools/list':<16} {counted['total']:>6}   (json.dumps with default separators: "
          f"{counted['total_spaced']})")


if __name__ == "__main__":
    main()
