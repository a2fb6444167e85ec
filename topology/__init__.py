"""The topology graph: what every other package reads and writes.

Entities (hosts, CPUs, NUMA nodes, processes, threads, devices, connections...) and the edges
between them, with stable host-namespaced ids, documented merge rules, the native JSON format v1
(with its generated JSON Schema), the reader for the original witty-profiler's graph files and the
queries that the converters, the diagnosis and the MCP server run. This package imports no other
package of the project.
"""

from witty_profiler.topology.errors import GraphFormatError
from witty_profiler.topology.graph import Graph
from witty_profiler.topology.models import CollectorStatus, Edge, Entity, GraphDocument, Meta
from witty_profiler.topology.io import dump_graph, dumps_graph, load_graph, loads_graph

__all__ = [
    "CollectorStatus", "Edge", "Entity", "Graph", "GraphDocument", "GraphFormatError", "Meta",
    "dump_graph", "dumps_graph", "load_graph", "loads_graph",
]
