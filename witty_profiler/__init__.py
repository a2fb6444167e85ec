"""The public Python API and the `witty-profiler` command line.

`witty_profiler` is what scripts, the CLI and the MCP server call: `load` (native or legacy
graph files), `collect` (a live window on this host), `diagnose`, `convert` and `compare`. Each
is a thin function over the `collectors`, `topology`, `converters` and `diagnosis` packages.
"""

from collectors.engine import run_window as collect
from converters import View, convert, count_tokens
from diagnosis import diagnose
from diagnosis.compare import compare
from diagnosis.report import report
from topology import Graph, dump_graph, load_graph as load

__version__ = "0.1.0"

__all__ = ["Graph", "View", "__version__", "collect", "compare", "convert", "count_tokens", "diagnose", "dump_graph",
           "load", "report"]
