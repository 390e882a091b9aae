"""Steps counted from the order of stack samples, validated against loops whose
steps are known: a loop's phases laid out in time, sampled as py-spy samples
(exponentially distributed intervals at 10 Hz, a fixed number per window,
windows back to back with a relaunch gap: ``benchmarks.step_cycles``), read by
the real ``CycleCounter``.
"""

from __future__ import annotations

import json

import pytest
from aitop.probes.phases import FrameSignature, PhaseClassifier, PhaseRule
from aitop.probes.samples import StackWindow
from aitop.probes.speedscope import OrderedStacks, parse_speedscope
from aitop.probes.stack_window import SampledSpan, summarize_window
from aitop.probes.step_cycles import (
    MAX_MISSED,
    CycleCounter,
    cycle_readings,
    poisson_mean,
    read_runs,
)
from aitop.probes.step_rate import steps_per_second

from benchmarks.step_cycles import ASKED_HZ, counted_rate

PERIOD = 1 / ASKED_HZ

#: One step of a large model: data, forward, backward, optimizer, the loop's own code.
SLOW_STEP = (("data_wait", 0.3), ("forward", 0.6), ("backward", 1.0), ("optimizer", 0.1),
             ("other", 0.1))


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("step", [
    SLOW_STEP,  # 0.48 steps/s
    (("forward", 0.5), ("backward", 0.6), ("other", 0.15)),  # 0.8 steps/s, no data wait
], ids=["0.5-steps-per-s", "0.8-steps-per-s"])
def test_slow_steps_are_counted_within_a_tenth_of_their_rate(
        step: tuple[tuple[str, float], ...], seed: int) -> None:
    true = 1 / sum(d for _, d in step)
    # A headless report's windows: 3 s, 6 s, 12 s (a fixed count of samples each).
    rate, notes = counted_rate(step, [30, 60, 120, 150], seed)
    assert rate is not None, notes
    assert rate == pytest.approx(true, rel=0.10)


def test_steps_too_fast_for_the_samples_are_not_counted() -> None:
    fast = (("data_wait", 0.02), ("forward", 0.08), ("backward", 0.12), ("optimizer", 0.03))
    rate, notes = counted_rate(fast, [30, 60, 150], seed=1)
    assert rate is None
    assert notes[-1] is not None and "steps too fast to count from samples" in notes[-1]
    assert "would fall between samples" in notes[-1]


def test_the_limit_is_where_one_boundary_in_twenty_would_be_missed() -> None:
    # Each side averaging ~3 samples (0.3 s at 10 Hz) is about the limit.
    assert 2.2 < poisson_mean(2.5) < 2.4
    for side_s, counted in ((0.22, False), (0.45, True)):
        step = (("forward", side_s), ("backward", side_s))
        rate, notes = counted_rate(step, [60, 150, 150], seed=3)
        assert (rate is not None) == counted, (side_s, notes, MAX_MISSED)


#: The step's phase signatures (as knowledge/data/phases.yaml has them) for the
#: sample-order tests below.
STEP_RULES = (
    PhaseRule("backward", 10, (FrameSignature("backward", "torch/autograd/__init__.py"),)),
    PhaseRule("forward", 10, (FrameSignature("_call_impl", "torch/nn/modules/module.py"),)),
    PhaseRule("optimizer", 5, (FrameSignature("*", "torch/optim/*"),)),
)
SITE = "/venv/lib/python3.11/site-packages"


class SampledLoop:
    """A training thread's frames (``thread`` and ``train`` among them), and its
    samples laid out in order as py-spy's speedscope output holds them, 0.1 s each."""

    def __init__(self, frames: dict[str, tuple[str, str, int]]) -> None:
        self.names = list(frames)
        self.table = [{"name": n, "file": f, "line": ln} for n, f, ln in frames.values()]

    def stack(self, *parts: str) -> list[int]:
        """One sample: the thread, the loop's frame, then ``parts``, root first."""
        return [self.names.index(p) for p in ("thread", "train", *parts)]

    def ordered(self, samples: list[list[int]]) -> OrderedStacks:
        doc = {"shared": {"frames": self.table},
               "profiles": [{"type": "sampled", "name": "t", "samples": samples,
                             "weights": [0.1] * len(samples)}]}
        return parse_speedscope(json.dumps(doc))

    def window(self, samples: list[list[int]]) -> StackWindow:
        """The samples read as one stack window, its cycles counted."""
        ordered = self.ordered(samples)
        end = 0.1 * len(samples)
        return summarize_window(ordered.stacks, PhaseClassifier(STEP_RULES), pid=1,
                                t_start=0.0, t_end=end, order=ordered.order,
                                sampled=SampledSpan(0.0, end, PERIOD), counter=CycleCounter())


def test_a_forward_recomputed_inside_backward_does_not_start_a_cycle() -> None:
    """Activation checkpointing runs forward passes beneath backward: the samples
    there read as backward for the count (``stack_window._cycle_phase``)."""
    loop = SampledLoop({"train": ("train", "/job/train.py", 9),
                        "fwd": ("_call_impl", f"{SITE}/torch/nn/modules/module.py", 1),
                        "bwd": ("backward", f"{SITE}/torch/autograd/__init__.py", 2),
                        "opt": ("step", f"{SITE}/torch/optim/adam.py", 3),
                        "thread": ("thread (1): MainThread", "", 0)})
    stack = loop.stack
    one_step = ([stack("fwd")] * 5 + [stack("bwd")] * 3 + [stack("bwd", "fwd")] * 3
                + [stack("bwd")] * 3 + [stack("opt")] * 2)
    assert loop.ordered(one_step * 6).order["1"][:5] == [0] * 5
    window = loop.window(one_step * 6)
    assert window.cycles is not None, window.cycles_note
    assert window.cycles.count == 5  # six steps: five returns to forward


def test_passes_a_closure_makes_inside_the_optimizers_step_are_one_step() -> None:
    """pytorch/examples' time_sequence_prediction: ``LBFGS.step(closure)`` runs
    forward and backward up to 20 times per step, then the loop predicts under
    ``no_grad`` and plots. Counted by its passes, it read 0.69 steps/s for a
    job that stepped every 27 s."""
    loop = SampledLoop({"train": ("<module>", "/job/train.py", 60),
                        "step": ("LBFGS.step", f"{SITE}/torch/optim/lbfgs.py", 438),
                        "closure": ("closure", "/job/train.py", 55),
                        "fwd": ("Module._call_impl", f"{SITE}/torch/nn/modules/module.py", 1789),
                        "bwd": ("backward", f"{SITE}/torch/autograd/__init__.py", 2),
                        "plot": ("savefig", f"{SITE}/matplotlib/pyplot.py", 9),
                        "thread": ("thread (1): MainThread", "", 0)})
    stack = loop.stack
    one_pass = [stack("step", "closure", "fwd")] * 4 + [stack("step", "closure", "bwd")] * 4
    one_step = (one_pass * 5 + [stack("step")] * 2 + [stack("fwd")] * 4 + [stack("plot")] * 4)
    window = loop.window(one_step * 6)
    assert window.cycles is not None, window.cycles_note
    assert window.cycles.count == 6  # six steps, each returning to the prediction once


def test_a_server_counts_its_forward_passes() -> None:
    serving = (("forward", 0.5), ("other", 0.8))
    rate, notes = counted_rate(serving, [60, 150, 150], seed=5)
    assert rate == pytest.approx(1 / 1.3, rel=0.10), notes


def test_runs_cut_by_the_windows_edges_are_left_out() -> None:
    runs = read_runs(["end", "end", "start", "start", None, "start", "end", "start", "end"])
    assert runs.boundaries == [2, 7]
    assert runs.ends == [1]  # the first ending run began before the window
    assert runs.starts == [3, 1]


def test_windows_join_up_across_the_relaunch_gap() -> None:
    """A boundary that falls in the gap between two windows is counted once, by the
    window after it, and the count runs on from one window to the next."""
    counter = CycleCounter()
    ends, starts = ["backward"] * 5, ["forward"] * 5
    first, _ = counter.count((ends + starts) * 4 + ends, 0.0, 4.5, PERIOD)
    second, _ = counter.count(starts + ends + starts, 4.6, 6.1, PERIOD)
    assert first is not None and second is not None
    assert (first.count, second.count, first.joined, second.joined) == (4, 2, False, True)
    assert second.t_first == 4.6  # the step crossed the gap: timed at the window's start
    windows = [StackWindow(0.0, 4.5, "MainThread", "1", 45, cycles=first),
               StackWindow(4.6, 6.1, "MainThread", "1", 15, cycles=second)]
    readings = cycle_readings(windows)
    assert [(r.value, r.start) for r in readings] == [(0, True), (3, False), (4, False),
                                                     (5, False)]
    assert steps_per_second(readings) == pytest.approx(5 / (second.t_last - first.t_first))


def _window(counter: CycleCounter, phases: list[str], start: float,
            end: float) -> StackWindow:
    cycles, note = counter.count(phases, start, end, PERIOD)
    return StackWindow(start, end, "MainThread", "1", len(phases), cycles=cycles,
                       cycles_note=note)


def test_an_early_window_is_judged_by_the_newest_estimate() -> None:
    """The first window's few runs are short by chance and would refuse the count;
    the newest window's estimate rests on every run and lets all windows count."""
    counter = CycleCounter()
    early = _window(counter, (["forward"] + ["backward"] * 3) * 3, 0.0, 1.2)
    assert early.cycles is not None and early.cycles.count == 2
    assert early.cycles_note is not None and "would fall between" in early.cycles_note
    late = _window(counter, (["forward"] * 6 + ["backward"] * 8) * 8, 1.3, 12.5)
    assert late.cycles is not None and late.cycles_note is None
    readings = cycle_readings([early, late])
    assert readings[0].t == early.cycles.t_first
    assert [r.error for r in readings] == [None] * len(readings)
    assert steps_per_second(readings) is not None


def test_a_newest_window_that_refuses_takes_back_what_earlier_ones_counted() -> None:
    counter = CycleCounter()
    early = _window(counter, (["forward"] * 6 + ["backward"] * 8) * 3, 0.0, 4.2)
    assert early.cycles is not None and early.cycles_note is None
    late = _window(counter, ["forward", "backward"] * 40, 4.3, 12.3)
    assert late.cycles_note is not None
    readings = cycle_readings([early, late])
    assert steps_per_second(readings) is None
    assert readings[-1].error == late.cycles_note


def test_the_refusal_names_the_rate_the_samples_were_taken_at() -> None:
    """A loaded machine delays py-spy's samples: 40 samples over 8 s are 5 Hz,
    whatever rate was asked."""
    counter = CycleCounter()
    _window(counter, ["forward", "backward"] * 20, 0.0, 8.0)
    late = _window(counter, ["forward", "backward"] * 20, 8.1, 16.1)
    assert late.cycles_note is not None and "at 5 Hz" in late.cycles_note
