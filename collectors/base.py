"""The collector interface, the per-round context and the registry.

A collector module defines a subclass of `Collector` decorated with `@register`; the sampling
engine instantiates every registered collector (or the ones asked for), calls `prepare`, `start`,
`sample` every interval and `finish`, and merges the fragments. Any exception out of a collector becomes
that collector's `error` status; the others go on.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, ClassVar

from witty_profiler.topology import Graph
from witty_profiler.topology.ids import host_id
from witty_profiler.topology.models import CollectorStatus, Fields, Meta
from witty_profiler.topology.vocabulary import T


def default_host() -> str:
    """The name this host's graph carries: WITTY_HOST where a launcher sets it (the Kubernetes DaemonSet sets
    the node's name), Slurm's name for the node where slurmd runs us (what squeue and the job's node list
    say), else the short hostname."""
    return (os.environ.get("WITTY_HOST") or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]
            or "localhost")


def run_tool(argv: list[str], what: str, timeout_s: float = 20) -> tuple[str | None, str | None]:
    """(stdout, None) of a vendor tool run in the C locale (its messages in English, as the parsers
    expect), or (None, why) when it could not run or exited non-zero; `what` names the call in `why`,
    which quotes the start of what the tool printed (such tools print their errors on stdout)."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s,
                             env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"{what} failed: {e}"
    if out.returncode != 0:
        return None, f"{what} exited {out.returncode}: {(out.stdout + out.stderr).strip()[:120]}"
    return out.stdout, None


_now = time.monotonic  # bound once: a test's fake clock in time.monotonic does not tick for a new Context


class Context(Fields):
    """What every collector of one round shares: where to read, what is in scope, the clock."""

    _FIELDS = ("host", "pids", "duration_s", "interval_s", "proc", "sys", "started_monotonic", "cache")

    def __init__(self, host: str | None = None, pids: set[int] | None = None, duration_s: float = 10.0,
                 interval_s: float = 1.0, proc: Path = Path("/proc"), sys: Path = Path("/sys"),
                 started_monotonic: float | None = None, cache: dict[str, Any] | None = None) -> None:
        self.host = default_host() if host is None else host
        self.pids = pids  # None = the whole host
        self.duration_s = duration_s
        self.interval_s = interval_s
        self.proc = proc
        self.sys = sys
        self.started_monotonic = _now() if started_monotonic is None else started_monotonic
        self.cache = {} if cache is None else cache  # read once, shared between collectors

    @property
    def is_root(self) -> bool:
        return os.geteuid() == 0


class Collector:
    """Base class. Subclasses set `name` and implement `finish` (and `start`/`sample` if sampling)."""

    name: ClassVar[str] = ""
    default_enabled: ClassVar[bool] = True
    reads: ClassVar[str] = ""  # its sources, for the generated reference (docs/collectors.md)
    needs: ClassVar[str] = ""  # the privileges, devices or kernel features it needs

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.status = CollectorStatus(status="ok")

    def prepare(self) -> None:
        """Costly set-up that must not eat into the window (compiling an eBPF program); called for
        every collector before the window opens."""

    def start(self) -> None:
        """Read the initial counters and the topology at the start of the window."""

    def sample(self) -> None:
        """Read the cheap counters; called every interval."""

    def finish(self) -> Graph:
        """Read the end state; return the fragment for the window."""
        raise NotImplementedError

    # -- status helpers -------------------------------------------------------------------
    def unavailable(self, reason: str) -> Graph:
        self.status = CollectorStatus(status="unavailable", reason=reason)
        return Graph()

    def partial(self, reason: str) -> None:
        if self.status.status == "ok":
            self.status = CollectorStatus(status="partial", reason=reason)
        elif self.status.reason and reason not in self.status.reason:
            self.status.reason = f"{self.status.reason}; {reason}"

    def fragment(self) -> Graph:
        """An empty fragment whose meta names this host."""
        return Graph(Meta(hosts=[self.ctx.host]))

    def add_host(self, graph: Graph, metrics: dict) -> None:
        """This host's entity with some of its metrics (the collectors that measure the host each add theirs)."""
        graph.entity_of(T.HOST, host_id(self.ctx.host), {"name": self.ctx.host}, metrics)


class CounterCollector(Collector):
    """A collector of counters that are cheap to read: read at the start, every interval and at
    the end into `self.series` (a collectors.sampling.SeriesTable), turned into window metrics
    by `finish`. Subclasses implement `_read` and call it once more at the top of `finish`."""

    def start(self) -> None:
        from witty_profiler.collectors.lib.sampling import SeriesTable
        self.series = SeriesTable()
        self._read()

    def sample(self) -> None:
        self._read()

    def _read(self) -> None:
        raise NotImplementedError


REGISTRY: dict[str, type[Collector]] = {}


def register(cls: type[Collector]) -> type[Collector]:
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    REGISTRY[cls.name] = cls
    return cls
