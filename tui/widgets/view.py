"""What is on screen: a session, a diagnosis and the time ``now`` they are drawn at.

Every panel and screen draws from one ``View`` and nothing else, so a live
session, a paused display and a replay at a time cursor are the same code path:
only ``now`` and the diagnosis differ. Frozen, so a panel can keep the last one
it drew without anyone changing it underneath.
"""

from __future__ import annotations

from dataclasses import dataclass

from aitop.engine.live.job import Rank
from aitop.knowledge.base.findings import Diagnosis
from aitop.knowledge.evaluator import DEFAULT_WINDOW_S
from aitop.knowledge.judging.verdicts import Targets
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.session import Session


@dataclass(frozen=True)
class View:
    """One frame's worth of state."""

    session: Session
    diagnosis: Diagnosis | None
    now: float
    live: bool
    #: The run's knowledge base (the source's: the packaged one with ``--rules``),
    #: whose targets every panel's colour is judged against.
    knowledge: KnowledgeBase
    paused: bool = False
    refresh_s: float = 1.0
    #: Diagnoses so far (for the steps/s history when no step counter is read).
    history: tuple[Diagnosis, ...] = ()
    #: Seconds the current evaluation has been running, when it is slow.
    evaluating_for: float | None = None
    #: Replay only: the recording's first and last times.
    replay_range: tuple[float, float] | None = None
    playing: bool = False
    #: Every rank of a multi-rank job, the lead rank first (empty for one process).
    ranks: tuple[Rank, ...] = ()
    #: The rank shown when it is not the lead one ("rank 1"), else None.
    viewing: str | None = None

    @property
    def targets(self) -> Targets:
        """The targets a panel judges a value against (``verdicts``' second argument)."""
        return self.knowledge.facts.targets

    @property
    def window_s(self) -> float:
        """The aggregation window: the diagnosis's, else the evaluator's default."""
        if self.diagnosis is not None and self.diagnosis.window_s > 0:
            return self.diagnosis.window_s
        return DEFAULT_WINDOW_S

    @property
    def target_exited(self) -> bool:
        """Whether the target had exited by ``now``."""
        t = self.session.target_exited_at
        return t is not None and t <= self.now
