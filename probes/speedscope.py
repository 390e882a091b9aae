"""Reading ``py-spy record --format speedscope``: the window's stacks, and their order.

py-spy's raw (collapsed) format counts each distinct stack and forgets when it
was seen; its speedscope file keeps every thread's samples in the order they
were taken. The order is what shows a step's anatomy (how many backward passes
run between two optimizer steps); the counts are what every other reading
needs. :func:`parse_speedscope` gives both: the same :class:`RawStack` list the
raw format gives, and each thread's samples as indices into it.

The file is JSON (read with the standard library; a window's file is at most a
few MB), py-spy's own format: ``shared.frames`` holds every frame once
(``name``, ``file``, ``line``), and each profile is one thread's ``samples``,
each a list of frame indices, root first. With ``--threads`` the root frame
names the thread (``thread (1234): MainThread``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .phases import MAX_PATHS, Frame, RawStack, shorten_path

_THREAD_ROOT = re.compile(r"^thread \((?P<tid>[^)]*)\)(?::\s*(?P<name>.*))?$")


@dataclass(frozen=True, slots=True)
class Profile:
    """One speedscope window: its distinct stacks with counts, and each thread's order.

    ``order[thread_id]`` lists that thread's samples in the order they were
    taken, each an index into ``stacks``.
    """

    stacks: tuple[RawStack, ...]
    order: Mapping[str | None, tuple[int, ...]]


def _frame(entry: Mapping[str, Any], paths: dict[str, str] | None) -> Frame:
    """One shared frame, its file shortened as py-spy's raw format would show it."""
    name = str(entry.get("name") or "")
    full = str(entry.get("file") or "")
    line = entry.get("line")
    if not full:
        return Frame(name, "", 0)
    short = shorten_path(full)
    if paths is not None and short != full and short not in paths and len(paths) < MAX_PATHS:
        paths[short] = full
    return Frame(name, short, line if isinstance(line, int) else 0)


def _thread_of(root: Frame) -> tuple[str | None, str | None] | None:
    """(thread id, name) when ``root`` is the ``--threads`` root frame, else None."""
    match = _THREAD_ROOT.match(root.function) if not root.file else None
    if match is None:
        return None
    return match["tid"], match["name"] or None


def parse_speedscope(text: str, paths: dict[str, str] | None = None) -> Profile:
    """The window's stacks and order; an unreadable or empty file is an empty profile.

    ``paths`` learns short file name -> full path, as :func:`phases.parse_frame` does.
    """
    try:
        document = json.loads(text) if text.strip() else {}
    except ValueError:
        return Profile((), {})
    shared = document.get("shared") if isinstance(document, dict) else None
    entries = shared.get("frames") if isinstance(shared, dict) else None
    profiles = document.get("profiles") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not isinstance(profiles, list):
        return Profile((), {})
    frames = [_frame(e, paths) if isinstance(e, dict) else Frame("", "", 0) for e in entries]
    index: dict[tuple[str | None, str | None, tuple[Frame, ...]], int] = {}
    keys: list[tuple[str | None, str | None, tuple[Frame, ...]]] = []
    counts: list[int] = []
    order: dict[str | None, list[int]] = {}
    for profile in profiles:
        samples = profile.get("samples") if isinstance(profile, dict) else None
        if not isinstance(samples, list):
            continue
        for sample in samples:
            key = _stack_key(sample, frames)
            if key is None:
                continue
            at = index.get(key)
            if at is None:
                at = index[key] = len(keys)
                keys.append(key)
                counts.append(0)
            counts[at] += 1
            order.setdefault(key[0], []).append(at)
    stacks = tuple(RawStack(tid, name, stack, n)
                   for (tid, name, stack), n in zip(keys, counts, strict=True))
    return Profile(stacks, {tid: tuple(seq) for tid, seq in order.items()})


def _stack_key(
    sample: object, frames: Sequence[Frame]
) -> tuple[str | None, str | None, tuple[Frame, ...]] | None:
    """(thread id, thread name, frames without the roots) of one sample, or None."""
    if not isinstance(sample, list) or not all(
        isinstance(i, int) and 0 <= i < len(frames) for i in sample
    ):
        return None
    stack = [frames[i] for i in sample]
    thread_id = thread_name = None
    if stack:
        thread = _thread_of(stack[0])
        if thread is not None:
            thread_id, thread_name = thread
            stack = stack[1:]
    # py-spy may add a "process NNN:" root when sampling subprocesses.
    if stack and not stack[0].file and stack[0].function.startswith("process "):
        stack = stack[1:]
    return thread_id, thread_name, tuple(f for f in stack if f.function or f.file)
