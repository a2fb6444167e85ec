"""What goes on the wire is valid UTF-8, whatever a graph holds.

A Python string may carry a lone surrogate (a JSON file with ``"\\ud800"``, a file name or process name
read with ``surrogateescape``) that no UTF-8 encoder accepts: an answer holding one would fail where
the transport writes it, and over stdio that failure ends the server. Answers and saved records pass
through `valid_text`, which shows such a character as U+FFFD; `SafeWriteStream` does the same for any
message that still could not be written, so the server never dies writing an answer.
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

from witty_profiler.topology.text import valid_text

log = logging.getLogger("witty-mcp")


class SafeWriteStream:
    """A transport's write stream (the SDK's `WriteStream` protocol) that sends every message in a form
    the transport can encode: one that would fail is sent with its strings made valid instead."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def send(self, item: Any, /) -> None:
        try:
            item.message.model_dump_json(by_alias=True, exclude_unset=True)  # as the transport will
        except ValueError:  # pydantic's serialisation error, from the UnicodeEncodeError of a lone surrogate
            from mcp.shared.message import SessionMessage
            from mcp.types import jsonrpc_message_adapter
            data = item.message.model_dump(by_alias=True, exclude_unset=True)
            message = jsonrpc_message_adapter.validate_python(valid_text(data), by_name=False)
            log.warning("a message held characters that are not valid UTF-8; they were sent as U+FFFD")
            item = SessionMessage(message=message, metadata=item.metadata)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> SafeWriteStream:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> bool | None:
        await self.aclose()
        return None
