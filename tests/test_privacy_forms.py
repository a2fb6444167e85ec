"""Every form of secret in docs/redaction.md, given and stored, and what must stay readable."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from witty_profiler.topology.privacy import (
    REDACTED, filter_env, redact_argv, redact_cmdline, redact_record, secret_name,
)
from witty_profiler.topology.privacy_forms import FORMS, KEPT, page_with_tables

PAGE = Path(__file__).resolve().parents[1] / "docs" / "redaction.md"
REDACT = {"cmdline": redact_cmdline, "env": filter_env, "record": redact_record}


@pytest.mark.parametrize("form", FORMS, ids=[f"{f.kind}:{f.name}" for f in FORMS])
def test_each_form_is_stored_redacted(form):
    stored = REDACT[form.kind](form.given)
    assert stored == form.redacted
    assert form.secret not in json.dumps(stored)


@pytest.mark.parametrize("kind, given, why", KEPT, ids=[why for _, _, why in KEPT])
def test_ordinary_arguments_stay_as_they_are(kind, given, why):
    assert REDACT[kind](given) == given


@pytest.mark.parametrize("form", FORMS, ids=[f"{f.kind}:{f.name}" for f in FORMS])
def test_redacting_twice_changes_nothing(form):
    assert REDACT[form.kind](form.redacted) == form.redacted


@pytest.mark.parametrize("form", [f for f in FORMS if f.kind == "cmdline"], ids=lambda f: f.name)
def test_an_argument_vector_loses_the_same_secrets(form):
    """The legacy reader's argument lists: each word an argument, the secret gone all the same."""
    argv = form.given.split(" ")
    stored = redact_argv(argv)
    assert len(stored) == len(argv) and form.secret not in " ".join(stored) and REDACTED in " ".join(stored)


def test_an_argument_vector_keeps_its_arguments_apart():
    assert redact_argv(["curl", "-H", "Authorization: Bearer t0k", "--password", "p w", "--lr", "1"]) == \
        ["curl", "-H", f"Authorization: Bearer {REDACTED}", "--password", REDACTED, "--lr", "1"]
    # a key's lines as separate arguments (an unquoted $KEY): every line of its body goes
    key = ["-----BEGIN", "RSA", "PRIVATE", "KEY-----", "MIIEpAIB", "AKCAQEA", "-----END", "RSA", "PRIVATE", "KEY-----"]
    assert redact_argv(["app", *key, "--lr", "1"]) == ["app", *key[:4], REDACTED, REDACTED, *key[6:], "--lr", "1"]
    assert redact_argv(["sh", "-c", "echo pw5 | docker login --password-stdin r"]) == \
        ["sh", "-c", f"echo {REDACTED} | docker login --password-stdin r"]


def test_the_page_shows_every_form():
    page = PAGE.read_text()
    assert page_with_tables(page) == page, \
        "docs/redaction.md is stale: python3 -m witty_profiler.topology.privacy_forms --write docs/redaction.md"
    for form in FORMS:
        assert f"| {form.name} |" in page


@pytest.mark.parametrize("name, secret", [
    ("--password", True), ("PGPASSWORD", True), ("--hf_token", True), ("apiKey", True), ("X-Api-Key", True),
    ("--client-secret", True), ("-storepass", True), ("AccountKey", True), ("--jwt", True), ("sig", True),
    ("--max-tokens", False), ("--key-size", False), ("--num-keys", False), ("--token-file", False),
    ("--key-file", False), ("--ssl-keyfile", False), ("--password-stdin", False), ("--pad-token", False),
    ("--eos_token", False), ("data.prompt_key", False), ("--no-auth", False), ("--tokenizer", False),
])
def test_which_names_hold_a_secret(name, secret):
    assert secret_name(name) is secret


def test_a_record_keeps_its_shape():
    record = {"pid": 3, "ok": True, "none": None, "ratio": 0.5, "nested": [{"token": 7}], "cmd": ["a", 1]}
    assert redact_record(record) == {"pid": 3, "ok": True, "none": None, "ratio": 0.5,
                                     "nested": [{"token": REDACTED}], "cmd": ["a", 1]}


@pytest.mark.parametrize("line", [
    "a=" * 50_000, '{"password":"x",' * 10_000, "'a " * 30_000, "Cookie: a; " * 15_000, "x=a&token=b&" * 10_000,
    "--password " * 30_000, "-----BEGIN RSA PRIVATE KEY-----" * 5_000, "https://u:p@" * 10_000, "eyJ" * 50_000,
])
def test_hostile_lines_take_linear_time(line):
    """Hundreds of kilobytes of the worst shapes, each in well under a second (quadratic would take minutes)."""
    start = time.perf_counter()
    redact_cmdline.__wrapped__(line)
    assert time.perf_counter() - start < 5.0
