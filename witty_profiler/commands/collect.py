"""`witty-profiler collect`: one live window on this host -> graph JSON v1."""

from __future__ import annotations

import argparse
import sys

from witty_profiler.collectors.window import MAX_DURATION_S, validate_window
from witty_profiler.output import check_output, write_output
from witty_profiler.topology.errors import InputError

DEFAULT_FILE = "witty-graph.json"


def _progress(stream):
    """A one-line progress display on stderr: rewritten in place on a terminal, start/end lines otherwise."""
    tty = stream.isatty()

    def show(elapsed: float, total: float, message: str) -> None:
        if tty:
            end = "\n" if message.startswith("finished") else ""
            stream.write(f"\rcollecting: {elapsed:5.1f}/{total:g} s {message:<16}{end}")
        elif message == "started" or message.startswith("finished"):
            stream.write(f"collecting: {elapsed:.1f}/{total:g} s {message}\n")
        stream.flush()
    return show


def _collectors(text: str | None) -> list[str] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise InputError("--collectors needs at least one name, e.g. --collectors process,cpu")
    return names


def run(args: argparse.Namespace) -> int:
    from witty_profiler.collectors.engine import run_window
    from witty_profiler.topology import dumps_graph
    validate_window(args.duration, args.interval)
    target = args.output or DEFAULT_FILE
    check_output(target, args.force)  # before the window is spent
    graph = run_window(args.duration, args.interval, pids=args.pid or None, collectors=_collectors(args.collectors),
                       progress=None if args.quiet else _progress(sys.stderr), host=args.host, job=args.job)
    write_output(dumps_graph(graph), target, force=True)  # checked before the window started
    if target != "-" and not args.quiet:
        counts = f"{graph.entity_count()} entities, {graph.edge_count()} edges"
        not_ok = [f"{n} {c.status}" for n, c in graph.meta.collectors.items() if c.status != "ok"]
        print(f"wrote {target}: {counts}" + (f" ({', '.join(not_ok)})" if not_ok else ""), file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help="collect a window of this host into a graph file",
                       description="Reads counters at the start, every interval and at the end of the window; "
                                   "stores rates and utilisations over the window plus p95/max of the intervals. "
                                   "Ctrl-C ends the window early and still writes the graph.")
    p.add_argument("--duration", type=float, default=10.0, metavar="S",
                   help=f"window length in seconds (default 10, at most {MAX_DURATION_S:g})")
    p.add_argument("--interval", type=float, default=1.0, metavar="S", help="sampling interval in seconds (default 1)")
    p.add_argument("--pid", type=int, nargs="+", action="extend", metavar="PID",
                   help="scope: these processes and their descendants (--pid 1 2 or --pid 1 --pid 2)")
    p.add_argument("--host", metavar="NAME", help="the host's name in the graph (default: the Slurm node name "
                   "where slurmd runs this, else the hostname), so that graphs of several hosts never collide")
    p.add_argument("--job", metavar="ID", help="scope: the processes of this Slurm job or torchrun run on this "
                   "host (SLURM_JOB_ID or TORCHELASTIC_RUN_ID in their environment) and their descendants")
    p.add_argument("--collectors", metavar="A,B", help="run only these collectors (comma-separated), or all but "
                   "those given as -NAME (--collectors=-ebpf,-ipc)")
    p.add_argument("-o", "--output", metavar="FILE", help=f"output file (default {DEFAULT_FILE}; '-' = stdout)")
    p.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    p.add_argument("--offline", action="store_true",
                   help="accepted for compatibility: collection never uses the network")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(handler=run)
