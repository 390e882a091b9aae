"""Whole-machine CPU, memory and load.

CPU percentages are computed from this probe's *own* previous
``psutil.cpu_times(percpu=True)`` reading, not with ``psutil.cpu_percent()`` /
``cpu_times_percent()``: those keep one module-global "last call" baseline, so
any other code in the process calling them (a panel, a plugin, a test) would
silently shorten our interval and make the numbers jump. One ``/proc/stat``
read per tick gives per-core busy %, overall busy % and iowait % with psutil's
own definitions (busy = total - idle - iowait; guest time is already inside
user/nice and is not counted twice).
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import Any

import psutil

from .kernel.cgroups import memory_limit
from .kernel.shm import read_shm_usage
from .neighbours import NeighbourScanner
from .samples import HostSample


def _total(ct: Any) -> float:
    """All CPU time of one cpu_times tuple, guest time not counted twice (as psutil)."""
    total = float(sum(ct))
    total -= getattr(ct, "guest", 0.0)
    total -= getattr(ct, "guest_nice", 0.0)
    return total


def _idle(ct: Any) -> float:
    return float(ct.idle + getattr(ct, "iowait", 0.0))


class HostProbe:
    """Samples CPU (per core and overall), iowait, RAM, swap and load averages.

    The CPU baseline is taken at construction, so the first :meth:`sample` already
    reports usage since then; a field whose interval is empty is ``None``.
    """

    def __init__(self, job_pid: int | None = None) -> None:
        self._prev: list[Any] | None = self._cpu_times()
        #: Who else uses the CPUs; ``job_pid``'s tree and its pipe partners are the job.
        self.neighbours = NeighbourScanner(job_pid)
        self._job_pid = job_pid

    @staticmethod
    def _cpu_times() -> list[Any] | None:
        try:
            return list(psutil.cpu_times(percpu=True))
        except (OSError, psutil.Error, AttributeError):
            return None

    def sample(self) -> HostSample:
        """One tick of host-wide figures; each unreadable field is ``None``."""
        t = time.time()
        cur = self._cpu_times()
        prev = self._prev
        per_core: tuple[float, ...] = ()
        cpu_pct: float | None = None
        iowait: float | None = None
        if cur is not None and prev is not None and len(cur) == len(prev):
            per_core, cpu_pct, iowait = _percentages(prev, cur)
        if cpu_pct is not None or cur is None or prev is None or len(cur) != len(prev):
            # Keep the old baseline when no tick elapsed (two calls within one
            # jiffy), so the next call measures a real interval.
            self._prev = cur
        try:
            cpu_count = psutil.cpu_count(logical=True) or len(cur or ()) or 0
        except (OSError, psutil.Error):
            cpu_count = len(cur or ())

        ram_used = ram_total = swap_used = swap_total = None
        try:
            vm = psutil.virtual_memory()
            ram_total = int(vm.total)
            # total - available ("what applications cannot have"), not psutil's
            # ``used``, which leaves out reclaimable cache inconsistently between
            # kernels; this is the figure that predicts OOM and swapping.
            ram_used = int(vm.total - vm.available)
        except (OSError, psutil.Error, AttributeError):
            pass
        try:
            sm = psutil.swap_memory()
            swap_used, swap_total = int(sm.used), int(sm.total)
        except (OSError, psutil.Error, AttributeError, RuntimeError):
            pass
        load: tuple[float | None, float | None, float | None] = (None, None, None)
        with contextlib.suppress(OSError, AttributeError):
            load = os.getloadavg()
        return HostSample(
            t=t,
            cpu_count=int(cpu_count),
            cpu_percent=cpu_pct,
            per_core_percent=per_core,
            iowait_percent=iowait,
            ram_used_bytes=ram_used,
            ram_total_bytes=ram_total,
            swap_used_bytes=swap_used,
            swap_total_bytes=swap_total,
            load1=load[0],
            load5=load[1],
            load15=load[2],
            others=self.neighbours.others(),
            memory_limit=None if self._job_pid is None else memory_limit(self._job_pid),
            # One statvfs: the job's /dev/shm, in its own mount namespace.
            shm=None if self._job_pid is None else read_shm_usage(self._job_pid),
        )


def _pct(part: float, whole: float) -> float:
    return max(0.0, min(100.0, part / whole * 100.0))


def _percentages(
    prev: list[Any], cur: list[Any]
) -> tuple[tuple[float, ...], float | None, float | None]:
    """Per-core busy %, overall busy % and overall iowait % between two readings.

    A core whose counters did not move (or went backwards after CPU hotplug) gets
    0.0 so that the tuple stays aligned with core numbers.
    """
    per_core: list[float] = []
    sum_total = sum_busy = sum_iowait = 0.0
    for before, after in zip(prev, cur, strict=True):
        d_total = _total(after) - _total(before)
        d_idle = _idle(after) - _idle(before)
        if d_total <= 0:
            per_core.append(0.0)
            continue
        per_core.append(_pct(d_total - d_idle, d_total))
        sum_total += d_total
        sum_busy += d_total - d_idle
        sum_iowait += getattr(after, "iowait", 0.0) - getattr(before, "iowait", 0.0)
    if sum_total <= 0:
        return (), None, None
    return tuple(per_core), _pct(sum_busy, sum_total), _pct(sum_iowait, sum_total)
