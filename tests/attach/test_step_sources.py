"""Steps/s where the loop's counter cannot be read or counts something else, from
the step the job prints to its log (its stdout is a file, as under nohup or
Slurm), checked against the job's own record of its steps.

``module_loop`` is a demo job whose loop runs at module level (its ``iter_num``
is a global, which py-spy's locals do not show); ``strided_counter`` is shaped
like pytorch/examples' word_language_model, whose loop local ``i`` steps by the
sequence length.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.jobs import run_aitop, start_job, stop_job, truth_between

pytestmark = pytest.mark.attach

WORKLOADS = Path(__file__).resolve().parent.parent / "support" / "workloads"


def readings_span(report: dict) -> tuple[float, float]:
    readings = report["steps_source"]["readings"]
    assert len(readings) >= 2, report["steps_source"]
    return readings[0][0], readings[-1][0]


def report_then_stop(job: subprocess.Popen[bytes]) -> dict:
    """aitop's headless report of the running job over 16 s; the job stopped after."""
    try:
        result = run_aitop("--pid", str(job.pid), "--headless", "--json", "--duration", "16",
                           timeout=110)
    finally:
        stop_job(job)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_module_level_loop_gets_its_rate_from_the_step_it_prints(tmp_path: Path) -> None:
    truth = tmp_path / "module_loop.jsonl"
    job = start_job("module_loop", truth)  # stdout goes to module_loop.log
    time.sleep(4)
    report = report_then_stop(job)
    source = report["steps_source"]
    print(f"steps/s {report['steps_per_s']} from {source['counter']} in {source['frame']}")
    assert source["counter"] == "iter (job log)"
    assert source["frame"] == str(truth.with_suffix(".log"))
    real = truth_between(truth, *readings_span(report))["steps_per_s"]
    assert report["steps_per_s"] == pytest.approx(real, rel=0.10)


def test_a_counter_that_strides_is_set_aside_for_the_printed_step(tmp_path: Path) -> None:
    truth = tmp_path / "strided.jsonl"
    log = tmp_path / "strided.log"
    with log.open("wb") as out:
        job = subprocess.Popen(
            [sys.executable, str(WORKLOADS / "strided_counter.py"), "--truth", str(truth),
             "--duration", "120"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not (truth.exists() and log.read_text().count("batches") >= 2):
        if job.poll() is not None or time.time() >= deadline:
            stop_job(job)
            raise AssertionError("the job printed no progress within 60 s: "
                                 + log.read_text()[-2000:])
        time.sleep(0.3)
    report = report_then_stop(job)
    source = report["steps_source"]
    print(f"steps/s {report['steps_per_s']}; {source['rejected']}")
    assert source["counter"] == "batches (job log)"
    assert source["rejected"] is not None and source["rejected"].startswith("`i` advanced")
    # `i` steps by 35 a batch; the counter's own rate is read less exactly than
    # the log's (stamped when py-spy returns): 33x under a loaded fresh-clone run.
    ratio = re.search(r", (\d+)x the ", source["rejected"])
    assert ratio is not None and 25 <= int(ratio.group(1)) <= 45, source["rejected"]
    real = truth_between(truth, *readings_span(report))["steps_per_s"]
    assert report["steps_per_s"] == pytest.approx(real, rel=0.10)
