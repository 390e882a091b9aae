"""The demo training jobs the benchmarks attach to, and their ground truth.

The jobs are started and read through ``tests/support/jobs.py`` (the same helpers
the end-to-end tests use), so the benchmarks and the tests agree on what "the
workload's own measurement over a span" means. Each job writes cumulative
per-phase seconds and a step counter every 0.5 s (``--truth``).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from .procs import tree_cpu_seconds

REPO = Path(__file__).resolve().parents[1]

#: The bottleneck category each demo scenario should be diagnosed with.
EXPECTED: dict[str, str] = {
    "data": "data_loading",
    "compute": "compute",
    "checkpoint": "io",
    "healthy": "compute",
}
SCENARIOS: tuple[str, ...] = tuple(EXPECTED)


def _demo_jobs() -> ModuleType:
    path = REPO / "tests" / "support" / "jobs.py"
    spec = importlib.util.spec_from_file_location("demo_jobs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up in sys.modules.
    sys.modules.setdefault("demo_jobs", module)
    spec.loader.exec_module(module)
    return module


demo_jobs = _demo_jobs()


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
        self.proc: subprocess.Popen[bytes] = demo_jobs.start_job(
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
            records = demo_jobs.read_truth(self.truth)
            if records and records[-1]["t"] >= t:
                return
            time.sleep(0.1)

    def between(self, t0: float, t1: float) -> dict[str, float]:
        """Phase fractions and steps/s the job measured itself over [t0, t1]."""
        self.wait_for_truth(t1)
        result: dict[str, Any] = demo_jobs.truth_between(self.truth, t0, t1)
        return {k: float(v) for k, v in result.items()}

    def stop(self) -> None:
        demo_jobs.stop_job(self.proc)

    def __enter__(self) -> DemoJob:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
