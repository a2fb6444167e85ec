"""witty-mcp on several hosts: every tool on a graph merged from three hosts (and one host of it), the
hosts of a graph or a cluster folder, the cross-host diagnosis of a folder with drill-down to one host,
collect's cluster arguments and their errors, and a fan-out over ssh to loopback sshd hosts
(tests/sshd_hosts.py)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp
import pytest
from fake_kubectl import fake_kubectl
from marked_processes import KEY, kill_marked, new_mark, wait_for, wait_gone
from mcp_support import call, call_error
from sshd_hosts import ssh_hosts  # noqa: F401 - the fixture

from witty_profiler.app.graphs import GraphStore
from witty_profiler.cli import main as cli
from witty_profiler.cluster.collect import Launch
from witty_profiler.cluster.fanout import HostResult, Manifest, write_manifest
from witty_profiler.mcp_server.budget import count_tokens
from witty_profiler.mcp_server.server import build_server
from witty_profiler.mcp_server.tools import WittyTools
from witty_profiler.topology import Graph, Meta, dump_graph
from witty_profiler.topology.ids import host_id, process_id
from witty_profiler.topology.models import CollectorStatus

pytestmark = pytest.mark.anyio
HOSTS = ["a", "b", "c"]
JOB = "job:slurm:42"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def host_graph(host: str, rank: int, cpu: float, nic_mbps: float = 100000.0, gpu: str = "unavailable") -> Graph:
    """One host's graph as collect leaves it: a rank of job 42 and its NIC."""
    g = Graph(Meta(hosts=[host], source="live", duration_s=10.0, interval_s=1.0, started_at="2026-12-02T09:00:00Z",
                   collectors={"process": CollectorStatus(status="ok"), "cpu": CollectorStatus(status="ok"),
                               "gpu": CollectorStatus(status=gpu, reason=None if gpu == "ok" else "no NVML")}))
    g.entity_of("host", host_id(host), {"name": host}, {})
    pid = g.entity_of("process", process_id(host, 100 + rank), {
        "pid": 100 + rank, "name": "python3", "role": "trainer", "ai": True, "rank": rank, "world_size": 3,
        "job": JOB, "cmdline": "python3 train.py"}, {"cpu_util_pct": cpu}).id
    g.entity_of("job", JOB, {"scheduler": "slurm", "job_id": "42", "world_size": 3})
    g.edge_of("member_of", pid, JOB, {"rank": rank})
    g.entity_of("nic", f"nic:{host}:ib0", {"pci_address": "0000:3b:00.0"}, {"speed_mbps": nic_mbps})
    return g


def write_hosts(folder: Path, cpus: list[float], gpu_of: dict[str, str] | None = None) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank, (host, cpu) in enumerate(zip(HOSTS, cpus)):
        path = folder / f"{host}.json"
        dump_graph(host_graph(host, rank, cpu, gpu=(gpu_of or {}).get(host, "unavailable")), path)
        paths.append(path)
    return paths


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "work").mkdir()
    return tmp_path / "work"


@pytest.fixture
def merged(workdir: Path) -> tuple[str, str]:
    """Two graphs of hosts a, b and c, each made by `witty-profiler merge` (the second after a change)."""
    for name, cpus, gpu in (("before", [95.0, 94.0, 96.0], {"b": "error"}), ("after", [95.0, 30.0, 96.0], {})):
        files = write_hosts(workdir / name, cpus, gpu)
        assert cli(["merge", *map(str, files), "-o", str(workdir / f"{name}.json")]) == 0
    return "before.json", "after.json"


def tools_for(tmp_path: Path, workdir: Path, **launch: Any) -> WittyTools:
    return WittyTools(GraphStore(tmp_path / "state"), workdir=workdir, launch=Launch(**launch))


@pytest.mark.slow
async def test_every_tool_works_on_a_merged_graph(tmp_path: Path, workdir: Path, merged: tuple[str, str]) -> None:
    tools = tools_for(tmp_path, workdir)
    async with mcp.Client(build_server(tools)) as client:
        before = await call(client, "load_graph", path=merged[0])
        after = await call(client, "load_graph", path=merged[1])
        gid = before["graph_id"]
        assert before["hosts"] == HOSTS and "process 3" in before["text"]
        summary = await call(client, "graph_summary", graph_id=gid)
        assert "process 3" in summary["text"] and summary["entity_count"] == before["entity_count"]
        found = await call(client, "query_graph", graph_id=gid, type="process", where=["cpu_util_pct>90"])
        assert sorted(e["id"] for e in found["entities"]) == [process_id(h, 100 + i) for i, h in enumerate(HOSTS)]
        ranked = await call(client, "query_graph", graph_id=after["graph_id"], top_by_metric="cpu_util_pct",
                            ascending=True, limit=1)
        assert ranked["entities"][0]["id"] == process_id("b", 101)
        # every layer of the whole graph, then of one host: only that host's ids
        for layer in ("summary", "compute", "network", "all"):
            assert (await call(client, "convert_layer", graph_id=gid, layer=layer, max_tokens=3000))["text"]
        one = await call(client, "convert_layer", graph_id=gid, layer="all", host="b")
        assert ":b:" in one["text"] and ":a:" not in one["text"] and ":c:" not in one["text"]
        # the whole graph has the cross-host patterns; one host of it has not
        matched = await call(client, "match_patterns", graph_id=gid)
        assert "control.straggler_host" in matched["text"] and "network.odd_host" in matched["text"]
        alone = await call(client, "match_patterns", graph_id=gid, host="a")
        assert alone["graph_id"] == gid and alone["host"] == "a"
        assert not any(f.endswith("_host") for f in alone["findings"])
        compared = await call(client, "compare_graphs", before_id=gid, after_id=after["graph_id"])
        assert compared["text"]
        report = await call(client, "generate_report", graph_id=gid, output_path="merged.md")
        assert report["written_to"] == str(tmp_path / "state" / "reports" / "merged.md")
        hosts = await call(client, "list_hosts", graph_id=gid)
        assert [h["host"] for h in hosts["hosts"]] == HOSTS and hosts["total"] == 3
        by_host = {h["host"]: h for h in hosts["hosts"]}
        assert by_host["b"]["collectors_not_ok"] == ["gpu"] and by_host["a"]["collectors_not_ok"] == ["gpu"]
        assert by_host["a"]["started_at"] == "2026-12-02T09:00:00Z" and by_host["a"]["duration_s"] == 10
        assert by_host["a"]["entities"] == 3  # host, process, nic (the job is no host's)
        first = await call(client, "list_hosts", graph_id=gid, limit=2)
        rest = await call(client, "list_hosts", graph_id=gid, limit=2, cursor=first["next_cursor"])
        assert [h["host"] for h in first["hosts"] + rest["hosts"]] == HOSTS and "next_cursor" not in rest
        assert "no host 'zz'" in await call_error(client, "convert_layer", graph_id=gid, host="zz")
        assert "no host 'zz'" in await call_error(client, "match_patterns", graph_id=gid, host="zz")


def test_cli_convert_and_diagnose_one_host_of_a_merged_graph(workdir: Path, merged: tuple[str, str], capsys) -> None:
    graph = str(workdir / merged[1])
    assert cli(["convert", graph, "--layer", "all", "--host", "b"]) == 0
    view = capsys.readouterr().out
    assert "process:b:101" in view and ":a:" not in view and ":c:" not in view
    assert cli(["diagnose", graph, "--format", "json"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert "control.straggler_host" in {f["pattern"] for f in whole["findings"]}
    assert cli(["diagnose", graph, "--host", "b", "--format", "json"]) == 0
    alone = json.loads(capsys.readouterr().out)
    assert "control.straggler_host" not in {f["pattern"] for f in alone["findings"]}
    assert cli(["convert", graph, "--host", "zz"]) == 2
    assert "no host 'zz' in this graph; it has a, b, c" in capsys.readouterr().err
    assert cli(["diagnose", "--host", "b"]) == 2
    assert "--host picks one host of a merged GRAPH" in capsys.readouterr().err


def cluster_folder(folder: Path, failed: int = 1) -> Path:
    """A folder as cluster collect leaves it: a, b, c and `failed` more hosts that gave no graph."""
    write_hosts(folder, [95.0, 30.0, 96.0])
    results = [HostResult(h, "ok", file=str(folder / f"{h}.json")) for h in HOSTS]
    results += [HostResult(f"down{i}", "failed", "the connection failed: ssh: connect to host down refused")
                for i in range(failed)]
    write_manifest(folder, Manifest("ssh", "2026-12-02T09:00:00Z", 10.0, results))
    return folder


async def test_cluster_folder_hosts_diagnosis_and_one_host(tmp_path: Path, workdir: Path) -> None:
    cluster_folder(workdir / "run1")
    async with mcp.Client(build_server(tools_for(tmp_path, workdir))) as client:
        hosts = await call(client, "list_hosts", directory="run1")
        rows = {h["host"]: h for h in hosts["hosts"]}
        assert set(rows) == {*HOSTS, "down0"} and rows["a"]["status"] == "ok" and rows["a"]["entities"] == 4
        assert rows["down0"]["status"].startswith("failed: the connection failed")
        across = await call(client, "match_patterns", directory="run1")
        assert across["hosts_ok"] == 3 and across["hosts_failed"] == 1 and "graph_id" not in across
        assert across["text"].startswith("# Cluster: 3 hosts diagnosed, 1 without a graph")
        assert "`control.straggler_host`: 1 rank on host b" in across["text"]
        assert "match_patterns with this directory and host=NAME shows one" in across["text"]
        assert [f.split()[1] for f in across["findings"]] == ["control.straggler_host"]
        assert "network.odd_host" in across["text"]
        # a folder has no layer view: the evidence of its P0/P1 findings comes with it, ids and values
        evidence = across["text"].split("evidence of control.straggler_host:\n", 1)[1]
        assert "process:b:" in evidence and "host:b" in evidence, evidence
        one = await call(client, "match_patterns", directory="run1", host="b")
        assert one["host"] == "b" and one["graph_id"] and one["directory"] == "run1"
        view = await call(client, "convert_layer", graph_id=one["graph_id"], layer="compute")  # drill further
        assert "process:b:101" in view["text"]
        for arguments, expected in [
                ({"directory": "run1", "graph_id": one["graph_id"]}, "one of them"),
                ({}, "one of them"),
                ({"directory": "run1", "pids": [1]}, "pids and layer are for one host"),
                ({"directory": "run1", "host": "zz"}, "no graph of host 'zz'"),
                ({"directory": "run1", "host": "../a"}, "no graph of host '../a'"),
                ({"directory": "nowhere"}, "no such directory")]:
            assert expected in await call_error(client, "match_patterns", **arguments), arguments
        assert "one of them" in await call_error(client, "list_hosts")
        assert "no such directory" in await call_error(client, "list_hosts", directory="nowhere")


@pytest.mark.slow
async def test_cluster_summary_stays_small_for_1000_hosts(tmp_path: Path, workdir: Path) -> None:
    cluster_folder(workdir / "big", failed=997)  # 3 graphs and 997 hosts that gave none: 1,000 hosts
    async with mcp.Client(build_server(tools_for(tmp_path, workdir))) as client:
        across = await call(client, "match_patterns", directory="big")
        hosts = await call(client, "list_hosts", directory="big", limit=500)
    assert across["hosts_failed"] == 997 and count_tokens(across["text"]) < 500
    assert hosts["total"] == 1000 and len(hosts["hosts"]) == 500 and hosts["next_cursor"]


async def test_collect_cluster_arguments_are_checked_before_anything_runs(tmp_path: Path, workdir: Path) -> None:
    reports = tmp_path / "state" / "reports"
    (reports / "used").mkdir(parents=True)
    (reports / "used" / "mine.txt").write_text("a user's file")
    (reports / "afile").write_text("x")
    os.symlink(tmp_path, reports / "link")
    async with mcp.Client(build_server(tools_for(tmp_path, workdir))) as client:
        for arguments, expected in [
                ({"hosts": ["n1"], "slurm_nodes": "n[1-2]", "output_dir": "x"}, "name the hosts one way"),
                ({"hosts": ["n1"], "kubectl_selector": "app=w", "output_dir": "x"}, "name the hosts one way"),
                ({"hosts": ["n1"]}, "a cluster needs output_dir"),
                ({"output_dir": "x"}, "for a cluster"),
                ({"diagnose": True}, "for a cluster"),
                ({"hosts": ["n1"], "output_dir": "x", "pids": [1]}, "drop them for a cluster"),
                ({"hosts": ["n1"], "output_dir": "x", "namespace": "ns"}, "namespace is for kubectl_selector"),
                ({"hosts": ["-oProxyCommand=x"], "output_dir": "x"}, "bad host"),
                ({"hosts": ["a/../../b"], "output_dir": "x"}, "bad host"),
                ({"hosts": ["n1"], "output_dir": "../x"}, "outside the report directory"),
                ({"hosts": ["n1"], "output_dir": str(tmp_path / "x")}, "outside the report directory"),
                ({"hosts": ["n1"], "output_dir": "used"}, "is not empty"),
                ({"hosts": ["n1"], "output_dir": "afile"}, "is a file"),
                ({"hosts": ["n1"], "output_dir": "link"}, "is a symbolic link"),
                ({"hosts": ["n1"], "output_dir": "link/x"}, "symbolic link"),
                ({"hosts": ["n1"], "output_dir": "no/such/x"}, "does not exist"),
                ({"hosts": ["n1"], "output_dir": "x", "duration_s": 900}, "cap of 300 s")]:
            message = await call_error(client, "collect", **arguments)
            assert expected in message, (arguments, message)
    assert (reports / "used" / "mine.txt").read_text() == "a user's file"
    assert not (reports / "x").exists() and not (tmp_path / "x").exists()


@pytest.mark.live
async def test_collect_cluster_launcher_failures_are_one_line(tmp_path: Path, workdir: Path) -> None:
    """Where no Slurm controller or Kubernetes API answers, slurm_nodes and kubectl_selector fail as one line
    that says why (and a kubectl that is not there says how to give one)."""
    tools = tools_for(tmp_path, workdir, kubectl=str(tmp_path / "no-kubectl"))
    async with mcp.Client(build_server(tools)) as client:
        missing = await call_error(client, "collect", kubectl_selector="app=witty", output_dir="k")
        assert "no-kubectl: not found" in missing
        slurm = await call_error(client, "collect", slurm_nodes="n[1-2]", output_dir="s")
        assert "scontrol" in slurm


@pytest.mark.live
@pytest.mark.slow
async def test_collect_a_cluster_over_ssh(tmp_path: Path, workdir: Path, ssh_hosts) -> None:  # noqa: F811
    """Two hosts through real sshd servers (each graph named after its ssh alias), one host whose connection
    fails; progress per host; the folder, its manifest and the cross-host summary."""
    tools = tools_for(tmp_path, workdir, ssh_config=str(ssh_hosts.config),
                      remote_command=f"{sys.executable} -m witty_profiler")
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, total, message))

    async with mcp.Client(build_server(tools)) as client:
        result = await client.call_tool("collect", {"hosts": ["h1", "h2", "unreachable"], "output_dir": "run",
                                                    "duration_s": 1, "interval_s": 0.5,
                                                    "collectors": ["process", "cpu"], "diagnose": True},
                                        progress_callback=on_progress)
        assert not result.is_error, result.content[0].text
        out = result.structured_content
        folder = tmp_path / "state" / "reports" / "run"
        assert out["directory"] == str(folder) and out["ok"] == 2 and out["failed"] == 1
        status = {h["host"]: h for h in out["host_status"]}
        assert status["h1"]["status"] == "ok" and status["unreachable"]["status"] == "failed"
        assert "connection failed" in status["unreachable"]["reason"]
        assert "# Cluster: 2 hosts diagnosed, 1 without a graph" in out["text"]
        assert "graph_id" not in out
        assert sorted(p.name for p in folder.iterdir()) == ["cluster.json", "h1.json", "h2.json"]
        assert json.loads((folder / "cluster.json").read_text())["hosts"]["unreachable"]["status"] == "failed"
        assert sorted(m.split()[0] for _, _, m in progress if m) == ["h1", "h2", "unreachable"]
        assert sorted(d for d, _, _ in progress) == [1, 2, 3] and {t for _, t, _ in progress} == {3}
        hosts = await call(client, "list_hosts", directory=str(folder))
        assert [h["host"] for h in hosts["hosts"] if h["status"] == "ok"] == ["h1", "h2"]
        one = await call(client, "match_patterns", directory=str(folder), host="h1")
        assert one["graph_id"] and one["hosts_ok"] == 2
        # the folder is now in use: a second collect into it is refused and leaves it as it was
        again = await call_error(client, "collect", hosts=["h1"], output_dir="run", duration_s=1)
        assert "is not empty" in again


@pytest.mark.live
@pytest.mark.slow
async def test_cancelling_a_cluster_collect_ends_the_launchers(tmp_path: Path, workdir: Path) -> None:
    """A client gives up on a cluster collect that runs on a worker thread: each kubectl exec (the stand-in of
    tests/fake_kubectl.py runs the pod's command here) and the child it started are ended, not left to run
    out the window."""
    mark = new_mark()
    tools = tools_for(tmp_path, workdir, kubectl=fake_kubectl(tmp_path),
                      remote_command=f"env {KEY}={mark} sh -c 'sleep 600 & wait'")
    try:
        async with mcp.Client(build_server(tools)) as client:
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tasks:
                    async def give_up() -> None:  # once two pods' shell and sleep run
                        await anyio.to_thread.run_sync(lambda: wait_for(mark, 4))
                        tasks.cancel_scope.cancel()
                    tasks.start_soon(give_up)
                    await client.call_tool("collect", {"kubectl_selector": "app=wp", "output_dir": "run",
                                                       "duration_s": 200, "interval_s": 1})
            left = await anyio.to_thread.run_sync(lambda: wait_gone(mark, 15))
            assert left == [], f"still running after the call was cancelled: {left}"
            manifest = tmp_path / "state" / "reports" / "run" / "cluster.json"
            with anyio.fail_after(15):  # the worker writes it once the launchers have ended
                while not manifest.exists():
                    await anyio.sleep(0.1)
            hosts = json.loads(manifest.read_text())
            assert hosts["cancelled"] is True and hosts["hosts"]["node-a"]["status"] == "cancelled"
    finally:
        kill_marked(mark)


@pytest.mark.live
@pytest.mark.slow
async def test_a_cluster_collect_without_a_graph_says_so(tmp_path: Path, workdir: Path) -> None:
    tools = tools_for(tmp_path, workdir, kubectl=fake_kubectl(tmp_path), remote_command="/nonexistent/witty-profiler")
    async with mcp.Client(build_server(tools)) as client:
        out = await call(client, "collect", kubectl_selector="app=wp", output_dir="none", duration_s=1)
    assert out["ok"] == 0 and out["failed"] == 3
    assert [(h["host"], h["status"]) for h in out["host_status"]] == [
        ("node-a", "failed"), ("node-b", "failed"), ("node-c", "skipped")]
    assert out["text"].startswith(f"cluster folder {tmp_path / 'state' / 'reports' / 'none'}: no host gave a graph")
    assert "match_patterns" not in out["text"]
