"""A loop that builds its batches with its own ``get_batch()`` (nanoGPT's train.py,
pytorch/examples' word_language_model): no DataLoader, a loop at module level.

aitop must read the time beneath ``X, Y = get_batch("train")`` as the loop's
wait for data (not as Python overhead "outside data loading"), measure it as
the job's own timer does, lead with loading in worker processes, and its
prediction must come true when get_batch runs in one DataLoader worker
(``--workers 1``), by the job's own count of its steps.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from support.jobs import headless_report, read_truth, start_workload, stop_job, truth_between
from support.sampling import share_tolerance
from support.speedups import RatePair, assert_comes_true

# Its prediction rests on a free core, and is timed against the job's own count.
pytestmark = [pytest.mark.attach, pytest.mark.alone]

GET_BATCH_LOOP = Path(__file__).resolve().parents[1] / "support" / "workloads" / "get_batch_loop.py"
WATCH_S = 14


def start(truth: Path, workers: int) -> subprocess.Popen[bytes]:
    """The job (with get_batch in ``workers`` worker processes), once it steps."""
    return start_workload(GET_BATCH_LOOP, truth, "--workers", str(workers))


def watch(truth: Path) -> dict:
    """The job as it is, watched headless."""
    job = start(truth, 0)
    try:
        return headless_report(job.pid, WATCH_S)
    finally:
        stop_job(job)


def own_rate(truth: Path, seconds: float, workers: int) -> float:
    """The job's own steps/s over ``seconds`` after its first record, unwatched: the
    prediction is of the job as it runs once changed, without aitop's CPU beside
    it (a change that fills both cores shares them with aitop while watched)."""
    job = start(truth, workers)
    try:
        time.sleep(seconds)
    finally:
        stop_job(job)
    records = read_truth(truth)
    return truth_between(truth, records[0]["t"], records[-1]["t"])["steps_per_s"]


def test_a_get_batch_function_is_the_loops_data_wait_and_workers_pay(tmp_path: Path) -> None:
    truth = tmp_path / "base.jsonl"
    report = watch(truth)
    ids = [f["id"] for f in report["findings"]]
    own = truth_between(truth, *report["phase_span"])
    phases = report["phases"]
    print(f"{report['bottleneck']['summary']}; findings {ids}; phases {phases}; own {own}")
    lead = report["findings"][0]
    assert lead["id"] == "loading_in_training_process", ids
    assert lead["actions"][0].startswith("Load in 1 worker process"), lead["actions"]
    assert "python_overhead" not in ids, "explained: get_batch is the loop's data wait"
    allowed = share_tolerance(own["data_wait"], report["metrics"]["phase_samples"], 0.08)
    assert abs(phases["data_wait"] - own["data_wait"]) <= allowed, (phases, own)
    assert lead["gain_method"] == "predicted"
    low, high = lead["est_speedup_range"]
    rounds = iter(range(2))

    def measure() -> RatePair:
        # The job as it ran watched (aitop then had the core the job left free),
        # then the pair again, one after the other.
        n = next(rounds)
        base = own["steps_per_s"] if n == 0 else own_rate(tmp_path / "again.jsonl", 8, 0)
        return base, own_rate(tmp_path / f"workers-{n}.jsonl", 8, 1)

    assert_comes_true("get_batch in 1 worker", low, high, measure)
