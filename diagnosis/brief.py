"""The brief of a diagnosis: one line per finding and the coverage grouped by what was missing, for a
reader who has the layer views (they show each finding's evidence in their rows) or will open them.

    # diagnosis · 37 patterns: 2 findings (P0 2), 1 clear, 34 not evaluated
    [P0] interconnect.cross_numa_access: 3 workload processes run away from their memory: ... (view: interconnect)
      do: Bind each process to the NUMA node of its memory ...
    clear: dataplane.preprocessing_bottleneck
    not evaluated, grouped by why:
      [process partial] compute.cpu_starvation: no CPU utilisation of the workload's processes; ...

A not-evaluated reason is cut where it starts quoting its collectors' own words (the summary and the
views carry those); the collectors it names, with their status, head its group, so every row keeps
what was missing and why. Same diagnosis, same text.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from witty_profiler.diagnosis.models import LAYER_NAMES, CoverageRow, Diagnosis, Finding
from witty_profiler.diagnosis.report import value_text
from witty_profiler.topology.wording import counted

# "... (legacy file: collector process: partial (...); collector npu: partial (...))" or "(collector x: y)"
_CAUSE = re.compile(r"\s\((?:[\w .-]+: )?(?=collector [\w.@-]+: \w+)")
_COLLECTOR = re.compile(r"collector ([\w.@-]+): (\w+)")
# "... (legacy file: the legacy witty-profiler format does not record it (no capture window, no rates))"
_SOURCE = re.compile(r"\s\(([\w .-]+): the ([\w .-]+?) does not record it\b.*\)$")
DESCRIPTION_CHARS = 200


def split_reason(reason: str) -> tuple[str, str]:
    """(what was missing, why: the collectors the reason names, as 'name status, ...', or the source that
    does not record it; '' when the reason names neither)."""
    found = _CAUSE.search(reason)
    if found is not None:
        cause = ", ".join(f"{name} {status}" for name, status in _COLLECTOR.findall(reason[found.end():]))
        return reason[:found.start()], cause
    source = _SOURCE.search(reason)
    if source is not None:
        return reason[:source.start()], f"not recorded by the {source.group(2)}"
    return reason, ""


def _sentence(text: str, limit: int = DESCRIPTION_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def finding_line(f: Finding, advice: bool = True) -> list[str]:
    lines = [f"[{f.priority}] {f.pattern}: {_sentence(f.description or f.title)} (view: {LAYER_NAMES[f.layer]})"]
    if advice and f.priority in ("P0", "P1") and f.recommendations:
        lines.append(f"  do: {_sentence(f.recommendations[0])}")
    return lines


def evidence_lines(f: Finding) -> list[str]:
    """Each evidence item of `f` on a line: the metric, its value and unit, the threshold it crossed, what it
    says, and the ids it rests on."""
    lines = []
    for ev in f.evidence:
        value = value_text(ev.value)
        said = " ".join(x for x in (ev.metric or ev.kind, value, ev.unit or "") if x)
        crossed = f" ({ev.threshold})" if ev.threshold not in (None, "") else ""
        note = f"; {ev.note}" if ev.note else ""
        lines.append(f"  {said}{crossed}{note} [{', '.join(ev.ids)}]")
    return lines


def coverage_lines(rows: list[CoverageRow], reasons: bool = True) -> list[str]:
    """Clear patterns on one line; not-evaluated ones grouped by the collectors their reasons name."""
    clear = [r.pattern for r in rows if r.status == "clear"]
    lines = [f"clear: {', '.join(clear)}"] if clear else []
    groups: dict[str, dict[str, list[str]]] = {}  # why -> what was missing -> patterns
    for row in rows:
        if row.status == "not_evaluated":
            missing, cause = split_reason(row.reason)
            groups.setdefault(cause, {}).setdefault(missing, []).append(row.pattern)
    if groups:
        lines.append("not evaluated, grouped by why:")
        for cause in sorted(groups, key=lambda c: (c == "", c)):
            said = ("; ".join(f"{', '.join(patterns)}: {missing}" for missing, patterns in groups[cause].items())
                    if reasons else ", ".join(p for patterns in groups[cause].values() for p in patterns))
            lines.append(f"  [{cause or 'other'}] {said}")
    return lines


def brief(d: Diagnosis, title: str = "diagnosis", fits: Callable[[str], bool] | None = None) -> str:
    """The brief, in the roomiest form `fits` accepts: everything; without the advice lines; the not-evaluated
    patterns named without what each lacked; the P0/P1 findings and the counts only."""
    text = ""
    for advice, reasons, low in ((True, True, True), (False, True, True), (False, False, True),
                                 (False, False, False)):
        text = _brief(d, title, advice, reasons, low)
        if fits is None or fits(text):
            break
    return text


def _brief(d: Diagnosis, title: str, advice: bool, reasons: bool, low: bool) -> str:
    s = d.summary
    counts = ", ".join(f"{p} {n}" for p, n in d.counts().items() if n)
    head = (f"# {title} · {counted(s.get('patterns', len(d.coverage)), 'patterns')}: "
            f"{counted(len(d.findings), 'findings')}{f' ({counts})' if counts else ''}, {s.get('clear', 0)} clear, "
            f"{s.get('not_evaluated', 0)} not evaluated")
    lines = [head]
    for f in d.findings:
        if low or f.priority != "P2":
            lines += finding_line(f, advice)
    if low:
        lines += coverage_lines(d.coverage, reasons)
    else:
        lines.append("[cut to fit: P2 findings and the coverage left out; raise max_tokens, or "
                     "generate_report for everything]")
    return "\n".join(lines) + "\n"
