"""The diagnose / compare / patterns commands, the view tool, the generated references, TOML
threshold overrides and their errors, the report's structure."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from witty_profiler.cli import main
from witty_profiler.diagnosis import diagnose
from witty_profiler.diagnosis.catalog import catalog
from witty_profiler.diagnosis.compare import compare
from witty_profiler.diagnosis.docs import patterns_markdown, thresholds_markdown
from witty_profiler.diagnosis.report import report
from witty_profiler.diagnosis.thresholds import load_thresholds
from witty_profiler.tools import view
from witty_profiler.topology import dump_graph
from witty_profiler.topology.errors import InputError

from diagnosis_graphs import cgroup, host, new_graph, process

REFERENCES = Path(__file__).resolve().parents[1] / "skills" / "bottleneck-identification" / "references"


def _graph(throttled: float = 60.0, cpu: float = 50.0):
    g = new_graph(collectors={"process": "ok", "cgroup": "ok", "cpu": "ok"})
    host(g, cpu_util_pct=cpu, cpu_iowait_pct=1.0, psi_cpu_some_pct=1.0)
    process(g, 10, "train", cpu_util_pct=80.0)
    cgroup(g, "/train", members=(10,), throttled_periods_pct=throttled, throttled_ms_per_s=10.0, cpu_quota_cores=1.0)
    return g


@pytest.fixture()
def graph_file(tmp_path):
    path = tmp_path / "g.json"
    dump_graph(_graph(), path)
    return path


# -- generated references -------------------------------------------------------------------------
def test_patterns_md_is_current():
    assert (REFERENCES / "patterns.md").read_text() == patterns_markdown(), \
        "stale: witty-profiler patterns --markdown > skills/bottleneck-identification/references/patterns.md"


def test_thresholds_md_is_current():
    assert (REFERENCES / "thresholds.md").read_text() == thresholds_markdown(), \
        ("stale: witty-profiler patterns --thresholds-markdown > "
         "skills/bottleneck-identification/references/thresholds.md")


def test_references_cover_every_pattern_and_threshold():
    text, limits = patterns_markdown(), thresholds_markdown()
    for p in catalog().values():
        assert f"`{p.id}`" in text and f"`{p.id}`" in limits
        for t in p.thresholds:
            assert f"`{t.name}`" in limits


def test_patterns_command_prints_the_generated_markdown(capsys):
    assert main(["patterns", "--markdown"]) == 0
    assert capsys.readouterr().out == patterns_markdown()
    assert main(["patterns", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [p["id"] for p in data] == list(catalog())


# -- TOML overrides -------------------------------------------------------------------------------
def test_toml_override_changes_the_verdict(tmp_path):
    g = _graph(throttled=30.0)
    assert diagnose(g).finding("control.cpu_throttling").severity == "warning"
    f = tmp_path / "t.toml"
    f.write_text('["control.cpu_throttling"]\nthrottled_periods_pct = { critical = 25 }\n')
    assert diagnose(g, thresholds=f).finding("control.cpu_throttling").severity == "critical"
    f.write_text("[control.cpu_throttling]\nthrottled_periods_pct = { warning = 40, critical = 80, notice = 35 }\n")
    d = diagnose(g, thresholds=str(f))
    assert d.status("control.cpu_throttling") == "clear"
    assert d.summary["thresholds_overridden"] == ["control.cpu_throttling"]


def test_toml_parameter_override(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text("[dataplane.data_loading_bottleneck]\nproducer_busy_pct = 40\n")
    assert load_thresholds(f) == {"dataplane.data_loading_bottleneck": {"producer_busy_pct": 40.0}}


@pytest.mark.parametrize("text, message", [
    ('["compute.no_such"]\nx = 1\n', "unknown pattern id 'compute.no_such'"),
    ('["compute.cpu_saturation"]\nbusy = { warning = 1 }\n', "unknown threshold 'busy'"),
    ('["compute.cpu_saturation"]\ncpu_util_pct = { severe = 1 }\n', "unknown level"),
    ('["compute.cpu_saturation"]\ncpu_util_pct = { warning = "high" }\n', "expected a number"),
    ('["compute.cpu_saturation"]\ncpu_util_pct = { warning = true }\n', "expected a number"),
    ('["compute.cpu_saturation"]\ncpu_util_pct = 90\n', "expected a table of levels"),
    ('["compute.cpu_saturation"]\ncpu_util_pct = { warning = 99 }\n', "warning (99) must be <= critical (95)"),
    ('["compute.accelerator_idle"]\nutil_pct = { critical = 60 }\n', "warning (50) must be >= critical (60)"),
    ('["dataplane.data_loading_bottleneck"]\nproducer_busy_pct = "x"\n', "expected a number"),
    ("compute = 3\n", "unknown pattern id 'compute'"),
    ("[[broken\n", "not valid TOML"),
])
def test_toml_errors_are_one_clear_input_error(tmp_path, text, message):
    f = tmp_path / "t.toml"
    f.write_text(text)
    with pytest.raises(InputError, match=re.escape(message)):
        load_thresholds(f)


def test_bad_thresholds_file_exits_2_with_one_line(graph_file, tmp_path, capsys):
    f = tmp_path / "t.toml"
    f.write_text('["compute.nope"]\n')
    assert main(["diagnose", str(graph_file), "--thresholds", str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown pattern id 'compute.nope'" in err[0]
    assert main(["diagnose", str(graph_file), "--thresholds", str(tmp_path / "missing.toml")]) == 2
    assert "no such thresholds file" in capsys.readouterr().err


# -- diagnose command -----------------------------------------------------------------------------
def test_diagnose_json_to_file(graph_file, tmp_path):
    out = tmp_path / "r.json"
    assert main(["diagnose", str(graph_file), "--format", "json", "-o", str(out)]) == 0
    data = json.loads(out.read_text())
    assert set(data) == {"findings", "coverage", "summary"}
    f = data["findings"][0]
    assert {"pattern", "layer", "severity", "priority", "title", "evidence", "recommendations"} <= set(f)
    assert {"pattern", "status", "reason"} <= set(data["coverage"][0])
    assert f["pattern"] == "control.cpu_throttling" and f["priority"] == "P0"


def test_diagnose_layer_and_pid(graph_file, capsys):
    assert main(["diagnose", str(graph_file), "--layer", "control", "--pid", "10"]) == 0
    out = capsys.readouterr().out
    assert "## Layer 6: Control Plane" in out and "cpu_throttling" in out
    assert "Not part of this diagnosis" in out  # the other layers say so


@pytest.mark.parametrize("argv, message", [
    (["diagnose", "{g}", "--layer", "gpu"], "unknown layer 'gpu'"),
    (["diagnose", "{g}", "--pid", "777"], "pid 777 is not in this graph"),
    (["diagnose", "/no/such/graph.json"], "no such file"),
    (["diagnose", "{g}", "--format", "xml"], "invalid choice"),
    (["compare", "{g}", "/no/such/after.json"], "no such file"),
])
def test_bad_input_exits_2_with_one_line(graph_file, capsys, argv, message):
    argv = [a.replace("{g}", str(graph_file)) for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_diagnose_rejects_a_bad_window_before_collecting(capsys):
    assert main(["diagnose", "--duration", "-1"]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.slow
def test_diagnose_is_a_console_command(graph_file):
    result = subprocess.run([sys.executable, "-m", "witty_profiler", "diagnose", str(graph_file), "--format", "json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["summary"]["counts"]["P0"] == 1


# -- report structure -----------------------------------------------------------------------------
def test_markdown_report_sections_in_order(graph_file):
    g = _graph()
    md = report(diagnose(g), g)
    heads = [line for line in md.splitlines() if line.startswith("## ")]
    assert heads == ["## Executive summary", "## Layer 1: Compute", "## Layer 2: Memory", "## Layer 3: Interconnect",
                     "## Layer 4: Network", "## Layer 5: Storage", "## Layer 6: Control Plane",
                     "## Layer 7: Data Plane", "## Recommendations by priority", "## Roadmap",
                     "## Appendix: collectors"]
    assert "**P0: 1 · P1: 0 · P2: 0**" in md
    assert "1. P0 control.cpu_throttling:" in md  # the top finding in one sentence
    assert "### P0 (critical) · CPU quota throttling — `control.cpu_throttling`" in md
    assert "| entity | `cgroup:h1:v1:/train` | throttled_periods_pct | 60.0 % | > 50 |" in md
    assert "### Immediate (P0" in md and "### Short term (P1" in md and "### Longer term (P2" in md
    assert "not evaluated: " in md and "clear: " in md
    assert "| cgroup | ok |" in md


def test_quiet_graph_report_says_no_bottleneck():
    g = _graph(throttled=0.0)
    d = diagnose(g)
    assert d.findings == []
    assert "No bottleneck found" in report(d, g)


def test_report_rejects_unknown_format():
    with pytest.raises(InputError):
        report(diagnose(_graph()), None, "html")


# -- compare --------------------------------------------------------------------------------------
def test_compare_resolved_new_persisting_with_deltas(tmp_path, capsys):
    before, after = _graph(throttled=60.0, cpu=50.0), _graph(throttled=2.0, cpu=97.0)
    c = compare(before, after)
    assert [x.pattern for x in c.resolved] == ["control.cpu_throttling"]
    assert [x.pattern for x in c.new] == ["compute.cpu_saturation"]
    assert c.persisting == []
    delta = next(d for d in c.resolved[0].deltas if d.metric == "throttled_periods_pct")
    assert (delta.before, delta.after, delta.delta) == (60.0, 2.0, -58.0)
    same = compare(before, before)
    assert [x.pattern for x in same.persisting] == ["control.cpu_throttling"]
    assert all(d.delta == 0 for d in same.persisting[0].deltas)
    # the command
    b, a = tmp_path / "b.json", tmp_path / "a.json"
    dump_graph(before, b)
    dump_graph(after, a)
    assert main(["compare", str(b), str(a), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["resolved"][0]["pattern"] == "control.cpu_throttling"
    assert data["before_counts"] == {"P0": 1, "P1": 0, "P2": 0}
    assert main(["compare", str(b), str(a)]) == 0
    md = capsys.readouterr().out
    assert "## Resolved (1)" in md and "| throttled_periods_pct | 60 % | 2 % | -58 |" in md


# -- python -m witty_profiler.tools.view ----------------------------------------------------------
def test_view_analyze_writes_the_report(graph_file, tmp_path):
    out = tmp_path / "report.md"
    assert view.main([str(graph_file), "--analyze", "--output", str(out)]) == 0
    assert out.read_text() == report(diagnose(_graph()), None)


def test_view_layer_detail_shows_evidence_and_coverage(graph_file, capsys):
    assert view.main([str(graph_file), "--layer", "control", "--detail"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("## Layer 6: Control Plane")
    assert "### Coverage" in out and "| `control.lock_contention` | not_evaluated |" in out
    assert "throttled_periods_pct" in out


@pytest.mark.slow
def test_view_errors_are_one_line(graph_file, capsys):
    assert view.main([str(graph_file), "--detail"]) == 2
    assert "--detail needs --layer" in capsys.readouterr().err
    result = subprocess.run([sys.executable, "-m", "witty_profiler.tools.view", str(graph_file), "--layer", "gpu"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_view_without_a_graph_reads_the_collect_default_file(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    dump_graph(_graph(), tmp_path / "witty-graph.json")
    assert view.main(["--analyze"]) == 0
    assert capsys.readouterr().out == report(diagnose(_graph()), None)


def test_compare_says_which_subjects_of_a_persisting_finding_moved():
    from diagnosis_graphs import ipc, new_graph, process

    def pipeline(waiting: set[int]):
        g = new_graph()
        for consumer, producer in ((10, 20), (30, 40)):
            process(g, consumer, "train", cpu_util_pct=3.0 if consumer in waiting else 90.0,
                    runqueue_wait_pct=1.0, voluntary_ctxt_switches_per_s=40.0)
            process(g, producer, "reader", ai=False, role=None, cpu_util_pct=99.0)
            ipc(g, "pipe", producer, consumer, bytes_per_s=4096.0)
        return g

    c = compare(pipeline({10}), pipeline({30}))
    change = next(x for x in c.persisting if x.pattern == "dataplane.data_loading_bottleneck")
    assert (change.subjects_resolved, change.subjects_new, change.subjects_persisting) == (
        ["process:h1:10"], ["process:h1:30"], [])
    assert "Subjects: resolved 1: process:h1:10 · new 1: process:h1:30 · persisting 0" in c.markdown()
    same = next(x for x in compare(pipeline({10}), pipeline({10})).persisting
                if x.pattern == "dataplane.data_loading_bottleneck")
    assert same.subjects_persisting == ["process:h1:10"] and not same.subjects_resolved and not same.subjects_new
