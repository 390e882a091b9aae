"""Memory: how fast the job's memory grows, what is left, and how long that lasts."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from aitop.probes.samples import HostSample
from aitop.probes.session import Session

from .units import Values, mb

#: Memory growth is fitted over the last minute (at least the rule window), and
#: read once it spans 15 s, with a slope at least 4 standard errors from flat;
#: from 10 s on, a slope twice as clear (8 standard errors) is read already: an
#: unseen job leaking 5 GB/min was still unconfirmed at the end of a 20-s report.
GROWTH_LOOKBACK_S = 60.0
GROWTH_MIN_SPAN_S = 15.0
GROWTH_MIN_T = 4.0
GROWTH_EARLY_SPAN_S = 10.0
GROWTH_EARLY_T = 8.0


def memory_growth(points: Sequence[tuple[float, float]]) -> float | None:
    """MB per minute the memory grows: the least-squares slope where it stands out
    of the memory's own swings, 0 where it does not, None before 10 s of points.

    A slope alone reads a job whose memory swings (the allocator returning and
    taking back tens of MB every few seconds; pytorch/examples'
    word_language_model swings 369-479 MB with no trend) as growing at
    100+ MB/min over any 20 s that happens to end on a high: its t statistic
    there stays under 3.1, a steady leak's climbs with the span.
    """
    span = points[-1][0] - points[0][0] if points else 0.0
    if len(points) < 5 or span < GROWTH_EARLY_SPAN_S:
        return None
    needed = GROWTH_MIN_T if span >= GROWTH_MIN_SPAN_S else GROWTH_EARLY_T
    ts = [t for t, _ in points]
    vs = [v for _, v in points]
    t_mean, v_mean = statistics.fmean(ts), statistics.fmean(vs)
    sxx = sum((t - t_mean) ** 2 for t in ts)
    slope = sum((t - t_mean) * (v - v_mean) for t, v in points) / sxx
    residual = sum((v - v_mean - slope * (t - t_mean)) ** 2 for t, v in points)
    error = math.sqrt(residual / (len(points) - 2) / sxx)
    significant = slope > 0 and (error == 0 or slope / error >= needed)
    if span < GROWTH_MIN_SPAN_S and not significant:
        return None  # not yet clear either way
    return slope * 60.0 if significant else 0.0


def memory_metrics(
    session: Session, now: float, window_s: float, proc_rss_growth: float | None
) -> Values:
    """Memory still free at the window's end (RAM, or the job's cgroup limit when
    tighter), and how long it lasts at the target's growth ``proc_rss_growth``."""
    hosts = session.host.window(now - window_s, now)
    host = hosts[-1] if hosts else None
    if host is None or host.ram_total_bytes is None or host.ram_used_bytes is None:
        return {"host_ram_free_mb": None, "ram_minutes_left": None,
                "cgroup_mem_free_mb": None, "mem_free_mb": None}
    free = max(0.0, mb(host.ram_total_bytes - host.ram_used_bytes) or 0.0)
    limit = host.memory_limit
    cgroup_free = (None if limit is None
                   else max(0.0, mb(limit.limit_bytes - limit.used_bytes) or 0.0))
    headroom = free if not cgroup_is_tighter(host) or cgroup_free is None else cgroup_free
    return {
        "host_ram_free_mb": free,
        "cgroup_mem_free_mb": cgroup_free,
        "mem_free_mb": headroom,
        "ram_minutes_left": (headroom / proc_rss_growth
                             if proc_rss_growth is not None and proc_rss_growth > 0 else None),
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
