"""How a view tells its reader to get what it left out: shell commands or MCP tool calls.

A view says, on every fold line, in its legend and in the summary, how to list the rows it did
not show. Read from a shell that is a `witty-profiler` command line on the graph file; read
through the MCP server, where the reader has tools and no shell, it is a tool call on the graph
id. The views describe each request once, as data (`query(type=..., top=..., limit=...)`), and
the style in force writes it out.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence


class Slot(str):
    """A value the reader fills in (an id, a layer name): written bare, never quoted."""


MCP_PAGE = 200  # query_graph's largest `limit` (mcp_server.schemas); longer lists page on with next_cursor


class _Frozen:
    """What a frozen dataclass would give the hints (== and a hash by type and fields, repr, no assignment),
    written out: `convert` imports this module, and dataclasses costs it 5 ms. Not a NamedTuple: a CliHints
    and an McpHints on the same name are different keys (converters.context keeps a context per hints)."""

    __slots__ = ()
    _FIELDS: tuple[str, ...] = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name in self._FIELDS)

    def __hash__(self) -> int:
        return hash(tuple(getattr(self, name) for name in self._FIELDS))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._FIELDS)})"

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:  # copy and pickle make it with __init__
        return type(self), tuple(getattr(self, name) for name in self._FIELDS)


class CliHints(_Frozen):
    """`witty-profiler ...` command lines on the graph file `ref` (the default)."""

    __slots__ = ("ref",)
    _FIELDS = ("ref",)

    def __init__(self, ref: str = "GRAPH") -> None:
        object.__setattr__(self, "ref", ref)

    @property
    def graph(self) -> str:
        """The file as a shell word: a path with spaces still pastes as one argument."""
        return shlex.quote(self.ref)

    def query(self, *, type: str | None = None, where: str | None = None, top: str | None = None,
              neighbours: str | None = None, around: str | None = None, depth: int | None = None,
              edge_type: str | None = None, limit: int | None = None) -> str:
        """The request that lists rows a view folded away: entities of a type, matching a condition,
        ranked by a metric, the neighbours of one entity along one edge type, or the edges of one type
        within `depth` hops `around` an entity."""
        args = ["witty-profiler query", self.graph]
        for flag, value in (("--type", type), ("--where", where), ("--top", top), ("--neighbours", neighbours),
                            ("--around", around), ("--edge-type", edge_type)):
            if value is not None:
                args += [flag, value if isinstance(value, Slot) else shlex.quote(value)]
        if depth is not None and depth != 1:
            args += ["--depth", str(depth)]
        if limit is not None:
            args += ["-n", str(limit)]
        return " ".join(args)

    def around(self) -> str:
        """What an id of the view is good for (the legend): its neighbourhood."""
        return f"witty-profiler query {self.graph} --around ID"

    def convert(self, layer: str, choices: Sequence[str] = ()) -> str:
        """Another view of the same graph (`layer` may be a Slot, with the names it stands for)."""
        shown = f"{layer} ({', '.join(choices)})" if choices else layer
        return f"witty-profiler convert {self.graph} --layer {shown} --max-tokens N"

    def collectors(self) -> str:
        """Where every collector's status and full reason are listed."""
        return f"witty-profiler info {self.graph}"

    def diagnose(self, layer: str) -> str:
        """The diagnosis of one layer, with every pattern's reason."""
        return f"witty-profiler diagnose {self.graph} --layer {layer}"


class McpHints(_Frozen):
    """Calls of the witty-mcp tools (query_graph, convert_layer, graph_summary) on `graph_id`."""

    __slots__ = ("graph_id",)
    _FIELDS = ("graph_id",)

    def __init__(self, graph_id: str) -> None:
        object.__setattr__(self, "graph_id", graph_id)

    def _call(self, tool: str, **args: object) -> str:
        given = [f"graph_id={_value(self.graph_id)}"]
        given += [f"{k}={_value(v)}" for k, v in args.items() if v is not None]
        return f"{tool}({', '.join(given)})"

    def query(self, *, type: str | None = None, where: str | None = None, top: str | None = None,
              neighbours: str | None = None, around: str | None = None, depth: int | None = None,
              edge_type: str | None = None, limit: int | None = None) -> str:
        # query_graph's `around` with the default depth 1 lists the neighbours (edge_type narrows them);
        # a page is at most MCP_PAGE rows, the rest follows with next_cursor, so a listing asks for full pages
        return self._call("query_graph", type=type, where=[where] if where is not None else None,
                          around=around if around is not None else neighbours,
                          depth=depth if depth not in (None, 1) else None, edge_type=edge_type,
                          top_by_metric=top, limit=MCP_PAGE if limit is not None else None)

    def around(self) -> str:
        return self._call("query_graph", around=Slot("ID"))

    def convert(self, layer: str, choices: Sequence[str] = ()) -> str:
        call = self._call("convert_layer", layer=layer)
        return f"{call} with {layer} one of {', '.join(choices)}" if choices else call

    def collectors(self) -> str:
        return self._call("graph_summary")

    def diagnose(self, layer: str) -> str:
        return self._call("match_patterns", layer=layer)


Hints = CliHints | McpHints


def _value(value: object) -> str:
    """A Python/JSON-looking argument: strings double-quoted, slots bare, lists of them bracketed."""
    if isinstance(value, Slot):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)
