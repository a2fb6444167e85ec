"""A small client for Prometheus's HTTP API (urllib only): range queries, time parsing, auth.

Answers are read as a stream (topology/jsonstream.py): a range query hands its series over one at a
time while the body is still arriving, so memory holds a chunk of the body and the series being
read, never the whole answer nor its parsed tree (an answer of 50 hosts' per-CPU series is tens of
MB of JSON).

Every failure a person can act on (a bad URL, a server that does not answer, an HTTP error, a
query Prometheus refuses) becomes one InputError line. Credentials come from a file or the
WITTY_PROMETHEUS_TOKEN environment variable, never from the command line, and never appear in a
message: errors name the server by its scheme, host and port only.
"""

from __future__ import annotations

import base64
import codecs
import http.client
import json
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from witty_profiler.topology.errors import InputError
from witty_profiler.topology.files import read_bytes
from witty_profiler.topology.jsonstream import JsonStream

MAX_POINTS = 11_000  # Prometheus refuses a range query with more points per series than this
# an answer's bounds: the largest real answers are ~110 MB (50 hosts' per-CPU series, BENCHMARKS.md) and
# one series of MAX_POINTS points is under 1 MB; a server that sends more, or drips, is cut off
MAX_ANSWER_BYTES = 512 << 20
MAX_SMALL_ANSWER_BYTES = 32 << 20  # instant queries, labels, targets: answers decoded whole
MAX_SERIES_CHARS = 16 << 20
ANSWER_DEADLINE_S = 300.0  # the whole transfer of one answer, however slowly it arrives
TOKEN_ENV = "WITTY_PROMETHEUS_TOKEN"
MAX_AUTH_BYTES = 64 << 10  # a token or user:password; not a file to read whole whatever its size
_RELATIVE = re.compile(r"^(?:now)?-(\d+(?:\.\d+)?)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str, now: float | None = None) -> float:
    """Unix seconds from RFC 3339 ('2026-12-03T09:00:00Z'), Unix seconds, 'now' or '-1h' / 'now-30m' (relative to now)."""
    now = time.time() if now is None else now
    value = str(text).strip()
    if value == "now":
        return now
    rel = _RELATIVE.match(value)
    if rel:
        return now - float(rel.group(1)) * _UNITS[rel.group(2)]
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise InputError(f"bad time {value!r}: give RFC 3339 (2026-12-03T09:00:00Z), Unix seconds, 'now' "
                         "or a relative time such as -1h") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=timezone.utc)
    return parsed.timestamp()


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).isoformat().replace("+00:00", "Z")


def auto_step(duration_s: float, least: float = 15.0) -> float:
    """The step of a window: `least` seconds, or more where the window would exceed MAX_POINTS per series."""
    return float(max(least, math.ceil(duration_s / (MAX_POINTS - 1))))


def read_auth(path: str | None, environ: dict[str, str] | None = None) -> str | None:
    """An Authorization header value from a file (a bearer token, or 'user:password' for basic auth, or a
    full 'Bearer ...'/'Basic ...' value) or from WITTY_PROMETHEUS_TOKEN (a bearer token)."""
    env = os.environ if environ is None else environ
    if path:
        try:  # a small regular file, or one line why not (not /dev/zero, not a FIFO)
            raw = read_bytes(path, "Prometheus auth file", MAX_AUTH_BYTES, InputError)
        except InputError as exc:
            raise InputError(f"cannot read the Prometheus auth file: {exc}") from None
        try:
            secret = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise InputError(f"the Prometheus auth file {path} is not UTF-8 text") from None
        if not secret:
            raise InputError(f"the Prometheus auth file {path} is empty")
    else:
        secret = env.get(TOKEN_ENV, "").strip()
        if not secret:
            return None
        return f"Bearer {secret}"
    if secret.split(" ", 1)[0] in ("Bearer", "Basic"):
        return secret
    if ":" in secret and "\n" not in secret:
        return "Basic " + base64.b64encode(secret.encode()).decode()
    return f"Bearer {secret}"


def server_name(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


@dataclass
class QueryStats:
    requests: int = 0
    bytes: int = 0
    seconds: float = 0.0  # waiting for and reading answers (not what the caller does with each series)
    series: int = 0
    points: int = 0
    queries: list[str] = field(default_factory=list)


class _Body:
    """The text of an HTTP answer, read in chunks as JsonStream asks: counts its bytes and the time spent
    reading, and turns a connection that breaks, stalls, drips past its deadline or sends more than its
    cap mid-answer into one InputError line."""

    def __init__(self, response: Any, stats: QueryStats, what: str, limit: int, deadline: float) -> None:
        self.response, self.stats, self.what = response, stats, what
        self.limit, self.deadline, self.read_bytes = limit, deadline, 0
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self._read = getattr(response, "read1", response.read)

    def read(self, size: int) -> str:
        started = time.perf_counter()
        try:
            while True:
                if time.monotonic() > self.deadline:
                    raise InputError(f"{self.what} did not end within {ANSWER_DEADLINE_S:g} s (a stalled or "
                                     "dripping server)")
                # read1: what has arrived (up to size), not `size` bytes however long they take to drip in
                data = self._read(size)
                self.stats.bytes += len(data)
                self.read_bytes += len(data)
                if self.read_bytes > self.limit:
                    raise InputError(f"{self.what} is larger than {self.limit >> 20} MiB: refused (narrow the "
                                     "query with --match or a shorter window)")
                if not data and getattr(self.response, "length", None):  # Content-Length not reached
                    raise http.client.IncompleteRead(b"", self.response.length)
                text = self._decode(data, final=not data)
                if text or not data:  # a chunk may end inside a character: read on
                    return text
        except (OSError, http.client.HTTPException) as e:
            raise InputError(f"{self.what} broke off: {e or type(e).__name__}") from None
        finally:
            self.stats.seconds += time.perf_counter() - started


class _Answer(JsonStream):
    def __init__(self, body: _Body, server: str, path: str) -> None:
        super().__init__(body, f"/api/v1/{path}", max_value=MAX_SERIES_CHARS)
        self.server, self.path = server, path

    def invalid(self, what: str) -> Exception:
        if what.startswith("a value longer than"):
            return InputError(f"the answer of Prometheus at {self.server} to /api/v1/{self.path} holds {what}: "
                              "refused")
        return InputError(f"{self.server} did not answer /api/v1/{self.path} with JSON: is it a Prometheus server?")


class SameOriginRedirect(urllib.request.HTTPRedirectHandler):
    """Redirects keep the credentials only within the origin (scheme, host and port) they were given for:
    a server that sends the client elsewhere does not receive the token there."""

    def __init__(self, auth: str | None) -> None:
        self.auth = auth

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and self.auth and origin(newurl) == origin(req.full_url):
            new.add_unredirected_header("Authorization", self.auth)
        return new


def origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(parts.scheme)

class PrometheusAPI:
    def __init__(self, url: str, auth: str | None = None, timeout_s: float = 30.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"bad Prometheus URL {server_name(url) if parts.scheme else url!r}: "
                             "give http(s)://host:port")
        if parts.username or parts.password:
            raise InputError("credentials in the Prometheus URL are refused: put them in --prometheus-auth-file "
                             f"or {TOKEN_ENV}")
        self.base = url.rstrip("/")
        self.name = server_name(url)
        self._auth = auth
        self.timeout_s = timeout_s
        self.stats = QueryStats()
        self._opener = urllib.request.build_opener(SameOriginRedirect(auth))

    def __repr__(self) -> str:  # never shows the credentials
        return f"PrometheusAPI({self.name})"

    @contextmanager
    def _answer(self, path: str, params: dict[str, Any], limit: int | None = None) -> Iterator[_Answer]:
        """GET /api/v1/<path>: its body as a JSON stream, else one InputError line."""
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self._auth:  # unredirected: a redirect carries it only within the origin (SameOriginRedirect)
            request.add_unredirected_header("Authorization", self._auth)
        started = time.perf_counter()
        deadline = time.monotonic() + ANSWER_DEADLINE_S
        try:
            response = self._opener.open(request, timeout=self.timeout_s)
        except urllib.error.HTTPError as e:
            detail = _error_of(e.read()) or e.reason
            raise InputError(f"Prometheus at {self.name} answered HTTP {e.code} to /api/v1/{path}: {detail}") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
            reason = getattr(e, "reason", e)
            raise InputError(f"cannot reach Prometheus at {self.name}: {reason}") from None
        finally:
            self.stats.requests += 1
            self.stats.seconds += time.perf_counter() - started
        with response:
            yield _Answer(_Body(response, self.stats, f"the answer of Prometheus at {self.name} to /api/v1/{path}",
                                MAX_ANSWER_BYTES if limit is None else limit, deadline), self.name, path)

    def _refused(self, path: str, status: Any, error: Any) -> InputError:
        return InputError(f"Prometheus at {self.name} refused /api/v1/{path}: {error or status or 'no status'}")

    def get(self, path: str, params: dict[str, Any]) -> Any:
        """GET /api/v1/<path> -> the `data` of a success answer, else one InputError line. For small answers
        (instant queries, labels): `data` is decoded whole."""
        with self._answer(path, params, MAX_SMALL_ANSWER_BYTES) as answer:
            doc = answer.value()
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise self._refused(path, None, doc.get("error", doc.get("status")) if isinstance(doc, dict) else
                                "bad answer")
        return doc.get("data")

    def range_series(self, query: str, start: float, end: float, step: float) -> Iterator[tuple[dict, list]]:
        """The series of a range query as the answer arrives: (labels, [(t, value), ...]) one at a time,
        NaN values left out. A step that would give a series more than MAX_POINTS points is refused."""
        if (end - start) / step + 1 > MAX_POINTS:
            raise InputError(f"step {step:g} s is too small for a {end - start:g} s window: at most {MAX_POINTS} "
                             f"points per series (use --step {auto_step(end - start, step):g} or more)")
        self.stats.queries.append(query)
        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        status = error = None
        with self._answer("query_range", params) as answer:
            for key in answer.members():
                if key == "status":
                    status = answer.value()
                    if status != "success":  # Prometheus writes the status first: stop before any data
                        error = status
                elif key == "data" and status in (None, "success"):
                    for item in _result(answer):
                        labels, values = _series(item, f"Prometheus at {self.name} answered {query!r} with")
                        self.stats.series += 1
                        self.stats.points += len(values)
                        yield labels, values
                elif key == "error":
                    error = answer.value()
                else:
                    answer.value()  # resultType, warnings, a data after an error status
        if status != "success":
            raise self._refused("query_range", status, error)

    def query_range(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """[{metric: labels, values: [(t, float), ...]}] of a range query, whole: for small answers."""
        return [{"metric": labels, "values": values} for labels, values in self.range_series(query, start, end, step)]


def _series(item: dict[str, Any], said: str) -> tuple[dict[str, str], list[tuple[float, float]]]:
    """A range query's series as (labels, [(t, value)]), its shape checked: labels of strings, values of
    [time, "number"] pairs; NaN and infinite values left out (a stale marker, a division by zero)."""
    labels = item.get("metric") or {}
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
        raise InputError(f"{said} a series whose 'metric' is not an object of string labels")
    raw = item.get("values")
    raw = [] if raw is None else raw
    if not isinstance(raw, list):
        raise InputError(f"{said} a series whose 'values' is not an array")
    values = []
    for pair in raw:
        try:
            t, v = pair
            t, v = float(t), float(v)
        except (TypeError, ValueError):
            raise InputError(f"{said} a series of {labels.get('__name__', 'no name')!r} whose 'values' holds "
                             f"{str(pair)[:60]!r}, not [time, \"number\"]") from None
        if math.isfinite(v) and math.isfinite(t):
            values.append((t, v))
    return labels, values


def _result(answer: _Answer) -> Iterator[dict[str, Any]]:
    """The items of data.result, a few at a time as the stream decodes them."""
    for key in answer.members():
        if key != "result":
            answer.value()
            continue
        if answer.peek() != "[":
            raise answer.invalid("data.result is not an array")
        for batch in answer.batches():
            for item in batch:
                if not isinstance(item, dict):
                    raise answer.invalid("a series that is not an object")
                yield item


def _error_of(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc.get("error") if isinstance(doc, dict) else None
