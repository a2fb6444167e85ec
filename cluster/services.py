"""Windows pulled from running services: every node runs `witty-profiler serve`, which keeps a ring of its
recent windows; `cluster collect --services URL...` fetches one window of each into DIR/<host>.json with
the manifest DIR/cluster.json, the directory `cluster diagnose` reads.

Which window of each service (`Pick`):
- the latest (the default);
- the one covering a time (`--at TIME`): the window whose start..end holds it, else (TIME fell in the
  moment between two windows, while the service diagnosed and stored the previous one) the nearest one
  within GAP_S, the manifest row saying how far it is; none nearer: the host has no graph;
- one of a span (`--past START..END`): the window most of which lies in the span, the newest of equals
  (so the newest window wholly inside it, where there is one). Not the span's windows merged: a host's
  windows merged would add up its counters but keep only the last window's gauges and percentiles
  (topology.merge), which describes no real stretch of time; and the cross-host patterns compare the
  hosts over one window each, which one window per host taken near the same time gives.

Each service is asked for its window list (GET /api/v1/graphs), then the chosen window's graph (GET
/api/v1/graphs/{id}). The bearer token (`--token-file`, else $WITTY_SERVICE_TOKEN, as the service itself
reads it; never on the command line) goes to the URLs given, and follows a redirect only within the same
origin. Each service has one deadline for the whole exchange (`--timeout`, default SERVICE_DEADLINE_S),
and its answers a size cap (read as they arrive, so a dripping or endless server is cut off). A service
that cannot be reached, refuses (401, 403, 421), answers with something that is not a window list or a
graph that does not validate, or is too large, is a manifest row with one line why; the others are kept.

A graph's host is the one its meta.hosts names (the service's `--host`, default its hostname), not the
URL's: a URL may be an address, a tunnel or a proxy. Two services naming the same host keep the first's
graph and make the second a failed row. A service without a graph is named in the manifest by its URL's
host, port and path.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from witty_profiler.cluster.fanout import CANCELLED, HostResult
from witty_profiler.sources.promapi import SameOriginRedirect, origin, server_name
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.windows import SERVICE_TOKEN_ENV, is_window_id

SERVICE_DEADLINE_S = 120.0  # one service: its window list and its graph, however slowly they arrive
CONNECT_TIMEOUT_S = 10.0  # a connection, and each wait for more of an answer
MAX_WINDOW_MB = 256  # the service's default ring cap (storage.ring_max_mb): no window it keeps is larger
MAX_LIST_BYTES = 32 << 20  # a window list: ~1 KB per window, a few hundred windows
MAX_ERROR_BYTES = 64 << 10
MAX_SERVICES_FILE_BYTES = 16 << 20
GAP_S = 10.0  # --at: how far from the time a window may end or start when none covers it
VALIDATING_AT_ONCE = 2  # graphs parsed and validated at once (memory: several times the file each)
_CHUNK = 1 << 20
_validating = threading.BoundedSemaphore(VALIDATING_AT_ONCE)


def token_env() -> str:
    """The environment variable of the service's bearer token (the service reads the same one)."""
    return SERVICE_TOKEN_ENV


# -- which services ------------------------------------------------------------------------------
def check_url(url: str) -> str:
    """A service's base URL, http(s)://host[:port][/prefix] without a trailing '/', or an InputError."""
    given = url.strip()
    try:
        parts = urllib.parse.urlsplit(given)
        parts.port  # noqa: B018 - raises ValueError for a port out of range or not a number
    except ValueError:
        raise InputError(f"bad service URL {given[:200]!r}: give http(s)://host:port") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"bad service URL {given[:200]!r}: give http(s)://host:port, e.g. http://gpu01:18090")
    if parts.username or parts.password:
        raise InputError("credentials in a service URL are refused: put the token in --token-file or "
                         f"${token_env()}")
    if parts.query or parts.fragment:
        raise InputError(f"bad service URL {given[:200]!r}: no query or fragment; the base URL of the service")
    if any(c.isspace() or not c.isprintable() for c in given):
        raise InputError(f"bad service URL {given[:200]!r}: it holds a space or a control character")
    return given.rstrip("/")


def parse_services(urls: list[str] | None = None, services_file: str | None = None) -> list[str]:
    """--services URL... and/or --services-file F (one URL per line, '#' comments), each once, in order."""
    found = [u for u in urls or [] if u.strip()]
    if services_file:
        from witty_profiler.topology.files import read_utf8
        text = read_utf8(services_file, "services file", MAX_SERVICES_FILE_BYTES, "services file")
        for line in text.splitlines():
            words = line.split("#", 1)[0].split()
            if len(words) > 1:
                raise InputError(f"{services_file}: {line.strip()[:120]!r}: one URL per line")
            found += words
    checked = list(dict.fromkeys(check_url(u) for u in found))
    if not checked:
        raise InputError("no services: give --services URL [URL...] or --services-file FILE (one URL per line)")
    return checked


def label(url: str) -> str:
    """A service's name where it gave no graph: host[:port][/path] of its URL."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "?").lower()
    host = f"[{host}]" if ":" in host else host
    return host + (f":{parts.port}" if parts.port else "") + parts.path.rstrip("/")


def read_token(token_file: str | None, what: str = "--token-file") -> str | None:
    """The bearer token: `token_file`, else $WITTY_SERVICE_TOKEN; None when neither is set. One line of
    printable characters without spaces (it goes into a header)."""
    from witty_profiler.topology.files import token_from
    token = token_from(token_file, token_env(), what)
    if token is not None and (not token.isprintable() or any(c.isspace() for c in token) or not token.isascii()):
        where = f"{what} {token_file}" if token_file else f"${token_env()}"
        raise InputError(f"{where}: the token must be one word of printable ASCII on one line")
    return token


# -- which window --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """A window as the service lists it."""

    window_id: str
    start: float | None
    end: float | None


@dataclass(frozen=True)
class Pick:
    """Which window of each service: the latest, the one covering `at`, or one of `start`..`end`."""

    at: float | None = None
    start: float | None = None
    end: float | None = None

    @classmethod
    def parse(cls, at: str | None = None, past: str | None = None) -> "Pick":
        """--at TIME or --past START..END (END default now); times as `collect --start` takes them."""
        from witty_profiler.sources.promapi import parse_time
        if at is not None and past is not None:
            raise InputError("give --at TIME or --past START..END, not both")
        if at is not None:
            return cls(at=parse_time(at))
        if past is not None:
            first, sep, last = past.partition("..")
            if not first.strip():
                raise InputError(f"bad span {past!r}: give START..END, e.g. -30m..now or "
                                 "2026-12-03T09:00:00Z..2026-12-03T09:30:00Z")
            now = time.time()
            start, end = parse_time(first, now), parse_time(last if sep and last.strip() else "now", now)
            if not start < end:
                raise InputError(f"bad span {past!r}: its start must come before its end")
            return cls(start=start, end=end)
        return cls()

    @classmethod
    def of(cls, text: str) -> "Pick":
        """One string, as MCP's collect takes it: 'latest', a TIME, or START..END."""
        text = text.strip()
        if text in ("", "latest"):
            return cls()
        return cls.parse(past=text) if ".." in text else cls.parse(at=text)

    def describe(self) -> str:
        if self.at is not None:
            return f"the window at {_iso(self.at)}"
        if self.start is not None and self.end is not None:
            return f"a window of {_iso(self.start)}..{_iso(self.end)}"
        return "the latest window"

    def choose(self, windows: list[Window]) -> tuple[Window, str]:
        """The window picked among `windows` (newest first) and a note for the manifest; InputError (one
        line why) when none fits."""
        if not windows:
            raise InputError("the service has no window yet (GET /api/v1/status says when its first ends)")
        if self.at is None and self.start is None:
            return windows[0], ""
        timed = [(w.start, w.end, w) for w in windows if w.start is not None and w.end is not None]
        held = (f"; its {len(timed)} windows run from {_iso(min(t[0] for t in timed))} to "
                f"{_iso(max(t[1] for t in timed))}" if timed else "; none of its windows says when it ran")
        if self.at is not None:
            at = self.at
            for start, end, w in timed:
                if start <= at <= end:
                    return w, ""
            apart = sorted(((start - at if at < start else at - end), at < start, w.window_id, w)
                           for start, end, w in timed)
            if apart and apart[0][0] <= GAP_S:
                off, before, _, w = apart[0]
                return w, f"no window covers {_iso(at)}: the nearest {'starts' if before else 'ends'} {off:.1f} s " \
                          "from it"
            raise InputError(f"no window covers {_iso(at)}{held}")
        assert self.start is not None and self.end is not None
        inside = [(min(end, self.end) - max(start, self.start), w) for start, end, w in timed]
        inside = [(o, w) for o, w in inside if o > 0]
        if not inside:
            raise InputError(f"no window in {_iso(self.start)}..{_iso(self.end)}{held}")
        best = max(o for o, _ in inside)
        chosen = next(w for o, w in inside if o == best)  # newest first: the newest of equals
        return chosen, f"1 of {len(inside)} windows in the span" if len(inside) > 1 else ""


def _iso(ts: float) -> str:
    """RFC 3339 to the millisecond, as the services write their windows' times."""
    from datetime import datetime, timezone
    text = datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds")
    return text.replace(".000+00:00", "Z").replace("+00:00", "Z")


def _seconds(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    from witty_profiler.sources.promapi import parse_time
    try:
        return parse_time(text)
    except InputError:
        return None


def windows_of(doc: Any) -> list[Window]:
    """The windows of a GET /api/v1/graphs answer, newest first; InputError if it is not one."""
    items = doc.get("windows") if isinstance(doc, dict) else None
    if not isinstance(items, list) or not all(isinstance(w, dict) and is_window_id(w.get("window_id")) for w in items):
        raise InputError("its answer to GET /api/v1/graphs is not a window list (is it a witty-profiler service?)")
    found = []
    for w in items:
        start, duration = _seconds(w.get("started_at")), w.get("duration_s")
        ok = isinstance(duration, (int, float)) and not isinstance(duration, bool) and math.isfinite(duration) \
            and duration >= 0 and start is not None
        found.append(Window(w["window_id"], start, start + duration if ok else None))  # type: ignore[operator]
    return sorted(found, key=lambda w: (w.start is not None, w.start or 0.0, w.window_id), reverse=True)


# -- one service ---------------------------------------------------------------------------------
class Failed(Exception):
    """A service gives no graph: `status` (failed, timeout, cancelled) and one line why."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class Client:
    """GETs of one service, within one deadline for all of them, each answer capped in size."""

    def __init__(self, url: str, token: str | None, deadline_s: float, stop: threading.Event | None = None) -> None:
        self.url, self.token, self.deadline_s = url, token, deadline_s
        self.auth = f"Bearer {token}" if token else None
        self.ends = time.monotonic() + deadline_s
        self.stop = stop
        self.opener = urllib.request.build_opener(SameOriginRedirect(self.auth))

    def _left(self) -> float:
        if self.stop is not None and self.stop.is_set():
            raise Failed("cancelled", CANCELLED)
        left = self.ends - time.monotonic()
        if left <= 0:
            raise Failed("timeout", f"no answer within {self.deadline_s:g} s (a stalled or dripping service)")
        return left

    def get(self, path: str, limit: int) -> bytes:
        request = urllib.request.Request(self.url + path, headers={"Accept": "application/json"})
        if self.auth:  # unredirected: another origin never receives it (SameOriginRedirect)
            request.add_unredirected_header("Authorization", self.auth)
        try:
            response = self.opener.open(request, timeout=min(CONNECT_TIMEOUT_S, self._left()))
        except urllib.error.HTTPError as e:
            with e:
                reason = self._refusal(e.code, path, _error_of(e))
                if origin(e.geturl() or request.full_url) != origin(request.full_url):
                    reason += f" (after a redirect to {server_name(e.geturl())}, which the token is not sent to)"
                raise Failed("failed", reason) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
            raise self._broken(e, "cannot reach the service") from None
        with response:
            declared = response.headers.get("Content-Length")
            if declared is not None and declared.isdigit() and int(declared) > limit:
                raise Failed("failed", f"{path} is {_mib(int(declared))}, more than the {_mib(limit)} allowed "
                             "(--max-mb)")
            data = bytearray()
            read = getattr(response, "read1", response.read)
            try:
                while True:
                    self._left()
                    chunk = read(_CHUNK)  # what has arrived: a dripping server is cut off at the deadline
                    if not chunk:
                        if getattr(response, "length", None):  # Content-Length not reached
                            raise http.client.IncompleteRead(bytes(data), response.length)
                        break
                    data += chunk
                    if len(data) > limit:
                        raise Failed("failed", f"{path} is more than the {_mib(limit)} allowed (--max-mb)")
            except (OSError, http.client.HTTPException) as e:
                raise self._broken(e, f"{path} broke off") from None
        return bytes(data)

    def _broken(self, e: BaseException, what: str) -> Failed:
        reason = getattr(e, "reason", None) or e
        if isinstance(reason, TimeoutError) or "timed out" in str(reason):
            self._left()  # past the deadline: that is the reason
            return Failed("timeout", f"{what}: no answer within {CONNECT_TIMEOUT_S:g} s")
        text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
        return Failed("failed", f"{what}: {text}")

    def _refusal(self, code: int, path: str, error: str) -> str:
        said = f": {error}" if error else ""
        if code == 401:
            sent = "the token sent was refused" if self.token else "no token was sent"
            return f"refused: HTTP 401, {sent} (give the service's token in --token-file or ${token_env()})"
        if code == 403:
            return f"refused: HTTP 403{said}"
        if code == 421:
            return f"refused: HTTP 421, the service does not answer to this URL's host (its server.allowed_hosts){said}"
        if code == 404 and path == "/api/v1/graphs":
            return f"HTTP 404 to {path}: not a witty-profiler service at this URL{said}"
        return f"HTTP {code} to {path}{said}"


def _error_of(e: urllib.error.HTTPError) -> str:
    """The service's {"error": sentence}, if its answer is one (read up to MAX_ERROR_BYTES)."""
    try:
        doc = json.loads(e.read(MAX_ERROR_BYTES))
    except (ValueError, OSError, http.client.HTTPException):
        return ""
    error = doc.get("error") if isinstance(doc, dict) else None
    return error[:300] if isinstance(error, str) else ""


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n} bytes"


class Claims:
    """Host names already given a file in this collection, so that a second service naming the same host
    does not replace the first's graph."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by: dict[str, str] = {}

    def claim(self, host: str, service: str) -> str | None:
        """None if `host` is now `service`'s; else the service that has it."""
        with self._lock:
            first = self._by.setdefault(host, service)
        return None if first == service else first


def pull_one(url: str, directory: Path, pick: Pick, token: str | None, deadline_s: float, max_bytes: int,
             claims: Claims, stop: threading.Event | None = None) -> tuple[HostResult, float | None]:
    """One service's chosen window into DIR/<host>.json, or a row saying why not; and the window's length."""
    started = time.monotonic()
    name = label(url)
    client = Client(url, token, deadline_s, stop)
    window: Window | None = None
    try:
        raw = client.get("/api/v1/graphs", MAX_LIST_BYTES)
        try:
            doc = json.loads(raw)
        except (ValueError, RecursionError):
            raise InputError("its answer to GET /api/v1/graphs is not JSON (is it a witty-profiler service?)") \
                from None
        window, note = pick.choose(windows_of(doc))
        data = client.get(f"/api/v1/graphs/{urllib.parse.quote(window.window_id, safe='')}", max_bytes)
        client._left()
        host = _keep(data, window.window_id, name, directory, claims)
    except (Failed, InputError) as exc:
        status, reason = (exc.status, exc.reason) if isinstance(exc, Failed) else ("failed", str(exc))
        return HostResult(name, status, reason, seconds=_since(started), source=url,
                          window=window.window_id if window else None), None
    length = window.end - window.start if window.start is not None and window.end is not None else None
    return HostResult(host, "ok", note, str(directory / f"{host}.json"), _since(started), source=url,
                      window=window.window_id), length


def _keep(data: bytes, window_id: str, name: str, directory: Path, claims: Claims) -> str:
    """Validate a window's graph and write it as DIR/<host>.json (whole or not at all); its host."""
    from witty_profiler.topology.ids import check_host_name
    from witty_profiler.topology.io import loads_graph
    with _validating:
        try:
            graph = loads_graph(data, f"window {window_id}")
        except InputError as exc:
            raise InputError(f"its window is not a valid graph ({exc})") from None
        hosts = list(graph.meta.hosts)
        del graph
    if len(hosts) != 1:
        raise InputError(f"window {window_id} is a graph of {len(hosts)} hosts, not of one")
    try:
        host = check_host_name(hosts[0])
    except InputError as exc:
        raise InputError(f"window {window_id}: {exc}") from None
    if host.strip(".") == "":
        raise InputError(f"window {window_id}: host name {host!r} cannot name a file")
    other = claims.claim(host, name)
    if other is not None:
        raise InputError(f"its window names host {host}, as {other}'s does: give each service its own host name "
                         "(serve --host NAME)")
    target = directory / f"{host}.json"
    aside = directory / f".{host}.json.part"
    aside.write_bytes(data)
    os.replace(aside, target)
    return host


def _since(start: float) -> float:
    return round(time.monotonic() - start, 3)


def pull(urls: list[str], directory: Path, pick: Pick, token: str | None, parallel: int = 32,
         deadline_s: float | None = None, max_bytes: int = MAX_WINDOW_MB << 20,
         progress: Callable[[HostResult], None] | None = None,
         stop: threading.Event | None = None) -> tuple[list[HostResult], float]:
    """Every service's window (at most `parallel` at once), each within its deadline: a row per service, and
    the longest window pulled (0 without one)."""
    deadline_s = SERVICE_DEADLINE_S if deadline_s is None else deadline_s
    claims, lock = Claims(), threading.Lock()

    def one(url: str) -> tuple[HostResult, float | None]:
        if stop is not None and stop.is_set():
            done: tuple[HostResult, float | None] = (HostResult(label(url), "cancelled", CANCELLED, source=url), None)
        else:
            done = pull_one(url, directory, pick, token, deadline_s, max_bytes, claims, stop)
        if progress:
            with lock:
                progress(done[0])
        return done

    with ThreadPoolExecutor(max(1, min(parallel, len(urls) or 1)), thread_name_prefix="witty service") as pool:
        done = list(pool.map(one, urls))
    return [r for r, _ in done], max((length for _, length in done if length is not None), default=0.0)
