"""One py-spy window read the way an engineer reads a profile of a training loop.

Frame signatures (``phases.yaml``) say what a library frame *is*; they cannot
say what the job's own loop is doing. This module adds the reading that works
for any loop shape, from the stacks alone:

1. **The training thread** is the one that runs forward, backward and the
   optimizer, not merely any thread in a recognised frame (a prefetch thread
   living in a DataLoader's ``__next__`` must not win).
2. **The loop frame** is the innermost frame that every step passes through:
   the common ancestor of the samples in data, forward, backward and optimizer.
   For a plain loop that is the function with the ``for``; for the Hugging Face
   Trainer ``_inner_training_loop``; for Lightning the epoch loop's ``advance``.
   Its integer locals hold the step counter.
3. **The fetch statement.** When the loop frame stands at its ``for ... in``
   header or at a ``next(...)`` call, the loop is waiting for its next batch,
   whoever produces it: a generator around a DataLoader, a queue filled by a
   producer thread, a custom iterator. Those samples are data wait.
4. **Host synchronisation.** A sample whose innermost Python frame (the job's
   or a library's) stands at ``.item()``, ``.cpu()``, ``.tolist()``,
   ``synchronize()``... is the host waiting for the device: phase ``sync``,
   not Python overhead.
5. **The rest of a save.** In a function that calls ``torch.save`` (a sample
   of this window shows it there), the ``f.flush()``, ``os.fsync(...)`` or
   ``os.replace(...)`` that follows is checkpoint time too: the serializer has
   returned but the checkpoint is not written yet. A function of the job's own,
   called from the loop, that saves and never steps (a ``persist()``) is
   checkpoint time throughout: building the state dict and opening the file
   are part of the save.
6. **Evaluation lines.** The job's own evaluation, whatever it is called: a
   call that fetches data and runs forward but never backward, forward passes
   repeated with gradients off, or an inline loop that runs no backward
   (``evaluation_lines``).
7. **The producer.** While the training thread waits for data, the job's other
   threads that are busy (not parked in a wait) are the candidates for who
   produces its batches; the busiest is reported with its hottest frame.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .evaluation_lines import mark_evaluation
from .phases import OTHER, Frame, PhaseClassifier, RawStack, StackReading, in_job_code
from .samples import HotFrame, StackWindow, StepCycles, ThreadActivity
from .source_lines import (
    SourceReader,
    is_durable_write_line,
    is_fetch_line,
    is_host_sync_line,
)
from .step_anatomy import phase_blocks, step_shapes
from .step_cycles import CycleCounter

CHECKPOINT = "checkpoint"
#: How many hot frames per phase a window keeps (bounds memory per sample).
HOT_FRAMES_PER_PHASE = 8
#: Other threads kept per window (the busiest).
OTHER_THREADS_KEPT = 3
#: The step's compute, which only the training loop's own step runs (torch ops
#: beneath a dataset's item method build samples instead): the training thread
#: is the one found in them. (The phases in which torch's intra-op threads work,
#: which knowledge/metrics reads, add ``eval``: another set, another name.)
STEP_COMPUTE_PHASES = frozenset({"forward", "backward", "optimizer"})
#: Phases whose samples define the training loop frame (evaluation, checkpoint
#: and sync are called from it but may live elsewhere).
STEP_PHASES = frozenset({"data_wait", "forward", "backward", "optimizer"})
#: A frame is the loop frame when it is an ancestor of this share of step samples.
LOOP_COVERAGE = 0.9
#: A dataset's item methods: torch ops beneath them make samples, not a step.
DATASET_ITEM_FUNCTIONS = frozenset({"__getitem__", "__getitems__"})


def frame_label(frame: Frame) -> str:
    return f"{frame.function} ({frame.file})"


@dataclass(slots=True)
class _Sample:
    """One stack of the training thread, its phase, and how it was decided."""

    stack: RawStack
    phase: str
    outermost: int
    loop_index: int = -1


def makes_samples(frames: Sequence[Frame]) -> bool:
    """Whether a stack runs inside a dataset's item method (it builds a sample)."""
    return any(f.short_function in DATASET_ITEM_FUNCTIONS for f in frames)


def pick_training_thread(
    stacks: Sequence[RawStack], classifier: PhaseClassifier, pid: int, previous: str | None
) -> str | None:
    """The thread that runs backward and the optimizer, else forward passes.

    Only the training loop runs backward and the optimizer; a producer thread
    may call functional layers (``F.normalize``) that read as forward. Falls
    back to the thread with the most samples in any recognised phase, then the
    previous choice, then the main thread, so a window spent entirely in data
    wait or ``other`` still reports the right thread. Torch ops beneath a
    dataset's ``__getitem__`` build samples: a producer thread augmenting
    images with ``conv2d`` before the loop's first step reads as forward, and
    was taken for the training thread while the loop waited on its queue.
    """
    training: Counter[str] = Counter()
    compute: Counter[str] = Counter()
    any_phase: Counter[str] = Counter()
    seen: set[str] = set()
    for stack in stacks:
        if stack.thread_id is None:
            continue
        seen.add(stack.thread_id)
        phase = classifier.classify(stack.frames).phase
        if phase in STEP_COMPUTE_PHASES and makes_samples(stack.frames):
            continue
        if phase != OTHER:
            any_phase[stack.thread_id] += stack.count
        if phase in STEP_COMPUTE_PHASES:
            compute[stack.thread_id] += stack.count
        if phase in ("backward", "optimizer"):
            training[stack.thread_id] += stack.count
    for scores in (training, compute, any_phase):
        if scores:
            best, best_score = scores.most_common(1)[0]
            if previous is not None and scores[previous] >= 0.8 * best_score:
                return previous  # sticky: don't hop between threads on noise
            return best
    if previous in seen:
        return previous
    for stack in stacks:
        if stack.thread_id == str(pid) or stack.thread_name == "MainThread":
            return stack.thread_id
    return None


def find_loop_frame(
    samples: Sequence[_Sample],
    classifier: PhaseClassifier | None = None,
    previous: str | None = None,
) -> str | None:
    """The innermost frame that (nearly) every step sample passes through.

    A framework's own loop frame (``loop_frames`` in phases.yaml: Lightning's
    epoch loop, the HF Trainer's inner loop) wins when the samples pass through
    it: under Lightning the optimizer runs forward and backward in a closure,
    so without data-wait samples the common ancestor would be the optimizer
    step. Without data waits in the window the previous loop frame is kept if
    the samples still pass through it.
    """
    weight = 0
    data_weight = 0
    coverage: Counter[str] = Counter()
    depth_sum: Counter[str] = Counter()
    parents: Counter[str] = Counter()
    hinted: set[str] = set()
    for s in samples:
        if s.phase not in STEP_PHASES or s.outermost < 1:
            continue
        weight += s.stack.count
        data_weight += s.stack.count if s.phase == "data_wait" else 0
        ancestors: dict[str, int] = {}
        for index, frame in enumerate(s.stack.frames[: s.outermost]):
            label = frame_label(frame)
            ancestors[label] = index
            if classifier is not None and label not in hinted and classifier.is_loop_frame(frame):
                hinted.add(label)
        for label, index in ancestors.items():
            coverage[label] += s.stack.count
            depth_sum[label] += index * s.stack.count
        parents[frame_label(s.stack.frames[s.outermost - 1])] += s.stack.count
    if weight == 0:
        return None
    common = [label for label, n in coverage.items() if n >= LOOP_COVERAGE * weight]
    known = [label for label in common if label in hinted]
    if known:  # the innermost: HF's _run_epoch inside _inner_training_loop
        return max(known, key=lambda label: depth_sum[label] / coverage[label])
    if data_weight == 0 and previous is not None and previous in common:
        return previous
    if not common:
        return parents.most_common(1)[0][0]
    return max(common, key=lambda label: depth_sum[label] / coverage[label])


def kept_loop_frame(window: StackWindow, previous: str | None) -> str | None:
    """The loop frame the next window starts from (``find_loop_frame``'s ``previous``).

    Only one learnt from a window with data waits is kept: a batch fetch passes
    through the loop itself, never through a helper that the loop calls, so such
    a frame is the loop. One learnt without them is that window's alone. Kept, a
    frame learnt at start-up (the model built at module level passes through
    ``<module>`` only) would stand for the loop for good, as ``<module>`` passes
    every later sample too, and hide the counter in the loop's own function.
    """
    if window.loop_frame is not None and window.phase_counts.get("data_wait", 0) > 0:
        return window.loop_frame
    return previous


def _innermost_own_frame(frames: Sequence[Frame]) -> str:
    """The innermost frame in the job's own files (absolute paths), or "".

    A thread that stands in a library's wait (``Condition.wait`` inside
    ``Event.wait``) with no loop or phase frame to anchor it is named by the
    job's line that called into the library: that is the line a user can read.
    """
    for frame in reversed(frames):
        if frame.in_job_code:
            return frame.location
    return ""


def _loop_index(frames: Sequence[Frame], loop_frame: str | None) -> int:
    """Index of the innermost occurrence of the loop frame in a stack, or -1."""
    if loop_frame is None:
        return -1
    for index in range(len(frames) - 1, -1, -1):
        if frame_label(frames[index]) == loop_frame:
            return index
    return -1


def _data_source(frames: Sequence[Frame], loop_index: int, reading: StackReading) -> str:
    """What a data-wait sample was spent in, from the frames beneath the loop."""
    below = frames[loop_index + 1 :] if loop_index >= 0 else frames
    files = [f.file for f in below]
    for rule in reading.data_sources:
        if any(rule.matches(file) for file in files):
            return rule.source
    return "own code"


def _training_under_eval_frames(
    samples: Sequence[_Sample], classifier: PhaseClassifier
) -> set[str]:
    """Frames that matched an evaluation signature yet have backward or the optimizer beneath."""
    training: set[str] = set()
    for s in samples:
        if s.phase != "eval":
            continue
        frames = s.stack.frames
        result = classifier.classify(frames)
        below = frames[result.frame_index + 1 :]
        if any(
            (hit := classifier.frame_phase(f)) is not None and hit[0] in ("backward", "optimizer")
            for f in below
        ):
            training.add(frame_label(frames[result.frame_index]))
    return training


def _undo_false_evaluation(samples: list[_Sample], classifier: PhaseClassifier) -> None:
    """Reclassify samples under an evaluation-named frame that trains."""
    training = _training_under_eval_frames(samples, classifier)
    if not training:
        return
    for s in samples:
        if s.phase == "eval" and any(frame_label(f) in training for f in s.stack.frames):
            result = classifier.classify(s.stack.frames, exclude="eval")
            s.phase, s.outermost = result.phase, result.outermost_index


def _refine(
    samples: list[_Sample],
    classifier: PhaseClassifier,
    loop_frame: str | None,
    source: SourceReader | None,
) -> None:
    """Apply the saver-function, fetch-statement, host-sync and evaluation-line readings."""
    data_rank = classifier.rank_of("data_wait")
    savers = _checkpoint_callers(samples)
    for s in samples:
        s.loop_index = _loop_index(s.stack.frames, loop_frame)
    dedicated = _dedicated_savers(samples, savers)
    for s in samples:
        frames = s.stack.frames
        if s.phase == OTHER and _beneath_loop_in(s, dedicated):
            s.phase = CHECKPOINT
            continue
        if source is None:
            continue
        if s.loop_index >= 0 and classifier.rank_of(s.phase) < data_rank:
            loop = frames[s.loop_index]
            text = source(loop.file, loop.line)
            if text is not None and is_fetch_line(text):
                s.phase = "data_wait"
                continue
        if s.phase == OTHER and frames:
            # The innermost Python frame, the job's or a library's (printing a
            # CUDA tensor ends in torch's own .tolist()): C++ runs beneath it.
            leaf = frames[-1]
            text = source(leaf.file, leaf.line)
            if text is not None and is_host_sync_line(text):
                s.phase = "sync"
            elif (text is not None and (leaf.file, leaf.function) in savers
                  and is_durable_write_line(text)):
                s.phase = CHECKPOINT
    mark_evaluation(samples, classifier, source)


def _checkpoint_callers(samples: Sequence[_Sample]) -> set[tuple[str, str]]:
    """(file, function) of the frames that call into a checkpoint save in these samples."""
    out = set()
    for s in samples:
        if s.phase == CHECKPOINT and s.outermost > 0:
            caller = s.stack.frames[s.outermost - 1]
            out.add((caller.file, caller.function))
    return out


def _dedicated_savers(
    samples: Sequence[_Sample], savers: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """The checkpoint callers (``savers``) of the job's own that never lead into
    a step's phases or evaluation in these samples.

    Everything such a function does, called from beneath the loop
    (``_beneath_loop_in``), is the checkpoint: building the state dict
    (``{k: v.clone() ...}``), opening the file (``open(path, "wb")`` truncates
    the last one), saving, ``fsync``: a save costs the job all of it, so
    counting only the save and the ``fsync`` would read the checkpoint short.
    A step function that also saves now and then is not one: its other time is
    the step's; nor is a library's dispatcher (a callback hook) that calls a
    checkpoint callback among others.
    """
    stepping: set[tuple[str, str]] = set()
    for s in samples:
        if s.phase in STEP_PHASES or s.phase == "eval":
            stepping.update((f.file, f.function) for f in s.stack.frames[s.loop_index + 1:])
    return {(file, function) for file, function in savers if in_job_code(file)} - stepping


def _beneath_loop_in(sample: _Sample, functions: set[tuple[str, str]]) -> bool:
    """Whether a frame beneath the sample's loop frame is one of ``functions``."""
    return sample.loop_index >= 0 and any(
        (f.file, f.function) in functions for f in sample.stack.frames[sample.loop_index + 1:])


@dataclass(frozen=True, slots=True)
class SampledSpan:
    """When a window's samples were taken (epoch seconds), and their mean interval."""

    start: float
    end: float
    period_s: float


def _cycle_phase(sample: _Sample | None, classifier: PhaseClassifier) -> str:
    """A sample's phase as a step cycle reads it.

    Anything beneath the optimizer's ``step`` is the optimizer: a closure
    (``optimizer.step(closure)``: LBFGS, Lightning's automatic optimization)
    runs forward and backward inside it, once or many times, for one step.
    Anything else beneath backward is backward (activation checkpointing runs
    forward passes there).
    """
    if sample is None:
        return OTHER
    outer = {hit[0] for f in sample.stack.frames
             if (hit := classifier.frame_phase(f)) is not None
             and (hit[0] != "optimizer" or _is_step(f))}
    for phase in ("optimizer", "backward"):
        if phase in outer:
            return phase
    return sample.phase


def _is_step(frame: Frame) -> bool:
    """Whether a frame is an optimizer's ``step`` (``LBFGS.step``; bare ``step``
    before Python 3.11), not the other code of ``torch/optim`` (schedulers,
    SWA's averaged model, whose forward passes are the model's)."""
    return frame.function.rsplit(".", 1)[-1] == "step"


def _other_threads(
    stacks: Sequence[RawStack], training: str | None, idle: frozenset[str]
) -> tuple[ThreadActivity, ...]:
    """The target's other threads with the samples they spent working, busiest first."""
    samples: Counter[str] = Counter()
    busy: Counter[str] = Counter()
    names: dict[str, str | None] = {}
    leaves: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for stack in stacks:
        tid = stack.thread_id
        if tid is None or tid == training or not stack.frames:
            continue
        names[tid] = stack.thread_name or names.get(tid)
        samples[tid] += stack.count
        leaf = stack.frames[-1]
        if leaf.short_function in idle:
            continue
        busy[tid] += stack.count
        leaves[tid][f"{leaf.function} ({leaf.location})"] += stack.count
    ranked = sorted(samples, key=lambda tid: (-busy[tid], -samples[tid]))[:OTHER_THREADS_KEPT]
    return tuple(
        ThreadActivity(
            thread_id=tid,
            name=names.get(tid),
            samples=samples[tid],
            busy_samples=busy[tid],
            top_frame=leaves[tid].most_common(1)[0][0] if leaves[tid] else None,
        )
        for tid in ranked
    )


def summarize_window(
    stacks: Sequence[RawStack],
    classifier: PhaseClassifier,
    *,
    pid: int,
    t_start: float,
    t_end: float,
    previous_thread: str | None = None,
    source: SourceReader | None = None,
    previous_loop: str | None = None,
    order: Mapping[str, Sequence[int]] | None = None,
    sampled: SampledSpan | None = None,
    counter: CycleCounter | None = None,
) -> StackWindow:
    """Phase counts, hot frames, loop frame and producers of one window.

    ``order``: each thread's samples in the order taken, as indexes into
    ``stacks``, taken over ``sampled``; with them ``counter`` counts the
    training thread's step cycles (``probes.step_cycles``), and the window holds
    the optimizer steps it saw whole (:func:`step_anatomy.step_shapes`).
    """
    thread = pick_training_thread(stacks, classifier, pid, previous_thread)
    techniques: set[str] = set()
    samples: list[_Sample] = []
    sample_of: dict[int, _Sample] = {}
    thread_name = None
    used: Counter[str] = Counter()
    used_in: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for index, stack in enumerate(stacks):
        hits = classifier.technique_hits(stack.frames)
        techniques.update(hits)
        if stack.thread_id != thread or not stack.frames:
            continue
        thread_name = stack.thread_name or thread_name
        result = classifier.classify(stack.frames)
        samples.append(_Sample(stack, result.phase, result.outermost_index))
        sample_of[index] = samples[-1]
        for technique, frame in hits.items():
            used[technique] += stack.count
            used_in[technique][frame_label(frame)] += stack.count
    _undo_false_evaluation(samples, classifier)
    loop_frame = find_loop_frame(samples, classifier, previous_loop)
    _refine(samples, classifier, loop_frame, source)

    counts = dict.fromkeys(classifier.phases, 0)
    hot: Counter[tuple[str, str, str, str]] = Counter()
    sources: Counter[str] = Counter()
    total = 0
    for s in samples:
        counts[s.phase] = counts.get(s.phase, 0) + s.stack.count
        total += s.stack.count
        frames = s.stack.frames
        leaf = frames[-1]
        caller = frames[s.loop_index].location if s.loop_index >= 0 else ""
        if not caller and s.outermost >= 1:
            caller = frames[s.outermost - 1].location
        if not caller:
            caller = _innermost_own_frame(frames[:-1])
        hot[(s.phase, leaf.function, leaf.location, caller)] += s.stack.count
        if s.phase == "data_wait":
            sources[_data_source(frames, s.loop_index, classifier.reading)] += s.stack.count
    hot_frames: list[HotFrame] = []
    per_phase: Counter[str] = Counter()
    for (phase, function, location, caller), n in hot.most_common():
        if per_phase[phase] < HOT_FRAMES_PER_PHASE:
            per_phase[phase] += 1
            hot_frames.append(HotFrame(phase, function, location, n, caller))
    # The training thread's phases in the order sampled, where the window has one.
    ordered = ([sample_of[i].phase for i in order.get(thread, ()) if i in sample_of]
               if order is not None and thread is not None else [])
    cycles: StepCycles | None = None
    cycles_note: str | None = "no sample order (collapsed stacks)"
    if order is not None and sampled is not None and counter is not None and thread:
        sequence = [_cycle_phase(sample_of.get(i), classifier) for i in order.get(thread, ())]
        cycles, cycles_note = counter.count(sequence, sampled.start, sampled.end,
                                            sampled.period_s)
    return StackWindow(
        t_start=t_start,
        t_end=t_end,
        thread_name=thread_name,
        thread_id=thread,
        total_samples=total,
        phase_counts=counts,
        hot_frames=tuple(hot_frames),
        techniques_seen=tuple(sorted(techniques)),
        loop_frame=loop_frame,
        data_source=sources.most_common(1)[0][0] if sources else None,
        other_threads=_other_threads(stacks, thread, classifier.reading.idle_functions),
        cycles=cycles,
        cycles_note=cycles_note,
        technique_samples=dict(used),
        technique_frames={t: frames.most_common(1)[0][0] for t, frames in used_in.items()},
        step_shapes=step_shapes(ordered),
        phase_blocks=phase_blocks(ordered) if ordered else {},
        ends=(ordered[0], ordered[-1]) if ordered else (),
    )
