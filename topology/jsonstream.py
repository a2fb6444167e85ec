"""A JSON document read as a stream: a text file taken in chunks, the values at its front decoded one
at a time by the json module's C scanner, and the items of a large array in batches. Memory holds one
chunk and the value being decoded, whatever the file's size.

Used by topology.scan (graph files: `info` without building the graph) and traces.kineto (profiler
traces of hundreds of MB). JSON that does not parse raises `invalid(what)`, which a reader may
override to say what the file should have been.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import IO, Any

from witty_profiler.topology.errors import GraphFormatError

CHUNK = 1 << 20  # characters read at a time
_NOT_SPACE = re.compile(r"[^ \t\n\r]")
_NEXT_ITEM = re.compile(r"[ \t\n\r]*\{")  # after an item's '},': the next item of an array of objects


class JsonStream:
    def __init__(self, handle: IO[str], name: str, max_value: int | None = None) -> None:
        self.handle, self.name = handle, name
        self.max_value = max_value  # characters one value may span (None: any), for untrusted streams
        self.buf, self.pos, self.done = "", 0, False
        self.base = 0  # characters of the file before buf
        self.spelt = False  # the last value or batch held NaN or Infinity
        decoder = json.JSONDecoder(parse_constant=self._constant)
        self._scan = decoder.scan_once  # the C scanner: one value
        self._loads = decoder.decode

    def invalid(self, what: str) -> Exception:
        """The error for JSON that does not parse (what the decoder said, where)."""
        return GraphFormatError(f"{self.name}: not valid JSON ({what} at character {self.base + self.pos} of the file)")

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
        found = self.peek()
        if found != char:
            raise self.invalid(f"expected {char!r}, found {repr(found) if found else 'the end of the file'}")
        self.pos += 1

    def value(self) -> Any:
        """The next JSON value; reads on while the buffer ends inside it."""
        self.peek()
        self.spelt = False
        while True:
            try:
                value, end = self._scan(self.buf, self.pos)
            except (StopIteration, json.JSONDecodeError) as exc:  # StopIteration: no value starts here
                if self.max_value is not None and len(self.buf) - self.pos > self.max_value:
                    raise self.invalid(f"a value longer than {self.max_value} characters") from None
                if self._more():
                    continue
                raise self.invalid(exc.msg if isinstance(exc, json.JSONDecodeError) else "no JSON value") from None
            except RecursionError:
                raise self.invalid("JSON nested too deeply") from None
            except ValueError as exc:
                raise self.invalid(f"a number in the file is too long to read ({exc})") from None
            if end == len(self.buf) and not self.done and not isinstance(value, (dict, list, str)) and self._more():
                continue  # a number may go on in the next chunk
            self.pos = end
            return value

    def batches(self) -> Iterator[list[Any]]:
        """The items of the array of objects at the front, a batch at a time: the whole items the buffer
        holds up to its last '},' before a '{' (decoded in one call), else one by one (a cut inside an
        item fails to decode, and that run is then read one value at a time). A batch's `spelt` is set
        when it held NaN or Infinity."""
        self.expect("[")
        if self.peek() == "]":
            self.pos += 1
            return
        failed = -1  # the end of a run that did not decode: one value at a time until past it
        while True:
            end = self._last_boundary() if self.base + self.pos > failed else -1
            if end > self.pos:
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

    def _last_boundary(self) -> int:
        """Where the last '},' before a '{' of the buffer is (-1: none): the end of the last whole item an
        array of objects holds, found from the back past the '},' of objects nested in an item (an
        item's metrics: taking the first '},' from the back would give up the batch at almost every read)."""
        buf, start = self.buf, self.pos
        end = buf.rfind("},", start)
        while end > start and not _NEXT_ITEM.match(buf, end + 2):
            end = buf.rfind("},", start, end)
        return end

    def members(self) -> Iterator[str]:
        """The keys of the object at the front; the caller reads (or skips) each value."""
        self.expect("{")
        if self.peek() == "}":
            self.pos += 1
            return
        while True:
            key = self.value()
            if not isinstance(key, str):
                raise self.invalid("an object key that is not a string")
            self.expect(":")
            yield key
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return
