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
cgroup namespace, and looked up under the cgroup mount: right when the
mount's root is the namespace's root (the host, a container with its own
cgroup namespace). A path that climbs out of the namespace (``/../..``: the
job's group is not under the reader's, as a node agent's pod sees the other
pods' groups) is followed only where the mount shows the whole tree (the
node's, mounted read-only into the pod and named by ``AITOP_CGROUP_ROOT``):
the reader finds its own group there by its PID and climbs from it. Under a
mount of the reader's namespace alone the climb would land on the reader's own
root and read its limits, so there it is not followed.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import PurePosixPath

from .procfs import read_text

#: v1 reports "no limit" as the largest page-aligned signed 64-bit value;
#: anything above this many bytes (1 EiB) is no limit.
UNLIMITED_BYTES = 1 << 60
#: Where the node's cgroup tree is mounted when it is not /sys/fs/cgroup: a pod's
#: own /sys/fs/cgroup shows only its own group.
CGROUP_ROOT_ENV = "AITOP_CGROUP_ROOT"
#: The most directories searched for the reader's own group (a node's tree has
#: a few hundred to a few thousand).
MAX_GROUPS_SEARCHED = 20_000


def cgroup_root_from_env() -> str | None:
    """The cgroup mount ``AITOP_CGROUP_ROOT`` names, None when unset."""
    return os.environ.get(CGROUP_ROOT_ENV, "").strip() or None


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


def _entry(text: str, v1: bool) -> str | None:
    """The path of the memory hierarchy in a ``/proc/PID/cgroup`` text (v1: the line
    naming ``memory``, v2: the ``0::`` line)."""
    for line in text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if v1 and "memory" in controllers.split(","):
            return path.strip()
        if not v1 and hierarchy == "0" and controllers == "":
            return path.strip()
    return None


@functools.lru_cache(maxsize=8)
def _group_of(base: str, pid: int) -> str | None:
    """The group under the mount ``base`` whose ``cgroup.procs`` lists ``pid``, as a
    path from the mount's root; None if not found (or not readable)."""
    for seen, (directory, _dirs, files) in enumerate(os.walk(base)):
        if seen >= MAX_GROUPS_SEARCHED:
            break
        if "cgroup.procs" in files and str(pid) in (
                read_text(f"{directory}/cgroup.procs") or "").split():
            rel = os.path.relpath(directory, base)
            return "/" if rel == "." else f"/{rel}"
    return None


def _from_outside(path: str, base: str, own_path: str | None, own_pid: int) -> str | None:
    """``path`` (``/../../pod/ctr``, relative to the reader's namespace) as a path
    from the root of the mount ``base``, climbing from where the reader's own group
    sits there; None when the climb leaves the mount (it shows only the reader's
    namespace) or the reader is not found."""
    own = _group_of(base, own_pid) if own_path is not None else None
    if own is None or own_path is None:
        return None
    own_parts = PurePosixPath(own).parts[1:]
    rel_parts = PurePosixPath(own_path).parts[1:]
    if tuple(own_parts[len(own_parts) - len(rel_parts):]) != rel_parts:
        return None
    root = list(own_parts[:len(own_parts) - len(rel_parts)])  # the namespace's root
    parts = PurePosixPath(path).parts[1:]
    ups = next((i for i, part in enumerate(parts) if part != ".."), len(parts))
    if ups > len(root) or ".." in parts[ups:]:
        return None
    return "/" + "/".join([*root[:len(root) - ups], *parts[ups:]])


def memory_limit(pid: int, proc_root: str = "/proc", sys_root: str = "/sys",
                 cgroup_root: str | None = None, own_pid: int | None = None,
                 ) -> MemoryLimit | None:
    """The tightest cgroup memory limit over ``pid``, None when there is none (or
    the files cannot be read, or the group is outside the reader's namespace and
    the mount shows no more than that namespace): then RAM is the limit.

    ``cgroup_root``: the cgroup mount (default ``{sys_root}/fs/cgroup``);
    ``own_pid``: the reader's PID as that mount's ``cgroup.procs`` lists it.
    """
    text = read_text(f"{proc_root}/{pid}/cgroup")
    if not text:
        return None
    root = cgroup_root or f"{sys_root}/fs/cgroup"
    me = os.getpid() if own_pid is None else own_pid
    for v1, base, limit_file, usage_file, unlimited, inactive in (
            (True, f"{root}/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", None,
             "total_inactive_file"),
            (False, root, "memory.max", "memory.current", "max", "inactive_file")):
        path = _entry(text, v1)
        if path is None:
            continue
        if ".." in PurePosixPath(path).parts:
            own_path = _entry(read_text(f"{proc_root}/{me}/cgroup") or "", v1)
            resolved = _from_outside(path, base, own_path, me)
            if resolved is None:
                return None
            path = resolved
        found = _tightest(base, path, limit_file, usage_file, unlimited, inactive)
        if found is not None or v1:
            return found
    return None
