"""Who else uses the machine's CPUs: the processes outside the watched job.

"Every core is busy" means different things when the job keeps them busy and
when a build beside it does: more workers cannot help in the first case and
help as soon as the neighbour is gone in the second. A scan reads every
process's CPU time (``/proc/PID/stat``, through psutil) and keeps the busiest
ones that belong neither to the job nor to aitop.

The job is its process tree (the launcher, its ranks, their DataLoader
workers: torchrun puts each rank in a session of its own) and the processes at
the other end of its pipes: ``tee`` in ``python train.py | tee log`` reads what
the job writes, part of the run, not a neighbour. Its process group is no
sign: a batch script (Slurm's, a cron job's, ``nohup sh run.sh``) runs without
job control, and every command it starts, the job and whatever runs beside it,
shares one group. So is a process of the same torchrun run (its
``TORCHELASTIC_RUN_ID``) the job's: a rank of another "node" of the job that
happens to run on this machine waits and works with this one. aitop's own
process tree (its py-spy children) is left out too.
Scans are spaced (``SCAN_EVERY_S``): one walks every process on the machine,
reading each one's ``/proc/PID/stat`` once (its CPU time, its parent and its start,
which tells a reused PID from the process it replaced); the job's and aitop's
trees come from the same reading, not from another walk per tree.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import psutil

from .kernel.procfs import list_pids, read_environ, read_stat
from .pipes import READ, WRITE, pipe_ends
from .redact import command_line
from .samples import OtherProcess

#: Seconds between scans (each reads every process's stat file).
SCAN_EVERY_S = 5.0
#: The first scan compares with the baseline taken this soon after it.
FIRST_SCAN_S = 1.0
#: The most of a core scans may take: on a node with thousands of processes a
#: scan costs tens of ms (about 45 us a process here), and the gap grows to match.
MAX_CPU_SHARE = 0.001
#: The busiest neighbours kept per scan.
KEPT = 3
#: A neighbour below this many cores is not reported.
MIN_CORES = 0.05
#: The kernel's thread parent on Linux: its children are kernel threads.
KTHREADD = 2
#: Longest command kept for a neighbour.
MAX_COMMAND_CHARS = 80
#: Clock ticks per second, the unit of ``/proc/PID/stat``'s CPU times.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def pipe_partner(job_ends: set[tuple[str, int]], pid: int) -> bool:
    """Whether ``pid`` reads a pipe the job writes, or writes one the job reads.

    Writing to the same pipe is no partnership: two commands of one script
    whose output a harness collects both write to it.
    """
    if not job_ends:
        return False
    opposite = {(pipe, WRITE if mode == READ else READ)
                for pipe, mode in job_ends if mode in (READ, WRITE)}
    return bool(opposite & pipe_ends(pid))


def _run_id(pid: int) -> str | None:
    """A process's ``TORCHELASTIC_RUN_ID`` (None: none, or not readable)."""
    return (read_environ(pid) or {}).get("TORCHELASTIC_RUN_ID")


@dataclass(frozen=True, slots=True)
class _Reading:
    """One process in a scan: its CPU seconds so far, its parent and its start."""

    cpu_s: float
    ppid: int | None
    start: int | None


def scan_processes() -> dict[int, _Reading]:
    """Every process's CPU time, parent and start, one ``stat`` read each."""
    out: dict[int, _Reading] = {}
    for pid in list_pids():
        stat = read_stat(pid)
        if stat is None:
            continue  # exited since the listing
        utime, stime = stat.number(11), stat.number(12)
        if utime is None or stime is None:
            continue
        out[pid] = _Reading((utime + stime) / CLOCK_TICKS, stat.ppid, stat.start_ticks)
    return out


def tree(roots: set[int], readings: dict[int, _Reading]) -> set[int]:
    """``roots`` and all their descendants among ``readings``."""
    children: dict[int, list[int]] = {}
    for pid, reading in readings.items():
        if reading.ppid is not None:
            children.setdefault(reading.ppid, []).append(pid)
    out = set(roots)
    stack = list(roots)
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in out:
                out.add(child)
                stack.append(child)
    return out


def _kernel_thread(pid: int, reading: _Reading) -> bool:
    """kthreadd and its children (kworker flushing a checkpoint, kswapd): no user work."""
    return pid == KTHREADD or reading.ppid == KTHREADD


def _command(proc: psutil.Process) -> str:
    with contextlib.suppress(psutil.Error):
        argv = proc.cmdline()
        if argv:
            return command_line(argv, MAX_COMMAND_CHARS)
    with contextlib.suppress(psutil.Error):
        return proc.name()[:MAX_COMMAND_CHARS]
    return "?"


class NeighbourScanner:
    """The busiest processes outside the job, from CPU-time deltas between scans."""

    def __init__(self, job_pid: int | None, every_s: float = SCAN_EVERY_S,
                 own_pid: int | None = None, kept: int = KEPT) -> None:
        """``own_pid``: the process whose tree is aitop (this process by default);
        ``kept``: how many of the busiest neighbours a scan keeps."""
        self.job_pid = job_pid
        self.kept = kept
        self.every_s = every_s
        self.own_pid = os.getpid() if own_pid is None else own_pid
        self._cpu = scan_processes()
        self._at = time.monotonic()
        self._last: tuple[OtherProcess, ...] | None = None
        self._run_id: str | None = None
        #: Seconds a scan's own cost asks between scans (MAX_CPU_SHARE).
        self._gap = 0.0

    def others(self, now: float | None = None) -> tuple[OtherProcess, ...] | None:
        """The latest scan's neighbours (None: no scan yet); scans again once
        ``every_s`` has passed (the first one after ``FIRST_SCAN_S``)."""
        now = time.monotonic() if now is None else now
        due = FIRST_SCAN_S if self._last is None else max(self.every_s, self._gap)
        if now - self._at < due:
            return self._last
        started = time.process_time()
        cpu = scan_processes()
        self._last = self._busiest(cpu, now - self._at)
        self._gap = (time.process_time() - started) / MAX_CPU_SHARE
        self._cpu, self._at = cpu, now
        return self._last

    def _own(self, readings: dict[int, _Reading]) -> set[int]:
        """aitop's tree and the job's (torchrun starts each rank in a session of
        its own: the tree still holds them)."""
        return tree({root for root in (self.own_pid, self.job_pid) if root is not None},
                     readings)

    def _same_run(self, pid: int, own: set[int]) -> bool:
        """Whether ``pid`` is a rank of the job's torchrun run (by its run id)."""
        if self._run_id is None:
            ids = {_run_id(p) for p in own if p != self.own_pid} - {None, "", "none"}
            self._run_id = next(iter(ids), None) if len(ids) == 1 else None
        return self._run_id is not None and _run_id(pid) == self._run_id

    def _busiest(self, cpu: dict[int, _Reading], elapsed: float) -> tuple[OtherProcess, ...]:
        own = self._own(cpu)
        job_ends = pipe_ends(self.job_pid) if self.job_pid is not None else set()
        used = sorted(
            ((now.cpu_s - before.cpu_s) / elapsed, pid) for pid, now in cpu.items()
            if (before := self._cpu.get(pid)) is not None and before.start == now.start
            and pid not in own
        )
        out: list[OtherProcess] = []
        for cores, pid in reversed(used):
            if cores < MIN_CORES or len(out) == self.kept:
                break
            if _kernel_thread(pid, cpu[pid]):
                continue  # writeback, kswapd: the kernel working for everyone
            if pipe_partner(job_ends, pid):
                continue
            if self._same_run(pid, own):
                continue
            try:
                command = _command(psutil.Process(pid))
            except psutil.Error:
                continue
            out.append(OtherProcess(pid, command, round(cores, 3)))
        return tuple(out)
