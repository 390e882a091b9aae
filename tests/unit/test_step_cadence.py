"""How often the collector reads the loop's counter: every second while it moves a
step or two between readings (slow steps, timed between their moves), at the
warm-up and then the steady cadence otherwise, and never every second for a
"counter" that never moves."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from aitop.probes.collector import Collector, CollectorConfig, PeriodicTask
from aitop.probes.samples import LogEvent, StepCounterSample
from aitop.probes.session import Session


class Scripted:
    """A step probe that reads the given values of ``step``, one per call."""

    log_name = None
    log_via = None

    def __init__(self, values: Sequence[int]) -> None:
        self.values = list(values)

    def sample(self, loop_frame: str | None, thread_id: str | None,
               worker_pids: Sequence[int] = (), compiling: bool = False,
               ) -> list[StepCounterSample]:
        return [StepCounterSample(0.0, "step", self.values.pop(0), frame="train (t.py)")]

    def frame_events(self) -> list[LogEvent]:
        return []

    def read_log(self) -> StepCounterSample | None:
        return None

    def log_events(self) -> list[LogEvent]:
        return []


def intervals(values: Sequence[int]) -> list[float]:
    config = CollectorConfig.headless()
    collector = Collector(Session(1), process=None, host=None, gpu=None, storage=None,
                          environment=None, stacks=None, steps=Scripted(values),
                          config=config)
    task = next(loop for loop in collector.loops if loop.name == "steps")
    out = []
    for _ in values:
        task.work()
        out.append(task.interval_s)
    return out


def test_a_slow_counter_is_read_every_second() -> None:
    config = CollectorConfig.headless()
    slow, warm = config.steps_slow_interval_s, config.steps_warmup_interval_s
    assert intervals([10, 11, 12, 12, 13]) == [warm, slow, slow, slow, slow]


def test_a_fast_counter_keeps_the_warm_up_then_the_steady_cadence() -> None:
    config = CollectorConfig.headless()
    got = intervals([0, 40, 80, 120, 160, 200, 240])
    assert got == [config.steps_warmup_interval_s] * 5 + [config.steps_interval_s] * 2


def test_a_counter_that_never_moves_is_not_read_every_second() -> None:
    config = CollectorConfig.headless()
    assert config.steps_slow_interval_s not in intervals([5, 5, 5, 5])


def test_the_counter_is_read_off_the_beat_and_only_it() -> None:
    # A count that wraps every epoch, read on one beat, can advance by the same
    # leftover of an epoch each time; the waits vary by up to 30 % either way.
    config = CollectorConfig.headless()
    collector = Collector(Session(1), process=None, host=None, gpu=None, storage=None,
                          environment=None, stacks=None, steps=Scripted([0]), config=config)
    steps = next(loop for loop in collector.loops if loop.name == "steps")
    waits = [steps.delay_after(0) for _ in range(200)]
    cadence = steps.interval_s
    assert all(0.7 * cadence <= w <= 1.3 * cadence for w in waits)
    assert max(waits) - min(waits) > 0.4 * cadence
    # A failing read backs off as before, with no draw.
    assert steps.delay_after(1) == steps.delay_after(1)
    # Other tasks keep their beat.
    assert PeriodicTask("host", lambda: None, 2.0, {}, threading.Event()).delay_after(0) == 2.0
