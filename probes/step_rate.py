"""Steps per second from readings of a count, whatever the source.

A reading is a count at a moment: the loop's counter and the workers' batch
index are stamped when py-spy returns, the job's log when the job wrote its
line, a stack window's cycles at their boundaries. The count may restart (a new
epoch), be misread (a worker a few batches behind, a value read mid-update), or
start afresh by design (``StepCounterSample.start``: each stack window counts
its own cycles). ``counter_increments`` turns readings into intervals with the
steps taken in each; ``steps_per_second`` turns intervals into one rate.

A slow count is read more often than it moves: intervals of 0 and 1 steps. Its
rate is then taken between the moments it moved, each timed as the middle of
the two readings around it, never from one step, and never with the fast rule
that drops intervals many times the median (with a median of 0, every step
would be dropped).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import TypeVar

from .samples import StepCounterSample

#: One interval between two readings of the same count, and the steps in it.
Interval = tuple[StepCounterSample, StepCounterSample, int]

#: An interval this many times faster than the median of those around it is a
#: misreading (a counter that jumped, a reset mistaken for progress), not the
#: job's pace.
OUTLIER_FACTOR = 3.0
#: The intervals on each side of one that its median is taken over.
OUTLIER_NEIGHBOURS = 2
#: A rate needs this much time between its readings, and this many steps.
MIN_SPAN_S = 2.0
MIN_STEPS = 2

T = TypeVar("T")


def counter_increments(samples: Sequence[StepCounterSample]) -> list[Interval]:
    """Consecutive readings of the newest count and the steps between each pair.

    Only the most recent count's name counts (the loop frame may change between
    readings). A reading marked ``start`` begins a new count: no interval ends
    at it. A drop is a new epoch when that reading makes a plausible interval
    (``_reset_steps``): the interval counts the rest of the old epoch (up to the
    highest value seen, a lower bound on its length) and the new one's steps.
    Any other drop is a misreading: that reading is skipped, the interval runs
    on to the next (a worker a few batches behind), unless the next reading
    carries on from it (``_base_was_misread``: then the reading before was the
    error). So is a spike: a reading over twice every other one, that the next
    falls from by half or more while carrying on from the reading before (255,
    9807, 378 from a workers' index in a CI run: no new epoch, whose 378 steps
    in 2 s had tripled the rate), a value read again and again while the
    count rises beneath it (``_stuck_highs``), a low or a high the readings
    around it rise across at the count's pace (``_dips``, ``_bumps``), and a value
    no epoch reaches, as the count's own drops size its epochs
    (``_beyond_the_epoch``).
    """
    same = newest_count(samples)
    if not same:
        return []
    misread = _spikes(same) | _stuck_highs(same)
    same = [s for i, s in enumerate(same) if i not in misread]
    beyond = _beyond_the_epoch(same)
    same = [s for i, s in enumerate(same) if i not in beyond]
    same = _misread_lows_and_highs(same)
    pace = _median_rise_rate(same)
    epoch = _epoch_length(same, _rise_pace(same, pace))
    out: list[Interval] = []
    base = same[0]
    for i, cur in enumerate(same[1:], start=1):
        if cur.start:
            base = cur
            continue
        was, now = base.value, cur.value
        assert was is not None and now is not None
        if cur.t <= base.t:
            continue
        if now >= was:
            out.append((base, cur, now - was))
        elif (steps := _reset_steps(base, cur, epoch, pace)) is not None:
            out.append((base, cur, steps))
        elif _base_was_misread(base, cur, same[i + 1:],
                               out[-1][0] if out and out[-1][1] is base else None, pace):
            # The readings carry on from here: the base was the misreading.
            if out and out[-1][1] is base:
                before = out.pop()[0]
                assert before.value is not None
                if now >= before.value:
                    out.append((before, cur, now - before.value))
        else:
            continue  # a small step back is a misreading, not a new epoch: skip it
        base = cur
    return out


def newest_count(samples: Sequence[StepCounterSample]) -> list[StepCounterSample]:
    """The readings of the count read last (the loop frame may change between
    readings, and with it the name read), in order; unread ones left out."""
    named = [s for s in samples if s.value is not None and s.name is not None]
    return [s for s in named if s.name == named[-1].name] if named else []


def _rises(same: Sequence[StepCounterSample]) -> list[tuple[int, float]]:
    """(steps, seconds) of each interval between readings that rose or held."""
    return [(b.value - a.value, b.t - a.t) for a, b in itertools.pairwise(same)
            if a.value is not None and b.value is not None and b.t > a.t
            and b.value >= a.value and not b.start]


def _median_rise_rate(same: Sequence[StepCounterSample]) -> float | None:
    """The median steps/s of the intervals that rose or held (None: none did)."""
    rates = sorted(n / dt for n, dt in _rises(same))
    if not rates:
        return None
    half = len(rates) // 2
    return rates[half] if len(rates) % 2 else (rates[half - 1] + rates[half]) / 2


def _rise_pace(same: Sequence[StepCounterSample], median: float | None) -> float | None:
    """Steps/s over all the time the count rose or held, the intervals more than
    ``OUTLIER_FACTOR`` from ``median`` left out.

    An epoch's length is read from this pace: a batch index read twice a third
    of a second apart rises by a handful of steps, one step more or less is a
    sixth of the pace, and the median of such intervals carries that error into
    every epoch it sizes; the steps over all the time do not.
    """
    if not median:
        return median
    kept = [(n, dt) for n, dt in _rises(same)
            if median / OUTLIER_FACTOR <= n / dt <= median * OUTLIER_FACTOR]
    seconds = sum(dt for _n, dt in kept)
    return sum(n for n, _dt in kept) / seconds if seconds > 0 else median


def _epoch_length(same: Sequence[StepCounterSample], pace: float | None) -> float:
    """How many steps an epoch of the count holds, at least the highest value seen
    plus one (counts are numbered from 0: ``enumerate``, a batch index).

    The highest value read is a lower bound: a reading every few seconds rarely
    lands on an epoch's last step. Each drop gives an estimate where the other
    intervals give a pace: the value before it, plus the steps the pace makes
    in the interval, less the value after it. Their median is taken where it is
    above the bound (a drop that implies an epoch shorter than values already
    seen is a misreading, not a reset).
    """
    peak = max(s.value or 0 for s in same) + 1
    if not pace:
        return peak
    lengths = [n for n in _drop_lengths(same, pace) if n >= peak]
    return max(peak, statistics.median(lengths)) if lengths else peak


def _drop_lengths(same: Sequence[StepCounterSample], pace: float) -> list[float]:
    """The epoch's length each drop implies at ``pace``: the value before it,
    plus the steps the pace makes over the interval, less the value after it."""
    return [a.value + pace * (b.t - a.t) - b.value for a, b in itertools.pairwise(same)
            if a.value is not None and b.value is not None and b.value < a.value
            and not b.start and b.t > a.t]


#: Drops a count must make before its epoch, read from them, is trusted to tell
#: a reading no epoch reaches: their median then stands whatever one of them says.
BEYOND_MIN_DROPS = 3
#: A reading this far above the epoch its drops size lies beyond it: each drop's
#: estimate is off by the pace's error over its interval (a few per cent).
BEYOND_MARGIN = 1.15
#: At most this share of the readings is set aside so: where more lie beyond
#: the epoch, the epochs are longer than the drops say, not the readings wrong.
BEYOND_MAX_SHARE = 0.2


def _beyond_the_epoch(same: Sequence[StepCounterSample]) -> set[int]:
    """Indexes of readings higher than any epoch of the count reaches.

    Each drop sizes the epoch (``_epoch_length``'s estimate, at the median rise
    rate, which one wild interval does not move). A reading well above their
    median is no value of the count: it would size every epoch by itself (the
    highest value read bounds the epoch from below) and add its excess to every
    reset (docs/step-rates.md, "Epochs shorter than the readings").
    """
    pace = _median_rise_rate(same)
    if not pace:
        return set()
    drops = _drop_lengths(same, pace)
    if len(drops) < BEYOND_MIN_DROPS:
        return set()
    ceiling = statistics.median(drops) * BEYOND_MARGIN
    beyond = {i for i, s in enumerate(same) if (s.value or 0) > ceiling}
    return beyond if len(beyond) <= BEYOND_MAX_SHARE * len(same) else set()


def _reset_steps(base: StepCounterSample, cur: StepCounterSample, epoch: float,
                 pace: float | None) -> int | None:
    """The steps of an interval across a new epoch, or None if the drop is no reset.

    ``epoch - base`` steps finished the old epoch (``_epoch_length``) and
    ``cur`` began the new one. Where the other intervals give a pace, the reset
    must make an interval within a factor of two of it (a worker a few batches
    behind would otherwise read as an epoch's whole length); where they do not,
    a drop to half or less is a reset.
    """
    assert base.value is not None and cur.value is not None
    steps = round(max(epoch - base.value, 0)) + cur.value
    if pace is None or pace <= 0:
        return steps if cur.value <= base.value // 2 else None
    expected = pace * (cur.t - base.t)
    return steps if abs(steps - expected) < expected else None


def _base_was_misread(base: StepCounterSample, cur: StepCounterSample,
                      later: Sequence[StepCounterSample], before: StepCounterSample | None,
                      pace: float | None) -> bool:
    """Whether a small step back from ``base`` to ``cur`` is ``base``'s error, not
    ``cur``'s: the next reading carries on from ``cur`` and still stays under
    ``base`` (577, 313, 369, 396, 425 in a CI run: a first reading misread high
    made every later one a "step back", and the report had no rate at all).

    The newest reading has no next one to side with: the one of the two nearer
    where the pace from the reading ``before`` puts it is kept (a CI run's
    workers' index ended 349, 420, 401 at 25 steps/s, and ending on the 420 read
    the rate 12 % high).
    """
    assert base.value is not None and cur.value is not None
    if not later:
        if before is None or before.value is None or not pace:
            return False
        cur_off = abs(cur.value - (before.value + pace * (cur.t - before.t)))
        base_off = abs(base.value - (before.value + pace * (base.t - before.t)))
        return cur_off < base_off
    nxt = later[0].value
    assert nxt is not None
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


#: A low is a misreading where the records rise across it within this factor of
#: their pace, and the climb from it to the next record is more than this many
#: times that pace (a new epoch climbs at the pace).
DIP_CLIMB_FACTOR = 1.5
#: Misreadings are the exception: a count with more lows than this share of its
#: readings is taken to start again.
DIP_MAX_SHARE = 0.5
#: The records' rises agree on one pace within this spread (standard deviation
#: over mean), as ``RISE_MAX_SPREAD`` asks of a wrapping count's rises.
DIP_MAX_SPREAD = 0.35


def _rate_between(same: Sequence[StepCounterSample], a: int, b: int) -> float:
    """Steps/s from reading ``a`` to reading ``b`` (infinite where no time passed)."""
    dt = same[b].t - same[a].t
    return ((same[b].value or 0) - (same[a].value or 0)) / dt if dt > 0 else math.inf


def _agreed_pace(rates: Sequence[float]) -> float | None:
    """The mean of two or more rises' paces that agree within ``DIP_MAX_SPREAD``
    (standard deviation over mean); None where they are fewer or disagree."""
    if len(rates) < 2:
        return None
    mean = statistics.fmean(rates)
    if mean <= 0 or statistics.pstdev(rates) / mean > DIP_MAX_SPREAD:
        return None
    return mean


def _dips(same: Sequence[StepCounterSample]) -> set[int]:
    """Indexes of misread lows (``counter_increments``) in a count that otherwise
    never falls. py-spy reads locals without stopping the job: a count that
    changes a thousand times a second is often read from an int object already
    freed and reused (6992, 2019, 12431, 14603 from a server's ``served``,
    which never restarts, 1.9-2.5 s apart: read as a new epoch, the rate came
    out 3,612/s for the job's 1,240, or the count was set aside as whole epochs
    passing unseen).

    The records (readings at or above every one before) are the count where
    they rise at one pace (``DIP_MAX_SPREAD``), at least two rises of it. A low
    is a misreading where the records around it rise across it at the pace of
    the other rises, and the record after it climbs past it more than
    ``DIP_CLIMB_FACTOR`` times that pace: a new epoch climbs from its low at
    the pace. Across a new epoch, the records rise slower than the pace (an
    epoch's worth slower), or faster when the record after it is itself misread
    high (a reading 1.2-2x the epoch, in ``benchmarks.epoch_counts``), though
    not always by enough: a low needs a record after the one after it. Lows
    after the last record but one are left to the epoch logic (nothing tells a
    final misreading from a final new epoch), as is a count with many lows
    (``DIP_MAX_SHARE``) or one that starts afresh by design.
    """
    if any(s.start for s in same):
        return set()
    records: list[int] = []
    lows: list[int] = []
    for i, reading in enumerate(same):
        if not records or (reading.value or 0) >= (same[records[-1]].value or 0):
            records.append(i)
        else:
            lows.append(i)
    if not records or len(lows) > DIP_MAX_SHARE * len(same):
        return set()

    def rate(a: int, b: int) -> float:
        return _rate_between(same, a, b)

    rises = {(a, b): rate(a, b) for a, b in itertools.pairwise(records)}
    if not all(math.isfinite(r) for r in rises.values()) \
            or _agreed_pace(list(rises.values())) is None:
        return set()
    out: set[int] = set()
    for i in (i for i in lows if len(records) > 2 and i < records[-2]):
        before = max(r for r in records if r < i)
        after = min(r for r in records if r > i)
        pace = statistics.fmean(r for pair, r in rises.items() if pair != (before, after))
        across = rises[(before, after)]
        if pace > 0 and across > 0 and max(across / pace, pace / across) <= DIP_CLIMB_FACTOR \
                and rate(i, after) > DIP_CLIMB_FACTOR * pace:
            out.add(i)
    return out


def _bumps(same: Sequence[StepCounterSample]) -> set[int]:
    """Indexes of misread highs that the reading after carries on below: ``_dips``
    upside down. 279, 314, 352, 767, 404 from the data demo's ``step`` (15
    steps/s, read every 2-3 s) in a CI run: the 767 was an int read after it
    was freed, the drop after it looked like a new epoch, and the rises (15/s
    and 206/s) then disagreed, so the count was set aside as whole epochs
    passing unseen. ``_spikes`` wants a spike over twice every other reading,
    which a count that has grown a while no longer shows.

    A high is a misreading where the reading after it is at or above the one
    before it, the two rise across it within ``DIP_CLIMB_FACTOR`` of the pace
    the other rises agree on (``DIP_MAX_SPREAD``, two at least), and the climb
    into it is more than ``DIP_CLIMB_FACTOR`` times that pace. A new epoch
    falls to its first steps, below the reading before the high, unless its
    epoch is shorter than the climb across: then the rises do not agree.
    """
    if any(s.start for s in same) or len(same) < 4:
        return set()
    values = [s.value or 0 for s in same]

    def rate(a: int, b: int) -> float:
        return _rate_between(same, a, b)

    out: set[int] = set()
    for i in range(1, len(same) - 1):
        before, after = i - 1, i + 1
        if not values[before] <= values[after] < values[i]:
            continue
        others = [rate(a, a + 1) for a in range(len(same) - 1)
                  if a not in (before, i) and values[a + 1] >= values[a]]
        pace = _agreed_pace([r for r in others if math.isfinite(r)])
        if pace is None:
            continue
        across = rate(before, after)
        if across > 0 and max(across / pace, pace / across) <= DIP_CLIMB_FACTOR \
                and rate(before, i) > DIP_CLIMB_FACTOR * pace:
            out.add(i)
    return out


def _misread_lows_and_highs(same: list[StepCounterSample]) -> list[StepCounterSample]:
    """The readings less the highs (``_bumps``) and then the lows (``_dips``) that
    the readings around them show misread."""
    bumps = _bumps(same)
    same = [s for i, s in enumerate(same) if i not in bumps]
    dips = _dips(same)
    return [s for i, s in enumerate(same) if i not in dips]


def _stuck_highs(same: Sequence[StepCounterSample]) -> set[int]:
    """Indexes of a value read again and again while the count rises beneath it
    (``counter_increments``): a worker left at its last index while the others
    go on (420, 267, 420, 311, 349, 420, 420, 415 from a workers' index in a CI
    run, whose 201 to 420 had made the rate 49/s for the job's own 27). A count
    passes a value once an epoch; one held while two or more rising readings go
    by below it is not the count. Counts that start afresh by design (a stack
    window's cycles) pass their values again at each start, and are left alone."""
    values = [s.value for s in same]
    out: set[int] = set()
    for value in {v for v in values if v is not None}:
        at = [i for i, v in enumerate(values) if v == value]
        if len(at) < 2 or any(s.start for s in same[at[0] + 1:at[-1] + 1]):
            continue
        below = [v for v in values[at[0] + 1:at[-1]] if v is not None and v < value]
        if any(b > a for a, b in itertools.pairwise(below)):
            out.update(at)
    return out


def step_rates(samples: Sequence[StepCounterSample]) -> list[tuple[float, float]]:
    """``(t, steps/s)`` between consecutive readings (the rate's history)."""
    return [(cur.t, n / (cur.t - prev.t)) for prev, cur, n in counter_increments(samples)]


def usual_intervals(intervals: Sequence[T], rate: Callable[[T], float]) -> list[T]:
    """The intervals whose rate is at most ``OUTLIER_FACTOR`` times the median of
    the intervals around it (``OUTLIER_NEIGHBOURS`` on each side, itself among
    them); all of them when there are fewer than three.

    A misreading is one interval out of line with those beside it. A job whose
    pace changes (a neighbour's load that comes or goes) is fast over a run of
    intervals: judged against the whole watch's median, that run would be left
    out and the rate read as the slow part's (docs/step-rates.md, "A pace that
    changes inside the watch").
    """
    if len(intervals) < 3:
        return list(intervals)
    rates = [rate(i) for i in intervals]
    kept: list[T] = []
    for at, interval in enumerate(intervals):
        around = rates[max(0, at - OUTLIER_NEIGHBOURS):at + OUTLIER_NEIGHBOURS + 1]
        if rates[at] <= OUTLIER_FACTOR * max(statistics.median(around), 1e-9):
            kept.append(interval)
    return kept


def steps_per_second(samples: Sequence[StepCounterSample]) -> float | None:
    """Rate of the count over the samples; None unless it is clearly counting.

    Needs ``MIN_SPAN_S`` of readings and ``MIN_STEPS`` steps. Where the count
    moved in every interval, intervals more than ``OUTLIER_FACTOR`` times faster
    than the median interval's rate are left out (with their time), so one bad
    reading cannot multiply the rate. Where it held still in some (it is read
    more often than it moves), the rate runs between the readings where it moved
    (``rate_between_moves``).
    """
    increments = counter_increments(samples)
    if not increments:
        return None
    if any(n == 0 for _prev, _cur, n in increments):
        return rate_between_moves(increments)
    kept = usual_intervals(increments, lambda i: i[2] / (i[1].t - i[0].t))
    span = sum(cur.t - prev.t for prev, cur, _n in kept)
    increase = sum(n for _prev, _cur, n in kept)
    if span < MIN_SPAN_S or increase < MIN_STEPS or not _rises_measure(kept):
        return None
    return increase / span


#: Rises a count that crossed an epoch needs for a rate.
WRAPPED_MIN_RISES = 2


def _rises_measure(kept: Sequence[Interval]) -> bool:
    """Whether the intervals the count rose over are ``WRAPPED_MIN_RISES``
    spanning ``MIN_SPAN_S``, where any crossed a new epoch: that interval's
    steps are the rest of an epoch sized by the rises' pace, so the rises are
    all that was measured, and one alone cannot show whether whole epochs pass
    between readings (``epochs_pass_unseen``). A count that only ever wrapped
    (no rise) is sized by its highest value (``_epoch_length``). The readings
    that showed it: docs/step-rates.md, "Epochs shorter than the readings".
    """
    rises = [cur.t - prev.t for prev, cur, _n in kept
             if prev.value is not None and cur.value is not None and cur.value >= prev.value]
    return not rises or len(rises) == len(kept) or (len(rises) >= WRAPPED_MIN_RISES
                                                    and sum(rises) >= MIN_SPAN_S)


def rate_between_moves(increments: Sequence[Interval]) -> float | None:
    """Steps/s of a slow count (read more often than it moves), the better of two.

    *Between moves*: a move happened between the reading before it and the one
    that first shows it, taken as the middle of that bracket; the rate runs from
    the first move to the last within each unbroken run of intervals. Its error
    is half the first and the last brackets' widths over the span.
    *Over the span*: the steps over the whole time, as for a fast count; its
    error is a step at each end of each run.
    *Steady pace* (``_steady_pace``): the step times every reading allows, for
    a count that keeps one pace.
    The one with the smaller error is taken. Needs ``MIN_STEPS`` steps (never a
    rate from one step) over ``MIN_SPAN_S``.
    """
    total = float(sum(n for *_, n in increments))
    runs = 1 + sum(prev is not before for (_, before, _), (prev, _, _)
                   in itertools.pairwise(increments))
    over_span = (total, sum(cur.t - prev.t for prev, cur, _ in increments),
                 runs / total if total else math.inf)
    estimates = [e for e in (_between_moves(increments), _steady_pace(increments)) if e]
    steps, span, _error = min((*estimates, over_span), key=lambda r: r[2])
    if span < MIN_SPAN_S or steps < MIN_STEPS:
        return None
    return steps / span


def _between_moves(increments: Sequence[Interval]) -> tuple[float, float, float] | None:
    """Steps, span and relative error of the rate between moves; None with no span."""
    steps = span = error = 0.0
    #: (time, bracket width, count after its first step, count after its last).
    moves: list[tuple[float, float, int, int]] = []

    def close_run() -> None:
        nonlocal steps, span, error
        if len(moves) >= 2:
            steps += moves[-1][2] - moves[0][3]
            span += moves[-1][0] - moves[0][0]
            error += (moves[0][1] + moves[-1][1]) / 2
        moves.clear()

    count = 0
    last: StepCounterSample | None = None
    for prev, cur, n in increments:
        if prev is not last:
            close_run()
            count = 0
        count += n
        if n > 0:
            moves.append(((prev.t + cur.t) / 2, cur.t - prev.t, count - n + 1, count))
        last = cur
    close_run()
    return (steps, span, error / span) if span > 0 and steps > 0 else None


def _steady_pace(increments: Sequence[Interval]) -> tuple[float, float, float] | None:
    """Steps, span and relative error of one unbroken run at a steady pace.

    Each reading of count ``c`` at ``t`` says step ``c`` ended by ``t`` and step
    ``c + 1`` after it. For a loop that keeps one step time ``P``, each pair of
    such bounds bounds ``P``; the middle of the range every pair allows is
    taken, its half-width the error. A loop whose step time changed leaves no
    range (None). The middle of each move's bracket (``_between_moves``) errs
    the same way at every move when the loop and the reader keep steady paces
    (a 2 s step read every second sits at one place in its bracket), which
    these bounds do not.
    """
    if any(prev is not before for (_, before, _), (prev, _, _)
           in itertools.pairwise(increments)):
        return None
    count = 0
    readings = [(0, increments[0][0].t)]
    for _prev, cur, n in increments:
        count += n
        readings.append((count, cur.t))
    if count < MIN_STEPS:
        return None
    # Step c ended by t (an upper bound on its time), step c + 1 after t (a lower one).
    shortest = max(((t_late - t_early) / (c_late + 1 - c_early)
                    for c_early, t_early in readings for c_late, t_late in readings
                    if c_late + 1 > c_early), default=0.0)
    longest = min(((t_late - t_early) / (c_late - c_early - 1)
                   for c_early, t_early in readings for c_late, t_late in readings
                   if c_late - c_early - 1 > 0), default=math.inf)
    if not shortest < longest < math.inf:
        return None
    pace = (shortest + longest) / 2
    return float(count), count * pace, (longest - shortest) / (longest + shortest)


#: A count that wraps in at least this share of its intervals has epochs only a
#: few readings long: whole ones may pass between two readings.
WRAP_SHARE_SHORT = 0.2
#: Its rises, each over at least ``RISE_MIN_S``, disagreeing this much (their
#: rates' standard deviation over their mean) are not one pace: a rise that
#: hides a whole epoch reads any fraction of it.
RISE_MAX_SPREAD = 0.35
RISE_MIN_S = 1.0
#: Rises a spread is read from at least.
RISE_MIN_COUNT = 2


def epochs_pass_unseen(samples: Sequence[StepCounterSample]) -> str | None:
    """Why a count that starts again each epoch cannot be read this seldom, or None.

    A drop to half or less is a new epoch (a batch index): it took at least the
    rest of the epoch before it (up to the highest value seen, a lower bound on
    its length) and the new one's steps, which bounds the pace from below. Where
    at that pace a whole epoch fits between two readings, a reading may follow
    one or several epochs on, with nothing to tell which: a loop of a thousand
    steps a second over epochs of six seconds, read every two to six, read 63/s
    as readily as 10,700/s. Such a count gives no rate.

    That bound misses most such counts: a drop that hides whole epochs counts
    only the one it sees. Their rises tell instead: where a count wraps often
    (``WRAP_SHARE_SHORT`` of its intervals), rises that disagree on the pace
    (``RISE_MAX_SPREAD``) are what is left of whole epochs; the collector reads
    the counter off the beat (``collector.STEP_READ_JITTER``) so that they do
    disagree. What it sets aside, right and wrong: docs/step-rates.md, "Epochs
    shorter than the readings" (``benchmarks.epoch_counts``).
    """
    same = _misread_lows_and_highs(newest_count(samples))
    if not same:
        return None
    pairs = [(a, b) for a, b in itertools.pairwise(same) if b.t > a.t and not b.start]
    if not pairs:
        return None
    epoch = max(s.value or 0 for s in same) + 1
    floors = [((epoch - (a.value or 0)) + (b.value or 0)) / (b.t - a.t) for a, b in pairs
              if (b.value or 0) <= (a.value or 0) // 2]
    apart = max(b.t - a.t for a, b in pairs)
    if floors and max(floors) * apart >= epoch:
        pace = max(floors)
        return (f"an epoch of at least {epoch} steps passes in {epoch / pace:.2g} s or less, "
                f"and readings lie up to {apart:.2g} s apart: whole epochs may pass unseen")
    wraps = sum((b.value or 0) < (a.value or 0) for a, b in pairs)
    rises = [n / dt for n, dt in _rises(same) if dt >= RISE_MIN_S]
    if wraps < WRAP_SHARE_SHORT * len(pairs) or len(rises) < RISE_MIN_COUNT:
        return None
    mean = statistics.fmean(rises)
    spread = statistics.pstdev(rises) / mean if mean > 0 else 0.0
    if spread <= RISE_MAX_SPREAD:
        return None
    return (f"it starts again in {wraps} of {len(pairs)} intervals and its rises disagree on "
            f"the pace ({min(rises):.3g}-{max(rises):.3g}/s): whole epochs may pass unseen")
