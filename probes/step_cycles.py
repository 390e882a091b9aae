"""Steps counted from the order of stack samples: one cycle per step.

A training step runs its phases in order: data (or forward), forward, backward,
the optimizer, then the next step's data or forward. py-spy's samples of the
training thread, kept in the order they were taken (``probes.speedscope``),
show that sequence, so each return from backward or the optimizer to data or
forward is one step's boundary. A loop that keeps no counter and prints nothing
(``while True:``, ``for x, y in loader:``) still has it. A server that only
runs forward passes has the same shape with one phase: each return from a
forward pass to the wait for the next request is one request answered.

**Counting and timing.** py-spy stops a window after a fixed number of
samples taken at exponentially distributed intervals (a Poisson process at the
set rate, against aliasing), and a loaded machine delays some and bunches
others, so the time of the k-th sample is only known on average: ``k + 1``
samples' worth of the way through the window. The rate runs from the first
boundary to the last, over windows joined end to end (each carries the side
it ended on into the next, ``CycleCounter``): the steps are counted exactly,
and only the two outermost boundaries are timed, each near an end of its
window, where the estimate is closest.

**When the samples resolve the cycles.** With Poisson sampling a phase of mean
length ``d`` holds no sample at all with probability ``exp(-rate * d)``; an
unsampled beginning (data, forward) merges two cycles into one, and so does an
unsampled ending (backward, optimizer). Each side's mean length is learnt from
the runs seen (the mean sample count of a run, a zero-truncated Poisson mean,
solved for ``rate * d``), the share of boundaries lost follows, and the count is
divided by what remains. It is used only where that share is at most
``MAX_MISSED``: each side of a step averaging about three samples or more (at
10 Hz: 0.3 s each, steps of 0.6 s or longer, at most about 1.7 steps/s) and
``MIN_RUNS`` runs of each side seen. Faster loops get their rate elsewhere or
stay unknown, and the note says so. Every window counts its cycles; the newest
window's estimate, which rests on the most runs, judges them all
(:func:`cycle_readings`), so that one early window's few short runs do not
refuse a count its later ones would allow, nor the reverse.

A sample whose stack passes through backward is backward, whatever runs
beneath it: activation checkpointing recomputes forward passes inside backward,
and those must not start a new cycle. Phases that are neither side (host sync,
checkpoint, evaluation, the loop's own code) neither start nor end a cycle: a
step that logs, saves or evaluates is one longer step.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .samples import StackWindow, StepCounterSample, StepCycles

#: Phases that end a training step, and those that begin the next.
STEP_END = frozenset({"backward", "optimizer"})
STEP_START = frozenset({"data_wait", "forward"})
#: The most of the boundaries that may fall between samples for a count to be used.
MAX_MISSED = 0.05
#: Runs of each side needed to estimate their length.
MIN_RUNS = 2
#: Runs of each side remembered (the newest), across windows.
KEPT_RUNS = 64
#: A run over this many times the median is two runs merged (the phase between
#: them unsampled): it holds both phases' samples, about twice one's. A lower
#: cut trims the upper tail of single runs, whose counts spread as a Poisson's,
#: and makes the phases look shorter and their misses likelier than they are
#: (docs/step-rates.md, The step-cycle count, simulated).
MERGED = 2.0
#: The longest gap between two windows across which the side carries over.
MAX_GAP_S = 2.0
#: The name the readings of cycles carry, and their source.
CYCLES_COUNTER = "step cycles (stacks)"
CYCLES_SOURCE = "stacks"


@dataclass(frozen=True, slots=True)
class Runs:
    """One window's sequence read as cycles: where each began, and how many
    samples each whole ending and beginning run held."""

    boundaries: list[int]
    ends: list[int]
    starts: list[int]


def read_runs(kinds: Sequence[str | None]) -> Runs:
    """Boundaries (indexes of a cycle's first sample), and the sample counts of the
    ending and beginning runs between them; ``kinds`` are "end", "start" or None
    (neither). The runs cut by the window's edges are left out."""
    runs = Runs([], [], [])
    state: str | None = None
    count = 0
    whole = False
    for i, kind in enumerate(kinds):
        if kind is None:
            continue
        if kind != state:
            if whole and state is not None:
                (runs.ends if state == "end" else runs.starts).append(count)
            if state == "end":
                runs.boundaries.append(i)
            whole, count = state is not None, 0
            state = kind
        count += 1
    return runs


def cycle_kinds(phases: Sequence[str]) -> tuple[str, list[str | None]] | None:
    """What a cycle is in this sequence ("training" or "serving") and each
    sample's side of it; None when the thread ran neither."""
    if any(p in STEP_END for p in phases):
        return "training", ["end" if p in STEP_END else "start" if p in STEP_START else None
                            for p in phases]
    if "forward" in phases:
        # No backward ever: each forward pass answers a request.
        return "serving", ["end" if p == "forward" else "start" for p in phases]
    return None


def poisson_mean(truncated_mean: float) -> float:
    """``mu`` of a Poisson whose mean, given at least one, is ``truncated_mean``
    (``mu / (1 - exp(-mu))``), by bisection."""
    if truncated_mean <= 1.0:
        return 0.0
    lo, hi = 0.0, truncated_mean
    for _ in range(60):
        mid = (lo + hi) / 2
        if mid / -math.expm1(-mid) < truncated_mean:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def _single_runs_mean(runs: Sequence[int]) -> float:
    """The mean sample count of runs that are one phase each: a run over
    ``MERGED`` times the median holds two (the phase between them unsampled),
    and would make the phases look longer, and their misses rarer, than they are."""
    median = statistics.median(runs)
    single = [r for r in runs if r <= MERGED * median]
    return sum(single) / len(single)


class CycleCounter:
    """Counts each window's cycles, judging from the runs of recent windows
    whether the samples resolve them (a stack probe keeps one).

    Windows follow one another with a short gap (py-spy's relaunch): the side a
    window ended on carries into the next, so a boundary across the gap is
    counted once, by the window after it, and the count runs on from one window
    to the next (``StepCycles.joined``).
    """

    def __init__(self) -> None:
        self._ends: deque[int] = deque(maxlen=KEPT_RUNS)
        self._starts: deque[int] = deque(maxlen=KEPT_RUNS)
        #: The side the last counted window ended on, its cycle kind, its end,
        #: and whether a boundary was seen since the chain began.
        self._carried: tuple[str, str, float, bool] | None = None

    def missed(self) -> tuple[float, str] | None:
        """The share of boundaries expected to fall between samples, and the side
        that loses most; None until ``MIN_RUNS`` of each side were seen."""
        if len(self._ends) < MIN_RUNS or len(self._starts) < MIN_RUNS:
            return None
        lost = {side: math.exp(-poisson_mean(_single_runs_mean(runs)))
                for side, runs in (("end", self._ends), ("start", self._starts))}
        return 1 - math.prod(1 - p for p in lost.values()), max(lost, key=lambda s: lost[s])

    def count(self, phases: Sequence[str], start: float, end: float,
              period_s: float) -> tuple[StepCycles | None, str | None]:
        """The cycles of one window whose samples (``phases``, in order) were taken
        between ``start`` and ``end`` (the last sample), ``period_s`` apart as
        asked; or None and why.

        The cycles are counted whether or not the runs seen so far show that the
        samples resolve them; the note then says why not (too few runs yet, or
        too many boundaries would fall between samples), and
        :func:`cycle_readings` judges every window by the newest one's estimate,
        which has seen the most runs."""
        carried, self._carried = self._carried, None
        found = cycle_kinds(phases)
        if found is None:
            return None, ("no forward, backward or optimizer in the training thread's samples "
                          "(steps too short for the samples to see, or no training)")
        kind, kinds = found
        joined = (carried is not None and carried[1] == kind
                  and 0 <= start - carried[2] <= MAX_GAP_S)
        offset = 1 if joined and carried else 0
        runs = read_runs([carried[0], *kinds] if joined and carried else kinds)
        self._ends.extend(runs.ends)
        self._starts.extend(runs.starts)
        missed = self.missed()
        share = missed[0] if missed is not None else 0.0
        note: str | None = None
        if missed is None:
            note = (f"{min(len(self._ends), len(self._starts))} whole cycle(s) seen so far "
                    f"(needs {MIN_RUNS} to tell whether the samples resolve them)")
        elif share > MAX_MISSED:
            side = missed[1]
            runs_of = self._ends if side == "end" else self._starts
            what = (("backward and optimizer" if side == "end" else "data and forward")
                    if kind == "training"
                    else ("forward" if side == "end" else "wait between requests"))
            note = (f"each step's {what} averages {_single_runs_mean(runs_of):.2g} sample(s) "
                    f"at {len(kinds) / max(end - start, period_s):.2g} Hz: {share:.0%} of the "
                    f"steps would fall between samples (at most {MAX_MISSED:.0%}): steps too "
                    "fast to count from samples")
        chained = joined and carried is not None and carried[3]
        last_side = next((k for k in reversed(kinds) if k is not None), None)
        if last_side is not None:
            self._carried = (last_side, kind, end, chained or bool(runs.boundaries))
        if not runs.boundaries:
            return StepCycles(0, start, start, kind, round(share, 4), chained), note
        times = [_boundary_time(i - offset, len(kinds), start, end) for i in runs.boundaries]
        return StepCycles(len(times), times[0], times[-1], kind, round(share, 4), chained), note


def _boundary_time(index: int, samples: int, start: float, end: float) -> float:
    """When the step between sample ``index - 1`` and ``index`` happened.

    Samples are a Poisson process stopped at its ``samples``-th event: given
    that, the i-th (from 0) falls on average at ``(i + 1) / samples`` of the
    way from ``start`` to ``end``, and its error is least near either end,
    where the first and last boundaries are. A boundary before the first sample
    (carried over from the window before) is taken at ``start``.
    """
    if index <= 0:
        return start
    return start + (index + 0.5) / samples * (end - start)


def cycle_readings(windows: Sequence[StackWindow]) -> list[StepCounterSample]:
    """Readings of the windows' cycles, counted on from one window to the next:
    at each window's first and last boundary. A window joined to the one before
    (``StepCycles.joined``) runs its count on by the one cycle between that
    window's last boundary and its first; any other starts a new count.

    Whether the samples resolve the cycles is judged once, by the newest window
    that counted any: its estimate rests on the most runs, so an early window's
    few runs neither refuse the count by chance nor let it through by chance.
    Each cycle then stands for ``1 / (1 - missed)`` steps (the boundaries that
    fell between samples), by that same estimate. When the newest window
    refuses, or holds no cycles, a reading says why."""
    newest = next((w for w in reversed(windows) if w.error is None and w.total_samples), None)
    judge = next((w for w in reversed(windows) if w.error is None and w.cycles is not None),
                 None)
    out: list[StepCounterSample] = []
    if judge is not None and judge.cycles is not None and judge.cycles_note is None:
        out = _chained_readings(windows, 1 / (1 - judge.cycles.missed))
    elif judge is not None and judge.cycles_note is not None and newest is judge:
        out.append(StepCounterSample(judge.t_end, None, None, frame=judge.loop_frame,
                                     error=judge.cycles_note, source=CYCLES_SOURCE))
    if newest is not None and newest.cycles is None:
        out.append(StepCounterSample(newest.t_end, None, None, frame=newest.loop_frame,
                                     error=newest.cycles_note or "no step cycles counted",
                                     source=CYCLES_SOURCE))
    return out


def _chained_readings(windows: Sequence[StackWindow], per_cycle: float) -> list[StepCounterSample]:
    """The count's readings, each cycle ``per_cycle`` steps, chained across joined windows."""
    out: list[StepCounterSample] = []
    total = 0.0
    chain = False
    for w in windows:
        cycles = w.cycles
        if cycles is None or w.error is not None:
            chain = False
            continue
        if not cycles.count:
            chain = chain and cycles.joined
            continue
        frame = w.loop_frame or w.thread_name
        joined = chain and cycles.joined
        if joined:
            total += per_cycle
        out.append(StepCounterSample(cycles.t_first, CYCLES_COUNTER, round(total), frame=frame,
                                     source=CYCLES_SOURCE, start=not joined))
        total += (cycles.count - 1) * per_cycle
        if cycles.count > 1:
            out.append(StepCounterSample(cycles.t_last, CYCLES_COUNTER, round(total),
                                         frame=frame, source=CYCLES_SOURCE))
        chain = True
    return out
