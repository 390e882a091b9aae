"""The step's anatomy: which optimizer implementation runs, and backward passes per step.

Two readings of the training thread's samples beyond the phase shares:

* **The optimizer's implementation.** The phases' frames say the optimizer
  runs; the function that runs it says how (phases.yaml ``techniques_seen``):
  a Python for-loop that updates one parameter tensor at a time, the foreach
  kernels, or a fused kernel. With hundreds of small tensors the for-loop
  costs a few ops of dispatch per tensor, on one core whatever the intra-op
  threads: ``phase_optimizer_loop`` is its share of the time, and
  ``phase_parallel_compute`` the compute that more threads could widen.
* **Backward passes per optimizer step**, from the samples' order
  (``StackWindow.step_shapes``). A count is trusted only where the steps
  agree: most of them show the same number of passes over about the same
  number of samples, at least ``SAMPLES_PER_PASS`` samples a pass. Passes
  shorter than the sampling interval fall between samples or merge, and a
  thread that steps faster than it is sampled shows phases in random order;
  neither gives steps that agree, and the count is then unknown, never guessed.
  A loop whose step is about as long as a whole number of sampling intervals
  is sampled at the same moments of step after step (a stroboscope): an
  optimizer shorter than the interval is then missed in a regular pattern and
  steps that agree can still be wrong. Where the loop's counter gives the
  step rate, the steps' length must match it: one step, or one micro-batch of
  the N counted, per tick of the counter.
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
FOR_LOOP, FOREACH, FUSED, FUSABLE = (
    "optimizer_for_loop", "optimizer_foreach", "optimizer_fused", "optimizer_fusable")
#: Whole optimizer steps the window must show before their passes are counted.
MIN_STEPS = 4
#: Share of those steps that must show the same number of backward passes.
AGREEING = 0.6
#: A step's length in samples may stray this far from the agreeing steps' median.
PERIOD_SPREAD = 0.35
#: Samples each backward pass (with its forward) must span on average: passes
#: shorter than the sampling interval are not resolved.
SAMPLES_PER_PASS = 3
#: How far the steps' length may be from what the loop's counter says (a ratio).
RATE_TOLERANCE = 1.35


def anatomy_metrics(session: Session, now: float, window_s: float, known: Metrics) -> Values:
    """The optimizer's implementation and the backward passes per optimizer step.

    ``known``: the phase and step-rate metrics of the same window
    (``phase_compute``, ``steps_per_s``).
    """
    windows = read_stacks(session, now, window_s)
    total = sum(w.total_samples for w in windows)
    span = sum(w.t_end - w.t_start for w in windows)
    used: Counter[str] = Counter()
    for w in windows:
        used.update(w.technique_samples)

    def share(technique: str) -> float | None:
        return used[technique] / total if total else None

    def seen(technique: str) -> float | None:
        return flag(used[technique] > 0) if total else None

    loop = share(FOR_LOOP)
    compute = known.get("phase_compute")
    agreed = agreeing_steps([s for w in windows for s in w.step_shapes])
    if agreed and not matches_counter(agreed, span / total, known.get("steps_per_s")):
        agreed = []
    return {
        "phase_optimizer_loop": loop,
        "phase_parallel_compute": (None if compute is None or loop is None
                                   else max(0.0, compute - loop)),
        "uses_fused_optimizer": seen(FUSED),
        "uses_foreach_optimizer": seen(FOREACH),
        "optimizer_fusable": seen(FUSABLE),
        "backward_per_step": float(len(agreed[0].backwards)) if agreed else None,
        "last_backward_ratio": last_backward_ratio(agreed),
    }


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


def matches_counter(steps: Sequence[StepShape], seconds_per_sample: float,
                    steps_per_s: float | None) -> bool:
    """Whether the steps last what the loop's counter says (True where it says nothing).

    The counter may count optimizer steps (one tick a step) or micro-batches (N
    ticks a step, N the passes counted): either matches.
    """
    if not steps_per_s:
        return True
    seconds = statistics.median(s.samples for s in steps) * seconds_per_sample
    passes = len(steps[0].backwards)
    return any(1.0 / RATE_TOLERANCE <= steps_per_s * seconds / ticks <= RATE_TOLERANCE
               for ticks in (1, passes))


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
