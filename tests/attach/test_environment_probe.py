"""EnvironmentProbe against a real torch trainer and a plain Python child."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from collections.abc import Iterator
from importlib import metadata

import psutil
import pytest
from aitop.probes.environment import EnvironmentProbe
from aitop.probes.samples import EnvironmentInfo
from support.workloads.probe_children import run_unprivileged, start, stop, workload

SECRETS = {
    "API_KEY": "sekrit-api-key-123",
    "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz0123",
    "DATABASE_URL": "postgres://trainer:pa55w0rd@db.internal/runs",
}
PLAIN = {
    "NCCL_DEBUG": "INFO",
    "OMP_NUM_THREADS": "1",
    "CUDA_VISIBLE_DEVICES": "",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "WORLD_SIZE": "1",
    "RANK": "0",
    "LOCAL_RANK": "0",
    "TOKENIZERS_PARALLELISM": "false",
}


@pytest.fixture(scope="module")
def trainer() -> Iterator[subprocess.Popen[bytes]]:
    """A real fork-DataLoader trainer (2 workers) with secrets in argv and env."""
    env = dict(os.environ, **SECRETS, **PLAIN)
    proc = start([workload("probe_loader.py"), "--ctx", "fork", "--pin", "--token=s3cret"], env=env)
    yield proc
    stop(proc)


@pytest.fixture()
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A plain Python child that never imports torch."""
    proc = start(["-c", "print('READY', flush=True); import time; time.sleep(60)"])
    yield proc
    stop(proc)


def test_versions_of_a_torch_trainer(trainer: subprocess.Popen[bytes]) -> None:
    info = EnvironmentProbe(trainer.pid).sample()
    assert info.pid == trainer.pid
    # the child runs this very interpreter, so the full version must match
    assert info.python_version == platform.python_version()
    assert info.torch_version == metadata.version("torch")
    assert info.aitop_version == metadata.version("torch-aitop")
    assert info.hostname == socket.gethostname()
    assert info.start_time == pytest.approx(psutil.Process(trainer.pid).create_time(), abs=0.01)


def test_workers_and_pin_thread(trainer: subprocess.Popen[bytes]) -> None:
    info = EnvironmentProbe(trainer.pid).sample()
    assert info.num_workers == 2
    # pin_memory=True without an accelerator: torch starts no pin thread
    assert info.pin_memory_thread is False


def test_environment_is_complete_and_redacted(trainer: subprocess.Popen[bytes]) -> None:
    info = EnvironmentProbe(trainer.pid).sample()
    for name, value in PLAIN.items():
        assert info.env[name] == value
    assert info.env["API_KEY"] == "***"
    assert info.env["HF_TOKEN"] == "***"
    assert info.env["DATABASE_URL"] == "postgres://***@db.internal/runs"
    # "generally all" variables are there, not only the interesting ones
    assert info.env.get("PATH") == os.environ.get("PATH")
    assert "--token=***" in info.cmdline
    text = repr(info)
    for secret in (*SECRETS.values(), "s3cret", "pa55w0rd"):
        assert secret not in text


def test_plain_python_child_has_no_torch(sleeper: subprocess.Popen[bytes]) -> None:
    info = EnvironmentProbe(sleeper.pid).sample()
    assert info.torch_version is None
    assert info.python_version == platform.python_version()
    assert info.num_workers == 0
    assert info.pin_memory_thread is False
    assert info.cmdline[0] == sys.executable


def test_python_version_without_running_the_binary(sleeper: subprocess.Popen[bytes]) -> None:
    """With execution disabled, X.Y still comes from the mapped libraries / exe name."""
    info = EnvironmentProbe(sleeper.pid, run_exe_version=False).sample()
    assert info.python_version == "{}.{}".format(*sys.version_info[:2])


def test_exited_target_gives_blank_fields(sleeper: subprocess.Popen[bytes]) -> None:
    probe = EnvironmentProbe(sleeper.pid)
    assert probe.sample().python_version is not None
    stop(sleeper)
    info = probe.sample()  # must not raise
    assert info.num_workers is None and info.pin_memory_thread is None


def test_missing_pid_never_raises() -> None:
    with open("/proc/sys/kernel/pid_max") as fh:
        beyond = int(fh.read()) + 1
    info = EnvironmentProbe(beyond).sample()
    assert info.pid == beyond
    assert info.python_version is None and info.torch_version is None
    assert info.env == {} and info.cmdline == ()
    assert info.num_workers is None and info.start_time is None


def test_dead_unreaped_worker_is_not_counted() -> None:
    proc = start([workload("probe_dead_worker.py")])
    try:
        assert EnvironmentProbe(proc.pid).sample().num_workers == 0
    finally:
        stop(proc)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_access_denied_blanks_private_fields(sleeper: subprocess.Popen[bytes]) -> None:
    """environ, maps and exe need ptrace rights; cmdline and the tree do not."""

    # Built here, sampled as "nobody": the constructor's package-metadata lookup
    # imports stdlib modules that the unprivileged child could not read.
    probe = EnvironmentProbe(sleeper.pid)

    def watch() -> EnvironmentInfo:
        return probe.sample()

    info = run_unprivileged(watch)
    assert isinstance(info, EnvironmentInfo)
    assert info.env == {}
    assert info.torch_version is None and info.python_version is None
    assert info.cmdline and info.cmdline[0] == sys.executable
    assert info.num_workers == 0
    assert info.start_time is not None
