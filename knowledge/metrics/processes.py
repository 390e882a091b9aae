"""The job's processes: per-sample tree readings, workers, ranks and the cores allowed."""

from __future__ import annotations

from collections.abc import Callable

from aitop.probes.samples import ProcessInfo, ProcessTreeSample
from aitop.probes.session import Session

from .units import Metrics, Values, flag, mb

#: A thread this busy (% of a core) counts as doing work; idle pool threads sit near 0.
BUSY_THREAD_PERCENT = 10.0


def tree_sum(
    fn: Callable[[ProcessInfo], float | None], role: str | None = None
) -> Callable[[ProcessTreeSample], float | None]:
    """A process reading summed over the tree (or its processes of one ``role``)."""

    def value(sample: ProcessTreeSample) -> float | None:
        if not sample.alive:
            return None
        vals = [fn(p) for p in sample.processes if role is None or p.role == role]
        known = [v for v in vals if v is not None]
        return sum(known) if known else None

    return value


#: The job's CPU (% of a core), storage reads (MB/s) and resident memory (MB),
#: its processes summed.
PROC_CPU = tree_sum(lambda p: p.cpu_percent)
PROC_READ = tree_sum(lambda p: mb(p.read_bps))
PROC_RSS = tree_sum(lambda p: mb(p.rss_bytes))


def worker_blocked(sample: ProcessTreeSample) -> float | None:
    """% of the time the average worker neither ran nor waited for a CPU: asleep.

    A worker of a starving loop that is asleep waits on something other than the
    CPU: its reads (storage), or a lock. Unknown without scheduler statistics.
    """
    vals = [
        max(0.0, 100.0 - p.cpu_percent - p.cpu_wait_percent)
        for p in sample.workers
        if p.cpu_percent is not None and p.cpu_wait_percent is not None
    ]
    return sum(vals) / len(vals) if vals else None


def worker_cpu_wait(sample: ProcessTreeSample) -> float | None:
    vals = [p.cpu_wait_percent for p in sample.workers if p.cpu_wait_percent is not None]
    return sum(vals) / len(vals) if vals else None


def worker_max_cpu(sample: ProcessTreeSample) -> float | None:
    vals = [p.cpu_percent for p in sample.workers if p.cpu_percent is not None]
    return max(vals) if vals else None


def main_busy_threads(
    sample: ProcessTreeSample, helpers: tuple[str, ...] = ()
) -> float | None:
    """How many of the main process's threads are busy computing (parallelism in use).

    ``helpers``: name prefixes of threads busy without being compute parallelism
    (phases.yaml ``helper_threads``: communication, pin memory).
    """
    main = sample.main
    if main is None or not main.threads or not sample.alive:
        return None
    known = [t.cpu_percent for t in main.threads
             if t.cpu_percent is not None and not t.name.startswith(helpers)]
    if not known:
        return None
    return float(sum(1 for c in known if c >= BUSY_THREAD_PERCENT))


def process_metrics(
    session: Session, now: float, window_s: float, main_busy_threads_mean: float | None,
    limits: Metrics | None = None,
) -> Values:
    """Workers, pin-memory thread, liveness, ranks, the cores allowed and how much
    wider CPU compute could go (``main_busy_threads_mean``: the series' window mean;
    ``limits``: the quota and cpuset of the job's cgroups, ``quota.limit_metrics``)."""
    # The newest sample *inside* the window, so a replay cursor or a late
    # evaluation sees the state at `now`, not whatever came last.
    trees = session.processes.window(now - window_s, now)
    tree = trees[-1] if trees else None
    job = session.job
    local = float(len(job.ranks)) if job is not None and job.ranks else 1.0
    values: Values = {
        "local_ranks": local,
        # The job's WORLD_SIZE: ranks on other machines are the job's too, watched or not.
        "job_ranks": max(local, float(job.world_size)) if job is not None else local,
    }
    if tree is not None:
        values |= {"num_workers": float(len(tree.workers)),
                   "pin_memory": flag(tree.pin_memory_thread),
                   "target_alive": float(tree.alive)}
    else:
        values |= {"num_workers": None, "pin_memory": None,
                   "target_alive": None if session.target_exited_at is None else 0.0}
    values["watched_s"] = (
        None if session.started_at is None else max(0.0, now - session.started_at))
    hosts = session.host.window(now - window_s, now)
    env = session.environment
    if env is not None and env.cpus_allowed:
        cores: float | None = float(env.cpus_allowed)
    else:
        cores = float(hosts[-1].cpu_count) if hosts else None
    # What the job may use is the least of its affinity, its cpuset and the quota
    # of every one of its processes' groups (the environment reads the main
    # process's alone, and less often).
    bounds = [(limits or {}).get(name) for name in ("cpu_quota", "cpuset_cpus")]
    known_bounds = [b for b in bounds if b is not None]
    if cores is not None and known_bounds:
        cores = min(cores, *known_bounds)
    values["cpu_count"] = cores
    # Counted in threads, not CPU %, so that other processes loading the host do
    # not make a single-threaded job look parallel (or a parallel one look narrow).
    busy = main_busy_threads_mean
    values["cpu_headroom"] = (
        max(1.0, cores / max(busy, 1.0)) if busy is not None and cores else None
    )
    return values
