"""How fast memory grows: judged on its floor across the job's cycles, not on a slope.

A training job's memory often moves in cycles: DataLoader workers re-created
every epoch take memory through the epoch and free it when they exit, the
allocator takes and returns caches, an evaluation pass comes and goes. Such a
sawtooth rises steeply through every tooth, so a slope fitted over a few
seconds or a minute reads it as growth (and its runway as minutes) however
level it stays. What leaks is what the memory does not give back: the lowest it
falls to in each cycle, its floor.

So the memory (``points``, MB over time) is cut into cycles at each fall back
(a drop of ``DROP_MIN_MB`` or ``DROP_SHARE`` of the level, whichever is more,
after a rise) and at each change of the DataLoader's workers (``boundaries``:
the loader re-created them), and growth is the rise of the cycles' floors,
each read from ``MIN_FLOOR_POINTS`` readings at least (a cycle read fewer
times is joined with the next: its lowest reading may lie anywhere on its tooth):

* from ``MIN_CYCLES`` closed cycles on (not counting a first one whose lowest
  point is its first: the watch began on its way up, after its trough): the
  Theil-Sen slope of their floors (the median of the slopes between every two
  floors, so one floor read off its trough cannot set the rate), counted only
  where the floors' rise stands out of their own scatter and the cycles' tops
  rise with them (``TOPS_SHARE``): a leak lifts the whole tooth, while floors
  that rise under tops that hold are readings falling later and later on teeth
  read about once each (a cadence near the cycle's period); a sawtooth whose
  floor holds reads 0, one whose floor rises reads the floor's rate;
* with fewer, a rise that has not fallen back (the last cycle, still open) is
  read as a steady leak with the least-squares test of :func:`memory_growth`
  (the only floor a memory that never fell has is the memory itself), unless
  one step between two levels fits it better (``STEP_FIT_SHARE``: it rose once
  and stands level), or the job has young DataLoader workers (``hold``): a
  loader that re-creates its workers each epoch is in the middle of a tooth,
  and its floor is judged once its cycles have been seen;
* a last cycle that has already lasted ``OUTLASTS`` times the longest cycle
  seen is no cycle any more: it is read as a steady rise too.

Three cycles, because a first floor is often a warm-up's (caches filled once),
and two floors give a single step that may be one-off: a trend needs two steps.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: A steady rise is fitted over the last minute (at least the rule window), and
#: read once it spans 15 s, with a slope at least 4 standard errors from flat;
#: from 10 s on, a slope twice as clear (8 standard errors) is read already, so
#: a fast leak is confirmed within a 20-s report (docs/diagnosis.md, History).
GROWTH_LOOKBACK_S = 60.0
GROWTH_MIN_SPAN_S = 15.0
GROWTH_MIN_T = 4.0
GROWTH_EARLY_SPAN_S = 10.0
GROWTH_EARLY_T = 8.0
#: A rise that one step between two levels fits this much better than the line
#: (its squared residuals under this share of the line's) went to a new level
#: once and stands there: a first step's buffers, an optimizer's state filled
#: once. A leak, however it swings, keeps rising: the line fits it better
#: (docs/diagnosis.md, ``host_memory_grows``).
STEP_FIT_SHARE = 0.6
#: Readings a growth is read from at least, where each comes every second (RSS);
#: private memory, read less often, names its own (``PRIVATE_MIN_POINTS``).
GROWTH_MIN_POINTS = 5

#: Cycles are looked for over the last ten minutes: epochs of a few minutes
#: still give three floors.
FLOOR_LOOKBACK_S = 600.0
#: Closed cycles needed before the floor's trend is read.
MIN_CYCLES = 3
#: Readings a floor is read from: a cycle read once or twice (epochs of a few
#: seconds, read every 2 s) may have been read anywhere on its tooth, so such
#: cycles are joined with the next ones until they hold this many.
MIN_FLOOR_POINTS = 3
#: A fall back starts a new cycle once it is this deep (MB, and share of the
#: level, whichever is more): RSS read each second wanders by a few MB, an
#: allocator returning a cache or a worker exiting drops tens to hundreds.
DROP_MIN_MB = 32.0
DROP_SHARE = 0.02
#: The floors' rise must exceed their scatter around their trend this many times.
FLOOR_NOISE_FACTOR = 2.0
#: The cycles' tops must rise at this share of the floors' rate at least for the
#: floors' rise to count (docs/diagnosis.md, ``host_memory_grows``).
TOPS_SHARE = 0.5
#: An open cycle this many times longer than the longest closed one is a steady rise.
OUTLASTS = 2.0
#: The newest floors the trend is read from.
MAX_FLOORS = 12

Point = tuple[float, float]


def slope_per_minute(points: Sequence[Point]) -> float | None:
    """The plain least-squares slope, MB per minute (None under two points)."""
    if len(points) < 2:
        return None
    t_mean = statistics.fmean(t for t, _ in points)
    v_mean = statistics.fmean(v for _, v in points)
    sxx = sum((t - t_mean) ** 2 for t, _ in points)
    if sxx <= 0:
        return None
    return sum((t - t_mean) * (v - v_mean) for t, v in points) / sxx * 60.0


def memory_growth(points: Sequence[Point],
                  min_points: int = GROWTH_MIN_POINTS) -> float | None:
    """MB per minute the memory grows: the least-squares slope where it stands out
    of the memory's own swings, 0 where it does not, None before 10 s of points
    (and ``min_points`` of them).

    A slope alone reads a job whose memory swings (the allocator returning and
    taking back tens of MB every few seconds; pytorch/examples'
    word_language_model swings 369-479 MB with no trend) as growing at
    100+ MB/min over any 20 s that happens to end on a high: its t statistic
    there stays under 3.1, a steady leak's climbs with the span. A rise that
    one step between two levels fits better than the line (``STEP_FIT_SHARE``)
    rose once and stands level: 0.
    """
    span = points[-1][0] - points[0][0] if points else 0.0
    if len(points) < max(min_points, 3) or span < GROWTH_EARLY_SPAN_S:
        return None
    needed = GROWTH_MIN_T if span >= GROWTH_MIN_SPAN_S else GROWTH_EARLY_T
    ts = [t for t, _ in points]
    vs = [v for _, v in points]
    t_mean, v_mean = statistics.fmean(ts), statistics.fmean(vs)
    sxx = sum((t - t_mean) ** 2 for t in ts)
    slope = sum((t - t_mean) * (v - v_mean) for t, v in points) / sxx
    residual = sum((v - v_mean - slope * (t - t_mean)) ** 2 for t, v in points)
    error = math.sqrt(residual / (len(points) - 2) / sxx)
    significant = slope > 0 and (error == 0 or slope / error >= needed)
    if span < GROWTH_MIN_SPAN_S and not significant:
        return None  # not yet clear either way
    if significant and best_step_residual(vs) < STEP_FIT_SHARE * residual:
        return 0.0  # one rise to a new level, not a growth
    return slope * 60.0 if significant else 0.0


def best_step_residual(values: Sequence[float]) -> float:
    """The least squared residual of ``values`` around one level before a split and
    another after it (two readings a side at least; ``inf`` under four)."""
    n = len(values)
    total, squares = sum(values), sum(v * v for v in values)
    best = math.inf
    head = head_squares = 0.0
    for k in range(1, n):
        head += values[k - 1]
        head_squares += values[k - 1] ** 2
        if 2 <= k <= n - 2:
            tail, tail_squares = total - head, squares - head_squares
            best = min(best, head_squares - head * head / k
                       + tail_squares - tail * tail / (n - k))
    return best


@dataclass(frozen=True, slots=True)
class FloorGrowth:
    """How fast the memory's floor rises, and what it was read from."""

    #: MB per minute; None while there is no verdict yet.
    rate: float | None
    #: Cycles whose floor was seen (closed by a fall back or a worker change, in
    #: the lookback; not the first when the watch began on its way up).
    cycles: int
    #: The newest closed cycle's floor (MB), None before one closed.
    floor: float | None
    #: The highest the memory stood in the newest closed cycle and since (MB):
    #: the next tooth's top, which reaches a limit first.
    peak: float | None
    #: ``floor`` (the floors' trend), ``steady`` (a rise that never fell back) or
    #: ``""`` (no verdict).
    judged_on: str


def split_cycles(points: Sequence[Point], boundaries: Sequence[float] = ()) -> list[list[Point]]:
    """``points`` cut into cycles: at each boundary time, and at each fall back of
    the drop's depth below the highest point since the cycle's lowest. A cycle
    holds two points at least, and one that has only fallen so far goes on
    falling (a fall read over two samples is one fall)."""
    cycles: list[list[Point]] = []
    current: list[Point] = []
    low = high = 0.0
    pending = sorted(boundaries)
    next_boundary = 0
    for t, v in points:
        crossed = False
        while next_boundary < len(pending) and pending[next_boundary] <= t:
            crossed = crossed or bool(current)
            next_boundary += 1
        depth = max(DROP_MIN_MB, DROP_SHARE * high)
        fell_back = v <= high - depth and high - low >= depth
        if len(current) >= 2 and (crossed or fell_back):
            cycles.append(current)
            current = []
        if not current or v < low:
            low = high = v
        else:
            high = max(high, v)
        current.append((t, v))
    if current:
        cycles.append(current)
    return cycles


def theil_sen(points: Sequence[Point]) -> tuple[float, float]:
    """``(slope, intercept)`` of the Theil-Sen line: the median slope between every
    two points, and the median intercept at that slope."""
    slopes = [(v2 - v1) / (t2 - t1) for i, (t1, v1) in enumerate(points)
              for t2, v2 in points[i + 1:] if t2 > t1]
    slope = statistics.median(slopes) if slopes else 0.0
    intercept = statistics.median(v - slope * t for t, v in points)
    return slope, intercept


def floors_rate(floors: Sequence[Point], tops: Sequence[Point]) -> float:
    """MB per minute the floors rise: their Theil-Sen slope where their rise over
    their span stands out of their scatter (and of a drop's depth) and the same
    cycles' ``tops`` rise at ``TOPS_SHARE`` of that slope at least, else 0."""
    slope, intercept = theil_sen(floors)
    if slope <= 0:
        return 0.0
    rise = slope * (floors[-1][0] - floors[0][0])
    scatter = max(abs(v - (intercept + slope * t)) for t, v in floors)
    if rise <= max(DROP_MIN_MB, FLOOR_NOISE_FACTOR * scatter):
        return 0.0
    tops_slope, _ = theil_sen(tops)
    return slope * 60.0 if tops_slope >= TOPS_SHARE * slope else 0.0


def sampled_cycles(closed: Sequence[Sequence[Point]]) -> list[list[Point]]:
    """``closed`` cycles, each joined with the next ones until it holds
    ``MIN_FLOOR_POINTS`` readings; a last group short of that is left out.

    A tooth read once or twice may have been read anywhere on it, and three such
    readings can line up into a rise on a floor that holds; the lowest of three
    or more readings lies near the trough (docs/diagnosis.md, ``host_memory_grows``)."""
    groups: list[list[Point]] = []
    current: list[Point] = []
    for cycle in closed:
        current.extend(cycle)
        if len(current) >= MIN_FLOOR_POINTS:
            groups.append(current)
            current = []
    return groups


def _span(cycle: Sequence[Point]) -> float:
    return cycle[-1][0] - cycle[0][0]


def floor_growth(points: Sequence[Point], boundaries: Sequence[float] = (),
                 hold: bool = False) -> FloorGrowth:
    """The memory's growth judged on its floor (see the module's rule).

    ``points``: the memory (MB) over ``FLOOR_LOOKBACK_S``; ``boundaries``: when
    the DataLoader's workers changed; ``hold``: the job has young workers, so a
    rise that has not yet fallen back is not judged before its cycles are seen.
    """
    cycles = split_cycles(points, boundaries)
    if not cycles:
        return FloorGrowth(None, 0, None, None, "")
    closed, open_cycle = cycles[:-1], cycles[-1]
    sampled = sampled_cycles(closed)
    floors = [min(group, key=lambda p: p[1]) for group in sampled]
    tops = [max(group, key=lambda p: p[1]) for group in sampled]
    if floors and floors[0] == sampled[0][0]:
        # The watch began on the first cycle's way up: its trough came before.
        floors, tops = floors[1:], tops[1:]
    tail = [*(closed[-1] if closed else ()), *open_cycle]
    peak = max(v for _, v in tail)
    floor = floors[-1][1] if floors else None
    rate: float | None = None
    judged_on = ""
    enough = len(floors) >= MIN_CYCLES
    if enough:
        rate, judged_on = floors_rate(floors[-MAX_FLOORS:], tops[-MAX_FLOORS:]), "floor"
    outlasts = bool(closed) and _span(open_cycle) > OUTLASTS * max(_span(c) for c in closed)
    if (not enough and not hold) or (enough and outlasts):
        recent = [p for p in open_cycle if p[0] >= open_cycle[-1][0] - GROWTH_LOOKBACK_S]
        steady = memory_growth(recent)
        if steady is not None and (rate is None or steady > rate):
            rate, judged_on = steady, "steady"
    return FloorGrowth(rate, len(floors), floor, peak, judged_on)
