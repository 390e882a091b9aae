"""The catalogue's series metrics: how each is read from one sample, by name.

Every name of ``catalogue.SERIES`` has a value function here, keyed by that
name (a test holds the two sets equal); each is summarised over the window
with every aggregate (``gpu_util_mean``, ``gpu_util_p95``, ...).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from aitop.probes.samples import HostSample
from aitop.probes.session import Aggregate, Session, aggregate, sample_time, series_points

from ..base.catalogue import AGGREGATES, SERIES
from .gpu import device_temperature_margin, gpu_util, over_target_devices
from .processes import (
    PROC_CPU,
    PROC_READ,
    PROC_RSS,
    main_busy_threads,
    tree_sum,
    worker_blocked,
    worker_cpu_wait,
    worker_max_cpu,
)
from .storage import busiest_mount
from .units import Values, mb, pct


@dataclass(frozen=True)
class SeriesValue:
    """Which of the session's rings a series samples, and its value in one sample."""

    ring: Literal["gpu", "host", "processes", "storage"]
    value: Callable[[Any], float | None]


def _swap_pct(sample: HostSample) -> float | None:
    """No swap configured means nothing is swapped: 0 %, not unknown."""
    if sample.swap_total_bytes == 0:
        return 0.0
    return pct(sample.swap_used_bytes, sample.swap_total_bytes)


def _host_load(sample: HostSample) -> float | None:
    return None if sample.load1 is None else sample.load1 / max(sample.cpu_count, 1)


@functools.lru_cache(maxsize=8)
def series_values(helper_threads: tuple[str, ...]) -> dict[str, SeriesValue]:
    """Each series metric's ring and value function, by its catalogue name.

    ``helper_threads``: the knowledge base's prefixes of threads that are busy
    without being compute parallelism (``main_busy_threads`` leaves them out).
    """

    def gpu(fn: Callable[[Any], float | None]) -> SeriesValue:
        return SeriesValue("gpu", over_target_devices(fn))

    def host(fn: Callable[[HostSample], float | None]) -> SeriesValue:
        return SeriesValue("host", fn)

    def tree(fn: Callable[[Any], float | None]) -> SeriesValue:
        return SeriesValue("processes", fn)

    def disks(fn: Callable[[Any], float | None]) -> SeriesValue:
        return SeriesValue("storage", busiest_mount(fn))

    return {
        "gpu_util": SeriesValue("gpu", gpu_util),
        "gpu_mem_used": gpu(lambda d: pct(d.mem_used_bytes, d.mem_total_bytes)),
        "gpu_temp_margin": gpu(device_temperature_margin),
        "gpu_power": gpu(lambda d: pct(d.power_w, d.power_limit_w)),
        "gpu_sm_clock": gpu(lambda d: pct(d.sm_clock_mhz, d.sm_clock_max_mhz)),
        "gpu_pcie_rx": gpu(lambda d: mb(d.pcie_rx_bps)),
        "gpu_job_sm": gpu(lambda d: d.target_sm_percent),
        "gpu_other_sm": gpu(lambda d: d.others_sm_percent),
        "host_cpu": host(lambda s: s.cpu_percent),
        "host_iowait": host(lambda s: s.iowait_percent),
        "host_ram_used": host(lambda s: pct(s.ram_used_bytes, s.ram_total_bytes)),
        "host_swap_used": host(_swap_pct),
        "host_load_per_core": host(_host_load),
        "proc_cpu": tree(PROC_CPU),
        "main_cpu": tree(tree_sum(lambda p: p.cpu_percent, "main")),
        "main_kernel": tree(tree_sum(lambda p: p.kernel_percent, "main")),
        "main_busy_threads": tree(functools.partial(main_busy_threads, helpers=helper_threads)),
        "workers_cpu": tree(tree_sum(lambda p: p.cpu_percent, "worker")),
        "worker_cpu_max": tree(worker_max_cpu),
        "main_cpu_wait": tree(tree_sum(lambda p: p.cpu_wait_percent, "main")),
        "worker_cpu_wait": tree(worker_cpu_wait),
        "proc_cpu_wait": tree(tree_sum(lambda p: p.cpu_wait_percent)),
        "worker_blocked": tree(worker_blocked),
        "proc_rss": tree(PROC_RSS),
        "proc_read": tree(PROC_READ),
        "proc_write": tree(tree_sum(lambda p: mb(p.write_bps))),
        "disk_read": disks(lambda m: mb(m.read_bps)),
        "disk_write": disks(lambda m: mb(m.write_bps)),
        "disk_busy": disks(lambda m: m.busy_percent),
    }


def aggregate_values(prefix: str, agg: Aggregate | None) -> Values:
    """One series' window summary, a value per aggregate (all None without samples)."""
    if agg is None:
        return {f"{prefix}_{a}": None for a in AGGREGATES}
    return {
        f"{prefix}_mean": agg.mean,
        f"{prefix}_p5": agg.p5,
        f"{prefix}_p95": agg.p95,
        f"{prefix}_last": agg.last,
        f"{prefix}_min": agg.minimum,
        f"{prefix}_max": agg.maximum,
        f"{prefix}_stdev": agg.stdev,
        f"{prefix}_trend": agg.trend,
    }


def series_metrics(
    session: Session, now: float, window_s: float, helper_threads: tuple[str, ...]
) -> Values:
    """Every series metric over the window, in the catalogue's order."""
    table = series_values(helper_threads)
    values: Values = {}
    #: Each ring's window and its samples' times, taken once for every series read
    #: from it.
    windows: dict[str, tuple[list[Any], list[float]]] = {}
    for name, _unit, _description in SERIES:
        series = table[name]
        window = windows.get(series.ring)
        if window is None:
            found = getattr(session, series.ring).window(now - window_s, now)
            window = windows[series.ring] = (found, [sample_time(s) for s in found])
        samples, times = window
        values |= aggregate_values(name, aggregate(series_points(samples, series.value, times)))
    return values
