"""Private memory of the job's processes (USS, PSS), copy-on-read, and ``/dev/shm``.

A forked DataLoader worker starts out sharing its parent's pages; its RSS counts
them all from the first moment. Python writes an object's reference count
whenever it touches the object, so a worker reading a dataset kept as Python
objects (lists of dicts, strings) writes into the shared pages, and the kernel
gives it a private copy of each page it writes (copy-on-write, here on read):
its private memory (USS) grows towards its RSS while its RSS holds. Memory the
worker allocates, a cache of its own, grows its RSS as much as its USS. The
share of the workers' USS growth that their RSS does not show is therefore the
share that is copies (``workers_copied_share``). As the workers take copies, the
pages the parent shared with them become its alone: its USS grows too, though
it holds no new page; its RSS holds.

Each worker's growth is read on its own series (a worker that restarts is a
new series) with the steady-rise test of ``growth.memory_growth``: a worker's
copying does not come in cycles, it slows as fewer pages are left to copy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aitop.probes.samples import ProcessInfo
from aitop.probes.session import Session

from .growth import GROWTH_LOOKBACK_S, memory_growth, slope_per_minute
from .units import Values, mb, pct

#: Private memory is read every 2 to 6 s (``probes/private_memory.py``: a big
#: process less often), so a worker's growth is read from 4 readings spanning
#: 10 s, where RSS read each second needs 5: a copy's smooth climb stands 8
#: standard errors out of its wobble well within them.
PRIVATE_MIN_POINTS = 4


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    """One process of the job: its memory now and how fast it grows (MB, MB/min)."""

    pid: int
    role: str
    uss_mb: float | None
    pss_mb: float | None
    rss_mb: float | None
    #: RSS at the newest private reading (USS and RSS of one moment).
    rss_at_uss_mb: float | None
    #: USS growth, read where it stands out of its wobble (``memory_growth``).
    uss_growth: float | None
    #: RSS growth where it stands out (the training process's own growth), and
    #: its plain slope over the span USS was read over (to compare the two).
    rss_growth: float | None
    rss_slope: float | None


def process_memory(session: Session, now: float) -> tuple[ProcessMemory, ...]:
    """Each process alive at ``now``, over the last minute of its own readings.

    A minute of every process's readings: one evaluation reads it once and hands
    it to the metrics and the words (``compute_metrics``' and ``compute_words``'
    ``memory``).
    """
    trees = [t for t in session.processes.window(now - GROWTH_LOOKBACK_S, now) if t.alive]
    if not trees:
        return ()
    readings: dict[int, _Readings] = {p.pid: _Readings() for p in trees[-1].processes}
    for tree in trees:
        for p in tree.processes:
            seen = readings.get(p.pid)
            if seen is not None:
                seen.add(tree.t, p)
    return tuple(readings[p.pid].memory(p.pid, p.role) for p in trees[-1].processes)


class _Readings:
    """One process's readings over the lookback, oldest first."""

    def __init__(self) -> None:
        self.uss: list[tuple[float, float]] = []
        self.rss: list[tuple[float, float]] = []
        self.pss: float | None = None
        self.rss_at_uss: float | None = None

    def add(self, t: float, p: ProcessInfo) -> None:
        if p.rss_bytes is not None:
            self.rss.append((t, p.rss_bytes / 1e6))
        if p.uss_bytes is not None:
            self.uss.append((t, p.uss_bytes / 1e6))
            self.rss_at_uss = mb(p.rss_bytes)
            self.pss = mb(p.pss_bytes)

    def memory(self, pid: int, role: str) -> ProcessMemory:
        uss, rss = self.uss, self.rss
        # RSS over the span USS was read over: the same stretch of the process's life.
        rss_span = [pt for pt in rss if pt[0] >= uss[0][0]] if uss else rss
        return ProcessMemory(
            pid=pid, role=role,
            uss_mb=uss[-1][1] if uss else None, pss_mb=self.pss,
            rss_mb=rss[-1][1] if rss else None, rss_at_uss_mb=self.rss_at_uss,
            uss_growth=memory_growth(uss, PRIVATE_MIN_POINTS), rss_growth=memory_growth(rss),
            rss_slope=slope_per_minute(rss_span))


def _total(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def private_memory_metrics(procs: Sequence[ProcessMemory], mem_free_mb: float | None) -> Values:
    """The workers' private-memory growth and what it comes from, the job's PSS,
    and how long the memory lasts while the workers copy (``procs``:
    ``process_memory``'s reading)."""
    workers = [p for p in procs if p.role == "worker"]
    read = [w for w in workers if w.uss_growth is not None]
    main = next((p for p in procs if p.role == "main"), None)
    uss_growth = _total([w.uss_growth for w in read])
    rss_growth = _total([max(0.0, w.rss_slope) for w in read if w.rss_slope is not None])
    copied = (None if uss_growth is None or rss_growth is None or uss_growth <= 0
              else max(0.0, min(1.0, 1.0 - rss_growth / uss_growth)))
    shared = _total([w.rss_at_uss_mb - w.uss_mb for w in workers
                     if w.rss_at_uss_mb is not None and w.uss_mb is not None])
    return {
        "workers_uss_growth": uss_growth,
        "workers_copied_share": copied,
        "workers_uss_mb": _total([w.uss_mb for w in workers]),
        "workers_shared_mb": None if shared is None else max(0.0, shared),
        "main_rss_growth": main.rss_growth if main is not None else None,
        "proc_pss_mb": _total([p.pss_mb for p in procs]),
        "cow_minutes_left": (mem_free_mb / uss_growth
                             if mem_free_mb is not None and uss_growth and uss_growth > 0
                             and shared is not None and shared >= mem_free_mb else None),
    }


def worker_memory_words(procs: Sequence[ProcessMemory]) -> str:
    """Each worker's private memory and its growth, and the training process's
    memory, in words: "PID 12 410 MB (+300 MB/min), PID 13 ...; training process
    PID 11 RSS 954 MB (+0 MB/min)" (``procs``: ``process_memory``'s reading)."""
    parts = [f"PID {w.pid} {w.uss_mb:.0f} MB (+{max(0.0, w.uss_growth):.0f} MB/min)"
             for w in procs if w.role == "worker" and w.uss_mb is not None
             and w.uss_growth is not None]
    main = next((p for p in procs if p.role == "main"), None)
    if main is not None and main.rss_mb is not None:
        growth = "" if main.rss_growth is None else f" ({main.rss_growth:+.0f} MB/min)"
        parts.append(f"training process PID {main.pid} RSS {main.rss_mb:.0f} MB{growth}")
    return ", ".join(parts)


def shm_metrics(session: Session, now: float, window_s: float) -> Values:
    """The job's ``/dev/shm``: its size, how full, what is left, and what the job maps."""
    hosts = session.host.window(now - window_s, now)
    shm = hosts[-1].shm if hosts else None
    trees = session.processes.window(now - window_s, now)
    mapped = next((t.shm_mapped_bytes for t in reversed(trees)
                   if t.shm_mapped_bytes is not None), None)
    return {
        "shm_size_mb": mb(shm.size_bytes) if shm is not None else None,
        "shm_used": pct(shm.used_bytes, shm.size_bytes) if shm is not None else None,
        "shm_free_mb": mb(shm.free_bytes) if shm is not None else None,
        "job_shm_mb": mb(mapped),
    }
