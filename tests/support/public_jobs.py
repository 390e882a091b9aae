"""Public training code run unmodified, watched by the real CLI.

The jobs are the scripts in ``workloads/`` that drive code shipped on PyPI
(Lightning's own demos, an HF ``Trainer``) the way those projects' docs do; each
appends its own record (steps, seconds in evaluation and saving) in the demo
jobs' truth format, so ``truth_between`` reads it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.jobs import truth_between
from support.jobs import run_aitop
from support.processes import start_logged, stop_tree

__all__ = ["LIGHTNING", "TRANSFORMERS", "PublicRun", "rate_of", "start_public", "watch_public"]

WORKLOADS = Path(__file__).resolve().parent / "workloads"
#: Lightning's demos (``lightning.pytorch.demos``) under the docs' Trainer lines.
LIGHTNING = WORKLOADS / "lightning_demo.py"
#: An HF ``transformers.Trainer`` job on a small GPT-2 config, offline.
TRANSFORMERS = WORKLOADS / "hf_trainer.py"

#: Seconds a public job may take to import its framework and take its first step
#: (``import transformers`` alone takes seconds on a busy 2-core box).
START_S = 120.0


def start_public(script: Path, workdir: Path, name: str, args: Sequence[str] = (),
                 duration_s: float = 150.0,
                 env: Mapping[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    """Start ``script`` in ``workdir`` and wait for its first record (it is training).

    Returns the process and its record's path; its output goes to ``NAME.log``.
    """
    truth = workdir / f"{name}.jsonl"
    out = workdir / f"{name}.log"
    folder = "--data-dir" if script == LIGHTNING else "--output-dir"
    job = start_logged(
        [sys.executable, str(script), "--truth", str(truth), "--duration", f"{duration_s:g}",
         folder, str(workdir / f"{name}-files"), *args],
        out, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})}, cwd=workdir)
    deadline = time.time() + START_S
    while time.time() < deadline:
        if job.poll() is not None:
            raise AssertionError(f"{script.name} {' '.join(args)} exited with "
                                 f"{job.returncode}: {out.read_text()[-2000:]}")
        if truth.exists() and truth.read_text().count("\n") >= 1:
            return job, truth
        time.sleep(0.2)
    stop_tree(job)
    raise AssertionError(f"{script.name} took no step within {START_S:.0f} s: "
                         + out.read_text()[-2000:])


@dataclass(frozen=True)
class PublicRun:
    """A public job's run with aitop attached headless: its report and its own record."""

    name: str
    report: dict[str, Any]
    truth: Path
    log: Path

    @property
    def lead(self) -> dict[str, Any]:
        return self.report["findings"][0] if self.report["findings"] else {}

    def describe(self) -> str:
        """One line for a failing assertion or ``-s``: verdict, lead, rates, phases."""
        r = self.report
        own = truth_between(self.truth, *r["steps_span"])["steps_per_s"] \
            if r.get("steps_span") else None
        return (f"{self.name}: {r['bottleneck']['summary']!r}; findings "
                f"{[f['id'] for f in r['findings']]}; steps/s {r['steps_per_s']} via "
                f"{(r.get('steps_source') or {}).get('counter')} (own {own}); phases "
                f"{ {k: round(v, 2) for k, v in r['phases'].items() if v} }")


def watch_public(script: Path, workdir: Path, name: str, args: Sequence[str] = (),
                 seconds: float = 16.0, settle_s: float = 4.0,
                 env: Mapping[str, str] | None = None) -> PublicRun:
    """The job started, ``settle_s`` after its first step watched by ``aitop --headless
    --json`` for ``seconds``, then stopped."""
    job, truth = start_public(script, workdir, name, args, env=env)
    try:
        time.sleep(settle_s)
        result = run_aitop("--pid", str(job.pid), "--headless", "--json", "--duration",
                           f"{seconds:g}", timeout=seconds + 90)
    finally:
        stop_tree(job)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    stacks = report["probe_states"].get("stacks", {})
    assert stacks.get("state") != "unavailable", f"py-spy could not attach: {stacks}"
    return PublicRun(name, report, truth, workdir / f"{name}.log")


def rate_of(run: PublicRun) -> float:
    """The job's own steps/s over the span of aitop's stack samples."""
    return truth_between(run.truth, *run.report["phase_span"])["steps_per_s"]
