"""Diagnosis: the seven-layer pattern catalog, the deterministic matcher, evidence and reports.

Each pattern is defined once (id, layer, title, why it matters, metrics needed, thresholds with
units, how it picks its evidence, recommendations); the catalog is the source of truth from
which `skills/bottleneck-identification/references/patterns.md` is generated. The matcher ends
every pattern as a finding (P0/P1/P2), `clear` or `not_evaluated` with the reason, and the same
graph with the same thresholds always gives the same bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from witty_profiler.topology.lazy import lazy_exports

# (the catalog itself is `witty_profiler.diagnosis.catalog.catalog()`: its module has the same name)
_EXPORTS = {"Pattern": "catalog", "Threshold": "catalog", "diagnose": "matcher",
            "layer_number": "matcher", "LAYERS": "models", "CoverageRow": "models", "Diagnosis": "models",
            "Evidence": "models", "Finding": "models", "load_thresholds": "thresholds"}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

if TYPE_CHECKING:
    from witty_profiler.diagnosis.catalog import Pattern, Threshold
    from witty_profiler.diagnosis.matcher import diagnose, layer_number
    from witty_profiler.diagnosis.models import LAYERS, CoverageRow, Diagnosis, Evidence, Finding
    from witty_profiler.diagnosis.thresholds import load_thresholds
