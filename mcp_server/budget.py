"""Keeping answers small: token counts, pages that fit a budget, cursors that resume them.

Every tool answer is measured in tokens (offline cl100k_base, the same count the converters use).
A page takes rows until the next one would not fit; the cursor it hands back encodes where to
resume and which query it belongs to, so a cursor replayed against another query is refused
instead of silently paging through something else.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from witty_profiler.converters.tokens import count_tokens as _count_tokens
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.text import valid_text


def count_tokens(text: str) -> int:
    """Tokens of `text`, counted as it goes on the wire (a lone surrogate as U+FFFD)."""
    try:
        return _count_tokens(text)
    except UnicodeEncodeError:
        return _count_tokens(valid_text(text))


def compact_json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def query_key(*parts: Any) -> str:
    return hashlib.sha256(compact_json(parts).encode()).hexdigest()[:10]


def make_cursor(offset: int, key: str) -> str:
    raw = compact_json({"o": offset, "k": key}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def read_cursor(cursor: str | None, key: str) -> int:
    if not cursor:
        return 0
    try:
        data = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
        offset, cursor_key = int(data["o"]), str(data["k"])
    except (ValueError, KeyError, TypeError):
        raise InputError("cursor is not one this server handed out: pass next_cursor from the previous "
                         "answer unchanged, or drop cursor to start from the first page") from None
    if cursor_key != key or offset < 0:
        raise InputError("cursor belongs to a different query: repeat the exact arguments of the call that "
                         "returned it, or drop cursor to start from the first page")
    return offset


def take_page(rows: Sequence[Any], offset: int, limit: int, max_tokens: int,
              render: Callable[[Any], str]) -> tuple[list[Any], int]:
    """Rows from `offset`, at most `limit` of them and within `max_tokens` (at least one row, so a
    page always moves forward). Returns (rows, tokens used)."""
    page: list[Any] = []
    used = 0
    for row in rows[offset:offset + limit]:
        cost = count_tokens(render(row)) + 1
        if page and used + cost > max_tokens:
            break
        page.append(row)
        used += cost
    return page, used
