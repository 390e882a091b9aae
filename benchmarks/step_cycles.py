"""``python -m benchmarks.step_cycles``: the step-cycle count, simulated.

Loops' phases laid out in time, sampled as py-spy samples them (a fixed count
per window at exponentially distributed intervals, windows back to back with a
relaunch gap), counted by the real ``CycleCounter`` and read by the real
``cycle_readings`` and ``steps_per_second``, over many random seeds. The rate
the samples are *taken* at is a column: asked for 10 Hz, py-spy on a loaded
machine falls behind and takes fewer. The table it prints is the one in
docs/step-rates.md ("The step-cycle count, simulated").
"""

from __future__ import annotations

import argparse
import math
import random
from collections.abc import Sequence

from aitop.probes.samples import StackWindow
from aitop.probes.step_cycles import CycleCounter, cycle_readings
from aitop.probes.step_rate import steps_per_second

from .stats import quantile

#: The rate py-spy is asked for (``probes.cadence``'s ``stack_rate_hz``).
ASKED_HZ = 10.0
#: Seconds between one window's last sample and the next one's first.
GAP_S = 0.15
#: Samples per window of a headless report at the asked rate: 3 s, 6 s, 12 s, then
#: 15 s each (``probes.cadence``); a window still sampling when the report ends is
#: cut short there.
WINDOWS: tuple[int, ...] = (30, 60, 120, 150, 150, 150)
#: Reports by their length in seconds.
REPORTS: dict[str, float] = {"20-s report": 20.0, "36-s report": 36.0}
#: Loops: (phase, seconds) in order, one step.
Step = tuple[tuple[str, float], ...]
LOOPS: dict[str, Step] = {
    "data 0.3, forward 0.6, backward 1.0, optimizer 0.1, other 0.1":
        (("data_wait", 0.3), ("forward", 0.6), ("backward", 1.0), ("optimizer", 0.1),
         ("other", 0.1)),
    "forward 0.6, backward 1.0, other 0.4":
        (("forward", 0.6), ("backward", 1.0), ("other", 0.4)),
    "forward 0.5, backward 0.6, other 0.15":
        (("forward", 0.5), ("backward", 0.6), ("other", 0.15)),
    "forward 0.35, backward 0.5, other 0.15 (near the limit)":
        (("forward", 0.35), ("backward", 0.5), ("other", 0.15)),
    "server: forward 0.6, waiting 0.8": (("forward", 0.6), ("other", 0.8)),
    "data 1.0, forward 1.5, backward 3.0, optimizer 0.5":
        (("data_wait", 1.0), ("forward", 1.5), ("backward", 3.0), ("optimizer", 0.5)),
    "forward 0.25, backward 0.3, other 0.05 (too fast)":
        (("forward", 0.25), ("backward", 0.3), ("other", 0.05)),
    "forward 0.15, backward 0.8, other 0.05 (a short side)":
        (("forward", 0.15), ("backward", 0.8), ("other", 0.05)),
}


def phase_at(step: Step, t: float) -> str:
    """The phase a loop of ``step`` is in at time ``t``."""
    t %= sum(d for _, d in step)
    for phase, duration in step:
        if t < duration:
            return phase
        t -= duration
    return step[-1][0]


def sampled_windows(step: Step, windows: Sequence[int], seed: int, taken_hz: float = ASKED_HZ,
                    report_s: float = math.inf,
                    gap_s: float = GAP_S) -> list[tuple[list[str], float, float]]:
    """Each window's phases as py-spy samples them (``n`` samples at exponential
    intervals, ``taken_hz`` on average, none after ``report_s``), and when it
    sampled: (phases, start, end)."""
    rng = random.Random(seed)
    t0 = t = rng.uniform(0, 5)
    out = []
    for n in windows:
        start = t
        phases = []
        for _ in range(n):
            t += rng.expovariate(taken_hz)
            if t - t0 > report_s:
                break
            phases.append(phase_at(step, t))
        if phases:
            out.append((phases, start, t))
        if t - t0 > report_s:
            break
        t += gap_s
    return out


def counted_rate(step: Step, windows: Sequence[int], seed: int, taken_hz: float = ASKED_HZ,
                 report_s: float = math.inf) -> tuple[float | None, list[str | None]]:
    """Steps/s as aitop reads it from the windows' cycles, and each window's note."""
    counter = CycleCounter()
    found = []
    notes = []
    for phases, start, end in sampled_windows(step, windows, seed, taken_hz, report_s):
        cycles, note = counter.count(phases, start, end, 1 / ASKED_HZ)
        notes.append(note)
        found.append(StackWindow(start, end, "MainThread", "1", len(phases), cycles=cycles,
                                 cycles_note=note))
    return steps_per_second(cycle_readings(found)), notes


def row(step: Step, report_s: float, taken_hz: float, seeds: int) -> str:
    """``not counted / p50 / p95 error`` over ``seeds`` reports of ``report_s``."""
    true = 1 / sum(d for _, d in step)
    errors = sorted(abs(rate / true - 1) for seed in range(seeds)
                    if (rate := counted_rate(step, WINDOWS, seed, taken_hz, report_s)[0])
                    is not None)
    missing = seeds - len(errors)
    if not errors:
        return f"{missing} / — / —"
    return f"{missing} / {quantile(errors, 0.5):.1%} / {quantile(errors, 0.95):.1%}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=300)
    parser.add_argument("--taken-hz", type=float, nargs="+", default=[10.0, 7.0, 5.0])
    args = parser.parse_args(argv)
    heads = [f"{report}, {hz:g} Hz taken" for hz in args.taken_hz for report in REPORTS]
    print("| loop (phases, s) | steps/s | " + " | ".join(heads) + " |")
    print("|---|---|" + "---|" * len(heads))
    for name, step in LOOPS.items():
        cells = [row(step, REPORTS[report], hz, args.seeds)
                 for hz in args.taken_hz for report in REPORTS]
        print(f"| {name} | {1 / sum(d for _, d in step):.2f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
