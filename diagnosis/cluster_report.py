"""What `cluster diagnose` prints: a summary that stays small for any number of hosts (the cross-host
findings, the worst hosts first and the rest counted, the hosts that gave no graph), and the report,
which adds the cross-host findings' evidence and recommendations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from witty_profiler.diagnosis.cluster import ClusterDiagnosis
from witty_profiler.diagnosis.report import finding_section, md
from witty_profiler.topology.errors import InputError

SUMMARY_TOKENS = 500  # the bound callers hold the summary to, whatever the number of hosts


@dataclass(frozen=True)
class _Room:
    """How much of each list the summary shows."""

    hosts: int  # worst hosts listed
    failed: int  # hosts without a graph named
    chars: int  # of a cross-host finding's description
    reason: int  # of a reason


# from the roomiest down: the first that fits is taken (the smallest if none does)
ROOMS = (_Room(8, 5, 260, 90), _Room(6, 3, 220, 70), _Room(4, 2, 180, 60), _Room(3, 1, 140, 50), _Room(2, 0, 110, 40),
         _Room(1, 0, 80, 30))


def summary(d: ClusterDiagnosis, directory: str = "DIR", drill: str | None = None,
            fits: Callable[[str], bool] | None = None) -> str:
    """Markdown of a bounded size: the roomiest layout that `fits` accepts (the CLI and the MCP server
    count cl100k tokens against SUMMARY_TOKENS; the converters own the tokenizer). `drill` says how to
    see one host (default: the `cluster diagnose --host` command)."""
    text = ""
    for room in ROOMS:
        text = _summary(d, directory, drill, room)
        if fits is None or fits(text):
            break
    return text


def _summary(d: ClusterDiagnosis, directory: str, drill: str | None, room: _Room) -> str:
    lines = [f"# Cluster: {len(d.hosts)} hosts diagnosed" + (f", {len(d.failed)} without a graph" if d.failed else "")]
    window = _window(d)
    if window:
        lines.append(f"window: {window}")
    if d.windows_apart:
        lines.append(f"{len(d.windows_apart)} hosts outside the window most share: "
                     + md(", ".join(d.windows_apart[:3])) + (" …" if len(d.windows_apart) > 3 else ""))
    lines += ["", "## Across hosts"]
    for f in d.cross.findings:
        lines.append(f"- [{f.priority}] `{f.pattern}`: {md(_short(f.description, room.chars))}")
    for row in d.cross.coverage:
        if row.status != "finding":
            lines.append(f"- `{row.pattern}` {row.status.replace('_', ' ')}: {md(_short(row.reason, room.chars))}")
    worst = [h for h in d.worst_first() if any(h["counts"].values())]
    lines += ["", "## Hosts, worst first"]
    if worst:
        lines += ["host | P0 | P1 | P2 | first findings", "---|---|---|---|---"]
    for h in worst[:room.hosts]:
        patterns = ", ".join(f["pattern"] for f in h["findings"][:3])
        lines.append(f"{md(h['host'])} | {h['counts']['P0']} | {h['counts']['P1']} | {h['counts']['P2']} | {patterns}")
    quiet = len(d.hosts) - len(worst)
    rest = len(worst) - min(len(worst), room.hosts)
    if rest or quiet:
        more = (f"… {rest} more hosts with findings, {quiet} without" if worst
                else f"No host has findings of its own ({quiet} diagnosed)")
        drill = drill or f"`witty-profiler cluster diagnose {md(directory)} --host NAME` shows one"
        lines.append(f"{more}: {drill}")
    if d.failed:
        shown = "; ".join(f"{md(f['host'])}: {md(_short(f['reason'], room.reason))}" for f in d.failed[:room.failed])
        more = f"(+{len(d.failed) - room.failed} more)" if len(d.failed) > room.failed else ""
        lines += ["", f"## Without a graph: {shown}{' ' if shown and more else ''}{more}"]
    return "\n".join(lines) + "\n"


def report(d: ClusterDiagnosis, directory: str = "DIR", format: str = "md",
           fits: Callable[[str], bool] | None = None) -> str:
    """json: everything; summary: the bounded summary; md: the summary, then the cross-host findings with
    their evidence and every host without a graph."""
    if format == "json":
        import json
        return json.dumps(d.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if format == "summary":
        return summary(d, directory, fits=fits)
    if format not in ("md", "markdown"):
        raise InputError(f"unknown report format {format!r}; use md, summary or json")
    lines = [summary(d, directory, fits=fits).rstrip("\n"), ""]
    if d.cross.findings:
        lines += ["## Cross-host findings", ""]
        for f in d.cross.findings:
            lines += finding_section(f)
    if d.failed:
        lines += ["## Every host without a graph", ""] + [f"- {md(f['host'])}: {md(f['reason'])}" for f in d.failed]
    return "\n".join(lines).rstrip("\n") + "\n"


def _window(d: ClusterDiagnosis) -> str:
    starts = sorted(str(h["window"]["started_at"]) for h in d.hosts if h.get("window", {}).get("started_at"))
    durations = [h["window"]["duration_s"] for h in d.hosts if h.get("window", {}).get("duration_s") is not None]
    if not starts:
        return ""
    span = starts[0] if starts[0] == starts[-1] else f"{starts[0]} to {starts[-1]}"
    return f"started {span}, {min(durations):g}-{max(durations):g} s" if durations and min(durations) != max(
        durations) else f"started {span}" + (f", {durations[0]:g} s" if durations else "")


def _short(text: str, limit: int = 140) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"
