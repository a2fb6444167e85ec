"""Shared test fixtures: the real legacy sample (skipped with a reason where shared/ is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
VLLM_SAMPLE = SHARED / "witty-profiler-vllm-8npu.json"


@pytest.fixture(scope="session")
def vllm_sample_path() -> Path:
    if not VLLM_SAMPLE.exists():
        pytest.skip(f"real legacy sample not found at {VLLM_SAMPLE} (../shared/fixtures is absent)")
    return VLLM_SAMPLE
