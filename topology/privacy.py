"""Secrets never leave the host by accident: command-line redaction and the environment allowlist.

Applied by every producer of entities (live collectors and the legacy reader) before anything
is stored, so that files, views, reports and MCP answers cannot carry a secret.
"""

from __future__ import annotations

import re
from functools import lru_cache

REDACTED = "<redacted>"

# Environment keys whose values are stored; every other value is dropped (the key is not kept either).
ENV_ALLOWLIST = frozenset({
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "NODE_RANK",
    "MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES",
    "ASCEND_VISIBLE_DEVICES", "NPU_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TORCHELASTIC_RUN_ID", "PYTORCH_CUDA_ALLOC_CONF",
    "VLLM_WORKER_MULTIPROC_METHOD", "DEEPSPEED_ZERO_STAGE", "KMP_AFFINITY", "GOMP_CPU_AFFINITY",
    # which Slurm job, step, task and node a process is: its rank and job when srun started it
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS",
    "SLURM_NNODES", "SLURMD_NODENAME",
})
ENV_ALLOWED_PREFIXES = ("NCCL_", "HCCL_", "TORCH_NCCL_", "MEGATRON_")
# ...but never these, even under an allowed prefix
_SECRET_NAME = re.compile(r"(PASS|SECRET|TOKEN|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE)", re.I)


def allowed_env_key(key: str) -> bool:
    if _SECRET_NAME.search(key):
        return False
    return key in ENV_ALLOWLIST or key.startswith(ENV_ALLOWED_PREFIXES)


def filter_env(env: dict[str, str]) -> dict[str, str]:
    """Only allowlisted keys, their values redacted as a command line is (MASTER_ADDR=https://u:pw@..., an
    NCCL setting holding token=...); everything else dropped."""
    return {k: redact_cmdline(v) for k, v in sorted(env.items()) if allowed_env_key(k)}


# A name (of an option, a variable, a query parameter) is secret when its last part is one of these:
# --password, --api-key, --hf_token, DB_PASS, AWS_SECRET_ACCESS_KEY, ?token=. `--max-tokens` or
# `--key-size` are not (their last part is not a secret word).
_SECRET_LAST = frozenset(("password", "passwd", "pass", "pwd", "passphrase", "secret", "token", "auth", "key",
                          "apikey", "accesskey", "secretkey", "privatekey", "credential", "credentials",
                          "authorization", "cookie"))
_NAME_PARTS = re.compile(r"[-_.]+|(?<=[a-z])(?=[A-Z])")  # api-key, api_key, api.key, apiKey
# -pSECRET (mysql, mariadb): a password glued to -p, unless the word is a well-known flag of another tool
_GLUED_P = re.compile(r"^-p(?!(?:ipe|thread|g|edantic|ie|rint\b|rint-|aram\b|aram=)\b)(?=\S)(?!\d+$)(.+)$")
_URL_USER = re.compile(r"(\b[a-zA-Z][\w+.-]*://)([^/\s:@]+)(:[^@\s/]*)?@")
_QUERY = re.compile(r"([?&;])([\w.-]+)=([^&;#\s]*)")
# secrets that say what they are, wherever they appear
_KEY_SHAPES = re.compile(
    r"\b(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{16,}"       # OpenAI / Anthropic keys
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub tokens
    r"|glpat-[A-Za-z0-9_-]{20,}"                        # GitLab
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"                       # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}"                           # Google API keys
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"                   # Slack
    r"|hf_[A-Za-z0-9]{30,})"                            # Hugging Face
)
_HEADERS = frozenset(("authorization:", "proxy-authorization:", "cookie:", "x-api-key:", "x-auth-token:",
                      "api-key:", "x-access-token:"))
_AUTH_SCHEMES = frozenset(("bearer", "basic", "token", "digest", "apikey"))


def secret_name(name: str) -> bool:
    """Whether an option or variable of this name holds a secret (its last part is a secret word)."""
    parts = [p for p in _NAME_PARTS.split(name.strip("-")) if p]
    return bool(parts) and parts[-1].lower() in _SECRET_LAST


def redact_text(text: str) -> str:
    """Secrets inside one value: credentials in URLs, secret query parameters, keys of a known shape."""
    if "://" in text:
        text = _URL_USER.sub(lambda m: f"{m[1]}{REDACTED}@" if m[3] is None else f"{m[1]}{m[2]}:{REDACTED}@", text)
    if "=" in text and ("?" in text or "&" in text or ";" in text):
        text = _QUERY.sub(lambda m: f"{m[1]}{m[2]}={REDACTED}" if secret_name(m[2]) else m[0], text)
    return _KEY_SHAPES.sub(REDACTED, text)


@lru_cache(maxsize=4096)  # the threads and forked workers of a process share its command line
def redact_cmdline(cmdline: str) -> str:
    """Replace secret values in a command line with <redacted>; everything else stays readable.

    Word by word, in time linear in the line: the value of a secret option (`--password=x`,
    `--api-key x`, `-pSECRET`), of a secret variable (`TOKEN=x`, `AWS_SECRET_ACCESS_KEY=x`), of an
    authentication header (`Authorization: Bearer x`, `X-Api-Key: x`), credentials in URLs, secret
    query parameters and keys of a well-known shape (sk-..., ghp_..., AKIA...)."""
    words = re.split(r"(\s+)", cmdline)
    out: list[str] = []
    redact_next = False
    for word in words:
        if not word or word.isspace():
            out.append(word)
            continue
        if redact_next:
            redact_next = False
            if word.lower() in _AUTH_SCHEMES:  # Authorization: Bearer <redacted>
                redact_next = True
                out.append(word)
                continue
            if not word.startswith("-"):
                out.append(REDACTED)
                continue
        out.append(_redact_word(word))
        lowered = word.lower()
        if lowered in _HEADERS or (word.startswith("-") and "=" not in word and secret_name(word)
                                   and not _GLUED_P.match(word)):
            redact_next = True  # the value follows as the next word
        elif lowered == "bearer":
            redact_next = True
    return "".join(out)


def _redact_word(word: str) -> str:
    for sep in ("=", ":"):
        name, found, value = word.partition(sep)
        if found and value and name and not name.endswith("/") and secret_name(name) and "//" not in name:
            return f"{name}{sep}{REDACTED}"
    glued = _GLUED_P.match(word)
    if glued:
        return f"-p{REDACTED}"
    return redact_text(word)
