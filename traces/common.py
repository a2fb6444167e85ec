"""What the trace readers share: ids of jobs, ranks and collectives, op names, step statistics."""

from __future__ import annotations

import re

from witty_profiler.topology.vocabulary import T
from witty_profiler.topology.windowstats import p95

DEFAULT_JOB = "trace:default"

# the op of a collective as HCCL, NCCL and the profilers name it, without prefixes, counters and case
_OP_PREFIX = re.compile(r"^(hcom_|hccl_|nccl:|nccl_|c10d::|ncclkernel_|ncclDevKernel_)", re.IGNORECASE)
_OP_ALIASES = {"allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reducescatter",
               "broadcast": "broadcast", "alltoall": "alltoall", "alltoallv": "alltoall", "send": "send",
               "receive": "recv", "recv": "recv", "reduce": "reduce", "gather": "gather", "scatter": "scatter",
               "barrier": "barrier", "allgatherv": "allgather", "reducescatterv": "reducescatter"}


def job_id(job_key: str) -> str:
    return f"{T.JOB}:{job_key}"


def rank_id(job_key: str, rank: int | str) -> str:
    return f"{T.RANK}:{job_key}:{rank}"


def collective_id(job_key: str, group: str, op: str) -> str:
    return f"{T.COLLECTIVE}:{job_key}:{group}:{op}"


def group_name(raw: str) -> str:
    """A process group as ids carry it: '(0, 1)' -> '0,1'; other names with ':' and '|' and spaces
    replaced (they separate the parts of ids)."""
    text = raw.strip()
    if re.fullmatch(r"\(?\s*\d+(\s*,\s*\d+)*\s*,?\s*\)?", text):
        return ",".join(re.findall(r"\d+", text))
    return re.sub(r"[:|\s]+", "_", text) or "default"


def op_name(raw: str) -> str:
    """'hcom_broadcast__501_0@6297232067196334501' -> 'broadcast', 'hcom_allReduce__...' -> 'allreduce',
    'nccl:all_reduce' -> 'allreduce'; an unknown name lower-cased without its counters."""
    text = raw.split("@", 1)[0]
    text = _OP_PREFIX.sub("", text.strip())
    text = text.split("__", 1)[0]
    key = re.sub(r"[^a-z]", "", text.lower())
    for name in sorted(_OP_ALIASES, key=len, reverse=True):
        if key.startswith(name):
            return _OP_ALIASES[name]
    return key or "unknown"


def step_stats(name: str, values: list[float], digits: int = 3) -> dict[str, float]:
    """{name: mean, name_p95, name_max}; p95 and max only over two or more values."""
    if not values:
        return {}
    out = {name: round(sum(values) / len(values), digits)}
    if len(values) >= 2:
        out[f"{name}_p95"] = round(p95(values), digits)
        out[f"{name}_max"] = round(max(values), digits)
    return out
