"""Text the server hands to assistants: the diagnosis prompt and the resources' documents."""

from __future__ import annotations

from typing import Any

from witty_profiler.topology.layers import LAYER_NUMBERS

PROMPT = """\
Find why this host is slow. Symptom reported: {symptom}
{scope}
Use the witty-profiler tools in this order, and keep each step small:

1. Capture. Call `collect` with duration_s=10 (longer, up to 300, if the symptom comes and goes){pids_arg}. \
If the user gave a graph file instead, call `load_graph` with its path. Note the graph_id.
2. Orient. The answer is the summary: do not ask for it again. Its collectors line says what could not \
run: a layer that depends on an unavailable collector cannot be judged; say so rather than guessing. \
Its unhealthy layers line names the layers with findings.
3. Look closer, one layer at a time. Call `convert_layer` with max_tokens=2000 for each layer with a P0 or \
P1 finding ({layers}): the view shows the findings and the rows of their evidence (ids, values, \
thresholds). Use `query_graph` for details (top_by_metric, around=<id>) instead of asking for everything.
4. Decide. Call `match_patterns` (all layers): a line per finding, deterministic, and every pattern's \
coverage; those not evaluated are grouped by what could not be measured and why.
5. Report. Call `generate_report` (format md; output_path to save it). Explain the P0 findings first, \
tie them to the symptom, and give the recommendations with the evidence that supports them. \
Do not claim a bottleneck that no finding or measured number supports.

After a fix, collect again and call `compare_graphs` with the two graph ids.
"""


def diagnose_prompt(symptom: str, pids: str | None) -> str:
    pid_list = [p for p in (pids or "").replace(",", " ").split() if p.strip()]
    scope = (f"Processes in scope: {', '.join(pid_list)} (and their children).\n" if pid_list
             else "Processes in scope: the AI workloads the tool recognises on the host.\n")
    pids_arg = f" and pids=[{', '.join(pid_list)}]" if pid_list else ""
    return PROMPT.format(symptom=symptom.strip() or "not described", scope=scope, pids_arg=pids_arg,
                         layers=", ".join(LAYER_NUMBERS))


def pattern_catalog() -> str:
    from witty_profiler.diagnosis.docs import patterns_markdown
    return patterns_markdown()


def thresholds_toml(overrides: dict[str, Any] | None, source: str | None) -> str:
    """Every pattern's thresholds and parameters in force, as a TOML file that --thresholds accepts."""
    from witty_profiler.diagnosis.catalog import catalog
    from witty_profiler.diagnosis.thresholds import effective
    lines = [f"# Thresholds in force: the defaults{' with the overrides of ' + source if source else ''}.",
             "# A levelled threshold fires at the highest level its value crosses, strictly (above: value > level;",
             "# below: value < level): critical -> P0, warning -> P1, notice -> P2. Copy a table into a file and",
             "# pass it as thresholds= (match_patterns) or witty-mcp --thresholds FILE to change it.", ""]
    for pattern in catalog().values():
        values = effective(pattern, overrides)
        if not values:
            continue
        lines.append(f'["{pattern.id}"]')
        for t in pattern.thresholds:
            levels = values[t.name].values
            inline = ", ".join(f"{lv} = {_toml_number(levels[lv])}" for lv in ("notice", "warning", "critical")
                               if lv in levels)
            lines.append(f"{t.name} = {{ {inline} }}  # {t.unit}, {t.direction}: {t.help}")
        for prm in pattern.params:
            lines.append(f"{prm.name} = {_toml_number(values[prm.name])}  # {prm.unit}: {prm.help}")
        lines.append("")
    return "\n".join(lines)


def _toml_number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
