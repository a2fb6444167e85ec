"""The bottleneck-identification Agent Skill: frontmatter and size limits, generated references,
`skill install` / `skill validate`, the packaging that ships it, and the eval runner on reports
the tool itself writes for every eval input."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from witty_profiler.cli import main
from witty_profiler.commands import skill

REPO = Path(__file__).resolve().parents[1]
SKILL = REPO / "skills" / "bottleneck-identification"
CASES = json.loads((SKILL / "evals" / "evals.json").read_text())["evals"]


def _importable(*names: str) -> str | None:
    """The first import that fails, or None."""
    for name in names:
        module, _, attr = name.partition(":")
        try:
            loaded = importlib.import_module(module)
        except ImportError as exc:
            return f"{module}: {exc}"
        if attr and not hasattr(loaded, attr):
            return f"{module}.{attr} does not exist yet"
    return None


def _needs(*names: str) -> None:
    missing = _importable(*names)
    if not missing and "diagnosis.catalog:catalog" in names:
        try:  # the catalog imports one module per layer
            importlib.import_module("diagnosis.catalog").catalog()
        except ImportError as exc:
            missing = f"the pattern catalog: {exc}"
    if missing:
        pytest.skip(f"waiting for {missing}")


# -- frontmatter and limits ----------------------------------------------------------------------
def test_skill_md_frontmatter_is_valid_and_within_limits():
    meta, body = skill.read_frontmatter(SKILL / "SKILL.md")
    assert skill._frontmatter_problems(meta, body, SKILL.name) == []
    assert meta["name"] == "bottleneck-identification" == SKILL.name
    assert len(meta["description"]) <= 1024 and len(body) < 500
    for trigger in ("slow training", "utilisation", "bottleneck", "throughput", "latency", "NUMA", "data loader"):
        assert trigger.lower() in meta["description"].lower()


def test_skill_md_links_exist_and_the_bundle_is_the_repository_folder():
    text = (SKILL / "SKILL.md").read_text()
    links = [p for p in skill._link_problems(SKILL, text) if "patterns.md" not in p and "thresholds.md" not in p
             and "layers.md" not in p]  # generated files are checked in test_generated_references_are_current
    assert links == []
    assert skill.bundled_skill() == SKILL.resolve()


@pytest.mark.parametrize("change, problem", [
    (lambda m: m.update(name="Bottleneck_ID"), "lowercase letters"),
    (lambda m: m.update(name="other-name"), "differs from the folder name"),
    (lambda m: m.update(name="a" * 65), "lowercase letters"),
    (lambda m: m.update(description="x" * 1025), "at most 1024"),
    (lambda m: m.update(description=""), "missing or empty"),
    (lambda m: m.update(description="use <b>this</b>"), "'<' or '>'"),
    (lambda m: m.update(triggers="x"), "unknown frontmatter key 'triggers'"),
    (lambda m: m.update(metadata={"version": 1}), "metadata"),
])
def test_frontmatter_problems_are_reported(change, problem):
    meta, body = skill.read_frontmatter(SKILL / "SKILL.md")
    change(meta)
    problems = skill._frontmatter_problems(meta, body, SKILL.name)
    assert any(problem in p for p in problems), problems


def test_a_long_body_is_reported():
    meta, body = skill.read_frontmatter(SKILL / "SKILL.md")
    assert any("keep it under 500" in p for p in skill._frontmatter_problems(meta, ["x"] * 500, SKILL.name))


def test_validate_cli_rejects_a_broken_skill_in_one_line(tmp_path, capsys):
    broken = tmp_path / "bottleneck-identification"
    shutil.copytree(SKILL, broken)
    (broken / "SKILL.md").write_text("# no frontmatter\n")
    assert main(["skill", "validate", str(broken)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no YAML frontmatter" in err[0]


# -- generated references --------------------------------------------------------------------------
def test_generated_references_are_current():
    _needs("diagnosis.catalog:catalog", "witty_profiler.commands.patterns")
    from witty_profiler.layers_doc import layers_markdown
    assert (SKILL / "references" / "layers.md").read_text() == layers_markdown(), \
        "references/layers.md is stale: witty-profiler skill layers > skills/bottleneck-identification/references/layers.md"
    assert skill.validate(SKILL) == []


def test_layers_doc_uses_only_vocabulary_metrics_and_every_pattern():
    _needs("diagnosis.catalog:catalog")
    from diagnosis.catalog import catalog
    from witty_profiler.layers_doc import undefined_metrics
    assert undefined_metrics() == [], "patterns read metrics that topology/vocabulary.py does not define"
    text = (SKILL / "references" / "layers.md").read_text()
    assert all(f"`{pid}`" in text for pid in catalog())


def test_validate_reports_a_pattern_missing_from_patterns_md(tmp_path):
    _needs("diagnosis.catalog:catalog")
    from diagnosis.catalog import catalog
    copy = tmp_path / "bottleneck-identification"
    shutil.copytree(SKILL, copy)
    first = next(iter(catalog()))
    (copy / "references").mkdir(exist_ok=True)
    (copy / "references" / "patterns.md").write_text("\n".join(p for p in catalog() if p != first) + "\n")
    assert f"references/patterns.md does not describe pattern {first}" in skill.validate(copy)


# -- install -----------------------------------------------------------------------------------
def test_install_copies_the_skill_and_refuses_to_overwrite_a_different_copy(tmp_path, capsys):
    assert main(["skill", "install", "--dest", str(tmp_path)]) == 0
    target = tmp_path / "bottleneck-identification"
    assert capsys.readouterr().out.strip() == f"installed: {target}"
    assert skill.same_tree(SKILL, target)
    assert (target / "scripts" / "diagnose.sh").stat().st_mode & 0o111
    assert main(["skill", "install", "--dest", str(tmp_path)]) == 0
    assert "already installed, identical" in capsys.readouterr().out
    (target / "SKILL.md").write_text((target / "SKILL.md").read_text() + "\nlocal note\n")
    assert main(["skill", "install", "--dest", str(tmp_path)]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert "local note" in (target / "SKILL.md").read_text()
    assert main(["skill", "install", "--dest", str(tmp_path), "--force"]) == 0
    assert skill.same_tree(SKILL, target)


def test_install_defaults_to_the_claude_skills_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert main(["skill", "install"]) == 0
    target = tmp_path / ".claude" / "skills" / "bottleneck-identification"
    assert capsys.readouterr().out.strip() == f"installed: {target}"
    assert (target / "SKILL.md").read_text() == (SKILL / "SKILL.md").read_text()


def test_install_force_never_replaces_a_folder_that_is_not_a_skill(tmp_path):
    target = tmp_path / "bottleneck-identification"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    assert main(["skill", "install", "--dest", str(tmp_path), "--force"]) == 2
    assert (target / "precious.txt").read_text() == "keep me"


def test_the_wheel_ships_the_skill(tmp_path):
    """A plain (non-editable) install must carry the skill: build the wheel and look inside.
    Built from a copy of the tree, so the build leaves nothing in the checkout."""
    _needs("wheel")
    src = tmp_path / "src"
    shutil.copytree(REPO, src, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".benchmarks"))
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "-w", str(tmp_path), "--no-deps",
                            "--no-build-isolation", "-q"], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr[-2000:]
    wheel = next(tmp_path.glob("witty_profiler-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = sorted(n.removeprefix("witty_profiler/skill/") for n in names if n.startswith("witty_profiler/skill/"))
    assert shipped == skill._skill_files(src / "skills" / "bottleneck-identification")
    # installed as a plain package (not editable), the commands find the bundle in site-packages
    site = tmp_path / "site"
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(site),
                              str(wheel)], capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stderr[-2000:]
    env = {**os.environ, "PYTHONPATH": str(site)}
    for argv, expected in ((["skill", "validate"], f"ok: {site / 'witty_profiler' / 'skill'}"),
                           (["skill", "install", "--dest", str(tmp_path / "skills")],
                            f"installed: {tmp_path / 'skills' / 'bottleneck-identification'}")):
        run = subprocess.run([sys.executable, "-m", "witty_profiler", *argv], capture_output=True, text=True,
                             cwd=tmp_path, env=env, timeout=120)
        assert run.returncode == 0 and run.stdout.strip() == expected, run.stdout + run.stderr
    # against the copy the wheel was built from: the checkout may change while the test runs
    assert skill.same_tree(src / "skills" / "bottleneck-identification", tmp_path / "skills" / "bottleneck-identification")


# -- evals --------------------------------------------------------------------------------------
def test_evals_file_has_at_least_eight_cases_with_value_level_assertions():
    assert len(CASES) >= 8
    assert len({c["id"] for c in CASES}) == len({c["name"] for c in CASES}) == len(CASES)
    runner = skill.load_eval_runner(SKILL)
    known = runner.ASSERTION_TYPES
    for case in CASES:
        assert case["prompt"] and case["expected_output"] and case["assertions"]
        assert {a["type"] for a in case["assertions"]} <= known
        assert ("graph" in case["input"]) != ("scenario" in case["input"])
    assert runner.resolve_input(CASES[0]["input"]["graph"], None) is not None or not (
        REPO.parent / "shared").exists()


def test_eval_inputs_resolve_to_the_shared_sample(vllm_sample_path, tmp_path, monkeypatch):
    runner = skill.load_eval_runner(SKILL)
    rel = CASES[0]["input"]["graph"]
    assert runner.resolve_input(rel, None) == vllm_sample_path.resolve()
    (tmp_path / vllm_sample_path.name).symlink_to(vllm_sample_path)
    monkeypatch.chdir(tmp_path)
    assert runner.resolve_input(rel, str(tmp_path)) == (tmp_path / vllm_sample_path.name).resolve()


def _report(findings=(), coverage=()):
    return {"findings": list(findings), "coverage": list(coverage), "summary": {}}


def _mismatch(pid, npu, dev_node, cpu_node, priority="P0"):
    return {"pattern": "interconnect.device_numa_mismatch", "layer": 3, "priority": priority, "severity": "critical",
            "subjects": [f"process:local:{pid}"],
            "evidence": [{"kind": "edge", "ids": [f"uses_device|process:local:{pid}|npu:local:{npu}"]},
                         {"kind": "edge", "ids": [f"local_to|npu:local:{npu}|numa_node:local:{dev_node}"]},
                         {"kind": "statistic", "ids": [f"runs_on|thread:local:{pid}:{pid}|numa_node:local:{cpu_node}"]},
                         {"kind": "edge", "ids": [f"numa_distance|numa_node:local:{cpu_node}|numa_node:local:{dev_node}"]}]}


def test_the_checks_pass_and_fail_on_values():
    runner = skill.load_eval_runner(SKILL)
    ctx = {"roles": {"consumer": [42]}, "host": "h", "layers": [(3, "interconnect", "Interconnect")],
           "catalog": {"interconnect.device_numa_mismatch": 3, "compute.low_ipc": 1}}
    good = _report([_mismatch(1895087, "0000:c1:00.0", 6, 7)],
                   [{"pattern": "interconnect.device_numa_mismatch", "layer": 3, "status": "finding", "reason": "x"},
                    {"pattern": "compute.low_ipc", "layer": 1, "status": "not_evaluated", "reason": "no PMU here"}])
    case = next(c for c in CASES if c["name"] == "vllm-numa-evidence-per-worker")
    first = case["assertions"][0]
    assert runner.check(first, good, None, ctx)[0]
    assert not runner.check(first, _report([_mismatch(1895087, "0000:c1:00.0", 4, 7)]), None, ctx)[0]
    p0 = {"type": "finding", "pattern": "interconnect.device_numa_mismatch", "priority": "P0",
          "mentions_all": ["process:local:1895087"]}
    assert runner.check(p0, good, None, ctx)[0]
    assert not runner.check(p0, _report([_mismatch(1895087, "0000:c1:00.0", 6, 7, "P1")]), None, ctx)[0]
    assert not runner.check({**p0, "mentions_all": ["process:local:1895088"]}, good, None, ctx)[0]
    pmu = {"type": "coverage", "pattern": "compute.low_ipc", "status": "not_evaluated", "reason_matches": "PMU"}
    assert runner.check(pmu, good, None, ctx)[0]
    cleared = _report(good["findings"], [dict(good["coverage"][1], status="clear", reason="ok")])
    assert not runner.check(pmu, cleared, None, ctx)[0]
    assert runner.check({"type": "coverage_complete"}, good, None, ctx)[0]
    assert not runner.check({"type": "coverage_complete"}, cleared, None, ctx)[0]
    legacy = next(c for c in CASES if c["name"] == "vllm-coverage-legacy-limits")
    never_healthy = next(a for a in legacy["assertions"] if a["type"] == "md_not_matches")
    assert not runner.check(never_healthy, None, "## Layer 1: Compute\nThe compute layer is healthy.\n", ctx)[0]
    assert runner.check(never_healthy, None, "## Layer 1: Compute\nNot evaluated: no IPC counter (no PMU).\n", ctx)[0]
    md = {"type": "md_matches", "all": ["{consumer.pid}"]}
    assert runner.check(md, None, "the consumer (pid 42) waits", ctx)[0]
    assert not runner.check(md, None, "the consumer (pid 421) waits", ctx)[0]


# Cases the tool's own reports do not pass yet, and why. Strict: once the tool is fixed the case
# passes, the test reports XPASS as a failure, and the entry must go.
TOOL_GAPS: dict[str, str] = {}


def _eval_params() -> list:
    return [pytest.param(c, id=f"{c['id']}-{c['name']}", marks=[pytest.mark.xfail(
        strict=True, reason=TOOL_GAPS[c["name"]])] if c["name"] in TOOL_GAPS else []) for c in CASES]


@pytest.mark.parametrize("case", _eval_params())
def test_eval_runner_passes_on_the_tools_own_reports(case, vllm_sample_path, tmp_path):
    _needs("witty_profiler:diagnose", "witty_profiler:report", "witty_profiler:convert", "witty_profiler:collect",
           "diagnosis.catalog:catalog")
    runner = skill.load_eval_runner(SKILL)
    args = runner.argparse.Namespace(reports=None, inputs=None, keep=str(tmp_path), strict=True)
    outcome = runner.run_case(case, args)
    if outcome["status"] == "skipped":
        pytest.skip(outcome["reason"])
    failed = [f"{r['assertion']}: {r['detail']}" for r in outcome["results"] if not r["passed"]]
    assert failed == []
    # the saved reports check the same way: what an assistant's saved report is graded with
    saved = runner.run_case(case, runner.argparse.Namespace(reports=str(tmp_path), inputs=None, keep=None, strict=True))
    assert saved["status"] == "passed", saved
