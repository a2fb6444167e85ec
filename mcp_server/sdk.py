"""The one place witty-mcp reaches below the public API of the mcp SDK (2.3), each for a need the SDK has no
public way to serve; tests/test_mcp_server.py::test_the_sdk_seams_are_where_we_use_them fails loudly when the
SDK moves one of them.

- `lowlevel(server)`: the low-level `Server` inside an `MCPServer` (its private `_lowlevel_server`): to
  serve stdio through a write stream that survives a string that is not valid UTF-8 (`wire.SafeWriteStream`),
  and to add the tasks/* request handlers and the tasks capability (`tasks.Tasks.register`).
- `MCPServer._handle_call_tool`, overridden by `server.WittyServer`: the one method every tools/call goes
  through, where a call that asks to run as a task is turned into one.
- `admit_task_results()`: a tools/call answer may be a CreateTaskResult at protocol 2025-11-25.
"""

from __future__ import annotations

from typing import Any

LOWLEVEL_ATTRIBUTE = "_lowlevel_server"


def lowlevel(server: Any) -> Any:
    """The low-level server of an MCPServer."""
    inner = getattr(server, LOWLEVEL_ATTRIBUTE, None)
    if inner is None:
        raise RuntimeError(f"this mcp SDK's MCPServer has no {LOWLEVEL_ATTRIBUTE}: witty-mcp needs mcp 2.3's layout "
                           f"(see mcp_server/sdk.py)")
    return inner


def admit_task_results() -> None:
    """Let a tools/call answer be a CreateTaskResult at 2025-11-25, as that version of the protocol says.
    mcp 2.3 checks each answer against its table of result types per (method, version), and its table
    has only CallToolResult for tools/call: a task would be refused as "an invalid result". The check is
    wrapped, once, to accept the task shape there and leave every other answer to the SDK's own check."""
    from mcp_types import _v2025_11_25 as v2025
    from mcp_types import methods
    plain = methods.serialize_server_result
    if getattr(plain, "admits_tasks", False):
        return

    def serialize_server_result(method: str, version: str, data: Any, **kwargs: Any) -> dict[str, Any]:
        if method == "tools/call" and version == "2025-11-25" and "task" in data and "content" not in data:
            return v2025.CreateTaskResult.model_validate(data).model_dump(by_alias=True, mode="json",
                                                                          exclude_none=True)
        return plain(method, version, data, **kwargs)
    serialize_server_result.admits_tasks = True  # type: ignore[attr-defined]
    methods.serialize_server_result = serialize_server_result
