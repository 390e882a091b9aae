"""Every PyTorch process on the node, found from ``/proc``, grouped into jobs.

The node agent attaches to jobs nobody named, so it must find them the way a
person would with ``pgrep -af python`` and ``/proc/PID/maps``:

* A *torch process* is one whose ``maps`` shows ``torch/lib/libtorch*.so``: the
  library ``import torch`` loads, whatever launched the process or wrote its
  code (a binary that embeds libtorch without Python is one too, and is listed
  as not watchable: py-spy reads Python stacks).
* A process's *job root* is its topmost torch ancestor that it is a worker or
  rank of: DataLoader workers fold into their training process, ranks into
  torchrun's agent or the ``mp.spawn`` parent, Lightning's ranks into rank 0. A
  job that a torch-loaded Python process merely started (a notebook, a sweep
  driver, a test runner) is a job of its own.
  ``aitop --pid ROOT`` already watches everything under a root, so the agent
  attaches once per root.
* A Python process whose ``maps`` cannot be read (another user's, without
  root; or, to root in a container without CAP_SYS_PTRACE, any other user's)
  may be a torch job that aitop cannot watch: it is listed, with that reason
  and what to do, rather than silently missing. Such processes fold only into a parent
  they were forked or spawned from, since an unreadable parent may be anything
  that started a job (a Python shell, a test runner, a notebook).

A process is named by ``(pid, start time)``: a PID the kernel reuses is another
process. What a process is (torch or not) is cached under that name, since a
library once mapped stays mapped; Python processes without torch are looked at
again on every scan (they may import it later). Never raises.
"""

from __future__ import annotations

import math
import os
import pwd
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import psutil

from .environment import torch_dir_from_maps
from .kernel.procfs import (
    PROC,
    list_pids,
    process_uid,
    read_cmdline,
    read_link,
    read_maps,
    read_stat,
)
from .process_tree import is_forkserver, is_spawn_child, tree_edges
from .ranks import read_rank_env

#: Why a torch process cannot be watched, as ``aitop_job_info`` and the node view say
#: it: the reason, then what to do.
NOT_PYTHON = "not a Python process (libtorch without Python): py-spy cannot read its stacks"
#: Root reads every process's memory map only with CAP_SYS_PTRACE, which a container
#: may withhold: then another user's process is as unreadable to root as to anyone.
ROOT_DENIED = ("owned by {owner} (uid {uid}), and aitop runs as root without CAP_SYS_PTRACE, "
               "so it may not read it: give aitop the capability (docker run --cap-add "
               "SYS_PTRACE; in Kubernetes, securityContext.capabilities.add: [SYS_PTRACE])")


def user_name(uid: int | None) -> str:
    """The account's name (``uid`` itself when it has none here, ``?`` when unknown)."""
    if uid is None:
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def other_user(uid: int, own_uid: int) -> str:
    """Why another user's Python process is not watched, and what to do: as that user
    or as root aitop may read it (``ptrace_may_access``: the same uid, or
    CAP_SYS_PTRACE, which root holds outside a restricted container)."""
    owner = user_name(uid)
    how = "as root (sudo aitop)" if uid == 0 else f"as root (sudo aitop) or as {owner}"
    return (f"owned by {owner} (uid {uid}), and aitop runs as {user_name(own_uid)}, who may "
            f"not read it: run aitop {how}")


def unreadable_reason(uid: int | None, own_uid: int) -> str | None:
    """Why a Python process whose memory map cannot be read may be a job aitop cannot
    watch; None for aitop's own user's (not dumpable, or gone: nothing to list)."""
    if uid is None or uid == own_uid:
        return None
    if own_uid == 0:
        return ROOT_DENIED.format(owner=user_name(uid), uid=uid)
    return other_user(uid, own_uid)


#: ``/proc/PID/stat``'s clock ticks per second.
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def start_time(found: Found) -> float:
    """When the process started, in epoch seconds (``started`` is in clock ticks after boot)."""
    return psutil.boot_time() + found.started / _CLOCK_TICKS



@dataclass(frozen=True, slots=True)
class Found:
    """One process the agent may watch, or has to say why not."""

    pid: int
    parent: int | None
    #: Clock ticks after boot at which it started (``/proc/PID/stat`` field 22).
    started: int
    uid: int | None
    command: tuple[str, ...]
    #: Why aitop cannot watch it; None when it can.
    unwatchable: str | None = None
    #: Its maps show libtorch (False: a Python process whose maps could not be read).
    torch_seen: bool = True

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.started)


@dataclass(frozen=True, slots=True)
class JobGroup:
    """The processes under one job root: what one ``attach(root)`` watches."""

    root: Found
    members: tuple[Found, ...]


@dataclass
class Discovery:
    """Scans ``/proc``; remembers what each process was found to be."""

    proc_root: str = PROC
    own_uid: int = field(default_factory=os.geteuid)
    #: A Python process without torch is looked at again after this long (it may
    #: import torch later; reading every process's maps at each scan would not pay).
    recheck_s: float = 10.0
    clock: Callable[[], float] = time.monotonic
    #: (pid, start) -> (torch loaded? None: its maps unreadable, when looked at).
    #: True is final.
    _torch: dict[tuple[int, int], tuple[bool | None, float]] = field(default_factory=dict)
    #: The processes the scan in progress has seen.
    _live: set[tuple[int, int]] = field(default_factory=set)

    def scan(self) -> list[Found]:
        """Torch processes and unreadable Python processes, in PID order."""
        found: list[Found] = []
        self._live = set()
        for pid in list_pids(self.proc_root):
            item = self._look_at(pid)
            if item is not None:
                found.append(item)
        # Forget processes that are gone, so the cache is bounded by what runs.
        for key in [k for k in self._torch if k not in self._live]:
            del self._torch[key]
        return found

    def _look_at(self, pid: int) -> Found | None:
        stat = read_stat(pid, proc_root=self.proc_root)
        if stat is None or len(stat.fields) < 20 or stat.state == "Z":
            return None
        parent, started = stat.ppid, stat.start_ticks
        if started is None:
            return None
        command = read_cmdline(pid, self.proc_root)
        if not command:
            return None  # a kernel thread
        uid = process_uid(pid, self.proc_root)
        key = (pid, started)
        self._live.add(key)
        python = _is_python(command, self.proc_root, pid)
        now = self.clock()
        known, looked_at = self._torch.get(key, (False, -math.inf))
        if known is not True and now - looked_at >= self.recheck_s:
            maps = read_maps(pid, self.proc_root)
            known = None if maps is None else torch_dir_from_maps(maps) is not None
            self._torch[key] = (known, now)
        if known is None:  # its maps could not be read: it may be a job we cannot watch
            why = unreadable_reason(uid, self.own_uid) if python else None
            if why is None or read_stat(pid, proc_root=self.proc_root) is None:
                return None  # aitop's own user's (not dumpable), or gone since
            return Found(pid, parent, started, uid, command, why, torch_seen=False)
        if not known:
            return None
        return Found(pid, parent, started, uid, command, None if python else NOT_PYTHON)


#: Launchers whose ranks come later (after a rendezvous that may wait for other
#: nodes): a launcher alone has no training thread to watch yet.
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
LAUNCHER_SCRIPTS = ("torchrun", "accelerate", "deepspeed")


def is_launcher(command: tuple[str, ...]) -> bool:
    """torchrun (as a script or ``python -m torch.distributed.run``), accelerate, DeepSpeed."""
    if any(arg in LAUNCHER_MODULES for arg in command[1:3]):
        return True
    scripts = [os.path.basename(arg) for arg in command[:2]]
    return any(name in LAUNCHER_SCRIPTS for name in scripts)


def job_groups(found: Iterable[Found], proc_root: str = PROC) -> list[JobGroup]:
    """Each torch process under its job root, by root PID: the topmost ancestor it
    is a worker or rank of (forked or spawned from it, started by a launcher, or
    given a ``LOCAL_RANK``)."""
    by_pid: Mapping[int, Found] = {f.pid: f for f in found}

    def rank_env(pid: int) -> dict[str, str]:
        return read_rank_env(pid, proc_root) or {}

    def joins(item: Found, parent: Found) -> bool:
        """Whether ``item`` is part of its parent's job, not a job of its own."""
        if item.torch_seen != parent.torch_seen:
            return False
        started_by_it = (item.command == parent.command  # forked: a worker, a rank
                         or is_spawn_child(item.command) or is_forkserver(item.command))
        if not parent.torch_seen:
            # Unreadable: only what was forked or spawned from it, since such a
            # parent may be anything that started a job.
            return started_by_it
        # A Python process with torch loaded that starts another (a notebook, a
        # sweep driver, a test runner) has not made it a rank: only a launcher's
        # children, forked or spawned ones and those given a rank are.
        return started_by_it or is_launcher(parent.command) or "LOCAL_RANK" in rank_env(item.pid)

    def root_of(item: Found) -> Found:
        seen = {item.pid}
        while (item.parent is not None and item.parent in by_pid
               and item.parent not in seen and joins(item, by_pid[item.parent])):
            item = by_pid[item.parent]
            seen.add(item.pid)
        return item

    groups: dict[int, list[Found]] = {}
    roots: dict[int, Found] = {}
    for item in by_pid.values():
        root = root_of(item)
        roots[root.pid] = root
        groups.setdefault(root.pid, []).append(item)
    return [JobGroup(roots[pid], tuple(sorted(groups[pid], key=lambda f: f.pid)))
            for pid in sorted(groups)]


def _is_python(command: tuple[str, ...], proc_root: str, pid: int) -> bool:
    """The executable is a Python interpreter (``exe`` when readable, else argv[0])."""
    exe = read_link(pid, "exe", proc_root=proc_root) or (command[0] if command else "")
    name = os.path.basename(exe.removesuffix(" (deleted)"))
    return name.startswith(("python", "pypy")) or (
        not name and bool(command) and os.path.basename(command[0]).startswith("python"))


def is_python_process(pid: int, proc_root: str = PROC) -> bool:
    """Whether ``pid`` runs a Python interpreter (``_is_python``)."""
    return _is_python(read_cmdline(pid, proc_root), proc_root, pid)


def python_beneath(pid: int, proc_root: str = PROC) -> tuple[int, ...]:
    """The topmost Python processes under ``pid``, a process that is not Python
    itself: the job a shell script, ``nohup``, ``time``, ``srun`` or a
    container's init runs. Each is the first Python process on its branch (a
    launcher such as torchrun, whose ranks are beneath it, counts once)."""
    parent_of = dict(tree_edges(pid, proc_root=proc_root))
    python = {p for p in parent_of if p != pid and is_python_process(p, proc_root)}

    def under_python(p: int) -> bool:
        up = parent_of.get(p)
        while up is not None and up != pid:
            if up in python:
                return True
            up = parent_of.get(up)
        return False

    return tuple(sorted(p for p in python if not under_python(p)))
