"""The memory limit a process really has: its cgroup's, when tighter than RAM.

A job in a container (a Kubernetes pod, a Slurm job with cgroup enforcement,
``docker run --memory``) is killed by the kernel's OOM killer when its cgroup
reaches its limit, whatever RAM the machine still has free. A leak's runway is
therefore the headroom under the tightest limit on the process's cgroup path:
its own group's or any ancestor's (limits are hierarchical in both cgroup
versions).

Both versions are read, through the paths ``/proc/PID/cgroup`` gives and the
mounts under ``/sys/fs/cgroup``:

* v2 (unified): the ``0::/path`` line; ``memory.max`` ("max" when unlimited)
  and ``memory.current`` in each directory up to the root;
* v1: the line naming the ``memory`` controller; ``memory.limit_in_bytes``
  (a page-rounded 2**63 when unlimited) and ``memory.usage_in_bytes``.

Usage counts the page cache, which the kernel reclaims before it kills
anything: what is used is the working set, usage less the inactive file pages
of ``memory.stat``, as the kubelet counts it for its evictions.

Paths are read as ``/proc/PID/cgroup`` gives them, relative to the reader's
cgroup namespace, and looked up under the reader's mounts: right when the
mount's root is the namespace's root (the host, a container with its own
cgroup namespace). A path that climbs out of the namespace (``/../..``: the
job's group is not under the reader's) is not followed: its limits are not
the ones the mount shows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from .procfs import read_text

#: v1 reports "no limit" as the largest page-aligned signed 64-bit value;
#: anything above this many bytes (1 EiB) is no limit.
UNLIMITED_BYTES = 1 << 60


@dataclass(frozen=True, slots=True)
class MemoryLimit:
    """The tightest cgroup memory limit on a process's path, and that group's use."""

    limit_bytes: int
    #: The group's working set: usage less the page cache it may reclaim.
    used_bytes: int
    #: The group that sets the limit, as /proc/PID/cgroup names it.
    cgroup: str


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def _groups(path: str) -> list[str]:
    """``path`` and its ancestors, nearest first, the root last."""
    p = PurePosixPath(path.strip() or "/")
    return [str(p), *(str(a) for a in p.parents)]


def _inactive_file(stat_text: str | None, key: str) -> int:
    for line in (stat_text or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _int(value) or 0
    return 0


def _tightest(base: str, path: str, limit_file: str, usage_file: str,
              unlimited: str | None, inactive_key: str) -> MemoryLimit | None:
    best: MemoryLimit | None = None
    for group in _groups(path):
        directory = f"{base}{'' if group == '/' else group}"
        text = read_text(f"{directory}/{limit_file}")
        if text is None or (unlimited is not None and text.strip() == unlimited):
            continue
        limit = _int(text)
        if limit is None or limit >= UNLIMITED_BYTES:
            continue
        usage = _int(read_text(f"{directory}/{usage_file}"))
        if usage is None:
            continue
        used = max(0, usage - _inactive_file(read_text(f"{directory}/memory.stat"),
                                             inactive_key))
        if best is None or limit - used < best.limit_bytes - best.used_bytes:
            best = MemoryLimit(limit, used, group)
    return best


def memory_limit(pid: int, proc_root: str = "/proc",
                 sys_root: str = "/sys") -> MemoryLimit | None:
    """The tightest cgroup memory limit over ``pid``, None when there is none (or
    the files cannot be read, or the group is outside the reader's namespace):
    then RAM is the limit."""
    text = read_text(f"{proc_root}/{pid}/cgroup")
    if not text:
        return None
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if ".." in PurePosixPath(path.strip()).parts:
            return None
        if "memory" in controllers.split(","):
            return _tightest(f"{sys_root}/fs/cgroup/memory", path, "memory.limit_in_bytes",
                             "memory.usage_in_bytes", None, "total_inactive_file")
        if hierarchy == "0" and controllers == "":
            unified = _tightest(f"{sys_root}/fs/cgroup", path, "memory.max",
                                "memory.current", "max", "inactive_file")
            if unified is not None:
                return unified
    return None
