"""The target process, its descendants and the main process's threads.

Runs every ~1 s from a background thread against a process we do not own, so it
is built to be cheap and to never raise once constructed:

* ``psutil.Process`` handles are cached per PID between calls, so
  ``cpu_percent()`` is a delta since the previous tick and nothing is re-created
  needlessly; all per-process reads of one tick happen inside ``oneshot()``.
* The tree is walked through ``/proc/PID/task/TID/children`` (only the target's
  own descendants are read) instead of ``psutil.Process.children()``, which
  reads ``/proc/*/stat`` of every process on the machine - hundreds of files on
  a busy training node, every second.
* Main-process threads come from one ``/proc/PID/task/TID/stat`` read each: its
  second field is the same kernel ``comm`` that ``/proc/PID/task/TID/comm``
  shows, and it also carries the thread's CPU ticks.

A field that cannot be read (access denied, process gone mid-read) is ``None``;
only the constructor raises, with :class:`TargetNotFound`, when the PID does not
exist at all.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import psutil

from .cpu_groups import read_cpu_groups
from .kernel.procfs import (
    PROC,
    list_tids,
    read_children,
    read_cmdline,
    read_runqueue_wait_ns,
    read_stat,
    read_task_stat,
)
from .private_memory import PrivateMemoryReader
from .redact import redact_argv
from .samples import ProcessInfo, ProcessTreeSample, ThreadInfo

T = TypeVar("T")

#: Name (comm) PyTorch gives DataLoader worker processes (torch >= 2.1).
WORKER_NAME = "pt_data_worker"
#: Name (comm) PyTorch gives the DataLoader pin-memory thread.
PIN_THREAD_NAME = "pt_data_pin"

#: Never follow a tree past this many processes (a fork bomb must not stall us).
MAX_TREE = 4096

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class TargetNotFound(Exception):
    """The PID given to a probe does not name a running process."""

    def __init__(self, pid: int) -> None:
        super().__init__(f"no process with PID {pid}")
        self.pid = pid


class _Gone(Exception):
    """Internal: the process vanished while we were reading it."""


def pin_thread_present(names: Sequence[str] | None) -> bool | None:
    """``True``/``False`` if a ``pt_data_pin`` thread is/is not among ``names``."""
    if names is None:
        return None
    return PIN_THREAD_NAME in names


def direct_children(
    pid: int, tids: Iterable[int] | None = None, proc_root: str = PROC
) -> set[int] | None:
    """Child PIDs of ``pid`` from ``/proc/PID/task/TID/children``.

    Each thread lists the children *it* forked, so every thread is read.
    ``None`` means the kernel lacks ``CONFIG_PROC_CHILDREN`` (or the process is
    gone) and the caller must fall back to a full ``/proc`` scan.
    """
    if tids is None:
        tids = list_tids(pid, proc_root)
        if tids is None:
            return None
    out: set[int] = set()
    seen_file = False
    for tid in tids:
        kids = read_children(pid, tid, proc_root)
        if kids is None:
            continue
        seen_file = True
        out.update(kids)
    return out if seen_file else None


def tree_edges(target_pid: int, proc_root: str = PROC) -> list[tuple[int, int | None]]:
    """``(pid, parent)`` for the target and all its descendants, target first.

    Walks the children files breadth-first; falls back to psutil's full scan
    when they are unavailable. Never raises.
    """
    edges: list[tuple[int, int | None]] = [(target_pid, None)]
    seen = {target_pid}
    queue = [target_pid]
    while queue and len(edges) < MAX_TREE:
        pid = queue.pop(0)
        kids = direct_children(pid, proc_root=proc_root)
        if kids is None:
            if pid == target_pid:
                return _tree_edges_psutil(target_pid)
            continue
        for kid in sorted(kids):
            if kid not in seen:
                seen.add(kid)
                edges.append((kid, pid))
                queue.append(kid)
    return edges


def _tree_edges_psutil(target_pid: int) -> list[tuple[int, int | None]]:
    edges: list[tuple[int, int | None]] = [(target_pid, None)]
    try:
        for child in psutil.Process(target_pid).children(recursive=True)[:MAX_TREE]:
            try:
                edges.append((child.pid, child.ppid()))
            except psutil.Error:
                continue
    except psutil.Error:
        pass
    return edges


# ------------------------------------------------------------ classification


@dataclass(frozen=True, slots=True)
class Node:
    """What classification needs to know about one process of the tree."""

    pid: int
    parent: int | None
    name: str
    cmdline: tuple[str, ...]


def is_forkserver(cmdline: Sequence[str]) -> bool:
    """The multiprocessing forkserver (parent of forkserver-started workers)."""
    return any("multiprocessing.forkserver" in a for a in cmdline)


def is_spawn_child(cmdline: Sequence[str]) -> bool:
    """A process started by multiprocessing's 'spawn' method."""
    return "--multiprocessing-fork" in cmdline or any("multiprocessing.spawn" in a for a in cmdline)


def torch_names_workers(torch_version: str | None) -> bool:
    """Whether this torch names its DataLoader workers ``pt_data_worker`` (>= 2.1).

    Then an unnamed child is never a DataLoader worker, however it looks: a
    hand-written ``multiprocessing.Process`` producer (same cmdline, forked, no
    children) was read as "1 DataLoader worker" and told to raise num_workers.
    """
    match = re.match(r"(\d+)\.(\d+)", torch_version or "")
    return match is not None and (int(match[1]), int(match[2])) >= (2, 1)


def classify_roles(target_pid: int, nodes: Mapping[int, Node],
                   structural: bool = True) -> dict[int, str]:
    """Role of every process: ``main``, ``worker`` (DataLoader worker) or ``child``.

    The ``pt_data_worker`` name that torch (>= 2.1) gives workers is decisive.
    Only when *no* process of the tree carries it (an older torch) do the
    structural hints apply: a spawn child, a child of a forkserver, or a fork
    child with the target's exact cmdline, provided it has no children of its own
    (a DDP rank from ``mp.spawn`` also looks like a spawn child, but it usually
    parents its own workers). The forkserver itself and the resource tracker are
    ``child``. ``structural=False`` (a torch known to name its workers) turns the
    hints off.
    """
    roles: dict[int, str] = {}
    named = any(n.name == WORKER_NAME for p, n in nodes.items() if p != target_pid)
    parents = {n.parent for n in nodes.values()}
    for pid, node in nodes.items():
        if pid == target_pid:
            roles[pid] = "main"
        elif node.name == WORKER_NAME:
            roles[pid] = "worker"
        elif not structural or named or pid in parents or _is_forkserver_node(node, nodes):
            roles[pid] = "child"
        else:
            roles[pid] = "worker" if _looks_like_worker(node, target_pid, nodes) else "child"
    return roles


def _is_forkserver_node(node: Node, nodes: Mapping[int, Node]) -> bool:
    """The forkserver itself, not one of its children (which inherit its cmdline)."""
    if not is_forkserver(node.cmdline):
        return False
    parent = nodes.get(node.parent) if node.parent is not None else None
    return parent is None or not is_forkserver(parent.cmdline)


def _looks_like_worker(node: Node, target_pid: int, nodes: Mapping[int, Node]) -> bool:
    """Structural hints for an unnamed worker (see :func:`classify_roles`)."""
    if is_spawn_child(node.cmdline):
        return True
    parent = nodes.get(node.parent) if node.parent is not None else None
    if parent is not None and is_forkserver(parent.cmdline):
        return True
    target = nodes.get(target_pid)
    return (
        target is not None
        and node.parent == target_pid
        and bool(node.cmdline)
        and node.cmdline == target.cmdline
    )


def count_workers(target_pid: int, proc_root: str = PROC) -> int | None:
    """Number of live DataLoader workers in the target's tree now (one-shot walk).

    ``None`` when the target itself cannot be read.
    """
    edges = tree_edges(target_pid, proc_root)
    nodes: dict[int, Node] = {}
    zombies: set[int] = set()
    for pid, parent in edges:
        stat = read_stat(pid, proc_root=proc_root)
        if stat is None:
            if pid == target_pid:
                return None
            continue
        nodes[pid] = Node(pid, parent, stat.comm, read_cmdline(pid, proc_root))
        if stat.state == "Z":
            zombies.add(pid)
    roles = classify_roles(target_pid, nodes)
    # A worker that died but is not yet reaped still bears the name; it is not
    # one of the loader's working processes any more.
    return sum(1 for pid, r in roles.items() if r == "worker" and pid not in zombies)


# ---------------------------------------------------------------------- probe


def _get(fn: Callable[[], T], label: str, denied: list[str]) -> T | None:
    """Read one field; ``None`` on denial or zombie, ``_Gone`` if the process vanished."""
    try:
        return fn()
    except psutil.ZombieProcess:
        return None
    except psutil.NoSuchProcess as exc:
        raise _Gone from exc
    except psutil.AccessDenied:
        denied.append(label)
        return None
    except (psutil.Error, OSError, ValueError, IndexError):
        return None


@dataclass(slots=True)
class _Tracked:
    """A cached handle plus what its deltas need from the previous tick."""

    handle: psutil.Process
    cpu_primed: bool = False
    io_prev: tuple[float, int, int] | None = None
    sched_prev: tuple[float, int] | None = None
    #: (when, system CPU seconds) at the previous tick.
    kernel_prev: tuple[float, float] | None = None


class ProcessTreeProbe:
    """Samples the target, its descendants and the main process's threads.

    ``popen`` (a ``subprocess.Popen`` of the target) or ``exit_status`` (a
    callable returning the exit code once known) lets the probe report how the
    target ended; without one, an exited target we did not start has
    ``exit_status=None``: a non-parent cannot learn it from /proc.
    ``private_memory`` reads each process's USS and PSS on the ticks its own
    cadence allows (none without one).
    """

    def __init__(
        self,
        target_pid: int,
        *,
        popen: subprocess.Popen[bytes] | subprocess.Popen[str] | None = None,
        exit_status: Callable[[], int | None] | None = None,
        names_workers: Callable[[], bool] | None = None,
        private_memory: PrivateMemoryReader | None = None,
    ) -> None:
        if not isinstance(target_pid, int) or target_pid <= 0:
            raise TargetNotFound(target_pid)
        try:
            handle = psutil.Process(target_pid)
        except psutil.ZombieProcess:
            handle = None  # exists but already dead: sample() says alive=False
        except (psutil.NoSuchProcess, ValueError) as exc:
            raise TargetNotFound(target_pid) from exc
        except psutil.Error:
            handle = None
        self.target_pid = target_pid
        self._popen = popen
        self._exit_cb = exit_status
        #: True once the target's torch is known to name its workers.
        self._names_workers = names_workers
        self._tracked: dict[int, _Tracked] = {}
        if handle is not None:
            self._tracked[target_pid] = _Tracked(handle)
        self._thread_prev: dict[int, tuple[int, float]] = {}
        self._redacted: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._dead = handle is None
        self._pids: tuple[int, ...] = (target_pid,)
        self._private = private_memory

    # -------------------------------------------------------------- public

    def pids(self) -> tuple[int, ...]:
        """PIDs of the tree at the last tick (target first); for other probes.

        Safe to call from another thread: it returns an immutable snapshot.
        """
        return self._pids

    def sample(self) -> ProcessTreeSample:
        """One tick: every process of the tree, or ``alive=False`` once it exited."""
        t = time.time()
        if self._dead or not self._target_alive():
            return self._dead_sample(t)
        now = time.monotonic()
        denied: list[str] = []
        edges = tree_edges(self.target_pid, PROC)
        infos: list[ProcessInfo] = []
        nodes: dict[int, Node] = {}
        threads: tuple[ThreadInfo, ...] = ()
        pin: bool | None = None
        live: set[int] = set()
        for pid, parent in edges:
            tracked = self._track(pid)
            if tracked is None:
                continue
            try:
                info = self._read_process(tracked, now, denied)
            except _Gone:
                if pid == self.target_pid:
                    self._dead = True
                    return self._dead_sample(t)
                continue
            if pid == self.target_pid:
                threads, pin = self._read_threads(now)
            live.add(pid)
            infos.append(info)
            nodes[pid] = Node(pid, parent, info.name, info.cmdline)
        self._forget(live)
        self._pids = tuple(p.pid for p in infos)
        named = self._names_workers is not None and self._names_workers()
        roles = classify_roles(self.target_pid, nodes, structural=not named)
        workers = {pid for pid, role in roles.items() if role == "worker"}
        private = (self._private.read(self._pids, workers) if self._private is not None
                   else None)
        rollups = private.rollups if private is not None else {}
        group_of, cpu_groups = read_cpu_groups(self._pids)
        processes = tuple(
            replace(
                p,
                role=roles.get(p.pid, "child"),
                threads=threads if p.pid == self.target_pid else (),
                uss_bytes=rollups[p.pid].uss_bytes if p.pid in rollups else None,
                pss_bytes=rollups[p.pid].pss_bytes if p.pid in rollups else None,
                cpu_group=group_of.get(p.pid),
            )
            for p in infos
        )
        error = None
        if denied:
            fields = ", ".join(sorted(set(denied)))
            error = f"access denied reading {fields} (run aitop as the target's user or root)"
        return ProcessTreeSample(
            t=t,
            target_pid=self.target_pid,
            alive=True,
            processes=processes,
            pin_memory_thread=pin,
            error=error,
            shm_mapped_bytes=private.shm_mapped_bytes if private is not None else None,
            cpu_groups=cpu_groups,
        )

    # ------------------------------------------------------------- internals

    def _target_alive(self) -> bool:
        tracked = self._tracked.get(self.target_pid)
        if tracked is None:
            self._dead = True
            return False
        handle = tracked.handle
        try:
            # is_running() also catches PID reuse (it compares create times).
            if not handle.is_running() or handle.status() == psutil.STATUS_ZOMBIE:
                self._dead = True
        except psutil.Error:
            self._dead = True
        return not self._dead

    def _dead_sample(self, t: float) -> ProcessTreeSample:
        self._dead = True
        self._pids = ()
        if self._tracked:
            self._tracked.clear()
            self._thread_prev.clear()
        return ProcessTreeSample(
            t=t,
            target_pid=self.target_pid,
            alive=False,
            processes=(),
            exit_status=self._exit_status(),
        )

    def _exit_status(self) -> int | None:
        try:
            if self._popen is not None:
                return self._popen.poll()
            if self._exit_cb is not None:
                return self._exit_cb()
        except Exception:  # a caller's callback must not break sampling
            return None
        return None

    def _track(self, pid: int) -> _Tracked | None:
        tracked = self._tracked.get(pid)
        if tracked is not None:
            if pid == self.target_pid:
                return tracked  # identity already checked by _target_alive()
            try:
                if tracked.handle.is_running():
                    return tracked
            except psutil.Error:
                pass
        try:
            tracked = _Tracked(psutil.Process(pid))
        except psutil.Error:
            self._tracked.pop(pid, None)
            return None
        self._tracked[pid] = tracked
        return tracked

    def _forget(self, live: set[int]) -> None:
        for pid in [p for p in self._tracked if p not in live]:
            del self._tracked[pid]

    def _read_process(self, tracked: _Tracked, now: float, denied: list[str]) -> ProcessInfo:
        p = tracked.handle
        with p.oneshot():
            name = _get(p.name, "name", denied) or ""
            ppid = _get(p.ppid, "ppid", denied)
            status = _get(p.status, "status", denied)
            cmdline = _get(p.cmdline, "cmdline", denied)
            cpu = _get(lambda: p.cpu_percent(interval=None), "cpu", denied)
            times = _get(p.cpu_times, "cpu times", denied)
            mem = _get(p.memory_info, "memory", denied)
            nthreads = _get(p.num_threads, "threads", denied)
            io = _get(p.io_counters, "io", denied)
            started = _get(p.create_time, "create time", denied)
        if cpu is not None and not tracked.cpu_primed:
            tracked.cpu_primed = True
            cpu = None  # psutil's first call has no interval to measure over
        cpu_wait = None
        wait_ns = read_runqueue_wait_ns(p.pid)
        if wait_ns is not None:
            sched_prev = tracked.sched_prev
            tracked.sched_prev = (now, wait_ns)
            if sched_prev is not None and now > sched_prev[0]:
                cpu_wait = max(0.0, (wait_ns - sched_prev[1]) / 1e7 / (now - sched_prev[0]))
        kernel = None
        if times is not None:
            kernel_prev = tracked.kernel_prev
            tracked.kernel_prev = (now, times.system)
            if kernel_prev is not None and now > kernel_prev[0]:
                kernel = max(0.0, 100.0 * (times.system - kernel_prev[1]) / (now - kernel_prev[0]))
        read_bps = write_bps = None
        if io is not None:
            # read_bytes/write_bytes: what actually hit the block layer (as iotop
            # shows), not page-cache hits, which is what a storage bottleneck is.
            prev = tracked.io_prev
            tracked.io_prev = (now, io.read_bytes, io.write_bytes)
            if prev is not None and now > prev[0]:
                dt = now - prev[0]
                read_bps = max(0.0, (io.read_bytes - prev[1]) / dt)
                write_bps = max(0.0, (io.write_bytes - prev[2]) / dt)
        return ProcessInfo(
            pid=p.pid,
            ppid=ppid,
            role="child",
            name=name,
            cmdline=self._redact(tuple(cmdline)) if cmdline else (),
            status=status,
            cpu_percent=cpu,
            rss_bytes=mem.rss if mem is not None else None,
            num_threads=nthreads,
            read_bps=read_bps,
            write_bps=write_bps,
            cpu_wait_percent=cpu_wait,
            kernel_percent=kernel,
            started=started,
        )

    def _redact(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """Redacted cmdline, memoised: workers share long cmdlines, redaction is regex work."""
        hit = self._redacted.get(argv)
        if hit is None:
            if len(self._redacted) > 256:
                self._redacted.clear()
            hit = self._redacted[argv] = tuple(redact_argv(argv))
        return hit

    def _read_threads(self, now: float) -> tuple[tuple[ThreadInfo, ...], bool | None]:
        pid = self.target_pid
        tids = list_tids(pid, PROC)
        if not tids:
            return (), None
        prev = self._thread_prev
        current: dict[int, tuple[int, float]] = {}
        out: list[ThreadInfo] = []
        for tid in tids:
            st = read_task_stat(pid, tid, PROC)
            if st is None:
                continue
            cpu: float | None = None
            before = prev.get(tid)
            if before is not None and now > before[1]:
                cpu = max(0.0, (st.ticks - before[0]) / _CLK_TCK / (now - before[1]) * 100.0)
            current[tid] = (st.ticks, now)
            out.append(ThreadInfo(tid=tid, name=st.name, cpu_percent=cpu))
        self._thread_prev = current
        names = [th.name for th in out] if out else None
        return tuple(out), pin_thread_present(names)
