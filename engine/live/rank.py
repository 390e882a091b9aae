"""One watched rank, live: its probes filling a session, and rules evaluated on a thread.

A :class:`LiveSource` is built whole (``attach`` builds every part first) and
then started. Its evaluation loop is the only writer of what it concludes: each
evaluation publishes a :class:`~aitop.engine.live.source.Conclusion` (the
diagnosis, and the job's judgement for the rank that judges a multi-rank job),
swapped in whole; readers take the current reference and never wait.
"""

from __future__ import annotations

import bisect
import dataclasses
import resource
import threading
import time
from collections import deque
from collections.abc import Sequence

from aitop.engine.live.source import NOTHING, Conclusion, RankPeer, Timeline
from aitop.knowledge.base.findings import Diagnosis
from aitop.knowledge.evaluator import RECENT_FULL, Evaluator
from aitop.knowledge.metrics.straggler import JobJudgement
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.cadence import UI
from aitop.probes.collector import Collector, PeriodicTask
from aitop.probes.host import HostProbe
from aitop.probes.kernel.procfs import read_rss_bytes
from aitop.probes.session import Session


def self_cpu_seconds() -> float:
    """CPU seconds of aitop and of every child it has reaped (py-spy runs)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def self_rss_bytes() -> int:
    """aitop's current resident memory."""
    rss = read_rss_bytes("self")
    return rss if rss is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class SharedHost:
    """The machine-wide host probe, sampled once for every rank's session.

    Host samples (CPU per core, RAM, load) are the same for every rank on the
    machine; the lead rank's collector samples them and each peer's session
    receives the same sample.
    """

    def __init__(self, probe: HostProbe) -> None:
        self.probe = probe
        self._sessions: list[Session] = []

    def subscribe(self, session: Session) -> None:
        self._sessions = [*self._sessions, session]

    def subscribe_all(self, sessions: Sequence[Session]) -> None:
        self._sessions = [*self._sessions, *sessions]

    def sample(self) -> object:
        sample = self.probe.sample()
        for session in self._sessions:
            session.add(sample)
        return sample


class LiveSource:
    """One rank's probes filling a session, plus a periodic evaluator: a live DataSource.

    Evaluated every second while the first verdict forms (a rule's ``for:`` is
    confirmed a second sooner), then every ``evaluate_every_s``.
    """

    live = True

    def __init__(
        self,
        session: Session,
        collector: Collector,
        evaluator: Evaluator,
        *,
        evaluate_every_s: float = UI.evaluate_every_s,
        evaluate_warmup_s: float = UI.evaluate_warmup_s,
        warnings: Sequence[str] = (),
        host: SharedHost | None = None,
    ) -> None:
        self._session = session
        self.collector = collector
        self.evaluator = evaluator
        #: Why something is off or incomplete for this rank (stacks, ...), one line each.
        self.warnings: tuple[str, ...] = tuple(warnings)
        #: The host probe this rank's collector samples (the lead) or shares (a peer).
        self.host = host
        self.started_at = time.time()
        self.cpu_at_start = self_cpu_seconds()
        self._closed = False
        #: What the evaluator had concluded before this source was built, if anything.
        self._published = Conclusion(evaluator.latest(), evaluator.judgement)
        #: The judgement made with each recent diagnosis: the verdict kept after
        #: the target's exit is published with its own, not a later one's.
        self._judged: deque[tuple[Diagnosis, JobJudgement | None]] = deque(maxlen=RECENT_FULL)
        #: Serialises evaluate-and-publish (the loop, and ``conclude`` at the end).
        self._publishing = threading.Lock()
        self._every_s = evaluate_every_s
        self._warmup_s = evaluate_warmup_s
        self._eval_loop = PeriodicTask(
            "diagnosis",
            self._evaluate_on_schedule,
            min(1.0, evaluate_every_s) if evaluate_warmup_s > 0 else evaluate_every_s,
            session.probe_status,
            collector.stop_event,
        )

    # ------------------------------------------------------------ DataSource

    @property
    def session(self) -> Session:
        return self._session

    @property
    def peers(self) -> Sequence[RankPeer]:
        """A rank alone has none (a job's are :class:`~aitop.engine.live.job.LiveJob`'s)."""
        return ()

    @property
    def knowledge(self) -> KnowledgeBase:
        """The knowledge base its evaluator judges with (loaded once by ``attach``)."""
        return self.evaluator.knowledge

    def latest(self) -> Conclusion:
        return self._published

    def at(self, t: float) -> Conclusion:
        """The newest conclusion made at or before ``t``; older ones come from the
        history (compacted, judged no more)."""
        latest = self._published
        if latest.diagnosis is None or latest.diagnosis.t <= t:
            return latest
        history = self.evaluator.history()
        i = bisect.bisect_right([d.t for d in history], t)
        return Conclusion(history[i - 1]) if i else NOTHING

    def history(self) -> Sequence[Diagnosis]:
        return self.evaluator.history()

    def timeline(self) -> Timeline | None:
        return None

    # ------------------------------------------------------------ lifecycle

    def start(self) -> LiveSource:
        self.collector.start()
        self._eval_loop.start()
        return self

    def set_pace(self, pace: float) -> None:
        """Sample and judge ``pace`` times less often (``Collector.set_pace``)."""
        self.collector.set_pace(pace)
        self._eval_loop.pace = max(1.0, pace)

    def read_steps_now(self) -> None:
        """One more step reading before a headless report (``Collector.read_steps_now``)."""
        if not self._closed:
            self.collector.read_steps_now()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.collector.stop()
        if self._eval_loop.thread.ident is not None:  # closed before it started: nothing runs
            self._eval_loop.thread.join(timeout=2.0)

    # ------------------------------------------------------------ evaluating

    def conclude(self, now: float) -> Conclusion:
        """Evaluate once more at ``now``, here and now, and publish (a headless
        run's last look, after the probes stopped)."""
        return self._evaluate(now)

    def _evaluate_on_schedule(self) -> None:
        now = time.time()
        self._evaluate(now)
        if now - self.started_at >= self._warmup_s:
            self._eval_loop.interval_s = self._every_s

    def _evaluate(self, now: float) -> Conclusion:
        with self._publishing:
            self._published = dataclasses.replace(self._published,
                                                  evaluating_since=time.monotonic())
            try:
                diagnosis = self.evaluator.evaluate(now)
            except Exception as exc:  # published for the UI, then the loop backs off
                self._published = dataclasses.replace(
                    self._published, evaluating_since=None,
                    error=f"{type(exc).__name__}: {exc}")
                raise
            paired = next((pair for pair in self._judged if pair[0] is diagnosis), None)
            if paired is None:
                paired = (diagnosis, self.evaluator.judgement)
                self._judged.append(paired)
            self._published = Conclusion(diagnosis, paired[1])
            return self._published
