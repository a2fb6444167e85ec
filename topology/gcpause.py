"""Pausing the cyclic garbage collector around work that makes many small objects and no cycles.

Reading, writing, indexing or collecting a large graph creates hundreds of thousands of dicts,
lists and models, none of them in a reference cycle; the cyclic collector would otherwise rescan
all of them again and again (about half of the time of a 100k-entity load). Reference counting
still frees everything as usual.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def gc_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
