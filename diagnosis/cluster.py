"""Diagnosis of a cluster: every host's graph diagnosed on its own, in worker processes, then the
cross-host patterns on the hosts' digests.

Memory grows with the digests (a few KB per host: the host's findings, its ranks' key signals, its
facts), not with the graphs: a worker loads one graph at a time and sends back only its digest, and
the graphs stay on disk for drill-down (`cluster diagnose DIR --host NAME`).
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from witty_profiler.diagnosis.crosshost import windows_apart
from witty_profiler.diagnosis.digest import host_digests
from witty_profiler.diagnosis.matcher import diagnose, diagnose_hosts
from witty_profiler.diagnosis.models import Diagnosis, rounded
from witty_profiler.diagnosis.thresholds import coerce
from witty_profiler.topology import load_graph
from witty_profiler.topology.errors import InputError

TOP_FINDINGS = 5  # of each host, kept in its digest


@dataclass
class ClusterDiagnosis:
    """Hosts (digests with their own findings), hosts that gave no graph, and the cross-host diagnosis."""

    hosts: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)  # {host, reason}
    cross: Diagnosis = field(default_factory=Diagnosis)
    windows_apart: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return rounded({"hosts": self.hosts, "failed": self.failed, "windows_apart": self.windows_apart,
                        **self.cross.to_dict()})

    def host(self, name: str) -> dict[str, Any] | None:
        return next((h for h in self.hosts if h["host"] == name), None)

    def worst_first(self) -> list[dict[str, Any]]:
        """Hosts by their worst findings: P0 count, P1 count, P2 count, then name."""
        return sorted(self.hosts, key=lambda h: (-h["counts"]["P0"], -h["counts"]["P1"], -h["counts"]["P2"], h["host"]))


def host_digest(path: str, thresholds: Any = None) -> list[dict[str, Any]]:
    """Diagnose one host's graph file and return its digests (one per host in the file), each with the
    file, its finding counts and first findings; or one {'file', 'error'} record when it cannot be read."""
    try:
        graph = load_graph(path)
        diagnosis = diagnose(graph, thresholds=thresholds)
    except (InputError, OSError) as exc:
        return [{"file": path, "error": str(exc)}]
    own = diagnosis.findings  # the cross-host patterns need two hosts or more: not evaluated on one
    digests = host_digests(graph)
    for d in digests:
        d["file"] = path
        d["counts"] = {p: sum(1 for f in own if f.priority == p) for p in ("P0", "P1", "P2")}
        d["findings"] = [{"pattern": f.pattern, "priority": f.priority, "title": f.title,
                          "description": _first_sentence(f.description)} for f in own[:TOP_FINDINGS]]
    return digests


def _first_sentence(text: str, limit: int = 160) -> str:
    cut = text.split(". ")[0]
    return cut if len(cut) <= limit else cut[:limit - 1] + "…"


def _digest_one(job: tuple[str, Any]) -> list[dict[str, Any]]:
    return host_digest(*job)


def diagnose_cluster(files: Iterable[str | os.PathLike[str]], failed: Iterable[dict[str, str]] = (),
                     thresholds: Any = None, workers: int | None = None) -> ClusterDiagnosis:
    """Each file diagnosed in a pool of worker processes (default: one per CPU), then the cross-host
    patterns. `failed` lists hosts that gave no file ({host, reason}), from the launcher."""
    overrides = coerce(thresholds)  # a bad file fails here once, not in every worker
    paths = sorted(str(Path(f)) for f in files)
    jobs = [(p, overrides) for p in paths]
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs) or 1))
    if workers == 1 or len(jobs) < 4:
        return _assemble(map(_digest_one, jobs), failed, overrides)
    # forkserver: safe from a threaded caller (the MCP server), and cheap after the first worker
    context = multiprocessing.get_context("forkserver")
    with context.Pool(workers, maxtasksperchild=200) as pool:
        results = pool.imap(_digest_one, jobs, chunksize=max(1, min(16, len(jobs) // (workers * 4))))
        return _assemble(results, failed, overrides)


def _assemble(results: Iterable[list[dict[str, Any]]], failed: Iterable[dict[str, str]],
              overrides: Any) -> ClusterDiagnosis:
    out = ClusterDiagnosis(failed=[dict(f) for f in failed])
    seen: dict[str, str] = {}
    for digests in results:
        for d in digests:
            if "error" in d:
                out.failed.append({"host": Path(d["file"]).stem, "reason": d["error"]})
            elif d["host"] in seen:
                out.failed.append({"host": d["host"], "reason": f"{d['file']} names a host {seen[d['host']]} already "
                                                                "gave; kept the first"})
            else:
                seen[d["host"]] = d["file"]
                out.hosts.append(d)
    out.hosts.sort(key=lambda h: h["host"])
    out.failed.sort(key=lambda f: f["host"])
    out.cross = diagnose_hosts(out.hosts, overrides)
    out.windows_apart = windows_apart(out.hosts)
    return out
