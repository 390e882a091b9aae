"""Which source steps/s comes from, and what the report says of the others.

Readings are made as the probes make them: a loop counter read every second
(a slow one) or every two, the DataLoader workers' batch index read twice per
tick (the second ``paired``), restarting each epoch and running ahead by a few
batches, the stack windows' step cycles.
"""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
from aitop.probes.samples import StepCounterSample
from aitop.probes.step_cycles import CYCLES_COUNTER
from aitop.probes.step_rate import steps_per_second
from aitop.probes.step_sources import choose_step_readings
from aitop.probes.steps import WORKER_COUNTER


def worker_readings(rate: float, epoch: int, seconds: float = 16.0, tick_s: float = 2.0,
                    seed: int = 0) -> list[StepCounterSample]:
    """The workers' index of a loop at ``rate`` steps/s with ``epoch`` batches an
    epoch, read every ``tick_s`` and again 0.4 s later, up to 4 batches ahead."""
    rng = random.Random(seed)
    out = []
    t = 3.5
    while t < seconds:
        for paired, at in ((False, t), (True, t + 0.4)):
            value = (math.floor(rate * at) + rng.randint(0, 4)) % epoch
            out.append(StepCounterSample(1000 + at, WORKER_COUNTER, value,
                                         source="workers", paired=paired))
        t += tick_s
    return out


def from_loaders(readings: list[StepCounterSample], *loaders: str) -> list[StepCounterSample]:
    """The readings as if each came from the workers of ``loaders[k]``, k in turn
    every ``len(readings) // len(loaders)`` readings."""
    size = -(-len(readings) // len(loaders))
    return [dataclasses.replace(r, loader=loaders[i // size]) for i, r in enumerate(readings)]


def cycle_readings(rate: float, windows: int = 3) -> list[StepCounterSample]:
    out = []
    for k in range(windows):
        t0, t1 = 1000 + 10 * k, 1008 + 10 * k
        out += [StepCounterSample(t0, CYCLES_COUNTER, 0, source="stacks", start=True),
                StepCounterSample(t1, CYCLES_COUNTER, round(rate * 8), source="stacks")]
    return out


def test_the_workers_index_with_epochs_longer_than_a_tick_is_shown() -> None:
    chosen = choose_step_readings(worker_readings(19.0, epoch=120))
    assert chosen.source == "workers", chosen.tried
    assert steps_per_second(chosen.readings) == pytest.approx(19.0, rel=0.10)


def test_an_epoch_that_turns_over_between_ticks_sets_the_index_aside() -> None:
    """20 batches an epoch at 17/s, read every 2 s: 34 batches go by between ticks,
    and differencing the index read ~5/s (the short epochs' x2.6 low, and worse)."""
    readings = worker_readings(17.0, epoch=20)
    chosen = choose_step_readings(readings)
    assert chosen.source is None and chosen.readings == []
    workers = chosen.tried[2]
    assert workers.startswith("DataLoader workers' batch index: set aside: moves ")
    assert "turn over between readings" in workers
    assert chosen.tried[0] == "loop counter: not read"


def test_workers_of_a_training_and_an_evaluation_loader_count_no_steps() -> None:
    """The training loader's workers, then the validation loader's, then the
    training loader's again: each counts its own loader's batches."""
    readings = from_loaders(worker_readings(19.0, epoch=400), "<Train at 0x1>", "<Val at 0x2>",
                            "<Train at 0x1>")
    chosen = choose_step_readings(readings)
    assert chosen.source is None, chosen
    assert chosen.tried[2] == (
        "DataLoader workers' batch index: set aside: its workers load 2 datasets in turn "
        "(<Train at 0x1>, <Val at 0x2>): the index counts each loader's batches (training "
        "and evaluation alike), not the steps")
    # Workers of both fetching at once say so in one reading.
    both = from_loaders(worker_readings(19.0, epoch=400), "<Train at 0x1>, <Val at 0x2>")
    assert choose_step_readings(both).source is None


def test_a_job_that_evaluates_has_no_step_count_from_its_workers_alone() -> None:
    """Workers of one dataset seen (the evaluation loader's: the training loader's
    sit on full queues while the step runs), in a job that evaluates 30 % of the
    time: the index is set aside unless the log or the cycles agree with it."""
    readings = from_loaders(worker_readings(19.0, epoch=400), "<Images at 0x2>")
    chosen = choose_step_readings(readings, evaluating=0.3)
    assert chosen.source is None, chosen
    assert chosen.tried[2].startswith(
        "DataLoader workers' batch index: set aside: the job evaluates 30% of the time"), chosen
    assert choose_step_readings(readings, evaluating=0.02).source == "workers"
    agreed = choose_step_readings([*readings, *cycle_readings(19.0)], evaluating=0.3)
    assert agreed.source == "workers", agreed.tried


def test_the_session_hands_over_its_windows_share_of_evaluation() -> None:
    from aitop.probes.samples import StackWindow
    from aitop.probes.session import Session

    session = Session(1)
    for k in range(3):
        session.add(StackWindow(1000.0 + 6 * k, 1006.0 + 6 * k, "MainThread", "1", 60,
                                {"forward": 20, "backward": 22, "eval": 18}))
    for reading in from_loaders(worker_readings(19.0, epoch=400), "<Images at 0x2>"):
        session.add(reading)
    chosen = session.step_readings()
    assert chosen.source is None
    assert any("the job evaluates 30% of the time" in line for line in chosen.tried), chosen


def test_a_new_dataset_each_epoch_still_counts() -> None:
    """A loader built anew each epoch over a new dataset object: one loader after
    another, never back to an earlier one."""
    readings = from_loaders(worker_readings(19.0, epoch=400), "<Shard at 0x1>", "<Shard at 0x2>",
                            "<Shard at 0x3>")
    chosen = choose_step_readings(readings)
    assert chosen.source == "workers", chosen.tried
    assert steps_per_second(chosen.readings) == pytest.approx(19.0, rel=0.10)


def test_the_index_is_checked_against_the_cycles_when_there_are_some() -> None:
    agree = choose_step_readings(worker_readings(0.9, epoch=500) + cycle_readings(1.0))
    assert agree.source == "workers", agree.tried
    disagree = choose_step_readings(worker_readings(3.0, epoch=500) + cycle_readings(1.0))
    assert disagree.source == "stacks"
    assert disagree.tried[0].startswith("DataLoader workers' batch index: set aside: read ")
    assert "where the step cycles in the stacks give 1/s" in disagree.tried[0]


def test_a_counter_much_faster_than_the_cycles_is_no_step_count() -> None:
    """``for i in range(0, n, bptt)``: ``i`` moves 35 a step."""
    loop = [StepCounterSample(1000 + 2 * k, "i", 35 * k, source="loop") for k in range(10)]
    chosen = choose_step_readings(loop + cycle_readings(0.5))
    assert chosen.source == "stacks"
    assert chosen.rejected is not None and chosen.rejected.startswith("`i` advanced 17.5/s, 35x")
    assert chosen.rejected.endswith("of the step cycles the stacks count: not a step count")


def test_with_no_rate_every_source_says_why() -> None:
    readings = [
        StepCounterSample(1000, None, None, error="no integer local of a step counter's name"),
        StepCounterSample(1000, None, None, source="log", error="stdout is /dev/null"),
        StepCounterSample(1000, None, None, source="workers",
                          error="the job has no DataLoader workers"),
        StepCounterSample(1001, None, None, source="stacks", error="steps too fast"),
    ]
    chosen = choose_step_readings(readings)
    assert chosen.source is None
    assert chosen.tried == (
        "loop counter: no integer local of a step counter's name",
        "job log: stdout is /dev/null",
        "DataLoader workers' batch index: the job has no DataLoader workers",
        "step cycles in the stacks: steps too fast",
    )
    one = choose_step_readings([StepCounterSample(1000, "step", 4)])
    assert one.tried[0] == ("loop counter: 1 reading(s) of `step`, not yet a rate "
                            "(needs 2 s and 2 steps)")


@pytest.mark.parametrize("phase", [0.1, 0.5, 0.9, 1.3, 1.7])
def test_a_slow_counter_read_every_second_is_timed_between_its_moves(phase: float) -> None:
    """0.5 steps/s, read at 3.5 s and 5.5 s, then every second (a slow counter)."""
    times = [3.5, 5.5, *[6.5 + k for k in range(14)]]
    readings = [StepCounterSample(1000 + t, "step", math.floor((t + phase) * 0.5))
                for t in times]
    assert steps_per_second(readings) == pytest.approx(0.5, rel=0.10)


def test_never_a_rate_from_one_step() -> None:
    readings = [StepCounterSample(1000 + t, "step", 7 if t < 6 else 8) for t in range(12)]
    assert steps_per_second(readings) is None
