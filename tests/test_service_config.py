"""The service's settings: defaults < config file (TOML or JSON) < command line; bad keys and values are
one line, exit 2, naming the key; --dump-config prints what the service would use, and reads back."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from witty_profiler.cli import main, seed_form
from witty_profiler.service import config as cfg
from witty_profiler.topology.errors import InputError

REPO = Path(__file__).resolve().parents[1]


def test_the_seed_forms_map_to_subcommands():
    assert seed_form([]) == ["serve"]
    assert seed_form(["--config", "configs/production.json"]) == ["serve", "--config", "configs/production.json"]
    assert seed_form(["--offline", "--duration", "30"]) == ["collect", "--offline", "--duration", "30"]
    assert seed_form(["collect", "--duration", "1"]) == ["collect", "--duration", "1"]
    assert seed_form(["--help"]) == ["--help"]


def test_the_example_production_config_loads():
    config = cfg.load(str(REPO / "configs" / "production.json"), {})
    assert config.server.listen == "127.0.0.1:18090"
    assert config.storage.state_dir == "/var/lib/witty-profiler"
    assert config.collection.collectors == ["-ebpf"]


def test_toml_and_json_give_the_same_settings(tmp_path):
    toml = tmp_path / "s.toml"
    toml.write_text('[collection]\nwindow_s = 20\ninterval_s = 5\npids = [1]\n[storage]\nring_windows = 7\n'
                    '[diagnosis.thresholds."compute.cpu_saturation"]\n')
    as_json = tmp_path / "s.json"
    as_json.write_text(json.dumps({"collection": {"window_s": 20, "interval_s": 5, "pids": [1]},
                                   "storage": {"ring_windows": 7},
                                   "diagnosis": {"thresholds": {"compute.cpu_saturation": {}}}}))
    a, b = cfg.load(str(toml), {}), cfg.load(str(as_json), {})
    assert a == b
    assert (a.collection.window_s, a.collection.interval_s, a.storage.ring_windows) == (20, 5, 7)


def test_the_command_line_wins_over_the_file_which_wins_over_the_defaults(tmp_path):
    f = tmp_path / "s.json"
    f.write_text(json.dumps({"collection": {"window_s": 30, "interval_s": 3}, "storage": {"ring_windows": 5}}))
    config = cfg.load(str(f), {"collection": {"window_s": 40, "interval_s": None}, "storage": {}})
    assert config.collection.window_s == 40  # command line
    assert config.collection.interval_s == 3  # file
    assert config.storage.kept_windows == cfg.Storage().kept_windows  # default


@pytest.mark.parametrize("text, key", [
    ('{"collection": {"window_z": 3}}', "collection.window_z"),
    ('{"colection": {}}', "colection"),
    ('{"collection": {"window_s": -1}}', "collection.window_s"),
    ('{"collection": {"window_s": 5, "interval_s": 10}}', "collection.interval_s"),
    ('{"collection": {"pids": ["1"]}}', "collection.pids"),
    ('{"storage": {"ring_windows": 0}}', "storage.ring_windows"),
    ('{"storage": {"ring_max_mb": true}}', "storage.ring_max_mb"),
    ('{"server": {"listen": "localhost"}}', "server.listen"),
    ('{"server": {"max_connections": 0}}', "server.max_connections"),
    ('{"server": {"max_connections": 1.5}}', "server.max_connections"),
    ('{"server": {"header_timeout_s": 0}}', "server.header_timeout_s"),
    ('{"server": {"body_timeout_s": 1e9}}', "server.body_timeout_s"),
    ('{"server": {"max_body_mb": "1"}}', "server.max_body_mb"),
    ('{"diagnosis": {"trigger_priority": "P3"}}', "diagnosis.trigger_priority"),
    ('{"diagnosis": {"trigger_patterns": ["compute.nope"]}}', "diagnosis.trigger_patterns"),
    ('{"diagnosis": {"thresholds": {"compute.nope": {}}}}', "compute.nope"),
    ('{"collection": ', "not valid JSON"),
])
def test_a_bad_setting_is_one_line_naming_the_key_exit_2(tmp_path, capsys, text, key):
    f = tmp_path / "bad.json"
    f.write_text(text)
    assert main(["serve", "--config", str(f)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and key in err and "Traceback" not in err


def test_a_bad_value_on_the_command_line_is_refused_too(capsys):
    assert main(["--window", "5", "--interval", "10", "--dump-config"]) == 2
    assert "collection.interval_s" in capsys.readouterr().err


def test_a_missing_config_file_is_one_line(tmp_path, capsys):
    assert main(["--config", str(tmp_path / "none.toml")]) == 2
    assert capsys.readouterr().err == f"witty-profiler: error: --config {tmp_path / 'none.toml'}: no such file\n"
    assert main(["--config", "/dev/zero"]) == 2  # a device never ends: refused before it is read
    assert capsys.readouterr().err == ("witty-profiler: error: --config /dev/zero: is a character device, not a "
                                       "file; give the path of a config file\n")


def test_file_names_in_a_config_file_are_relative_to_its_folder(tmp_path, monkeypatch):
    site = tmp_path / "etc"
    site.mkdir()
    conf = site / "witty.toml"
    conf.write_text('[diagnosis]\nthresholds = "thresholds.toml"\n[server]\ntoken_file = "token"\n'
                    '[storage]\nstate_dir = "../state"\n')
    monkeypatch.chdir(tmp_path)  # elsewhere than the file's folder
    c = cfg.load(str(conf.relative_to(tmp_path)), {})
    assert c.diagnosis.thresholds == str(site / "thresholds.toml")
    assert c.server.token_file == str(site / "token")
    assert c.storage.state_dir == str(site / "../state") and c.state_path().resolve() == tmp_path / "state"
    # the command line's names stay relative to the working directory
    c = cfg.load(str(conf), {"storage": {"state_dir": "here"}})
    assert c.storage.state_dir == "here"
    absolute = tmp_path / "abs.toml"
    absolute.write_text(f'[storage]\nstate_dir = "{tmp_path / "s"}"\n')
    assert cfg.load(str(absolute), {}).storage.state_dir == str(tmp_path / "s")


def test_dump_config_prints_the_settings_in_force_and_reads_back(tmp_path, capsys):
    f = tmp_path / "s.toml"
    f.write_text('[server]\nlisten = "127.0.0.1:18123"\n')
    assert main(["--config", str(f), "--ring-windows", "9", "--dump-config"]) == 0
    dumped = json.loads(capsys.readouterr().out)
    assert dumped["server"]["listen"] == "127.0.0.1:18123" and dumped["storage"]["ring_windows"] == 9
    assert cfg.from_mapping(dumped) == cfg.load(str(f), {"storage": {"ring_windows": 9}})


def test_the_token_comes_from_its_file_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(cfg.TOKEN_ENV, raising=False)
    config = cfg.ServiceConfig()
    assert cfg.read_token(config) is None
    monkeypatch.setenv(cfg.TOKEN_ENV, "from-the-environment-123")
    assert cfg.read_token(config) == "from-the-environment-123"
    token = tmp_path / "token"
    token.write_text("from-the-file-0123456789\n")
    config.server.token_file = str(token)
    assert cfg.read_token(config) == "from-the-file-0123456789"
    token.write_text("")
    with pytest.raises(InputError, match="is empty"):
        cfg.read_token(config)


@pytest.mark.live
@pytest.mark.slow
def test_offline_duration_collects_one_window_like_collect(tmp_path):
    out = tmp_path / "g.json"
    done = subprocess.run([sys.executable, "-m", "witty_profiler", "--offline", "--duration", "1", "-o", str(out), "-q"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    graph = json.loads(out.read_text())
    assert graph["format"] == "witty-graph" and 1.0 <= graph["meta"]["duration_s"] < 1.5  # the window as measured
    assert graph["meta"]["collectors"]["process"]["status"] in ("ok", "partial")


@pytest.mark.live
def test_offline_takes_what_the_command_line_leaves_out_from_the_config_file(tmp_path, capsys):
    """`witty-profiler --offline --config FILE` collects one window as the service would: the file's
    [collection] settings, the command line's where both say something."""
    conf = tmp_path / "site.toml"
    conf.write_text('[collection]\nwindow_s = 1.5\ninterval_s = 0.5\ncollectors = ["process", "cpu"]\n')
    out = tmp_path / "g.json"
    assert main(["--offline", "--config", str(conf), "-o", str(out), "-q"]) == 0
    meta = json.loads(out.read_text())["meta"]
    # duration_s is the window as measured, never shorter than asked and a little longer on a busy host
    assert 1.5 <= meta["duration_s"] < 2.0 and meta["interval_s"] == 0.5
    assert sorted(meta["collectors"]) == ["cpu", "process"]
    assert main(["--offline", "--config", str(conf), "--duration", "1", "--collectors", "cpu",
                 "-o", str(out), "--force", "-q"]) == 0
    meta = json.loads(out.read_text())["meta"]
    assert 1.0 <= meta["duration_s"] < 1.5 and meta["interval_s"] == 0.5 and list(meta["collectors"]) == ["cpu"]
    conf.write_text('[collection]\nwindow_s = "x"\n')
    capsys.readouterr()
    assert main(["--offline", "--config", str(conf), "-o", str(out), "--force"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"witty-profiler: error: --config {conf}: collection.window_s: expected a number of seconds above 0, got 'x'"
    assert main(["collect", "--config", str(conf), "--prometheus", "http://127.0.0.1:1", "--start=-1h"]) == 2
    assert "--config sets a live window" in capsys.readouterr().err
