"""Continuous monitoring: one window after another on a thread, each diagnosed and put in the ring.

A window whose diagnosis has a finding at least as urgent as `diagnosis.trigger_priority` (among
`trigger_patterns`, if given) that the window before did not have is kept out of the ring's reach: the
window where a problem starts, not every window while it lasts (a host saturated for a day would
otherwise fill the kept windows with copies of one finding); `trigger()` keeps the latest window
on demand. `stop()` ends the running window early (what it collected is still stored) and waits;
`start()` resumes. Listeners hear of every new window (the MCP server tells its clients the graph
list changed).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from witty_profiler.service.config import ServiceConfig
from witty_profiler.service.ring import FindingBrief, Ring, WindowRecord
from witty_profiler.topology.errors import InputError

log = logging.getLogger("witty-profiler.service")
RANK = {"P0": 0, "P1": 1, "P2": 2}
RETRY_S = 5.0  # after a window that failed: a broken scope or disk must not spin the CPU


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Monitor:
    def __init__(self, config: ServiceConfig, ring: Ring, workspace: Any) -> None:
        self.config, self.ring, self.ws = config, ring, workspace
        self.listeners: list[Callable[[WindowRecord], None]] = []
        self._running = threading.Event()  # collecting (not stopped)
        self._closing = threading.Event()
        self._window_stop = threading.Event()  # ends the window in progress early
        self._thread: threading.Thread | None = None
        self.windows_done = 0
        self.windows_failed = 0
        self.last_error: str | None = None
        self.current_started: str | None = None
        self.started_at = _now()
        self._firing: set[str] = set()  # the patterns that triggered in the previous window

    # -- control ------------------------------------------------------------------------
    def launch(self, running: bool = True) -> None:
        if running:
            self._running.set()
        self._thread = threading.Thread(target=self._loop, name="witty-monitor", daemon=True)
        self._thread.start()

    def start(self) -> bool:
        """Resume collecting; False if it already was."""
        was = self._running.is_set()
        self._running.set()
        return not was

    def stop(self) -> bool:
        """Stop collecting after ending the window in progress; False if already stopped."""
        was = self._running.is_set()
        self._running.clear()
        self._window_stop.set()
        return was

    def close(self, timeout: float = 30.0) -> None:
        self._closing.set()
        self._running.set()  # wake a stopped loop so it can see it is closing
        self._window_stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def trigger(self, reason: str) -> WindowRecord:
        """Keep the latest window out of the ring's reach."""
        return self.ring.keep(self.ring.latest_id(), reason or "on demand")

    @property
    def running(self) -> bool:
        return self._running.is_set() and not self._closing.is_set()

    def status(self) -> dict[str, Any]:
        c = self.config.collection
        return {"running": self.running, "window_in_progress_since": self.current_started,
                "windows_done": self.windows_done, "windows_failed": self.windows_failed,
                "last_error": self.last_error, "window_s": c.window_s, "interval_s": c.interval_s,
                "collectors": c.collectors, "trigger_priority": self.config.diagnosis.trigger_priority}

    # -- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._closing.is_set():
            self._running.wait()
            if self._closing.is_set():
                break
            self._window_stop.clear()
            try:
                self.one_window()
            except Exception as exc:  # noqa: BLE001 - a failed window is reported; the service goes on
                self.windows_failed += 1
                self.last_error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, InputError) else str(exc)
                # an OSError (a full disk, out of file descriptors) says all in its one line: no traceback
                log.warning("window failed: %s", self.last_error, exc_info=not isinstance(exc, (InputError, OSError)))
                self._closing.wait(RETRY_S)
            finally:
                self.current_started = None

    def one_window(self) -> WindowRecord:
        from witty_profiler.collectors.engine import run_window
        from witty_profiler.diagnosis import diagnose
        c = self.config.collection
        self.current_started = _now()
        graph = run_window(c.window_s, c.interval_s, pids=c.pids or None, collectors=c.collectors or None,
                           stop=self._window_stop, host=c.host, job=c.job)
        diagnosis = diagnose(graph, pids=c.pids or None, thresholds=self.ws.thresholds())
        findings = [FindingBrief(pattern=f.pattern, priority=f.priority, title=f.title) for f in diagnosis.findings]
        record = self.ring.add(graph, findings)
        self.ws.remember(record.window_id, diagnosis, c.pids or None)  # REST and /mcp ask for it next
        self.windows_done += 1
        self.last_error = None
        fired = self.fired(findings)
        if fired:
            record = self.ring.keep(record.window_id, "pattern " + ", ".join(fired))
        for listener in self.listeners:
            try:
                listener(record)
            except Exception:  # noqa: BLE001 - a listener (a client gone) never stops monitoring
                log.debug("window listener failed", exc_info=True)
        return record

    def fired(self, findings: list[FindingBrief]) -> list[str]:
        """The patterns that start triggering with this window (they did not in the previous one)."""
        d = self.config.diagnosis
        if d.trigger_priority == "off":
            return []
        limit = RANK[d.trigger_priority]
        firing = {f.pattern for f in findings if RANK[f.priority] <= limit
                  and (not d.trigger_patterns or f.pattern in d.trigger_patterns)}
        new, self._firing = sorted(firing - self._firing), firing
        return new

