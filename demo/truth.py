"""The demo jobs' ground truth: cumulative seconds per phase, as JSON lines.

Torch-free, so that it can be read (and its phase names imported) anywhere.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

#: Phases the jobs time. ``eval`` is the time inside ``evaluate()`` (0.0 when a
#: job never evaluates); steps count training steps only.
PHASES: tuple[str, ...] = ("data_wait", "forward", "backward", "optimizer", "checkpoint", "eval")


class Truth:
    """Cumulative phase timers, appended as JSON lines for tests to read."""

    def __init__(self, path: Path | None, phases: tuple[str, ...] = PHASES) -> None:
        self.path = path
        self.totals = dict.fromkeys(phases, 0.0)
        self.steps = 0
        self.started = time.time()
        self._last_write = 0.0
        self._ready_marked = False

    def add(self, phase: str, seconds: float) -> None:
        self.totals[phase] += seconds

    @contextlib.contextmanager
    def timing(self, phase: str) -> Iterator[None]:
        """Time a long phase (a save, an evaluation pass) into ``phase``.

        Stopped inside it (SIGTERM, Ctrl-C), the time spent so far is counted and
        written at once: a test's window that ends inside the phase then reads
        what the job did up to its stop, not the record from before the phase.
        """
        started = time.perf_counter()
        try:
            yield
        except BaseException:
            self.add(phase, time.perf_counter() - started)
            self.maybe_write(force=True)
            raise
        self.add(phase, time.perf_counter() - started)

    def count(self, steps: int, ready_file: Path | None = None) -> None:
        """The steps taken so far, written as ``maybe_write`` allows; ``ready_file``
        is made once two are done (past start-up and the first step's lazy
        imports): the moment tests and ``aitop demo`` wait for."""
        self.steps = steps
        self.maybe_write()
        if steps >= 2 and ready_file is not None and not self._ready_marked:
            ready_file.touch()
            self._ready_marked = True

    def maybe_write(self, force: bool = False) -> None:
        """Append a record, at most every 0.5 s unless forced."""
        now = time.time()
        if self.path is None or (not force and now - self._last_write < 0.5):
            return
        self._last_write = now
        record = {"t": now, "steps": self.steps, "elapsed": now - self.started, **self.totals}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")


def memory_truth_path(truth_path: Path) -> Path:
    """Where a job with truth ``truth_path`` records its own memory (``memory_jobs.py``):
    JSON lines, each ``{"t", "epoch", "processes": [{"pid", "role", "rss", "uss",
    "pss"}]}`` (bytes) every second, or ``{"t", "epoch_start"}`` as an epoch starts."""
    return truth_path.with_name(truth_path.stem + ".memory.jsonl")


def read_memory_truth(truth_path: Path) -> list[dict[str, object]]:
    """The records of :func:`memory_truth_path`, oldest first."""
    path = memory_truth_path(truth_path)
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
