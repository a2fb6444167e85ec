"""The HTTP middleware in front of our servers (`witty-mcp --transport streamable-http` and the service).

The policy it applies (listen addresses, loopback, the bearer token) is `app.access`. Whatever the
address, every request passes Host and Origin validation (DNS rebinding: a web page in a browser on
this host must not reach the server through a name that resolves to it), and, with a token,
`Authorization: Bearer <token>`.
"""

from __future__ import annotations

import hmac
import json


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
    """The refusal, and the connection closed after it: the request's body is never read, and a client
    that was refused gets no second try on the same connection."""
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close"), *headers]})
    await send({"type": "http.response.body", "body": body})
