"""Real cgroups with a limit, for a process to run under (as in a pod).

A memory cgroup (``memory_cgroup``) or a CPU-quota one (``cpu_cgroup``), made
under this process's own group of that controller: v1 (``/sys/fs/cgroup/memory``,
``/sys/fs/cgroup/cpu``) or v2 (the unified hierarchy with the controller
enabled); the tests run as root. Where neither can be made the test fails with
what was tried: the machine lacks what the test needs, which a skip would hide.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

SYS_CGROUP = Path("/sys/fs/cgroup")


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


#: The memory cgroup of the leak tests (the name their imports use).
MemoryCgroup = LimitedCgroup


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


def _make(controller: str, tag: str, v1_files: Mapping[str, str],
          v2_files: Mapping[str, str]) -> LimitedCgroup:
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
    pytest.fail(f"cannot make a {controller} cgroup to run the job under (the tests run as "
                "root on a machine with cgroups): "
                + ("; ".join(tried) or f"no {controller} cgroup"))


@contextlib.contextmanager
def _removed_after(group: LimitedCgroup) -> Iterator[LimitedCgroup]:
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


@contextlib.contextmanager
def memory_cgroup(limit_mb: float) -> Iterator[LimitedCgroup]:
    """A fresh memory cgroup limited to ``limit_mb`` MB, removed afterwards."""
    limit = str(round(limit_mb * 1e6))
    with _removed_after(_make("memory", f"aitop-test-{os.getpid()}",
                              {"memory.limit_in_bytes": limit}, {"memory.max": limit})) as group:
        yield group


@contextlib.contextmanager
def cpu_cgroup(cpus: float, period_us: int = 100_000) -> Iterator[LimitedCgroup]:
    """A fresh CPU cgroup whose quota allows ``cpus`` CPUs, removed afterwards."""
    quota = str(round(cpus * period_us))
    with _removed_after(_make(
            "cpu", f"aitop-test-cpu-{os.getpid()}",
            {"cpu.cfs_period_us": str(period_us), "cpu.cfs_quota_us": quota},
            {"cpu.max": f"{quota} {period_us}"})) as group:
        yield group
