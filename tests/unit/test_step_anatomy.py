"""A step's anatomy from the order of the training thread's samples.

Sequences are made the way py-spy takes them: a loop whose phases last so many
milliseconds (each step a few per cent longer or shorter than the last, as real
steps are), sampled every 100 ms (10 Hz, aitop's rate) from a random start; or
phases drawn at random, as a loop that steps far faster than it is sampled
shows them. A count of backward passes per step is trusted only where the
steps agree and last what the loop's counter says, and is never claimed from
noise.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

import pytest
from aitop.knowledge.metrics.anatomy import (
    agreeing_steps,
    count_passes,
    last_backward_ratio,
    optimizer_loop_frame,
)
from aitop.probes.samples import StackWindow, StepShape
from aitop.probes.speedscope import parse_speedscope
from aitop.probes.stack_window import summarize_window
from aitop.probes.step_anatomy import step_shapes
from support.knowledge import PACKAGED

Step = Sequence[tuple[str, float]]
#: py-spy's sampling interval at aitop's 10 Hz.
INTERVAL_S = 0.1


def sampled(step: Step, seconds: float, seed: int, step_jitter: float = 0.03) -> list[str]:
    """The phase at each 100 ms sample of a loop repeating ``step`` for ``seconds``;
    each step's phases ``step_jitter`` (a standard deviation) longer or shorter."""
    rng = random.Random(seed)
    timeline: list[tuple[float, str]] = []
    t = 0.0
    while t < seconds * 1000.0 + 4000.0:
        scale = 1.0 + rng.gauss(0.0, step_jitter)
        for phase, ms in step:
            t += ms * scale
            timeline.append((t, phase))
    out: list[str] = []
    at, index = rng.uniform(0.0, 2000.0), 0
    while len(out) < seconds / INTERVAL_S:
        while timeline[index][0] <= at:
            index += 1
        out.append(timeline[index][1])
        at += INTERVAL_S * 1000.0 + rng.uniform(-2.0, 2.0)
    return out


def micro_steps(n: int, forward: float, backward: float, optimizer: float,
                last_extra: float = 0.0) -> list[tuple[str, float]]:
    """N forward/backward passes, the last one ``last_extra`` ms longer, then the optimizer."""
    step: list[tuple[str, float]] = []
    for i in range(n):
        step += [("data_wait", 5.0), ("forward", forward),
                 ("backward", backward + (last_extra if i == n - 1 else 0.0))]
    return [*step, ("optimizer", optimizer)]


def steps_per_s(step: Step) -> float:
    """What the loop's counter of optimizer steps would read."""
    return 1000.0 / sum(ms for _, ms in step)


def counted(phases: Sequence[str], rate: float | None = None) -> int | None:
    """Backward passes per step as the metrics count them (``rate``: the counter's)."""
    return count_passes(step_shapes(phases), INTERVAL_S, rate)[0]


def test_steps_are_read_between_optimizer_runs_and_cut_steps_left_out() -> None:
    letters = {"F": "forward", "B": "backward", "S": "optimizer", "C": "comm", "X": "other"}

    def shapes(text: str) -> tuple[StepShape, ...]:
        return step_shapes([letters[c] for c in text])

    assert shapes("BBSFBBFBCXBSSFBFBSF") == (StepShape(9, (2, 3), 1), StepShape(6, (1, 1), 2))
    # A comm sample inside backward lengthens it; one after a forward starts nothing.
    assert shapes("SFCBS") == (StepShape(4, (1,), 1),)
    assert shapes("FBFB") == ()


@pytest.mark.parametrize("n", [2, 3, 4])
def test_accumulation_is_counted_where_each_pass_spans_several_samples(n: int) -> None:
    step = micro_steps(n, forward=150.0, backward=300.0, optimizer=120.0)
    for seed in range(20):
        assert counted(sampled(step, 20.0, seed), steps_per_s(step)) == n, seed
        # Without a counter there is no step length to check the stretches against.
        assert counted(sampled(step, 20.0, seed)) is None


def test_an_optimizer_step_shorter_than_the_sampling_is_missed_and_read_through() -> None:
    """A 40-ms optimizer step is seen in under half the steps: the stretches span
    one, two or three steps, each read as the steps the counter says it spans."""
    step = micro_steps(3, forward=130.0, backward=330.0, optimizer=40.0)
    counts = [counted(sampled(step, 15.0, seed), steps_per_s(step)) for seed in range(100)]
    assert counts.count(3) >= 75 and set(counts) <= {3, None}, counts


def test_one_backward_pass_per_step_is_one() -> None:
    step = micro_steps(1, forward=200.0, backward=400.0, optimizer=150.0)
    assert all(counted(sampled(step, 20.0, seed), steps_per_s(step)) == 1 for seed in range(20))


def test_the_counter_may_count_micro_batches_where_every_optimizer_step_is_seen() -> None:
    """A counter that ticks once a pass (``for i, batch in enumerate(loader)``): the
    stretches span 3 ticks each. That reads as 3 passes a step only where the
    optimizer is long enough to be seen in every step: a short one missed in 2
    steps of 3 would make stretches just like them, one pass a step."""
    step = micro_steps(3, forward=150.0, backward=300.0, optimizer=200.0)
    micro_batches_per_s = 3 * steps_per_s(step)
    assert all(counted(sampled(step, 20.0, seed), micro_batches_per_s) == 3 for seed in range(20))
    short = micro_steps(3, forward=150.0, backward=300.0, optimizer=40.0)
    assert all(counted(sampled(short, 20.0, seed), 3 * steps_per_s(short)) is None
               for seed in range(20))
    one_pass = micro_steps(1, forward=150.0, backward=300.0, optimizer=30.0)
    assert all(counted(sampled(one_pass, 15.0, seed), steps_per_s(one_pass)) in (1, None)
               for seed in range(100))


@pytest.mark.parametrize("step", [
    # 30 ms steps, far faster than the 100 ms sampling: phases in random order.
    micro_steps(1, forward=8.0, backward=15.0, optimizer=7.0),
    micro_steps(4, forward=8.0, backward=15.0, optimizer=7.0),
    # Passes about as long as the sampling interval, optimizer shorter than it.
    micro_steps(4, forward=40.0, backward=90.0, optimizer=30.0),
    micro_steps(1, forward=40.0, backward=90.0, optimizer=30.0),
    # Passes resolved, optimizer shorter than the interval: often missed.
    micro_steps(3, forward=130.0, backward=330.0, optimizer=60.0),
])
def test_a_loop_the_sampling_does_not_resolve_gives_no_wrong_count(step: Step) -> None:
    """At most 1 % of windows: two passes whose forward fell between samples read
    as one, in steps that happen to agree with each other and with the counter."""
    true = sum(1 for phase, _ in step if phase == "backward")
    wrong = [c for seed in range(200)
             if (c := counted(sampled(step, 15.0, seed), steps_per_s(step))) and c != true]
    assert len(wrong) <= 2, wrong


def test_a_stroboscope_is_caught_by_the_counter() -> None:
    """A step of exactly 570 ms sampled every 100 ms: the 30-ms optimizer is caught
    every third step, in a pattern that agrees with itself; the counter's rate
    says the steps are three times shorter."""
    step = micro_steps(4, forward=40.0, backward=90.0, optimizer=30.0)
    fooled = [len(agreed[0].backwards) for seed in range(50)
              if (agreed := agreeing_steps(step_shapes(sampled(step, 20.0, seed, 0.0))))]
    assert len(fooled) >= 25 and 4 not in fooled, fooled
    assert not [seed for seed in range(50)
                if counted(sampled(step, 20.0, seed, 0.0), steps_per_s(step))]


@pytest.mark.parametrize("rate", [0.5, 1.0, 2.0, 5.0, 40.0])
def test_phases_in_random_order_never_claim_accumulation(rate: float) -> None:
    rng = random.Random(7)
    claims = 0
    for _ in range(300):
        phases = rng.choices(["forward", "backward", "optimizer", "data_wait", "other"],
                             weights=[0.3, 0.4, 0.2, 0.05, 0.05], k=200)
        claims += (counted(phases, rate) or 0) >= 2
    assert claims <= 1


def test_the_last_pass_is_no_longer_where_each_syncs_and_longer_where_it_alone_does() -> None:
    every = micro_steps(4, forward=150.0, backward=300.0, optimizer=120.0)
    only_last = micro_steps(4, forward=150.0, backward=150.0, optimizer=120.0, last_extra=450.0)
    for seed in range(10):
        equal = last_backward_ratio(count_passes(step_shapes(sampled(every, 20.0, seed)),
                                                 INTERVAL_S, steps_per_s(every))[1])
        longer = last_backward_ratio(count_passes(step_shapes(sampled(only_last, 20.0, seed)),
                                                  INTERVAL_S, steps_per_s(only_last))[1])
        assert equal is not None and 0.6 <= equal < 1.5, (seed, equal)
        assert longer is not None and longer >= 2.0, (seed, longer)
    assert last_backward_ratio([StepShape(10, (3,))]) is None


def test_a_window_holds_the_steps_and_the_training_threads_techniques() -> None:
    """The order of a speedscope window reaches the window's steps; techniques are
    counted in the training thread's samples, with the frame that showed them."""
    frames = [
        {"name": "thread (7): MainThread", "file": "", "line": 0},
        {"name": "train", "file": "/job/train.py", "line": 20},
        {"name": "Module._call_impl", "file": "torch/nn/modules/module.py", "line": 1},
        {"name": "_engine_run_backward", "file": "torch/autograd/graph.py", "line": 2},
        {"name": "Adam.step", "file": "torch/optim/adam.py", "line": 3},
        {"name": "_single_tensor_adam", "file": "torch/optim/adam.py", "line": 4},
    ]
    fwd, bwd, opt = [0, 1, 2], [0, 1, 3], [0, 1, 4, 5]
    samples = [opt, fwd, bwd, bwd, fwd, bwd, bwd, opt, opt, fwd, bwd, fwd, bwd, opt]
    text = json.dumps({"profiles": [{"samples": samples}], "shared": {"frames": frames}})
    profile = parse_speedscope(text)
    classifier = PACKAGED.phases.classifier()
    window = summarize_window(profile.stacks, classifier, pid=7, t_start=0, t_end=1,
                              order=profile.order)
    assert window.step_shapes == (StepShape(7, (2, 2), 1), StepShape(6, (1, 1), 2))
    assert window.technique_samples["optimizer_for_loop"] == 4
    assert window.technique_frames["optimizer_for_loop"] == (
        "_single_tensor_adam (torch/optim/adam.py)")
    assert optimizer_loop_frame([window]) == "_single_tensor_adam (torch/optim/adam.py)"
    # Without the order (a raw window, a replayed recording) there are no steps.
    assert summarize_window(profile.stacks, classifier, pid=7, t_start=0,
                            t_end=1).step_shapes == ()
    assert StackWindow(0, 1, None, None, 0).step_shapes == ()
