"""The CPU cgroups of a job's processes: every process, each group read once a tick.

A job's processes usually share one group, but need not: a launcher outside the
container, workers moved by an agent, ranks in pods of their own. Each process's
``/proc/PID/cgroup`` says where it is (one small file); the quota, cpuset and
counters are then read once for each distinct placement, not once per worker.
"""

from __future__ import annotations

from collections.abc import Iterable

from .kernel.cgroups import CpuCgroup, read_cgroup_lines, read_cpu_cgroup
from .kernel.procfs import PROC


def read_cpu_groups(
    pids: Iterable[int], proc_root: str = PROC, cgroup_root: str | None = None,
) -> tuple[dict[int, str], tuple[CpuCgroup, ...]]:
    """Each readable PID's cpu group, and every distinct group's reading.

    A process gone before its group is read is left out; one that is in a group
    without a cpu controller (none mounted, no permission) has no group.
    """
    placements: dict[tuple[object, ...], CpuCgroup | None] = {}
    group_of: dict[int, str] = {}
    for pid in pids:
        lines = read_cgroup_lines(pid, proc_root)
        if not lines:
            continue
        if lines not in placements:
            placements[lines] = read_cpu_cgroup(pid, proc_root, cgroup_root)
        found = placements[lines]
        if found is not None:
            group_of[pid] = found.group
    groups = {g.group: g for g in placements.values() if g is not None}
    return group_of, tuple(groups.values())
