"""Following a launcher's job while aitop runs: ranks that exit, ranks that start.

torchrun's elastic agent restarts every rank when one fails (``--max-restarts``),
each time with new PIDs. A watch fixed on the PIDs of the first attempt would go
blind at the first restart; instead the launcher's children are read again every
few seconds: ranks that exited are marked so (and leave the job's judgement),
new ones are watched, and when the lead rank itself was restarted its successor
(the new rank with the lowest number) becomes the lead. A launcher watched
itself, attached before its ranks started, hands the lead to its rank 0 so, and
a one-process job that starts ranks of its own (``mp.spawn``, Lightning) hands it
to its rank.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Protocol

from aitop.engine.live.source import RankPeer
from aitop.probes.collector import PeriodicTask
from aitop.probes.kernel.procfs import process_alive
from aitop.probes.ranks import Job, find_job
from aitop.probes.session import Session
from aitop.probes.status import ProbeStatus

#: Seconds between two reads of the launcher's ranks.
RESCAN_S = 3.0
#: How long a headless run waits, after its lead rank exits while the launcher
#: lives, for the launcher to start its successor (torchrun restarts in seconds;
#: the new ranks then import torch).
RESTART_WAIT_S = 30.0


class Lead(Protocol):
    """What the follower needs of the job it follows (engine.live.job.LiveJob)."""

    peers: list[RankPeer]
    warnings: list[str]

    @property
    def session(self) -> Session: ...

    def adopt_lead(self, pid: int, job: Job) -> None: ...


class JobFollower:
    """Re-reads the launcher's ranks every ``RESCAN_S`` and updates the job's peers."""

    def __init__(self, lead: Lead, launcher_pid: int,
                 make_peer: Callable[[int, Job], RankPeer],
                 stop: threading.Event, *, until_ranks: bool = False) -> None:
        self.lead = lead
        self.launcher_pid = launcher_pid
        self.make_peer = make_peer
        self.restarts = 0
        #: A one-process job, followed until it starts ranks of its own (an
        #: ``mp.spawn`` parent still building its model, Lightning's rank 0 before it
        #: spawns the others): then it is led as the multi-rank job it became. Until
        #: then it has no launcher, and its probe list no ranks line.
        self.until_ranks = until_ranks
        self._stop = stop
        status = {} if until_ranks else lead.session.probe_status
        self._task = PeriodicTask("ranks", self.rescan, RESCAN_S, status, stop,
                                  first_delay_s=RESCAN_S)

    def start(self) -> JobFollower:
        self._task.start()
        return self

    def launcher_alive(self) -> bool:
        try:
            os.kill(self.launcher_pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def awaiting_restart(self, now: float | None = None) -> bool:
        """Whether the lead rank exited lately while its launcher lives on."""
        if self.until_ranks:
            return False  # a one-process job that exits is not restarted
        exited = self.lead.session.target_exited_at
        now = time.time() if now is None else now
        return exited is not None and now - exited < RESTART_WAIT_S and self.launcher_alive()

    def rescan(self) -> None:
        job = find_job(self.launcher_pid)
        if not job.ranks or job.starting:
            return  # read again at the next rescan, once local rank 0 is up
        if self.until_ranks:
            if not job.multi_rank:
                return
            self._lead_the_ranks(job)
        lead = self.lead
        peers = [_mark_exited(p) for p in lead.peers]
        current = [r.pid for r in job.ranks]  # in rank order
        old = lead.session.target_pid
        launcher_led = old == self.launcher_pid
        if old not in current and (launcher_led or not process_alive(old)):
            # The lead exited and the launcher runs a new attempt (or aitop watched
            # the launcher itself, attached before its ranks started): its lowest
            # rank leads now, whether or not an earlier read already took it as a
            # peer (the new ranks can appear before the process probe sees the old
            # lead's exit).
            successor = current[0]
            for peer in peers:
                if peer.pid == successor and peer.source is not None:
                    peer.source.close()
            peers = [p for p in peers if p.pid != successor]
            lead.adopt_lead(successor, job)
            if launcher_led:
                lead.warnings.append(
                    f"the launcher (PID {old}) had no ranks when aitop attached (a restart or "
                    f"a rendezvous); they started: now leading with {job.label(successor)} "
                    f"(PID {successor})")
            else:
                self.restarts += 1
                lead.warnings.append(
                    f"the launcher (PID {self.launcher_pid}) restarted the job: now leading "
                    f"with {job.label(successor)} (PID {successor}); PID {old} exited")
        watched = {lead.session.target_pid, *(p.pid for p in peers)}
        new = [pid for pid in current if pid not in watched]
        if not new:
            lead.peers = peers
            return
        added = [self.make_peer(pid, job) for pid in new]
        if self._stop.is_set():  # aitop closed meanwhile: nobody would stop these
            for peer in added:
                if peer.source is not None:
                    peer.source.close()
            return
        lead.peers = [*peers, *added]
        lead.session.probe_status["ranks"] = ProbeStatus(
            "ok", f"{len(job.ranks)} ranks, re-read every {RESCAN_S:g} s")

    def _lead_the_ranks(self, job: Job) -> None:
        """The one-process job started ranks: its rank (Lightning's rank 0 is the
        process itself) or its lowest one (an mp.spawn parent only waits for them)
        leads, judging the job; ``rescan`` then watches the others."""
        self.until_ranks = False
        current = [r.pid for r in job.ranks]
        old = self.lead.session.target_pid
        successor = old if old in current else current[0]
        self.lead.adopt_lead(successor, job)
        self.lead.warnings.append(
            f"PID {self.launcher_pid} started {len(current)} ranks after aitop attached: "
            f"now leading with {job.label(successor)} (PID {successor})")


def _mark_exited(peer: RankPeer) -> RankPeer:
    """The peer, its status saying so once its process has exited (its probes stopped)."""
    source = peer.source
    if peer.status != "watched" or source is None or source.session.target_exited_at is None:
        return peer
    source.close()
    return RankPeer(peer.label, peer.pid, source, status="exited")

