"""Secrets never leave the host by accident: command-line redaction and the environment allowlist.

Applied by every producer of entities (live collectors and the legacy reader) before anything
is stored, so that files, views, reports and MCP answers cannot carry a secret.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"

# Environment keys whose values are stored; every other value is dropped (the key is not kept either).
ENV_ALLOWLIST = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "NODE_RANK",
    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_VISIBLE_DEVICES", "NPU_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCHELASTIC_RUN_ID", "PYTORCH_CUDA_ALLOC_CONF",
    "VLLM_WORKER_MULTIPROC_METHOD", "DEEPSPEED_ZERO_STAGE", "KMP_AFFINITY", "GOMP_CPU_AFFINITY",
})
ENV_ALLOWED_PREFIXES = ("NCCL_", "HCCL_", "TORCH_NCCL_", "MEGATRON_")
# ...but never these, even under an allowed prefix
_SECRET_NAME = re.compile(r"(PASS|SECRET|TOKEN|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE)", re.I)


def allowed_env_key(key: str) -> bool:
    if _SECRET_NAME.search(key):
        return False
    return key in ENV_ALLOWLIST or key.startswith(ENV_ALLOWED_PREFIXES)


def filter_env(env: dict[str, str]) -> dict[str, str]:
    """Only allowlisted keys, values kept; everything else dropped."""
    return {k: v for k, v in sorted(env.items()) if allowed_env_key(k)}


_SECRET_WORDS = r"[\w.-]*(?:password|passwd|secret|token(?!s)|api[_-]?key|access[_-]?key|private[_-]?key|credentials?)[\w.-]*"
_PATTERNS = [
    # scheme://user:password@host -> scheme://user:<redacted>@host
    (re.compile(r"(\b[a-zA-Z][\w+.-]*://[^/\s:@]+:)[^@\s/]+(@)"), rf"\1{REDACTED}\2"),
    # scheme://token@host (a token as the whole user part: https://ghp_xxx@github.com/...)
    (re.compile(r"(\b[a-zA-Z][\w+.-]*://)[^/\s:@<]+(@)"), rf"\1{REDACTED}\2"),
    # --password=xyz, --api-key xyz, -p=..., token=xyz, SECRET: xyz
    (re.compile(rf"(--?{_SECRET_WORDS}[=:])\S+", re.I), rf"\1{REDACTED}"),
    (re.compile(rf"(--?{_SECRET_WORDS}\s+)(?!-)\S+", re.I), rf"\1{REDACTED}"),
    (re.compile(rf"(\b{_SECRET_WORDS}[=:])\S+", re.I), rf"\1{REDACTED}"),
    # FOO_KEY=..., AWS_SECRET_ACCESS_KEY=...
    (re.compile(r"(\b[A-Z][A-Z0-9_]*_KEY=)\S+"), rf"\1{REDACTED}"),
    # Authorization: Bearer xyz
    (re.compile(r"(\bBearer\s+)[\w.~+/=-]+", re.I), rf"\1{REDACTED}"),
]


def redact_cmdline(cmdline: str) -> str:
    """Replace secret values in a command line with <redacted>; everything else stays readable."""
    for pattern, repl in _PATTERNS:
        cmdline = pattern.sub(repl, cmdline)
    return cmdline
