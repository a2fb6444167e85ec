"""What goes on the wire is valid UTF-8, whatever a graph holds.

A Python string may carry a lone surrogate (a JSON file with ``"\\ud800"``, a file name or process name
read with ``surrogateescape``) that no UTF-8 encoder accepts: an answer holding one would fail where
the transport writes it, and over stdio that failure ends the server. Answers and saved records pass
through `valid_text`, which shows such a character as U+FFFD; `SafeWriteStream` does the same for any
message that still could not be written, so the server never dies writing an answer.

A request may hold one too (`"\\ud800"` in an argument): the SDK's reader refuses such a
line, and the client would wait for an answer forever; `SafeReadStream` reads it again with its strings made
valid, so the call is answered like any other (a path with U+FFFD is "no such file").
"""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Any

from witty_profiler.topology.text import valid_text

log = logging.getLogger("witty-mcp")


class _Wrapped:
    """A transport stream around another: closing and the context manager as the inner one's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Any:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc_val: BaseException | None,
                        exc_tb: TracebackType | None) -> bool | None:
        await self.aclose()
        return None


class SafeWriteStream(_Wrapped):
    """A transport's write stream (the SDK's `WriteStream` protocol) that sends every message in a form
    the transport can encode: one that would fail is sent with its strings made valid instead."""

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


class SafeReadStream(_Wrapped):
    """A transport's read stream (the SDK's `ReadStream` protocol) that turns a line the SDK's JSON parser
    refused for a lone surrogate into the message it is, with U+FFFD in its place; anything else passes as
    it came."""

    async def receive(self) -> Any:
        return _mended(await self._inner.receive())

    def __aiter__(self) -> SafeReadStream:
        return self

    async def __anext__(self) -> Any:
        return _mended(await self._inner.__anext__())

    def __getattr__(self, name: str) -> Any:  # last_context and the like, as the inner stream has them
        return getattr(self._inner, name)


def _mended(item: Any) -> Any:
    if not isinstance(item, ValueError) or not hasattr(item, "errors"):
        return item
    raw = next((e.get("input") for e in item.errors() if isinstance(e.get("input"), str)), None)
    if raw is None:
        return item
    import json

    from mcp.shared.message import SessionMessage
    from mcp.types import jsonrpc_message_adapter
    try:
        data = json.loads(raw)  # Python's parser takes a lone surrogate escape
        message = jsonrpc_message_adapter.validate_python(valid_text(data), by_name=False)
    except ValueError:
        return item  # not that: the SDK reports it as before
    log.warning("a request held characters that are not valid UTF-8; it was read with U+FFFD instead")
    return SessionMessage(message=message)
