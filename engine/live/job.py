"""A job as readers see it: the lead rank, the other ranks beside it, and their rows.

aitop leads with one rank (the PID given, or rank 0 of a launcher) and watches
every other rank on this machine as a peer: each peer is a full DataSource of
its own (live: its own probes and evaluator; replayed: its own recording), so
the UI can open any rank's single-process view and the report can judge each.
A live job is a :class:`LiveJob`: the lead's source, the peers, and the
follower that keeps both up to date with the launcher. The job's judgement
(straggler, scores) is made once per evaluation by the lead's evaluator and
published with its diagnosis (a replay's, once per time asked); the rows here
only read it. A row (:class:`Rank`) is declared once: the UI draws it and the
report writes it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import msgspec
from aitop.engine.live.follow import JobFollower
from aitop.engine.live.rank import LiveSource, self_cpu_seconds
from aitop.engine.live.source import (
    Conclusion,
    DataSource,
    RankPeer,
    Timeline,
    peer_diagnosis,
    rank_label,
    watched_peers,
)
from aitop.knowledge.base.findings import Diagnosis
from aitop.knowledge.base.rules import Rule
from aitop.knowledge.evaluator import Evaluator
from aitop.knowledge.metrics.straggler import RankView, rank_view
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.ranks import Job
from aitop.probes.session import Session


class LiveJob:
    """A live attachment: the lead rank's source, its peers and the launcher's follower.

    Readers take ``session``, ``latest()`` and ``peers`` afresh each time: when
    the launcher restarts the job, the follower hands the lead to the new rank
    (``adopt_lead``) and readers carry on with it.
    """

    live = True

    def __init__(
        self,
        lead: LiveSource,
        peers: Sequence[RankPeer] = (),
        *,
        warnings: Sequence[str] = (),
        launcher_pid: int | None = None,
        make_peer: Callable[[int, Job], RankPeer] | None = None,
        rebuild: Callable[[int, Job], LiveSource] | None = None,
        until_ranks: bool = False,
    ) -> None:
        self.lead = lead
        #: The job's other ranks (the follower swaps the list whole as ranks come and go).
        self.peers: list[RankPeer] = list(peers)
        #: One line each: what the user should know (the PID watched, stacks off, restarts).
        self.warnings: list[str] = [*warnings, *lead.warnings]
        #: When the lead was built, and aitop's CPU then: the job's own cost since
        #: includes watching its peers.
        self.started_at = lead.started_at
        self.cpu_at_start = lead.cpu_at_start
        #: Set on close: stops what outlives one lead (the follower).
        self.closing = threading.Event()
        self._rebuild = rebuild
        self._closed = False
        #: Held while the lead is swapped and while closing: a lead built as aitop
        #: closes is closed, never left sampling, nor closed before it started.
        self._lead_lock = threading.Lock()
        #: How many times slower than its cadence each rank is watched (``set_pace``).
        self.pace = 1.0
        #: Follows the launcher's ranks (exits, elastic restarts) for a multi-rank job,
        #: and a one-process job (``until_ranks``) until it starts ranks of its own.
        self.follower = (JobFollower(self, launcher_pid, make_peer, self.closing,
                                     until_ranks=until_ranks)
                         if launcher_pid is not None and make_peer is not None else None)

    # ------------------------------------------------------------ DataSource

    @property
    def session(self) -> Session:
        return self.lead.session

    @property
    def evaluator(self) -> Evaluator:
        """The lead rank's evaluator (it judges the job as a whole)."""
        return self.lead.evaluator

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The rules the job is judged with (the packaged ones plus --rules files)."""
        return self.lead.evaluator.knowledge.rules.rules

    @property
    def knowledge(self) -> KnowledgeBase:
        return self.lead.knowledge

    def latest(self) -> Conclusion:
        return self.lead.latest()

    def at(self, t: float) -> Conclusion:
        return self.lead.at(t)

    def history(self) -> Sequence[Diagnosis]:
        return self.lead.history()

    def timeline(self) -> Timeline | None:
        return None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> LiveJob:
        self.lead.start()
        if self.follower is not None:
            self.follower.start()
        return self

    def conclude(self, now: float) -> Conclusion:
        """The job's last look at ``now`` (once the target exited: its last live verdict).

        Each watched rank first judges the stack window its py-spy flushed on
        close: a peer evaluates every few seconds, so its newest verdict would
        leave out up to a whole window of what it sampled. The lead then judges
        the job beside those verdicts.
        """
        for peer in watched_peers(self.peers):
            if peer.source is not None:
                peer.source.conclude(now)
        return self.lead.conclude(now)

    def read_steps_now(self) -> None:
        """The lead's last step reading (its counter is the job's pace)."""
        self.lead.read_steps_now()

    def cpu_percent(self) -> float:
        """aitop's own CPU use since attach, as % of one core (py-spy included)."""
        elapsed = max(time.time() - self.started_at, 1e-6)
        return 100.0 * (self_cpu_seconds() - self.cpu_at_start) / elapsed

    def set_pace(self, pace: float) -> None:
        """Watch every rank ``pace`` times less often than its cadence (the node agent)."""
        self.pace = pace
        self.lead.set_pace(pace)
        for peer in self.peers:
            if peer.source is not None:
                peer.source.set_pace(pace)

    def adopt_lead(self, pid: int, job: Job) -> None:
        """Lead with another rank (the lead's successor after an elastic restart).

        The exited rank's source is closed and its samples dropped; the new
        one's evaluator judges the job with the same peers.
        """
        assert self._rebuild is not None, "only a launcher's job is restarted"
        with self._lead_lock:
            if self._closed:
                return
            new = self._rebuild(pid, job)
            new.set_pace(self.pace)
            new.start()
            old, self.lead = self.lead, new
        old.close()

    @property
    def launcher_pid(self) -> int | None:
        """The launcher whose ranks are followed (None for a one-process job)."""
        follower = self.follower
        return None if follower is None or follower.until_ranks else follower.launcher_pid

    def awaiting_restart(self) -> bool:
        """Whether the lead rank exited and its launcher may restart it (headless waits)."""
        return self.follower is not None and self.follower.awaiting_restart()

    def close(self) -> None:
        with self._lead_lock:
            if self._closed:
                return
            self._closed = True
        self.closing.set()
        # Every rank stops at once (each close waits for its own threads).
        closing = [threading.Thread(target=p.source.close, name="aitop-close", daemon=True)
                   for p in self.peers if p.source is not None]
        for thread in closing:
            thread.start()
        self.lead.close()
        for thread in closing:
            thread.join()


class Rank(msgspec.Struct, frozen=True, kw_only=True):
    """One rank of a multi-rank job as the report judges it (engine/live/job.py)."""

    # The one declaration of a rank's row: the Ranks panel draws it, the report's
    # ``ranks`` is a list of them (rounded), and the JSON Schema is generated from
    # it (engine/reports/schema.py). A field's default is what a reader assumes
    # when a file leaves it out.
    label: str
    pid: int
    #: ``watched``, ``exited``, or why the rank could not be watched.
    status: str = "watched"
    phases: dict[str, float] | None = None
    comm_share: float | None = None
    steps_per_s: float | None = None
    cpu_percent: float | None = None
    gpu_mem_percent: float | None = None
    gpu_util_percent: float | None = None
    #: The GPUs the rank's processes hold memory on, ``"0,1"``.
    gpus: str | None = None
    straggler_score: float | None = None
    straggler: bool = False
    lead_finding: str | None = None
    cause: str | None = None


def rank_rows(source: DataSource, conclusion: Conclusion,
              t: float | None = None) -> list[Rank]:
    """Every rank of the job, the lead rank first (empty for one process).

    ``conclusion`` is the lead's (its judgement names the straggler); each
    peer is shown with its own newest diagnosis, or in a replay its own at ``t``.
    """
    peers = source.peers
    if not peers:
        return []
    when = None if source.live else t
    judgement = conclusion.judgement
    lead = source.session
    ranks: list[tuple[str, int, str, Diagnosis | None, Session | None]] = [
        (rank_label(lead), lead.target_pid, "watched", conclusion.diagnosis, lead)]
    for peer in peers:
        ranks.append((peer.label, peer.pid, peer.status, peer_diagnosis(peer, when),
                      peer.source.session if peer.source is not None else None))
    scores = judgement.scores if judgement is not None else {}
    straggler = judgement.straggler if judgement is not None else None
    flagged = straggler is not None and judgement is not None and judgement.flagged
    # The straggler's cause as the job's judgement says it (what it does beyond
    # the others), where no finding of its own names one.
    excess = judgement.excess_row() if judgement is not None and flagged else None
    straggler_pid = straggler.pid if straggler is not None else None
    rows = []
    for label, pid, status, d, session in ranks:
        # An exited rank keeps its last diagnosis for its own view, not for the job's.
        view = rank_view(label, pid, d if status == "watched" else None)
        m = d.metrics if d is not None else {}
        rows.append(Rank(
            label=label, pid=pid, status=status,
            phases=d.phases if d is not None else None,
            comm_share=view.comm_share, steps_per_s=view.steps_per_s,
            cpu_percent=m.get("proc_cpu_mean"),
            gpu_mem_percent=m.get("gpu_mem_used_mean"),
            gpu_util_percent=m.get("gpu_util_mean"),
            gpus=_gpus_used(session) or None,
            straggler_score=scores.get(pid),
            straggler=flagged and pid == straggler_pid,
            lead_finding=view.cause.id if view.cause is not None else None,
            cause=_cause(view, excess if pid == straggler_pid else None),
        ))
    return rows


def _cause(view: RankView, as_judged: str | None) -> str | None:
    """A rank's own cause: its lead finding's title, else (the straggler) what the
    job's judgement says it does beyond the others, else its top phase."""
    return view.cause.title if view.cause is not None else as_judged or view.top_phase


def _gpus_used(session: Session | None) -> str:
    """The indices of the GPUs the rank's own processes use, from its newest GPU sample."""
    sample = session.gpu.last() if session is not None else None
    if sample is None:
        return ""
    return ",".join(str(d.index) for d in sample.devices
                    if any(p.in_target for p in d.processes))
