"""Finding the whole job from any PID: real torchrun and mp.spawn jobs (gloo, CPU).

The ranks and the launcher are read from ``/proc`` only; each job here is started
for real and aitop is pointed at its launcher and at a rank.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from aitop.engine.live import job_notice
from aitop.probes.ranks import Job, find_job, rank_from_env
from demo_jobs import run_aitop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(find: Callable[[], Job], ranks: int, timeout: float = 90.0) -> Job:
    deadline = time.monotonic() + timeout
    job = find()
    while time.monotonic() < deadline:
        job = find()
        if len(job.ranks) == ranks:
            return job
        time.sleep(0.3)
    raise AssertionError(f"expected {ranks} ranks, found {job}")


@contextmanager
def started(command: list[str], env: dict[str, str] | None = None,
            ) -> Iterator[subprocess.Popen[bytes]]:
    job = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        yield job
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait()


def torchrun(port: int) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            f"--master_port={port}", "-m", "aitop.demo.ddp", "--duration", "90"]


def test_rank_variables_from_the_environment() -> None:
    rank = rank_from_env(7, {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
                             "GROUP_RANK": "1", "TORCHELASTIC_RUN_ID": "abc"})
    assert rank is not None
    assert (rank.rank, rank.local_rank, rank.world_size, rank.group_rank, rank.run_id) == (
        3, 1, 8, 1, "abc")
    assert rank_from_env(7, {"WORLD_SIZE": "8"}) is None
    odd = rank_from_env(7, {"LOCAL_RANK": "x"})
    assert odd is not None and odd.local_rank is None


@pytest.mark.attach
def test_torchrun_job_is_found_from_the_launcher_and_from_a_rank() -> None:
    with started(torchrun(free_port())) as launcher:
        job = wait_for(lambda: find_job(launcher.pid), 2)
        assert job.kind == "env" and job.launcher_pid == launcher.pid
        assert [r.rank for r in job.ranks] == [0, 1]
        assert [r.local_rank for r in job.ranks] == [0, 1]
        assert {r.world_size for r in job.ranks} == {2}
        assert len({r.run_id for r in job.ranks}) == 1
        # Pointed at the launcher, aitop watches rank 0.
        assert job.training_pid() == job.ranks[0].pid != launcher.pid
        assert "the launcher of a 2-rank job" in job.describe()
        # From rank 1: the same job, and rank 1 is the one watched.
        other = find_job(job.ranks[1].pid)
        assert other.kind == "env" and other.launcher_pid == launcher.pid
        assert [r.pid for r in other.ranks] == [r.pid for r in job.ranks]
        assert other.training_pid() == job.ranks[1].pid
        assert "rank 1 of a 2-rank job" in other.describe()


@pytest.mark.attach
def test_mp_spawn_job_is_found_from_its_parent() -> None:
    port = free_port()
    with started([sys.executable, "-m", "aitop.demo.ddp", "--spawn", "2", "--port", str(port),
                  "--duration", "90"]) as parent:
        job = wait_for(lambda: find_job(parent.pid), 2)
        assert job.kind == "spawn" and job.launcher_pid == parent.pid
        assert all(r.rank is None for r in job.ranks), "mp.spawn ranks carry no variables"
        assert job.training_pid() == job.ranks[0].pid
        notice = job_notice(job)
        assert notice is not None and "watching the first-started rank" in notice


def test_a_parent_whose_children_lack_local_rank_0_is_rank_0(tmp_path: Path) -> None:
    """Lightning's shape: rank 0 is the user's process and starts ranks 1..N-1."""
    child = ("import os, subprocess, sys, time\n"
             "env = dict(os.environ, LOCAL_RANK='1', WORLD_SIZE='2', NODE_RANK='0')\n"
             "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], env=env)\n"
             "time.sleep(60)\n")
    with started([sys.executable, "-c", child]) as rank0:
        job = wait_for(lambda: find_job(rank0.pid), 2, timeout=30)
        assert job.kind == "lightning" and job.launcher_pid is None
        assert job.ranks[0].pid == rank0.pid and job.ranks[0].local_rank == 0
        assert job.training_pid() == rank0.pid
        from_child = find_job(job.ranks[1].pid)
        assert from_child.kind == "lightning"
        assert [r.pid for r in from_child.ranks] == [r.pid for r in job.ranks]


def test_a_single_process_is_a_single_process_job() -> None:
    with started([sys.executable, "-c", "import time; time.sleep(60)"]) as proc:
        time.sleep(0.3)
        job = find_job(proc.pid)
        assert job.kind == "single" and job.ranks == () and job.training_pid() == proc.pid


@pytest.mark.attach
def test_aitop_pointed_at_torchrun_watches_rank_0_and_lists_the_ranks() -> None:
    with started(torchrun(free_port())) as launcher:
        job = wait_for(lambda: find_job(launcher.pid), 2)
        time.sleep(4)  # past the ranks' start-up (imports, init_process_group)
        result = run_aitop("--pid", str(launcher.pid), "--headless", "--json",
                           "--duration", "12")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["target"]["pid"] == job.ranks[0].pid
    assert report["job"]["kind"] == "env"
    assert report["job"]["launcher_pid"] == launcher.pid
    assert [r["rank"] for r in report["job"]["ranks"]] == [0, 1]
    assert any("watching rank 0" in w for w in report["warnings"]), report["warnings"]
    assert "watching rank 0" in result.stderr
    # Rank 0 trains: its stacks show the training thread's phases.
    assert report["phases"] is not None
    # Its other core is rank 1's and gloo's thread is not compute: no thread advice.
    assert report["metrics"]["local_ranks"] == 2
    ids = {f["id"] for f in report["findings"]}
    assert not ids & {"cpu_compute_underthreaded", "cpu_threads_oversubscribed",
                      "cpu_compute_contended"}, ids
    # In "backward" most of the time, computing far less: it waits for rank 1.
    m = report["metrics"]
    print(f"compute {m['phase_compute']}, training thread {m['training_thread_cpu']}% "
          f"of a core, free cores {m['free_cores']}; lead {report['bottleneck']}")
    if m["free_cores"] >= 0.4 and m["training_thread_cpu"] < 60:
        assert "ranks_wait_for_each_other" in ids, ids
