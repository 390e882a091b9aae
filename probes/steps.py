"""Steps per second without instrumentation: read the training loop's counter.

``py-spy dump --locals`` shows the integer locals of every frame. The frame that
drives the training loop (learnt by the stack probe as the caller of the
DataLoader / forward / backward frames) usually holds a counter such as
``step``, ``global_step``, ``i`` or ``batch_idx``. Reading it every few seconds
and differencing gives steps/s. When no such counter is found the answer is
"unknown"; the engine never guesses a rate.

When the loop has no counter (``for x, y in loader:`` without ``enumerate``, a
generator around the loader, a module-level loop whose variables are globals,
which py-spy does not show), DataLoader worker processes still count: each
worker's ``_worker_loop`` holds ``idx``, the index of the batch it is fetching,
numbered across all workers. The highest index over the workers advances by one
per batch the loop consumes (it resets when an epoch starts a new iterator, which
the differencing treats as a reset). Each reading names its source.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .compile_frames import compile_sightings
from .job_log import JobLog
from .phases import shorten_path
from .pyspy import PySpyError, require_pyspy, run_dump
from .samples import LogEvent, StepCounterSample

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


#: The worker frame and the local that numbers the batches it fetches.
WORKER_FRAME = "_worker_loop"
WORKER_INDEX = "idx"
#: The counter name a reading from DataLoader workers carries.
WORKER_COUNTER = "worker batch index"


def read_worker_index(dump: Sequence[dict[str, Any]]) -> int | None:
    """``idx`` of a DataLoader worker's ``_worker_loop`` frame, if it is fetching now.

    torch deletes ``idx`` after sending each batch, so a worker parked on its
    index queue has none: the caller reads every worker and keeps the highest.
    """
    for thread in dump:
        for frame in thread.get("frames") or []:
            if str(frame.get("name", "")).rsplit(".", 1)[-1] != WORKER_FRAME:
                continue
            for local in frame.get("locals") or []:
                if local.get("name") == WORKER_INDEX:
                    return parse_int_repr(local.get("repr"))
    return None


#: Reads of the workers per step-counter sample when none is fetching a batch.
WORKER_INDEX_TRIES = 3
WORKER_INDEX_RETRY_S = 0.3


class StepProbe:
    """Reads the loop counter with one ``py-spy dump --locals`` per call."""

    def __init__(
        self, pid: int, counter_names: Sequence[str], *, binary: str | None = None
    ) -> None:
        self.pid = pid
        self.counter_names = tuple(counter_names)
        self.binary = binary or require_pyspy()
        self._loop_counted = False
        self._log = JobLog.of(pid)
        #: What the dumps showed torch.compile compiling, until taken (``frame_events``).
        self._frame_events: list[LogEvent] = []

    @property
    def log_name(self) -> str | None:
        """The job's log file this probe reads steps from, if its output goes to one."""
        return self._log.name if self._log else None

    def read_log(self) -> StepCounterSample | None:
        """The newest step the job printed to its log since the last call, if any."""
        return self._log.read() if self._log else None

    def log_events(self) -> list[LogEvent]:
        """What the log reads since the last call found (threads that died)."""
        return self._log.take_events() if self._log else []

    def frame_events(self) -> list[LogEvent]:
        """What torch.compile was compiling at each dump since the last call
        (``probes.compile_frames``), oldest first."""
        events, self._frame_events = self._frame_events, []
        return events

    def sample(
        self, loop_frame: str | None, thread_id: str | None, worker_pids: Sequence[int] = (),
        compiling: bool = False,
    ) -> StepCounterSample:
        """The loop's own counter, else the DataLoader workers' batch index.

        ``compiling``: the newest stack window shows torch.compile at work; the
        target is dumped even before its loop frame is known (a window of
        compilation holds few step samples to learn it from), to see what it
        compiles.
        """
        counted = self._loop_counter(loop_frame, thread_id, compiling)
        if counted.value is not None:
            self._loop_counted = True
            return counted
        if self._loop_counted or not worker_pids:
            # The loop has a counter, absent this moment (Lightning assigns
            # batch_idx after fetching): one source per series, not a mix.
            return counted
        from_workers = self._worker_index(worker_pids)
        return from_workers if from_workers.value is not None else counted

    def _worker_index(self, worker_pids: Sequence[int]) -> StepCounterSample:
        """The highest batch index a worker is fetching; tried again shortly when
        none is (all parked on a full prefetch queue, or a dump failed under load:
        a 15 s CI report once got one reading of five)."""
        t = time.time()
        values: list[int] = []
        for attempt in range(WORKER_INDEX_TRIES):
            if attempt:
                time.sleep(WORKER_INDEX_RETRY_S)
            t = time.time()
            values = [v for v in (self._one_worker_index(pid) for pid in worker_pids)
                      if v is not None]
            if values:
                break
        if not values:
            return StepCounterSample(t, None, None, error="no worker was fetching a batch")
        frame = f"{WORKER_FRAME} (torch/utils/data/_utils/worker.py)"
        return StepCounterSample(t, WORKER_COUNTER, max(values), frame=frame)

    def _one_worker_index(self, pid: int) -> int | None:
        try:
            dump = json.loads(run_dump(self.binary, pid, locals_=True))
        except (PySpyError, json.JSONDecodeError):
            return None  # a worker that just exited or restarted; the others count
        return read_worker_index(dump)

    def _loop_counter(self, loop_frame: str | None, thread_id: str | None,
                      compiling: bool = False) -> StepCounterSample:
        t = time.time()
        if loop_frame is None and not compiling:
            return StepCounterSample(t, None, None, error="training loop frame not found yet")
        try:
            dump = json.loads(run_dump(self.binary, self.pid, locals_=True))
        except PySpyError as exc:
            if exc.kind in ("permission", "missing", "not_python"):
                raise
            return StepCounterSample(t, None, None, frame=loop_frame, error=str(exc))
        except json.JSONDecodeError:
            return StepCounterSample(t, None, None, frame=loop_frame, error="unreadable dump")
        # The value was read at the end of py-spy's run, after its start-up and
        # attach (tens to hundreds of ms, more on a loaded box): stamped then, a
        # loop of a thousand steps a second reads within a few steps.
        t = time.time()
        self._frame_events += compile_sightings(dump, t, thread_id)
        if loop_frame is None:
            return StepCounterSample(t, None, None, error="training loop frame not found yet")
        found = read_counter(
            dump, loop_frame=loop_frame, thread_id=thread_id, counter_names=self.counter_names
        )
        if found is None:
            # Said as what was looked for (the names tried), so that a loop
            # counting in another name shows why its counter was not read.
            known = ", ".join(self.counter_names[:4])
            return StepCounterSample(
                t, None, None, frame=loop_frame,
                error=f"no integer local of a step counter's name ({known}, ...) in the loop frame",
            )
        name, value = found
        return StepCounterSample(t, name, value, frame=loop_frame)


def counter_increments(
    samples: Sequence[StepCounterSample],
) -> list[tuple[StepCounterSample, StepCounterSample, int]]:
    """Consecutive readings of the newest counter and the steps between each pair.

    The one reading of a loop counter that every rate uses. Only the most recent
    counter name counts (the loop frame may change between readings). A drop to
    half or less is a reset (a new epoch for ``i``/``batch_idx``, a new iterator
    for the workers' index): the interval counts the rest of the old epoch (up
    to the highest value seen, a lower bound on its length) and the new one's
    steps. A smaller
    step back (seen on the workers' index, a few batches behind the last reading)
    is a misreading: that reading is skipped, the interval runs on to the next.
    So is a spike: a reading over twice every other one, that the next falls
    from by half or more while carrying on from the reading before (255, 9807,
    378 from a workers' index in a CI run: no new epoch, whose 378 steps in 2 s
    had tripled the rate).
    """
    named = [s for s in samples if s.value is not None and s.name is not None]
    if not named:
        return []
    name = named[-1].name
    same = [s for s in named if s.name == name]
    spikes = _spikes(same)
    same = [s for i, s in enumerate(same) if i not in spikes]
    out: list[tuple[StepCounterSample, StepCounterSample, int]] = []
    base = same[0]
    peak = max(s.value or 0 for s in same)
    for i, cur in enumerate(same[1:], start=1):
        assert base.value is not None and cur.value is not None
        if cur.t <= base.t:
            continue
        if cur.value >= base.value:
            out.append((base, cur, cur.value - base.value))
        elif cur.value <= base.value // 2:
            # A new epoch: the steps to the end of the last one (its length is
            # at least the highest value seen) and those of the new one.
            out.append((base, cur, max(peak - base.value, 0) + cur.value))
        elif _base_was_misread(base, cur, same[i + 1:]):
            # The readings carry on from here: the base was the misreading.
            if out and out[-1][1] is base:
                before = out.pop()[0]
                assert before.value is not None
                if cur.value >= before.value:
                    out.append((before, cur, cur.value - before.value))
        else:
            continue  # a small step back is a misreading, not a new epoch: skip it
        base = cur
    return out


def _base_was_misread(base: StepCounterSample, cur: StepCounterSample,
                      later: Sequence[StepCounterSample]) -> bool:
    """Whether a small step back from ``base`` to ``cur`` is ``base``'s error, not
    ``cur``'s: the next reading carries on from ``cur`` and still stays under
    ``base`` (577, 313, 369, 396, 425 in a CI run: a first reading misread high
    made every later one a "step back", and the report had no rate at all).
    """
    if not later:
        return False
    nxt = later[0].value
    assert base.value is not None and cur.value is not None and nxt is not None
    return cur.value <= nxt < base.value


def _spikes(same: Sequence[StepCounterSample]) -> set[int]:
    """Indexes of misread highs (``counter_increments``): over twice every other
    reading, with the next reading between the one before and half the spike."""
    values = [s.value or 0 for s in same]
    if len(values) < 3:
        return set()
    top, second = sorted(values, reverse=True)[:2]
    out = set()
    for i in range(1, len(values) - 1):
        before, value, after = values[i - 1], values[i], values[i + 1]
        highest_other = second if value == top else top
        if before <= after <= value // 2 and value > 2 * highest_other:
            out.add(i)
    return out


def step_rates(samples: Sequence[StepCounterSample]) -> list[tuple[float, float]]:
    """``(t, steps/s)`` between consecutive readings (the rate's history)."""
    return [(cur.t, n / (cur.t - prev.t)) for prev, cur, n in counter_increments(samples)]


#: An interval this many times faster than the median is a misreading (a
#: counter that jumped, a reset mistaken for progress), not the job's pace.
OUTLIER_FACTOR = 3.0


T = TypeVar("T")


def usual_intervals(intervals: Sequence[T], rate: Callable[[T], float]) -> list[T]:
    """The intervals whose rate is at most ``OUTLIER_FACTOR`` times the median's
    (all of them when there are fewer than three to take a median of)."""
    if len(intervals) < 3:
        return list(intervals)
    rates = sorted(rate(i) for i in intervals)
    half = len(rates) // 2
    median = rates[half] if len(rates) % 2 else (rates[half - 1] + rates[half]) / 2
    return [i for i in intervals if rate(i) <= OUTLIER_FACTOR * max(median, 1e-9)]


def steps_per_second(samples: Sequence[StepCounterSample]) -> float | None:
    """Rate of the counter over the samples; None unless it is clearly counting.

    Needs readings at least 2 s apart with some increase. Intervals more than
    ``OUTLIER_FACTOR`` times faster than the median interval's rate are left out
    (with their time), so one bad reading cannot multiply the rate.
    """
    increments = counter_increments(samples)
    if not increments:
        return None
    kept = usual_intervals(increments, lambda i: i[2] / (i[1].t - i[0].t))
    span = sum(cur.t - prev.t for prev, cur, _n in kept)
    increase = sum(n for _prev, _cur, n in kept)
    if span < 2.0 or increase <= 0:
        return None
    return increase / span
