"""Diagnosis: the seven-layer pattern catalog, the deterministic matcher, evidence and reports.

Each pattern is defined once (id, layer, title, why it matters, metrics needed, thresholds with
units, how it picks its evidence, recommendations); the catalog is the source of truth from
which `skills/bottleneck-identification/references/patterns.md` is generated. The matcher ends
every pattern as a finding (P0/P1/P2), `clear` or `not_evaluated` with the reason, and the same
graph with the same thresholds always gives the same bytes.
"""

from witty_profiler.diagnosis.catalog import Pattern, Threshold, catalog
from witty_profiler.diagnosis.matcher import diagnose, layer_number
from witty_profiler.diagnosis.models import LAYERS, CoverageRow, Diagnosis, Evidence, Finding
from witty_profiler.diagnosis.thresholds import load_thresholds

__all__ = ["LAYERS", "CoverageRow", "Diagnosis", "Evidence", "Finding", "Pattern", "Threshold", "catalog",
           "diagnose", "layer_number", "load_thresholds"]
