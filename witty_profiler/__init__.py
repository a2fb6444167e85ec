"""witty-profiler: the public Python API, the `witty-profiler` CLI and the packages they stand on.

`witty_profiler` is what scripts call: `load` (native or legacy graph files), `collect` (a live
window on this host), `diagnose`, `convert`, `report` and `compare`; for jobs that span hosts, `merge`
(host graphs into one) and `diagnose_cluster` (a directory of host graphs); `import_traces` reads
training traces (Kineto, msprof-analyze) into rank and collective entities; `Workspace` keeps graphs by
id for a program that serves them. Each is the application layer's own function (`witty_profiler.app`)
or the part's it stands on, the same ones the CLI, the MCP server and the REST service call. The parts
sit at the top of the repository and are linked from here: `witty_profiler.collectors`, `.topology`,
`.converters`, `.diagnosis`, `.app`, `.mcp_server`, `.service`, ...

The names below are imported on first use, so that `import witty_profiler.topology` (or the
CLI's --help) does not pay for the collectors, the diagnosis and the tokenizer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from witty_profiler.topology.lazy import lazy_exports

from witty_profiler.topology.version import VERSION as __version__

# public name -> 'module:attribute' inside witty_profiler
_API = {
    "Graph": "topology:Graph", "View": "converters.view:View", "collect": "collectors.engine:run_window",
    "compare": "diagnosis.compare:compare", "convert": "app.views:convert",
    "count_tokens": "converters.tokens:count_tokens",
    "diagnose": "diagnosis.matcher:diagnose", "dump_graph": "topology.io:dump_graph", "load": "topology.io:load_graph",
    "report": "app.reports:report", "merge": "topology.hosts:merge_hosts", "Workspace": "app.workspace:Workspace",
    "diagnose_cluster": "diagnosis.cluster:diagnose_cluster", "import_traces": "traces.importer:import_traces",
}

__all__ = ["__version__", *sorted(_API)]

if TYPE_CHECKING:
    from witty_profiler.app.reports import report
    from witty_profiler.app.views import convert
    from witty_profiler.app.workspace import Workspace
    from witty_profiler.collectors.engine import run_window as collect
    from witty_profiler.converters import View, count_tokens
    from witty_profiler.diagnosis import diagnose
    from witty_profiler.diagnosis.cluster import diagnose_cluster
    from witty_profiler.diagnosis.compare import compare
    from witty_profiler.topology import Graph, dump_graph
    from witty_profiler.topology import load_graph as load
    from witty_profiler.topology.hosts import merge_hosts as merge
    from witty_profiler.traces.importer import import_traces


__getattr__, __dir__ = lazy_exports(__name__, _API)
