"""CPU time and memory of process trees, read from /proc from the outside.

Why /proc and not psutil's ``cpu_percent``: we need *cumulative* CPU seconds at
exact instants (the start and end of a measured period), for a whole tree
(a training job and its DataLoader workers; aitop and its py-spy children),
including children that already exited and were reaped: the kernel adds those
to the parent's ``cutime``/``cstime`` fields when it waits for them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True)
class StatTimes:
    """One process's CPU seconds: its own, and its reaped children's."""

    ppid: int
    own_s: float
    reaped_children_s: float


def stat_times(pid: int) -> StatTimes | None:
    """Parse /proc/PID/stat; ``None`` when the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # The command name may contain spaces and parentheses: split after the last ')'.
    rest = text[text.rfind(")") + 2:].split()
    try:
        ppid = int(rest[1])
        utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
    except (IndexError, ValueError):
        return None
    return StatTimes(ppid, (utime + stime) / CLOCK_TICKS, (cutime + cstime) / CLOCK_TICKS)


def children_map() -> dict[int, list[int]]:
    """ppid -> pids, for every process on the machine (one /proc scan)."""
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        times = stat_times(int(entry.name))
        if times is not None:
            out.setdefault(times.ppid, []).append(int(entry.name))
    return out


def descendants(pid: int, kids: dict[int, list[int]] | None = None) -> list[int]:
    """Every live descendant of ``pid`` (children, grandchildren, ...)."""
    kids = kids if kids is not None else children_map()
    out: list[int] = []
    stack = list(kids.get(pid, ()))
    while stack:
        child = stack.pop()
        out.append(child)
        stack.extend(kids.get(child, ()))
    return out


def tree_cpu_seconds(pid: int) -> float | None:
    """CPU seconds of ``pid`` and all its descendants, live or reaped, so far.

    A child that exits between the two reads may be missed or counted twice; the
    error is one child's CPU (one py-spy window: tens of ms), and only at the
    instant of the read.
    """
    root = stat_times(pid)
    if root is None:
        return None
    total = root.own_s + root.reaped_children_s
    for child in descendants(pid):
        times = stat_times(child)
        if times is not None:
            total += times.own_s + times.reaped_children_s
    return total


def rss_bytes(pid: int) -> int | None:
    """Resident memory of one process (not its children)."""
    try:
        return int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


def tree_rss_bytes(pid: int) -> int | None:
    """Resident memory of a process plus its live descendants (e.g. aitop + py-spy)."""
    own = rss_bytes(pid)
    if own is None:
        return None
    return own + sum(rss_bytes(c) or 0 for c in descendants(pid))
