"""Tool arguments an attacker or a careless client sends: a NUL in a path, a name too long, a thresholds
string of megabytes, a FIFO to import. Each is one sentence, and the next call is answered (a FIFO used
to block the worker for every later call)."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import mcp
import pytest

from test_mcp_server import call, call_error, server_for  # noqa: F401 - the shared fixtures and helpers
from test_mcp_server import anyio_backend, graph_file, state, workdir  # noqa: F401

pytestmark = pytest.mark.anyio


async def test_hostile_arguments_are_one_sentence_and_the_server_goes_on(state: Path, workdir: Path,
                                                                        graph_file: Path) -> None:
    fifo = workdir / "trace.json"
    os.mkfifo(fifo)
    async with mcp.Client(server_for(state, workdir)) as client:
        gid = (await call(client, "load_graph", path=str(graph_file)))["graph_id"]
        failures = {
            ("load_graph", "holds a NUL character"): {"path": "a\x00b.json"},
            ("load_graph", "File name too long"): {"path": "x" * 5000},
            ("match_patterns", "not a thresholds file"): {"graph_id": gid, "thresholds": "x" * 5_000_000},
            ("match_patterns", "holds a NUL character"): {"graph_id": gid, "thresholds": "a\x00b.toml"},
            ("import_trace", "not a regular file"): {"paths": [str(fifo)]},
            ("import_trace", "holds a NUL character"): {"paths": ["t\x00.json"]},
            ("generate_report", "holds a NUL character"): {"graph_id": gid, "output_path": "r\x00.md"},
        }
        for (tool, expected), arguments in failures.items():
            with anyio.fail_after(30):  # answered, not left waiting
                message = await call_error(client, tool, **arguments)
            assert expected in message and "\n" not in message.strip(), (tool, message)
            assert "inside witty-profiler" not in message, (tool, message)  # an input error, not an internal one
            assert (await call(client, "list_graphs"))["total"] == 1
