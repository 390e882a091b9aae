"""The job's CPU quota: what its cgroups let it use, how often they stop it, what it wants.

A container's CPU limit is CFS bandwidth control: the group may run ``quota``
microseconds of CPU time per ``period``, on as many CPUs as it likes; once the
quota of a period is spent, every task of the group stands still until the
next period starts (throttled). The machine's idle cores are then of no use to
the job, and a job sized to the machine (``os.cpu_count()`` torch threads and
DataLoader workers) spends each period's quota early and waits out the rest.

Every figure here is read from the cgroups of all the job's processes
(``ProcessTreeSample.cpu_groups``), counted once per group whose quota binds:

* the quota in CPUs (summed over distinct groups: workers in a group of their
  own bring their own quota), its period, the CPUs of the cpuset;
* the share of periods throttled and the run-queue time held back per second,
  from the increase of ``nr_throttled`` / ``nr_periods`` and of the throttled
  time over the window;
* the job's runnable demand: what it would use without its quota.

The demand is the job's CPU use plus the time its quota held it back. The
kernel adds up throttled time per CPU whose run queue held the group's tasks
when the quota ran out, so each throttled second is a second one of the job's
threads was ready on a CPU it may use and was not run: use plus throttled time
is what the threads would have kept busy, at most one a CPU of the cpuset. The
run-queue wait of schedstat would count the same and also the waits other
jobs cause (which more quota does not remove), and only for each process's
main thread; a count of busy threads would count spinning OpenMP threads and
miss a worker that is throttled the whole window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aitop.probes.kernel.cgroups import CpuCgroup
from aitop.probes.samples import ProcessTreeSample
from aitop.probes.session import Session

from .units import Metrics, Values

#: A quota this close above what the job would use is what it would use: the
#: demand is read over a window, the quota is set in whole CPUs.
DEMAND_ROUNDING = 0.1

LIMIT_METRICS = ("has_cpu_quota", "cpu_quota", "cpu_quota_period_ms", "cpuset_cpus")
THROTTLING_METRICS = ("cpu_throttled_share", "cpu_throttled_per_s", "cpu_group_cpu",
                      "cpu_group_others", "cpu_demand", "quota_target", "quota_threads",
                      "quota_workers")


def limit_metrics(session: Session, now: float, window_s: float) -> Values:
    """The quota (CPUs) and period of the job's groups, and the CPUs of its cpuset.

    The quota is known only where every process of the job read is under one
    (a process outside any quota may use every core of the cpuset).
    """
    values: Values = dict.fromkeys(LIMIT_METRICS)
    # No quota seen (none applies, or no cgroup could be read) reads as none,
    # as a machine without NVML has no GPU.
    values["has_cpu_quota"] = 0.0
    tree = _newest(session, now, window_s)
    if tree is None:
        return values
    binding = job_groups(tree)
    if not binding:
        return values
    counts = [g.cpuset_count for g in binding.values() if g.cpuset_count is not None]
    values["cpuset_cpus"] = float(max(counts)) if counts else None
    quotas = [g.quota_cpus for g in binding.values()]
    if all(q is not None for q in quotas):
        values["has_cpu_quota"] = 1.0
        values["cpu_quota"] = sum(q for q in quotas if q is not None)
        main = _group_of_main(tree, binding)
        period = (main or next(iter(binding.values()))).period_us
        values["cpu_quota_period_ms"] = None if period is None else period / 1000.0
    return values


def throttling_metrics(session: Session, now: float, window_s: float,
                       known: Metrics) -> Values:
    """How often the quota stopped the job over the window, and what it would use.

    ``known``: the window's process metrics (``proc_cpu_mean``, ``num_workers``,
    ``cpu_count``) and the limits (``cpu_quota``, ``cpuset_cpus``).
    """
    values: Values = dict.fromkeys(THROTTLING_METRICS)
    trees = [t for t in session.processes.window(now - window_s, now)
             if t.alive and t.cpu_groups]
    quota = known.get("cpu_quota")
    if len(trees) < 2 or quota is None:
        return values
    change = _counter_change(trees)
    if change is None:
        return values
    seconds = trees[-1].t - trees[0].t
    values["cpu_throttled_share"] = (
        change.throttled / change.periods if change.periods else 0.0)
    throttled = change.throttled_us / 1e6 / seconds
    values["cpu_throttled_per_s"] = throttled
    used_pct = known.get("proc_cpu_mean")
    if used_pct is None:
        return values
    used = used_pct / 100.0
    group = None if change.usage_us is None else change.usage_us / 1e6 / seconds
    others = 0.0 if group is None else max(0.0, group - used)
    values["cpu_group_cpu"] = group
    values["cpu_group_others"] = None if group is None else others
    # The job's part of the time held back: its share of what the group ran.
    share = 1.0 if not group else min(1.0, used / group)
    # What the threads could run on at once: the cpuset, else the machine.
    host = session.host.last()
    cores = known.get("cpuset_cpus") or (float(host.cpu_count) if host else None)
    demand = used + throttled * share
    values["cpu_demand"] = demand if cores is None else min(demand, cores)
    values["quota_target"] = quota_target(quota, (values["cpu_demand"] or 0.0) + others, cores)
    values["quota_threads"] = float(max(1, math.floor(quota + 1e-9)))
    workers = known.get("num_workers")
    values["quota_workers"] = (
        None if workers is None else float(min(workers, max(1, math.floor(quota + 1e-9)))))
    return values


def quota_target(quota: float, wanted: float, cores: float | None) -> float | None:
    """The quota, in whole CPUs, that lets the group run what it wants: its demand
    rounded up, at most the CPUs it may run on; None when that is no more than now."""
    target = float(math.ceil(wanted - DEMAND_ROUNDING))
    if cores is not None:
        target = min(target, cores)
    return target if target > quota + DEMAND_ROUNDING else None


def job_groups(tree: ProcessTreeSample) -> dict[str, CpuCgroup]:
    """The groups whose quotas bind the tree's processes, by the group counted."""
    by_group = {g.group: g for g in tree.cpu_groups}
    binding: dict[str, CpuCgroup] = {}
    for process in tree.processes:
        group = by_group.get(process.cpu_group or "")
        if group is not None:
            binding.setdefault(group.counted_group, group)
    return binding


@dataclass(frozen=True)
class _Change:
    """The increase of the binding groups' counters over the window, summed."""

    periods: int
    throttled: int
    throttled_us: int
    #: None where some group's usage is not kept with its quota.
    usage_us: int | None


def _counter_change(trees: list[ProcessTreeSample]) -> _Change | None:
    """Each binding group's counters from its first reading in the window to its
    last, summed over the groups; None where no group has its counters read."""
    first: dict[str, CpuCgroup] = {}
    last: dict[str, CpuCgroup] = {}
    for tree in trees:
        for key, group in job_groups(tree).items():
            first.setdefault(key, group)
            last[key] = group
    periods = throttled = throttled_us = usage = 0
    usage_known = True
    counted = False
    for key, end in last.items():
        start = first[key]
        if None in (start.nr_periods, end.nr_periods, start.nr_throttled, end.nr_throttled,
                    start.throttled_us, end.throttled_us):
            continue
        counted = True
        # A counter that went backwards is a new group at the same path: none.
        periods += max(0, (end.nr_periods or 0) - (start.nr_periods or 0))
        throttled += max(0, (end.nr_throttled or 0) - (start.nr_throttled or 0))
        throttled_us += max(0, (end.throttled_us or 0) - (start.throttled_us or 0))
        if start.usage_us is None or end.usage_us is None:
            usage_known = False
        else:
            usage += max(0, end.usage_us - start.usage_us)
    if not counted:
        return None
    return _Change(periods, throttled, throttled_us, usage if usage_known else None)


def _newest(session: Session, now: float, window_s: float) -> ProcessTreeSample | None:
    trees = [t for t in session.processes.window(now - window_s, now) if t.alive]
    return trees[-1] if trees else None


def _group_of_main(tree: ProcessTreeSample, binding: dict[str, CpuCgroup]) -> CpuCgroup | None:
    main = tree.main
    if main is None:
        return None
    return next((g for g in binding.values() if g.group == main.cpu_group), None)


def quota_words(session: Session, now: float, window_s: float) -> dict[str, str]:
    """``quota_group``: the cgroup(s) whose quota binds the job, as the kernel names them."""
    tree = _newest(session, now, window_s)
    groups = [] if tree is None else [
        key for key, g in job_groups(tree).items() if g.quota_cpus is not None]
    return {"quota_group": ", ".join(groups)} if groups else {}
