"""The job's state comes first: a job that has not taken its first step is not
judged for speed. The ``compile`` demo compiles its model with torch.compile
(inductor on the CPU, a fresh cache: tens of seconds before the first step)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from support.jobs import read_truth, run_aitop, start_job, stop_job

pytestmark = pytest.mark.attach


def test_a_job_inside_its_first_torch_compile_is_warming_up(tmp_path: Path) -> None:
    truth = tmp_path / "compile.jsonl"
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor-cache")}
    job = start_job("compile", truth, training=False, env=env)
    try:
        time.sleep(4)  # past `import torch`, into the first call of the compiled model
        result = run_aitop("--pid", str(job.pid), "--headless", "--json", "--duration", "12",
                           timeout=100)
    finally:
        stop_job(job)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    steps_by_then = [r for r in (read_truth(truth) if truth.exists() else [])
                     if r["t"] <= report["evaluated_at"] and r["steps"] > 0]
    print(f"{report['bottleneck']}; phases {report['phases']}; findings "
          f"{[f['id'] for f in report['findings']]}; steps by then {len(steps_by_then)}")
    # The job's own record: not one step had been taken when aitop judged.
    assert not steps_by_then, steps_by_then[:1]
    bottleneck = report["bottleneck"]
    assert bottleneck["category"] == "warming_up", bottleneck
    assert bottleneck["judged"] is False and bottleneck["lead_finding"] is None
    assert bottleneck["summary"].startswith("Warming up: torch.compile is compiling the model")
    # Nothing judged of a steady state the job is not in: no rival, no gain.
    assert [f["id"] for f in report["findings"]] == ["warming_up_compiling"]
    assert report["findings"][0]["est_speedup"] is None
    assert report["phases"]["compile"] >= 0.5
