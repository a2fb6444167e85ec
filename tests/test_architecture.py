"""The house rules a reader relies on: each list the front-ends share is written once."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from witty_profiler.topology.layers import LAYER_NUMBERS, VIEWS

REPO = Path(__file__).resolve().parents[1]


def _code_files() -> list[Path]:
    done = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return [REPO / n for n in done.stdout.split() if not n.startswith("tests/") and (REPO / n).exists()]


def test_the_layer_list_is_spelled_once():
    """Three or more layer names in a row, quoted or in prose, anywhere but topology/layers.py, would be a
    second copy of the list that drifts when a layer is added."""
    names = "|".join(LAYER_NUMBERS)
    spelt = re.compile(rf"""["']?(?:{names})["']?\s*,\s*["']?(?:{names})["']?\s*,\s*["']?(?:{names})\b""")
    found = [f"{path.relative_to(REPO)}:{text.count(chr(10), 0, m.start()) + 1}"
             for path in _code_files() if path.name != "layers.py" or path.parent.name != "topology"
             for text in [path.read_text(encoding="utf-8")] for m in spelt.finditer(text)]
    assert found == []
    assert VIEWS == ("summary", *LAYER_NUMBERS, "flow", "all")
