"""The self-test's processes: the GPU jobs, a plain Python sleeper, and aitop itself.

aitop is run exactly as a user runs it (``aitop --pid P --headless --json``,
as ``python -m aitop.tui`` so the same interpreter and install are used) in a
subprocess of its own: its threads, signal handlers and py-spy children are
then those of a real session, and its report is the public JSON. Every
command is an argument list; every failure becomes a :class:`ProcError`
whose message is one line, with the log kept under the output directory.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aitop.engine.selftest.truth import Record, read_truth

JOBS_MODULE = "aitop.demo.gpu_jobs"
#: The aitop command line, in this interpreter (the ``aitop`` console script's module).
AITOP = (sys.executable, "-m", "aitop.tui")
#: A process for py-spy to attach to that needs nothing but Python.
SLEEPER = (sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)")
#: Seconds a job may take to import torch, start CUDA and warm up.
READY_TIMEOUT_S = 180.0


class ProcError(Exception):
    """A process of the self-test failed; the message is one line saying how."""


@dataclass
class RunningJob:
    name: str
    popen: subprocess.Popen[bytes]
    truth: Path
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid


def _tail(path: Path) -> str:
    """The last meaningful line of a log, for a one-line error."""
    try:
        lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines()]
    except OSError:
        return "(no log)"
    lines = [ln for ln in lines if ln]
    return lines[-1] if lines else "(empty log)"


def start_job(name: str, raw_dir: Path, duration_s: float) -> RunningJob:
    """Start one GPU job; it trains until ``duration_s`` or until stopped."""
    truth = raw_dir / f"job-{name}.truth.jsonl"
    log = raw_dir / f"job-{name}.log"
    truth.unlink(missing_ok=True)
    with log.open("wb") as out:
        popen = subprocess.Popen(
            [sys.executable, "-m", JOBS_MODULE, "--job", name, "--truth", str(truth),
             "--duration", f"{duration_s:g}"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )
    return RunningJob(name, popen, truth, log)


def wait_ready(job: RunningJob, timeout_s: float = READY_TIMEOUT_S) -> list[Record]:
    """Wait for the job's first truth record (it trains, past warm-up)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if job.popen.poll() is not None:
            raise ProcError(f"the {job.name} job exited with status {job.popen.returncode}: "
                            f"{_tail(job.log)}")
        records = read_truth(job.truth)
        if records:
            return records
        time.sleep(0.2)
    raise ProcError(f"the {job.name} job did not start training within {timeout_s:.0f} s: "
                    f"{_tail(job.log)}")


def stop(popen: subprocess.Popen[bytes], timeout_s: float = 15.0) -> None:
    """SIGTERM (the jobs end cleanly on it), then SIGKILL if it does not end."""
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait()


def start_sleeper() -> subprocess.Popen[bytes]:
    return subprocess.Popen(list(SLEEPER), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def attach_headless(pid: int, duration_s: float, raw_dir: Path, name: str) -> dict[str, Any]:
    """Run ``aitop --pid PID --headless --duration S --json`` and return its report."""
    command = [*AITOP, "--pid", str(pid), "--headless", "--duration", f"{duration_s:g}",
               "--json"]
    try:
        result = subprocess.run(command, capture_output=True, text=True,
                                timeout=duration_s + 90, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        raise ProcError(f"aitop did not finish within {duration_s + 90:.0f} s") from exc
    (raw_dir / f"aitop-{name}.report.json").write_text(result.stdout)
    (raw_dir / f"aitop-{name}.stderr.txt").write_text(result.stderr)
    if result.returncode != 0:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        raise ProcError(f"aitop exited with status {result.returncode}: "
                        f"{lines[-1] if lines else '(no message)'}")
    try:
        report = json.loads(result.stdout)
    except json.JSONDecodeError as exc:
        raise ProcError(f"aitop's --json output is not JSON: {exc}") from exc
    if not isinstance(report, dict):
        raise ProcError("aitop's --json output is not a JSON object")
    return report


def run_module(args: list[str], timeout_s: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python -m aitop.demo.gpu_jobs ARGS`` (its --help, --info, the no-CUDA exit)."""
    try:
        return subprocess.run([sys.executable, "-m", JOBS_MODULE, *args], capture_output=True,
                              text=True, timeout=timeout_s, stdin=subprocess.DEVNULL,
                              check=False)
    except subprocess.TimeoutExpired as exc:
        raise ProcError(f"python -m {JOBS_MODULE} {' '.join(args)} took over "
                        f"{timeout_s:.0f} s") from exc
