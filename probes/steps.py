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
per batch the loop consumes, ahead of it by up to the prefetch depth, and starts
again at 0 with each epoch's iterator. Each tick reads it twice, a moment apart:
the short interval bounds how far it moves between two readings, so that an
epoch that turns over between readings (the count seen modulo the epoch's
length) is caught rather than read as a slow loop (``probes.step_sources``).

Each reading names its source; a source that could not be read leaves a reading
that says why (the report lists every source tried). The arithmetic of rates
is ``probes.step_rate``'s.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from typing import Any

from .compile_frames import compile_sightings
from .job_log import JobLogs
from .phases import shorten_path
from .pyspy import PySpyError, require_pyspy, run_dump
from .redact import redact_text
from .samples import LogEvent, StepCounterSample
from .step_rate import (
    OUTLIER_FACTOR,
    counter_increments,
    step_rates,
    steps_per_second,
    usual_intervals,
)

#: The rate arithmetic, importable from here as it always was.
__all__ = [
    "OUTLIER_FACTOR",
    "StepProbe",
    "counter_increments",
    "find_thread",
    "parse_int_repr",
    "read_counter",
    "read_worker_dataset",
    "read_worker_index",
    "step_rates",
    "steps_per_second",
    "usual_intervals",
]

_INT_RE = re.compile(r"^-?\d+$")
#: No count of steps reaches this (a trillion): py-spy reads a local while the
#: job runs, and a value it reads mid-update can be any int, even an address
#: (140,467,681,431,728 from Lightning's batch_idx at 1,000 steps/s); such a
#: value, or a negative one, is no reading of the count.
MAX_COUNT = 10**12


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
    """The first counter name (in preference order) that the loop frame holds as an
    int; where it holds none, the innermost caller of it that does (a loop in a
    ``train_one_epoch`` whose caller counts ``global_step``)."""
    found = read_counter_frame(dump, loop_frame=loop_frame, thread_id=thread_id,
                               counter_names=counter_names)
    return None if found is None else (found[0], found[1])


def read_counter_frame(
    dump: Sequence[dict[str, Any]],
    *,
    loop_frame: str,
    thread_id: str | None,
    counter_names: Sequence[str],
) -> tuple[str, int, str] | None:
    """``read_counter``'s name and value, and the label of the frame that holds it."""
    thread = find_thread(dump, thread_id)
    if thread is None:
        return None
    frames = list(thread.get("frames") or [])  # innermost first
    labels = [_frame_label(f) for f in frames]
    if loop_frame not in labels:
        return None
    for frame, label in zip(frames[labels.index(loop_frame):], labels[labels.index(loop_frame):],
                            strict=True):
        values: dict[str, int] = {}
        for local in frame.get("locals") or []:
            value = parse_int_repr(local.get("repr"))
            if value is not None:
                values[str(local.get("name"))] = value
        for name in counter_names:
            if name in values:
                # A misread counter is no reading this time, not another count's.
                return (name, values[name], label) if 0 <= values[name] < MAX_COUNT else None
    return None


#: The worker frame and the local that numbers the batches it fetches.
WORKER_FRAME = "_worker_loop"
WORKER_INDEX = "idx"
#: The worker frame's argument that names the dataset it loads, and the most of
#: it kept (py-spy shows an object as its class and address; a plain list as
#: its first items).
WORKER_DATASET = "dataset"
WORKER_DATASET_CHARS = 80
#: The counter name a reading from DataLoader workers carries.
WORKER_COUNTER = "worker batch index"


def _worker_locals(dump: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The locals (arguments included) of a DataLoader worker's ``_worker_loop``
    frame, by name; None if the dump holds no such frame."""
    for thread in dump:
        for frame in thread.get("frames") or []:
            if str(frame.get("name", "")).rsplit(".", 1)[-1] == WORKER_FRAME:
                return {str(local.get("name")): local.get("repr")
                        for local in frame.get("locals") or []}
    return None


def read_worker_index(dump: Sequence[dict[str, Any]]) -> int | None:
    """``idx`` of a DataLoader worker's ``_worker_loop`` frame, if it is fetching now.

    torch deletes ``idx`` after sending each batch, so a worker parked on its
    index queue has none: the caller reads every worker and keeps the highest.
    """
    found = _worker_locals(dump)
    return parse_int_repr(found.get(WORKER_INDEX)) if found else None


def read_worker_dataset(dump: Sequence[dict[str, Any]]) -> str | None:
    """The dataset a DataLoader worker loads, as py-spy shows the object
    (``<Images at 0x7f3a..>``: its class and address, never its contents).

    Workers forked for one loader share its dataset's address; a job's
    training and evaluation loaders have one each, and the batch index each
    worker counts is its own loader's.
    """
    found = _worker_locals(dump)
    value = found.get(WORKER_DATASET) if found else None
    return redact_text(str(value)[:WORKER_DATASET_CHARS]) if value is not None else None


#: A loop counter that moves this many steps or fewer between readings is slow:
#: the collector reads it every ``steps_slow_interval_s`` (``probes.cadence``).
SLOW_COUNTER_STEPS = 2
#: Reads of the workers per step-counter sample when none is fetching a batch.
WORKER_INDEX_TRIES = 3
WORKER_INDEX_RETRY_S = 0.3
#: The second reading of the workers' index follows the first after this long.
WORKER_PAIR_GAP_S = 0.3
#: Where a reading from the workers says it came from.
WORKER_SOURCE = "workers"
WORKER_FRAME_LABEL = f"{WORKER_FRAME} (torch/utils/data/_utils/worker.py)"


class StepProbe:
    """Reads the loop counter with one ``py-spy dump --locals`` per call, the
    workers' batch index where the loop has none, and the job's log."""

    def __init__(
        self, pid: int, counter_names: Sequence[str], *, binary: str | None = None
    ) -> None:
        self.pid = pid
        self.counter_names = tuple(counter_names)
        self.binary = binary or require_pyspy()
        self._loop_counted = False
        #: Why the newest dump that ran found no counter: what a dump that fails
        #: on a busy box (py-spy's "Failed to get stack traces") still says.
        self._loop_reason: str | None = None
        self._log = JobLogs.of(pid)
        #: What the dumps showed torch.compile compiling, until taken (``frame_events``).
        self._frame_events: list[LogEvent] = []

    @property
    def log_name(self) -> str | None:
        """The file this probe reads printed steps from, if the job's output reaches one."""
        return self._log.name

    @property
    def log_via(self) -> str | None:
        """The pipe's reader that writes that file (``tee (PID 812)``), if not the job."""
        return self._log.via

    def read_log(self) -> StepCounterSample | None:
        """The newest step the job printed since the last call, if any."""
        return self._log.read()

    def log_events(self) -> list[LogEvent]:
        """What the log reads since the last call found (threads that died)."""
        return self._log.take_events()

    def frame_events(self) -> list[LogEvent]:
        """What torch.compile was compiling at each dump since the last call
        (``probes.compile_frames``), oldest first."""
        events, self._frame_events = self._frame_events, []
        return events

    def sample(
        self, loop_frame: str | None, thread_id: str | None, worker_pids: Sequence[int] = (),
        compiling: bool = False,
    ) -> list[StepCounterSample]:
        """The loop's own counter; the DataLoader workers' batch index where the loop
        has none; and why the log gave no step yet, while it has given none.

        ``compiling``: the newest stack window shows torch.compile at work; the
        target is dumped even before its loop frame is known (a window of
        compilation holds few step samples to learn it from), to see what it
        compiles.
        """
        counted = self._loop_counter(loop_frame, thread_id, compiling)
        out = [counted]
        if counted.value is not None:
            self._loop_counted = True
        elif not self._loop_counted:
            # A loop whose counter is absent this moment (Lightning assigns
            # batch_idx after fetching) keeps one source per series, not a mix.
            out += self._worker_index(worker_pids)
        if self._log.chosen is None:
            out.append(StepCounterSample(counted.t, None, None, error=self._log.status(),
                                         source="log"))
        return out

    def _worker_index(self, worker_pids: Sequence[int]) -> list[StepCounterSample]:
        """The highest batch index a worker is fetching, read twice
        (``WORKER_PAIR_GAP_S`` apart); tried again shortly when none is (all
        parked on a full prefetch queue, or a dump failed under load: a 15 s CI
        report once got one reading of five)."""
        if not worker_pids:
            return [StepCounterSample(time.time(), None, None, source=WORKER_SOURCE,
                                      error="the job has no DataLoader workers")]
        first = self._tries(worker_pids, paired=False)
        if first is None:
            return [StepCounterSample(time.time(), None, None, source=WORKER_SOURCE,
                                      error="no worker was fetching a batch")]
        time.sleep(WORKER_PAIR_GAP_S)
        second = self._tries(worker_pids, paired=True)
        return [first] if second is None else [first, second]

    def _tries(self, worker_pids: Sequence[int], *, paired: bool) -> StepCounterSample | None:
        """``_highest_index``, tried up to ``WORKER_INDEX_TRIES`` times."""
        for attempt in range(WORKER_INDEX_TRIES):
            if attempt:
                time.sleep(WORKER_INDEX_RETRY_S)
            found = self._highest_index(worker_pids, paired=paired)
            if found is not None:
                return found
        return None

    def _highest_index(self, worker_pids: Sequence[int],
                       paired: bool = False) -> StepCounterSample | None:
        """One reading of every worker: the highest index, stamped when it was read."""
        found: list[tuple[int, float]] = []
        loaders: set[str] = set()
        for pid in worker_pids:
            read = self._one_worker_index(pid)
            if read is not None:
                found.append((read[0], time.time()))
                if read[1] is not None:
                    loaders.add(read[1])
        if not found:
            return None
        value, t = max(found)
        return StepCounterSample(t, WORKER_COUNTER, value, frame=WORKER_FRAME_LABEL,
                                 source=WORKER_SOURCE, paired=paired,
                                 loader=", ".join(sorted(loaders)) or None)

    def _one_worker_index(self, pid: int) -> tuple[int, str | None] | None:
        """The batch index one worker is fetching, and the dataset it loads."""
        try:
            dump = json.loads(run_dump(self.binary, pid, locals_=True))
        except (PySpyError, json.JSONDecodeError):
            return None  # a worker that just exited or restarted; the others count
        value = read_worker_index(dump)
        return None if value is None else (value, read_worker_dataset(dump))

    def _loop_counter(self, loop_frame: str | None, thread_id: str | None,
                      compiling: bool = False) -> StepCounterSample:
        t = time.time()
        if loop_frame is None and not compiling:
            return self._no_counter(t, None, "training loop frame not found yet")
        try:
            dump = json.loads(run_dump(self.binary, self.pid, locals_=True))
        except PySpyError as exc:
            if exc.kind in ("permission", "missing", "not_python"):
                raise
            return self._failed_dump(t, loop_frame, str(exc))
        except json.JSONDecodeError:
            return self._failed_dump(t, loop_frame, "unreadable dump")
        # The value was read at the end of py-spy's run, after its start-up and
        # attach (tens to hundreds of ms, more on a loaded box): stamped then, a
        # loop of a thousand steps a second reads within a few steps.
        t = time.time()
        self._frame_events += compile_sightings(dump, t, thread_id)
        if loop_frame is None:
            return self._no_counter(t, None, "training loop frame not found yet")
        found = read_counter_frame(
            dump, loop_frame=loop_frame, thread_id=thread_id, counter_names=self.counter_names
        )
        if found is None:
            # Said as what was looked for (the names tried), so that a loop
            # counting in another name shows why its counter was not read.
            known = ", ".join(self.counter_names[:4])
            return self._no_counter(
                t, loop_frame, f"no integer local of a step counter's name ({known}, ...) in "
                               "the loop frame or its callers")
        name, value, frame = found
        self._loop_reason = None
        return StepCounterSample(t, name, value, frame=frame)

    def _no_counter(self, t: float, frame: str | None, why: str) -> StepCounterSample:
        """A reading with no counter, and why: the reason a later failed dump keeps."""
        self._loop_reason = why
        return StepCounterSample(t, None, None, frame=frame, error=why)

    def _failed_dump(self, t: float, frame: str | None, failure: str) -> StepCounterSample:
        """A dump that failed says why the dumps before it found no counter, if they
        found none: one failure under load is not the loop's reason."""
        why = (failure if self._loop_reason is None
               else f"{self._loop_reason} (the newest dump failed: {failure})")
        return StepCounterSample(t, None, None, frame=frame, error=why)


