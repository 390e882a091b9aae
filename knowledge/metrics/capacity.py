"""How much more batch production the job's free CPU could buy.

Kept apart from gains.py so the metric catalogue can offer the suggested worker
count to rules' texts ("raise num_workers to {suggested_workers:.0f}") and the
gain estimate can use the same arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

Metrics = Mapping[str, "float | None"]


def free_for_workers(metrics: Metrics) -> float | None:
    """Cores more loading would get (``free_cores_for_loading``), else the mean free cores."""
    free = metrics.get("free_cores_for_loading")
    return metrics.get("free_cores") if free is None else free


def suggested_workers(metrics: Metrics) -> float | None:
    """Workers to run next: N + free cores / (cores per worker), at most twice N.

    The documents: raise num_workers "step by step" while it helps. A step of
    at most doubling keeps the prediction a prediction (a range no wider than
    x1.5); the next diagnosis suggests the next step if cores are still free.
    """
    n = metrics.get("num_workers")
    free = free_for_workers(metrics)
    if n is None or free is None:
        return None
    if n <= 0:
        # The training thread's loading share frees its core for workers too: a
        # job loading 96 % of the time on a 2-core box with 0.9 core free gets 2
        # (1 worker gave x1.05 there, 2 gave x1.76).
        p = metrics.get("phase_data_wait") or 0.0
        return float(min(2, max(1, round(free + p))))
    per_worker = (metrics.get("workers_cpu_mean") or 0.0) / 100.0 / n
    extra = math.floor(free / per_worker) if per_worker > 0.05 else 1
    return float(n + min(max(1, extra), int(n)))


def cpu_budget_factor(metrics: Metrics) -> tuple[float, str] | None:
    """How many times more steps per second the job's CPU allows, if each step keeps
    needing the CPU it needs now, and why: its processes use U cores and F more are
    free, so at most (U + F) / U. Not a bound where the job's CPU holds waste a
    busier step would not (torch's threads spinning while they wait), so gains use
    it for their low end only."""
    used = (metrics.get("proc_cpu_mean") or 0.0) / 100.0
    free = metrics.get("free_cores")
    if free is None or used <= 0.05:
        return None
    return (used + free) / used, f"the job's processes use {used:.1f} core(s)"


def loading_capacity_factor(metrics: Metrics) -> tuple[float, str] | None:
    """How many times more batches per second the loading side could produce."""
    n = metrics.get("num_workers")
    free = free_for_workers(metrics)
    if n is None or free is None:
        return None
    if n <= 0:
        raw = metrics.get("phase_data_wait")
        p = None if raw is None else min(max(raw, 0.0), 0.99)
        if p is None or p <= 0:
            return None
        # Loading moves off the training thread: it gets the free cores plus the
        # share of the training thread's core that loading used to take, but no
        # more than one core per worker (each runs one torch thread).
        workers = suggested_workers(metrics) or 1.0
        cores = min(workers, free + p)
        return (cores / p, f"loading moves to {workers:.0f} worker(s) on {free:.1f} free "
                f"core(s) plus the {p:.0%} of the training thread it took now")
    workers_cores = (metrics.get("workers_cpu_mean") or 0.0) / 100.0
    target = suggested_workers(metrics) or n
    by_count = target / n
    # Workers asleep more than they compute (on their own input) need little
    # CPU to be doubled, free cores or not: their number is what bounds them.
    asleep = metrics.get("worker_blocked_mean")
    waits = asleep is not None and asleep >= workers_cores * 100.0 / n
    if waits or workers_cores <= 0.05:
        return (by_count, f"the {n:.0f} worker(s) wait on their input more than they "
                f"compute ({workers_cores:.1f} core(s) together), so {target:.0f} workers "
                f"keep {by_count:.2f}x the waits in flight")
    factor = min((workers_cores + free) / workers_cores, by_count)
    return (factor, f"the {n:.0f} worker(s) use {workers_cores:.1f} core(s); {free:.1f} "
            f"more are free, so {target:.0f} workers can produce at most "
            f"{factor:.2f}x the batches")
