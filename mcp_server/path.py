"""The assistant's path through the tools, as SKILL.md walks it, and what of a diagnosis reached the model.

`walk_graph` follows the skill on one graph with any `mcp` client: the answer that brings the graph (load,
collect or import), `convert_layer` of each layer with a P0/P1 finding, then `match_patterns`. Each answer is
kept in the forms clients hand to the model (the text blocks; `structuredContent` as compact JSON where the
answer has it, else the text; both), and `check` says which P0/P1 evidence items (pattern, entity ids,
values) and not-evaluated reasons of a diagnosis (its JSON, as `diagnose --format json` writes it) are not
in what the model read. Used by benchmarks/agent_path.py and by the skill's evals.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from witty_profiler.converters.tokens import count_tokens
from witty_profiler.diagnosis.brief import split_reason

FORMS = ("text", "structured", "both")
VIEW_BUDGET = 2000  # SKILL.md's budget for a layer view


@dataclass
class Step:
    call: str
    tokens: dict[str, int]


@dataclass
class Route:
    name: str
    steps: list[Step] = field(default_factory=list)
    read: dict[str, list[str]] = field(default_factory=lambda: {f: [] for f in FORMS})
    missing: dict[str, list[str]] = field(default_factory=dict)
    facts: int = 0

    def total(self, form: str) -> int:
        return sum(s.tokens[form] for s in self.steps)


def forms(result: Any) -> dict[str, str]:
    text = "\n".join(c.text for c in result.content if getattr(c, "text", None) is not None)
    sc = result.structured_content
    structured = json.dumps(sc, separators=(",", ":"), ensure_ascii=False) if sc is not None else text
    return {"text": text, "structured": structured, "both": text + "\n" + structured}


async def step(client: Any, route: Route, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    if result.is_error:
        raise RuntimeError(f"{tool}({arguments}) failed: {result.content[0].text}")
    seen = forms(result)
    shown = ", ".join(f"{k}={v!r}" for k, v in arguments.items() if k not in ("graph_id",))
    route.steps.append(Step(f"{tool}({shown})", {f: count_tokens(seen[f]) for f in FORMS}))
    for f in FORMS:
        route.read[f].append(seen[f])
    return result.structured_content


# -- the check ----------------------------------------------------------------------------------
def _numbers(value: float) -> set[str]:
    out = {f"{value:g}", f"{value:.1f}", f"{value:.0f}", f"{value:.2f}", f"{value:,.0f}", f"{round(value, 3):g}"}
    if float(value).is_integer():
        out.add(str(int(value)))
    return {o.rstrip("0").rstrip(".") if "." in o else o for o in out} | out


def value_forms(value: Any) -> list[set[str]]:
    """What must appear for a value to have reached the model: one of the renderings of each part."""
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, (int, float)):
        return [_numbers(float(value))]
    if isinstance(value, str):
        return [{value}]
    if isinstance(value, dict):
        return [forms for v in value.values() if v not in (0, 0.0) for forms in value_forms(v)]
    if isinstance(value, list):
        return [forms for v in value for forms in value_forms(v)]
    return [{str(value)}]


def _entity_ids(ids: list[str]) -> set[str]:
    out = set()
    for i in ids:
        for part in (i.split("|")[1:3] if "|" in i else [i]):
            if part.startswith("thread:"):  # a thread's row is its process's: process:host:pid
                host, pid = part.split(":")[1:3]
                part = f"process:{host}:{pid}"
            out.add(part)
    return out


def _present(text: str, token: str) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(token)}(?![\w])", text) is not None


def check(route: Route, diagnoses: list[dict[str, Any]]) -> None:
    """Which P0/P1 facts and not-evaluated reasons did not reach the model, per form."""
    for form in FORMS:
        text = "\n".join(route.read[form]).replace("\\n", "\n")  # a JSON string's line breaks read as such
        lost: list[str] = []
        facts = 0
        for d in diagnoses:
            for f in d["findings"]:
                if f["priority"] not in ("P0", "P1"):
                    continue
                facts += 1
                if f["pattern"] not in text:
                    lost.append(f"{f['pattern']}: the finding")
                for ev in f["evidence"]:
                    for eid in sorted(_entity_ids(ev.get("ids") or [])):
                        facts += 1
                        if not _present(text, eid):
                            lost.append(f"{f['pattern']} {ev.get('metric')}: id {eid}")
                    value = ev.get("value")
                    if ev.get("kind") == "edge" and isinstance(value, str):
                        continue  # a relation's label (the device a process uses): its two ends are the fact
                    for options in value_forms(value):
                        facts += 1
                        if not any(_present(text, o) for o in options):
                            lost.append(f"{f['pattern']} {ev.get('metric')}: value {sorted(options)[0]}")
            for row in d["coverage"]:
                if row["status"] == "not_evaluated":
                    facts += 1
                    missing = split_reason(row["reason"])[0]
                    if missing not in text:
                        lost.append(f"{row['pattern']}: reason {missing!r}")
        route.missing[form], route.facts = lost, facts




def urgent_layers(d: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(f["layer_name"] for f in d["findings"] if f["priority"] in ("P0", "P1")))


async def walk_graph(client: Any, name: str, bring: dict[str, Any], diagnosis: dict[str, Any],
                     **scope: Any) -> Route:
    """SKILL.md on one graph: the call in `bring` ({"tool": ..., arguments}) -> the views of the P0/P1 layers
    of `diagnosis` -> match_patterns; `scope` (pids=...) goes to the last two as the skill says."""
    route = Route(name)
    arguments = dict(bring)
    graph_id = (await step(client, route, arguments.pop("tool"), **arguments))["graph_id"]
    for layer in urgent_layers(diagnosis):
        await step(client, route, "convert_layer", graph_id=graph_id, layer=layer, max_tokens=VIEW_BUDGET, **scope)
    await step(client, route, "match_patterns", graph_id=graph_id, **scope)
    check(route, [diagnosis])
    return route
