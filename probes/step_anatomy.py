"""A step's anatomy from the training thread's phases in the order they were sampled.

Shares say how long each phase takes; the order says how the phases follow one
another. A training loop that accumulates gradients runs forward and backward
N times for each optimizer step: between two runs of optimizer samples stand N
backward passes, each ended by the forward (or batch fetch) of the next. Under
DistributedDataParallel every one of them all-reduces the gradients unless the
first N-1 run inside ``model.no_sync()``.

What is counted is what the samples show: a backward pass shorter than the
sampling interval may fall between two samples, and two passes whose forward
was not sampled read as one. The metrics (knowledge/metrics/anatomy.py) trust a
count only where the steps agree and the passes span several samples.
"""

from __future__ import annotations

from collections.abc import Sequence

from .samples import StepShape

OPTIMIZER = "optimizer"
#: Phases that come in blocks between stretches of steps (an evaluation pass, a
#: save): how many blocks a window holds says how far its share can be off.
BLOCK_PHASES = ("eval", "checkpoint")
#: Phases that make up a backward pass: DDP's collectives that Python sees (a
#: comm hook) run inside backward and extend it; they never start one.
BACKWARD = "backward"
EXTENDS_BACKWARD = frozenset({"comm"})
#: Phases that begin the next micro-step, and so end a backward pass.
ENDS_BACKWARD = frozenset({"forward", "data_wait", "eval", "checkpoint", "compile"})


def step_shapes(phases: Sequence[str]) -> tuple[StepShape, ...]:
    """The whole optimizer steps in one thread's phase sequence (oldest first).

    A step runs from the first sample of one optimizer run to the first of the
    next; steps cut by the window's edges are left out. Phases neither of a
    backward pass nor of the next micro-step (``other``, ``sync``) leave a pass
    open without lengthening it.
    """
    shapes: list[StepShape] = []
    start: int | None = None
    passes: list[int] = []
    current = run = 0
    for index, phase in enumerate(phases):
        if phase == OPTIMIZER:
            if index == 0 or phases[index - 1] != OPTIMIZER:
                if current:
                    passes.append(current)
                if start is not None:
                    shapes.append(StepShape(index - start, tuple(passes), run))
                start, passes, current, run = index, [], 0, 0
            run += 1
        elif phase == BACKWARD or (phase in EXTENDS_BACKWARD and current):
            current += 1
        elif phase in ENDS_BACKWARD and current:
            passes.append(current)
            current = 0
    return tuple(shapes)


def phase_blocks(phases: Sequence[str]) -> dict[str, int]:
    """How many separate runs of each of ``BLOCK_PHASES`` one thread's phase
    sequence holds (0 where the phase was not sampled).

    A look that takes in one block more or one fewer than the job's own share
    of them reads the phase off by one block: the metrics (knowledge/metrics/
    step_phases.py) take one block's samples over the look's as the least error
    of the phase's share.
    """
    blocks = dict.fromkeys(BLOCK_PHASES, 0)
    previous: str | None = None
    for phase in phases:
        if phase in blocks and phase != previous:
            blocks[phase] += 1
        previous = phase
    return blocks
