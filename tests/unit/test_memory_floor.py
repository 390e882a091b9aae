"""Memory growth judged on the floor across cycles (``knowledge/metrics/growth.py``),
on series built to be what each case says, read as aitop reads RSS: once a second
(or every 2 s, the report's cadence)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from aitop.knowledge.metrics.growth import (
    DROP_MIN_MB,
    MIN_CYCLES,
    floor_growth,
    sampled_cycles,
    slope_per_minute,
    split_cycles,
)
from aitop.knowledge.metrics.memory import (
    host_memory_growth,
    live_workers,
    with_usual_workers,
    worker_changes,
)
from aitop.knowledge.metrics.processes import PROC_RSS
from aitop.knowledge.metrics.window import compute_metrics
from aitop.probes.samples import ProcessTreeSample
from aitop.probes.session import Session, series_points
from support.synthetic import (
    PID,
    T0,
    WORD_LM_RSS_SWING,
    Job,
    make_session,
    process_tree_sample,
)

Series = list[tuple[float, float]]


def sawtooth(seconds: int, period: int, tooth_mb: float, floor_mb_s: float = 0.0,
             base: float = 800.0, step: int = 1, phase: int = 0) -> Series:
    """A tooth of ``tooth_mb`` every ``period`` s on a floor rising ``floor_mb_s``."""
    return [(float(t), base + floor_mb_s * t + tooth_mb * ((t + phase) % period) / period)
            for t in range(0, seconds + 1, step)]


@pytest.mark.parametrize("step", [1, 2])
def test_a_sawtooth_whose_floor_holds_is_no_growth_however_steep_its_teeth(step: int) -> None:
    """300-MB teeth every 6 s climb at 3 GB/min; the floor holds: 0, not a leak."""
    points = sawtooth(60, 6, 300.0, step=step)
    grown = floor_growth(points)
    assert grown.rate == 0.0 and grown.judged_on == "floor"
    assert grown.cycles >= MIN_CYCLES and grown.floor == pytest.approx(800.0)
    # A tooth read as a slope: 3 GB/min.
    slope = slope_per_minute([p for p in points if p[0] < 6])
    assert slope is not None and slope >= 2900


@pytest.mark.parametrize(("floor_mb_s", "step"), [(2.0, 1), (5.0, 1), (5.0, 2), (20.0, 2)])
def test_a_sawtooth_on_a_rising_floor_grows_at_the_floors_rate(floor_mb_s: float,
                                                                step: int) -> None:
    grown = floor_growth(sawtooth(90, 6, 300.0, floor_mb_s=floor_mb_s, step=step))
    assert grown.judged_on == "floor"
    assert grown.rate == pytest.approx(floor_mb_s * 60, rel=0.05)


def test_a_steady_leak_grows_at_its_rate_with_no_cycle_to_wait_for() -> None:
    """A leak never falls back: its floor is the memory itself, read as soon as a
    steady rise is (10 s at 8 standard errors, 15 s at 4), as before cycles."""
    leak = [(float(t), 400.0 + 8.0 * t) for t in range(0, 31)]
    assert floor_growth(leak[:10]).rate is None  # under 10 s: not yet
    for seconds in (10, 15, 20, 30):
        grown = floor_growth(leak[:seconds + 1])
        assert grown.rate == pytest.approx(480.0), seconds
        assert grown.judged_on == "steady" and grown.cycles == 0
    # With word_language_model's swings on it (369-479 MB, no fall deep enough
    # to end a cycle on a 4-GB job's memory), the same.
    swinging = [(float(t), 4000.0 + mb + 8.0 * t) for t, mb in enumerate(WORD_LM_RSS_SWING)]
    assert floor_growth(swinging[:21]).rate == pytest.approx(480.0, rel=0.35)


def test_too_few_cycles_is_no_verdict_yet() -> None:
    """Two floors may be one step (a cache filled once): no verdict before three."""
    # Falls at 6, 12 and 18: four cycles, the first one's lowest point where the
    # watch began (its trough may have come before), the last still open.
    two = sawtooth(19, 6, 300.0)
    assert len(split_cycles(two)) == 4
    grown = floor_growth(two)
    assert grown.rate is None and grown.cycles == MIN_CYCLES - 1 and grown.judged_on == ""
    assert floor_growth(sawtooth(25, 6, 300.0)).rate == 0.0


def test_a_watch_that_begins_on_a_tooth_waits_for_a_floor_it_saw() -> None:
    """Attached half-way up a tooth, the first cycle's lowest point is where the watch
    began, not its trough: it does not count (its 'floor' would be 150 MB high)."""
    points = sawtooth(24, 6, 300.0, phase=3)  # falls at 3, 9, 15, 21
    assert floor_growth(points[:16]).cycles == MIN_CYCLES - 1
    assert floor_growth(points).cycles == MIN_CYCLES and floor_growth(points).rate == 0.0


def test_young_workers_hold_a_rise_until_their_cycles_are_seen() -> None:
    """A 20-s tooth of a loader that re-creates its workers each epoch: with young
    workers, its rise is not read as a leak before three floors; without them it is
    a rise that never fell back, and reads as one."""
    tooth = [(float(t), 800.0 + 10.0 * t) for t in range(0, 21)]
    assert floor_growth(tooth, hold=True).rate is None
    assert floor_growth(tooth, hold=False).rate == pytest.approx(600.0)
    # Once three floors are seen, the floor decides, hold or not.
    epochs = sawtooth(80, 20, 200.0)
    assert floor_growth(epochs, hold=True).rate == 0.0


def test_worker_changes_end_cycles_whose_falls_were_not_sampled() -> None:
    """Read every 2 s, the moment between two epochs is missed: the memory looks
    level, and the workers' change of PIDs is what ends each cycle."""
    level = [(float(t), 1200.0 + (t % 5) * 2.0) for t in range(0, 41, 2)]
    assert split_cycles(level) == [level]
    changes = [5.0, 10.0, 15.0, 20.0, 25.0, 30.0, 35.0]
    grown = floor_growth(level, changes)
    assert grown.cycles >= MIN_CYCLES and grown.rate == 0.0


def test_floors_read_off_their_troughs_are_no_growth() -> None:
    """Sampling misses a trough now and then: floors scattered by tens of MB around a
    level floor do not make a trend."""
    floors = [800.0, 830.0, 790.0, 845.0, 805.0, 820.0]
    points: Series = []
    for i, low in enumerate(floors):
        points += [(i * 6.0 + k, low + 50.0 * k) for k in range(6)]
    points.append((36.0, 800.0))
    grown = floor_growth(points)
    # The first cycle's lowest point is where the watch began: not a floor.
    assert grown.cycles == len(floors) - 1 and grown.rate == 0.0


def test_a_rise_that_outlasts_the_cycles_is_read_as_steady() -> None:
    """Three 6-s cycles, then 40 s of climbing with no fall: no longer a cycle."""
    points = sawtooth(24, 6, 300.0)[:-1]
    assert floor_growth([*points, (24.0, 800.0)]).rate == 0.0
    points += [(24.0 + t, 800.0 + 10.0 * t) for t in range(0, 41)]
    grown = floor_growth(points)
    assert grown.judged_on == "steady" and grown.rate == pytest.approx(600.0)


def test_a_fall_over_two_readings_is_one_fall() -> None:
    points = [(0.0, 800.0), (1.0, 900.0), (2.0, 1000.0), (3.0, 900.0), (4.0, 800.0),
              (5.0, 900.0), (6.0, 1000.0)]
    cycles = split_cycles(points)
    assert [len(c) for c in cycles] == [3, 4]
    assert DROP_MIN_MB < 100


def test_the_runway_starts_at_the_top_of_the_newest_cycle() -> None:
    """300-MB teeth on a floor rising 5 MB/s under a 2-GB cgroup: the memory runs out
    when a tooth's top reaches the limit, not when the floor does."""
    session = make_session(80, rss_tooth_mb=300.0, rss_period_s=6, rss_growth_mb_s=5.0,
                           workers=0, cgroup_memory_mb=(6000.0, 4500.0))
    m = compute_metrics(session, T0 + 80, 20.0, ())
    growth = m["proc_rss_growth"]
    assert growth == pytest.approx(300.0, rel=0.01)
    assert m["mem_free_mb"] == pytest.approx(1500.0, abs=1)
    # The newest closed cycle's top (tick 77, 5/6 up its tooth) over the memory now
    # (tick 80, 2/6 up): the room left is the room at that top.
    top = 5.0 * 77 + 300.0 * 5 / 6
    now = 5.0 * 80 + 300.0 * 2 / 6
    left = m["ram_minutes_left"]
    assert left == pytest.approx((1500.0 - (top - now)) / growth, rel=0.01)
    assert not math.isclose(left, 1500.0 / growth, rel_tol=0.05)


def test_cycles_read_once_or_twice_are_joined_before_their_floor_counts() -> None:
    """A CI run's sawtooth job (teeth of ~120 MB every 3-4 s, a floor that held),
    read every 3 s: one or two readings a cycle, their lowest anywhere on the
    tooth. Taken as floors, 823, 851 and 893 MB read as 320 MB/min; joined until
    each holds three readings, two floors are seen, too few for a verdict."""
    points = [(5.2, 981.0), (8.4, 991.0), (11.6, 986.0), (14.8, 823.0), (18.0, 851.0),
              (21.3, 976.0), (24.7, 923.0), (27.9, 893.0), (31.4, 891.0)]
    changes = [8.4, 11.6, 14.8, 18.0, 24.7, 27.9, 31.4]
    assert [len(c) for c in split_cycles(points, changes)] == [2, 2, 2, 2, 1]
    grown = floor_growth(points, changes, hold=True)
    assert grown.rate is None and grown.cycles == 2


#: A sawtooth job's own 1-s record (two workers re-created every 2.6-s epoch,
#: teeth of ~130 MB on lows of 816-903 MB, one 657, level over its 61 epochs), read
#: every 2.5 s: the readings with its two workers (MB), and the worker changes.
ALIASED_READINGS: Series = [
    (0.0, 891), (2.1, 878), (7.3, 877), (9.4, 816), (12.4, 872), (14.5, 834), (16.6, 971),
    (19.7, 829), (21.7, 965), (24.8, 846), (26.9, 976), (30.0, 836), (32.0, 951), (34.1, 926),
    (37.2, 968), (39.2, 936), (42.3, 971), (44.4, 932), (47.5, 962), (49.5, 939), (51.6, 921),
    (54.7, 955), (56.8, 928), (59.9, 940)]
ALIASED_CHANGES = [2.1, 7.3, 9.4, 12.4, 14.5, 19.7, 24.8, 30.0, 34.1, 37.2, 39.2, 42.3, 44.4,
                   47.5, 49.5, 51.6, 54.7, 56.8, 59.9]


def test_floors_that_rise_under_tops_that_hold_are_no_growth() -> None:
    """Read at a cadence near the epoch's length, the readings fall later and later
    on the teeth: from 34 s on none lands near a trough, and the joined cycles'
    lowest readings rise by ~100 MB while their highest hold. A leak lifts the
    whole tooth; this is where the readings fell, not growth."""
    cycles = split_cycles(ALIASED_READINGS, ALIASED_CHANGES)
    groups = sampled_cycles(cycles[:-1])
    lows = [min(v for _, v in group) for group in groups]
    highs = [max(v for _, v in group) for group in groups]
    assert lows[-1] - min(lows) >= 100 and max(highs) - min(highs[1:]) <= 25, (lows, highs)
    grown = floor_growth(ALIASED_READINGS, ALIASED_CHANGES, hold=True)
    assert grown.judged_on == "floor" and grown.cycles >= MIN_CYCLES
    assert grown.rate == 0.0
    # A leak of 300 MB/min lifts the tops with the floors: read.
    leaking = [(t, v + 5.0 * t) for t, v in ALIASED_READINGS]
    leak = floor_growth(leaking, ALIASED_CHANGES, hold=True)
    assert leak.rate is not None and leak.rate >= 300


@pytest.mark.parametrize(("period", "floor_mb_s"), [(4, 5.0), (4, 2.0)])
def test_a_rising_floor_under_teeth_read_twice_each_is_still_read(period: int,
                                                                  floor_mb_s: float) -> None:
    """Teeth every 4 s read every 2 s, the workers re-created each tooth: the
    joined cycles' floors still give the floor's rate."""
    points = sawtooth(120, period, 120.0, floor_mb_s=floor_mb_s, step=2)
    changes = [float(t) for t in range(period, 121, period)]
    grown = floor_growth(points, changes, hold=True)
    assert grown.judged_on == "floor"
    assert grown.rate == pytest.approx(floor_mb_s * 60, rel=0.05)


def test_readings_with_a_worker_gone_are_no_floor() -> None:
    """Read as an epoch ends, a worker already exited (RSS 0) leaves the memory of
    fewer processes: a dip no floor of the job is made of (a CI run's sawtooth,
    level at 819-874 MB with its two workers, read 653 MB once with one, and that
    first floor against the later ones read 1,909 MB/min). The floor is read from
    the readings with the loader's usual workers running."""
    job = Job(workers=2, worker_epoch_s=4, worker_rss_growth_mb_s=30.0)
    trees = [process_tree_sample(job, i) for i in range(1, 41)]

    def worker_gone(tree: ProcessTreeSample) -> ProcessTreeSample:
        kept, gone = tree.processes[:-1], tree.processes[-1]
        return replace(tree, processes=(*kept, replace(gone, rss_bytes=0)))

    dipped = [worker_gone(t) if i in (4, 12) else t for i, t in enumerate(trees, 1)]
    usual = with_usual_workers(dipped)
    assert [t.t for t in usual] == [t.t for i, t in enumerate(trees, 1) if i not in (4, 12)]
    session = Session(PID)
    for tree in dipped:
        session.add(tree)
    grown = host_memory_growth(session, T0 + 40)
    alone = floor_growth(series_points(usual, PROC_RSS), worker_changes(dipped), hold=True)
    assert grown == alone and grown.rate == 0.0 and grown.cycles >= MIN_CYCLES
    # A tie keeps the larger count; a job without workers keeps every reading.
    assert with_usual_workers([dipped[3], dipped[4]]) == [dipped[4]]
    lone = [process_tree_sample(Job(workers=0), i) for i in range(1, 6)]
    assert with_usual_workers(lone) == lone and live_workers(lone[0]) == 0


def test_a_rise_to_a_new_level_is_no_growth_once_it_stands_there() -> None:
    """pytorch/examples' time_sequence_prediction (LBFGS, 30-s steps): a 60-s
    report led with "host memory grows 248 MB/min" while its last 20 s stood
    within 6 MB. The watch was not recorded; this is the shape that reads so,
    one rise to a new level. One step between two levels fits it better than a
    line; a leak's swings do not."""
    def rise(t: float) -> float:
        return 1220.0 + 245.0 * min(1.0, max(0.0, (t - 14.0) / 10.0)) + t % 3
    points = [(float(t), rise(t)) for t in range(0, 61, 2)]
    slope = slope_per_minute(points)
    assert slope is not None and slope > 200, "read as a slope, a growth"
    # Level for 12 s after a 10-s rise (and from then on): no growth.
    for end in (36, 46, 60):
        grown = floor_growth([p for p in points if p[0] <= end])
        assert grown.rate == 0.0 and grown.judged_on == "steady", (end, grown)
    # A steady leak keeps its rate, on a clean line and on word_language_model's swings.
    leak = [(float(t), 400.0 + 8.0 * t) for t in range(0, 61, 2)]
    assert floor_growth(leak).rate == pytest.approx(480.0)
    swinging = [(float(t), 4000.0 + mb + 8.0 * t) for t, mb in enumerate(WORD_LM_RSS_SWING)]
    assert floor_growth(swinging[:41:2]).rate == pytest.approx(480.0, rel=0.35)
