"""py-spy's speedscope output read as stacks with counts, and in the order taken.

``py-spy record --format speedscope --threads`` writes one sampled profile per
thread: every sample in the order it was taken, as indexes into a shared frame
table, root first, the first frame naming the thread (``thread (TID): NAME``)
as the collapsed format does. Summed per distinct stack it is the collapsed
format's content (``phases.RawStack``); kept in order it is the sequence the
step-cycle count reads (``probes.step_cycles``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .phases import Frame, RawStack, parse_frame, parse_thread_label


@dataclass(frozen=True, slots=True)
class OrderedStacks:
    """Distinct stacks with their counts, and each thread's samples in order (as
    indexes into ``stacks``)."""

    stacks: list[RawStack]
    order: dict[str, list[int]]


def _frame_text(frame: dict[str, Any]) -> str:
    name = str(frame.get("name", ""))
    file = frame.get("file") or ""
    return f"{name} ({file}:{frame.get('line') or 0})" if file else name


def parse_speedscope(text: str, paths: dict[str, str] | None = None) -> OrderedStacks:
    """The stacks of a speedscope document; ValueError if it is not one."""
    try:
        doc = json.loads(text)
        table = doc["shared"]["frames"]
        profiles = doc["profiles"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"not a speedscope profile: {exc}") from exc
    texts = [_frame_text(f) for f in table]
    frames: dict[int, Frame] = {}
    counts: dict[tuple[str | None, str | None, tuple[Frame, ...]], int] = {}
    index_of: dict[tuple[str | None, str | None, tuple[Frame, ...]], int] = {}
    order: dict[str, list[int]] = {}
    for profile in profiles:
        for sample in profile.get("samples") or ():
            key = _stack_key(sample, texts, frames, paths)
            if key is None:
                continue
            counts[key] = counts.get(key, 0) + 1
            index = index_of.setdefault(key, len(index_of))
            if key[0] is not None:
                order.setdefault(key[0], []).append(index)
    stacks = [RawStack(tid, name, fr, counts[(tid, name, fr)]) for tid, name, fr in index_of]
    return OrderedStacks(stacks, order)


def _stack_key(sample: Sequence[int], texts: Sequence[str], frames: dict[int, Frame],
               paths: dict[str, str] | None
               ) -> tuple[str | None, str | None, tuple[Frame, ...]] | None:
    """(thread id, thread name, frames root first) of one sample; None if malformed."""
    try:
        parts = [texts[i] for i in sample]
    except (IndexError, TypeError):
        return None
    thread_id: str | None = None
    thread_name: str | None = None
    skip = 0
    if parts and parts[0].startswith("process "):
        skip = 1
    if len(parts) > skip and parts[skip].startswith("thread ("):
        label = parse_thread_label(parts[skip])
        if label:
            thread_id, thread_name = label
        skip += 1
    out: list[Frame] = []
    for i in sample[skip:]:
        frame = frames.get(i)
        if frame is None:
            frame = frames[i] = parse_frame(texts[i], paths)
        out.append(frame)
    return thread_id, thread_name, tuple(out)
