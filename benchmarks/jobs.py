"""The demo training jobs, started and read the same way by the benchmarks and the tests.

The jobs time their own DataLoader, forward, backward, optimizer, checkpoint and
evaluation code (``--truth FILE``: cumulative seconds per phase, a JSON line
every 0.5 s), so a benchmark or a test can compare aitop's estimate with what
the job itself measured over exactly the span of aitop's stack samples. The
tests import these from here (``tests/support/jobs.py`` adds what only tests
need); nothing here imports the tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .procs import descendants, tree_cpu_seconds

REPO = Path(__file__).resolve().parents[1]

#: The bottleneck category each demo scenario should be diagnosed with.
EXPECTED: dict[str, str] = {
    "data": "data_loading",
    "compute": "compute",
    "checkpoint": "io",
    "healthy": "compute",
}
SCENARIOS: tuple[str, ...] = tuple(EXPECTED)

#: The phases the jobs time (``eval``: inside ``evaluate()``; 0 for most jobs).
PHASES = ("data_wait", "forward", "backward", "optimizer", "checkpoint", "eval")

#: A small PyTorch training loop that leaves most of a core idle: a few ms of
#: compute per step, then a short sleep (``python -c LIGHT_JOB MARKER``). For
#: what needs a job to find, not to judge: the node agent's cost, its tests.
LIGHT_JOB = """
import sys, time, torch
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
def train():
    step = 0
    while True:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        step += 1
        time.sleep(0.03)
train()
"""


def start_job(scenario: str, truth: Path, duration_s: float = 180.0,
              extra_args: Sequence[str] = (), *, training: bool = True,
              env: dict[str, str] | None = None,
              cgroup: Path | None = None) -> subprocess.Popen[bytes]:
    """Start a demo job and wait until it is training (its first truth record).

    ``extra_args`` go to the workload's command line, e.g. ``("--num-workers", "2")``.
    ``training=False`` returns once the process runs, before its first step.
    ``cgroup``: the directory of a cgroup to run the job in, as a container
    would (``cgroups.cpu_cgroup``): it is moved in as it starts, before it has
    imported torch, so its threads and DataLoader workers are all inside.
    """
    log = truth.with_suffix(".log").open("wb")
    job = subprocess.Popen(
        [sys.executable, "-m", "aitop.demo.workload", "--scenario", scenario,
         "--truth", str(truth), "--duration", str(duration_s),
         "--checkpoint-dir", str(truth.parent / f"ckpt-{scenario}"), *extra_args],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        # Its own process group, as a job started from a shell has: stop_job ends
        # the group, workers it was forking as it stopped included.
        start_new_session=True,
    )
    if cgroup is not None:
        try:
            (cgroup / "cgroup.procs").write_text(str(job.pid))
        except OSError:
            job.kill()
            job.wait()
            raise
    if not training:
        return job
    deadline = time.time() + 60
    while time.time() < deadline:
        if job.poll() is not None:
            raise AssertionError(f"demo job {scenario} exited with {job.returncode}: "
                                 + truth.with_suffix(".log").read_text()[-2000:])
        if truth.exists() and truth.read_text().count("\n") >= 1:
            return job
        time.sleep(0.2)
    job.kill()
    raise AssertionError(f"demo job {scenario} did not start training within 60 s")


def stop_job(job: subprocess.Popen[bytes]) -> None:
    """SIGTERM the job alone (it ends as on Ctrl-C, 130), then kill what it leaves:
    DataLoader workers it was starting as it stopped outlive it otherwise. Those
    it forked after the descendants were listed are orphans by then, found by
    their process group (``start_job`` gives the job its own)."""
    if job.poll() is None:
        left = descendants(job.pid)
        job.terminate()
        try:
            job.wait(timeout=10)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(job.pid, signal.SIGKILL)


def read_truth(truth: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]


def _at(records: list[dict[str, float]], t: float) -> dict[str, float]:
    """Cumulative counters at time t, interpolated between the two records around it."""
    before = [r for r in records if r["t"] <= t]
    after = [r for r in records if r["t"] >= t]
    if not before:
        return records[0]
    if not after:
        return records[-1]
    a, b = before[-1], after[0]
    if b["t"] == a["t"]:
        return a
    w = (t - a["t"]) / (b["t"] - a["t"])
    return {k: a[k] + w * (b[k] - a[k]) for k in a}


def truth_between(truth: Path, t0: float, t1: float) -> dict[str, float]:
    """Phase fractions of wall time, and steps/s, that the job measured in [t0, t1]."""
    records = read_truth(truth)
    a, b = _at(records, t0), _at(records, t1)
    elapsed = b["elapsed"] - a["elapsed"]
    assert elapsed > 1.0, f"ground truth covers only {elapsed:.2f} s"
    # .get: a phase a job's records lack (an older job) took no time.
    out = {p: (b.get(p, 0.0) - a.get(p, 0.0)) / elapsed for p in PHASES}
    out["steps_per_s"] = (b["steps"] - a["steps"]) / elapsed
    return out


def rate_over_whole_cycles(truth: Path, t0: float, t1: float, phase: str) -> float:
    """The job's steps/s from the first end of a ``phase`` block in [t0, t1] to the last.

    A job that stops every N steps (to evaluate, to save) runs in cycles of 1-3 s;
    a span that cuts one in two counts part of a block or none of it, which moves
    a 15-s rate by a tenth. From one block's end to another's the span holds whole
    cycles. The job writes a record as each block ends: a record where the phase's
    total grew, followed by one where it did not grow or where steps were taken
    (a block every step or two), is a block's end.
    """
    records = [r for r in read_truth(truth) if t0 <= r["t"] <= t1]
    ends = [now for before, now, after in zip(records, records[1:], records[2:], strict=False)
            if now[phase] > before[phase]
            and (after[phase] == now[phase] or after["steps"] > now["steps"])]
    assert len(ends) >= 2, (
        f"fewer than two {phase} blocks end within [{t0:.1f}, {t1:.1f}]: {len(ends)}")
    first, last = ends[0], ends[-1]
    return (last["steps"] - first["steps"]) / (last["elapsed"] - first["elapsed"])


def truth_over_windows(truth: Path,
                       windows: Sequence[Sequence[float]]) -> dict[str, float]:
    """Phase fractions the job measured over a report's ``phase_windows`` alone, each
    window weighted by its samples as aitop pools them: a phase that comes in
    blocks (a save of a second) and falls between two windows then counts for
    neither side. Windows of a second or less are left out (mostly interpolation)."""
    records = read_truth(truth)
    pooled: dict[str, float] = dict.fromkeys(PHASES, 0.0)
    weight = 0.0
    for t0, t1, samples in windows:
        a, b = _at(records, t0), _at(records, t1)
        elapsed = b["elapsed"] - a["elapsed"]
        if elapsed <= 1.0:
            continue
        for p in PHASES:
            pooled[p] += samples * (b.get(p, 0.0) - a.get(p, 0.0)) / elapsed
        weight += samples
    assert weight > 0, f"no window of {list(windows)} is covered by the job's own record"
    return {p: v / weight for p, v in pooled.items()}


class DemoJob:
    """One long-running demo job; aitop is attached to and detached from it many times.

    One job per scenario (rather than one per measurement) cancels the
    process-to-process variance of a fresh job (memory layout, thread placement).
    """

    def __init__(self, scenario: str, workdir: Path, duration_s: float) -> None:
        self.scenario = scenario
        workdir.mkdir(parents=True, exist_ok=True)
        self.truth = workdir / f"{scenario}.jsonl"
        self.truth.unlink(missing_ok=True)
        self.proc: subprocess.Popen[bytes] = start_job(
            scenario, self.truth, duration_s=duration_s
        )
        self.pid = self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def cpu_seconds(self) -> float:
        """CPU of the job and its DataLoader workers (live and reaped) so far."""
        value = tree_cpu_seconds(self.pid)
        if value is None:
            raise RuntimeError(f"demo job {self.scenario} (PID {self.pid}) is gone")
        return value

    def wait_for_truth(self, t: float, timeout_s: float = 5.0) -> None:
        """Wait until the truth file has a record at or after ``t``."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            records = read_truth(self.truth)
            if records and records[-1]["t"] >= t:
                return
            time.sleep(0.1)

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """Phase fractions and steps/s the job measured itself over [t0, t1]."""
        self.wait_for_truth(t1)
        result: dict[str, Any] = truth_between(self.truth, t0, t1)
        return {k: float(v) for k, v in result.items()}

    def stop(self) -> None:
        stop_job(self.proc)

    def __enter__(self) -> DemoJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
