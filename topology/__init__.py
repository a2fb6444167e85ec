"""The topology graph: what every other package reads and writes.

Entities (hosts, CPUs, NUMA nodes, processes, threads, devices, connections...) and the edges
between them, with stable host-namespaced ids, documented merge rules, the native JSON format v1
(with its generated JSON Schema), the reader for the original witty-profiler's graph files and the
queries that the converters, the diagnosis and the MCP server run. This package imports no other
package of the project. Its public names are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from witty_profiler.topology.lazy import lazy_exports

_EXPORTS = {
    "CollectorStatus": "models", "Edge": "models", "Entity": "models", "Meta": "models",
    "Graph": "graph", "GraphFormatError": "errors",
    "dump_graph": "io", "dumps_graph": "io", "load_graph": "io", "loads_graph": "io",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from witty_profiler.topology.errors import GraphFormatError
    from witty_profiler.topology.graph import Graph
    from witty_profiler.topology.io import dump_graph, dumps_graph, load_graph, loads_graph
    from witty_profiler.topology.models import CollectorStatus, Edge, Entity, Meta
