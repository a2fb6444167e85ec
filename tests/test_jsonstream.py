"""topology.jsonstream: the items of a large array of objects come in batches even when each item holds
objects of its own (a graph's entities and edges: attrs and metrics), and the same items whatever the
chunk size."""

from __future__ import annotations

import io
import json

import pytest

from witty_profiler.topology import jsonstream
from witty_profiler.topology.jsonstream import JsonStream

ITEMS = [{"id": f"process:h1:{i}", "attrs": {"name": "python3", "env": {"RANK": str(i)}}, "metrics": {"cpu": i / 3},
          "list": [{"x": 1}, {"y": 2}] if i % 50 == 0 else []} for i in range(2000)]


@pytest.mark.parametrize("indent", [None, 1])
@pytest.mark.parametrize("chunk", [97, 4096, 1 << 20])
def test_nested_objects_do_not_turn_batches_into_single_items(monkeypatch, indent, chunk):
    monkeypatch.setattr(jsonstream, "CHUNK", chunk)
    stream = JsonStream(io.StringIO(json.dumps(ITEMS, indent=indent)), "t.json")
    batches = list(stream.batches())
    assert [item for batch in batches for item in batch] == ITEMS
    if chunk >= 4096:  # a chunk holds many items: most come in batches, not one value at a time
        assert len(batches) < len(ITEMS) / 5, len(batches)
