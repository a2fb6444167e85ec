"""Whether this host can run a bcc program, for the eBPF and stack-sampling tests."""

from __future__ import annotations

import os

import pytest

from witty_profiler.collectors.lib.bpfhost import NotReady, kernel_headers, load_bcc


def ebpf_ready(without_root: str = "eBPF needs root") -> None:
    """Skip (or fail where WITTY_REQUIRE_EBPF=1) when this host cannot run a bcc program."""
    problem = None
    if os.geteuid() != 0:
        problem = without_root
    else:
        try:
            load_bcc()
            kernel_headers(os.uname().release)
        except NotReady as exc:
            problem = str(exc)
    if problem and os.environ.get("WITTY_REQUIRE_EBPF") == "1":
        pytest.fail(f"WITTY_REQUIRE_EBPF=1 but {problem}")
    if problem:
        pytest.skip(problem)
