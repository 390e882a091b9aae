"""The whole multi-process job around a PID: its launcher and its ranks on this machine.

Users point aitop at whatever PID they find: torchrun's elastic agent, an
``mp.spawn`` parent, Lightning's rank 0, or one rank among eight. A launcher has
no training thread, so watching it shows nothing; one rank alone cannot say it
waits for another. This module finds the job from any of them, reading only
``/proc`` (``environ`` and the children files):

* A rank started by torchrun/``torch.distributed.run``, ``accelerate launch``
  or DeepSpeed's launcher carries ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``
  (and ``GROUP_RANK``, ``TORCHELASTIC_RUN_ID``) in ``/proc/PID/environ`` from
  its start. Its siblings with the same run are the other local ranks, their
  parent the launcher.
* Lightning's rank 0 is the user's own process: it sets its variables only after
  start (invisible in ``environ``) and spawns ranks 1..N-1, which carry
  ``LOCAL_RANK``. A parent whose rank-carrying children lack local rank 0 is
  therefore rank 0 itself, unless they carry ``TORCHELASTIC_RUN_ID``: an
  elastic agent is never a rank, and starts its ranks one by one, so its
  missing local rank 0 has not started yet (``Job.starting``).
* ``mp.spawn`` ranks carry no rank variables: the spawn children of one parent
  (less its resource tracker and any DataLoader workers, which torch names) are
  its ranks, in start order (their rank numbers are then unknown, and said to be).

Never raises once given a PID; a process that cannot be read is skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from .kernel.procfs import PROC, read_cmdline, read_comm, read_environ, read_stat
from .process_tree import WORKER_NAME, direct_children, is_spawn_child

#: How a job's ranks were found: ``env`` (launcher variables), ``lightning``
#: (rank 0 spawned the others), ``spawn`` (mp.spawn, numbered by start order) or
#: ``single`` (no ranks: a one-process job).
JobKind = Literal["env", "lightning", "spawn", "single"]
#: Environment variables that describe a rank, as the launchers set them.
RANK_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
             "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True, slots=True)
class RankProcess:
    """One rank of the job: its PID and what its environment says about it."""

    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    group_rank: int | None = None
    run_id: str | None = None
    #: The ranks its launcher starts on this machine (``LOCAL_WORLD_SIZE``).
    local_world_size: int | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """The job around the PID aitop was given."""

    given_pid: int
    #: The process that started the ranks (torchrun's agent, the mp.spawn
    #: parent), or None when the given PID is a single process or rank 0 itself.
    launcher_pid: int | None
    #: How the ranks were found (see ``JobKind``).
    kind: JobKind
    ranks: tuple[RankProcess, ...]
    #: The other PIDs the user named as part of this job (``aitop --pid A --pid B``).
    joined: tuple[int, ...] = ()

    @property
    def multi_rank(self) -> bool:
        return len(self.ranks) > 1

    @property
    def starting(self) -> bool:
        """An elastic agent has started some of its ranks, not all: its local rank 0
        (the rank to lead with) is not up yet, or fewer ranks than the
        ``LOCAL_WORLD_SIZE`` they carry (the agent starts them one by one, a few
        milliseconds apart, longer on a busy machine: a job read in between would be
        taken for a one-rank job and judged without the others)."""
        if self.kind != "env" or self.launcher_pid != self.given_pid or not self.ranks:
            return False
        expected = max(r.local_world_size or 0 for r in self.ranks)
        return not any(r.local_rank == 0 for r in self.ranks) or len(self.ranks) < expected

    def training_pid(self) -> int:
        """The PID to watch: the given one, unless it is a launcher (then rank 0)."""
        if any(r.pid == self.given_pid for r in self.ranks) or not self.ranks:
            return self.given_pid
        return self.ranks[0].pid

    @property
    def world_size(self) -> int:
        """Ranks of the job in all: its WORLD_SIZE, when larger than the ranks found here."""
        return max([len(self.ranks), *(r.world_size or 0 for r in self.ranks)])

    def describe(self) -> str:
        """One line for the user: what the given PID is and which ranks there are."""
        world = self.world_size
        if world <= 1:
            return f"PID {self.given_pid}: a single-process job"
        ranks = ", ".join(f"{_number(r)}={r.pid}" for r in self.ranks)
        elsewhere = world - len(self.ranks)
        away = f"; {elsewhere} on other machines" if elsewhere > 0 else ""
        if self.joined:
            given = ", ".join(str(p) for p in (self.given_pid, *self.joined))
            return f"PIDs {given} are one {world}-rank job (ranks {ranks}{away})"
        role = ("the launcher" if self.given_pid == self.launcher_pid
                else f"rank {_number(self._given())}")
        return f"PID {self.given_pid} is {role} of a {world}-rank job (ranks {ranks}{away})"

    def label(self, pid: int) -> str:
        """How the report and the UI name a rank: "rank 1", or its spawn order."""
        for index, r in enumerate(self.ranks):
            if r.pid == pid:
                if r.rank is not None:
                    return f"rank {r.rank}"
                return f"PID {pid}" if self.joined else f"spawned #{index}"
        return f"PID {pid}"

    def _given(self) -> RankProcess | None:
        return next((r for r in self.ranks if r.pid == self.given_pid), None)


def _number(rank: RankProcess | None) -> str:
    return "?" if rank is None or rank.rank is None else str(rank.rank)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def read_rank_env(pid: int, proc_root: str = PROC) -> dict[str, str] | None:
    """The rank variables in the process's start environment, or None if unreadable."""
    env = read_environ(pid, proc_root)
    return None if env is None else {k: env[k] for k in RANK_VARS if k in env}


def rank_from_env(pid: int, env: dict[str, str]) -> RankProcess | None:
    """A rank when its environment names one (``LOCAL_RANK`` or ``RANK``)."""
    if "LOCAL_RANK" not in env and "RANK" not in env:
        return None
    return RankProcess(
        pid=pid,
        rank=_int(env.get("RANK")),
        local_rank=_int(env.get("LOCAL_RANK")),
        world_size=_int(env.get("WORLD_SIZE")),
        group_rank=_int(env.get("GROUP_RANK")),
        run_id=env.get("TORCHELASTIC_RUN_ID"),
        local_world_size=_int(env.get("LOCAL_WORLD_SIZE")),
    )


def parent_of(pid: int, proc_root: str = PROC) -> int | None:
    """The parent PID (the field after the state in ``/proc/PID/stat``)."""
    stat = read_stat(pid, proc_root=proc_root)
    return None if stat is None else stat.ppid


def _env_ranks(parent: int, proc_root: str,
               env_of: Callable[[int], dict[str, str] | None]) -> list[RankProcess]:
    ranks = []
    for kid in sorted(direct_children(parent, proc_root=proc_root) or ()):
        env = env_of(kid)
        rank = rank_from_env(kid, env) if env is not None else None
        if rank is not None:
            ranks.append(rank)
    return ranks


def _same_run(ranks: Sequence[RankProcess], like: RankProcess) -> list[RankProcess]:
    return [r for r in ranks if r.run_id == like.run_id]


def _ordered(ranks: Sequence[RankProcess]) -> tuple[RankProcess, ...]:
    return tuple(sorted(ranks, key=lambda r: (r.rank is None, r.rank or 0,
                                              r.local_rank or 0, r.pid)))


def _spawn_ranks(parent: int, proc_root: str) -> list[RankProcess]:
    """mp.spawn's ranks: spawn children of ``parent``, numbered in start (PID) order."""
    kids = []
    for kid in sorted(direct_children(parent, proc_root=proc_root) or ()):
        cmdline = read_cmdline(kid, proc_root)
        if (is_spawn_child(cmdline) and "resource_tracker" not in " ".join(cmdline)
                # A DataLoader's spawn-started workers are not ranks (torch names them).
                and (read_comm(kid, proc_root=proc_root) or "").strip() != WORKER_NAME):
            kids.append(kid)
    return [RankProcess(pid=k, rank=None, local_rank=None, world_size=None) for k in kids]


def joined_job(first: Job, others: Sequence[Job]) -> Job:
    """One job from the PIDs a user names together (``aitop --pid A --pid B``).

    The launchers of one job's nodes run on one machine (a multi-node job tried
    on loopback, or two launchers sharing a host) each see only their own ranks;
    named together, their ranks are judged as one job. No launcher is followed
    through restarts then: each would re-read only its own ranks.
    """
    ranks: dict[int, RankProcess] = {}
    for job in (first, *others):
        for rank in job.ranks or (RankProcess(job.given_pid, None, None, None),):
            ranks.setdefault(rank.pid, rank)
    joined = tuple(dict.fromkeys(j.given_pid for j in others if j.given_pid != first.given_pid))
    kind: JobKind = first.kind if first.kind != "single" else next(
        (j.kind for j in others if j.kind != "single"), "single")
    return Job(first.given_pid, None, kind, _ordered(list(ranks.values())), joined)


def find_job(pid: int, proc_root: str = PROC) -> Job:
    """The job around ``pid``: its launcher and every rank on this machine."""

    def env_of(p: int) -> dict[str, str] | None:
        return read_rank_env(p, proc_root)

    own_env = env_of(pid) or {}
    me = rank_from_env(pid, own_env)
    if me is not None:
        # A rank: its siblings of the same run are the other local ranks.
        parent = parent_of(pid, proc_root)
        siblings = _env_ranks(parent, proc_root, env_of) if parent else []
        ranks = _same_run(siblings, me) or [me]
        if me.pid not in {r.pid for r in ranks}:
            ranks.append(me)
        if parent is not None and me.local_rank not in (None, 0) and me.run_id is None \
                and not any(r.local_rank == 0 for r in ranks):
            # Lightning: the parent is rank 0 and set its variables after start.
            zero = RankProcess(pid=parent, rank=0, local_rank=0, world_size=me.world_size)
            return Job(pid, None, "lightning", _ordered([zero, *ranks]))
        return Job(pid, parent, "env", _ordered(ranks))
    children = _env_ranks(pid, proc_root, env_of)
    if children:
        if any(r.local_rank == 0 or r.run_id for r in children):
            # An elastic agent's ranks carry its run: the agent is never a rank,
            # and a missing local rank 0 has not started yet (a restart).
            return Job(pid, pid, "env", _ordered(children))
        world = next((r.world_size for r in children if r.world_size), None)
        zero = RankProcess(pid=pid, rank=0, local_rank=0, world_size=world)
        return Job(pid, None, "lightning", _ordered([zero, *children]))
    spawned = _spawn_ranks(pid, proc_root)
    if len(spawned) > 1:
        return Job(pid, pid, "spawn", tuple(spawned))
    return Job(pid, None, "single", ())
