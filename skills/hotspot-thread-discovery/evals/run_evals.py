#!/usr/bin/env python3
"""Run this skill's evals with the harness of bottleneck-identification (its evals/run_evals.py,
installed next to this skill by `witty-profiler skill install`): the same assertion types, the same
--case/--keep/--reports/--strict/--json options, with this folder's evals.json and live scenarios
(eval_scenarios.py: real Python processes whose hot code is a named function, sampled with --stacks).

    python3 evals/run_evals.py
    witty-profiler skill eval --path skills/hotspot-thread-discovery
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE.parent.parent / "bottleneck-identification" / "evals" / "run_evals.py"


def harness():
    if not HARNESS.is_file():
        raise SystemExit(f"{HARNESS}: missing; install both skills (witty-profiler skill install)")
    spec = importlib.util.spec_from_file_location("witty_hotspot_eval_harness", HARNESS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HERE, module.EVALS = HERE, HERE / "evals.json"  # this skill's cases and scenarios
    return module


def main(argv: list[str] | None = None) -> int:
    return harness().main(argv)


if __name__ == "__main__":
    sys.exit(main())
