"""`witty-profiler query GRAPH ...`: the graph queries from the shell."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from witty_profiler.output import print_json, table
from witty_profiler.topology.errors import InputError

if TYPE_CHECKING:
    from witty_profiler.topology import Entity, Graph


def _entity_row(e: Entity) -> dict[str, Any]:
    return e.to_dict()


def run_query(graph: Graph, args: argparse.Namespace) -> dict[str, Any]:
    """Dispatch one query; returns a JSON-able answer {"kind": ..., ...}."""
    limit = args.limit
    if args.path:
        paths = graph.paths(args.path[0], args.path[1], max_hops=args.depth or 4)
        return {"kind": "paths", "paths": paths[:limit]}
    if args.around:
        sub = graph.subgraph(args.around, depth=args.depth or 1, edge_type=args.edge_type)
        ents = sub.entities(args.type) if args.type else sub.entities()
        return {"kind": "subgraph", "entities": [_entity_row(e) for e in ents[:limit]],
                "edges": [e.to_dict() for e in sub.edges()[:limit]],
                "total_entities": len(ents), "total_edges": sub.edge_count()}
    if args.neighbours:
        pairs = graph.neighbours(args.neighbours, args.direction, args.edge_type)
        return {"kind": "neighbours", "total": len(pairs), "neighbours": [
            {"edge": edge.to_dict(), "entity": other.to_dict() if other else None}
            for edge, other in pairs[:limit]]}
    if args.top:
        found = graph.top(args.top, n=limit, kind=args.type, ascending=args.ascending, where=args.where)
        return {"kind": "top", "metric": args.top, "entities": [_entity_row(e) for e in found]}
    if args.edge_type:
        if args.type:
            raise InputError("--type names entities; --edge-type alone lists the edges of that type "
                             "(with --around or --neighbours, it narrows the edges followed)")
        edges = graph.find_edges(args.edge_type, args.where)
        return {"kind": "edges", "total": len(edges), "edges": [e.to_dict() for e in edges[:limit]]}
    if not args.type and not args.where:
        raise InputError("say what to query: --type, --where, --edge-type, --around, --neighbours, --top or --path")
    found = graph.find(args.type, args.where)
    return {"kind": "find", "total": len(found), "entities": [_entity_row(e) for e in found[:limit]]}


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _entity_table(rows: list[dict[str, Any]], metric: str | None = None) -> str:
    body = []
    for r in rows:
        name = r["attrs"].get("name", "")
        metrics = r["metrics"]
        shown = {metric: metrics.get(metric)} if metric else dict(list(sorted(metrics.items()))[:4])
        body.append([r["id"], r["type"], name, " ".join(f"{k}={_fmt(v)}" for k, v in shown.items())])
    return table(body, ["id", "type", "name", "metrics"])


def render(answer: dict[str, Any]) -> str:
    kind = answer["kind"]
    if kind == "paths":
        return "".join(" -> ".join(p) + "\n" for p in answer["paths"]) or "no path\n"
    if kind == "neighbours":
        return table([[n["edge"]["type"], n["edge"]["source"], n["edge"]["target"]] for n in answer["neighbours"]],
                     ["edge type", "source", "target"])
    if kind == "edges":
        return table([[e["id"], " ".join(f"{k}={_fmt(v)}" for k, v in sorted(e["metrics"].items())[:4])]
                      for e in answer["edges"]], ["edge", "metrics"])
    if kind == "subgraph":
        return _entity_table(answer["entities"]) + "\n" + table(
            [[e["type"], e["source"], e["target"]] for e in answer["edges"]], ["edge type", "source", "target"])
    return _entity_table(answer["entities"], answer.get("metric"))


def run(args: argparse.Namespace) -> int:
    from witty_profiler.topology import load_graph
    graph = load_graph(args.graph)
    answer = run_query(graph, args)
    if args.format == "json":
        print_json(answer)
    else:
        print(render(answer), end="")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("query", help="query a graph: by type/predicate, neighbours, k-hop subgraph, top-N, paths",
                       description="Conditions: FIELD OP VALUE with OP in = != > >= < <= ~ (contains); FIELD is "
                                   "attrs.NAME, metrics.NAME, id, type or a bare name. Example: "
                                   "--type process --where 'metrics.cpu_util_pct>50'")
    p.add_argument("graph")
    p.add_argument("--type", help="entity type (process, thread, numa_node, gpu, npu, ...)")
    p.add_argument("--where", action="append", help="condition; repeat to require several")
    p.add_argument("--neighbours", metavar="ID", help="entities linked to ID")
    p.add_argument("--direction", choices=["out", "in", "both"], default="both")
    p.add_argument("--edge-type", help="with --around or --neighbours: only follow edges of this type; "
                                       "alone: list the edges of this type (with --where)")
    p.add_argument("--around", metavar="ID", help="k-hop subgraph around ID (see --depth)")
    p.add_argument("--depth", type=int, help="hops for --around (default 1) or --path (default 4)")
    p.add_argument("--top", metavar="METRIC", help="entities with the highest METRIC (among --type and --where)")
    p.add_argument("--ascending", action="store_true", help="with --top: lowest first")
    p.add_argument("--path", nargs=2, metavar=("FROM", "TO"), help="paths between two entities")
    p.add_argument("--limit", "-n", type=int, default=20, help="rows to show (default 20)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(handler=run)
