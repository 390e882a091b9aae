"""The names a rule's text may use (``catalogue.WORDS``): who, where and what, in words."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from aitop.probes.samples import GpuSample, StackWindow, hot_frame_counts
from aitop.probes.session import Session

from .anatomy import optimizer_loop_frame
from .compiling import compile_words
from .gpu import target_devices
from .loading import busiest_child, busiest_neighbours, busiest_producer, main_data_source
from .memory import memory_limit_words
from .private_memory import ProcessMemory, process_memory, worker_memory_words
from .quota import quota_words
from .stall import STALL_LOOKBACK_S, stall
from .stall_feeder import stall_feeder
from .step_phases import read_stacks

#: A stall whose first window began this soon after aitop's first sample began
#: before aitop attached (py-spy's first window starts a moment after it).
STALL_FROM_ATTACH_SLACK_S = 3.0


def compute_words(session: Session, now: float, window_s: float,
                  memory: Sequence[ProcessMemory] | None = None) -> dict[str, str]:
    """The names a rule's text may use (see ``WORDS``), where known.

    ``memory``: as ``compute_metrics``' (read here where not given).
    """
    windows = read_stacks(session, now, window_s)
    words: dict[str, str] = {}
    producer = busiest_producer(windows, session, now, window_s)
    child = (
        busiest_child(session, now, window_s)
        if main_data_source(windows) == "process queue" else None
    )
    if child is not None:
        words["producer"] = child[0]
        words["producer_frame"] = "its own process (not sampled)"
    elif producer is not None:
        words["producer"] = f"thread '{producer.name or producer.thread_id}'"
        if producer.top_frame:
            words["producer_frame"] = producer.top_frame
    sources = [w.data_source for w in windows if w.data_source]
    if sources:
        words["data_source"] = max(set(sources), key=sources.count)
    words["other_frame"] = _hottest_other_frame(windows)
    words["warmup_work"] = _warmup_work(windows)
    words |= compile_words(session, now, windows)
    loop = optimizer_loop_frame(windows)
    if loop is not None:
        words["optimizer_loop_frame"] = loop
    words |= _stall_words(session, now)
    hosts = session.host.window(now - window_s, now)
    neighbours = busiest_neighbours(hosts)
    if neighbours:
        words["neighbours"] = ", ".join(
            f"PID {p.pid} {p.command} ({p.cores:.1f} core)" for p in neighbours)
    if hosts:
        words["memory_limit"] = memory_limit_words(hosts[-1])
    words["worker_memory"] = worker_memory_words(
        process_memory(session, now) if memory is None else memory)
    gpus = session.gpu.window(now - window_s, now)
    if gpus:
        words["gpu_neighbours"] = _gpu_neighbour_words(gpus[-1])
    return words | quota_words(session, now, window_s)


def _stall_words(session: Session, now: float) -> dict[str, str]:
    """How long the loop has stood still, in which frame, and what became of its feeder."""
    seconds, frame = stall(session, now)
    if seconds <= 0:
        return {}
    # A stall as old as the watch (or the look-back) began before it.
    watched = None if session.started_at is None else now - session.started_at
    began_before = seconds >= STALL_LOOKBACK_S or (
        watched is not None and seconds >= watched - STALL_FROM_ATTACH_SLACK_S)
    words = {"stalled_for": f"{'at least ' if began_before else ''}{seconds:.0f} s",
             "stall_feeder": stall_feeder(session, now, seconds)}
    if frame is not None:
        called = f", called from {frame.caller.rsplit('/', 1)[-1]}" if frame.caller else ""
        words["stalled_frame"] = (f"{frame.function} ({frame.location.rsplit('/', 1)[-1]})"
                                  f"{called}")
    return words


def _gpu_neighbour_words(sample: GpuSample) -> str:
    """The two busiest processes outside the job on the GPUs it uses."""
    others = sorted(
        ((p, d.index) for d in target_devices(sample) for p in d.processes if not p.in_target),
        key=lambda pd: (pd[0].sm_percent or 0.0, pd[0].used_memory_bytes or 0), reverse=True)
    parts = []
    for p, index in others[:2]:
        name = (p.name or "?").rsplit("/", 1)[-1]
        memory = (f", {p.used_memory_bytes / 1e9:.1f} GB" if p.used_memory_bytes is not None
                  else "")
        sm = f"{p.sm_percent:.0f}% SM" if p.sm_percent is not None else "SM unknown"
        parts.append(f"PID {p.pid} {name} on GPU {index} ({sm}{memory})")
    return ", ".join(parts) or "none seen"


def _warmup_work(windows: Sequence[StackWindow]) -> str:
    """What the compile phase's warm-up is doing, from the newest window with samples.

    CUDA graph capture runs through the compile phase's frames too (a one-time
    cost before the steps), but telling a user that torch.compile compiles a
    model captured with ``make_graphed_callables`` would send them looking for
    a compile call that is not there.
    """
    newest = next((w for w in reversed(windows) if w.total_samples > 0), None)
    if newest is not None and "cuda_graph_capture" in newest.techniques_seen:
        return "CUDA graphs are being captured"
    return "torch.compile is compiling the model"


def _hottest_other_frame(windows: Sequence[StackWindow]) -> str:
    """Where the training thread's 'other' time goes: the loop's line that leads to
    most of it, and beneath it the hottest innermost function, at its hottest line.

    A share of the loop "outside the recognised phases" says nothing to fix;
    naming the frame (``log_metrics (train.py:9)``) says what to change. The
    samples are summed per line of the loop that leads to them first: a
    Python environment stepped from one line spends its time in its own lines
    and in NumPy's functions alike, while the loop's own lines (a loss computed
    in loose tensor ops) each hold only theirs, and would otherwise be named
    together as the loop's function. Beneath that line they are summed per
    function: a Python function's time spreads over its lines, while its
    caller's one line that waits in C (``torch.tensor(...)`` of the rows it
    built) holds all of its own, and would otherwise be named.
    """
    other = [(key, n) for key, n in hot_frame_counts(windows) if key[0] == "other"]
    if not other:
        return "code outside the recognised phases"
    per_caller: Counter[str] = Counter()
    for key, n in other:
        per_caller[key[3] or key[2]] += n  # no loop line known: each frame its own
    leading = per_caller.most_common(1)[0][0]
    per_function: Counter[tuple[str, str]] = Counter()
    hottest_line: dict[tuple[str, str], tuple[str, str, str, str]] = {}
    for key, n in other:  # hottest first: a function's first entry is its hottest line
        if (key[3] or key[2]) != leading:
            continue
        function_in_file = (key[1], key[2].rsplit(":", 1)[0])
        per_function[function_in_file] += n
        hottest_line.setdefault(function_in_file, key)
    _phase, function, location, caller = hottest_line[per_function.most_common(1)[0][0]]
    # The job's own files are absolute paths: the file name is enough in a title.
    location, caller = location.rsplit("/", 1)[-1], caller.rsplit("/", 1)[-1]
    called = f", called from {caller}" if caller and caller != location else ""
    return f"{function} ({location}){called}"
