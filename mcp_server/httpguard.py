"""Who may talk to an HTTP endpoint of ours (`witty-mcp --transport streamable-http` and the service).

Loopback by default. Any other listen address needs a bearer token (a file, or an environment
variable); without one the server refuses to start. Whatever the address, every request passes
Host and Origin validation (DNS rebinding: a web page in a browser on this host must not reach the
server through a name that resolves to it), and, with a token, `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import socket
from collections.abc import Iterable
from pathlib import Path

from witty_profiler.topology.errors import InputError

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
MIN_TOKEN_CHARS = 16


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_token_file(path: str, what: str) -> str:
    """The bearer token held in a file (`what` names where the path was given); empty or unreadable: InputError."""
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{what} {path}: cannot read it ({exc})") from None
    if not token:
        raise InputError(f"{what} {path}: is empty")
    return token


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


class HttpGuard:
    """ASGI middleware in front of the whole app: Host, then Origin, then the bearer token."""

    def __init__(self, app, hosts: list[str], origins: list[str], token: str | None) -> None:
        self.app, self.hosts, self.origins = app, set(hosts), set(origins)
        self._token = token.encode() if token else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":  # lifespan: nothing to check
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        host, origin = headers.get("host", ""), headers.get("origin")
        if host not in self.hosts:
            await _refuse(send, 421, f"Host {host!r} is not one this server answers to (DNS rebinding "
                                     f"protection); allow it in server.allowed_hosts")
            return
        if origin is not None and origin not in self.origins:
            await _refuse(send, 403, f"Origin {origin!r} is not allowed; allow it in server.allowed_origins")
            return
        if self._token is not None:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
                await _refuse(send, 401, "a valid bearer token is required (Authorization: Bearer <token>)",
                              [(b"www-authenticate", b'Bearer realm="witty-profiler"')])
                return
        await self.app(scope, receive, send)


async def _refuse(send, status: int, message: str, headers: list[tuple[bytes, bytes]] = ()) -> None:
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})
