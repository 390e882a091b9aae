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
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from aitop.probes.job_log import (
    LOG_SOURCE,
    JobLog,
    JobLogs,
    StepLineFinder,
    find_log,
    normalise,
    shape_of,
)
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
    # Its batch count starts again each epoch: the epoch it prints carries it on.
    (WORD_LM, ("batches", 1 * 2983 + 1000)),
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


def bar(epoch: int, n: int, total: int = 160) -> str:
    """A tqdm bar's line as a custom loop's ``tqdm(loader, desc=f"epoch {epoch}")`` writes it."""
    return (f"epoch {epoch}:  {100 * n // total}%|{'█' * (10 * n // total):10s}| {n}/{total} "
            f"[00:03<00:03, 21.5it/s, loss=2.303]")


def test_a_bar_that_starts_again_each_epoch_counts_on_across_epochs(tmp_path: Path) -> None:
    """Read as an unseen Trainer.fit() was: during each epoch's validation the bar
    stands at 160/160, so two reads a validation apart saw 160 and 160 with a whole
    epoch between them, and ``n`` alone read no steps there."""
    log = tmp_path / "stderr.log"
    reader = JobLog(log, str(log))
    readings = []
    # 24 training batches/s, 160 an epoch (6.67 s), then 3.5 s of validation.
    shown = (3, 0)
    for t, (epoch, n) in ((1000.0, (3, 160)), (1010.2, (4, 160)), (1013.6, (5, 33)),
                          (1016.8, (5, 110))):
        # Every bar since the last read, each epoch's from 0, a refresh every 8 steps.
        written = [bar(e, k) for e in range(shown[0], epoch + 1)
                   for k in range(shown[1] if e == shown[0] else 0,
                                  (n if e == epoch else 160) + 1, 8)]
        shown = (epoch, n)
        with log.open("a") as fh:
            fh.write("\r".join([*written, bar(epoch, n)]) + "\r")
        os.utime(log, (t, t))
        reading = reader.read()
        assert reading is not None
        readings.append(reading)
    assert [r.value for r in readings] == [4 * 160, 5 * 160, 5 * 160 + 33, 5 * 160 + 110]
    assert readings[0].name == "epoch x N + it (job log)"
    # 270 training steps in 16.8 s (validation included: steps per second of the job).
    assert steps_per_second(readings) == pytest.approx(270 / 16.8, rel=0.01)


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


#: One step line as timestampers and loggers prefix it (``ts``, ``awk '{print
#: strftime(), $0}'``, a python -u log keeper, ``logging`` with ``%(asctime)s``,
#: torchrun's ``[rank0]:`` and ``[default0]:``, elapsed-time prefixes).
PREFIXES = {
    "ts": lambda t, i: f"{t:%b %d %H:%M:%S} step {i} | loss 0.5",
    "ts-iso": lambda t, i: f"{t:%Y-%m-%d %H:%M:%S}.{t.microsecond:06d} step {i} | loss 0.5",
    "awk-strftime": lambda t, i: f"{t:%a %b %e %H:%M:%S %Y} step {i} | loss 0.5",
    "keeper": lambda t, i: f"{t:%Y-%m-%dT%H:%M:%S}.{t.microsecond:06d} step {i} | loss 0.5",
    "logging": lambda t, i: (f"{t:%Y-%m-%d %H:%M:%S},{t.microsecond // 1000:03d} [rank0]: "
                             f"{'WARNING' if i % 7 == 0 else 'INFO'} step {i} | loss 0.5"),
    "torchrun": lambda t, i: f"[default0]:{t:%Y-%m-%d %H:%M:%S} | step: {i:>6} | lr 3e-4",
    "epoch-seconds": lambda t, i: f"{t.timestamp():.0f} step {i} loss 0.3",
    "elapsed": lambda t, i: f"[{(t - T0).total_seconds():8.2f}s] it {i} loss 0.3",
    "brackets": lambda t, i: f"[{t:%H:%M:%S}.{t.microsecond // 1000}] step={i} loss=0.3",
    "12-hour": lambda t, i: f"{t:%I:%M:%S %p} step {i} loss 0.3",
}
#: Just before midnight on the last day of April: the day, the weekday, the month
#: and AM/PM all change while the lines are read.
T0 = datetime(2024, 4, 30, 23, 59, 55)


@pytest.mark.parametrize("style", list(PREFIXES))
def test_a_step_is_found_behind_a_prefix_that_varies_from_line_to_line(style: str) -> None:
    t, times, lines = T0, [], []
    for i in range(1, 31):
        t += timedelta(seconds=0.4 + (i % 3) * 0.1)
        times.append(t)
        lines.append(PREFIXES[style](t, i))
    found = step_line(lines)
    assert found is not None and found[1] == 30, (style, lines[-3:])
    # Four lines around midnight (the day, weekday, month and AM/PM change after
    # the second), as aitop reads the tail of a log it attached to then.
    turn = next(i for i, when in enumerate(times) if when.day == 1)
    assert step_line(lines[turn - 2:turn + 2]) == (found[0], turn + 2), lines[turn - 2:turn + 2]


def test_words_that_vary_in_a_prefix_make_one_shape() -> None:
    a, _ = shape_of(normalise("Tue Apr 30 11:59:59 PM 2024 INFO step 5 | loss 0.5"))
    b, _ = shape_of(normalise("Wed May  1 12:00:00 AM 2024 WARNING step 6 | loss 0.5"))
    assert a == b
