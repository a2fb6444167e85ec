"""`witty-profiler cluster collect|diagnose|hosts`: a job that spans hosts, one graph per host in a
directory, collected through Slurm, OpenSSH or kubectl (or pulled from the hosts' running services), and
diagnosed host by host then across hosts."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from witty_profiler.options import thresholds as read_thresholds
from witty_profiler.output import check_output, print_json, table, write_output
from witty_profiler.topology.errors import InputError

if TYPE_CHECKING:
    from witty_profiler.cluster.fanout import Manifest


# `cluster collect`'s exit codes beyond the CLI's own (0 success, 1 internal error, 2 bad usage or input, 130
# interrupted): a script can tell a partial collection from an empty one
SOME_HOSTS_FAILED = 3  # at least one graph written, and at least one host without one
NO_HOST_GAVE_A_GRAPH = 4
EXIT_CODES = (f"Exit codes: 0 every host gave a graph; {SOME_HOSTS_FAILED} some hosts gave none (failed, timed out, "
              f"skipped: DIR/cluster.json says why) but at least one graph was written; {NO_HOST_GAVE_A_GRAPH} no "
              "host gave a graph; 2 bad usage or input (nothing was run); 130 interrupted (Ctrl-C or SIGTERM): the "
              "local srun, ssh and kubectl exec processes are ended (srun cancels its step on the nodes, an ssh host's "
              "shell ends its command when ssh goes; a command that kubectl exec started runs to the end of its "
              "window) and the manifest names the hosts cancelled.")


def exit_code(ok: int, total: int) -> int:
    """0 when every host gave a graph, SOME_HOSTS_FAILED when some did, NO_HOST_GAVE_A_GRAPH when none did."""
    if ok == 0:
        return NO_HOST_GAVE_A_GRAPH
    return 0 if ok == total else SOME_HOSTS_FAILED


def collect_directory(args: argparse.Namespace) -> tuple[Path, Manifest]:
    """Run the launcher the options name; returns the directory and the manifest. Ctrl-C (or SIGTERM) ends
    the launcher processes (srun cancels its step), writes the manifest, then interrupts (exit 130)."""
    from witty_profiler.cluster import fanout
    from witty_profiler.cluster.collect import Launch, Target, collect_cluster
    from witty_profiler.cluster.services import Pick, read_token
    from witty_profiler.collectors.window import validate_window
    target = Target(hosts=[h for h in (args.hosts or "").split(",") if h.strip()], hostfile=args.hostfile,
                    slurm_job=args.slurm_job, slurm_nodes=args.slurm_nodes, kubectl_selector=args.kubectl_selector,
                    namespace=args.namespace, container=args.container, services=args.services or [],
                    services_file=args.services_file)
    try:
        way = target.way()
    except InputError:
        raise InputError("name the hosts one way: --slurm-job J, --slurm-nodes LIST, --hosts/--hostfile, "
                         "--kubectl-selector SEL, or --services/--services-file") from None
    token = None
    if way == "services":
        given = [o for o, v in (("--duration", args.duration), ("--interval", args.interval), ("--job", args.job),
                                ("--collectors", args.collectors)) if v is not None]
        if given:
            raise InputError(f"{', '.join(given)}: a service collects its own windows (serve --window, --interval, "
                             "--job, --collectors); pick one of them with --at or --past instead")
        for option, value in (("--max-mb", args.max_mb), ("--timeout", args.timeout)):
            if value is not None and not 0 < value < float("inf"):
                raise InputError(f"{option} {value:g}: give a number above 0")
        target.pick = Pick.parse(args.at, args.past)
        token = read_token(args.token_file)
    else:
        given = [o for o, v in (("--at", args.at), ("--past", args.past), ("--token-file", args.token_file),
                                ("--max-mb", args.max_mb)) if v is not None]
        if given:
            raise InputError(f"{', '.join(given)}: for windows pulled from services (--services or --services-file)")
        args.duration = 10.0 if args.duration is None else args.duration
        args.interval = 1.0 if args.interval is None else args.interval
        validate_window(args.duration, args.interval)
    target.check()  # before the directory is made
    directory = fanout.prepare_directory(args.output, args.force)
    launch = Launch(remote_command=args.remote_command, ssh_options=args.ssh_option or [], ssh_config=args.ssh_config,
                    kubectl=args.kubectl, parallel=args.parallel, timeout_s=args.timeout, service_token=token,
                    max_window_bytes=int(args.max_mb * (1 << 20)) if args.max_mb else None)
    show = None if args.quiet else _progress
    stop = threading.Event()
    with _signals_set(stop):
        manifest = collect_cluster(target, directory, args.duration or 0.0, args.interval or 1.0, args.job,
                                   args.collectors, launch, progress=show, announce=None if args.quiet else _say,
                                   stop=stop)
    ok = manifest.ok()
    if manifest.cancelled:
        ended = "the transfers were given up" if way == "services" else "srun, ssh and kubectl exec were ended"
        print(f"cancelled: {ended}; kept {ok} of {len(manifest.results)} host graphs "
              f"in {directory}/ (manifest {fanout.MANIFEST})", file=sys.stderr)
        raise KeyboardInterrupt
    if not args.quiet:
        print(f"wrote {ok} of {len(manifest.results)} host graphs to {directory}/ (manifest {fanout.MANIFEST})",
              file=sys.stderr)
    return directory, manifest


@contextlib.contextmanager
def _signals_set(stop: threading.Event):
    """While collecting, SIGINT and SIGTERM set `stop` (the launchers are ended, the manifest written) instead
    of interrupting at once; a second one interrupts as usual."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_signal(signum: int, frame) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _say(message: str) -> None:
    print(message, file=sys.stderr)


def _progress(result, done: int = 0, total: int = 0) -> None:
    tail = f": {result.reason}" if result.reason else ""
    print(f"  {result.host}: {result.status} ({result.seconds:g} s){tail}", file=sys.stderr)


def run_collect(args: argparse.Namespace) -> int:
    if args.diagnose:
        check_output(args.report, args.force)
    directory, manifest = collect_directory(args)
    if args.diagnose:
        _write_report(directory, manifest.failed(), args.report, args.format, args.force, workers=None)
    return exit_code(manifest.ok(), len(manifest.results))


def _write_report(directory: Path, failed: list[dict[str, str]], output: str | None, format: str, force: bool,
                  workers: int | None, thresholds=None) -> None:
    from witty_profiler.cluster.directory import diagnose_directory
    from witty_profiler.diagnosis.cluster_report import report
    result = diagnose_directory(directory, failed, thresholds=thresholds, workers=workers)
    from witty_profiler.converters.tokens import fewer_than
    from witty_profiler.diagnosis.cluster_report import SUMMARY_TOKENS
    write_output(report(result, str(directory), format, fits=fewer_than(SUMMARY_TOKENS)), output, force)


def run_diagnose(args: argparse.Namespace) -> int:
    from witty_profiler.cluster.directory import failed_hosts
    directory = Path(args.directory)
    thresholds = read_thresholds(args.thresholds)
    check_output(args.output, args.force)
    if args.host:
        from witty_profiler.cluster.directory import host_file
        from witty_profiler.diagnosis.matcher import diagnose
        from witty_profiler.diagnosis.report import report
        from witty_profiler.topology import load_graph
        graph = load_graph(host_file(directory, args.host))
        fmt = "md" if args.format == "summary" else args.format
        write_output(report(diagnose(graph, thresholds=thresholds), graph, fmt), args.output, args.force)
        return 0
    _write_report(directory, failed_hosts(directory), args.output, args.format, args.force, args.workers, thresholds)
    return 0


def run_hosts(args: argparse.Namespace) -> int:
    """The hosts of a directory: each graph's host, window and size, and the hosts that gave none."""
    from witty_profiler.cluster.directory import host_rows
    rows = host_rows(Path(args.directory))
    if args.json:
        print_json([{k: v for k, v in r.items() if k != "duration_s"} for r in rows])
    else:
        sys.stdout.write(table([[r["host"], r["status"], r.get("started_at") or "", r.get("entities") or "",
                                 r["file"] or ""] for r in rows], ["host", "status", "started_at", "entities", "file"]))
    return 0


def _add_window(p: argparse.ArgumentParser) -> None:
    p.add_argument("--duration", type=float, metavar="S", help="window length on each host (default 10)")
    p.add_argument("--interval", type=float, metavar="S", help="sampling interval (default 1)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cluster", help="collect and diagnose a job that spans hosts (Slurm, ssh, kubectl, services)",
                       description="One graph per host in a directory, then each host diagnosed on its own and the "
                                   "hosts compared (control.straggler_host, network.odd_host).")
    cmds = p.add_subparsers(dest="cluster_command", metavar="ACTION", parser_class=type(p))
    c = cmds.add_parser("collect", help="collect every host of a job into DIR/<host>.json",
                        description="Runs `witty-profiler collect -o -` on each host through the launcher the cluster "
                                    "already has; a host that fails, times out or lacks the tool is named in "
                                    "DIR/cluster.json with the reason, and the others are kept. Slurm nodes are "
                                    "checked first: a name that is not a node of the cluster, or a node that is down "
                                    "or drained, is skipped with what Slurm says of it. Or, from hosts that run "
                                    "`witty-profiler serve`, a window each service already has is pulled over its "
                                    "REST API.",
                        epilog=EXIT_CODES)
    where = c.add_argument_group("hosts (one way)")
    where.add_argument("--slurm-job", metavar="JOBID", help="every node of this running Slurm job, through a step "
                       "that joins it (srun --jobid --overlap); each node's window covers the job's processes there")
    where.add_argument("--slurm-nodes", metavar="LIST", help="these Slurm nodes (n[1-64]) without a job")
    where.add_argument("--hosts", metavar="H1,H2", help="these hosts through ssh (your ssh config applies)")
    where.add_argument("--hostfile", metavar="FILE", help="hosts through ssh, one per line")
    where.add_argument("--kubectl-selector", metavar="SEL", help="the pods of the witty-profiler DaemonSet "
                       "(deploy/kubernetes/) that this label selector picks, through kubectl exec")
    where.add_argument("--services", nargs="+", metavar="URL", help="running services (witty-profiler serve), "
                       "e.g. http://gpu01:18090: a window of each is pulled, not collected; each graph's host is "
                       "the one it names (serve --host)")
    where.add_argument("--services-file", metavar="FILE", help="services, one URL per line ('#' comments)")
    pulled = c.add_argument_group("services: which window of each (default the latest)")
    pulled.add_argument("--at", metavar="TIME", help="the window covering TIME (RFC 3339, Unix seconds, or "
                        "--at=-10m); TIME between two windows: the nearest if within 10 s")
    pulled.add_argument("--past", metavar="START..END", help="one window of the span, e.g. --past=-30m..now (END "
                        "default now): the one "
                        "most of which lies in it, the newest of equals. Not the span's windows merged: merged, a "
                        "host's windows would sum its counters but keep only the last window's gauges, describing "
                        "no real stretch of time; and hosts are compared over one window each")
    pulled.add_argument("--token-file", metavar="FILE", help="the services' bearer token (default "
                        "$WITTY_SERVICE_TOKEN); sent to the URLs given, never to another origin after a redirect")
    pulled.add_argument("--max-mb", type=float, metavar="MIB", help="refuse a window larger than this (default 256, "
                        "the service's default ring cap)")
    _add_window(c)
    c.add_argument("--job", metavar="ID", help="scope each host to this job's processes (Slurm job id or torchrun "
                   "run id; --slurm-job implies it)")
    c.add_argument("--collectors", metavar="A,B", help="collectors to run on each host (as collect --collectors)")
    c.add_argument("--parallel", type=int, default=32, metavar="N", help="hosts collected at once over "
                   "ssh/kubectl, or services asked at once (default 32)")
    c.add_argument("--timeout", type=float, metavar="S", help="give up on a host after S seconds (default: the window "
                   "plus 60; a service: 120 for its whole transfer)")
    c.add_argument("--remote-command", default="witty-profiler", metavar="CMD",
                   help="how to run witty-profiler on the hosts (default witty-profiler; e.g. 'python3 -m "
                        "witty_profiler' or a venv path)")
    c.add_argument("--ssh-config", metavar="FILE", help="ssh -F FILE")
    c.add_argument("--ssh-option", action="append", metavar="OPT", help="ssh -o OPT (repeatable)")
    c.add_argument("-n", "--namespace", default="witty-profiler", help="kubectl namespace (default witty-profiler)")
    c.add_argument("--container", help="the pod's container (kubectl exec -c)")
    c.add_argument("--kubectl", default="kubectl", metavar="PATH", help="the kubectl to run (default kubectl)")
    c.add_argument("-o", "--output", metavar="DIR", required=True, help="directory for the graphs (new or empty)")
    c.add_argument("--force", action="store_true", help="write into a directory that is not empty")
    c.add_argument("--diagnose", action="store_true", help="then diagnose the directory and print the report")
    c.add_argument("--report", metavar="FILE", help="with --diagnose: write the report to FILE (default stdout)")
    c.add_argument("--format", choices=["md", "summary", "json"], default="md", help="with --diagnose: the report's form")
    c.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    c.set_defaults(handler=run_collect)
    d = cmds.add_parser("diagnose", help="diagnose DIR: each host, then across hosts",
                        description="Each host's graph is diagnosed in a worker process and reduced to a digest; the "
                                    "cross-host patterns compare the digests. --host NAME shows one host's own report.")
    d.add_argument("directory", metavar="DIR")
    d.add_argument("--host", metavar="NAME", help="the full diagnosis of one host instead")
    d.add_argument("--format", choices=["md", "summary", "json"], default="md",
                   help="md: the report (default); summary: under 500 tokens for any number of hosts; json")
    d.add_argument("--workers", type=int, metavar="N", help="worker processes (default: one per CPU)")
    d.add_argument("--thresholds", metavar="FILE", help="TOML file overriding pattern thresholds")
    d.add_argument("-o", "--output", metavar="FILE", help="write the report to FILE (default stdout)")
    d.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    d.set_defaults(handler=run_diagnose)
    h = cmds.add_parser("hosts", help="the hosts of DIR: graph, window, size, or why there is none")
    h.add_argument("directory", metavar="DIR")
    h.add_argument("--json", action="store_true", help="as JSON")
    h.set_defaults(handler=run_hosts)
    p.set_defaults(handler=lambda args: _no_action(p))


def _no_action(parser: argparse.ArgumentParser) -> int:
    raise InputError("name an action: cluster collect, cluster diagnose or cluster hosts (see --help)")
