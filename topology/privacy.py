"""Secrets never leave the host by accident: command-line redaction and the environment allowlist.

Applied by every producer of entities (live collectors and the legacy reader) before anything
is stored, so that files, views, reports and MCP answers cannot carry a secret.

What is redacted, one example per form, and what is deliberately left readable: docs/redaction.md
(its table is generated from `topology.privacy_forms`, and every row is a test).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from witty_profiler.topology.lazy import LazyPattern

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
    NCCL setting holding token=... or a JWT); everything else dropped."""
    return {k: redact_cmdline(v) for k, v in sorted(env.items()) if allowed_env_key(k)}


# -- names -----------------------------------------------------------------------------------------
# A name (of an option, a variable, a header, a query parameter, a JSON key) is secret when its last
# part is one of these words: --password, --api-key, --hf_token, DB_PASS, AWS_SECRET_ACCESS_KEY,
# ?token=, "client_secret":. `--max-tokens` or `--key-size` are not (their last part is not one).
_SECRET_LAST = frozenset((
    "password", "passwd", "pass", "pwd", "pw", "passphrase", "secret", "token", "auth", "key", "apikey",
    "accesskey", "secretkey", "privatekey", "privkey", "credential", "credentials", "creds", "authorization",
    "cookie", "jwt", "bearer", "sig", "signature",
    "requirepass", "masterauth",                                                   # redis
    "storepass", "keypass", "srcstorepass", "deststorepass", "srckeypass", "destkeypass",  # keytool
))
# ...or when it ends with one of these (PGPASSWORD, MYSQLPASSWORD, clientsecret, ACCESSTOKEN)
_SECRET_ENDINGS = ("password", "passwd", "passphrase", "secret", "token", "apikey", "accesskey", "secretkey",
                   "privatekey")
# ...unless the part before it says it is something else: a tokenizer's special tokens (--pad-token,
# --eos-token), a dataset's column (--prompt-key, data.response_key), a flag (--no-auth, --skip-auth).
_FLAG_WORDS = frozenset(("no", "skip", "disable", "enable", "require", "without", "ignore", "allow"))
_NOT_SECRET_BEFORE = {
    "token": frozenset(("pad", "eos", "bos", "unk", "sep", "mask", "cls", "eot", "eod", "special", "start",
                        "end", "stop", "image", "img", "audio", "video", "vision", "placeholder", "max", "min",
                        "num", "first", "last", "think", "reserved")) | _FLAG_WORDS,
    "key": frozenset(("input", "output", "label", "labels", "prompt", "response", "chosen", "rejected", "text",
                      "image", "images", "audio", "video", "answer", "question", "reward", "sort", "partition",
                      "primary", "group", "hash", "dict", "metric", "column", "field", "content", "message",
                      "messages", "query", "document", "context", "target", "source", "sample", "sequence",
                      "cache", "shard", "lookup", "index", "order", "row", "foreign", "unique", "routing",
                      "feature", "instruction", "conversation", "conversations", "chat", "history", "reference",
                      "completion", "solution", "truth", "tools", "system", "tool", "metadata", "caption"))
    | _FLAG_WORDS,
}
_NAME_PARTS = re.compile(r"[-_.]+|(?<=[a-z])(?=[A-Z])")  # api-key, api_key, api.key, apiKey
_QUOTES = "'\"`"


@lru_cache(maxsize=8192)  # option names repeat across processes
def secret_name(name: str) -> bool:
    """Whether an option, variable, header or key of this name holds a secret."""
    parts = [p for p in _NAME_PARTS.split(name.strip("-'\"`")) if p]
    if not parts:
        return False
    last = parts[-1].lower()
    before = parts[-2].lower() if len(parts) > 1 else ""
    if last in _SECRET_LAST:
        return before not in _NOT_SECRET_BEFORE.get(last, _FLAG_WORDS)
    return last.endswith(_SECRET_ENDINGS) and before not in _FLAG_WORDS


# -- values that say what they are, wherever they appear ------------------------------------------
# Prefixes published by their issuers (the same families secret scanners such as gitleaks and
# detect-secrets look for), long enough that an ordinary argument does not match.
_KEY_SHAPES = re.compile(
    r"\b(?:sk-(?:proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_-]{16,}"  # OpenAI / Anthropic / DeepSeek keys
    r"|(?:sk|rk)_(?:live|test|prod)_[A-Za-z0-9]{10,}|whsec_[A-Za-z0-9]{20,}"  # Stripe
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"  # GitHub tokens
    r"|gl(?:pat|dt|rt|ptt|cbt|soat|oas|ft|imt|agent|ffct)-[A-Za-z0-9_-]{20,}"  # GitLab
    r"|(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}"             # AWS access key ids
    r"|AIza[0-9A-Za-z_-]{35}|GOCSPX-[A-Za-z0-9_-]{20,}|ya29\.[A-Za-z0-9_-]{20,}"  # Google
    r"|xox[abposre]-[A-Za-z0-9-]{10,}|xapp-[A-Za-z0-9-]{10,}"  # Slack
    r"|(?:hf_|api_org_)[A-Za-z0-9]{30,}"                # Hugging Face
    r"|npm_[A-Za-z0-9]{36,}|pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{20,}"  # npm, PyPI upload tokens
    r"|dckr_pat_[A-Za-z0-9_-]{20,}|dapi[a-f0-9]{32}"     # Docker Hub, Databricks
    r"|gsk_[A-Za-z0-9]{40,}|r8_[A-Za-z0-9]{30,}"         # Groq, Replicate
    r"|SG\.[A-Za-z0-9_-]{16,}\.[A-Za-z0-9_-]{30,}"       # SendGrid
    r"|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"  # JSON Web Tokens (header.payload.signature)
    r"|(?:(?<=hooks\.slack\.com/services/)|(?<=hooks\.slack\.com/workflows/))[A-Za-z0-9+/]{20,}"  # webhooks
    r")"
)
# a private key block, whole (its lines are separate words once a command line is joined)
_PEM = LazyPattern(globals(), "_PEM", r"(-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)"
                  r"(?:.*?(-----END [A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----)|.*)", re.S)
# scheme://user:password@host (the password may hold '@'), scheme://token@host, redis://:password@host
_URL_USER = LazyPattern(globals(), "_URL_USER", r"(\b[a-zA-Z][\w+.-]*://)([^/\s:@]*)(:[^\s/]*)?@")


def _redact_shapes(text: str) -> str:
    if "://" in text:
        text = _URL_USER.sub(lambda m: f"{m[1]}{REDACTED}@" if m[3] is None else f"{m[1]}{m[2]}:{REDACTED}@", text)
    return _KEY_SHAPES.sub(REDACTED, text)


def _redact_pem(text: str) -> str:
    if "PRIVATE KEY" not in text:
        return text
    return _PEM.sub(lambda m: f"{m[1]} {REDACTED}" + (f" {m[2]}" if m[2] else ""), text)


# -- one word ------------------------------------------------------------------------------------------
# NAME=value, NAME:value, "name": value, os.environ['NAME']='value', ?name=value&...: the name starts a
# word or follows punctuation (never a '/': /data/key=3/ is a path), and a ':' is not a URL's "://".
_ASSIGN = re.compile(r"(?<![\w.\-/])(-{0,2}[A-Za-z_][\w.-]*)([\"'\])]*)(=|:(?!//))")
_NAME_AT_END = LazyPattern(globals(), "_NAME_AT_END", r"(-{0,2}[A-Za-z_][\w.-]*)[\"'\])]*$")
_QUERY_END = LazyPattern(globals(), "_QUERY_END", r"[&;#]")
# the quote (and brackets) closing a value, kept for readability
_CLOSING = LazyPattern(globals(), "_CLOSING", r"[\"'`][)\]},;]*$")
_AUTH_SCHEMES = frozenset(("bearer", "basic", "token", "digest", "apikey", "negotiate", "ntlm"))
# -pSECRET (mysql, mariadb): a password glued to -p, unless the word is a well-known single-dash flag
# of another tool (gcc -pipe, openssl -passin, java -profile) or a port (-p2222, -p8080:80/tcp)
_GLUED_P = re.compile(
    r"^-p(?!(?:ipe|thread|g|edantic|ie|rint|rint_certs|aram|assin|assout|ubin|ubout|keyopt|ort|rofile|lugin"
    r"|olicy|idfile|id|ath|refix|arallel|reserve|roxy|ersist|latform|review)$|rint-|aram=)"
    r"(?![\d.:]+(?:/(?:tcp|udp|sctp))?$)(.+)$")

# how the word after an option (or a header's name) is redacted
_ANY = 1       # the whole next word, whatever it looks like (sshpass -p, redis-cli -a)
_LONG = 2      # the whole next word unless it is another long option (--password X, --password -x)
_HEADER = 3    # a header's value: an auth scheme (Bearer, Basic) stays and the credential after it goes
_USERPASS = 4  # user:password -> user:<redacted> (curl -u); a lone user name stays
_COOKIE = 5    # name=value cookies (curl -b); a file name stays
_PERCENT = 6   # user%password -> user%<redacted> (smbclient -U)


def _value(word: str, start: int = 0) -> tuple[str, str | None, int]:
    """A secret value, word[start:]: (its redaction, the quote it opens and leaves open, where the text after
    it starts). Quotes around it stay ('<redacted>'), so does what follows its closing quote
    ("<redacted>", "lr": 1})."""
    if start >= len(word):
        return "", None, len(word)
    quote = word[start]
    if quote in _QUOTES:
        close = word.find(quote, start + 1)
        if close == start + 1:  # '' is no secret
            return quote, None, close
        if close < 0:
            return quote + REDACTED, quote, len(word)
        return quote + REDACTED, None, close
    closing = _CLOSING.search(word, start + 1)
    return (REDACTED + closing[0] if closing else REDACTED), None, len(word)


def _scan(word: str) -> tuple[str, int | None, str | None]:
    """Secret assignments inside one word: (the word redacted, how the next word is redacted, an open quote)."""
    if "=" not in word and ":" not in word:
        return word, None, None
    out: list[str] = []
    done = 0
    pending: int | None = None
    quote: str | None = None
    m = _ASSIGN.search(word)
    while m:
        if not secret_name(m[1]):
            m = _ASSIGN.search(word, m.end())
            continue
        start = m.end()
        out.append(word[done:start])
        done = start
        if start == len(word):
            if m[3] == ":":  # Authorization:  "api_key":  -- the value is the next word
                pending = _HEADER
            break
        if m[1] and m.start() > 0 and word[m.start() - 1] in "?&;":  # a query parameter: up to the next one
            end = _QUERY_END.search(word, start)
            end_at = end.start() if end else len(word)
            if end_at > start:
                out.append(REDACTED)
                done = end_at
            m = _ASSIGN.search(word, end_at)
            continue
        if m[3] == ":" and len(word) - start <= 12 and word[start:].strip(_QUOTES).lower() in _AUTH_SCHEMES:
            out.append(word[start:])  # Authorization:Bearer x
            done = len(word)
            pending = _LONG
            break
        text, quote, done = _value(word, start)
        out.append(text)
        if done >= len(word) and quote is None and word[0] in _QUOTES and word.find(word[0], start) < 0:
            quote = word[0]  # 'PASSWORD=a b': the quote opened before the name goes on over the next words
        if quote is not None or done >= len(word):
            break
        m = _ASSIGN.search(word, done + 1)  # past the closing quote: "a": "<redacted>", "b": ...
    if done == 0:
        return word, pending, quote
    out.append(word[done:])
    return "".join(out), pending, quote


def _apply(mode: int, word: str) -> tuple[str, str | None]:
    """The value of a secret option redacted as its mode says: (text, an open quote)."""
    if mode in (_USERPASS, _PERCENT):
        cut = word.find(":" if mode == _USERPASS else "%")
        if cut < 0:
            return word, None
        text, quote, _ = _value(word, cut + 1)
        return word[:cut + 1] + text, quote
    if mode == _COOKIE and "=" not in word:
        return word, None
    text, quote, after = _value(word)
    if after < len(word):
        tail, _, quote = _scan(word[after:])  # what follows the closing quote
        text += tail
    return text, quote


# -- tools whose short options hold a secret -----------------------------------------------------------
_LOGIN_TOOLS = frozenset(("docker", "podman", "nerdctl", "buildah", "skopeo", "helm", "oras", "crane", "regctl",
                          "singularity", "apptainer"))
_LDAP = ("ldapsearch", "ldapadd", "ldapmodify", "ldapdelete", "ldapwhoami", "ldappasswd", "ldapcompare",
         "ldapmodrdn", "ldapexop")
_MONGO = ("mongo", "mongosh", "mongodump", "mongorestore", "mongoexport", "mongoimport", "mongostat", "mongotop",
          "mongofiles")
_TOOL_OPTIONS: dict[str, dict[str, int]] = {
    "sshpass": {"-p": _ANY},
    "redis-cli": {"-a": _ANY},
    "login": {"-p": _ANY},  # docker login, podman login, helm registry login...
    "curl": {"-u": _USERPASS, "--user": _USERPASS, "-U": _USERPASS, "--proxy-user": _USERPASS, "-b": _COOKIE},
    "openssl": {"-k": _ANY, "-K": _ANY},
    "zip": {"-P": _ANY}, "unzip": {"-P": _ANY},
    "smbclient": {"-U": _PERCENT, "--user": _PERCENT},
    "mysqladmin": {"password": _ANY},
    **{tool: {"-w": _ANY} for tool in _LDAP},
    **{tool: {"-p": _ANY} for tool in _MONGO},
}
# tools whose options may carry their value glued to them (-pSECRET, -uuser:pw)
_GLUED_TOOLS = frozenset(("sshpass", "redis-cli", "curl", "smbclient", *_LDAP, *_MONGO))
# a tool named after one of these starts a new command: its -p is a port again (sshpass -p X ssh -p 22)
_TOOLS = frozenset((*(tool for tool in _TOOL_OPTIONS if tool != "login"), *_LOGIN_TOOLS, "ssh", "scp", "sftp",
                    "rsync", "nc", "ncat", "netcat", "socat", "mysql", "psql", "wget", "git", "python", "python3",
                    "bash", "sh", "env", "sudo"))
_SEPARATORS = frozenset(("|", "||", "&&", ";", "&", "|&"))
# `git config --global user.password X`, `aws configure set aws_secret_access_key X`
_SETTERS = frozenset(("set", "config", "--global", "--local", "--system", "--worktree", "--add"))
_STDIN_FLAG = LazyPattern(globals(), "_STDIN_FLAG", r"^--?(?:password|passwd|pass|token|secret|passphrase)[-_]stdin$",
                          re.I)


class _Words:
    """The state carried from one word to the next: an option waiting for its value, an open quote, the tool."""

    __slots__ = ("pending", "quote", "tool", "prev", "glue")

    def __init__(self) -> None:
        self.pending: int | None = None
        self.quote: str | None = None
        self.tool: str | None = None
        self.prev = ""
        self.glue = False  # the last word was swallowed by an open quote: drop the space before it

    def word(self, word: str) -> str:
        self.glue = False
        if self.quote is not None:  # inside a quoted secret: 'a b c'
            close = word.find(self.quote)
            self.glue = True
            if close < 0:
                return ""
            self.quote = None
            rest, self.pending, self.quote = _scan(word[close + 1:])
            return word[close] + _redact_shapes(rest)
        out = self._word(word)
        self.prev = word
        return out

    def _word(self, word: str) -> str:
        if word in _SEPARATORS:
            self.pending = self.tool = None
            return word
        pending, self.pending = self.pending, None
        if pending is not None and not (pending in (_LONG, _HEADER) and word.startswith("--")):
            if pending == _HEADER:
                if word.strip(_QUOTES).lower() in _AUTH_SCHEMES:
                    self.pending = _LONG
                    return word
                if word.endswith(";"):  # Cookie: a=1; b=2
                    self.pending = _HEADER
            text, self.quote = _apply(pending, word)
            return text
        if not word.startswith("-"):
            bare = word.lstrip(_QUOTES + "(")
            base = bare[bare.rfind("/") + 1:]
            if base in _TOOLS:
                self.tool = base
                return word
            if base == "login" and self.tool in _LOGIN_TOOLS:
                self.tool = "login"
                return word
        options = _TOOL_OPTIONS.get(self.tool) if self.tool else None
        if options:
            mode = options.get(word)
            if mode:
                self.pending = mode
                return word
            name, eq, value = word.partition("=")
            if eq and name in options:  # --user=bob:pw
                text, self.quote = _apply(options[name], value)
                return f"{name}={text}"
            if (self.tool in _GLUED_TOOLS and len(word) > 2 and word[0] == "-" and word[1] != "-"
                    and word[:2] in options):  # -pSECRET, -uuser:pw
                text, self.quote = _apply(options[word[:2]], word[2:])
                return word[:2] + text
        text, self.pending, self.quote = _scan(word)
        if self.pending is not None or self.quote is not None:
            return _redact_shapes(text)
        if text == word:
            if word.startswith("-") and "=" not in word and ":" not in word:
                if secret_name(word if word.startswith("--") else word.lower()):  # --password X, -storepass X
                    self.pending = _LONG
                    return word
                if _GLUED_P.match(word):
                    return f"-p{REDACTED}"
            elif word.lower() == "bearer":
                self.pending = _LONG
                return word
            elif word in ("=", ":", ":=", "=>"):  # api_key = "x"
                name = _NAME_AT_END.search(self.prev)
                if name and secret_name(name[1]):
                    self.pending = _ANY
                return word
            elif self.prev.lower() in _SETTERS and secret_name(word):
                self.pending = _ANY
                return word
        return _redact_shapes(text)


def _stdin_secrets(words: list[str]) -> set[int]:
    """Words that a pipe or here-string feeds to a --password-stdin: `echo X | docker login --password-stdin`."""
    marked: set[int] = set()
    segments: list[list[int]] = [[]]
    joins: list[str] = []
    for i, word in enumerate(words):
        if word in _SEPARATORS:
            joins.append(word)
            segments.append([])
        elif word and not word.isspace():
            segments[-1].append(i)
    for s, segment in enumerate(segments):
        if not any(_STDIN_FLAG.match(words[i]) for i in segment):
            continue
        for k, i in enumerate(segment[:-1]):
            if words[i] == "<<<":
                marked.add(segment[k + 1])
        if s > 0 and joins[s - 1] in ("|", "|&"):
            feeder = segments[s - 1]
            starts = [k for k, i in enumerate(feeder)
                      if words[i].lstrip(_QUOTES).rsplit("/", 1)[-1] in ("echo", "printf")]
            if starts:
                args = feeder[starts[-1] + 1:]
                while args and words[args[0]] in ("-n", "-e", "-ne", "-en", "--"):
                    args = args[1:]
                marked.update(args)
    return marked


def _redact_words(words: Iterable[str], scan: _Words, marked: set[int] | None = None) -> list[str]:
    out: list[str] = []
    for i, word in enumerate(words):
        if not word or word.isspace():
            out.append(word)
            continue
        if marked and i in marked and scan.quote is None:
            text, scan.quote, _ = _value(word)
        else:
            text = scan.word(word)
            if scan.glue and out and out[-1].isspace():
                out[-1] = ""  # (kept as a piece, so that pieces and words stay aligned)
        out.append(text)
    return out


# -- entry points ------------------------------------------------------------------------------------------
@lru_cache(maxsize=4096)  # record keys and key fields repeat
def redact_text(text: str) -> str:
    """Secrets inside one value: credentials in URLs, secret query parameters and assignments, keys of a
    known shape, private key blocks."""
    text = _redact_pem(text)
    scanned, _, _ = _scan(text)
    return _redact_shapes(scanned)


@lru_cache(maxsize=4096)  # the threads and forked workers of a process share its command line
def redact_cmdline(cmdline: str) -> str:
    """Replace secret values in a command line with <redacted>; everything else stays readable.

    Word by word, in time linear in the line: the value of a secret option (`--password=x`,
    `--api-key x`, `--password -x`, `-pSECRET`), of a secret variable (`TOKEN=x`, `PGPASSWORD=x`,
    `--env=DB_PASSWORD=x`), of a secret key in JSON or code (`"api_key": "x"`, `token='x'`), of an
    authentication header (`Authorization: Bearer x`, `Authorization:Bearer x`, `X-Api-Key: x`,
    `Cookie: a=1; b=2`), the short options of tools that take a password (`sshpass -p`, `redis-cli -a`,
    `docker login -p`, `curl -u user:pw`), what is piped into a `--password-stdin`, credentials in
    URLs, secret query parameters, private key blocks and keys of a well-known shape (sk-..., ghp_...,
    AKIA..., hf_..., JWTs). A quoted secret ('a b c') is redacted whole."""
    if not cmdline:
        return cmdline
    cmdline = _redact_pem(cmdline)
    words = re.split(r"(\s+)", cmdline)
    marked = _stdin_secrets(words) if "stdin" in cmdline.lower() and ("|" in cmdline or "<<<" in cmdline) else None
    return "".join(_redact_words(words, _Words(), marked))


def redact_argv(argv: list[str]) -> list[str]:
    """An argument vector redacted as its command line would be, one element per argument
    (`["--password", "x"]` -> `["--password", "<redacted>"]`): the argument after a secret option is
    the value whole, spaces included, and a secret split over several arguments (an unquoted private
    key, `sh -c "echo X | docker login --password-stdin"`) is found too."""
    args = _redact_pem_across(list(argv))
    pieces = [re.split(r"(\s+)", arg) for arg in args]
    line = " ".join(args)
    marked_by_arg: list[set[int]] = [set() for _ in args]
    if "stdin" in line.lower() and ("|" in line or "<<<" in line):
        words: list[str] = []
        where: list[tuple[int, int]] = []
        for i, arg_pieces in enumerate(pieces):
            words += [" ", *arg_pieces] if i else arg_pieces
            where += [(-1, -1), *((i, k) for k in range(len(arg_pieces)))] if i else \
                [(i, k) for k in range(len(arg_pieces))]
        for n in _stdin_secrets(words):
            i, k = where[n]
            marked_by_arg[i].add(k)
    scan = _Words()
    out: list[str] = []
    for arg, arg_pieces, marked in zip(args, pieces, marked_by_arg):
        mode = scan.pending
        if mode is not None and len(arg_pieces) > 1 and not (mode in (_LONG, _HEADER) and arg.startswith("--")):
            scan.pending = None  # the option's value is this whole argument
            scheme, space, rest = arg.partition(" ")
            if mode == _HEADER and scheme.lower() in _AUTH_SCHEMES and rest:
                out.append(f"{scheme}{space}{REDACTED}")
            else:
                out.append(_apply(mode, arg)[0])
            scan.prev = arg
            continue
        # (a quote opened in one argument may close in a later one: a line split at its spaces)
        text = "".join(_redact_words(arg_pieces, scan, marked))
        out.append(text if text or not arg else REDACTED)
    return out


def _redact_pem_across(args: list[str]) -> list[str]:
    """Private key blocks in an argument vector, also when their lines are separate arguments."""
    line = " ".join(args)
    if "PRIVATE KEY" not in line:
        return args
    bodies = [(m.end(1), m.start(2) if m[2] else len(line)) for m in _PEM.finditer(line)]
    out, at = [], 0
    for arg in args:
        end = at + len(arg)
        for lo, hi in bodies:
            a, b = max(at, lo), min(end, hi)
            if a < b:  # this argument holds (a part of) a key's body
                arg = arg[:a - at] + REDACTED + arg[b - at:]
                break
        out.append(arg)
        at = end + 1
    return out


_ENV_FIELDS = frozenset(("env", "envs", "environ", "environment", "env_vars", "envvars", "environment_variables"))


def redact_record(data: Any) -> Any:
    """Every value of a record kept as it was read (a legacy graph's details, an unknown type's fields):
    strings as command lines, argument lists as argument vectors, every value under a secret key
    ({"password": ...}, {"auth": {...}}) and an environment ({"env": {...}}) as the collectors keep it:
    allowlisted keys only."""
    return _record(data, False)


def _record(data: Any, secret: bool) -> Any:
    kind = type(data)
    if kind is int or kind is float:
        return REDACTED if secret else data
    if kind is str:
        return REDACTED if secret and data else redact_cmdline(data)
    if data is None or kind is bool:
        return data
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            name, hidden, env = _record_key(str(key))
            kind = type(value)
            if kind is int or kind is float:  # most of a record: counts and sizes
                out[name] = REDACTED if hidden or secret else value
            elif env and not secret and isinstance(value, (dict, list)):
                out[name] = _environment(value)
            else:
                out[name] = _record(value, hidden or secret)
        return out
    if isinstance(data, (list, tuple)):
        if not secret and data and all(isinstance(v, str) for v in data):
            return redact_argv(list(data))
        return [_record(v, secret) for v in data]
    return REDACTED if secret else redact_cmdline(str(data))


@lru_cache(maxsize=4096)
def _record_key(key: str) -> tuple[str, bool, bool]:
    """A record's key: (as kept, whether its value is secret, whether it holds an environment)."""
    return redact_text(key), secret_name(key), key.lower() in _ENV_FIELDS


def _environment(env: dict | list) -> dict | list:
    """{"KEY": value} or ["KEY=value", ...]: the allowlisted keys only, their values redacted."""
    if isinstance(env, dict):
        return filter_env({str(k): "" if v is None else str(v) for k, v in env.items()})
    pairs = {}
    for item in env:
        if isinstance(item, str) and "=" in item:
            key, _, value = item.partition("=")
            pairs[key] = value
    return [f"{k}={v}" for k, v in filter_env(pairs).items()]
