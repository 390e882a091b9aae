"""Steps from the job's own log: which integer counts steps in the lines real
scripts print, readings stamped with the file's writes, and the loop counter set
aside when it runs faster than the printed count.

The lines are those the scripts print (formats copied from nanoGPT's train.py,
pytorch/examples' word_language_model, tqdm as Lightning drives it, the Hugging
Face Trainer's log dicts); the files are real files, appended as a job would,
and the process whose stdout is one is a real process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aitop.probes.job_log import LOG_SOURCE, JobLog, JobLogs, StepLineFinder, find_log
from aitop.probes.samples import StepCounterSample
from aitop.probes.step_sources import choose_step_readings
from aitop.probes.steps import steps_per_second

NANOGPT = [f"iter {i}: loss {3 - i / 1000:.4f}, time {120 + i % 7:.2f}ms, mfu {3.1:.2f}%"
           for i in range(0, 100, 10)]
WORD_LM = [f"| epoch   1 | {b:5d}/ 2983 batches | lr 20.00 | ms/batch {400 + b % 9:5.2f} | "
           f"loss  {7 - b / 1000:5.2f} | ppl {1000 - b:8.2f}" for b in range(200, 1200, 200)]
TQDM = [f"Epoch 0:  {i // 10}%|{'█' * (i // 100)}{' ' * (10 - i // 100)}| {i}/1000 "
        f"[00:{i // 15:02d}<00:37, 14.8it/s, v_num=0, loss=0.{i}]" for i in range(50, 500, 50)]


def step_line(lines: list[str]) -> tuple[str, int] | None:
    finder = StepLineFinder()
    finder.feed(lines)
    where = finder.step_line()
    if where is None:
        return None
    newest = finder.newest(where)
    assert newest is not None
    return where.label, newest


@pytest.mark.parametrize(("lines", "expected"), [
    (NANOGPT, ("iter", 90)),
    (WORD_LM, ("batches", 1000)),
    (TQDM, ("it", 450)),
    # Ticks that rise with the steps but count something else stay out.
    ([f"step {i} tokens {i * 4096} lr 3e-4" for i in range(1, 8)], ("step", 7)),
    # A server's count of what it answered, beside its (growing) backlog.
    ([f"{1796318367.66 + i:.2f} served {100 * i} qsize {4999 + i}" for i in range(1, 8)],
     ("served", 700)),
])
def test_the_step_a_script_prints_is_found_among_its_numbers(
    lines: list[str], expected: tuple[str, int],
) -> None:
    assert step_line(lines) == expected


@pytest.mark.parametrize("lines", [
    # The Trainer's log dicts: only decimals (its `epoch` is a fraction).
    [f"{{'loss': {2.3 - i / 100:.4f}, 'grad_norm': 1.2, 'epoch': {i / 100:.2f}}}"
     for i in range(5)],
    # A rising number that is no step count: memory, and an unlabelled integer.
    [f"Memory used {1000 + i * 50} MB" for i in range(6)],
    [f"loss {i}" for i in range(6)],
    [f"epoch {i} done" for i in range(6)],
    # Two lines are not yet a pattern.
    NANOGPT[:2],
])
def test_no_step_is_read_where_nothing_counts_steps(lines: list[str]) -> None:
    assert step_line(lines) is None


def test_a_count_that_falls_without_resetting_is_no_counter() -> None:
    assert step_line([f"step {v}: ok" for v in (10, 20, 15, 30, 40)]) is None
    # A new epoch starts the count again: that is a counter.
    assert step_line([f"step {v}: ok" for v in (800, 900, 10, 110, 210)]) == ("step", 210)


def test_readings_are_stamped_with_the_write_and_only_new_writes_count(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("starting\n" + "\n".join(NANOGPT[:5]) + "\n")
    os.utime(log, (1000.0, 1000.0))
    reader = JobLog(log, str(log))
    first = reader.read()
    assert first is not None and (first.t, first.value) == (1000.0, 40)
    assert first.source == LOG_SOURCE and first.name == "iter (job log)"
    assert reader.read() is None  # nothing written since
    with log.open("a") as fh:
        fh.write("\n".join(NANOGPT[5:]) + "\n" + "iter 100: lo")  # a line half-written
    os.utime(log, (1010.0, 1010.0))
    second = reader.read()
    assert second is not None and (second.t, second.value) == (1010.0, 90)
    with log.open("a") as fh:
        fh.write("ss 2.9, time 1.0ms, mfu 3.1%\n")
    os.utime(log, (1012.0, 1012.0))
    third = reader.read()
    assert third is not None and third.value == 100
    assert steps_per_second([first, second, third]) == pytest.approx(60 / 12)


def test_a_progress_bar_rewritten_with_carriage_returns_is_read(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    log.write_text("\r".join(TQDM) + "\r")
    reading = JobLog(log, str(log)).read()
    assert reading is not None and reading.value == 450


def test_a_log_cut_short_by_rotation_is_read_again_from_its_start(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    log.write_text("\n".join(NANOGPT) + "\n")
    reader = JobLog(log, str(log))
    assert reader.read() is not None
    log.write_text("\n".join(f"iter {i}: loss 1.0" for i in (200, 210, 220)) + "\n")
    os.utime(log, (2000.0, 2000.0))
    reading = reader.read()
    assert reading is not None and reading.value == 220


def test_the_log_of_a_running_process_is_its_stdout_file(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    with out.open("wb") as fh:
        job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                               stdout=fh, stderr=subprocess.DEVNULL)
    try:
        found = find_log(job.pid)
        assert found is not None and found[1] == str(out)
    finally:
        job.kill()
        job.wait()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as piped:
        try:
            assert find_log(piped.pid) is None  # a pipe is not a file aitop can read
        finally:
            piped.kill()


def readings(rate: float, name: str, source: str = "loop") -> list[StepCounterSample]:
    return [StepCounterSample(1000.0 + 5 * k, name, round(rate * 5 * k), source=source)
            for k in range(7)]


def test_a_counter_faster_than_the_printed_step_is_set_aside() -> None:
    """word_language_model: its loop's `i` steps by bptt=35 per batch."""
    chosen = choose_step_readings(readings(91.0, "i") + readings(2.6, "batches (job log)", "log"))
    assert chosen.readings[0].source == LOG_SOURCE
    assert steps_per_second(chosen.readings) == pytest.approx(2.6, rel=0.02)
    assert chosen.rejected is not None
    assert chosen.rejected.startswith("`i` advanced 91/s, 35x the 2.6/s of `batches (job log)`")


def test_a_counter_that_agrees_or_runs_slower_is_kept() -> None:
    agree = choose_step_readings(readings(10.0, "step") + readings(10.4, "iter (job log)", "log"))
    assert agree.rejected is None and agree.readings[0].name == "step"
    # The log prints micro-batches; the loop counts optimizer steps.
    slower = choose_step_readings(readings(2.0, "global_step") + readings(8.0, "it", "log"))
    assert slower.rejected is None and slower.readings[0].name == "global_step"


def test_without_a_counter_the_printed_step_is_the_rate() -> None:
    missing = StepCounterSample(1000.0, None, None, error="no integer step counter in the loop")
    chosen = choose_step_readings([missing, *readings(3.0, "iter (job log)", "log")])
    assert steps_per_second(chosen.readings) == pytest.approx(3.0, rel=0.02)


THREAD_DIES = """\
import queue, sys, threading, time
class Producer(threading.Thread):
    def run(self):
        print("step 1", flush=True)
        raise RuntimeError("shard /data/shard-0042 truncated; token=hunter2")
def feed():
    raise ValueError("bad row 7")
for thread in (Producer(name="batch-producer", daemon=True), threading.Thread(target=feed)):
    thread.start()
    thread.join()  # it has printed its traceback (two at once would interleave)
print("still waiting on the queue", flush=True)
sys.stderr.flush()
time.sleep(30)
"""


def test_a_thread_that_died_on_an_exception_is_read_from_the_jobs_log(tmp_path: Path) -> None:
    """Python's own traceback for a thread (``Exception in thread NAME:``), written by a
    real process to the file its stdout and stderr share, read back with its name and
    the exception's line, redacted."""
    out = tmp_path / "job.out"
    with out.open("wb") as fh:
        job = subprocess.Popen([sys.executable, "-c", THREAD_DIES], stdout=fh,
                               stderr=subprocess.STDOUT,
                               env={**os.environ, "SECRET_TOKEN": "hunter2"})
    try:
        for _ in range(100):
            if b"still waiting" in out.read_bytes():
                break
            time.sleep(0.05)
        log = JobLogs.of(job.pid)
        assert log.logs, log.reason
        log.read()
        events = log.take_events()
    finally:
        job.kill()
        job.wait()
    died = {(e.kind, e.subject): e.text for e in events}
    assert set(died) == {("thread_died", "batch-producer"), ("thread_died", "Thread-1")}, events
    assert died[("thread_died", "batch-producer")].startswith(
        "RuntimeError: shard /data/shard-0042 truncated")
    assert "hunter2" not in died[("thread_died", "batch-producer")]
    assert died[("thread_died", "Thread-1")] == "ValueError: bad row 7"
    assert log.take_events() == [], "each event is taken once"
