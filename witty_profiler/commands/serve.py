"""`witty-profiler serve` (also plain `witty-profiler`): continuous monitoring with a REST API and /mcp
on http://127.0.0.1:18090. Settings: defaults < --config FILE (TOML or JSON) < these options."""

from __future__ import annotations

import argparse
import json
import logging
import sys


def _overrides(args: argparse.Namespace) -> dict[str, dict]:
    from witty_profiler.options import collector_names
    listen = None
    if args.listen is not None:
        listen = args.listen if ":" in args.listen else f"{args.listen}:18090"
    return {
        "collection": {"window_s": args.window, "interval_s": args.interval,
                       "collectors": collector_names(args.collectors),
                       "pids": args.pid, "job": args.job, "host": args.host},
        "diagnosis": {"thresholds": args.thresholds, "trigger_priority": args.trigger_priority},
        "server": {"listen": listen, "token_file": args.token_file},
        "storage": {"state_dir": args.state_dir, "ring_windows": args.ring_windows, "ring_max_mb": args.ring_max_mb,
                    "kept_windows": args.kept_windows, "kept_max_mb": args.kept_max_mb},
    }


def run(args: argparse.Namespace) -> int:
    from witty_profiler.service import config as cfg
    config = cfg.load(args.config, _overrides(args))
    if args.dump_config:
        sys.stdout.write(json.dumps(config.to_dict(), indent=2) + "\n")
        return 0
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="witty-profiler %(levelname)s %(message)s")
    from witty_profiler.service.app import run as serve
    return serve(config, running=not args.stopped)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="settings file, TOML or JSON (.json); the options below win")
    p.add_argument("--dump-config", action="store_true", help="print the settings in force as JSON and exit")
    p.add_argument("--listen", metavar="HOST:PORT", help="address of the REST API and /mcp (default 127.0.0.1:18090); "
                   "beyond loopback a bearer token is required")
    p.add_argument("--token-file", metavar="FILE", help="the bearer token clients must send (else "
                   "$WITTY_SERVICE_TOKEN)")
    p.add_argument("--window", type=float, metavar="S", help="window length in seconds (default 60)")
    p.add_argument("--interval", type=float, metavar="S", help="sampling interval within a window (default 10)")
    p.add_argument("--collectors", metavar="A,B", help="collectors to run, or all but -NAME (default -ebpf)")
    p.add_argument("--pid", type=int, nargs="+", action="extend", metavar="PID", help="scope: these processes")
    p.add_argument("--job", metavar="ID", help="scope: this Slurm job or torchrun run")
    p.add_argument("--host", metavar="NAME", help="the host's name in the graphs")
    p.add_argument("--thresholds", metavar="FILE", help="TOML file overriding pattern thresholds")
    p.add_argument("--trigger-priority", choices=["P0", "P1", "P2", "off"],
                   help="keep a window whose diagnosis has a finding this urgent (default P0)")
    p.add_argument("--state-dir", metavar="DIR", help="where windows, the lock and MCP graphs are kept (default "
                   "$WITTY_STATE_DIR, else $XDG_STATE_HOME/witty-profiler, else ~/.local/state/witty-profiler)")
    p.add_argument("--ring-windows", type=int, metavar="N", help="windows kept in the ring (default 60)")
    p.add_argument("--ring-max-mb", type=float, metavar="MIB", help="disk cap of the ring (default 256)")
    p.add_argument("--kept-windows", type=int, metavar="N", help="triggered windows kept (default 100)")
    p.add_argument("--kept-max-mb", type=float, metavar="MIB", help="disk cap of the kept windows (default 512)")
    p.add_argument("--stopped", action="store_true", help="start with collection stopped (POST /api/v1/start)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="monitor this host continuously; REST API and MCP on 127.0.0.1:18090",
                       description="Window after window into a ring on disk (count and size capped); windows where "
                                   "a pattern fires, or kept on demand, outlive it. REST API (/openapi.json "
                                   "describes it) and the MCP server (/mcp) on one port. Plain `witty-profiler` "
                                   "does the same.")
    add_arguments(p)
    p.set_defaults(handler=run)
