"""Each process's private memory (``smaps_rollup``), read as often as its cost allows.

RSS, which the process tree reads every tick, counts shared pages in full: a
forked DataLoader worker's RSS holds its parent's pages from the start, and a
worker copying the dataset page by page (reference counts written into shared
copy-on-write pages) keeps the same RSS while its private memory (USS) grows.
Only ``smaps_rollup`` tells them apart, and it is not free: the kernel walks the
process's page tables to sum it, so one read costs CPU in proportion to the
resident memory (``docs/benchmarks.md``, What one smaps_rollup read costs), and
holds the process's memory-map lock for that long.

So each process is read again only after ``cost x processes / cpu_share``
seconds (its last read's own CPU time, measured), never sooner than
``min_interval_s``: the reads of the whole tree then take at most ``cpu_share``
of one core however large the job, and a small job is read every
``min_interval_s``. Only the DataLoader workers need that pace (their copying
is read from their USS); any other process is read no sooner than
``others_interval_s``: the training process's own growth shows in its RSS, and
the largest process's reads are the dearest. All come from
``probes.cadence.TABLE``. The same round reads
each process's ``maps`` for its ``/dev/shm`` segments (a plain text file, cheap).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from .kernel.procfs import PROC
from .kernel.shm import read_shm_mappings
from .kernel.smaps import SmapsRollup, read_smaps_rollup


@dataclass(frozen=True, slots=True)
class PrivateReading:
    """What one round read: each process's rollup, and the job's ``/dev/shm`` bytes."""

    rollups: dict[int, SmapsRollup]
    #: Bytes the job's processes map from ``/dev/shm``, each segment once (the
    #: newest maps of every process read so far); None when no maps were read.
    shm_mapped_bytes: int | None


class PrivateMemoryReader:
    """Reads the due processes' ``smaps_rollup`` on each call (see the module's rule)."""

    def __init__(
        self,
        min_interval_s: float,
        cpu_share: float,
        *,
        others_interval_s: float | None = None,
        proc_root: str = PROC,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        self.min_interval_s = min_interval_s
        self.cpu_share = cpu_share
        self.others_interval_s = min_interval_s if others_interval_s is None else others_interval_s
        self._proc_root = proc_root
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._due: dict[int, float] = {}
        self._shm: dict[int, dict[tuple[str, int], int]] = {}
        #: CPU seconds the reads have cost so far (aitop's own overhead).
        self.cpu_spent_s = 0.0

    def spacing(self, cost_s: float, processes: int) -> float:
        """Seconds before a process whose read cost ``cost_s`` is read again."""
        if self.cpu_share <= 0:
            return float("inf")
        return max(self.min_interval_s, cost_s * max(processes, 1) / self.cpu_share)

    def read(self, pids: Sequence[int],
             workers: Collection[int] | None = None) -> PrivateReading:
        """The rollups of the processes among ``pids`` that are due now.

        ``workers``: the DataLoader workers among them, read at their own pace;
        the others no sooner than ``others_interval_s`` (None: all are workers'
        pace, as when the roles are not known)."""
        now = self._clock()
        rollups: dict[int, SmapsRollup] = {}
        shm_read = False
        # A tick lands a few ms either side of a due time: a tenth of the interval
        # of slack keeps a process due every interval, not every other tick.
        slack = 0.1 * self.min_interval_s
        for pid in pids:
            if self._due.get(pid, now) > now + slack:
                continue
            started = self._cpu_clock()
            rollup = read_smaps_rollup(pid, self._proc_root)
            cost = self._cpu_clock() - started
            self.cpu_spent_s += cost
            spacing = self.spacing(cost, len(pids))
            if workers is not None and pid not in workers:
                spacing = max(spacing, self.others_interval_s)
            self._due[pid] = now + spacing
            if rollup is not None:
                rollups[pid] = rollup
            segments = read_shm_mappings(pid, self._proc_root)
            if segments is not None:
                self._shm[pid] = segments
                shm_read = True
        live = set(pids)
        for gone in [p for p in self._due if p not in live]:
            self._due.pop(gone, None)
            self._shm.pop(gone, None)
        mapped: dict[tuple[str, int], int] = {}
        for segments in self._shm.values():
            for key, size in segments.items():
                mapped[key] = max(mapped.get(key, 0), size)
        return PrivateReading(rollups, sum(mapped.values()) if shm_read else None)
