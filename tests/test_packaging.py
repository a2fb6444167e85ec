"""The wheel: one installed name (`witty_profiler`) holding every part, the skill and the schema,
and an install from it that works without the checkout."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from witty_profiler.commands import skill

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
# the folders at the top of the repository that install as witty_profiler.<folder>
PARTS = ("collectors", "topology", "converters", "diagnosis", "app", "mcp_server", "cluster", "traces", "sources",
         "service")


def _tracked(*patterns: str) -> list[str]:
    done = subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return done.stdout.split()


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, Path]:
    """(wheel, the copy of the tree it was built from). Built from a copy, so the build leaves
    nothing in the checkout; the copy is what the checks compare with, since the checkout may change
    while the tests run."""
    pytest.importorskip("wheel")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".benchmarks"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "-w", str(tmp), "--no-deps",
                            "--no-build-isolation", "-q"], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    return next(tmp.glob("witty_profiler-*.whl")), src


def test_the_wheel_installs_one_name(built):
    """Installed beside a distribution called `collectors`, `topology`, `converters`, `diagnosis` or
    `mcp-server`, neither may overwrite the other: everything lives under witty_profiler."""
    wheel, _ = built
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert top == {"witty_profiler"}, top
    top_level = next(n for n in names if n.endswith(".dist-info/top_level.txt"))
    assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["witty_profiler"]


def test_every_module_of_every_part_ships(built):
    """The package list in pyproject.toml names each package folder: a new subpackage that is
    not listed would be missing from the wheel, and only from the wheel."""
    wheel, src = built
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for part in (*PARTS, "witty_profiler"):
        for path in (src / part).rglob("*.py"):
            if "__pycache__" in path.parts or "skill" in path.relative_to(src).parts[:2]:
                continue
            inside = path.relative_to(src / part).as_posix()
            expected.add(f"witty_profiler/{inside}" if part == "witty_profiler" else f"witty_profiler/{part}/{inside}")
    assert expected - names == set()
    assert "witty_profiler/topology/schema/graph-v1.schema.json" in names


def test_the_wheel_ships_the_skill(built):
    wheel, src = built
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sorted(n.removeprefix("witty_profiler/skill/") for n in names if n.startswith("witty_profiler/skill/"))
    assert shipped == skill._skill_files(src / "skills" / "bottleneck-identification")


def test_an_install_from_the_wheel_works_without_the_checkout(built, tmp_path):
    """Installed as a plain package (not editable) and run away from the checkout: the commands find
    their parts, the schema and the skill in site-packages."""
    wheel, src = built
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(site)}
    graph = tmp_path / "g.json"
    for argv, expected in ((["skill", "validate"], f"ok: {site / 'witty_profiler' / 'skill'}\n"
                                                   f"ok: {site / 'witty_profiler' / 'skill_dataflow'}\n"
                                                   f"ok: {site / 'witty_profiler' / 'skill_hotspot'}"),
                           (["skill", "install", "--dest", str(tmp_path / "skills")],
                            f"installed: {tmp_path / 'skills' / 'bottleneck-identification'}\n"
                            f"installed: {tmp_path / 'skills' / 'dataflow-topology-restore'}\n"
                            f"installed: {tmp_path / 'skills' / 'hotspot-thread-discovery'}"),
                           (["collect", "--duration", "0.3", "--interval", "0.1", "--collectors", "cpu,memory",
                             "-o", str(graph)], "")):
        run = subprocess.run([sys.executable, "-m", "witty_profiler", *argv], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=120)
        assert run.returncode == 0 and run.stdout.strip() == expected, run.stdout + run.stderr
    where = subprocess.run([sys.executable, "-c", "import witty_profiler.collectors as c, witty_profiler.mcp_server as m;"
                            "print(c.__file__); print(m.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=60)
    parts = [str(site / "witty_profiler" / p / "__init__.py") for p in ("collectors", "mcp_server")]
    assert where.stdout.split() == parts
    skills = "skills", "bottleneck-identification"
    assert skill.same_tree(src.joinpath(*skills), tmp_path.joinpath(*skills))
    info = subprocess.run([sys.executable, "-m", "witty_profiler", "info", str(graph)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=60)
    assert info.returncode == 0 and "cpu" in info.stdout, info.stdout + info.stderr


# run in a copy of the checkout with the installed (editable) witty_profiler taken off the import path, so
# that only what the copy holds can answer
UNINSTALLED = ("import runpy, sys; sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]; "
               "sys.path[:] = [p for p in sys.path if 'witty' not in p]; ")


def _checkout_copy(tmp: Path) -> Path:
    src = tmp / "clone"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".benchmarks", ".whl"))
    return src


def test_a_checkout_runs_without_installing(tmp_path):
    """`python3 -m witty_profiler` from a fresh checkout with only the dependencies installed: every part
    resolves to the checkout's own folders, through witty_profiler/<part>, which links to <part>/."""
    src = _checkout_copy(tmp_path)
    parts = ", ".join(f"witty_profiler.{p}" for p in PARTS)
    where = subprocess.run([sys.executable, "-c", UNINSTALLED + f"import {parts}; print('\\n'.join(m.__file__ for m in "
                            f"[{parts}]))"], capture_output=True, text=True, cwd=src, timeout=60)
    assert where.returncode == 0, where.stderr
    assert where.stdout.split() == [str(src / "witty_profiler" / p / "__init__.py") for p in PARTS]
    assert all((src / "witty_profiler" / p).resolve() == (src / p).resolve() for p in PARTS)
    run = subprocess.run([sys.executable, "-c", UNINSTALLED + "sys.argv = ['witty_profiler', '--help']; "
                          "runpy.run_module('witty_profiler', run_name='__main__', alter_sys=True)"],
                         capture_output=True, text=True, cwd=src, timeout=60)
    assert run.returncode == 0 and "usage: witty-profiler" in run.stdout, run.stdout + run.stderr


def test_every_part_is_linked_from_the_package():
    """Each top-level part has its link in witty_profiler/, and each skill its own; nothing else is linked there."""
    links = sorted(p.name for p in (REPO / "witty_profiler").iterdir() if p.is_symlink())
    assert links == sorted([*PARTS, "skill", "skill_dataflow", "skill_hotspot"])


def test_no_code_imports_a_part_by_its_folder_name():
    """`import collectors` works from a checkout (the folder is on the path) but not after a plain
    install: every import names witty_profiler.<part>."""
    wrong = []
    for name in _tracked("*.py"):
        if not (REPO / name).exists():  # deleted in the working tree, not yet in git
            continue
        tree = ast.parse((REPO / name).read_text(encoding="utf-8"), name)
        for node in ast.walk(tree):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            wrong += [f"{name}:{node.lineno} {m}" for m in modules if m.split(".")[0] in PARTS]
    assert wrong == []


# what each part may import (besides itself): data flows one way. The application layer is the one place the
# front-ends talk to; no part imports the root package (the API and the CLI), so no folder circle
CORE = {"topology", "collectors", "converters", "diagnosis", "cluster", "traces", "sources"}
ALLOWED_IMPORTS = {
    "topology": set(),
    "collectors": {"topology"},
    "converters": {"topology"},
    "diagnosis": {"topology"},
    # sources: the services fan-out reads HTTP with the Prometheus source's rules (same-origin redirects, times)
    "cluster": {"topology", "diagnosis", "sources"},
    "traces": {"topology"},
    "sources": {"topology"},
    "app": CORE,
    "mcp_server": {"topology", "app", "cluster", "converters", "diagnosis"},
    "service": {"topology", "app", "mcp_server", "collectors", "diagnosis"},
}


def test_data_flows_one_way_between_the_parts():
    parts = set(ALLOWED_IMPORTS)
    wrong = []
    for part, allowed in ALLOWED_IMPORTS.items():
        for path in sorted((REPO / part).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                           else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
                for m in modules:
                    names = m.split(".")
                    if names[0] == "witty_profiler" and len(names) > 1 and names[1] in parts - allowed - {part}:
                        wrong.append(f"{path.relative_to(REPO)}:{node.lineno} imports {m}")
                    elif m == "witty_profiler":  # the root package: `import witty_profiler`, `from witty_profiler import`
                        wrong.append(f"{path.relative_to(REPO)}:{node.lineno} imports the root package")
    assert wrong == []
