"""Steps per second without instrumentation: read the training loop's counter.

``py-spy dump --locals`` shows the integer locals of every frame. The frame that
drives the training loop (learnt by the stack probe as the caller of the
DataLoader / forward / backward frames) usually holds a counter such as
``step``, ``global_step``, ``i`` or ``batch_idx``. Reading it every few seconds
and differencing gives steps/s. When no such counter is found the answer is
"unknown"; the engine never guesses a rate.

Note: module-level loops (``for x in loader:`` at the top of a script) keep their
variables in globals, which py-spy does not show; those jobs get "unknown".
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Sequence
from typing import Any

from .phases import shorten_path
from .pyspy import PySpyError, require_pyspy, run_dump
from .samples import StepCounterSample

_INT_RE = re.compile(r"^-?\d+$")


def parse_int_repr(text: object) -> int | None:
    """``'42'`` -> 42; anything that is not a plain integer literal -> None."""
    if not isinstance(text, str) or not _INT_RE.match(text.strip()):
        return None
    return int(text.strip())


def _frame_label(frame: dict[str, Any]) -> str:
    """The same label the stack probe gives a frame (``train (/job/train.py)``)."""
    path = str(frame.get("filename") or frame.get("short_filename") or "")
    return f"{frame.get('name')} ({shorten_path(path)})"


def find_thread(
    threads: Sequence[dict[str, Any]], thread_id: str | None
) -> dict[str, Any] | None:
    """The dumped thread with this OS thread id, else the main thread."""
    if thread_id is not None:
        for thread in threads:
            if str(thread.get("os_thread_id")) == thread_id:
                return thread
    for thread in threads:
        if thread.get("thread_name") == "MainThread":
            return thread
    return threads[0] if threads else None


def read_counter(
    dump: Sequence[dict[str, Any]],
    *,
    loop_frame: str,
    thread_id: str | None,
    counter_names: Sequence[str],
) -> tuple[str, int] | None:
    """The first counter name (in preference order) that the loop frame holds as an int."""
    thread = find_thread(dump, thread_id)
    if thread is None:
        return None
    for frame in thread.get("frames") or []:
        if _frame_label(frame) != loop_frame:
            continue
        values: dict[str, int] = {}
        for local in frame.get("locals") or []:
            value = parse_int_repr(local.get("repr"))
            if value is not None:
                values[str(local.get("name"))] = value
        for name in counter_names:
            if name in values:
                return name, values[name]
        return None
    return None


class StepProbe:
    """Reads the loop counter with one ``py-spy dump --locals`` per call."""

    def __init__(
        self, pid: int, counter_names: Sequence[str], *, binary: str | None = None
    ) -> None:
        self.pid = pid
        self.counter_names = tuple(counter_names)
        self.binary = binary or require_pyspy()

    def sample(self, loop_frame: str | None, thread_id: str | None) -> StepCounterSample:
        t = time.time()
        if loop_frame is None:
            return StepCounterSample(t, None, None, error="training loop frame not found yet")
        try:
            dump = json.loads(run_dump(self.binary, self.pid, locals_=True))
        except PySpyError as exc:
            if exc.kind in ("permission", "missing", "not_python"):
                raise
            return StepCounterSample(t, None, None, frame=loop_frame, error=str(exc))
        except json.JSONDecodeError:
            return StepCounterSample(t, None, None, frame=loop_frame, error="unreadable dump")
        found = read_counter(
            dump, loop_frame=loop_frame, thread_id=thread_id, counter_names=self.counter_names
        )
        if found is None:
            return StepCounterSample(
                t, None, None, frame=loop_frame, error="no integer step counter in the loop frame"
            )
        name, value = found
        return StepCounterSample(t, name, value, frame=loop_frame)


def counter_increments(
    samples: Sequence[StepCounterSample],
) -> list[tuple[StepCounterSample, StepCounterSample, int]]:
    """Consecutive readings of the newest counter and the steps between each pair.

    The one reading of a loop counter that every rate uses. Only the most recent
    counter name counts (the loop frame may change between readings). A decrease
    is a reset (a new epoch for ``i``/``batch_idx``): the steps after it are
    counted from zero.
    """
    named = [s for s in samples if s.value is not None and s.name is not None]
    if not named:
        return []
    name = named[-1].name
    same = [s for s in named if s.name == name]
    out = []
    for prev, cur in itertools.pairwise(same):
        assert prev.value is not None and cur.value is not None
        if cur.t <= prev.t:
            continue
        delta = cur.value - prev.value
        out.append((prev, cur, delta if delta >= 0 else cur.value))
    return out


def step_rates(samples: Sequence[StepCounterSample]) -> list[tuple[float, float]]:
    """``(t, steps/s)`` between consecutive readings (the rate's history)."""
    return [(cur.t, n / (cur.t - prev.t)) for prev, cur, n in counter_increments(samples)]


def steps_per_second(samples: Sequence[StepCounterSample]) -> float | None:
    """Rate of the counter over the samples; None unless it is clearly counting.

    Needs readings at least 2 s apart with some increase.
    """
    increments = counter_increments(samples)
    if not increments:
        return None
    span = increments[-1][1].t - increments[0][0].t
    increase = sum(n for _prev, _cur, n in increments)
    if span < 2.0 or increase <= 0:
        return None
    return increase / span
