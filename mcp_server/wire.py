"""What goes on the wire is valid UTF-8, whatever a graph holds.

A Python string may carry a lone surrogate (a JSON file with ``"\\ud800"``, a file name or process name
read with ``surrogateescape``) that no UTF-8 encoder accepts: an answer holding one would fail where
the transport writes it, and over stdio that failure ends the server. Answers and saved records pass
through `valid_text`, which shows such a character as U+FFFD; `SafeWriteStream` does the same for any
message that still could not be written, so the server never dies writing an answer.
"""

from __future__ import annotations

import logging
import re
from types import TracebackType
from typing import Any

log = logging.getLogger("witty-mcp")

_SURROGATE = re.compile("[\ud800-\udfff]")
_PAIR_OR_LONE = re.compile("[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")


def _replace(match: re.Match[str]) -> str:
    found = match.group()
    return found.encode("utf-16", "surrogatepass").decode("utf-16") if len(found) == 2 else "\ufffd"


def valid_text(value: Any) -> Any:
    """`value` with every lone surrogate in its strings (keys too, in dicts and lists, nested) replaced by
    U+FFFD; a surrogate pair becomes the character it stands for. Unchanged values are returned as they
    are, not copied."""
    if isinstance(value, str):
        return value if _SURROGATE.search(value) is None else _PAIR_OR_LONE.sub(_replace, value)
    if isinstance(value, dict):
        items = [(valid_text(k), valid_text(v)) for k, v in value.items()]
        if all(k is k0 and v is v0 for (k, v), (k0, v0) in zip(items, value.items())):
            return value
        return dict(items)
    if isinstance(value, (list, tuple)):
        cleaned = [valid_text(v) for v in value]
        if all(c is v for c, v in zip(cleaned, value)):
            return value
        return type(value)(cleaned) if isinstance(value, tuple) else cleaned
    return value


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
