"""Secrets never stored; AI processes and their roles recognised from what a process shows."""

from __future__ import annotations

import pytest

from witty_profiler.topology.privacy import filter_env, redact_cmdline
from witty_profiler.topology.workload import classify_process


@pytest.mark.parametrize("cmdline, expected", [
    ("python train.py --password=hunter2 --lr 0.1", "python train.py --password=<redacted> --lr 0.1"),
    ("python train.py --api-key abc123 --epochs 3", "python train.py --api-key <redacted> --epochs 3"),
    ("git clone https://bob:pa55w0rd@example.org/repo", "git clone https://bob:<redacted>@example.org/repo"),
    ("pip install git+https://ghp_0123abc@github.com/org/repo", "pip install git+https://<redacted>@github.com/org/repo"),
    ("worker token=tok-9f8e secret=s3cr3t", "worker token=<redacted> secret=<redacted>"),
    ("AWS_SECRET_ACCESS_KEY=AKIAXYZ python upload.py", "AWS_SECRET_ACCESS_KEY=<redacted> python upload.py"),
    ("python run.py --hf_token ghp_abcdef", "python run.py --hf_token <redacted>"),
    ("curl -H Authorization: Bearer eyJhbGciOi", "curl -H Authorization: Bearer <redacted>"),
])
def test_redaction_removes_the_secret_and_keeps_the_rest(cmdline, expected):
    assert redact_cmdline(cmdline) == expected


def test_redaction_leaves_performance_arguments_alone():
    cmd = "vllm serve /m --tensor-parallel-size 4 --max-num-batched-tokens 8192 --max_model_len 32768"
    assert redact_cmdline(cmd) == cmd


def test_environment_allowlist():
    env = {"RANK": "3", "WORLD_SIZE": "8", "NCCL_DEBUG": "INFO", "HCCL_CONNECT_TIMEOUT": "600",
           "NCCL_IB_AUTH_TOKEN": "x", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "k", "PATH": "/bin"}
    assert filter_env(env) == {"HCCL_CONNECT_TIMEOUT": "600", "NCCL_DEBUG": "INFO", "RANK": "3", "WORLD_SIZE": "8"}


def test_roles():
    server = classify_process("vllm", "/usr/bin/python3 /usr/bin/vllm serve /m --tensor-parallel-size 4")
    assert server == {"ai": True, "framework": "vllm", "role": "inference"}
    worker = classify_process("python3", "python3 -c from multiprocessing.spawn import spawn_main --multiprocessing-fork",
                              parent=server)
    assert worker["ai"] and worker["role"] == "inference"
    trainer = classify_process("python", "python train.py", libraries=["/usr/lib/libtorch_cpu.so"],
                               env={"RANK": "1", "WORLD_SIZE": "8"})
    assert trainer == {"ai": True, "framework": "pytorch", "role": "trainer", "rank": 1, "world_size": 8}
    assert classify_process("pt_data_worker", "python train.py", parent=trainer)["role"] == "loader"
    assert classify_process("bash", "bash") == {"ai": False, "framework": None, "role": None}
    client = classify_process("vllm", "python3 /usr/bin/vllm bench serve --request-rate 4 --port 8001")
    assert client["role"] == "load_generator" and client["ai"] is False


def test_thread_roles_from_the_names_pytorch_gives():
    from witty_profiler.topology.workload import thread_role
    assert thread_role("pt_data_pin", True) == "loader"
    assert thread_role("pt_autograd_0", True) == "compute" and thread_role("pt_main_thread", True) == "compute"
    assert thread_role("pt_elastic", True) == "launcher"
    assert thread_role("python3", True) is None
    assert thread_role("pt_data_pin", False) is None  # only threads of an AI process have a role
    # autograd threads compute the backward pass: not a loader even in a loader-looking process
    assert classify_process("pt_autograd_0", "python train.py", parent={"ai": True, "role": "trainer"})["role"] != "loader"


def test_a_stored_command_line_is_redacted_then_bounded():
    from witty_profiler.collectors.process import CMDLINE_MAX_CHARS, stored_cmdline
    short = "python train.py --token=abc --lr 0.1"
    assert stored_cmdline(short) == "python train.py --token=<redacted> --lr 0.1"
    exact = "x" * CMDLINE_MAX_CHARS
    assert stored_cmdline(exact) == exact
    # a secret that straddles the cut is redacted before the cut, so no part of it is kept
    long = "a" * (CMDLINE_MAX_CHARS - 20) + " --password=" + "s" * 50 + " --lr 0.1"
    kept = stored_cmdline(long)
    redacted = "a" * (CMDLINE_MAX_CHARS - 20) + " --password=<redacted> --lr 0.1"
    assert kept == f"{redacted[:CMDLINE_MAX_CHARS]}… [{len(redacted) - CMDLINE_MAX_CHARS} more characters]"
    assert "s" * 5 not in kept
