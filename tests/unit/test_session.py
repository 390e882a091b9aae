"""The Session: bounded ring buffers, window selection, aggregates, phase fractions."""

from __future__ import annotations

import math
import threading
import tracemalloc

import pytest
from aitop.knowledge.metrics.window import compute_metrics
from aitop.probes.samples import (
    EnvironmentInfo,
    HostSample,
    ProcessTreeSample,
    StackWindow,
    StepCounterSample,
)
from aitop.probes.session import (
    DEFAULT_CAPACITY,
    PHASES,
    Ring,
    Session,
    aggregate,
    percentile,
)
from support.knowledge import HELPER_THREADS
from support.synthetic import PID, T0, Job, extend, host_sample, make_session, metrics_at


def _host(t: float, cpu: float | None = 50.0) -> HostSample:
    return HostSample(
        t=t, cpu_count=4, cpu_percent=cpu, per_core_percent=(), iowait_percent=None,
        ram_used_bytes=None, ram_total_bytes=None, swap_used_bytes=None, swap_total_bytes=None,
        load1=None, load5=None, load15=None,
    )


def _window(t_end: float, counts: dict[str, int], total: int | None = None,
            error: str | None = None) -> StackWindow:
    return StackWindow(
        t_start=t_end - 1.0, t_end=t_end, thread_name="MainThread", thread_id="1",
        total_samples=sum(counts.values()) if total is None else total,
        phase_counts=counts, error=error,
    )


# ------------------------------------------------------------------- rings


def test_ring_keeps_the_newest_items_up_to_capacity() -> None:
    ring: Ring[int] = Ring(100)
    for i in range(10_000):
        ring.append(i)
    assert len(ring) == 100
    assert ring.capacity == 100
    assert ring.items() == list(range(9_900, 10_000))
    assert ring.last() == 9_999


def test_empty_ring() -> None:
    ring: Ring[int] = Ring(3)
    assert ring.items() == []
    assert ring.last() is None
    assert len(ring) == 0


def test_ring_items_is_a_copy() -> None:
    ring: Ring[int] = Ring(3)
    ring.append(1)
    items = ring.items()
    items.append(2)
    assert ring.items() == [1]


def test_a_window_asked_again_holds_what_the_ring_holds_then() -> None:
    """A window asked twice between appends is kept, handed out as a copy, and
    forgotten at the next append (which may evict its oldest sample)."""
    ring: Ring[HostSample] = Ring(5)
    for t in range(1, 11):
        ring.append(_host(float(t)))
    first = ring.window(0.0, 9.0)
    assert [h.t for h in first] == [6.0, 7.0, 8.0, 9.0]
    first.clear()
    assert [h.t for h in ring.window(0.0, 9.0)] == [6.0, 7.0, 8.0, 9.0]
    ring.append(_host(11.0))
    assert [h.t for h in ring.window(0.0, 9.0)] == [7.0, 8.0, 9.0]
    # Many other windows in between (a replay scrubbing) change no answer.
    for lo in range(40):
        assert [h.t for h in ring.window(lo / 4, 11.0)] == [
            t for t in (7.0, 8.0, 9.0, 10.0, 11.0) if t > lo / 4]
    assert [h.t for h in ring.window(0.0, 9.0)] == [7.0, 8.0, 9.0]


def test_ring_memory_does_not_grow_beyond_capacity() -> None:
    ring: Ring[HostSample] = Ring(200)
    job = Job()
    tracemalloc.start()
    try:
        # Full once, so that what the ring holds was allocated while tracing.
        for i in range(200):
            ring.append(host_sample(job, i))
        before, _ = tracemalloc.get_traced_memory()
        for i in range(200, 6_200):
            ring.append(host_sample(job, i))
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # 6 000 more samples of ~160 bytes each would be near a megabyte if they were kept.
    assert after - before < 32 * 1024, f"grew by {after - before} bytes"
    assert len(ring) == 200
    last = ring.last()
    assert last is not None and last.t == T0 + 6_199


def test_session_rings_are_bounded_for_every_kind() -> None:
    session = extend(Session(PID, capacity=50), Job(), 1, 120)
    for ring in (session.processes, session.host, session.gpu, session.stacks, session.steps,
                 session.storage):
        assert len(ring) == 50
        assert ring.capacity == 50
        items = ring.items()
        times = [s.t_end if isinstance(s, StackWindow) else s.t for s in items]
        assert times == [T0 + i for i in range(71, 121)]
    assert Session(PID).capacity == DEFAULT_CAPACITY == Session(PID).host.capacity


# ------------------------------------------------------------------- adding


def test_add_routes_by_kind_and_rejects_others() -> None:
    session = Session(PID)
    with pytest.raises(TypeError, match="not a sample kind"):
        session.add(object())
    assert session.started_at is None
    env = EnvironmentInfo(t=T0, pid=PID, cmdline=("python",), python_version="3.11",
                          torch_version=None)
    session.add(env)
    assert session.environment is env
    assert session.started_at is None  # the environment is not a timed sample
    session.add(_window(T0 + 5, {"forward": 1}))
    assert session.started_at == T0 + 5  # a stack window is stamped at its end
    session.add(_host(T0 + 6))
    assert session.started_at == T0 + 5
    assert len(session.stacks) == len(session.host) == 1
    assert len(session.gpu) == 0


def test_target_exit_is_recorded_once() -> None:
    session = Session(PID)
    session.add(ProcessTreeSample(t=T0, target_pid=PID, alive=True, processes=()))
    assert session.target_exited_at is None
    session.add(ProcessTreeSample(t=T0 + 1, target_pid=PID, alive=False, processes=()))
    session.add(ProcessTreeSample(t=T0 + 2, target_pid=PID, alive=False, processes=(),
                                  exit_status=3))
    assert session.target_exited_at == T0 + 1
    assert session.target_exit_status == 3


def test_latest_time_is_the_newest_of_any_kind() -> None:
    session = Session(PID)
    assert session.latest_time() is None
    session.add(_host(T0 + 3))
    session.add(_window(T0 + 7, {"forward": 1}))
    session.add(StepCounterSample(T0 + 5, "step", 1))
    assert session.latest_time() == T0 + 7


# ----------------------------------------------------------------- windows


def test_window_is_open_at_the_start_and_closed_at_the_end() -> None:
    session = Session(PID)
    for i in range(10):
        session.add(_host(T0 + i))
    ring = session.host
    picked = ring.window(T0 + 4, T0 + 7)
    assert [s.t - T0 for s in picked] == [5.0, 6.0, 7.0]  # (4, 7]
    assert ring.window(T0 + 7, T0 + 7.5) == []
    assert ring.window(T0 - 101, T0 - 1) == []
    assert len(ring.window(T0, T0 + 100)) == 9
    assert len(ring.window(T0 - 0.5, T0 + 100)) == 10


def test_series_skips_unknown_and_nan() -> None:
    session = Session(PID)
    for i, cpu in enumerate([10.0, None, float("nan"), 40.0]):
        session.add(_host(T0 + i, cpu))
    points = session.series(session.host, lambda s: s.cpu_percent, T0 + 3, 10.0)
    assert points == [(T0, 10.0), (T0 + 3, 40.0)]
    agg = session.aggregate(session.host, lambda s: s.cpu_percent, T0 + 3, 10.0)
    assert agg is not None and agg.mean == 25.0 and agg.count == 2
    assert session.aggregate(session.host, lambda s: None, T0 + 3, 10.0) is None


# -------------------------------------------------------------- aggregates


def test_percentile_interpolates_linearly() -> None:
    values = [float(v) for v in range(1, 11)]
    assert percentile(values, 5) == pytest.approx(1.45)  # pos 0.45 between 1 and 2
    assert percentile(values, 95) == pytest.approx(9.55)
    assert percentile(values, 50) == pytest.approx(5.5)
    assert percentile(values, 0) == 1.0
    assert percentile(values, 100) == 10.0
    assert percentile([10.0, 20.0], 25) == pytest.approx(12.5)
    assert percentile([7.0], 95) == 7.0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_aggregate_of_known_values() -> None:
    values = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]
    # Out of order on purpose: last is the newest, not the largest.
    order = [7, 0, 1, 2, 3, 4, 5, 6]
    points = [(T0 + i, values[j]) for i, j in enumerate(order)]
    agg = aggregate(points)
    assert agg is not None
    assert agg.mean == 5.0
    assert agg.stdev == 2.0  # population standard deviation
    assert agg.last == 7.0
    assert (agg.minimum, agg.maximum) == (2.0, 9.0)
    assert agg.count == 8
    # p5: position 0.35 -> 2 + 0.35 * (4 - 2); p95: position 6.65 -> 7 + 0.65 * 2
    assert agg.p5 == pytest.approx(2.7)
    assert agg.p95 == pytest.approx(8.3)


def test_trend_is_per_minute_from_a_linear_series() -> None:
    rising = aggregate([(T0 + 2 * i, 3.0 + 0.5 * (2 * i)) for i in range(30)])
    assert rising is not None and rising.trend == pytest.approx(30.0)  # 0.5/s
    falling = aggregate([(T0 + i, 100.0 - 0.1 * i) for i in range(10)])
    assert falling is not None and falling.trend == pytest.approx(-6.0)
    flat = aggregate([(T0 + i, 42.0) for i in range(10)])
    assert flat is not None and flat.trend == 0.0 and flat.stdev == 0.0


def test_trend_needs_three_points_and_a_time_spread() -> None:
    two = aggregate([(T0, 1.0), (T0 + 1, 2.0)])
    assert two is not None and two.trend == 0.0
    same_time = aggregate([(T0, 1.0), (T0, 2.0), (T0, 3.0)])
    assert same_time is not None and same_time.trend == 0.0
    assert aggregate([]) is None
    one = aggregate([(T0, 5.0)])
    assert one is not None and (one.mean, one.p5, one.p95, one.stdev) == (5.0, 5.0, 5.0, 0.0)


def test_window_aggregates_through_compute_metrics() -> None:
    session = Session(PID)
    extend(session, Job(host_cpu=10.0), 1, 10)
    extend(session, Job(host_cpu=50.0), 11, 20)
    m = metrics_at(session, 20, window_s=10.0)  # only the 50 % half
    assert m["host_cpu_mean"] == 50.0 and m["host_cpu_stdev"] == 0.0
    m = metrics_at(session, 20, window_s=20.0)
    assert m["host_cpu_mean"] == 30.0
    assert m["host_cpu_min"] == 10.0 and m["host_cpu_last"] == 50.0
    assert m["host_cpu_stdev"] == 20.0
    # Least squares over t = 1..20 of a 10 -> 50 step: cov 2000 / var 665 per second.
    assert m["host_cpu_trend"] == pytest.approx(2000 / 665 * 60)
    assert m["window_s"] == 20.0


# ----------------------------------------------------------------- phases


def test_phase_fractions_sum_to_one_across_windows() -> None:
    session = Session(PID)
    session.add(_window(T0 + 1, {"data_wait": 90, "forward": 10}))  # outside the window
    session.add(_window(T0 + 11, {"data_wait": 50, "forward": 30, "backward": 20}))
    session.add(_window(T0 + 12, {"backward": 10, "optimizer": 15, "other": 25}))
    session.add(_window(T0 + 13, {"data_wait": 500}, error="py-spy exited"))  # skipped
    session.add(_window(T0 + 14, {"checkpoint": 40, "sync": 10}))
    fractions = session.phase_fractions(T0 + 14, 10.0)
    assert fractions is not None
    assert set(fractions) == set(PHASES)
    assert math.fsum(fractions.values()) == pytest.approx(1.0)
    total = 100 + 50 + 50
    assert fractions["data_wait"] == pytest.approx(50 / total)
    assert fractions["backward"] == pytest.approx(30 / total)
    assert fractions["checkpoint"] == pytest.approx(40 / total)
    assert fractions["optimizer"] == pytest.approx(15 / total)
    counts, samples = session.phase_counts(T0 + 14, 10.0)
    assert samples == 200
    assert counts["data_wait"] == 50 and counts["forward"] == 30


def test_phase_fractions_unknown_without_samples() -> None:
    session = Session(PID)
    assert session.phase_fractions(T0, 10.0) is None
    session.add(_window(T0 + 1, {}, total=0))
    assert session.phase_fractions(T0 + 1, 10.0) is None
    session.add(_window(T0 + 2, {"forward": 3}, error="boom"))
    assert session.phase_fractions(T0 + 2, 10.0) is None


def test_phase_fractions_from_a_synthetic_job() -> None:
    session = make_session(30, phases={"data_wait": 0.25, "forward": 0.25, "backward": 0.5})
    m = metrics_at(session, 30)
    assert (m["phase_data_wait"], m["phase_forward"], m["phase_backward"]) == (0.25, 0.25, 0.5)
    assert m["phase_compute"] == 0.75
    assert m["phase_other"] == 0.0
    assert m["phase_samples"] == 20_000.0


# ----------------------------------------------------------------- threads


def test_appends_from_threads_while_reading() -> None:
    session = Session(PID, capacity=100)
    n = 1_000
    errors: list[BaseException] = []
    done = threading.Event()
    kinds = ("processes", "host", "gpu", "stacks", "steps", "storage")

    def writer(kind: str) -> None:
        from support.synthetic import (
            gpu_sample,
            process_tree_sample,
            stack_window,
            step_sample,
            storage_sample,
        )

        make = {
            "processes": process_tree_sample, "host": host_sample, "gpu": gpu_sample,
            "stacks": stack_window, "steps": step_sample, "storage": storage_sample,
        }[kind]
        job = Job()
        try:
            for i in range(1, n + 1):
                session.add(make(job, i))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def reader() -> None:
        reads = 0
        try:
            while not done.is_set() or reads < 3:
                now = session.latest_time()
                if now is not None:
                    compute_metrics(session, now, 20.0, HELPER_THREADS)
                    session.phase_fractions(now, 20.0)
                    for kind in kinds:
                        items = getattr(session, kind).items()
                        assert len(items) <= 100
                reads += 1
        except BaseException as exc:
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(kind,)) for kind in kinds]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers + writers:
        t.start()
    for t in writers:
        t.join(timeout=30)
    done.set()
    for t in readers:
        t.join(timeout=30)
    assert not errors, errors
    for kind in kinds:
        ring = getattr(session, kind)
        items = ring.items()
        assert len(items) == 100
        times = [s.t_end if isinstance(s, StackWindow) else s.t for s in items]
        assert times == [T0 + i for i in range(n - 99, n + 1)]
    assert session.latest_time() == T0 + n


# ------------------------------------------------------------ first step


def test_a_step_is_proven_by_a_few_step_phase_samples_over_recent_windows() -> None:
    """A server whose model takes a thirtieth of its thread shows one forward
    sample a window: three such windows within the lookback prove it steps."""
    session = Session(PID)
    for t in (10.0, 16.0):
        session.add(_window(t, {"other": 55, "forward": 1}))
        assert session.first_step_at is None
    session.add(_window(22.0, {"other": 55, "forward": 1}))
    assert session.first_step_at == 22.0


def test_step_phase_samples_older_than_the_lookback_do_not_add_up() -> None:
    """A loading job's stray samples, one now and then, never prove a step."""
    session = Session(PID)
    for t in (10.0, 41.0, 72.0, 103.0):
        session.add(_window(t, {"other": 300, "forward": 1}))
    assert session.first_step_at is None
    session.add(_window(104.0, {"other": 9, "data_wait": 2}))
    assert session.first_step_at == 104.0
