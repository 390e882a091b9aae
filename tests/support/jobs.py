"""Starting the bundled training jobs for tests, and reading their ground truth.

The jobs time their own DataLoader, forward, backward, optimizer, checkpoint and
evaluation code (``--truth FILE``: cumulative seconds per phase, a JSON line
every 0.5 s),
so a test can compare aitop's estimate with what the job itself measured over
exactly the span of aitop's stack samples.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from aitop.probes.job_identity import read_environ

from benchmarks.agent import LIGHT_JOB

#: The phases the jobs time (``eval``: inside ``evaluate()``; 0 for most jobs).
PHASES = ("data_wait", "forward", "backward", "optimizer", "checkpoint", "eval")


def start_job(scenario: str, truth: Path, duration_s: float = 180.0,
              extra_args: Sequence[str] = (), *, training: bool = True,
              env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Start a demo job and wait until it is training (its first truth record).

    ``extra_args`` go to the workload's command line, e.g. ``("--num-workers", "2")``.
    ``training=False`` returns once the process runs, before its first step.
    """
    log = truth.with_suffix(".log").open("wb")
    job = subprocess.Popen(
        [sys.executable, "-m", "aitop.demo.workload", "--scenario", scenario,
         "--truth", str(truth), "--duration", str(duration_s),
         "--checkpoint-dir", str(truth.parent / f"ckpt-{scenario}"), *extra_args],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
    )
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


#: A loop that sleeps ``--pause`` seconds after each step (``--pause 0``: its fix).
PACED_LOOP = Path(__file__).resolve().parent / "workloads" / "paced_loop.py"


def start_paced_loop(truth: Path, pause_s: float) -> subprocess.Popen[bytes]:
    """Start the paced loop and wait for its first truth record."""
    log = truth.with_suffix(".log").open("wb")
    job = subprocess.Popen([sys.executable, str(PACED_LOOP), "--truth", str(truth),
                            "--duration", "120", "--pause", str(pause_s)],
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (truth.exists() and read_truth(truth)):
        if job.poll() is not None or time.time() >= deadline:
            stop_job(job)
            raise AssertionError("the paced loop did not start: "
                                 + truth.with_suffix(".log").read_text()[-2000:])
        time.sleep(0.2)
    return job


def stop_job(job: subprocess.Popen[bytes]) -> None:
    if job.poll() is None:
        job.terminate()
        try:
            job.wait(timeout=10)
        except subprocess.TimeoutExpired:
            job.kill()
            job.wait()


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


def run_aitop(*args: str, timeout: float = 120.0, user: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, optionally as another user (setpriv)."""
    command = [sys.executable, "-m", "aitop.tui", *args]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups",
                   *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


#: aitop's exit status when a ``--fail-on`` gate trips.
EXIT_GATE = 3
#: Every watched run carries this gate, so each one also checks the gate's exit.
GATE = "high"


@dataclass(frozen=True)
class Watched:
    """A demo job's run with aitop attached headless: its report and its own truth."""

    scenario: str
    extra_args: tuple[str, ...]
    report: dict[str, Any]
    truth: Path
    stderr: str


#: Seconds each watched run is attached: aitop's lead finding is confirmed after
#: 6-9 s on these jobs (its rules' for: durations; rules are evaluated every
#: second for the first 30 s), so 13 s leaves room.
WATCH_S = 13.0


def watched(scenario: str, workdir: Path, extra_args: Sequence[str] = (),
            duration_s: float = WATCH_S) -> Watched:
    """A fresh run of the job watched by ``aitop --headless --json --fail-on high``.

    Checked on every run: py-spy attached, the report is of this job, the gate
    exits 3 exactly when a finding of high severity or worse fires, and the job
    ends on SIGTERM with 130. Tests share these runs through the session
    fixture ``watched_run`` (tests/attach/conftest.py).
    """
    truth = workdir / f"{scenario}{''.join(extra_args).replace('-', '_')}.jsonl"
    job = start_job(scenario, truth, extra_args=extra_args)
    try:
        result = run_aitop("--pid", str(job.pid), "--headless", "--json", "--duration",
                           str(duration_s), "--fail-on", GATE, timeout=duration_s + 90)
    finally:
        stop_job(job)
    # SIGTERM ends a demo job like Ctrl-C (130): not killed, not aborted by a
    # thread still inside torch at exit.
    log = truth.with_suffix(".log").read_text()[-1500:]
    assert job.returncode == 130, f"{scenario} exited with {job.returncode}: {log}"
    assert result.returncode in (0, EXIT_GATE), f"aitop failed: {result.stderr}"
    report = json.loads(result.stdout)
    stacks = report["probes"].get("stacks", "")
    assert not stacks.startswith("unavailable"), f"py-spy could not attach: {stacks}"
    state = report["probe_states"].get("stacks", {})
    assert state.get("state") != "unavailable", f"py-spy could not attach: {state}"
    assert report["target"]["pid"] == job.pid
    high = [f["id"] for f in report["findings"] if f["severity"] in ("high", "critical")]
    assert result.returncode == (EXIT_GATE if high else 0), (result.returncode, high)
    if high:
        assert f"--fail-on {GATE}: {len(high)} finding(s)" in result.stderr, result.stderr
    return Watched(scenario, tuple(extra_args), report, truth, result.stderr)


#: The session fixture's callable: ``watched_run(scenario, extra_args=())``.
WatchedRun = Callable[..., Watched]



#: A small PyTorch training loop that leaves most of a core idle: for tests that need
#: a job to find, not to judge (``python -c LIGHT_TRAINING MARKER``; the benchmark of
#: the node agent's cost runs the same loop).
LIGHT_TRAINING = LIGHT_JOB


#: The straggler demo's slow rank builds its batches in its training thread: its lead
#: is one of these data-loading findings, which one depending on whether half a core is
#: free on the 2-core box (then moving the work to workers helps).
STRAGGLER_OWN_CAUSES = frozenset(
    {"loading_in_training_process", "data_wait_dominant", "host_cpu_saturated"})


def two_node_launcher(port: int, run_id: str, truth: Path, *, duration_s: float = 120,
                      slow_ms: str = "40") -> list[str]:
    """One "node" of a 2-node torchrun job on this machine: ``--nnodes=2``, one rank
    per node, a c10d rendezvous on loopback; rank 1 builds its batches with
    ``slow_ms`` of CPU in its training thread (a straggler)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
            "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", f"--rdzv-id={run_id}",
            "-m", "aitop.demo.ddp", "--duration", f"{duration_s:g}", "--slow-rank", "1",
            "--slow-ms", slow_ms, "--truth", str(truth)]


def rank_of(launcher_pid: int) -> tuple[int, int] | None:
    """(global rank, its PID) of a launcher's one rank, once it has started."""
    for child in psutil.Process(launcher_pid).children():
        rank = read_environ(child.pid).get("RANK")
        if rank is not None:
            return int(rank), child.pid
    return None
