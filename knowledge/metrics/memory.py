"""Memory: how fast the job's memory grows, what is left, and how long that lasts."""

from __future__ import annotations

from aitop.probes.samples import HostSample, ProcessTreeSample
from aitop.probes.session import Session, series_points

from .growth import FLOOR_LOOKBACK_S, FloorGrowth, floor_growth
from .processes import PROC_RSS
from .units import Values, mb

#: A DataLoader worker younger than this may be one the loader re-creates every
#: epoch: while the job has one, a rise that has not fallen back is not read as
#: a leak before its cycles are seen (``growth.floor_growth``'s ``hold``).
YOUNG_WORKER_S = 60.0


def worker_changes(trees: list[ProcessTreeSample]) -> list[float]:
    """When the DataLoader's workers changed (one exited or a new one came): the
    loader re-created them, a cycle of the job's memory ends."""
    changes: list[float] = []
    before: frozenset[int] | None = None
    for tree in trees:
        if not tree.alive:
            continue
        workers = frozenset(p.pid for p in tree.workers)
        if before is not None and workers != before:
            changes.append(tree.t)
        before = workers
    return changes


def has_young_workers(tree: ProcessTreeSample | None, now: float) -> bool:
    """Whether a DataLoader worker of ``tree`` started less than ``YOUNG_WORKER_S`` ago."""
    if tree is None:
        return False
    return any(p.started is not None and now - p.started < YOUNG_WORKER_S
               for p in tree.workers)


def live_workers(tree: ProcessTreeSample) -> int:
    """The DataLoader workers of ``tree`` that hold memory (one exiting reads 0)."""
    return sum(1 for p in tree.workers if p.rss_bytes)


def with_usual_workers(trees: list[ProcessTreeSample]) -> list[ProcessTreeSample]:
    """The readings taken with the loader's usual number of workers running (the
    most common count, the larger on a tie): a reading between two epochs, some
    workers gone and the next not started, is the memory of fewer processes, a
    dip that no floor of the job's memory is made of."""
    counts = [live_workers(tree) for tree in trees]
    if not counts:
        return []
    usual = max(set(counts), key=lambda n: (counts.count(n), n))
    return [tree for tree, n in zip(trees, counts, strict=True) if n == usual]


def host_memory_growth(session: Session, now: float) -> FloorGrowth:
    """The job's resident memory (its processes' RSS summed) judged on its floor,
    read with its usual workers running (``with_usual_workers``)."""
    trees = [tree for tree in session.processes.window(now - FLOOR_LOOKBACK_S, now)
             if tree.alive]
    points = series_points(with_usual_workers(trees), PROC_RSS)
    return floor_growth(points, worker_changes(trees),
                        hold=has_young_workers(trees[-1] if trees else None, now))

def memory_metrics(session: Session, now: float, window_s: float) -> Values:
    """How fast the job's memory grows (its floor's rise), the memory still free at
    the window's end (RAM, or the job's cgroup limit when tighter), and how long
    that lasts: until the next tooth's top reaches the limit, at the floor's rate."""
    growth = host_memory_growth(session, now)
    values: Values = {"proc_rss_growth": growth.rate, "proc_rss_cycles": float(growth.cycles)}
    hosts = session.host.window(now - window_s, now)
    host = hosts[-1] if hosts else None
    if host is None or host.ram_total_bytes is None or host.ram_used_bytes is None:
        return values | {"host_ram_free_mb": None, "ram_minutes_left": None,
                         "cgroup_mem_free_mb": None, "mem_free_mb": None}
    free = max(0.0, mb(host.ram_total_bytes - host.ram_used_bytes) or 0.0)
    limit = host.memory_limit
    cgroup_free = (None if limit is None
                   else max(0.0, mb(limit.limit_bytes - limit.used_bytes) or 0.0))
    headroom = free if not cgroup_is_tighter(host) or cgroup_free is None else cgroup_free
    last = session.processes.at_or_before(now)
    current = PROC_RSS(last) if last is not None else None
    # The tooth's top comes back every cycle: the room left is the room at it.
    above = (growth.peak - current) if growth.peak is not None and current is not None else 0.0
    rate = growth.rate
    return values | {
        "host_ram_free_mb": free,
        "cgroup_mem_free_mb": cgroup_free,
        "mem_free_mb": headroom,
        "ram_minutes_left": (max(0.0, headroom - max(0.0, above)) / rate
                             if rate is not None and rate > 0 else None),
    }


def cgroup_is_tighter(host: HostSample) -> bool:
    """Whether the job's cgroup limit leaves less than the free RAM."""
    limit = host.memory_limit
    if limit is None or host.ram_total_bytes is None or host.ram_used_bytes is None:
        return False
    return limit.limit_bytes - limit.used_bytes < host.ram_total_bytes - host.ram_used_bytes


def memory_limit_words(host: HostSample) -> str:
    """What the job runs out of first: RAM, or its cgroup's limit when that is tighter."""
    limit = host.memory_limit
    if limit is None or not cgroup_is_tighter(host):
        return "RAM"
    # The group's own name: a pod's full path runs to ~190 characters.
    name = limit.cgroup.rstrip("/").rsplit("/", 1)[-1] or "/"
    return f"its cgroup's {limit.limit_bytes / 1e6:.0f} MB limit ({name})"
