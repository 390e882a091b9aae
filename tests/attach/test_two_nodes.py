"""A real 2-node torchrun job on one machine: two launchers, ``--nnodes=2``, one rank
each, a c10d rendezvous on loopback; the rank on one "node" is starved for data.

aitop pointed at the other node's launcher sees one rank there, yet knows the job
has two: the rank's wait for the other node inside backward() is communication,
not CPU compute that more threads would speed up.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil
import pytest
from aitop.probes.job_identity import read_environ
from support.jobs import run_aitop
from support.processes import free_port, started, wait_until

pytestmark = pytest.mark.attach

#: The starved rank builds each batch with this much CPU in its training thread.
SLOW_MS = "40"
THREAD_ADVICE = {"cpu_compute_underthreaded", "cpu_threads_oversubscribed",
                 "cpu_compute_contended", "cpu_compute_bound"}


def launcher(port: int, run_id: str, truth: Path) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
            "-m", "aitop.demo.ddp", "--duration", "120", "--slow-rank", "1",
            "--slow-ms", SLOW_MS, "--truth", str(truth)]


def rank_of(launcher_pid: int) -> tuple[int, int] | None:
    """(global rank, its PID) of the launcher's one rank, once it has started."""
    for child in psutil.Process(launcher_pid).children():
        rank = read_environ(child.pid).get("RANK")
        if rank is not None:
            return int(rank), child.pid
    return None


def test_a_rank_waiting_for_another_node_is_communication_not_compute(tmp_path: Path) -> None:
    port = free_port()
    run_id = f"two-nodes-{port}"
    with started(launcher(port, run_id, tmp_path / "a")) as node_a, \
            started(launcher(port, run_id, tmp_path / "b")) as node_b:
        assert wait_until(lambda: rank_of(node_a.pid) and rank_of(node_b.pid), timeout=60)
        ranks = {rank_of(node.pid): node.pid for node in (node_a, node_b)}
        waiting = next(pid for (rank, _), pid in ranks.items() if rank == 0)
        time.sleep(5)  # init_process_group and the first steps
        result = run_aitop("--pid", str(waiting), "--headless", "--json", "--duration", "20",
                           timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    metrics = report["metrics"]
    ids = [f["id"] for f in report["findings"]]
    print(f"{result.stderr.strip()}; bottleneck {report['bottleneck']['summary']}; "
          f"comm_share {metrics.get('comm_share')}; findings {ids}")
    # It knows the job is larger than this machine...
    assert (metrics["local_ranks"], metrics["job_ranks"]) == (1, 2), metrics
    assert "of a 2-rank job" in result.stderr and "1 on other machines" in result.stderr
    assert "single-process" not in result.stderr
    # ... so its wait for the other node is communication, and no thread advice is given.
    assert report["bottleneck"]["category"] == "communication", report["bottleneck"]
    assert metrics["comm_share"] is not None and metrics["comm_share"] >= 0.5, metrics
    assert not THREAD_ADVICE & set(ids), ids
