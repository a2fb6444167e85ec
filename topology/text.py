"""Strings from the observed host are data: what a graph holds can never act on whoever reads it.

A process can name itself with a newline, a terminal escape or a markdown heading (`prctl` takes 15
bytes: "x\\n## [P0] fak" fits), a path or a legacy file can hold anything, a JSON file can hold a
lone surrogate that no UTF-8 writer accepts. Every string that enters a graph (ids, attributes,
meta) goes through `visible` once, where the graph is made: at the end of a live window, of the
legacy reader, of reading a native file. Control characters become their visible pictures (a newline
is "␊", an escape "␛"), and what cannot be shown (lone surrogates, format characters such as
right-to-left overrides) becomes "�". Printable text, spaces included, is left exactly as it is.
"""

from __future__ import annotations

import re
from typing import Any

from witty_profiler.topology.lazy import LazyPattern
from witty_profiler.topology.models import Meta

REPLACEMENT = "\ufffd"


def _picture(char: str) -> str:
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀..␟: the control pictures
    if code == 0x7F:
        return "\u2421"  # ␡
    return REPLACEMENT


def visible(text: str) -> str:
    """`text` with every character that is not printable replaced by a visible one (see above)."""
    if text.isprintable():  # the common case, checked in C
        return text
    return "".join(c if c.isprintable() else _picture(c) for c in text)


def visible_value(value: Any) -> Any:
    """`visible` applied to every string inside JSON-like data (keys included); the same object back
    when nothing needed a change, so clean data costs no copy."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        if all(isinstance(k, str) and k.isprintable() and _clean(v) for k, v in value.items()):
            return value
        return {visible(k) if isinstance(k, str) else k: visible_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return value if all(_clean(v) for v in value) else [visible_value(v) for v in value]
    return value


def _clean(value: Any) -> bool:
    if isinstance(value, str):
        return value.isprintable()
    if isinstance(value, dict):
        return all(isinstance(k, str) and k.isprintable() and _clean(v) for k, v in value.items()) if value else True
    if isinstance(value, list):
        return all(_clean(v) for v in value)
    return True


# What can only appear in JSON text as an escape (control characters, lone surrogates) or outside
# ASCII: a document without either holds nothing `visible` would change.
_ESCAPES = LazyPattern(globals(), "_ESCAPES",
                       r"\\(?:[bfnrt]|u00[0-9a-fA-F][0-9a-fA-F]|u007[fF]"  # C0 controls, DEL
                       r"|u[dD][89abAB][0-9a-fA-F]{2}"  # a (lone?) surrogate
                       r"|u20(?:2[89a-eA-E]|6[0-9a-fA-F])|u[fF][eE][fF][fF])")  # separators, bidi and other formats


def json_may_hide(text: str) -> bool:
    """Whether the JSON text may decode to a string that `visible` changes (a fast, safe guess: a
    false 'yes' only costs the full check)."""
    # every escape above starts with a backslash: a text without one (most graphs) is ruled out by a
    # memchr-speed scan, not the pattern's (20 ms for 100,000 entities)
    return not text.isascii() or ("\\" in text and _ESCAPES.search(text) is not None)


def visible_meta(meta: Meta) -> Meta:
    """The meta with `visible` applied to its strings (collector reasons quote what the host said)."""
    def text(value: str | None) -> str | None:
        return None if value is None else visible(value)

    return Meta(hosts=[visible(h) for h in meta.hosts], tool_version=text(meta.tool_version),
                started_at=text(meta.started_at), duration_s=meta.duration_s, interval_s=meta.interval_s,
                host_info=visible_value(meta.host_info), source=text(meta.source), extra=visible_value(meta.extra),
                collectors={visible(name): status.replace(reason=text(status.reason),
                                                          privileges=text(status.privileges),
                                                          extra=visible_value(status.extra))
                            for name, status in meta.collectors.items()})


# -- valid UTF-8 on the wire -------------------------------------------------------------------
# (0.4 ms each to compile: on first use)
_SURROGATE = LazyPattern(globals(), "_SURROGATE", "[\ud800-\udfff]")
_PAIR_OR_LONE = LazyPattern(globals(), "_PAIR_OR_LONE", "[\ud800-\udbff][\udc00-\udfff]|[\ud800-\udfff]")


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


# -- text from another host, for a terminal ---------------------------------------------------------
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """One line of text from elsewhere (a remote host's stderr) safe for a terminal: control characters
    (escape sequences, carriage returns that overwrite a line, newlines that forge one) shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", valid_text(text))
