"""A cluster directory as `cluster collect` leaves it: DIR/<host>.json per host that gave a graph and the
manifest DIR/cluster.json naming each host's outcome. Read by the CLI and the MCP server alike; its
diagnosis is diagnosis.cluster's on the directory's files and the manifest's failures."""

from __future__ import annotations

import os
from pathlib import Path
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from witty_profiler.cluster.fanout import MANIFEST, read_manifest
from witty_profiler.topology.errors import InputError
from witty_profiler.topology.text import printable, valid_text

if TYPE_CHECKING:
    from witty_profiler.diagnosis.cluster import ClusterDiagnosis


def graph_files(directory: str | os.PathLike[str]) -> list[Path]:
    """The host graphs of DIR, by name."""
    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: no such directory (cluster collect -o DIR writes one)")
    return sorted(p for p in directory.glob("*.json") if p.name != MANIFEST and p.is_file())


def failed_hosts(directory: str | os.PathLike[str]) -> list[dict[str, str]]:
    """{host, reason} of each host the manifest says gave no graph."""
    hosts = read_manifest(Path(directory)).get("hosts", {})
    return [{"host": printable(h), "reason": printable(f"{r.get('status')}: {r.get('reason', '')}")}
            for h, r in sorted(hosts.items()) if isinstance(r, dict) and r.get("status") != "ok"]


def host_rows(directory: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Each host of DIR: host, file, status ('ok', else why there is no graph), started_at, duration_s and
    entity count (read from the file's head and counts, without loading the graph)."""
    from witty_profiler.topology.scan import scan_native
    rows: list[dict[str, Any]] = []
    for path in graph_files(directory):
        try:
            with open(path, encoding="utf-8") as handle:
                found = scan_native(handle, str(path))
        except (InputError, OSError, UnicodeDecodeError, RecursionError) as exc:
            rows.append({"host": path.stem, "file": path.name, "status": f"unreadable: {exc}"})
            continue
        meta = valid_text(found.meta) if found else {}  # read from the head, not validated: keep what is text
        hosts = meta.get("hosts") if isinstance(meta.get("hosts"), list) else []
        started, duration = meta.get("started_at"), meta.get("duration_s")
        rows.append({"host": ",".join(h for h in hosts if isinstance(h, str)) or path.stem, "file": path.name,
                     "status": "ok", "started_at": started if isinstance(started, str) else None,
                     "duration_s": duration if isinstance(duration, (int, float)) and not isinstance(duration, bool)
                     else None, "entities": sum(found.entities.values()) if found else None})
    rows += [{"host": f["host"], "file": None, "status": f["reason"]} for f in failed_hosts(directory)]
    return rows


def host_file(directory: str | os.PathLike[str], host: str) -> Path:
    """DIR/<host>.json, or one sentence naming the hosts DIR has."""
    path = Path(directory) / f"{host}.json"
    if "/" in host or host.startswith(".") or not path.is_file():
        names = ", ".join(p.stem for p in graph_files(directory)[:20])
        raise InputError(f"no graph of host {host!r} in {directory}; it has: {names or 'none'}")
    return path


def diagnose_directory(directory: str | os.PathLike[str], failed: Iterable[dict[str, str]] | None = None,
                       thresholds: Any = None, workers: int | None = None) -> "ClusterDiagnosis":
    """`diagnose_cluster` on a cluster directory (DIR/<host>.json and its manifest); `failed` defaults to the
    hosts the manifest names without a graph."""
    from witty_profiler.diagnosis.cluster import diagnose_cluster
    files = graph_files(directory)
    failed = failed_hosts(directory) if failed is None else list(failed)
    if not files and not failed:
        raise InputError(f"{directory}: holds no graph file and no manifest of hosts (cluster collect writes both)")
    return diagnose_cluster(files, failed, thresholds=thresholds, workers=workers)
