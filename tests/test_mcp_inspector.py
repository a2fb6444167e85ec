"""witty-mcp driven by a client this project did not write: the MCP Inspector CLI (npx), through
benchmarks/mcp_inspector.sh, on the real legacy sample."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "mcp_inspector.sh"
OFFLINE = ("ENOTFOUND", "EAI_AGAIN", "ECONNREFUSED", "ETIMEDOUT", "ECONNRESET", "network request")


def test_inspector_cli_drives_the_server(tmp_path: Path, vllm_sample_path: Path) -> None:
    if shutil.which("npx") is None:
        pytest.skip("npx (Node.js) is not installed: the MCP Inspector CLI cannot run")
    if shutil.which("witty-mcp") is None:
        pytest.skip("witty-mcp is not installed: run `python3 -m pip install -e .`")
    out = tmp_path / "answers"
    out.mkdir()
    # each step starts node and the server afresh (seconds each on a loaded host): only the steps checked here
    env = {**os.environ, "OUT": str(out), "WITTY_STATE_DIR": str(tmp_path / "state"),
           "STEPS": "match_patterns"}
    done = subprocess.run(["bash", str(SCRIPT), str(vllm_sample_path)], capture_output=True, text=True, env=env,
                          timeout=420)
    errors = "".join(p.read_text() for p in out.glob("*.err"))
    if done.returncode != 0 and any(code in errors + done.stderr for code in OFFLINE):
        pytest.skip("the npm registry is unreachable: @modelcontextprotocol/inspector cannot be fetched")
    assert done.returncode == 0, done.stdout + done.stderr

    def answer(step: str) -> dict:
        return json.loads((out / f"{step}.json").read_text())

    tools = answer("tools_list")["tools"]
    assert len(tools) == 9 and all(t.get("outputSchema") for t in tools)
    loaded = answer("load_graph")["structuredContent"]
    assert loaded["source"] == "legacy" and loaded["entities_by_type"]["npu"] == 8
    matched = answer("match_patterns")
    assert not matched.get("isError"), matched
    patterns = {f["pattern"] for f in matched["structuredContent"]["findings"]}
    assert "interconnect.device_numa_mismatch" in patterns
