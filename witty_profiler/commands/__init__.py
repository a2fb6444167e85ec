"""One module per `witty-profiler` subcommand, each with `register(subparsers)`.

The CLI discovers the modules of this package, so adding a command is adding a file, and its one-line
help in `HELP` below: a run imports only the module of the command it runs, and `witty-profiler --help`
lists every command from this table without importing any (tests/test_cli_startup.py checks that the
table matches what each module registers). A handler takes the parsed arguments and returns an exit
code; it raises `topology.errors.InputError` for bad input, which the CLI turns into one line on stderr
and exit 2.
"""

import os

# the modules of this folder (a listing is cheaper than pkgutil, which the CLI's start-up would pay for)
COMMANDS = sorted(name[:-3] for name in os.listdir(__path__[0]) if name.endswith(".py") and not name.startswith("_"))

# command name -> its one-line help, as its module's register() gives it (the module is the name with _ for -)
HELP = {
    "cluster": "collect and diagnose a job that spans hosts (Slurm, ssh, kubectl, services)",
    "collect": "collect a window of this host into a graph file",
    "compare": "compare the diagnoses of two graphs (before/after a change)",
    "convert": "compact per-layer text view of a graph, under a token budget",
    "diagnose": "seven-layer bottleneck diagnosis of a graph (or of a live window)",
    "export": "serve this host's windows and findings to Prometheus, or write a textfile",
    "import-trace": "import training traces (Kineto, msprof-analyze) into a graph",
    "info": "hosts, window, collector statuses and counts of a graph file",
    "merge": "merge host graphs into one graph of several hosts",
    "patterns": "list the bottleneck patterns and their thresholds",
    "query": "query a graph: by type/predicate, neighbours, k-hop subgraph, top-N, paths",
    "reference": "print a generated reference page (collectors, mcp-tools, rest-api)",
    "serve": "monitor this host continuously; REST API and MCP on 127.0.0.1:18090",
    "skill": "install, validate or evaluate the Agent Skills (bottleneck identification, data-flow topology, hotspot threads)",
    "tokens": "count cl100k_base tokens of files (offline)",
}


def module_of(command: str) -> str:
    return command.replace("-", "_")
