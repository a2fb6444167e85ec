"""How well the `all` view spends its tokens: rows repeated across its tables, lines spent on patterns
not evaluated, and whether a budget the whole view fits in returns it whole.

For the real legacy sample, a synthetic 3,000-entity training host and the hand-made converter graph:
the `all` view unbounded, then with a budget just above its size and at 8,000 tokens. A row is
repeated when its first cell (an entity id) was the first cell of a row of an earlier table.

    python3 benchmarks/view_economy.py [--sample PATH]

Prints a Markdown table (paste it into BENCHMARKS.md with the date and the machine).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from witty_profiler.app.views import convert  # noqa: E402
from witty_profiler.converters import count_tokens  # noqa: E402
from witty_profiler.topology import load_graph  # noqa: E402

from benchmarks.synthetic import synthetic_graph  # noqa: E402
from converter_graphs import hand_graph  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "witty-profiler-vllm-8npu.json"
_ID = re.compile(r"^([a-z_]+:[^ ]+:[^ ]+)\s")


def economy(text: str) -> dict[str, float]:
    """Rows (lines that start with an entity id), the share of them repeated, and the share of tokens on
    lines about patterns not evaluated."""
    seen: set[str] = set()
    rows = repeated = 0
    for line in text.splitlines():
        found = _ID.match(line)
        if found:
            rows += 1
            repeated += found.group(1) in seen
            seen.add(found.group(1))
    skipped = "\n".join(line for line in text.splitlines() if line.startswith("not evaluated"))
    total = count_tokens(text)
    return {"tokens": total, "rows": rows, "repeated_pct": 100 * repeated / rows if rows else 0.0,
            "not_evaluated_pct": 100 * count_tokens(skipped) / total if total else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sample", type=Path, default=SAMPLE)
    args = parser.parse_args()
    graphs = [("hand-made", hand_graph()), ("synthetic 3,000", synthetic_graph(3000))]
    if args.sample.is_file():
        graphs.insert(0, ("real legacy sample", load_graph(args.sample)))
    print("| graph | budget | tokens | rows | repeated rows | not-evaluated tokens | whole |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for name, graph in graphs:
        unbounded = convert(graph, "all")
        for budget in (None, unbounded.tokens + 50, 8000):
            view = convert(graph, "all", budget)
            e = economy(view.text)
            whole = "-" if budget is None else ("yes" if view.text.split("\n", 1)[1] ==
                                               unbounded.text.split("\n", 1)[1] else "no")
            print(f"| {name} | {budget or 'none'} | {e['tokens']:,} | {e['rows']} | {e['repeated_pct']:.1f} % | "
                  f"{e['not_evaluated_pct']:.1f} % | {whole} |")


if __name__ == "__main__":
    main()
