"""The session: bounded ring buffers of samples and window aggregates over them.

Probes add samples from their own threads; readers (rules, panels, exports) take
consistent copies. Memory stays bounded however long the session runs: each kind
of sample lives in a ``deque`` with a fixed ``maxlen``.
"""

from __future__ import annotations

import math
import statistics
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .ranks import Job
from .samples import (
    EnvironmentInfo,
    GpuSample,
    HostSample,
    LogEvent,
    ProcessTreeSample,
    StackWindow,
    StepCounterSample,
    StorageSample,
)
from .status import ProbeStatus
from .step_cycles import cycle_readings
from .step_sources import StepReadings, choose_step_readings
from .warmup import STEP_EVIDENCE_SAMPLES, CompileWarmup, WarmupTracker

T = TypeVar("T")

#: Default ring capacity: 30 minutes of 1 Hz samples per kind.
DEFAULT_CAPACITY = 1800

PHASES: tuple[str, ...] = (
    "data_wait",
    "forward",
    "backward",
    "optimizer",
    "eval",
    "checkpoint",
    "sync",
    "comm",
    "compile",
    "other",
)

#: Phases only a step runs (a batch fetched, a pass, a collective, a host sync):
#: building an optimizer reads as "optimizer" and loading a checkpoint as
#: "checkpoint", so neither marks a step.
STEP_EVIDENCE_PHASES: tuple[str, ...] = ("data_wait", "forward", "backward", "eval", "sync",
                                         "comm")
#: Seconds of stack windows whose step-phase samples add up to the proof. A
#: server whose model takes a thirtieth of its serving thread's time shows one
#: forward sample in a 6-s window at 10 Hz: counted window by window it stayed
#: "warming up" for the whole of a 16-s watch. Half a minute of a loading job
#: seldom holds three stray samples of a step's phases.
STEP_EVIDENCE_LOOKBACK_S = 30.0


@dataclass(frozen=True, slots=True)
class Aggregate:
    """Summary of one metric's values over a time window."""

    mean: float
    p5: float
    p95: float
    last: float
    minimum: float
    maximum: float
    stdev: float
    #: Least-squares slope in units per minute (positive: rising).
    trend: float
    count: int


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (q in 0..100)."""
    if not sorted_values:
        raise ValueError("percentile of no values")
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    frac = pos - lo
    return sorted_values[lo] * (1 - frac) + sorted_values[hi] * frac


def aggregate(points: Sequence[tuple[float, float]]) -> Aggregate | None:
    """Aggregate ``(t, value)`` points; ``None`` when there are none."""
    if not points:
        return None
    values = [v for _, v in points]
    ordered = sorted(values)
    mean = statistics.fmean(values)
    # In floats: statistics.pstdev sums in exact fractions, which made it most of
    # an evaluation's cost (docs/benchmarks.md, Where aitop's CPU goes).
    stdev = (math.sqrt(math.fsum((v - mean) ** 2 for v in values) / len(values))
             if len(values) > 1 else 0.0)
    trend = 0.0
    if len(points) > 2:
        ts = [t for t, _ in points]
        t_mean = statistics.fmean(ts)
        var_t = sum((t - t_mean) ** 2 for t in ts)
        if var_t > 0:
            cov = sum((t - t_mean) * (v - mean) for t, v in points)
            trend = cov / var_t * 60.0
    return Aggregate(
        mean=mean,
        p5=percentile(ordered, 5),
        p95=percentile(ordered, 95),
        last=values[-1],
        minimum=ordered[0],
        maximum=ordered[-1],
        stdev=stdev,
        trend=trend,
        count=len(values),
    )


def series_points(
    samples: Sequence[T], value: Callable[[T], float | None],
    times: Sequence[float] | None = None,
) -> list[tuple[float, float]]:
    """``(t, value)`` points of samples, skipping unknown values: many series read
    one ring's window, which is then walked once (``Ring.window``), its samples'
    times taken once too (``times``, one per sample)."""
    stamps = times if times is not None else [sample_time(s) for s in samples]
    points: list[tuple[float, float]] = []
    for t, s in zip(stamps, samples, strict=True):
        v = value(s)
        if v is not None and v == v:  # NaN is the one value unequal to itself
            points.append((t, float(v)))
    return points


#: Windows a ring keeps between two appends: one evaluation reads each ring's
#: window a few times over (every series, then the families reading it again;
#: about 3 reads per distinct window), and a replay scrubbing through time asks for
#: ever new ones, so the kept ones are bounded.
KEPT_WINDOWS = 16


class Ring(Generic[T]):
    """A thread-safe bounded buffer of samples in arrival order."""

    def __init__(self, capacity: int) -> None:
        self._items: deque[T] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        #: ``window``'s answers since the last append, by bounds.
        self._windows: dict[tuple[float, float], list[T]] = {}

    def append(self, item: T) -> None:
        with self._lock:
            self._items.append(item)
            self._windows.clear()

    def items(self) -> list[T]:
        with self._lock:
            return list(self._items)

    def last(self) -> T | None:
        with self._lock:
            return self._items[-1] if self._items else None

    def at_or_before(self, t: float) -> T | None:
        """The newest item stamped at or before ``t`` (walks back from the end)."""
        with self._lock:
            for item in reversed(self._items):
                if sample_time(item) <= t:
                    return item
        return None

    def window(self, lo: float, hi: float) -> list[T]:
        """Items stamped in ``(lo, hi]``, oldest first.

        Walks back from the newest item and stops at the window's start, so the
        cost follows the window, not the ring's capacity (rules read the last
        20 s of a ring that may hold 30 minutes, every second); the same window
        asked again before the next append is the list kept from the first time,
        copied.
        """
        bounds = (lo, hi)
        with self._lock:
            kept = self._windows.get(bounds)
            if kept is not None:
                return list(kept)
            out: list[T] = []
            for item in reversed(self._items):
                t = sample_time(item)
                if t <= lo:
                    break
                if t <= hi:
                    out.append(item)
            out.reverse()
            if len(self._windows) >= KEPT_WINDOWS:
                self._windows.clear()
            self._windows[bounds] = out
            return list(out)

    def __len__(self) -> int:
        return len(self._items)

    @property
    def capacity(self) -> int:
        return self._items.maxlen or 0


def sample_time(sample: object) -> float:
    """The time a sample describes (a stack window is stamped at its end)."""
    if isinstance(sample, StackWindow):
        return sample.t_end
    return float(sample.t)  # type: ignore[attr-defined]


#: The session's rings by attribute name: the one list that snapshots, replays
#: and time cursors walk.
RING_KINDS: tuple[str, ...] = ("processes", "host", "gpu", "stacks", "steps", "storage",
                               "events")


def summed_phase_counts(windows: Sequence[StackWindow]) -> tuple[dict[str, int], int]:
    """Each phase's samples over the stack windows py-spy read, and all their samples."""
    counts = dict.fromkeys(PHASES, 0)
    total = 0
    for w in windows:
        if w.error is not None:
            continue
        for phase, n in w.phase_counts.items():
            counts[phase] = counts.get(phase, 0) + n
        total += w.total_samples
    return counts, total


class Session:
    """Everything measured about one target, bounded in memory.

    The UI, the rules and the exporter all read from a session; whether it is
    being filled by live probes or loaded from a recording makes no difference.
    """

    def __init__(self, target_pid: int, capacity: int = DEFAULT_CAPACITY) -> None:
        self.target_pid = target_pid
        self.capacity = capacity
        self.processes: Ring[ProcessTreeSample] = Ring(capacity)
        self.host: Ring[HostSample] = Ring(capacity)
        self.gpu: Ring[GpuSample] = Ring(capacity)
        self.stacks: Ring[StackWindow] = Ring(capacity)
        self.steps: Ring[StepCounterSample] = Ring(capacity)
        self.storage: Ring[StorageSample] = Ring(capacity)
        #: What the job's log says happened (a thread that died on an exception).
        self.events: Ring[LogEvent] = Ring(capacity)
        self.environment: EnvironmentInfo | None = None
        #: What each probe is doing now, and why when it is not sampling.
        self.probe_status: dict[str, ProbeStatus] = {}
        self.started_at: float | None = None
        #: When the training thread was first seen taking a step (``STEP_EVIDENCE_PHASES``):
        #: before it, the job is loading or setting up, and its steps cannot be judged.
        self.first_step_at: float | None = None
        #: The first compilation and the first proof of steps (``probes.warmup``).
        self.warmup = WarmupTracker()
        #: When the target was first seen gone, and its exit status if known.
        self.target_exited_at: float | None = None
        self.target_exit_status: int | None = None
        #: The multi-process job around the target (its launcher and ranks), when
        #: it was looked for at attach.
        self.job: Job | None = None
        self._rings: dict[type, Ring[Any]] = {
            ProcessTreeSample: self.processes,
            HostSample: self.host,
            GpuSample: self.gpu,
            StackWindow: self.stacks,
            StepCounterSample: self.steps,
            StorageSample: self.storage,
            LogEvent: self.events,
        }

    @property
    def compile_warmup(self) -> CompileWarmup | None:
        """The first torch.compile compilation seen, kept apart from recompilation."""
        return self.warmup.warmup

    @property
    def trained_at(self) -> float | None:
        """When steps were first proven: from then on the job is never warming up."""
        return self.warmup.trained_at

    def step_readings(self, lo: float | None = None, hi: float | None = None) -> StepReadings:
        """The readings steps/s comes from in ``(lo, hi]`` (all when not given): the
        step probe's, and the step cycles of the stack windows ending then."""
        if lo is None or hi is None:
            steps, windows = self.steps.items(), self.stacks.items()
        else:
            steps, windows = self.steps.window(lo, hi), self.stacks.window(lo, hi)
        counts, total = summed_phase_counts(windows)
        evaluating = counts["eval"] / total if total else 0.0
        return choose_step_readings([*steps, *cycle_readings(windows)], evaluating)

    def probe_text(self, name: str, default: str) -> str:
        """A probe's status as a person reads it, or ``default`` before it has one."""
        status = self.probe_status.get(name)
        return status.text if status is not None else default

    def rings(self) -> dict[str, Ring[Any]]:
        """Every ring by its attribute name (``RING_KINDS``), in that order."""
        return {name: getattr(self, name) for name in RING_KINDS}

    def add(self, sample: object) -> None:
        """Store a sample in the ring for its kind."""
        if isinstance(sample, EnvironmentInfo):
            self.environment = sample
            return
        ring = self._rings.get(type(sample))
        if ring is None:
            raise TypeError(f"not a sample kind the session stores: {type(sample).__name__}")
        if self.started_at is None:
            self.started_at = sample_time(sample)
        if self.first_step_at is None:
            self.first_step_at = self._step_evidence(sample)
        self.warmup.add(sample)
        if self.first_step_at is None:
            self.first_step_at = self.warmup.trained_at
        if isinstance(sample, ProcessTreeSample) and not sample.alive:
            if self.target_exited_at is None:
                self.target_exited_at = sample.t
            if sample.exit_status is not None:
                self.target_exit_status = sample.exit_status
        ring.append(sample)

    def _step_evidence(self, sample: object) -> float | None:
        """When ``sample`` shows a step taken: a stack window that brings the samples
        in a step's own phases over the last ``STEP_EVIDENCE_LOOKBACK_S`` to a few,
        or the loop's counter moving; None otherwise."""
        if isinstance(sample, StackWindow) and sample.error is None:
            earlier = self.stacks.window(sample.t_end - STEP_EVIDENCE_LOOKBACK_S, sample.t_end)
            seen = sum(w.phase_counts.get(p, 0) for w in (*earlier, sample)
                       if w.error is None for p in STEP_EVIDENCE_PHASES)
            return sample.t_end if seen >= STEP_EVIDENCE_SAMPLES else None
        if isinstance(sample, StepCounterSample) and sample.value is not None:
            # The newest reading of the same count (the probe adds other sources'
            # readings, and notes of why they could not be read, between them).
            last = next((r for r in reversed(self.steps.items())
                         if r.name == sample.name and r.value is not None), None)
            if last is not None and last.value != sample.value:
                return sample.t
        return None

    def latest_time(self) -> float | None:
        """The time of the newest sample of any kind."""
        lasts = [r.last() for r in self._rings.values()]
        times = [sample_time(s) for s in lasts if s is not None]
        return max(times) if times else None

    # ------------------------------------------------------------ windows

    def series(
        self,
        ring: Ring[T],
        value: Callable[[T], float | None],
        now: float,
        window_s: float,
    ) -> list[tuple[float, float]]:
        """``(t, value)`` points of a ring over a window, skipping unknown values."""
        return series_points(ring.window(now - window_s, now), value)

    def aggregate(
        self,
        ring: Ring[T],
        value: Callable[[T], float | None],
        now: float,
        window_s: float,
    ) -> Aggregate | None:
        return aggregate(self.series(ring, value, now, window_s))

    def phase_counts(self, now: float, window_s: float) -> tuple[dict[str, int], int]:
        """Summed phase sample counts of the stack windows ending in the window."""
        return summed_phase_counts(self.stacks.window(now - window_s, now))

    def phase_fractions(self, now: float, window_s: float) -> dict[str, float] | None:
        """Fraction of the training thread's time in each phase; sums to 1."""
        counts, total = self.phase_counts(now, window_s)
        if total <= 0:
            return None
        return {phase: n / total for phase, n in counts.items()}
