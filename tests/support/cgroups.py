"""A real memory cgroup with a limit, for a job to run under (as in a pod).

Made under this process's own memory cgroup, v1 (``/sys/fs/cgroup/memory``)
or v2 (the unified hierarchy with the memory controller enabled); the tests
run as root. Where neither can be made the test fails with what was tried:
the machine lacks what the test needs, which a skip would hide.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SYS_CGROUP = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class MemoryCgroup:
    directory: Path
    #: The path /proc/PID/cgroup names for a process in it.
    name: str
    #: The file a PID is written to, to move it in.
    procs: Path

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


def _make(limit_bytes: int, tag: str) -> MemoryCgroup:
    tried: list[str] = []
    v1 = _own_path("memory")
    if v1 is not None:
        directory = SYS_CGROUP / "memory" / v1.lstrip("/") / tag
        try:
            directory.mkdir()
            (directory / "memory.limit_in_bytes").write_text(str(limit_bytes))
            return MemoryCgroup(directory, f"{v1.rstrip('/')}/{tag}",
                                directory / "cgroup.procs")
        except OSError as exc:
            tried.append(f"v1 {directory}: {exc}")
    v2 = _own_path("")
    if v2 is not None:
        own = SYS_CGROUP / v2.lstrip("/")
        try:
            # Our group holds processes (this one), and v2 lets no group with
            # processes hand controllers to children: where the memory
            # controller reaches our group, its parent delegates it, and a
            # sibling of ours gets it too.
            if "memory" in (own / "cgroup.controllers").read_text().split() and v2 != "/":
                parent, name = own.parent, f"{v2.rstrip('/').rsplit('/', 1)[0]}/{tag}"
            else:
                if "memory" not in (own / "cgroup.subtree_control").read_text().split():
                    (own / "cgroup.subtree_control").write_text("+memory")
                parent, name = own, f"{v2.rstrip('/')}/{tag}"
            directory = parent / tag
            directory.mkdir()
            (directory / "memory.max").write_text(str(limit_bytes))
            return MemoryCgroup(directory, name.replace("//", "/"), directory / "cgroup.procs")
        except OSError as exc:
            tried.append(f"v2 under {own}: {exc}")
    pytest.fail("cannot make a memory cgroup to run the job under (the tests run as root "
                "on a machine with cgroups): " + ("; ".join(tried) or "no memory cgroup"))


@contextlib.contextmanager
def memory_cgroup(limit_mb: float) -> Iterator[MemoryCgroup]:
    """A fresh memory cgroup limited to ``limit_mb`` MB, removed afterwards (its
    processes, if any are left, moved back to the parent first)."""
    group = _make(round(limit_mb * 1e6), f"aitop-test-{os.getpid()}")
    try:
        yield group
    finally:
        parent_procs = group.directory.parent / "cgroup.procs"
        with contextlib.suppress(OSError):
            for pid in group.procs.read_text().split():
                with contextlib.suppress(OSError):
                    parent_procs.write_text(pid)
        with contextlib.suppress(OSError):
            group.directory.rmdir()
