"""Reading the session at a time ``now``: latest samples, series and sums.

Pure functions over samples, no Textual. Everything takes ``now`` and ignores
samples after it, which is what makes a replay cursor show the past truthfully.
"""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from aitop.probes.samples import (
    GpuDevice,
    GpuSample,
    ProcessTreeSample,
    StackWindow,
    StorageSample,
    hot_frame_counts,
)
from aitop.probes.session import Ring, sample_time

T = TypeVar("T")


def upto(ring: Ring[T] | Sequence[T], now: float) -> list[T]:
    """The samples of a ring stamped at or before ``now``, in arrival order."""
    items = ring.items() if isinstance(ring, Ring) else list(ring)
    times = [sample_time(s) for s in items]
    if times and times == sorted(times):
        return items[: bisect.bisect_right(times, now)]
    return [s for s, t in zip(items, times, strict=True) if t <= now]


def latest(ring: Ring[T] | Sequence[T], now: float) -> T | None:
    """The newest sample at or before ``now``.

    On a Ring this walks back from the newest sample: panels ask for it every
    refresh, and the cost must not grow with the length of the session.
    """
    if isinstance(ring, Ring):
        return ring.at_or_before(now)
    items = upto(ring, now)
    return items[-1] if items else None


def recent(ring: Ring[T] | Sequence[T], now: float, span_s: float) -> list[T]:
    """Samples in ``(now - span_s, now]`` (on a Ring: cost follows the span)."""
    if isinstance(ring, Ring):
        return ring.window(now - span_s, now)
    lo = now - span_s
    return [s for s in upto(ring, now) if sample_time(s) > lo]


def values(samples: Iterable[T], get: Callable[[T], float | None]) -> list[float]:
    """The known values of a metric, skipping blanks."""
    out: list[float] = []
    for s in samples:
        v = get(s)
        if v is not None:
            out.append(float(v))
    return out


def device(sample: GpuSample, index: int) -> GpuDevice | None:
    """One GPU of a sample by index."""
    return next((d for d in sample.devices if d.index == index), None)


def gpu_values(
    samples: Iterable[GpuSample], index: int, get: Callable[[GpuDevice], float | None]
) -> list[float]:
    """One GPU metric over samples, skipping ticks where it was blank or lost."""
    out: list[float] = []
    for s in samples:
        d = device(s, index)
        if d is None or d.lost:
            continue
        v = get(d)
        if v is not None:
            out.append(float(v))
    return out


def typical_interval(times: Sequence[float], default: float = 1.0) -> float:
    """The median gap between consecutive times (the sampling period)."""
    gaps = [b - a for a, b in itertools.pairwise(times) if b > a]
    return statistics.median(gaps) if gaps else default


def reason_durations(samples: Sequence[GpuSample], index: int) -> dict[str, float]:
    """Seconds each throttle reason was active on a GPU over the samples.

    Each sample stands for the time until the next one, capped at three sampling
    periods so that a gap in collection is not counted as throttling.
    """
    times = [s.t for s in samples]
    period = typical_interval(times)
    out: dict[str, float] = defaultdict(float)
    for i, s in enumerate(samples):
        d = device(s, index)
        if d is None:
            continue
        dt = (times[i + 1] - times[i]) if i + 1 < len(times) else period
        dt = min(max(dt, 0.0), 3 * period)
        for reason in d.clock_event_reasons:
            out[reason] += dt
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def tree_io(sample: ProcessTreeSample) -> tuple[float | None, float | None]:
    """Read and write rates summed over the target tree."""
    reads = [p.read_bps for p in sample.processes if p.read_bps is not None]
    writes = [p.write_bps for p in sample.processes if p.write_bps is not None]
    return (sum(reads) if reads else None, sum(writes) if writes else None)


def tree_cpu(sample: ProcessTreeSample) -> float | None:
    """CPU % summed over the target tree (100 = one core)."""
    vals = [p.cpu_percent for p in sample.processes if p.cpu_percent is not None]
    return sum(vals) if vals else None


@dataclass(frozen=True, slots=True)
class FrameTotal:
    """A hot frame summed over a window."""

    phase: str
    function: str
    location: str
    caller: str
    count: int
    #: Share of all the training thread's samples in the window.
    share: float


def hot_frames(windows: Sequence[StackWindow]) -> dict[str, list[FrameTotal]]:
    """Hottest frames per phase, summed over stack windows, hottest first."""
    total = sum(w.total_samples for w in windows if w.error is None)
    out: dict[str, list[FrameTotal]] = defaultdict(list)
    for (phase, function, location, caller), n in hot_frame_counts(windows):
        out[phase].append(
            FrameTotal(phase, function, location, caller, n, n / total if total else 0.0)
        )
    return dict(out)


#: File name endings of model checkpoints (PyTorch, safetensors, Keras, NumPy, pickles).
CHECKPOINT_SUFFIXES = (".pt", ".pth", ".ckpt", ".safetensors", ".bin", ".h5", ".keras",
                       ".npz", ".pkl", ".pickle", ".tar")


def is_checkpoint(path: str) -> bool:
    """Whether a file being written looks like a checkpoint rather than a log."""
    name = path.rsplit("/", 1)[-1].lower()
    return name.endswith(CHECKPOINT_SUFFIXES) or "checkpoint" in name or "ckpt" in name


@dataclass(frozen=True, slots=True)
class WriteSpan:
    """A file the target had open for writing, from first to last sighting."""

    path: str
    first: float
    last: float


def write_spans(samples: Sequence[StorageSample]) -> list[WriteSpan]:
    """Checkpoint (and other) writes as spans of consecutive sightings, in order."""
    open_spans: dict[str, WriteSpan] = {}
    done: list[WriteSpan] = []
    for s in samples:
        seen = set(s.writing)
        for path in list(open_spans):
            if path not in seen:
                done.append(open_spans.pop(path))
        for path in s.writing:
            span = open_spans.get(path)
            open_spans[path] = WriteSpan(path, span.first if span else s.t, s.t)
    done.extend(open_spans.values())
    return sorted(done, key=lambda w: w.first)
