"""`witty-mcp`: run the MCP server, over stdio (default) or streamable HTTP on loopback.

Over HTTP every request passes Host/Origin validation (`mcp_server.httpguard`); an address beyond
loopback needs a bearer token (--token-file, or $WITTY_MCP_TOKEN), which every request must carry.

In stdio mode stdout carries the protocol and nothing else: logs go to stderr, and while the
server runs the SDK points file descriptor 1 at stderr, so a stray print cannot corrupt the wire.
"""

from __future__ import annotations

import argparse
import copy
import logging
import os
import sys
from pathlib import Path
from typing import Any

from witty_profiler.topology.errors import InputError

TOKEN_ENV = "WITTY_MCP_TOKEN"
DEFAULT_PORT = 18090


def build_parser() -> argparse.ArgumentParser:
    from witty_profiler.topology.version import VERSION as __version__
    p = argparse.ArgumentParser(prog="witty-mcp", description="witty-profiler as an MCP server: collect, load, "
                                "query and diagnose topology graphs from an assistant.")
    p.add_argument("--version", action="version", version=f"witty-mcp {__version__}")
    p.add_argument("--transport", choices=["stdio", "streamable-http"], default="stdio",
                   help="stdio (default; what assistants launch) or streamable-http")
    p.add_argument("--listen", metavar="HOST:PORT", help=f"HTTP: the address to listen on (default "
                   f"127.0.0.1:{DEFAULT_PORT}, loopback), as the service's server.listen")
    # the older spelling of --listen, still read
    p.add_argument("--host", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    p.add_argument("--token-file", metavar="FILE", help="HTTP: the bearer token clients must send (else "
                   f"${TOKEN_ENV}); required beyond loopback")
    p.add_argument("--allowed-host", action="append", default=[], metavar="HOST[:PORT]",
                   help="HTTP: a Host header to accept besides this host's own names (repeatable)")
    p.add_argument("--thresholds", metavar="FILE", help="TOML file of pattern thresholds to use by default")
    p.add_argument("--state-dir", metavar="DIR", help="where graphs are kept between sessions "
                   "(default $WITTY_STATE_DIR, else $XDG_STATE_HOME/witty-profiler, else ~/.local/state/witty-profiler)")
    p.add_argument("--report-dir", metavar="DIR", help="the only folder generate_report writes files to "
                   "(default: reports/ in the state directory)")
    p.add_argument("--tool-timeout", type=_seconds, default=120.0, metavar="SECONDS",
                   help="a tool call still running after this long is answered with an error (default 120; "
                   "collect gets its window on top)")
    p.add_argument("--ssh-config", metavar="FILE", help="ssh -F FILE for collect's cluster hosts")
    p.add_argument("--ssh-option", action="append", default=[], metavar="OPT", help="ssh -o OPT (repeatable)")
    p.add_argument("--remote-command", default="witty-profiler", metavar="CMD",
                   help="how cluster hosts run witty-profiler (default witty-profiler)")
    p.add_argument("--kubectl", default="kubectl", metavar="PATH", help="the kubectl for kubectl_selector")
    p.add_argument("--prometheus", metavar="URL", help="the Prometheus whose past windows collect reads (past)")
    p.add_argument("--prometheus-match", metavar="SELECTOR", help="its series to read, e.g. '{job=\"node\"}'")
    p.add_argument("--prometheus-auth-file", metavar="FILE", help="its bearer token or user:password (or set "
                   "WITTY_PROMETHEUS_TOKEN)")
    p.add_argument("--services-file", metavar="FILE", help="running services (witty-profiler serve URLs, one per "
                   "line) whose windows collect pulls (services=latest|TIME|START..END); clients name no URL")
    p.add_argument("--services-token-file", metavar="FILE", help="their bearer token (or set WITTY_SERVICE_TOKEN)")
    p.add_argument("--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    return p


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return value


def listen_address(args: argparse.Namespace) -> tuple[str, int]:
    """--listen HOST:PORT, or the older --host/--port; loopback by default."""
    from witty_profiler.app.access import parse_listen
    if args.listen is not None:
        if args.host is not None or args.port is not None:
            raise InputError("give --listen HOST:PORT, or the older --host/--port, not both")
        return parse_listen(args.listen, "--listen", DEFAULT_PORT)
    return args.host or "127.0.0.1", DEFAULT_PORT if args.port is None else args.port


def serve_http(server: Any, host: str, port: int, log_level: str, token: str | None = None,
               extra_hosts: list[str] | None = None) -> None:
    """Streamable HTTP under /mcp behind the HTTP guard, with uvicorn's access log on stderr like every
    other log line."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings
    from uvicorn.config import LOGGING_CONFIG

    from witty_profiler.app.access import allowed_hosts, allowed_origins
    from witty_profiler.mcp_server.httpguard import HttpGuard
    hosts = allowed_hosts(host, port, extra_hosts or [])
    origins = allowed_origins(hosts)
    # the SDK turns its own DNS-rebinding check off for any address but loopback: given the lists, it keeps it
    app = server.streamable_http_app(host=host, transport_security=TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins))
    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["handlers"]["access"]["stream"] = "ext://sys.stderr"
    uvicorn.run(HttpGuard(app, hosts, origins, token), host=host, port=port, log_level=log_level.lower(),
                log_config=log_config)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=args.log_level, format="witty-mcp %(levelname)s %(message)s")
    if args.thresholds and not os.path.isfile(args.thresholds):
        print(f"witty-mcp: error: --thresholds {args.thresholds}: no such file", file=sys.stderr)
        return 2
    from witty_profiler.app.graphs import GraphStore
    from witty_profiler.cluster.collect import Launch
    from witty_profiler.mcp_server.server import build_server
    from witty_profiler.mcp_server.tools import WittyTools
    if args.services_file or args.services_token_file:
        from witty_profiler.cluster.services import parse_services, read_token
        try:  # read again at each call (the list may change); a list that cannot be read stops the start
            if not args.services_file:
                raise InputError("--services-token-file is the token of --services-file's services: give both")
            parse_services([], args.services_file)
            read_token(args.services_token_file, "--services-token-file")
        except InputError as exc:
            print(f"witty-mcp: error: {exc}", file=sys.stderr)
            return 2
    tools = WittyTools(GraphStore(Path(args.state_dir) if args.state_dir else None),
                       thresholds_path=os.path.abspath(args.thresholds) if args.thresholds else None,
                       report_dir=Path(args.report_dir) if args.report_dir else None,
                       launch=Launch(remote_command=args.remote_command, ssh_options=args.ssh_option,
                                     ssh_config=args.ssh_config, kubectl=args.kubectl),
                       prometheus=args.prometheus, prometheus_auth_file=args.prometheus_auth_file,
                       prometheus_match=args.prometheus_match,
                       services_file=os.path.abspath(args.services_file) if args.services_file else None,
                       services_token_file=os.path.abspath(args.services_token_file) if args.services_token_file
                       else None)
    server = build_server(tools, tool_timeout=args.tool_timeout)
    logging.getLogger().setLevel(args.log_level)  # the SDK configures INFO; ours wins
    try:
        if args.transport == "stdio":
            server.run("stdio")  # the SDK points fd 1 at stderr while it serves, so stray prints miss the wire
        else:
            from witty_profiler.app.access import check_bind, is_loopback, token_from
            host, port = listen_address(args)
            token = token_from(args.token_file, TOKEN_ENV, "--token-file")
            check_bind(host, token, f"--token-file or ${TOKEN_ENV}")
            if not is_loopback(host):
                logging.getLogger("witty-mcp").warning(
                    "listening on %s: every client that has the token can read this host's processes", host)
            serve_http(server, host, port, args.log_level, token, args.allowed_host)
    except KeyboardInterrupt:
        return 130
    except InputError as exc:
        print(f"witty-mcp: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
