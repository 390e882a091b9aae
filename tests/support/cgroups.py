"""Real cgroups with a limit, for a process to run under (as in a pod).

A memory cgroup (``memory_cgroup``) or a CPU-quota one (``cpu_cgroup``), made
by the benchmarks' own maker (``benchmarks/cgroups.py``: v1 where the machine
has the controller's hierarchy, v2 otherwise); the tests run as root. Where
neither can be made the test fails with what was tried: the machine lacks what
the test needs, which a skip would hide.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from benchmarks import cgroups
from benchmarks.cgroups import LimitedCgroup

__all__ = ["LimitedCgroup", "MemoryCgroup", "cpu_cgroup", "memory_cgroup"]

#: The memory cgroup of the leak tests (the name their imports use).
MemoryCgroup = LimitedCgroup


@contextlib.contextmanager
def _or_fail(made: contextlib.AbstractContextManager[LimitedCgroup]) -> Iterator[LimitedCgroup]:
    try:
        group = made.__enter__()
    except cgroups.CgroupError as exc:
        pytest.fail(str(exc))
    try:
        yield group
    finally:
        made.__exit__(None, None, None)


@contextlib.contextmanager
def memory_cgroup(limit_mb: float) -> Iterator[LimitedCgroup]:
    """A fresh memory cgroup limited to ``limit_mb`` MB, removed afterwards."""
    with _or_fail(cgroups.memory_cgroup(limit_mb)) as group:
        yield group


@contextlib.contextmanager
def cpu_cgroup(cpus: float, period_us: int = 100_000) -> Iterator[LimitedCgroup]:
    """A fresh CPU cgroup whose quota allows ``cpus`` CPUs, removed afterwards."""
    with _or_fail(cgroups.cpu_cgroup(cpus, period_us)) as group:
        yield group
