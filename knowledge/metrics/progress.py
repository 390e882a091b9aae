"""Whether, and how fast, the training loop advances: its step rate and counters."""

from __future__ import annotations

import itertools

from aitop.probes.session import Session
from aitop.probes.steps import steps_per_second

from .units import Values

#: Window for steps/s: the loop counter is read every 5 s, so 30 s gives ~6 readings.
STEPS_WINDOW_S = 30.0


def step_rate_metrics(session: Session, now: float, window_s: float) -> Values:
    """Steps per second and seconds per step, over the window or ``STEPS_WINDOW_S``."""
    # The counter is read every few seconds: look back far enough for several.
    rate = steps_per_second(
        session.step_readings(now - max(window_s, STEPS_WINDOW_S), now).readings)
    return {"steps_per_s": rate, "step_time": 1.0 / rate if rate else None}


def progress_metrics(session: Session, now: float) -> Values:
    """Whether the loop's counter moved lately, and whether a step was ever seen."""
    first_step = session.first_step_at
    return {"counter_moved": counter_moved(session, now),
            "steps_seen": float(first_step is not None and first_step <= now)}


def counter_moved(session: Session, now: float) -> float:
    """1 when the loop's counter (or the step the job prints) changed between two
    readings of the last half minute.

    0 both when it stood still and when no counter is read: a stall is then
    told by the stacks, the CPU and the reads alone. Readings are compared only
    with readings of the same counter: the workers' batch index (25) followed by
    the loop's own ``i`` (24) is two counters, not a step.
    """
    by_counter: dict[tuple[str, str | None], list[int]] = {}
    for s in session.steps.window(now - STEPS_WINDOW_S, now):
        if s.value is not None:
            by_counter.setdefault((s.source, s.name), []).append(s.value)
    return float(any(a != b for values in by_counter.values()
                     for a, b in itertools.pairwise(values)))
