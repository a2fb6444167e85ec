"""`collect` as an MCP task (protocol 2025-11-25), for clients that ask for one.

A client that sends `tools/call` for collect with `params.task` gets a task id at once instead of
waiting out the window; it polls `tasks/get`, fetches the tool's result with `tasks/result` (which
waits for the end), lists its tasks with `tasks/list` and ends one early with `tasks/cancel` (the
window stops early, as when a call is abandoned). Clients that do not ask keep the plain call with
progress notifications. A task is kept for its ttl (at most an hour) after it ends.

The SDK (mcp 2.3) has the wire types but no task runtime on the server; this is that runtime, for the
tools registered as task-capable. Tasks are the server's, not a session's: over streamable HTTP the
2026 wire has no lasting session to bind them to, and the server has one operator.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import anyio
import mcp_types as t
from mcp.shared.exceptions import MCPError

from witty_profiler.mcp_server.sdk import admit_task_results

MAX_TTL_MS = 3_600_000
POLL_MS = 1000
INVALID_PARAMS = -32602


def _iso(at: float) -> str:
    return datetime.fromtimestamp(at, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Entry:
    task_id: str
    ttl_ms: int
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)
    status: str = "working"
    message: str | None = None
    result: Any = None
    done: anyio.Event = field(default_factory=anyio.Event)
    runner: asyncio.Task | None = None

    def task(self) -> dict[str, Any]:
        return {"task_id": self.task_id, "status": self.status, "status_message": self.message,
                "created_at": _iso(self.created), "last_updated_at": _iso(self.updated), "ttl": self.ttl_ms,
                "poll_interval": POLL_MS}

    def expired(self, now: float) -> bool:
        return self.done.is_set() and now - self.updated > self.ttl_ms / 1000


class Tasks:
    """The tasks of one server, and the handlers of the tasks/* requests."""

    def __init__(self, tools: set[str]) -> None:
        self.tools = tools  # the tools that may run as tasks
        self._tasks: dict[str, Entry] = {}

    def start(self, meta: t.TaskMetadata, run: Callable[[], Awaitable[Any]]) -> t.CreateTaskResult:
        self._forget_expired()
        ttl = min(int(meta.ttl or MAX_TTL_MS), MAX_TTL_MS)
        entry = Entry(task_id=secrets.token_urlsafe(12), ttl_ms=ttl)
        self._tasks[entry.task_id] = entry

        async def work() -> None:
            try:
                entry.result = await run()
                failed = bool(getattr(entry.result, "is_error", False))
                entry.status = "failed" if failed else "completed"
                if failed:
                    entry.message = next((c.text for c in entry.result.content if hasattr(c, "text")), None)
            except asyncio.CancelledError:
                entry.status, entry.message = "cancelled", "cancelled by the client: the window ended early"
            except Exception as exc:  # noqa: BLE001 - reported in the task, never lost
                entry.status, entry.message = "failed", f"{type(exc).__name__}: {exc}"
            finally:
                entry.updated = time.time()
                entry.done.set()
        entry.runner = asyncio.get_running_loop().create_task(work())  # outlives the request that made it
        return t.CreateTaskResult(task=t.Task(**entry.task()))

    def _entry(self, task_id: str) -> Entry:
        self._forget_expired()
        entry = self._tasks.get(task_id)
        if entry is None:
            raise MCPError(INVALID_PARAMS, f"unknown task {task_id!r} (ended more than its ttl ago, or never was)")
        return entry

    def _forget_expired(self) -> None:
        now = time.time()
        for task_id in [k for k, e in self._tasks.items() if e.expired(now)]:
            del self._tasks[task_id]

    async def get(self, ctx: Any, params: t.GetTaskRequestParams) -> t.GetTaskResult:
        return t.GetTaskResult(**self._entry(params.task_id).task())

    async def result(self, ctx: Any, params: t.GetTaskPayloadRequestParams) -> Any:
        entry = self._entry(params.task_id)
        await entry.done.wait()
        if entry.result is None:
            raise MCPError(INVALID_PARAMS, f"task {params.task_id!r} has no result: {entry.message}")
        related = {"io.modelcontextprotocol/related-task": {"taskId": entry.task_id}}
        return entry.result.model_copy(update={"meta": {**(entry.result.meta or {}), **related}})

    async def list(self, ctx: Any, params: Any) -> t.ListTasksResult:
        self._forget_expired()
        return t.ListTasksResult(tasks=[t.Task(**e.task()) for e in self._tasks.values()])

    async def cancel(self, ctx: Any, params: t.CancelTaskRequestParams) -> t.CancelTaskResult:
        entry = self._entry(params.task_id)
        if entry.done.is_set():
            raise MCPError(INVALID_PARAMS, f"task {params.task_id!r} has already ended ({entry.status})")
        assert entry.runner is not None
        entry.runner.cancel()
        await entry.done.wait()
        return t.CancelTaskResult(**entry.task())

    def register(self, lowlevel: Any) -> None:
        """The tasks/* handlers and the capability that announces them."""
        admit_task_results()
        lowlevel.add_request_handler("tasks/get", t.GetTaskRequestParams, self.get)
        lowlevel.add_request_handler("tasks/result", t.GetTaskPayloadRequestParams, self.result)
        lowlevel.add_request_handler("tasks/list", t.PaginatedRequestParams, self.list)
        lowlevel.add_request_handler("tasks/cancel", t.CancelTaskRequestParams, self.cancel)
        plain = lowlevel.get_capabilities

        def get_capabilities(*args: Any, **kwargs: Any) -> t.ServerCapabilities:
            capabilities = plain(*args, **kwargs)
            capabilities.tasks = t.ServerTasksCapability(
                list=t.TasksListCapability(), cancel=t.TasksCancelCapability(),
                requests=t.ServerTasksRequestsCapability(tools=t.TasksToolsCapability(call=t.TasksCallCapability())))
            return capabilities
        lowlevel.get_capabilities = get_capabilities
