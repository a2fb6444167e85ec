"""The bottleneck-identification Agent Skill: frontmatter and size limits, generated references,
`skill install` / `skill validate`, the packaging that ships it, and the eval runner on reports
the tool itself writes for every eval input."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
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
    if not missing and "witty_profiler.diagnosis.catalog:catalog" in names:
        try:  # the catalog imports one module per layer
            importlib.import_module("witty_profiler.diagnosis.catalog").catalog()
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
    _needs("witty_profiler.diagnosis.catalog:catalog", "witty_profiler.commands.patterns")
    from witty_profiler.layers_doc import layers_markdown
    assert (SKILL / "references" / "layers.md").read_text() == layers_markdown(), \
        "references/layers.md is stale: witty-profiler skill layers > skills/bottleneck-identification/references/layers.md"
    assert skill.validate(SKILL) == []


def test_layers_doc_uses_only_vocabulary_metrics_and_every_pattern():
    _needs("witty_profiler.diagnosis.catalog:catalog")
    from witty_profiler.diagnosis.catalog import catalog
    from witty_profiler.layers_doc import undefined_metrics
    assert undefined_metrics() == [], "patterns read metrics that topology/vocabulary.py does not define"
    text = (SKILL / "references" / "layers.md").read_text()
    assert all(f"`{pid}`" in text for pid in catalog())


def test_validate_reports_a_pattern_missing_from_patterns_md(tmp_path):
    _needs("witty_profiler.diagnosis.catalog:catalog")
    from witty_profiler.diagnosis.catalog import catalog
    copy = tmp_path / "bottleneck-identification"
    shutil.copytree(SKILL, copy)
    first = next(iter(catalog()))
    (copy / "references").mkdir(exist_ok=True)
    (copy / "references" / "patterns.md").write_text("\n".join(p for p in catalog() if p != first) + "\n")
    assert f"references/patterns.md does not describe pattern {first}" in skill.validate(copy)


# -- install -----------------------------------------------------------------------------------
# `skill install` installs every skill the package ships, in this order
INSTALLED = ("bottleneck-identification", "dataflow-topology-restore", "hotspot-thread-discovery")


def test_the_hotspot_skill_validates_and_its_evals_collect_stacks():
    """hotspot-thread-discovery passes validation from the checkout and through its package link, and
    every one of its cases asks the harness for stack sampling of a live scenario."""
    root = REPO / "skills" / "hotspot-thread-discovery"
    assert skill.validate(root) == []
    assert skill.validate(skill.bundled_skill("hotspot-thread-discovery"), "hotspot-thread-discovery") == []
    cases = json.loads((root / "evals" / "evals.json").read_text())["evals"]
    assert all(c["input"]["stacks"] and "scenario" in c["input"] for c in cases)


def test_install_copies_the_skill_and_refuses_to_overwrite_a_different_copy(tmp_path, capsys):
    assert main(["skill", "install", "--dest", str(tmp_path)]) == 0
    target = tmp_path / "bottleneck-identification"
    assert capsys.readouterr().out.splitlines() == [f"installed: {tmp_path / name}" for name in INSTALLED]
    assert skill.same_tree(SKILL, target)
    assert (tmp_path / "hotspot-thread-discovery" / "evals" / "run_evals.py").stat().st_mode & 0o111
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
    assert capsys.readouterr().out.splitlines() == [f"installed: {target.parent / name}" for name in INSTALLED]
    assert (target / "SKILL.md").read_text() == (SKILL / "SKILL.md").read_text()


def test_install_force_never_replaces_a_folder_that_is_not_a_skill(tmp_path):
    target = tmp_path / "bottleneck-identification"
    target.mkdir()
    (target / "precious.txt").write_text("keep me")
    assert main(["skill", "install", "--dest", str(tmp_path), "--force"]) == 2
    assert (target / "precious.txt").read_text() == "keep me"


# -- scripts -------------------------------------------------------------------------------------
# the vLLM sample's workers: the NPU each drives, that NPU's NUMA node, the node the worker runs on
WORKERS = {1895087: (0, "0000:c1:00.0", 6, 7), 1895088: (1, "0000:c2:00.0", 6, 1),
           1895089: (2, "0000:81:00.0", 4, 6), 1895090: (3, "0000:82:00.0", 4, 7)}


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    if shutil.which("witty-profiler") is None:
        pytest.skip("witty-profiler is not installed: run `python3 -m pip install -e .`")
    return subprocess.run(["bash", str(SKILL / "scripts" / name), *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_diagnose_script_reports_the_mismatch_of_the_real_sample(vllm_sample_path, tmp_path):
    out = tmp_path / "out"
    done = _script("diagnose.sh", str(vllm_sample_path), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"graph:  {vllm_sample_path}", f"report: {out}/report.md",
                                        f"json:   {out}/report.json"]
    report = json.loads((out / "report.json").read_text())
    (mismatch,) = [f for f in report["findings"] if f["pattern"] == "interconnect.device_numa_mismatch"]
    assert mismatch["priority"] == "P0"
    assert set(mismatch["subjects"]) == {f"process:local:{pid}" for pid in WORKERS} | \
        {f"npu:local:{npu}" for _, npu, _, _ in WORKERS.values()}
    assert report["summary"]["counts"]["P0"] == sum(f["priority"] == "P0" for f in report["findings"])
    md = (out / "report.md").read_text()
    for pid, (index, npu, device_node, cpu_node) in WORKERS.items():
        sentence = (rf"pid {pid} \(python3\) uses NPU{index} \({npu}\) on NUMA node {device_node} "
                    rf"but runs on node {cpu_node}\b")
        assert re.search(sentence, md), pid
    assert f"**P0: {report['summary']['counts']['P0']} ·" in md

    # an existing report is kept unless --force; --pid narrows both reports to that worker
    before = (out / "report.md").read_text()
    kept = _script("diagnose.sh", str(vllm_sample_path), "--out", str(out), "--pid", "1895089")
    assert kept.returncode == 2 and "--force" in kept.stderr and (out / "report.md").read_text() == before
    narrowed = _script("diagnose.sh", str(vllm_sample_path), "--out", str(out), "--pid", "1895089", "--force")
    assert narrowed.returncode == 0, narrowed.stderr
    one = json.loads((out / "report.json").read_text())
    assert one["summary"]["scope"]["pids"] == [1895089]
    assert {f["pattern"]: sorted(f["subjects"]) for f in one["findings"]} == {
        "interconnect.device_numa_mismatch": ["npu:local:0000:81:00.0", "process:local:1895089"]}
    assert "- Scope: pid 1895089 and descendants (1 process)" in (out / "report.md").read_text()


@pytest.mark.slow
def test_verify_fix_script_sees_the_mismatch_resolved_and_not_the_other_way_round(vllm_sample_path, tmp_path):
    """AFTER: the sample with its workers no longer using the NPUs, so the mismatch must come out
    resolved; the same files in the other order must show it as new."""
    import witty_profiler as wp
    from witty_profiler.topology import Graph
    sample = wp.load(vllm_sample_path)
    after = Graph(sample.meta)
    for entity in sample.entities():
        after.add_entity(entity)
    for edge in sample.edges():
        if edge.type != "uses_device":
            after.add_edge(edge)
    wp.dump_graph(after, tmp_path / "after.json")
    done = _script("verify_fix.sh", str(vllm_sample_path), str(tmp_path / "after.json"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout == (tmp_path / "compare.md").read_text()  # the comparison is printed as written
    compared = json.loads((tmp_path / "compare.json").read_text())
    (resolved,) = [c for c in compared["resolved"] if c["pattern"] == "interconnect.device_numa_mismatch"]
    assert resolved["before"] == "P0" and resolved["after"] is None
    assert "interconnect.cross_numa_access" in [c["pattern"] for c in compared["persisting"]]
    assert compared["new"] == [] and compared["after_counts"]["P0"] == compared["before_counts"]["P0"] - 1
    assert re.search(r"## Resolved \(1\)\s+### `interconnect\.device_numa_mismatch`.*: P0 → -", done.stdout)
    swapped = _script("verify_fix.sh", str(tmp_path / "after.json"), str(vllm_sample_path), "--out",
                      str(tmp_path / "swapped"))
    assert swapped.returncode == 0, swapped.stderr
    back = json.loads((tmp_path / "swapped" / "compare.json").read_text())
    assert [c["pattern"] for c in back["new"]] == ["interconnect.device_numa_mismatch"] and not back["resolved"]


# -- evals --------------------------------------------------------------------------------------
def test_evals_file_has_at_least_eight_cases_with_value_level_assertions():
    assert len(CASES) >= 8
    assert len({c["id"] for c in CASES}) == len({c["name"] for c in CASES}) == len(CASES)
    runner = skill.load_eval_runner(SKILL)
    known = runner.ASSERTION_TYPES
    for case in CASES:
        assert case["prompt"] and case["expected_output"] and case["assertions"]
        assert {a["type"] for a in case["assertions"]} <= known
        assert sum(k in case["input"] for k in ("graph", "scenario", "traces")) == 1
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


def _assertion(case_name: str, **match) -> dict:
    case = next(c for c in CASES if c["name"] == case_name)
    (found,) = [a for a in case["assertions"] if all(a.get(k) == v for k, v in match.items())]
    return found


def _throttling(pid=4242, cgroup="cgroup:h:v1:/witty-eval-99", periods=100.0, quota=0.1, evidence=None):
    """control.cpu_throttling as the tool reports it (values of a real run: 100 % of periods, 0.1 core)."""
    items = [{"kind": "entity", "ids": [cgroup], "metric": "throttled_periods_pct", "value": periods,
              "threshold": "> 50", "unit": "%"},
             {"kind": "entity", "ids": [cgroup], "metric": "cpu_quota_cores", "value": quota, "unit": "cores"},
             {"kind": "edge", "ids": [f"in_cgroup|process:h:{pid}|{cgroup}"], "metric": "in_cgroup",
              "value": f"pid {pid} (python3)"}]
    return {"pattern": "control.cpu_throttling", "layer": 6, "priority": "P0", "severity": "critical",
            "subjects": [cgroup], "evidence": items if evidence is None else evidence}


def _saturation(ids=("host:h",), value=99.9):
    return {"pattern": "compute.cpu_saturation", "layer": 1, "priority": "P0", "severity": "critical",
            "subjects": list(ids), "evidence": [{"kind": "entity", "ids": list(ids), "metric": "cpu_util_pct",
                                                 "value": value, "threshold": "> 95", "unit": "%"}]}


@pytest.mark.parametrize("case_name, match, wrong", [
    ("live-cgroup-cpu-quota", {"type": "finding"}, _throttling(pid=5151)),
    ("live-cgroup-cpu-quota", {"type": "finding_evidence"}, _throttling(cgroup="cgroup:h:v1:/system.slice/x")),
    ("live-cgroup-cpu-quota", {"type": "finding_evidence"}, _throttling(pid=5151)),
    ("live-cgroup-cpu-quota", {"metric": "throttled_periods_pct"}, _throttling(periods=3.0)),
    ("live-cgroup-cpu-quota", {"metric": "throttled_periods_pct"}, _throttling(evidence=[])),
    ("live-cgroup-cpu-quota", {"metric": "cpu_quota_cores"}, _throttling(quota=1.0)),
    ("live-cgroup-cpu-quota", {"metric": "cpu_quota_cores"}, _throttling(quota="0.1 core")),
    ("live-cpu-oversubscribed", {"metric": "cpu_util_pct"}, _saturation(value=50.0)),
    ("live-cpu-oversubscribed", {"metric": "cpu_util_pct"}, _saturation(ids=("cpu:h:0",))),
    ("live-cpu-oversubscribed", {"metric": "cpu_util_pct"}, None),
], ids=["throttling-names-another-process", "throttling-another-cgroup", "throttling-cgroup-of-another-process",
        "barely-throttled", "throttling-without-evidence", "quota-of-a-whole-core", "quota-not-a-number",
        "host-cpu-at-half", "saturation-of-one-cpu-not-the-host", "no-saturation-finding"])
def test_each_value_check_fails_on_a_report_without_the_value(case_name, match, wrong):
    """The throttling (case 8) and saturation (case 6) checks pass on the tool's kind of report and
    fail on one that lacks the value they look for."""
    runner = skill.load_eval_runner(SKILL)
    ctx = {"roles": {"throttled": [4242], "busy": [4242]}, "host": "h", "layers": [], "catalog": {}}
    a = _assertion(case_name, **match)
    good = _report([_throttling() if case_name == "live-cgroup-cpu-quota" else _saturation()])
    assert runner.check(a, good, None, ctx)[0], runner.check(a, good, None, ctx)
    ok, detail = runner.check(a, _report([wrong] if wrong else []), None, ctx)
    assert not ok, detail


def test_the_summary_budget_check_fails_on_the_uncut_view(vllm_sample_path):
    """Case 5 asks for a budget the uncut summary does not fit, so the bound can fail; the views
    are the tool's own, on the real sample."""
    import witty_profiler as wp
    runner = skill.load_eval_runner(SKILL)
    case = next(c for c in CASES if c["name"] == "vllm-summary-view-fits-budget")
    graph = wp.load(vllm_sample_path)
    uncut = wp.convert(graph, layer="summary")
    cut = wp.convert(graph, layer="summary", max_tokens=case["run"]["view"]["max_tokens"])
    def results(view) -> dict[str, bool]:
        ctx = {"view": {"text": view.text, "tokens": view.tokens}}
        return {a["text"]: runner.check(a, None, None, ctx)[0] for a in case["assertions"]}

    bound = _assertion(case["name"], type="view_tokens_at_most")["text"]
    assert all(results(cut).values()), results(cut)  # the facts survive the cut
    assert not results(uncut)[bound], uncut.tokens
    # the uncut view cuts nothing, so it cannot say what it left out
    assert not results(uncut)[_assertion(case["name"], all=["left out"])["text"]]


# Cases the tool's own reports do not pass yet, and why. Strict: once the tool is fixed the case
# passes, the test reports XPASS as a failure, and the entry must go.
TOOL_GAPS: dict[str, str] = {}


def _eval_params() -> list:
    """A case whose input is a scenario starts its processes and collects from this host: live."""
    return [pytest.param(c, id=f"{c['id']}-{c['name']}", marks=[
        *([pytest.mark.xfail(strict=True, reason=TOOL_GAPS[c["name"]])] if c["name"] in TOOL_GAPS else []),
        *([pytest.mark.live] if "scenario" in c["input"] else [])]) for c in CASES]


@pytest.mark.parametrize("case", _eval_params())
def test_eval_runner_passes_on_the_tools_own_reports(case, vllm_sample_path, tmp_path):
    _needs("witty_profiler:diagnose", "witty_profiler:report", "witty_profiler:convert", "witty_profiler:collect",
           "witty_profiler.diagnosis.catalog:catalog")
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


def _contention(pid=4242, wakeups=300.0, threads=4, extra_subject=None):
    """control.lock_contention as the tool reports it (values of a real run)."""
    subjects = [f"thread:h:{pid}:{pid + i}" for i in range(1, threads + 1)] + ([extra_subject] if extra_subject else [])
    items = [{"kind": "entity", "ids": [s], "metric": "futex_wakeups_per_s", "value": wakeups, "threshold": ">= 25"}
             for s in subjects]
    items.append({"kind": "statistic", "ids": [f"process:h:{pid}"], "metric": "contended_threads", "value": threads})
    if extra_subject:
        items.append({"kind": "statistic", "ids": [extra_subject.rsplit(":", 1)[0].replace("thread", "process")],
                      "metric": "contended_threads", "value": 1})
    return {"pattern": "control.lock_contention", "layer": 6, "priority": "P0", "severity": "critical",
            "subjects": subjects, "evidence": items}


def test_the_lock_contention_checks_fail_on_reports_without_their_values():
    runner = skill.load_eval_runner(SKILL)
    ctx = {"roles": {"contended": [4242], "idle": [5151]}, "host": "h", "layers": [], "catalog": {}}
    case = next(c for c in CASES if c["name"] == "live-lock-contention")
    checks = {a["text"]: a for a in case["assertions"] if a["type"] in ("finding", "no_finding", "evidence_value")}

    def failing(report: dict) -> set[str]:
        return {text for text, a in checks.items() if not runner.check(a, report, None, ctx)[0]}

    assert failing(_report([_contention()])) == set()
    names, idle, woken, several = checks
    assert failing(_report([])) == {names, woken, several}
    assert failing(_report([_contention(pid=6161)])) == {names, several}  # another process
    assert failing(_report([_contention(extra_subject="thread:h:5151:5152")])) == {idle}  # the poller named
    assert failing(_report([_contention(wakeups=2.0)])) == {woken}  # woken rarely: idle, not contended
    assert failing(_report([_contention(threads=1)])) == {several}
