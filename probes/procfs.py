"""Reading /proc: every file aitop reads there goes through these few functions.

They return ``None`` (or empty) for what is missing or unreadable, never raise:
a process that exits between two reads, or a file the kernel does not offer,
blanks one field. ``proc_root`` lets tests point them at a tree of their own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

PROC = "/proc"


def read_text(path: str) -> str | None:
    """Read a small /proc or /sys file, or ``None`` if it is missing or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except (OSError, ValueError):
        return None


def list_tids(pid: int, proc_root: str = PROC) -> list[int] | None:
    """Thread ids of ``pid`` (``None`` when its task directory cannot be listed)."""
    try:
        return sorted(int(t) for t in os.listdir(f"{proc_root}/{pid}/task") if t.isdigit())
    except OSError:
        return None


def read_cmdline(pid: int, proc_root: str = PROC) -> tuple[str, ...]:
    """A process's arguments from ``/proc/PID/cmdline`` (empty if unreadable)."""
    raw = read_text(f"{proc_root}/{pid}/cmdline") or ""
    return tuple(a for a in raw.split("\0") if a)


def parse_stat(text: str) -> tuple[str, list[str]] | None:
    """Split a ``/proc/.../stat`` line into ``(comm, fields after comm)``.

    ``comm`` sits in parentheses and may itself contain spaces or ``)``, so it is
    cut at the first ``(`` and the *last* ``)``.
    """
    start = text.find("(")
    end = text.rfind(")")
    if start < 0 or end < start:
        return None
    return text[start + 1 : end], text[end + 2 :].split()


def process_alive(pid: int, proc_root: str = PROC) -> bool:
    """Whether the process exists and is no zombie (exited, not yet reaped)."""
    text = read_text(f"{proc_root}/{pid}/stat")
    parsed = parse_stat(text) if text else None
    return parsed is not None and bool(parsed[1]) and parsed[1][0] != "Z"


@dataclass(frozen=True, slots=True)
class TaskStat:
    """One thread's name and cumulative CPU ticks (user + system)."""

    tid: int
    name: str
    ticks: int


def read_task_stat(pid: int, tid: int, proc_root: str = PROC) -> TaskStat | None:
    """Name and CPU ticks of one thread, or ``None`` if it is gone/unreadable."""
    text = read_text(f"{proc_root}/{pid}/task/{tid}/stat")
    parsed = parse_stat(text) if text else None
    if parsed is None:
        return None
    name, rest = parsed
    try:
        # Fields after comm: state(0) ppid(1) ... utime(11) stime(12).
        return TaskStat(tid, name, int(rest[11]) + int(rest[12]))
    except (IndexError, ValueError):
        return TaskStat(tid, name, 0)


def read_thread_names(pid: int, proc_root: str = PROC) -> list[str] | None:
    """Names (comm) of all threads of ``pid``; ``None`` when none could be read."""
    tids = list_tids(pid, proc_root)
    if not tids:
        return None
    names: list[str] = []
    for tid in tids:
        text = read_text(f"{proc_root}/{pid}/task/{tid}/comm")
        if text is not None:
            names.append(text.rstrip("\n"))
    return names or None


def read_runqueue_wait_ns(pid: int, proc_root: str = PROC) -> int | None:
    """Nanoseconds the process's main thread has spent runnable, waiting for a CPU.

    The second field of ``/proc/PID/schedstat`` (kernels with scheduler
    statistics, the default in common distributions). It tells a worker starved
    of CPU (contention) from one asleep on a disk read: both show low CPU.
    """
    text = read_text(f"{proc_root}/{pid}/schedstat")
    fields = text.split() if text else []
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1])
