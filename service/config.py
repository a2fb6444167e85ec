"""The service's settings: defaults, then a config file (TOML or JSON), then the command line.

A file has four tables; every key is optional, an unknown key or a bad value is one sentence naming
the key (`InputError`, exit 2):

    [collection]  collectors, window_s, interval_s, pids, job, host
    [diagnosis]   thresholds (a TOML file, or a table of overrides), trigger_priority, trigger_patterns
    [server]      listen ("127.0.0.1:18090"), token_file, allowed_hosts, allowed_origins, max_connections,
                  header_timeout_s, body_timeout_s, max_body_mb (what one client may take: limits.py)
    [storage]     state_dir, ring_windows, ring_max_mb, kept_windows, kept_max_mb

`witty-profiler serve --dump-config` prints the settings in force, as JSON, which this module reads back.
File names in a file (thresholds, token_file, state_dir) are relative to that file's folder.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from witty_profiler.app.access import parse_listen, token_from
from witty_profiler.topology.windows import SERVICE_TOKEN_ENV
from witty_profiler.collectors.window import MAX_DURATION_S
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.files import MAX_SMALL_BYTES, read_utf8

DEFAULT_PORT = 18090
PRIORITIES = ("P0", "P1", "P2", "off")
TOKEN_ENV = SERVICE_TOKEN_ENV
MAX_REQUEST_S = 3600  # the longest a request's head or body may take to arrive, whatever the config says
MAX_BODY_MB = 1024


@dataclass
class Collection:
    # eBPF is compiled once and kept between windows (collectors/lib/bpfcache.py), but windows back to back would
    # keep its probes attached all the time: every futex call of the host pays about a microsecond, every
    # other syscall ~0.2 us (BENCHMARKS.md). A one-off `collect` keeps it; a site adds it with collectors = []
    collectors: list[str] = field(default_factory=lambda: ["-ebpf"])
    window_s: float = 60.0
    interval_s: float = 10.0
    pids: list[int] = field(default_factory=list)
    job: str | None = None
    host: str | None = None


@dataclass
class Diagnosis:
    thresholds: str | dict[str, Any] | None = None
    trigger_priority: str = "P0"  # keep the window where a finding this urgent (or more) starts; "off"
    trigger_patterns: list[str] = field(default_factory=list)  # only these pattern ids trigger (empty: any)


@dataclass
class Server:
    listen: str = f"127.0.0.1:{DEFAULT_PORT}"
    token_file: str | None = None
    allowed_hosts: list[str] = field(default_factory=list)  # Host header values besides the listen address
    allowed_origins: list[str] = field(default_factory=list)
    max_connections: int = 100  # open at once; one more is answered 503 (keep it well below ulimit -n)
    header_timeout_s: float = 10.0  # a request's line and headers must arrive within this
    body_timeout_s: float = 30.0  # and its body within this after them
    max_body_mb: float = 1.0  # a larger request body is answered 413


@dataclass
class Storage:
    state_dir: str | None = None
    ring_windows: int = 60
    ring_max_mb: float = 256.0
    kept_windows: int = 100
    kept_max_mb: float = 512.0


@dataclass
class ServiceConfig:
    collection: Collection = field(default_factory=Collection)
    diagnosis: Diagnosis = field(default_factory=Diagnosis)
    server: Server = field(default_factory=Server)
    storage: Storage = field(default_factory=Storage)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def listen_address(self) -> tuple[str, int]:
        return parse_listen(self.server.listen, "server.listen", DEFAULT_PORT)

    def state_path(self) -> Path:
        if self.storage.state_dir:
            return Path(self.storage.state_dir).expanduser()
        from witty_profiler.app.graphs import state_dir
        return state_dir()


TABLES = {f.name: f.type for f in fields(ServiceConfig)}


def read_file(path: str) -> dict[str, Any]:
    """A config file as a mapping: TOML by default, JSON when it ends in .json."""
    p = Path(path)
    # a regular file of a sane size: not a FIFO that never ends or a device
    text = read_utf8(p, "config file", MAX_SMALL_BYTES, "--config")
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"--config {path}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    else:
        import tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise InputError(f"--config {path}: not valid TOML ({exc})") from None
    if not isinstance(data, dict):
        raise InputError(f"--config {path}: expected a table of settings at the top")
    return data


def from_mapping(data: dict[str, Any], where: str = "config") -> ServiceConfig:
    """Settings from a mapping of tables (a file, or --dump-config's output); each value checked."""
    config = ServiceConfig()
    for table, values in data.items():
        if table not in TABLES:
            raise InputError(f"{where}: unknown table {table!r}; the tables are {', '.join(TABLES)}")
        if not isinstance(values, dict):
            raise InputError(f"{where}: {table} must be a table of settings, found {type(values).__name__}")
        section = getattr(config, table)
        known = {f.name for f in fields(section)}
        for key, value in values.items():
            if key not in known:
                raise InputError(f"{where}: unknown key {table}.{key}; {table} has {', '.join(sorted(known))}")
            setattr(section, key, value)
    return check(config, where)


def _is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _str_list(value: Any, key: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{key}: expected a list of strings, got {value!r}")
    return value


def check(config: ServiceConfig, where: str = "config") -> ServiceConfig:
    """Every value of the right type and within bounds; the first that is not, in one sentence."""
    c, d, s, st = config.collection, config.diagnosis, config.server, config.storage

    def fail(key: str, expected: str, value: Any) -> InputError:
        return InputError(f"{where}: {key}: expected {expected}, got {value!r}")

    _str_list(c.collectors, f"{where}: collection.collectors")
    for key in ("window_s", "interval_s"):
        value = getattr(c, key)
        if not _is_number(value) or value <= 0:
            raise fail(f"collection.{key}", "a number of seconds above 0", value)
    if c.window_s > MAX_DURATION_S:
        raise fail("collection.window_s", f"at most {MAX_DURATION_S:g} seconds", c.window_s)
    if c.interval_s > c.window_s:
        raise fail("collection.interval_s", f"at most collection.window_s ({c.window_s:g})", c.interval_s)
    if not isinstance(c.pids, list) or not all(isinstance(p, int) and not isinstance(p, bool) and p > 0
                                               for p in c.pids):
        raise fail("collection.pids", "a list of process ids", c.pids)
    for key in ("job", "host"):
        if getattr(c, key) is not None and not isinstance(getattr(c, key), str):
            raise fail(f"collection.{key}", "a string", getattr(c, key))
    if d.thresholds is not None and not isinstance(d.thresholds, (str, dict)):
        raise fail("diagnosis.thresholds", "a TOML file name or a table of overrides", d.thresholds)
    if isinstance(d.thresholds, dict):
        from witty_profiler.diagnosis.thresholds import validate
        validate(d.thresholds, f"{where}: diagnosis.thresholds")
    if d.trigger_priority not in PRIORITIES:
        raise fail("diagnosis.trigger_priority", " or ".join(PRIORITIES), d.trigger_priority)
    _str_list(d.trigger_patterns, f"{where}: diagnosis.trigger_patterns")
    if d.trigger_patterns:
        from witty_profiler.diagnosis.catalog import catalog
        unknown = sorted(set(d.trigger_patterns) - set(catalog()))
        if unknown:
            raise fail("diagnosis.trigger_patterns", "pattern ids (witty-profiler patterns lists them)", unknown[0])
    if not isinstance(s.listen, str):
        raise fail("server.listen", "HOST:PORT", s.listen)
    parse_listen(s.listen, f"{where}: server.listen", DEFAULT_PORT)
    if s.token_file is not None and not isinstance(s.token_file, str):
        raise fail("server.token_file", "a file name", s.token_file)
    _str_list(s.allowed_hosts, f"{where}: server.allowed_hosts")
    _str_list(s.allowed_origins, f"{where}: server.allowed_origins")
    if isinstance(s.max_connections, bool) or not isinstance(s.max_connections, int) or s.max_connections < 1:
        raise fail("server.max_connections", "a whole number of connections, at least 1", s.max_connections)
    for key in ("header_timeout_s", "body_timeout_s"):
        value = getattr(s, key)
        if not _is_number(value) or not 0 < value <= MAX_REQUEST_S:
            raise fail(f"server.{key}", f"a number of seconds above 0, at most {MAX_REQUEST_S}", value)
    if not _is_number(s.max_body_mb) or not 0 < s.max_body_mb <= MAX_BODY_MB:
        raise fail("server.max_body_mb", f"a size in MiB above 0, at most {MAX_BODY_MB}", s.max_body_mb)
    if st.state_dir is not None and not isinstance(st.state_dir, str):
        raise fail("storage.state_dir", "a directory name", st.state_dir)
    for key in ("ring_windows", "kept_windows"):
        value = getattr(st, key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise fail(f"storage.{key}", "a whole number of windows, at least 1", value)
    for key in ("ring_max_mb", "kept_max_mb"):
        value = getattr(st, key)
        if not _is_number(value) or value <= 0:
            raise fail(f"storage.{key}", "a size in MiB above 0", value)
    return config


def load(path: str | None, overrides: dict[str, dict[str, Any]]) -> ServiceConfig:
    """Defaults < the file at `path` < `overrides` (the command line's, by table and key; None = not given)."""
    data = read_file(path) if path else {}
    where = f"--config {path}" if path else "config"
    config = from_mapping(data, where)
    if path:
        _paths_from(config, Path(path).expanduser().resolve().parent)
    given = False
    for table, values in overrides.items():
        for key, value in values.items():
            if value is not None:
                setattr(getattr(config, table), key, value)
                given = True
    return check(config, "command line") if given else config


def _paths_from(config: ServiceConfig, folder: Path) -> None:
    """A file name in a config file is relative to the file's folder, wherever the service is started
    from; on the command line it is relative to the working directory, as usual."""
    def resolved(name: str) -> str:
        p = Path(name).expanduser()
        return str(p if p.is_absolute() else folder / p)

    if isinstance(config.diagnosis.thresholds, str):
        config.diagnosis.thresholds = resolved(config.diagnosis.thresholds)
    if isinstance(config.server.token_file, str):
        config.server.token_file = resolved(config.server.token_file)
    if isinstance(config.storage.state_dir, str):
        config.storage.state_dir = resolved(config.storage.state_dir)


def read_token(config: ServiceConfig) -> str | None:
    """The bearer token: server.token_file, else $WITTY_SERVICE_TOKEN; None when neither is set."""
    return token_from(config.server.token_file or None, TOKEN_ENV, "server.token_file")
