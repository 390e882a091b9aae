"""Which readings steps/s comes from: the loop's counter or the job's log.

The loop's counter is exact when it counts steps, and nothing in the frame says
it does: a loop's ``i`` may step by the sequence length (``range(0, n, bptt)``),
a DataLoader's index may run ahead of the loop. Where the job also prints its
step (``probes.job_log``), a counter that runs faster than the printed count is
set aside for it, and the reason is kept; where no counter can be read (a loop
at module level, a loop without ``enumerate``), the printed count is the rate.
A counter slower than the printed count is kept: the log's integer may count
micro-batches or samples where the loop counts optimizer steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .job_log import LOG_SOURCE
from .samples import StepCounterSample
from .steps import steps_per_second

#: A counter this many times faster than the job's printed count is not a step count.
COUNTER_TOO_FAST = 1.3


@dataclass(frozen=True, slots=True)
class StepReadings:
    """The readings behind steps/s, and why the loop's counter was set aside if it was."""

    readings: list[StepCounterSample]
    rejected: str | None = None


def split_sources(
    readings: Sequence[StepCounterSample],
) -> tuple[list[StepCounterSample], list[StepCounterSample]]:
    """The loop's readings and the log's, each in order."""
    loop = [r for r in readings if r.source != LOG_SOURCE]
    log = [r for r in readings if r.source == LOG_SOURCE]
    return loop, log


def choose_step_readings(readings: Sequence[StepCounterSample]) -> StepReadings:
    """The loop counter's readings unless the job's printed count contradicts them."""
    loop, log = split_sources(readings)
    printed = steps_per_second(log)
    if printed is None:
        return StepReadings(loop)
    counted = steps_per_second(loop)
    if counted is None:
        return StepReadings(log)
    if counted > COUNTER_TOO_FAST * printed:
        name = next((r.name for r in reversed(loop) if r.name), "the counter")
        label = next((r.name for r in reversed(log) if r.name), "the step")
        return StepReadings(log, rejected=(
            f"`{name}` advanced {counted:.3g}/s, {counted / printed:.2g}x the {printed:.3g}/s "
            f"of `{label}` the job prints: not a step count"))
    return StepReadings(loop)
