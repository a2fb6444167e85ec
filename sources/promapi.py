"""A small client for Prometheus's HTTP API (urllib only): range queries, time parsing, auth.

Every failure a person can act on (a bad URL, a server that does not answer, an HTTP error, a
query Prometheus refuses) becomes one InputError line. Credentials come from a file or the
WITTY_PROMETHEUS_TOKEN environment variable, never from the command line, and never appear in a
message: errors name the server by its scheme, host and port only.
"""

from __future__ import annotations

import base64
import json
import math
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from witty_profiler.topology.errors import InputError

MAX_POINTS = 11_000  # Prometheus refuses a range query with more points per series than this
TOKEN_ENV = "WITTY_PROMETHEUS_TOKEN"
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
        try:
            with open(path, encoding="utf-8") as f:
                secret = f.read().strip()
        except OSError as e:
            raise InputError(f"cannot read the Prometheus auth file {path}: {e.strerror}") from None
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


def _server_name(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


@dataclass
class QueryStats:
    requests: int = 0
    bytes: int = 0
    seconds: float = 0.0
    series: int = 0
    points: int = 0
    queries: list[str] = field(default_factory=list)


class PrometheusAPI:
    def __init__(self, url: str, auth: str | None = None, timeout_s: float = 30.0) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InputError(f"bad Prometheus URL {_server_name(url) if parts.scheme else url!r}: "
                             "give http(s)://host:port")
        if parts.username or parts.password:
            raise InputError("credentials in the Prometheus URL are refused: put them in --prometheus-auth-file "
                             f"or {TOKEN_ENV}")
        self.base = url.rstrip("/")
        self.name = _server_name(url)
        self._auth = auth
        self.timeout_s = timeout_s
        self.stats = QueryStats()

    def __repr__(self) -> str:  # never shows the credentials
        return f"PrometheusAPI({self.name})"

    def get(self, path: str, params: dict[str, Any]) -> Any:
        """GET /api/v1/<path> -> the `data` of a success answer, else one InputError line."""
        url = f"{self.base}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self._auth:
            request.add_header("Authorization", self._auth)
        started = time.perf_counter()
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                body = response.read()
        except urllib.error.HTTPError as e:
            detail = _error_of(e.read()) or e.reason
            raise InputError(f"Prometheus at {self.name} answered HTTP {e.code} to /api/v1/{path}: {detail}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise InputError(f"cannot reach Prometheus at {self.name}: {reason}") from None
        finally:
            self.stats.requests += 1
            self.stats.seconds += time.perf_counter() - started
        self.stats.bytes += len(body)
        try:
            doc = json.loads(body)
        except ValueError:
            raise InputError(f"{self.name} did not answer /api/v1/{path} with JSON: is it a Prometheus server?") \
                from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            raise InputError(f"Prometheus at {self.name} refused /api/v1/{path}: "
                             f"{(doc or {}).get('error', 'no status') if isinstance(doc, dict) else 'bad answer'}")
        return doc.get("data")

    def query_range(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """[{metric: labels, values: [(t, float), ...]}] of a range query (step keeps points ≤ MAX_POINTS)."""
        if (end - start) / step + 1 > MAX_POINTS:
            raise InputError(f"step {step:g} s is too small for a {end - start:g} s window: at most {MAX_POINTS} "
                             f"points per series (use --step {auto_step(end - start, step):g} or more)")
        data = self.get("query_range", {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}"})
        self.stats.queries.append(query)
        out = []
        for item in (data or {}).get("result", []):
            values = [(float(t), float(v)) for t, v in item.get("values", [])]
            values = [(t, v) for t, v in values if not math.isnan(v)]
            out.append({"metric": item.get("metric", {}), "values": values})
            self.stats.series += 1
            self.stats.points += len(values)
        return out


def _error_of(body: bytes) -> str | None:
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    return doc.get("error") if isinstance(doc, dict) else None
