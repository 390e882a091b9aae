"""The bundled training jobs as tests use them: watched by the real CLI, checked on every run.

Starting a demo job and reading its ground truth (``start_job``,
``truth_between``, ...) is shared with the benchmarks, which own it
(``benchmarks/jobs.py``): tests import it from there, through this module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import psutil
from aitop.probes.kernel.procfs import read_environ

from benchmarks.jobs import read_truth, start_job, stop_job, truth_between, truth_over_windows
from support.cgroups import MemoryCgroup

__all__ = [
    "EXIT_GATE",
    "GATE",
    "PACED_LOOP",
    "STRAGGLER_OWN_CAUSES",
    "WATCH_S",
    "WATCH_S_OF",
    "Watched",
    "WatchedRun",
    "headless_report",
    "rank_of",
    "read_truth",
    "run_aitop",
    "start_job",
    "start_paced_loop",
    "start_workload",
    "stop_job",
    "truth_between",
    "truth_over_windows",
    "two_node_launcher",
    "watch",
    "watch_side_by_side",
    "watched",
]

#: A loop that sleeps ``--pause`` seconds after each step (``--pause 0``: its fix).
PACED_LOOP = Path(__file__).resolve().parent / "workloads" / "paced_loop.py"


def start_workload(script: Path, truth: Path, *args: str) -> subprocess.Popen[bytes]:
    """Start a workload of ``tests/support/workloads`` that writes ``--truth`` and wait
    for its first record. Its own process group, as ``start_job`` gives a demo job:
    ``stop_job`` then ends the DataLoader workers it forks too."""
    log = truth.with_suffix(".log").open("wb")
    job = subprocess.Popen([sys.executable, str(script), "--truth", str(truth), *args],
                           stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           start_new_session=True)
    deadline = time.time() + 60
    while not (truth.exists() and read_truth(truth)):
        if job.poll() is not None or time.time() >= deadline:
            stop_job(job)
            raise AssertionError(f"{script.name} did not start: "
                                 + truth.with_suffix(".log").read_text()[-2000:])
        time.sleep(0.2)
    return job


def start_paced_loop(truth: Path, pause_s: float) -> subprocess.Popen[bytes]:
    """Start the paced loop and wait for its first truth record."""
    return start_workload(PACED_LOOP, truth, "--duration", "120", "--pause", str(pause_s))


def run_aitop(*args: str, timeout: float = 120.0, user: str | None = None,
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a subprocess, optionally as another user (setpriv)."""
    command = [sys.executable, "-m", "aitop.tui", *args]
    if user is not None:
        command = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups",
                   *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                          env=env, stdin=subprocess.DEVNULL)


def headless_report(pid: int, seconds: float, *extra: str) -> dict[str, Any]:
    """aitop's headless JSON report of ``pid`` over ``seconds``, from the real CLI."""
    result = run_aitop("--pid", str(pid), "--headless", "--json", "--duration", str(seconds),
                       *extra, timeout=seconds + 90)
    assert result.returncode == 0, result.stderr
    return cast(dict[str, Any], json.loads(result.stdout))


def session_path(workdir: Path, scenario: str) -> Path:
    """Where :func:`watch` with ``export=True`` leaves the session's snapshot."""
    return workdir / f"{scenario}-session.json"


def read_session(workdir: Path, scenario: str) -> dict[str, Any]:
    """The snapshot :func:`watch` with ``export=True`` left, as its JSON."""
    return cast(dict[str, Any], json.loads(session_path(workdir, scenario).read_text()))


def watch(scenario: str, workdir: Path, seconds: float,
          settle_s: float = 0.0, cgroup: MemoryCgroup | None = None,
          export: bool = False) -> tuple[dict, Path]:
    """The job watched headless for ``seconds``, ``settle_s`` after its first step
    (in ``cgroup`` from then on, when given); with ``export``, its session's every
    sample kept at :func:`session_path`."""
    truth = workdir / f"{scenario}.jsonl"
    job = start_job(scenario, truth)
    keep = ("--export", str(session_path(workdir, scenario))) if export else ()
    try:
        if cgroup is not None:
            cgroup.add(job.pid)
        time.sleep(settle_s)
        result = run_aitop("--pid", str(job.pid), "--headless", "--json", "--duration",
                           str(seconds), *keep, timeout=seconds + 90)
    finally:
        stop_job(job)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), truth


def watch_side_by_side(scenarios: tuple[str, ...], workdir: Path, seconds: float,
                       settle_s: float = 0.0,
                       cgroups: Mapping[str, MemoryCgroup] | None = None,
                       export: bool = False) -> list[tuple[dict, Path]]:
    """:func:`watch` of each scenario at the same time, in the order given.

    For tests whose verdicts read no free cores (memory growth, work per core):
    their jobs may share the box's cores, and the test takes half the time.
    """
    with ThreadPoolExecutor(max_workers=len(scenarios)) as pool:
        runs = [pool.submit(watch, name, workdir, seconds, settle_s,
                            (cgroups or {}).get(name), export) for name in scenarios]
        return [run.result() for run in runs]


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
#: Scenarios whose lead needs the second stack window (6 s long, done about 9 s
#: in) and holds 5 s after it: a first window of 3 s that caught the job
#: between steps leaves it to the second, and 13 s did not always reach it.
#: optimizer_loop_sgd's loop takes about 0.22 of its time against the rule's
#: 0.15: read over its first two windows (about 85 samples) it falls under the
#: cut about one time in twenty, and the third window lands about 20 s in, so
#: a 20-s report then ends with the finding pending; 30 s gives it its hold.
WATCH_S_OF = {"optimizer_loop": 20.0, "optimizer_loop_sgd": 30.0, "optimizer_loop_fixed": 20.0}


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
        rank = (read_environ(child.pid) or {}).get("RANK")
        if rank is not None:
            return int(rank), child.pid
    return None
