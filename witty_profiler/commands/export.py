"""`witty-profiler export`: this host's windows and findings in the Prometheus exposition format,
served over HTTP (--listen) or written once for node_exporter's textfile collector (--textfile)."""

from __future__ import annotations

import argparse
import sys
import threading

from witty_profiler.collectors.window import validate_window
from witty_profiler.topology.errors import InputError


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run(args: argparse.Namespace) -> int:
    if args.textfile:
        return _textfile(args)
    return _listen(args)


def _textfile(args: argparse.Namespace) -> int:
    from witty_profiler.collectors.engine import run_window
    from witty_profiler.diagnosis import diagnose
    from witty_profiler.exporter import check_textfile, exposition, write_textfile
    sample = min(args.sample_interval, args.duration)
    validate_window(args.duration, sample)
    target = check_textfile(args.textfile, args.force)  # before the window is spent
    graph = run_window(args.duration, sample, pids=args.pid or None, host=args.host)
    try:
        diagnosis = diagnose(graph, pids=args.pid or None)
    except InputError:  # a pid named ended during the window
        diagnosis = diagnose(graph)
    check_textfile(args.textfile, args.force)  # a file may have appeared during the window
    write_textfile(target, exposition(graph, diagnosis, args.pid or None, args.top))
    if not args.quiet:
        print(f"wrote {target}", file=sys.stderr)
    return 0


def _listen(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry, start_http_server

    from witty_profiler.exporter import WindowCollector, WindowLoop, parse_listen
    if args.duration is not None:
        raise InputError("--duration is the window of --textfile; with --listen the window is --interval")
    sample = min(args.sample_interval, args.interval)
    validate_window(args.interval, sample)
    host, port = parse_listen(args.listen, args.listen_public)
    registry = CollectorRegistry(auto_describe=False)
    collector = WindowCollector(args.pid or None, args.top)
    registry.register(collector)
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise InputError(f"--listen {args.listen}: {exc.strerror or exc}") from None
    loop = WindowLoop(collector, args.interval, sample, pids=args.pid or None, host=args.host)
    loop.start()
    if not args.quiet:
        shown = f"[{host}]" if ":" in host else host
        print(f"serving http://{shown}:{port}/metrics (a new window every {args.interval:g} s; Ctrl-C stops)",
              file=sys.stderr, flush=True)
    try:
        threading.Event().wait()
    finally:
        loop.stop.set()
        server.shutdown()
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("export", help="serve this host's windows and findings to Prometheus, or write a textfile",
                       description="Exports what node_exporter does not (per-process and per-thread run-queue "
                                   "wait, NUMA placement, process-to-device mapping) and the current findings, in "
                                   "the Prometheus exposition format, with a bounded number of series. --listen "
                                   "serves /metrics and collects one window after another in the background; "
                                   "--textfile writes one window atomically for node_exporter's textfile collector.")
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--listen", metavar="HOST:PORT", help="serve /metrics on this address (e.g. 127.0.0.1:9818)")
    mode.add_argument("--textfile", metavar="DIR/NAME.prom", help="write one window to this file and exit")
    p.add_argument("--listen-public", action="store_true",
                   help="allow --listen on an address other than loopback (the endpoint has no authentication)")
    p.add_argument("--interval", type=float, default=15.0, metavar="S",
                   help="--listen: the window length, i.e. how often a new window is ready (default 15: set it "
                        "to the scrape interval)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="--textfile: the window length in seconds (default 10)")
    p.add_argument("--sample-interval", type=float, default=1.0, metavar="S",
                   help="sampling interval inside a window (default 1; at most the window)")
    p.add_argument("--pid", type=int, nargs="+", action="extend", metavar="PID",
                   help="the workload: these processes and their descendants, exported first")
    p.add_argument("--top", type=_positive_int, default=20, metavar="N",
                   help="export at most N processes: the workload first, then the busiest (default 20)")
    p.add_argument("--host", metavar="NAME", help="the host's name (default: the Slurm node name, else the hostname)")
    p.add_argument("--force", action="store_true", help="--textfile: overwrite a file this exporter did not write")
    p.add_argument("-q", "--quiet", action="store_true", help="nothing on stderr but errors")
    p.set_defaults(handler=_defaults)


def _defaults(args: argparse.Namespace) -> int:
    if args.textfile and args.duration is None:
        args.duration = 10.0
    if args.textfile and args.listen_public:
        raise InputError("--listen-public goes with --listen")
    return run(args)
