"""Who may talk to an HTTP endpoint of ours: the listen address, loopback, and the bearer token.

One policy for every server the project runs (`witty-profiler serve`, `witty-mcp --transport
streamable-http`, `witty-profiler export --listen`): an address is given as HOST:PORT (`[v6]:PORT`,
or `:PORT` for loopback); loopback is decided by `ipaddress` (127.0.0.0/8, ::1) or the name
`localhost`, never by a prefix; an address beyond loopback needs a bearer token of at least 16
characters (the exporter, which Prometheus scrapes without one, needs --listen-public instead). A
token file is read as a small regular file (`topology.files.read_token_file`): a FIFO, a device or
/dev/zero is one sentence, never a hang. The HTTP middleware that applies the policy to each request is `mcp_server.httpguard`.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.files import read_token_file, token_from  # noqa: F401 - the policy's token readers

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def parse_listen(text: str, key: str, default_port: int) -> tuple[str, int]:
    """'HOST:PORT', '[v6]:PORT' or ':PORT' (loopback) -> (host, port); `key` names the option or setting."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"{key}: expected HOST:PORT such as 127.0.0.1:{default_port}, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def check_bind(host: str, token: str | None, how: str) -> None:
    """Refuse a listen address beyond loopback without a token (`how` says where a token comes from)."""
    if not is_loopback(host) and not token:
        raise InputError(f"listening on {host} lets other hosts read this host's processes: it needs a bearer "
                         f"token ({how}); or listen on 127.0.0.1")
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise InputError(f"the bearer token has {len(token)} characters; use at least {MIN_TOKEN_CHARS} "
                         f"(e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))')")


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> list[str]:
    """Host header values the server answers to: the loopback names, the address it listens on unless it
    is a wildcard, this host's own names when it listens beyond loopback, and `extra` (as given, or with
    the port added)."""
    names = list(LOOPBACK_NAMES)
    if host not in ("0.0.0.0", "::", ""):
        names.append(host)
    if not is_loopback(host):
        names += [socket.gethostname(), socket.getfqdn()]
    values = [f"{_bracketed(n)}:{port}" for n in dict.fromkeys(names)]
    for given in extra:
        values += [given] if given.rpartition(":")[2].isdigit() and not given.endswith("]") else [
            f"{_bracketed(given)}:{port}", given]
    return list(dict.fromkeys(values))


def allowed_origins(hosts: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    return list(dict.fromkeys([*(f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")), *extra]))
