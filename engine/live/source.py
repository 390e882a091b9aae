"""Where readers' data comes from: the ``DataSource`` contract and its replay side.

A reader (the UI, a report, an export) never touches probes or rules. It reads
``source.session`` (filled continuously by probe threads when live, loaded from
a file for a replay) and what the source has concluded about it, a
:class:`Conclusion`: the diagnosis and, for a multi-rank job, the job's
judgement. A live source evaluates on its own thread and publishes each
conclusion whole; ``latest()`` hands over the reference and never waits for an
evaluation in progress, so no reader needs a thread of its own to ask.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from aitop.engine.live.series import typical_interval
from aitop.knowledge.base.findings import Diagnosis
from aitop.knowledge.metrics.straggler import (
    JobJudgement,
    RankView,
    holds_back_condition,
    judge_ranks,
    rank_view,
)
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.session import Session, sample_time


@dataclass(frozen=True)
class Conclusion:
    """What a source has concluded, published as one immutable value.

    A live source swaps a new one in when an evaluation starts, lands or fails,
    so that its fields always belong together.
    """

    diagnosis: Diagnosis | None = None
    #: The job as a whole (straggler, scores), judged with this diagnosis; None
    #: for a single process.
    judgement: JobJudgement | None = None
    #: ``time.monotonic()`` when the evaluation now running started; None when none runs.
    evaluating_since: float | None = None
    #: Why the last evaluation failed ("RuntimeError: ..."), None once one succeeds.
    error: str | None = None


#: Nothing concluded yet.
NOTHING = Conclusion()


@dataclass(frozen=True)
class Timeline:
    """The span a replay's time cursor moves over, and one step of it."""

    start: float
    end: float
    #: The typical sampling period of the recording.
    step_s: float


@runtime_checkable
class DataSource(Protocol):
    """What readers need from a live attachment or a recording."""

    #: ``False`` for a replay (the UI then shows a time cursor over ``timeline()``).
    live: bool

    @property
    def session(self) -> Session:
        """The watched rank's samples (live: being filled; read it afresh each time)."""
        ...

    @property
    def peers(self) -> Sequence[RankPeer]:
        """The job's other ranks, each a source of its own (empty for one process)."""
        ...

    @property
    def knowledge(self) -> KnowledgeBase:
        """The run's knowledge base (the packaged one with the user's ``--rules``),
        loaded once where the command starts: what every reader judges with."""
        ...

    def latest(self) -> Conclusion:
        """The newest conclusion: live, the one last published (never waits for an
        evaluation in progress); a replay, its last recorded diagnosis."""
        ...

    def conclude(self, now: float) -> Conclusion:
        """The last look, after ``close``: live, one more evaluation at ``now`` with
        every sample taken (once the target exited, its last live verdict); a
        replay, its last recorded conclusion."""
        ...

    def at(self, t: float) -> Conclusion:
        """The conclusion made at or before ``t`` (a replay's time cursor)."""
        ...

    def history(self) -> Sequence[Diagnosis]:
        """Diagnoses so far, oldest first (bounded; only the newest keeps every
        metric), for exports and timelines. Never waits either."""
        ...

    def timeline(self) -> Timeline | None:
        """The recorded span a cursor moves over; None when live or empty."""
        ...

    def set_pace(self, pace: float) -> None:
        """Read the job ``pace`` times less often than its cadence (1: as configured);
        the node agent shares its cost among jobs with it. A replay reads nothing."""
        ...

    def close(self) -> None:
        """Stop collecting; idempotent."""
        ...


@dataclass
class RankPeer:
    """One other rank of a multi-rank job: how it is named, and what watches it."""

    label: str
    pid: int
    #: None when the rank could not be watched at all (``status`` says why).
    source: DataSource | None
    #: "watched", or why not ("gone", "not a Python process", ...).
    status: str = "watched"


def watched_peers(peers: Sequence[RankPeer]) -> list[RankPeer]:
    """The peers still watched (exited ones leave the job's judgement)."""
    return [p for p in peers if p.status == "watched"]


def rank_label(session: Session) -> str:
    """A rank's name ("rank 0"), or its PID outside a multi-rank job."""
    job = session.job
    pid = session.target_pid
    return job.label(pid) if job is not None and job.multi_rank else f"PID {pid}"


def peer_diagnosis(peer: RankPeer, t: float | None = None) -> Diagnosis | None:
    """A peer's diagnosis: its newest (``t`` None), or its own at ``t``."""
    if peer.source is None:
        return None
    return (peer.source.latest() if t is None else peer.source.at(t)).diagnosis


def peer_views(peers: Sequence[RankPeer], t: float | None = None) -> list[RankView]:
    """Each peer as its diagnosis (newest, or at ``t``) sees it; an exited or
    unwatched rank is listed without one (it keeps its diagnosis for its own view)."""
    return [rank_view(p.label, p.pid, peer_diagnosis(p, t) if p.status == "watched" else None)
            for p in peers]


def judge_at(session: Session, lead: Diagnosis | None, peers: Sequence[RankPeer],
             knowledge: KnowledgeBase, t: float | None = None) -> JobJudgement | None:
    """The job as a whole: the lead's diagnosis beside each peer's, judged with
    ``knowledge``'s straggler cut; None for one process."""
    if not peers:
        return None
    own = rank_view(rank_label(session), session.target_pid, lead)
    return judge_ranks([own, *peer_views(peers, t)], holds_back_condition(knowledge))


@dataclass
class ReplayInfo:
    """Facts about a recording that are not samples."""

    path: Path | None = None
    aitop_version: str | None = None
    written_at: float | None = None
    #: Whether the recording was made from a live attachment.
    recorded_live: bool = True


class ReplaySource:
    """A recorded session: samples plus the diagnoses that were made at the time.

    Rules are never re-run: a replay shows what aitop concluded then, so that a
    report and its recording always agree. The job's judgement at a time is
    made from every rank's recorded diagnosis then, once per time asked, with
    the straggler cut of ``knowledge`` (the replaying run's: its ``--rules``).
    """

    live = False

    def __init__(
        self,
        session: Session,
        diagnoses: Sequence[Diagnosis],
        info: ReplayInfo | None = None,
        peers: Sequence[RankPeer] = (),
        *,
        knowledge: KnowledgeBase,
    ) -> None:
        self._session = session
        self._knowledge = knowledge
        #: The job's other ranks, each replayed from its own recording.
        self._peers = tuple(peers)
        self._diagnoses = tuple(sorted(diagnoses, key=lambda d: d.t))
        self._times = [d.t for d in self._diagnoses]
        self.info = info or ReplayInfo()
        self._timeline: tuple[Timeline | None] | None = None
        self._at: tuple[float, Conclusion] | None = None
        self._latest: Conclusion | None = None

    @property
    def session(self) -> Session:
        return self._session

    @property
    def peers(self) -> Sequence[RankPeer]:
        return self._peers

    @property
    def knowledge(self) -> KnowledgeBase:
        return self._knowledge

    def at(self, t: float) -> Conclusion:
        if self._at is not None and self._at[0] == t:
            return self._at[1]
        i = bisect.bisect_right(self._times, t)
        diagnosis = self._diagnoses[i - 1] if i else None
        conclusion = Conclusion(diagnosis, judge_at(self._session, diagnosis, self._peers,
                                                     self._knowledge, t))
        self._at = (t, conclusion)
        return conclusion

    def conclude(self, now: float) -> Conclusion:
        """What was concluded last: a recording is never judged again."""
        return self.latest()

    def latest(self) -> Conclusion:
        """The last recorded diagnosis, judged beside each rank's at the recording's end."""
        if self._latest is None:
            last = self._diagnoses[-1] if self._diagnoses else None
            end = self._session.latest_time() or (last.t if last is not None else 0.0)
            self._latest = Conclusion(last, judge_at(self._session, last, self._peers,
                                                        self._knowledge, end))
        return self._latest

    def history(self) -> Sequence[Diagnosis]:
        return self._diagnoses

    def timeline(self) -> Timeline | None:
        if self._timeline is None:
            self._timeline = (self._span(),)
        return self._timeline[0]

    def set_pace(self, pace: float) -> None:
        """Nothing to pace: a replay samples nothing."""

    def close(self) -> None:
        """Nothing to release: a replay holds only memory."""

    # ---------------------------------------------------------- time cursor

    def sample_times(self) -> list[float]:
        """Every distinct time at which something was recorded, ascending."""
        times: set[float] = set(self._times)
        for ring in self._session.rings().values():
            times.update(sample_time(s) for s in ring.items())
        return sorted(times)

    def _span(self) -> Timeline | None:
        times = self.sample_times()
        if not times:
            return None
        host = [s.t for s in self._session.host.items()]
        return Timeline(times[0], times[-1], typical_interval(host or times))
