"""What a native graph file holds, read as a stream: its meta and the count of entities and edges by
type, without building the graph: one item in memory at a time, and the ids (every item is checked as
topology.validate checks a whole document: its fields, ids given once, edges between known entities).

`witty-profiler info` uses it; a legacy file (whose types are only known once converted) is loaded.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from witty_profiler.topology.errors import GraphFormatError
from witty_profiler.topology.models import FORMAT_NAME, SCHEMA_VERSION
from witty_profiler.topology.validate import StreamCheck

CHUNK = 1 << 20
_NOT_SPACE = re.compile(r"[^ \t\n\r]")


@dataclass
class Scan:
    meta: dict[str, Any] = field(default_factory=dict)
    entities: Counter[str] = field(default_factory=Counter)
    edges: Counter[str] = field(default_factory=Counter)


class _Stream:
    """A text file read in chunks, with the JSON values at its front decoded one at a time."""

    def __init__(self, handle: IO[str], name: str) -> None:
        self.handle, self.name = handle, name
        self.buf, self.pos, self.done = "", 0, False
        self.base = 0  # characters of the file before buf
        self.spelt = False  # the last value held NaN or Infinity
        decoder = json.JSONDecoder(parse_constant=self._constant)
        self._scan = decoder.scan_once  # the C scanner: one value
        self._loads = decoder.decode

    def _constant(self, word: str) -> float:
        self.spelt = True
        return float(word)

    def _more(self) -> bool:
        if self.done:
            return False
        chunk = self.handle.read(CHUNK)
        self.done = not chunk
        self.base += self.pos
        self.buf = self.buf[self.pos:] + chunk
        self.pos = 0
        return bool(chunk)

    def peek(self) -> str:
        """The next character that is not white space ('' at the end)."""
        while True:
            found = _NOT_SPACE.search(self.buf, self.pos)
            if found:
                self.pos = found.start()
                return self.buf[self.pos]
            self.pos = len(self.buf)
            if not self._more():
                return ""

    def expect(self, char: str) -> None:
        if self.peek() != char:
            found = repr(self.peek()) if self.peek() else "the end of the file"
            raise GraphFormatError(f"{self.name}: not valid JSON (expected {char!r} at character "
                                   f"{self.base + self.pos} of the file, found {found})")
        self.pos += 1

    def value(self) -> Any:
        """The next JSON value; reads on while the buffer ends inside it."""
        self.peek()
        self.spelt = False
        while True:
            try:
                value, end = self._scan(self.buf, self.pos)
            except (StopIteration, json.JSONDecodeError) as exc:  # StopIteration: no value starts here
                if self._more():
                    continue
                what = exc.msg if isinstance(exc, json.JSONDecodeError) else "no JSON value"
                raise GraphFormatError(f"{self.name}: not valid JSON ({what} at character "
                                       f"{self.base + self.pos} of the file)") from None
            except RecursionError:
                raise GraphFormatError(f"{self.name}: JSON nested too deeply to be a graph file") from None
            except ValueError as exc:
                raise GraphFormatError(f"{self.name}: a number in the file is too long to read ({exc})") from None
            if end == len(self.buf) and not self.done and not isinstance(value, (dict, list, str)):
                if self._more():  # a number may go on in the next chunk
                    continue
            self.pos = end
            return value

    def batches(self) -> Iterator[list[Any]]:
        """The values of the array at the front, a batch at a time: the whole items the buffer holds when
        they stand one per line as this tool writes them (decoded in one call), else one by one. A
        batch's `spelt` is set when it held NaN or Infinity."""
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        failed = -1  # the end of a run that did not decode: one value at a time until past it
        while True:
            end = self.buf.rfind("},\n", self.pos) if self.base + self.pos > failed else -1
            if end > self.pos:  # a run of lines, each an item and its comma
                self.spelt = False
                try:
                    batch = self._loads("[" + self.buf[self.pos:end + 1] + "]")
                except (ValueError, RecursionError):
                    batch, failed = None, self.base + end  # another layout, or past the array's end
                if batch is not None:
                    self.pos = end + 2
                    yield batch
                    continue
            yield [self.value()]
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return

    def members(self) -> Iterator[str]:
        """The keys of the object at the front; the caller reads (or skips) each value."""
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise GraphFormatError(f"{self.name}: not valid JSON (an object key that is not a string)")
            self.expect(":")
            yield key
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return


def scan_native(handle: IO[str], name: str = "<input>") -> Scan | None:
    """The meta and type counts of a native graph; None when the document is not one (a legacy file)."""
    stream = _Stream(handle, name)
    if stream.peek() != "{":
        return None
    found = Scan()
    checks = StreamCheck(name)
    header: dict[str, Any] = {}
    for key in stream.members():
        if key in ("entities", "edges"):
            if header.get("format") != FORMAT_NAME:
                return None  # the format must come first: not a file this tool wrote
            counts, check = (found.entities, checks.entities) if key == "entities" else (found.edges, checks.edges)
            done = 0
            for batch in stream.batches():
                counts.update(check(batch, done, stream.spelt))
                done += len(batch)
        else:
            header[key] = stream.value()
            if key == "schema_version" and header.get("format") == FORMAT_NAME and header[key] != SCHEMA_VERSION:
                raise GraphFormatError(f"{name}: schema_version {header[key]!r} is not supported by this version of "
                                       f"witty-profiler (it reads schema_version {SCHEMA_VERSION})")
    if stream.peek():
        raise GraphFormatError(f"{name}: not valid JSON (data after the graph)")
    if header.get("format") != FORMAT_NAME:
        return None
    meta = header.get("meta") or {}
    if not isinstance(meta, dict):
        raise GraphFormatError(f"{name}: invalid witty graph: meta: expected an object")
    found.meta = meta
    return found
