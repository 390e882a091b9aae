"""Evaluation passes the job wrote itself, read from its loop's lines.

Frame signatures name evaluation where a library or a function's name says so
(``phases.yaml``: ``evaluate``, ``validation_step``, the HF Trainer's
``evaluation_loop``). A job's own evaluation often has no such name: a helper
``run_val()``, a validation loop written inline after the training loop of
each epoch, or one line of a module-level script
(``vl = sum(loss(model(a), b).item() for a, b in val)``). Its forward passes
then look like the step's. Three readings tell them apart, each from the
loop frame's lines and the frames beneath them, for any loop shape:

1. **A call that fetches data and runs forward, never backward.** A loop line
   that calls a function of the job's own under which forward passes and data
   fetches are seen, and never backward or the optimizer, is an evaluation
   pass over a loader.
2. **A call that repeats forward passes over data with gradients off.** The
   same, where the forward passes run in a loop or comprehension of the
   callee's own over data and ``torch.no_grad()``/``torch.inference_mode()``
   holds them (a ``with`` block around the call or in the callee, or a
   decorator): evaluation over tensors or a list already in memory, which
   fetches nothing.
3. **A loop of the loop frame's own over data that runs no backward.** In the
   loop frame's source, a ``for`` block over data holding none of the lines
   where backward or the optimizer ran in this window, with gradients off and
   forward passes beneath it, is an evaluation loop written inline: its data
   waits, forward passes and host syncs are all evaluation.

Gradients off and a loop of their own over data are all needed where no data
is fetched: a frozen encoder called every step (``latents = encode(x)`` under
``no_grad``) repeats nothing; forward passes in a loop whose outputs feed the
backward that follows (multi-crop) keep their gradients; a reinforcement
learner's rollout (``for step in range(num_steps):`` stepping its
environment) and token-by-token generation count, they do not take items from
data, and fewer of them would change what the job learns, not how often it
validates.

Readings 1 and 2 count only samples through the job's own code: the loop's own
forward line (``model(x)``, torch's frame right beneath the loop) never leads
into backward either, and a stray sample placed on it must not turn a training
loop's forward passes into evaluation. A window with no backward at all cannot
tell an evaluation pass from a server; the metrics do, over a longer look back
(``forward_only``).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from typing import Protocol

from .phases import Frame, PhaseClassifier, RawStack
from .source_blocks import COMPREHENSIONS, BlockReader, iterates_over_data
from .source_lines import SourceReader

#: Forward samples a loop line (or an inline loop) needs before it is read as evaluation.
EVAL_LINE_MIN_SAMPLES = 3
#: Phases only a training step runs.
TRAINING_PHASES = frozenset({"backward", "optimizer"})
#: Where torch's decorators run their wrapper: ``@torch.no_grad()``,
#: ``@torch.inference_mode()`` (``_contextlib``; ``autograd/grad_mode`` before
#: torch 2.0) and ``@torch.autocast(...)``. The wrapper is a frame of torch's
#: between the loop's call and the job's function it wraps, and is seen through.
DECORATOR_FILES = ("torch/utils/_contextlib.py", "torch/autograd/grad_mode.py",
                   "torch/amp/autocast_mode.py")


class PhasedSample(Protocol):
    """A training-thread sample as ``stack_window`` reads it."""

    stack: RawStack
    phase: str
    loop_index: int


def _is_decorator(frame: Frame) -> bool:
    """Whether ``frame`` is one of torch's decorator wrappers (``DECORATOR_FILES``)."""
    return any(frame.file == f or frame.file.endswith("/" + f) for f in DECORATOR_FILES)


def _own_frames_beneath(sample: PhasedSample) -> Sequence[Frame]:
    """The job's own frames right beneath the loop frame, down to the first library
    frame; torch's decorators' wrappers between them are seen through."""
    frames = sample.stack.frames
    own = []
    for frame in frames[sample.loop_index + 1:]:
        if _is_decorator(frame):
            continue
        if not frame.in_job_code:
            break
        own.append(frame)
    return own


def _repeats_without_gradients(sample: PhasedSample, blocks: BlockReader) -> bool:
    """Whether the job's own frames beneath the loop run in a loop of their own
    over data (or a comprehension over data) with gradients off around the call
    or in them."""
    loop = sample.stack.frames[sample.loop_index]
    at_call = blocks(loop.file, loop.line)
    gradients_off = at_call is not None and at_call.gradients_off
    repeats = False
    for frame in _own_frames_beneath(sample):
        if frame.short_function in COMPREHENSIONS:
            text = blocks.text(frame.file, frame.line)
            repeats = repeats or (text is not None and iterates_over_data(text))
            continue
        if frame.short_function == "<lambda>":
            continue  # defined in the loop's body: its lines are the loop's
        found = blocks(frame.file, frame.line)
        if found is not None:
            repeats = repeats or bool(found.data_loops)
            gradients_off = gradients_off or found.gradients_off
    return repeats and gradients_off


def _evaluation_calls(samples: Sequence[PhasedSample], blocks: BlockReader | None) -> set[int]:
    """Loop lines that call into the job's own evaluation (readings 1 and 2)."""
    by_line: defaultdict[int, Counter[str]] = defaultdict(Counter)
    repeated: set[int] = set()
    for s in samples:
        frames = s.stack.frames
        if not (0 <= s.loop_index < len(frames) - 1 and _own_frames_beneath(s)):
            continue
        line = frames[s.loop_index].line
        by_line[line][s.phase] += s.stack.count
        if blocks is not None and line not in repeated and _repeats_without_gradients(s, blocks):
            repeated.add(line)
    return {
        line for line, phases in by_line.items()
        if phases["forward"] >= EVAL_LINE_MIN_SAMPLES
        and phases["forward"] >= 0.5 * sum(phases.values())
        and not any(phases[p] for p in TRAINING_PHASES)
        and (phases["data_wait"] >= 1 or line in repeated)
    }


def _inline_evaluation_loops(
    samples: Sequence[PhasedSample], blocks: BlockReader
) -> set[int]:
    """Loop-frame lines inside a loop of its own that runs no backward, with
    gradients off and forward passes beneath it (reading 3)."""
    on_loop = [s for s in samples if 0 <= s.loop_index < len(s.stack.frames)]
    if not on_loop:
        return set()
    loop_frame = on_loop[0].stack.frames[on_loop[0].loop_index]
    if not loop_frame.in_job_code:
        return set()  # a framework's loop (Lightning, the HF Trainer) names its own
    file = loop_frame.file
    training_loops: set[int] = set()
    for s in on_loop:
        if s.phase in TRAINING_PHASES:
            found = blocks(file, s.stack.frames[s.loop_index].line)
            training_loops.update(found.loops if found is not None else ())
    if not training_loops:
        return set()  # no step in the window: a server, or all evaluation
    by_block: defaultdict[int, Counter[str]] = defaultdict(Counter)
    block_of: dict[int, int] = {}
    for s in on_loop:
        line = s.stack.frames[s.loop_index].line
        found = blocks(file, line)
        if (found is not None and found.loops and found.gradients_off
                and found.loops[0] not in training_loops and found.loops[0] in found.data_loops):
            block_of[line] = found.loops[0]
            by_block[found.loops[0]][s.phase] += s.stack.count
    inline = {
        header for header, phases in by_block.items()
        if phases["forward"] >= EVAL_LINE_MIN_SAMPLES
        and not any(phases[p] for p in TRAINING_PHASES)
    }
    return {line for line, header in block_of.items() if header in inline}


def mark_evaluation(
    samples: Sequence[PhasedSample],
    classifier: PhaseClassifier,
    source: SourceReader | None,
) -> None:
    """Turn the samples of the job's own evaluation passes into phase ``eval``."""
    if "eval" not in classifier.phases:
        return
    blocks = BlockReader(source) if source is not None else None
    calls = _evaluation_calls(samples, blocks)
    inline = _inline_evaluation_loops(samples, blocks) if blocks is not None else set()
    if not calls and not inline:
        return
    eval_rank = classifier.rank_of("eval")
    for s in samples:
        frames = s.stack.frames
        if not 0 <= s.loop_index < len(frames) or classifier.rank_of(s.phase) >= eval_rank:
            continue
        line = frames[s.loop_index].line
        if line in inline or (line in calls and s.loop_index < len(frames) - 1):
            s.phase = "eval"
