"""witty-profiler: the public Python API, the `witty-profiler` CLI and the packages they stand on.

`witty_profiler` is what scripts, the CLI and the MCP server call: `load` (native or legacy
graph files), `collect` (a live window on this host), `diagnose`, `convert` and `compare`. Each
is a thin function over the parts installed under this name, whose folders sit at the top of the
repository: `witty_profiler.collectors`, `.topology`, `.converters`, `.diagnosis` and `.mcp_server`.

The names below are imported on first use, so that `import witty_profiler.topology` (or the
CLI's --help) does not pay for the collectors, the diagnosis and the tokenizer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> (module, attribute)
_API = {
    "Graph": ("witty_profiler.topology", "Graph"),
    "View": ("witty_profiler.converters", "View"),
    "collect": ("witty_profiler.collectors.engine", "run_window"),
    "compare": ("witty_profiler.diagnosis.compare", "compare"),
    "convert": ("witty_profiler.api", "convert"),
    "count_tokens": ("witty_profiler.converters", "count_tokens"),
    "diagnose": ("witty_profiler.diagnosis", "diagnose"),
    "dump_graph": ("witty_profiler.topology", "dump_graph"),
    "load": ("witty_profiler.topology", "load_graph"),
    "report": ("witty_profiler.diagnosis.report", "report"),
}

__all__ = ["__version__", *sorted(_API)]

if TYPE_CHECKING:
    from witty_profiler.collectors.engine import run_window as collect
    from witty_profiler.api import convert
    from witty_profiler.converters import View, count_tokens
    from witty_profiler.diagnosis import diagnose
    from witty_profiler.diagnosis.compare import compare
    from witty_profiler.diagnosis.report import report
    from witty_profiler.topology import Graph, dump_graph, load_graph as load


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module 'witty_profiler' has no attribute {name!r}")
    module, attr = _API[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # once found, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_API})
