"""`witty-profiler collect`: one live window on this host -> graph JSON v1; or, with --prometheus, a past
window of many hosts read from Prometheus's HTTP API (node_exporter series)."""

from __future__ import annotations

import argparse
import sys

from witty_profiler.collectors.window import MAX_DURATION_S, validate_window
from witty_profiler.options import collector_names, window_progress
from witty_profiler.output import check_output, write_output
from witty_profiler.topology.errors import InputError

DEFAULT_FILE = "witty-graph.json"


def _summary(graph, target: str, quiet: bool) -> None:
    if target != "-" and not quiet:
        counts = f"{graph.entity_count()} entities, {graph.edge_count()} edges"
        not_ok = [f"{n} {c.status}" for n, c in graph.meta.collectors.items() if c.status != "ok"]
        print(f"wrote {target}: {counts}" + (f" ({', '.join(not_ok)})" if not_ok else ""), file=sys.stderr)


def run_prometheus(args: argparse.Namespace) -> int:
    from witty_profiler.sources.promapi import parse_time, read_auth
    from witty_profiler.sources.prometheus import collect_window
    from witty_profiler.topology import dumps_graph
    if args.start is None:
        raise InputError("--prometheus needs --start (RFC 3339, Unix seconds or relative such as -1h)")
    if args.pid or args.job or args.collectors or args.host or args.stacks or args.stacks_out:
        raise InputError("--pid, --job, --collectors, --stacks and --host are for a live window; with --prometheus "
                         "the hosts come from the series (--host-label, --match)")
    start, end = parse_time(args.start), parse_time(args.end)
    target = args.output or DEFAULT_FILE
    check_output(target, args.force)
    window = collect_window(args.prometheus, start, end, step=args.step, match=args.match,
                            host_label=args.host_label, auth=read_auth(args.prometheus_auth_file),
                            timeout_s=args.timeout)
    write_output(dumps_graph(window.graph), target, force=True)
    if not args.quiet:
        print(f"read {window.series} series in {window.requests} requests ({window.bytes} bytes, "
              f"{window.seconds:.2f} s) from {args.prometheus.split('?')[0]}", file=sys.stderr)
    _summary(window.graph, target, args.quiet)
    return 0


def with_config(args: argparse.Namespace) -> argparse.Namespace:
    """The window's settings: the command line's, else the [collection] table of --config (the service's
    file, so that `witty-profiler --offline --config production.json` collects as the service would), else
    the defaults."""
    collection = None
    if args.config:
        from witty_profiler.service.config import load
        collection = load(args.config, {}).collection
    defaults = {"duration": 10.0, "interval": 1.0, "pid": None, "job": None, "host": None, "collectors": None}
    if collection is not None:
        defaults.update(duration=collection.window_s, interval=collection.interval_s, pid=collection.pids or None,
                        job=collection.job, host=collection.host,
                        collectors=",".join(collection.collectors) if collection.collectors else None)
    for key, value in defaults.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def run(args: argparse.Namespace) -> int:
    if args.prometheus:
        if args.config:
            raise InputError("--config sets a live window (its [collection] table); --prometheus reads a past one")
        return run_prometheus(args)
    args = with_config(args)
    if args.start is not None or args.end != "now" or args.match or args.step is not None:
        raise InputError("--start, --end, --step and --match read a past window from Prometheus: add --prometheus URL")
    validate_window(args.duration, args.interval)
    target = args.output or DEFAULT_FILE
    check_output(target, args.force)  # before the window is spent, and before the collectors are imported
    if args.stacks_out and args.stacks_out != "-":
        check_output(args.stacks_out, args.force)
    elif args.stacks_out == "-":
        raise InputError("--stacks-out needs a file (stdout carries the graph with -o -)")
    from witty_profiler.collectors.engine import run_window
    from witty_profiler.topology import dumps_graph
    graph = run_window(args.duration, args.interval, pids=args.pid or None, collectors=collector_names(args.collectors),
                       progress=None if args.quiet else window_progress(sys.stderr), host=args.host, job=args.job,
                       stacks=args.stacks, stacks_out=args.stacks_out)
    write_output(dumps_graph(graph), target, force=True)  # checked before the window started
    _summary(graph, target, args.quiet)
    scope = graph.meta.extra.get("scope")
    if isinstance(scope, dict) and scope.get("note"):  # --job found nothing here: said even with -q
        print(f"witty-profiler: warning: {scope['note']}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("collect", help="collect a window of this host into a graph file",
                       description="Reads counters at the start, every interval and at the end of the window; "
                                   "stores rates and utilisations over the window plus p95/max of the intervals. "
                                   "Ctrl-C ends the window early and still writes the graph.")
    p.add_argument("--duration", type=float, metavar="S",
                   help=f"window length in seconds (default 10, or --config's window_s; at most {MAX_DURATION_S:g})")
    p.add_argument("--interval", type=float, metavar="S",
                   help="sampling interval in seconds (default 1, or --config's interval_s)")
    p.add_argument("--config", metavar="FILE", help="take the window's settings the command line leaves out from "
                   "this service config file's [collection] table (TOML or JSON; see `serve --dump-config`)")
    p.add_argument("--pid", type=int, nargs="+", action="extend", metavar="PID",
                   help="scope: these processes and their descendants (--pid 1 2 or --pid 1 --pid 2)")
    p.add_argument("--host", metavar="NAME", help="the host's name in the graph (default: the Slurm node name "
                   "where slurmd runs this, else the hostname), so that graphs of several hosts never collide")
    p.add_argument("--job", metavar="ID", help="scope: the processes of this Slurm job or torchrun run on this "
                   "host (SLURM_JOB_ID or TORCHELASTIC_RUN_ID in their environment) and their descendants")
    p.add_argument("--collectors", metavar="A,B", help="run only these collectors (comma-separated), or all but "
                   "those given as -NAME (--collectors=-ebpf,-ipc)")
    p.add_argument("--stacks", action="store_true", help="also sample on-CPU stacks of the workload's threads "
                   "(49 Hz; bcc on the CPU-clock perf event, py-spy for Python processes; root): each thread's top "
                   "stacks and hot function. Not implied by --pid: it costs a compile and ptrace of the processes")
    p.add_argument("--stacks-out", metavar="FILE", help="write every sampled stack folded (comm-pid/tid;a;b;c N), "
                   "for flamegraph.pl, inferno or speedscope; implies --stacks")
    p.add_argument("-o", "--output", metavar="FILE", help=f"output file (default {DEFAULT_FILE}; '-' = stdout)")
    p.add_argument("--force", action="store_true", help="overwrite the output file if it exists")
    p.add_argument("--offline", action="store_true",
                   help="accepted for compatibility: live collection never uses the network (--prometheus does)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    prom = p.add_argument_group("a past window from Prometheus (node_exporter series of many hosts)")
    prom.add_argument("--prometheus", metavar="URL", help="read the window from this Prometheus server's HTTP API "
                      "instead of collecting live, e.g. http://prometheus:9090")
    prom.add_argument("--start", metavar="T", help="window start: RFC 3339, Unix seconds, or relative (now-1h, or --start=-1h)")
    prom.add_argument("--end", metavar="T", default="now", help="window end (default now)")
    prom.add_argument("--step", type=float, metavar="S", help="query step in seconds (default the scrape interval, "
                      "told from the samples' spacing, else 15; more where the window would exceed 11,000 points per "
                      "series); keep it at or above the scrape interval")
    prom.add_argument("--match", metavar="SELECTOR", help="only series matching this selector, e.g. '{job=\"node\"}'")
    prom.add_argument("--host-label", default="instance", metavar="LABEL",
                      help="the label that names a host (default instance, without its port; e.g. nodename, "
                      "read from node_uname_info)")
    prom.add_argument("--prometheus-auth-file", metavar="FILE", help="a file holding a bearer token or user:password "
                      "(basic auth); else the WITTY_PROMETHEUS_TOKEN environment variable is used if set")
    prom.add_argument("--timeout", type=float, default=30.0, metavar="S", help="per-request timeout (default 30 s)")
    p.set_defaults(handler=run)
