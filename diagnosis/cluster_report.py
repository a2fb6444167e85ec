"""What `cluster diagnose` prints: a summary that stays small for any number of hosts (the cross-host
findings, the worst hosts first and the rest counted, the hosts that gave no graph), and the report,
which adds the cross-host findings' evidence and recommendations."""

from __future__ import annotations

from witty_profiler.diagnosis.cluster import ClusterDiagnosis
from witty_profiler.diagnosis.report import finding_section, md
from witty_profiler.topology.errors import InputError

SHOWN_HOSTS = 8  # worst hosts listed in the summary
SHOWN_FAILED = 5
DESCRIPTION_CHARS = 260


def summary(d: ClusterDiagnosis, directory: str = "DIR", drill: str | None = None) -> str:
    """Markdown of a bounded size: under 500 tokens for 1,000 hosts. `drill` says how to see one host
    (default: the `cluster diagnose --host` command)."""
    lines = [f"# Cluster: {len(d.hosts)} hosts diagnosed" + (f", {len(d.failed)} without a graph" if d.failed else "")]
    window = _window(d)
    if window:
        lines.append(f"window: {window}")
    if d.windows_apart:
        lines.append(f"{len(d.windows_apart)} hosts outside the window most share: "
                     + md(", ".join(d.windows_apart[:3])) + (" …" if len(d.windows_apart) > 3 else ""))
    lines += ["", "## Across hosts"]
    for f in d.cross.findings:
        text = f.description if len(f.description) <= DESCRIPTION_CHARS else f.description[:DESCRIPTION_CHARS - 1] + "…"
        lines.append(f"- [{f.priority}] `{f.pattern}`: {md(text)}")
    for row in d.cross.coverage:
        if row.status != "finding":
            lines.append(f"- `{row.pattern}` {row.status.replace('_', ' ')}: {md(_short(row.reason))}")
    worst = [h for h in d.worst_first() if any(h["counts"].values())]
    lines += ["", "## Hosts, worst first"]
    if worst:
        lines += ["host | P0 | P1 | P2 | first findings", "---|---|---|---|---"]
    for h in worst[:SHOWN_HOSTS]:
        patterns = ", ".join(f["pattern"] for f in h["findings"][:3])
        lines.append(f"{md(h['host'])} | {h['counts']['P0']} | {h['counts']['P1']} | {h['counts']['P2']} | {patterns}")
    quiet = len(d.hosts) - len(worst)
    rest = len(worst) - min(len(worst), SHOWN_HOSTS)
    if rest or quiet:
        more = f"… {rest} more hosts with findings, {quiet} without" if worst else f"No host has findings of its own ({quiet} diagnosed)"
        drill = drill or f"`witty-profiler cluster diagnose {md(directory)} --host NAME` shows one"
        lines.append(f"{more}: {drill}")
    if d.failed:
        shown = "; ".join(f"{md(f['host'])}: {md(_short(f['reason'], 90))}" for f in d.failed[:SHOWN_FAILED])
        more = f" (+{len(d.failed) - SHOWN_FAILED} more)" if len(d.failed) > SHOWN_FAILED else ""
        lines += ["", f"## Without a graph: {shown}{more}"]
    return "\n".join(lines) + "\n"


def report(d: ClusterDiagnosis, directory: str = "DIR", format: str = "md") -> str:
    if format == "json":
        import json
        return json.dumps(d.to_dict(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if format == "summary":
        return summary(d, directory)
    if format not in ("md", "markdown"):
        raise InputError(f"unknown report format {format!r}; use md, summary or json")
    lines = [summary(d, directory).rstrip("\n"), ""]
    if d.cross.findings:
        lines += ["## Cross-host findings", ""]
        for f in d.cross.findings:
            lines += finding_section(f)
    if len(d.failed) > SHOWN_FAILED:
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
