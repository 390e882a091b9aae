"""Real cgroups with a limit, for a job to run under as in a container (needs root).

A memory or CPU-quota cgroup is made under this process's own group of that
controller: in its v1 hierarchy (``/sys/fs/cgroup/memory``, ``/cpu``) where the
machine has one, else in the unified (v2) hierarchy with the controller
enabled. A job started in it (``jobs.start_job(..., cgroup=...)``) and every
process it starts later are inside. Where none can be made, ``CgroupError``
says what was tried. The tests use the same (``tests/support/cgroups.py``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

SYS_CGROUP = Path("/sys/fs/cgroup")
#: Groups made by this process so far: each gets a name of its own.
_MADE = itertools.count()


class CgroupError(Exception):
    """No cgroup of the controller could be made here; the message says what was tried."""


@dataclass(frozen=True)
class LimitedCgroup:
    directory: Path
    #: The path /proc/PID/cgroup names for a process in it.
    name: str
    #: The file a PID is written to, to move it in.
    procs: Path
    #: 1 or 2: the cgroup version it was made in.
    version: int

    def add(self, pid: int) -> None:
        """Move ``pid`` in; the children it starts later are born inside."""
        self.procs.write_text(str(pid))


def _own_path(controller: str) -> str | None:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if controller and controller in controllers.split(","):
            return path
        if not controller and hierarchy == "0" and controllers == "":
            return path
    return None


def _v2_root() -> Path:
    """The unified hierarchy's mount: the root of a v2 machine, ``unified/`` of a hybrid."""
    unified = SYS_CGROUP / "unified"
    return unified if not (SYS_CGROUP / "cgroup.controllers").exists() \
        and unified.is_dir() else SYS_CGROUP


def make_cgroup(controller: str, tag: str, v1_files: Mapping[str, str],
                v2_files: Mapping[str, str]) -> LimitedCgroup:
    """A new group named ``tag`` under this process's group of ``controller``, with
    the files given written (v1's names or v2's, whichever it is made in)."""
    tried: list[str] = []
    v1 = _own_path(controller)
    if v1 is not None:
        directory = SYS_CGROUP / controller / v1.lstrip("/") / tag
        try:
            directory.mkdir()
            for name, value in v1_files.items():
                (directory / name).write_text(value)
            return LimitedCgroup(directory, f"{v1.rstrip('/')}/{tag}",
                                 directory / "cgroup.procs", 1)
        except OSError as exc:
            tried.append(f"v1 {directory}: {exc}")
    v2 = _own_path("")
    if v2 is not None:
        own = _v2_root() / v2.lstrip("/")
        try:
            # Our group holds processes (this one), and v2 lets no group with
            # processes hand controllers to children: where the controller
            # reaches our group, its parent delegates it, and a sibling of ours
            # gets it too.
            if controller in (own / "cgroup.controllers").read_text().split() and v2 != "/":
                parent, name = own.parent, f"{v2.rstrip('/').rsplit('/', 1)[0]}/{tag}"
            else:
                if controller not in (own / "cgroup.subtree_control").read_text().split():
                    (own / "cgroup.subtree_control").write_text(f"+{controller}")
                parent, name = own, f"{v2.rstrip('/')}/{tag}"
            directory = parent / tag
            directory.mkdir()
            for file, value in v2_files.items():
                (directory / file).write_text(value)
            return LimitedCgroup(directory, name.replace("//", "/"), directory / "cgroup.procs", 2)
        except OSError as exc:
            tried.append(f"v2 under {own}: {exc}")
    raise CgroupError(f"cannot make a {controller} cgroup to run the job under (it needs root "
                      "on a machine with cgroups): " + ("; ".join(tried) or f"no {controller} "
                                                         "cgroup"))


@contextlib.contextmanager
def removed_after(group: LimitedCgroup) -> Iterator[LimitedCgroup]:
    """The group, removed afterwards (its processes, if any are left, moved back to
    the parent first; a group whose last process has just exited may stay busy a
    moment)."""
    try:
        yield group
    finally:
        parent_procs = group.directory.parent / "cgroup.procs"
        with contextlib.suppress(OSError):
            for pid in group.procs.read_text().split():
                with contextlib.suppress(OSError):
                    parent_procs.write_text(pid)
        for _ in range(20):
            try:
                group.directory.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)


def tag(kind: str) -> str:
    """A name no other group of this process has: ``aitop-<kind>-<pid>-<n>``."""
    return f"aitop-{kind}-{os.getpid()}-{next(_MADE)}"


@contextlib.contextmanager
def memory_cgroup(limit_mb: float) -> Iterator[LimitedCgroup]:
    """A fresh memory cgroup limited to ``limit_mb`` MB, removed afterwards."""
    limit = str(round(limit_mb * 1e6))
    with removed_after(make_cgroup("memory", tag("memory"), {"memory.limit_in_bytes": limit},
                                   {"memory.max": limit})) as group:
        yield group


@contextlib.contextmanager
def cpu_cgroup(cpus: float, period_us: int = 100_000) -> Iterator[LimitedCgroup]:
    """A fresh CPU cgroup whose quota allows ``cpus`` CPUs, removed afterwards."""
    quota = str(round(cpus * period_us))
    with removed_after(make_cgroup(
            "cpu", tag("cpu"),
            {"cpu.cfs_period_us": str(period_us), "cpu.cfs_quota_us": quota},
            {"cpu.max": f"{quota} {period_us}"})) as group:
        yield group
