"""``/dev/shm`` as a job sees it: the tmpfs's size and use, and the job's segments in it.

PyTorch hands every batch a DataLoader worker makes to the training process
through shared memory: the worker puts the batch's tensors in ``/dev/shm``
segments (``torch_<pid>_...``, unlinked at once and passed on as file
descriptors) and the training process maps them. Batches in flight
(``num_workers x prefetch_factor``) therefore live in ``/dev/shm``, a tmpfs
that containers size small (Docker's default is 64 MB): when a segment does not
fit, the worker dies of SIGBUS ("DataLoader worker ... is killed by signal: Bus
error"). A segment counts against the tmpfs until its last descriptor and
mapping go, unlinked or not.

The job's ``/dev/shm`` is the one in its own mount namespace, read through
``/proc/PID/root`` (a container's, not the host's); its segments are the
mappings of ``/proc/PID/maps`` under ``/dev/shm/``. Readers only: nothing here
raises for a process that is gone or a file that cannot be read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .procfs import PROC, Pid, process_path, read_maps

SHM_DIR = "/dev/shm"


@dataclass(frozen=True, slots=True)
class ShmUsage:
    """The size of a job's ``/dev/shm`` and what of it is in use, in bytes."""

    size_bytes: int
    used_bytes: int

    @property
    def free_bytes(self) -> int:
        return max(0, self.size_bytes - self.used_bytes)


def read_shm_usage(pid: Pid, proc_root: str = PROC) -> ShmUsage | None:
    """``/dev/shm`` in ``pid``'s mount namespace (``statvfs`` through its root), or
    ``None`` where it cannot be reached (another user's process without the rights
    to follow its root, no ``/dev/shm``, a size of 0)."""
    try:
        st = os.statvfs(process_path(pid, "root", SHM_DIR.lstrip("/"), proc_root=proc_root))
    except (OSError, ValueError):
        return None
    size = st.f_blocks * st.f_frsize
    if size <= 0:
        return None
    return ShmUsage(size_bytes=size, used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize)


def parse_shm_mappings(maps: str) -> dict[tuple[str, int], int]:
    """``maps`` text -> bytes mapped from each ``/dev/shm`` file, by ``(device, inode)``.

    A file mapped in several pieces counts its pieces' sum; a deleted one (torch
    unlinks its segments at once) still counts: it holds its pages until unmapped.
    """
    out: dict[tuple[str, int], int] = {}
    for line in maps.splitlines():
        if SHM_DIR not in line:  # most of a torch process's thousands of lines
            continue
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith(SHM_DIR + "/"):
            continue
        span, _perms, _offset, device, inode = fields[:5]
        start, _, end = span.partition("-")
        try:
            size = int(end, 16) - int(start, 16)
            key = (device, int(inode))
        except ValueError:
            continue
        out[key] = out.get(key, 0) + size
    return out


def read_shm_mappings(pid: Pid, proc_root: str = PROC) -> dict[tuple[str, int], int] | None:
    """What ``pid`` maps from ``/dev/shm`` (see :func:`parse_shm_mappings`), ``None``
    when its maps cannot be read."""
    text = read_maps(pid, proc_root=proc_root)
    return None if text is None else parse_shm_mappings(text)
