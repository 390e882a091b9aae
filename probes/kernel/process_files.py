"""A job's own files, read through ``/proc/PID/root`` or ``/proc/PID/fd/N``.

``/proc/PID/root/path`` is ``path`` in the job's own filesystem (a job in a
container is read in its container); ``/proc/PID/fd/N`` is the file the job has
open, even when it has been renamed or deleted since. Whatever path a job names,
the read is bounded: opened non-blocking (a FIFO or device it names never stalls
the reader), only a regular file is read, and at most ``max_bytes`` of it.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from .procfs import PROC, Pid, process_path


@dataclass(frozen=True, slots=True)
class FileRead:
    """What one bounded read of a regular file returned."""

    data: bytes
    #: Where ``data`` starts in the file.
    start: int
    #: The file's size and modification time when it was read.
    size: int
    mtime: float


def in_root(pid: Pid, path: str, proc_root: str = PROC) -> str:
    """The absolute ``path`` of the job's filesystem, as aitop opens it."""
    return process_path(pid, "root", proc_root=proc_root) + path


def of_fd(pid: Pid, fd: int, proc_root: str = PROC) -> str:
    """The file the job has open as descriptor ``fd``, as aitop opens it."""
    return process_path(pid, "fd", str(fd), proc_root=proc_root)


def read_bounded(path: str, max_bytes: int, *, offset: int | None = 0,
                 whole: bool = False) -> FileRead | None:
    """The bytes of a regular file from ``offset`` to its end, the last ``max_bytes`` of
    them; ``None`` when it is no regular file or cannot be read.

    ``offset=None`` reads the file's last ``max_bytes``; an offset past the end (the
    file was truncated or rotated since) reads from its start. With ``whole``, a file
    larger than ``max_bytes`` is not read at all (a generated module, a data file).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        try:  # a symlinked script (common in venvs): follow it, still a regular file
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            return None
    try:
        info = os.fstat(fd)
        size = info.st_size
        if not stat.S_ISREG(info.st_mode) or (whole and size > max_bytes):
            return None
        start = 0 if offset is None or offset > size else offset
        start = max(start, size - max_bytes)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            fh.seek(start)
            data = fh.read(min(size - start, max_bytes) if not whole else max_bytes + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return FileRead(data, start, size, info.st_mtime)


def list_dir(path: str) -> list[str] | None:
    """Names in a directory of the job's filesystem (``in_root``), ``None`` if unreadable."""
    try:
        return os.listdir(path)
    except OSError:
        return None
