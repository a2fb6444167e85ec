"""Reports from a diagnosis: Markdown to read, JSON per DESIGN.md.

Markdown sections: executive summary (counts by priority, the top three findings in one sentence
each), one section per layer ("Layer 1: Compute" ... "Layer 7: Data Plane") with its findings
(severity, description, evidence, recommendations) and the state of every other pattern (clear,
or not evaluated and why), recommendations by priority, a phased roadmap, and an appendix with
the collectors' status. Everything comes from the Diagnosis, in its order, so the same diagnosis
gives the same text.
"""

from __future__ import annotations

import re
from typing import Any

from witty_profiler.diagnosis.catalog import with_unit
from witty_profiler.diagnosis.models import LAYERS, CoverageRow, Diagnosis, Evidence, Finding, rounded
from witty_profiler.topology import Graph
from witty_profiler.topology.errors import InputError

PHASES = (("P0", "Immediate", "fix before the next run"), ("P1", "Short term", "within the current tuning cycle"),
          ("P2", "Longer term", "when the larger items are done"))


def report(diagnosis: Diagnosis, graph: Graph | None = None, format: str = "md") -> str:
    if format == "json":
        return diagnosis.to_json()
    if format not in ("md", "markdown"):
        raise InputError(f"unknown report format {format!r}; use md or json")
    return markdown(diagnosis, graph)


def value_text(value: Any) -> str:
    """An evidence value as text: floats rounded, a mapping as 'key: value, ...', a list joined."""
    value = rounded(value)
    if isinstance(value, dict):
        return ", ".join(f"{k}: {value_text(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(value_text(v) for v in value)
    if value is None:
        return ""
    return str(value)


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


_MARKUP = re.compile(r"[\\`*\[\]|]|<(?=[A-Za-z/!?])")


def md(text: str) -> str:
    """Text that may quote the host (names, paths, command lines) as Markdown shows it, never as markup:
    no emphasis, link, code span, HTML tag or table cell boundary can come from the data."""
    return _MARKUP.sub(lambda m: "\\" + m[0], text)


def _cell(text: str) -> str:
    return md(text).replace("\n", " ")


def _code(text: str) -> str:
    """An id or a name as a code span, whatever backticks it holds."""
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


def _ids(ids: list[str], limit: int = 3) -> str:
    shown = ", ".join(_code(i) for i in ids[:limit])
    return shown + (f" (+{len(ids) - limit})" if len(ids) > limit else "")


def evidence_table(items: list[Evidence]) -> list[str]:
    lines = ["| kind | ids | metric | value | threshold | note |", "|---|---|---|---|---|---|"]
    for e in items:
        value = (with_unit(value_text(e.value), e.unit) if e.value is not None and not isinstance(e.value, str)
                 else value_text(e.value))
        cells = [_cell(e.kind), _ids(e.ids).replace("|", "\\|"),
                 *(_cell(c) for c in (e.metric or "", value, value_text(e.threshold), e.note or ""))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def finding_section(f: Finding, detail: bool = True) -> list[str]:
    lines = [f"### {f.priority} ({f.severity}) · {f.title} — `{f.pattern}`", "", md(f.description), ""]
    if f.related:
        lines += ["Related: " + ", ".join(f"`{r}`" for r in f.related), ""]
    if detail or len(f.evidence) <= 6:
        lines += ["Evidence:", ""] + evidence_table(f.evidence) + [""]
    else:
        lines += ["Evidence (first 6 of {0}; `--detail` shows all):".format(len(f.evidence)), ""]
        lines += evidence_table(f.evidence[:6]) + [""]
    lines += ["Recommendations (most effective first):", ""]
    lines += [f"{i}. {r}" for i, r in enumerate(f.recommendations, 1)] + [""]
    return lines


def _status_line(row: CoverageRow) -> str:
    if row.status == "clear":
        return f"- `{row.pattern}` — clear: {md(row.reason)}"
    return f"- `{row.pattern}` — not evaluated: {md(row.reason)}"


def layer_section(d: Diagnosis, number: int, detail: bool = True) -> list[str]:
    title = LAYERS[number - 1][2]
    lines = [f"## Layer {number}: {title}", ""]
    rows = [r for r in d.coverage if r.layer == number]
    if not rows:
        return lines + ["Not part of this diagnosis (another layer was selected).", ""]
    findings = [f for f in d.findings if f.layer == number]
    for f in findings:
        lines += finding_section(f, detail)
    others = [r for r in rows if r.status != "finding"]
    if not findings:
        evaluated = [r for r in rows if r.status == "clear"]
        if evaluated and len(evaluated) == len(rows):
            lines += ["Clear: every pattern of this layer was evaluated and none fired.", ""]
        elif evaluated:
            lines += [f"Clear where evaluated ({len(evaluated)} of {len(rows)} patterns); the rest could not be "
                      "evaluated, so this layer is not known to be healthy.", ""]
        else:
            lines += ["Not evaluated: none of this layer's patterns had the data they need.", ""]
    if others:
        lines += ["Other patterns:" if findings else "Patterns:", ""] + [_status_line(r) for r in others] + [""]
    return lines


def markdown(d: Diagnosis, graph: Graph | None = None) -> str:
    s = d.summary
    counts = d.counts()
    lines = ["# witty-profiler diagnosis", ""]
    window = f"{s.get('started_at')}, {s.get('duration_s'):g} s" if s.get("duration_s") is not None else \
        "no capture window (snapshot)"
    lines += [f"- Hosts: {md(', '.join(s.get('hosts') or [])) or 'unknown'}",
              f"- Source: {md(s.get('source') or 'unknown')}; window: {md(window)}",
              f"- Scope: {md(s.get('scope', {}).get('description', ''))}"]
    if s.get("layer"):
        lines.append(f"- Layer: {s['layer']} only")
    if s.get("thresholds_overridden"):
        lines.append(f"- Thresholds overridden for: {', '.join(s['thresholds_overridden'])}")
    lines += ["", "## Executive summary", "",
              f"**P0: {counts['P0']} · P1: {counts['P1']} · P2: {counts['P2']}** — {_n(s.get('finding', 0), 'pattern')} "
              f"found a problem, {s.get('clear', 0)} {'is' if s.get('clear', 0) == 1 else 'are'} clear, "
              f"{s.get('not_evaluated', 0)} could not be evaluated (of {s.get('patterns', 0)}).", ""]
    if d.findings:
        lines += ["Top findings:", ""] + [f"{i}. {md(t)}" for i, t in enumerate(s.get("top", []), 1)] + [""]
    else:
        lines += ["No bottleneck found by the patterns that could be evaluated. Patterns that were not evaluated "
                  "say nothing about their layer (see each layer below).", ""]
    for number, _, _ in LAYERS:
        lines += layer_section(d, number, detail=True)
    lines += exporter_findings(d) + recommendations(d) + roadmap(d) + appendix(d)
    return "\n".join(lines).rstrip() + "\n"


def exporter_findings(d: Diagnosis) -> list[str]:
    """What the hosts' own `witty-profiler export` reported during a window read from Prometheus: recorded
    facts, with when each host reported them; the findings above are this diagnosis's own."""
    rows = d.summary.get("exporter_findings") or []
    if not rows:
        return []
    lines = ["## Reported by the hosts' exporters", "",
             "Findings each host's `witty-profiler export` reported on its own windows (witty_finding), as Prometheus "
             "kept them: recorded facts, not judged again here.", "",
             "| host | pattern | priority | first seen | last seen | reported for |", "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {_cell(str(r.get('host', '')))} | `{_cell(str(r.get('pattern', '')))}` | "
                     f"{_cell(str(r.get('priority', '')))} | {_cell(str(r.get('first_seen', '')))} | "
                     f"{_cell(str(r.get('last_seen', '')))} | {r.get('reported_s', 0):g} s |")
    return lines + [""]


def recommendations(d: Diagnosis) -> list[str]:
    lines = ["## Recommendations by priority", ""]
    if not d.findings:
        return lines + ["None: no finding.", ""]
    for priority, _, _ in PHASES:
        group = [f for f in d.findings if f.priority == priority]
        if not group:
            continue
        lines += [f"### {priority}", ""]
        for f in group:
            lines.append(f"- **{f.title}** (`{f.pattern}`): {f.recommendations[0] if f.recommendations else ''}")
        lines.append("")
    return lines


def roadmap(d: Diagnosis) -> list[str]:
    lines = ["## Roadmap", ""]
    later: list[str] = []
    for priority, phase, when in PHASES:
        group = [f for f in d.findings if f.priority == priority]
        steps = [f"{f.recommendations[0]} (`{f.pattern}`)" for f in group if f.recommendations]
        if priority == "P2":
            steps += later
        else:
            later += [f"{r} (`{f.pattern}`)" for f in group for r in f.recommendations[1:2]]
        if priority == "P2":
            missing = sorted({r.layer for r in d.coverage if r.status == "not_evaluated"})
            if missing:
                names = ", ".join(LAYERS[n - 1][2] for n in missing)
                steps.append(f"Close the blind spots: enable the collectors that the not-evaluated patterns of "
                             f"{names} need (see their reasons), then diagnose again.")
        lines += [f"### {phase} ({priority}: {when})", ""]
        lines += [f"{i}. {step}" for i, step in enumerate(steps, 1)] if steps else ["Nothing."]
        lines.append("")
    lines += ["After each change, collect again and check with `witty-profiler compare BEFORE AFTER`.", ""]
    return lines


def appendix(d: Diagnosis) -> list[str]:
    collectors = d.summary.get("collectors") or {}
    lines = ["## Appendix: collectors", ""]
    if not collectors:
        return lines + ["The graph records no collector status.", ""]
    lines += ["| collector | status | reason |", "|---|---|---|"]
    for name, c in collectors.items():
        lines.append(f"| {_cell(name)} | {c.get('status')} | {_cell(c.get('reason') or '')} |")
    return lines + [""]


def layer_detail(d: Diagnosis, number: int) -> str:
    """One layer with its findings' full evidence and the coverage of every pattern of the layer."""
    lines = layer_section(d, number, detail=True)
    rows = [r for r in d.coverage if r.layer == number]
    lines += ["### Coverage", "", "| pattern | status | reason |", "|---|---|---|"]
    lines += [f"| `{r.pattern}` | {r.status} | {_cell(r.reason)} |" for r in rows]
    return "\n".join(lines).rstrip() + "\n"
