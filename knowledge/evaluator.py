"""Evaluating the knowledge base against a session, one window at a time."""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from aitop.probes.session import Session

from .base.catalogue import SCALARS, SERIES
from .base.findings import COLLECTING, UNKNOWN, Diagnosis
from .judging.diagnosis import Diagnoser
from .metrics.packed import PackedMetrics
from .metrics.private_memory import process_memory
from .metrics.straggler import (
    JobJudgement,
    RankView,
    holds_back_condition,
    judge_ranks,
    rank_view,
)
from .metrics.window import compute_metrics
from .metrics.words import compute_words
from .reading.loader import KnowledgeBase

#: Default evaluation window: long enough for ~400 stack samples at 20 Hz.
DEFAULT_WINDOW_S = 20.0
#: Diagnoses made this close before the target's exit was seen are not kept as
#: its verdict: the exit is seen up to one process-tree interval (2 s headless)
#: late, and the workers stop about a second before the main process.
DISCARD_BEFORE_EXIT_S = 3.0
#: Full diagnoses kept beside the compact history: more than the grace period's.
RECENT_FULL = 16
#: Diagnoses kept for export (one every 2 s: two hours).
HISTORY = 3600

#: Metrics a diagnosis keeps once it is history: every scalar and each series'
#: window mean. The newest diagnosis keeps all ~200; keeping all in every
#: history entry made a 10-minute session grow by ~15 MB.
HISTORY_METRICS: frozenset[str] = frozenset(
    [name for name, _unit, _desc in SCALARS] + [f"{name}_mean" for name, *_ in SERIES]
)


def compact(diagnosis: Diagnosis) -> Diagnosis:
    """The diagnosis as history keeps it: the same, with fewer metrics, packed."""
    kept = {k: v for k, v in diagnosis.metrics.items() if k in HISTORY_METRICS}
    return dataclasses.replace(diagnosis, metrics=PackedMetrics(kept))


@dataclass(frozen=True)
class Published:
    """What the evaluator has concluded so far: an immutable value, swapped whole.

    Readers (the UI's event loop, an export) take the current reference and
    never wait on an evaluation in progress, however long it runs.
    """

    latest: Diagnosis | None = None
    #: Oldest first; only the newest entry keeps every metric.
    history: tuple[Diagnosis, ...] = ()


class Evaluator:
    """Turns the newest window of a session into a Diagnosis, keeping rule state."""

    def __init__(
        self,
        session: Session,
        knowledge: KnowledgeBase,
        window_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        self.session = session
        self.window_s = window_s
        self.knowledge = knowledge
        self.diagnoser = Diagnoser(knowledge.rules, knowledge.facts)
        self._history: deque[Diagnosis] = deque(maxlen=HISTORY)
        self._published = Published()
        #: The job's other ranks, each as its own evaluator last saw it; set for
        #: the rank that judges a multi-rank job as a whole.
        self.peers: Callable[[], Sequence[RankView]] | None = None
        #: The newest judgement of the whole job (None for a single process).
        self.judgement: JobJudgement | None = None
        #: For a rank another rank's evaluator judges the job for: that
        #: evaluator's newest judgement, which this rank hears (``_hear_job``).
        self.job_judgement: Callable[[], JobJudgement | None] | None = None
        #: The newest diagnoses with every metric (history keeps them compacted),
        #: so the verdict kept after an exit still has all of its metrics.
        self._recent_full: deque[Diagnosis] = deque(maxlen=RECENT_FULL)
        #: Serialises evaluations (the rules keep for/keep_firing_for state);
        #: readers never take it.
        self._evaluating = threading.Lock()

    def evaluate(self, now: float) -> Diagnosis:
        with self._evaluating:
            kept = self._last_live_verdict(now)
            if kept is not None:
                return kept
            # Read once for both: a minute of every process's readings.
            memory = process_memory(self.session, now)
            metrics = compute_metrics(self.session, now, self.window_s,
                                      self.knowledge.phases.helper_threads, memory)
            words = compute_words(self.session, now, self.window_s, memory)
            if self.peers is not None:
                self._judge_job(metrics, words)
            elif self.job_judgement is not None:
                self._hear_job(metrics, words)
            diagnosis = self._explain_missing_stacks(
                self.diagnoser.diagnose(metrics, now, words)
            )
            if self._history:
                self._history[-1] = compact(self._history[-1])
            self._history.append(diagnosis)
            self._recent_full.append(diagnosis)
            self._published = Published(diagnosis, tuple(self._history))
            return diagnosis

    def _judge_job(self, metrics: dict[str, float | None], words: dict[str, str]) -> None:
        """Add the job-level numbers (straggler, waits) to this rank's metrics and words."""
        assert self.peers is not None
        pid = self.session.target_pid
        job = self.session.job
        label = job.label(pid) if job is not None else f"PID {pid}"
        own = dataclasses.replace(
            rank_view(label, pid, self.latest()),
            comm_share=metrics.get("comm_share"), steps_per_s=metrics.get("steps_per_s"),
        )
        judgement = judge_ranks([own, *self.peers()], holds_back_condition(self.knowledge))
        metrics.update(judgement.metrics())
        metrics.update(judgement.seen_from(pid))
        words.update(judgement.words())
        self.judgement = judgement

    def _hear_job(self, metrics: dict[str, float | None], words: dict[str, str]) -> None:
        """What the job's judgement (made by the lead rank) says of this rank: whether
        it waits for a straggler, which one and why; the job-level numbers stay the
        lead's."""
        assert self.job_judgement is not None
        judgement = self.job_judgement()
        if judgement is None:
            return
        metrics.update(judgement.seen_from(self.session.target_pid))
        words.update(judgement.words())

    def _last_live_verdict(self, now: float) -> Diagnosis | None:
        """Once the target has exited, the last diagnosis made on live samples.

        A job's last seconds are not its training: its DataLoader workers stop
        first (the window then reads "0 workers"), its stacks go quiet, and a new
        diagnosis would blame a job that had workers all along. After the exit
        the verdict stays the one made ``DISCARD_BEFORE_EXIT_S`` before it, and
        the history drops what came after, so exports carry that verdict.
        """
        exited = self.session.target_exited_at
        if exited is None or now <= exited:
            return None
        cutoff = exited - DISCARD_BEFORE_EXIT_S
        while len(self._history) > 1 and self._history[-1].t > cutoff:
            self._history.pop()
        if not self._history:
            return None
        last = next((d for d in self._recent_full if d.t == self._history[-1].t),
                    self._history[-1])
        self._history[-1] = last
        if self._published.latest is not last:
            self._published = Published(last, tuple(self._history))
        return last

    def _explain_missing_stacks(self, diagnosis: Diagnosis) -> Diagnosis:
        """Without stacks there is nothing to collect: say why instead of "Collecting"."""
        stacks = self.session.probe_status.get("stacks")
        if diagnosis.findings or stacks is None or stacks.state != "unavailable":
            return diagnosis
        return dataclasses.replace(
            diagnosis,
            category=UNKNOWN if diagnosis.category == COLLECTING else diagnosis.category,
            summary=f"No step phases: {stacks.detail}. "
            "GPU, CPU, memory and I/O are still watched",
        )

    def published(self) -> Published:
        """The latest conclusions, without waiting for an evaluation in progress."""
        return self._published

    def history(self) -> tuple[Diagnosis, ...]:
        """All kept diagnoses, oldest first; only the newest has every metric."""
        return self._published.history

    def latest(self) -> Diagnosis | None:
        return self._published.latest
