"""Shared test fixtures: the real legacy sample (skipped with a reason where shared/ is absent), and a\nsession's own folder for compiled eBPF programs."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
VLLM_SAMPLE = SHARED / "witty-profiler-vllm-8npu.json"


@pytest.fixture(scope="session")
def vllm_sample_path() -> Path:
    if not VLLM_SAMPLE.exists():
        pytest.skip(f"real legacy sample not found at {VLLM_SAMPLE} (../shared/fixtures is absent)")
    return VLLM_SAMPLE


@pytest.fixture(scope="session", autouse=True)
def bpf_image_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Compiled eBPF programs are kept in a folder of this session, not the host's
    /var/cache/witty-profiler/bpf (the processes the tests start inherit it)."""
    folder = tmp_path_factory.mktemp("bpf-images")
    folder.chmod(0o700)
    before = os.environ.get("WITTY_BPF_CACHE")
    os.environ["WITTY_BPF_CACHE"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("WITTY_BPF_CACHE", None)
    else:
        os.environ["WITTY_BPF_CACHE"] = before
