"""The step's anatomy: which optimizer implementation runs, what is computed twice,
and backward passes per step.

Three readings of the training thread's samples beyond the phase shares:

* **The optimizer's implementation.** The phases' frames say the optimizer
  runs; the function that runs it says how (phases.yaml ``techniques_seen``):
  a Python for-loop that updates one parameter tensor at a time, the foreach
  kernels, or a fused kernel. With hundreds of small tensors the for-loop
  costs a few ops of dispatch per tensor, on one core whatever the intra-op
  threads: ``phase_optimizer_loop`` is its share of the time, and
  ``phase_parallel_compute`` the compute that more threads could widen.
* **Activation checkpointing's recompute**: the share of the time its
  second forward pass takes inside backward (``phase_recompute``).
* **Backward passes per optimizer step**, from the samples' order
  (``StackWindow.step_shapes``: the passes seen between two runs of optimizer
  samples), read against the rate of the loop's counter. Passes shorter than
  the sampling interval fall between samples or merge, a thread that steps
  faster than it is sampled shows its phases in random order, and a loop
  whose step lasts a whole number of sampling intervals is sampled at the
  same moments step after step (a stroboscope): stretches can agree with
  each other and still be wrong. The counter says how long a step is. Where
  it counts optimizer steps, each stretch between optimizer runs is read as
  the whole number of steps its length makes (an optimizer step shorter than
  the sampling interval is missed in some steps), and most must show the
  same passes per step; where it counts micro-batches, it ticks once a pass.
  Each pass must span ``SAMPLES_PER_PASS`` samples or more. Without a
  counter the count is unknown, never guessed.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from aitop.probes.samples import StackWindow, StepShape
from aitop.probes.session import Session

from .step_phases import read_stacks
from .units import Metrics, Values, flag

#: Technique ids of phases.yaml's ``techniques_seen`` read here.
FOR_LOOP, FOREACH, FUSED, FUSABLE, RECOMPUTE = (
    "optimizer_for_loop", "optimizer_foreach", "optimizer_fused", "optimizer_fusable",
    "activation_recompute")
#: Whole optimizer steps the window must show before their passes are counted.
MIN_STEPS = 4
#: Share of those steps that must show the same number of backward passes.
AGREEING = 0.6
#: A step's length in samples may stray this far from the agreeing steps' median.
PERIOD_SPREAD = 0.35
#: Samples each backward pass (with its forward) must span on average: passes
#: shorter than the sampling interval are not resolved.
SAMPLES_PER_PASS = 3
#: How far the steps' length may be from what the loop's counter says (a ratio):
#: its rate over a few steps is a step or so off.
RATE_TOLERANCE = 1.5
#: Mean samples in the optimizer's runs of an optimizer seen in every step: a
#: step shorter than the sampling interval is missed in some.
SEEN_EVERY_STEP = 1.5
#: Seconds of samples the passes are counted from where the window's own steps
#: do not agree. How a loop accumulates does not change from one window to the
#: next, while the few steps of one window (a step of two micro-batches takes
#: seconds) agree in one window and not in the next: read over the window alone,
#: the count came and went, and a finding that must hold for seconds seldom did.
SHAPES_LOOKBACK_S = 60.0


def anatomy_metrics(session: Session, now: float, window_s: float, known: Metrics) -> Values:
    """The optimizer's implementation and the backward passes per optimizer step.

    ``known``: the phase and step-rate metrics of the same window
    (``phase_compute``, ``steps_per_s``).
    """
    windows = read_stacks(session, now, window_s)
    total = sum(w.total_samples for w in windows)
    used: Counter[str] = Counter()
    for w in windows:
        used.update(w.technique_samples)

    def share(technique: str) -> float | None:
        return used[technique] / total if total else None

    def seen(technique: str) -> float | None:
        return flag(used[technique] > 0) if total else None

    loop = share(FOR_LOOP)
    compute = known.get("phase_compute")
    passes, agreed = passes_in(windows, known.get("steps_per_s"))
    if passes is None and window_s < SHAPES_LOOKBACK_S:
        passes, agreed = passes_in(read_stacks(session, now, SHAPES_LOOKBACK_S),
                                   known.get("steps_per_s"))
    return {
        "phase_optimizer_loop": loop,
        "phase_recompute": share(RECOMPUTE),
        "phase_parallel_compute": (None if compute is None or loop is None
                                   else max(0.0, compute - loop)),
        "uses_fused_optimizer": seen(FUSED),
        "uses_foreach_optimizer": seen(FOREACH),
        "optimizer_fusable": seen(FUSABLE),
        "backward_per_step": None if passes is None else float(passes),
        "last_backward_ratio": last_backward_ratio(agreed),
    }


def passes_in(windows: Sequence[StackWindow],
              steps_per_s: float | None) -> tuple[int | None, list[StepShape]]:
    """``count_passes`` over the whole steps the windows' samples show."""
    total = sum(w.total_samples for w in windows)
    if not total:
        return None, []
    span = sum(w.t_end - w.t_start for w in windows)
    return count_passes([s for w in windows for s in w.step_shapes], span / total, steps_per_s)


def agreeing_steps(steps: Sequence[StepShape]) -> list[StepShape]:
    """The steps that agree on their backward passes and length, or [] if too few do.

    Most steps (``AGREEING``) must show the same number of passes, over lengths
    within ``PERIOD_SPREAD`` of their median, and span ``SAMPLES_PER_PASS``
    samples a pass or more.
    """
    if len(steps) < MIN_STEPS:
        return []
    passes, _n = Counter(len(s.backwards) for s in steps).most_common(1)[0]
    if passes == 0:
        return []
    same = [s for s in steps if len(s.backwards) == passes]
    median = statistics.median(s.samples for s in same)
    agreed = [s for s in same if abs(s.samples - median) <= PERIOD_SPREAD * median]
    if len(agreed) < AGREEING * len(steps) or median < SAMPLES_PER_PASS * passes:
        return []
    return agreed


def count_passes(steps: Sequence[StepShape], seconds_per_sample: float,
                 steps_per_s: float | None) -> tuple[int | None, list[StepShape]]:
    """Backward passes per optimizer step, and the stretches that show it.

    ``steps_per_s``: the loop counter's rate (None without a counter: unknown).
    Most stretches one tick long: a counter of optimizer steps (a stretch of
    several ticks is one where the optimizer was missed). Most several ticks
    long: a counter of micro-batches, ticking once a pass, if the optimizer is
    long enough to be seen in every step (its runs ``SEEN_EVERY_STEP`` samples
    on average) and the stretches agree; else an optimizer missed in most
    steps, each stretch read as the steps it spans, whose reading is kept only
    where it shows accumulation (a counter of micro-batches read so would show
    one pass a tick, not several).
    """
    if not steps or not steps_per_s:
        return None, []
    period = 1.0 / (steps_per_s * seconds_per_sample)
    spans, _n = Counter(round(s.samples / period) for s in steps).most_common(1)[0]
    if spans <= 1:
        return steps_of_period(steps, period)
    agreed = agreeing_steps(steps)
    if (agreed and statistics.mean(s.optimizer for s in agreed) >= SEEN_EVERY_STEP
            and within(statistics.median(s.samples for s in agreed)
                       / len(agreed[0].backwards), period)):
        return len(agreed[0].backwards), agreed
    passes, agreed = steps_of_period(steps, period)
    return (passes, agreed) if passes is not None and passes >= 2 else (None, [])


def steps_of_period(steps: Sequence[StepShape],
                    period: float) -> tuple[int | None, list[StepShape]]:
    """Passes per step where the counter says a step lasts ``period`` samples.

    The counter's rate over a few steps, and a window's samples turned into
    seconds, are a step or so off: where some stretches are about one step long
    by the counter (within ``RATE_TOLERANCE``), their median length is the
    step's. Each stretch spans the whole number k of steps its length makes
    (within ``PERIOD_SPREAD`` of it) and shows k times the passes of one step;
    most stretches (``AGREEING``) must, and show the same passes per step.
    """
    ones = [s.samples for s in steps if within(s.samples, period)]
    if ones:
        period = statistics.median(ones)
    per_step: list[tuple[int, StepShape]] = []
    spanned = 0
    for shape in steps:
        k = round(shape.samples / period)
        if k < 1 or abs(shape.samples / period - k) > PERIOD_SPREAD:
            continue
        spanned += k
        if len(shape.backwards) % k == 0:
            per_step.append((len(shape.backwards) // k, shape))
    if spanned < MIN_STEPS or not per_step:
        return None, []
    passes, n = Counter(p for p, _ in per_step).most_common(1)[0]
    if passes == 0 or n < AGREEING * len(steps) or period < SAMPLES_PER_PASS * passes:
        return None, []
    return passes, [shape for p, shape in per_step if p == passes]


def within(value: float, expected: float) -> bool:
    """Whether ``value`` is within ``RATE_TOLERANCE`` (a ratio) of ``expected``."""
    return 1.0 / RATE_TOLERANCE <= value / expected <= RATE_TOLERANCE


def last_backward_ratio(steps: Sequence[StepShape]) -> float | None:
    """The backward pass just before each optimizer step against the step's others.

    Samples in the last pass over the mean of the other passes, over steps with
    several: about 1 where every pass does the same work (each all-reducing its
    gradients), well above where the last one alone exchanges them (the others
    inside ``no_sync()``).
    """
    several = [s for s in steps if len(s.backwards) >= 2]
    if not several:
        return None
    last = sum(s.backwards[-1] for s in several)
    others = sum(sum(s.backwards[:-1]) / (len(s.backwards) - 1) for s in several)
    return last / others if others else None


def optimizer_loop_frame(windows: Sequence[StackWindow]) -> str | None:
    """The for-loop update function the training thread ran most, as "name (file)"."""
    frames: Counter[str] = Counter()
    for w in windows:
        frame = w.technique_frames.get(FOR_LOOP)
        if frame is not None:
            frames[frame] += w.technique_samples.get(FOR_LOOP, 0)
    return frames.most_common(1)[0][0] if frames else None
