"""Evaluating the knowledge base against a session, one window at a time."""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from dataclasses import dataclass

from aitop.probes.session import Session

from .diagnosis import Diagnoser
from .facts import Facts
from .metrics import SCALARS, SERIES, compute_metrics
from .model import Diagnosis
from .rules import RuleSet

#: Default evaluation window: long enough for ~400 stack samples at 20 Hz.
DEFAULT_WINDOW_S = 20.0
#: Diagnoses kept for export (one a second: two hours).
HISTORY = 7200

#: Metrics a diagnosis keeps once it is history: every scalar and each series'
#: window mean. The newest diagnosis keeps all ~200; keeping all in every
#: history entry made a 10-minute session grow by ~15 MB.
HISTORY_METRICS: frozenset[str] = frozenset(
    [name for name, _unit, _desc in SCALARS] + [f"{name}_mean" for name, *_ in SERIES]
)


def compact(diagnosis: Diagnosis) -> Diagnosis:
    """The diagnosis as history keeps it: the same, with fewer metrics."""
    kept = {k: v for k, v in diagnosis.metrics.items() if k in HISTORY_METRICS}
    return dataclasses.replace(diagnosis, metrics=kept)


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
        ruleset: RuleSet,
        facts: Facts,
        window_s: float = DEFAULT_WINDOW_S,
    ) -> None:
        self.session = session
        self.window_s = window_s
        self.diagnoser = Diagnoser(ruleset, facts)
        self._history: deque[Diagnosis] = deque(maxlen=HISTORY)
        self._published = Published()
        #: Serialises evaluations (the rules keep for/keep_firing_for state);
        #: readers never take it.
        self._evaluating = threading.Lock()

    def evaluate(self, now: float) -> Diagnosis:
        with self._evaluating:
            metrics = compute_metrics(self.session, now, self.window_s)
            diagnosis = self.diagnoser.diagnose(metrics, now)
            if self._history:
                self._history[-1] = compact(self._history[-1])
            self._history.append(diagnosis)
            self._published = Published(diagnosis, tuple(self._history))
            return diagnosis

    def published(self) -> Published:
        """The latest conclusions, without waiting for an evaluation in progress."""
        return self._published

    def history(self) -> tuple[Diagnosis, ...]:
        """All kept diagnoses, oldest first; only the newest has every metric."""
        return self._published.history

    def latest(self) -> Diagnosis | None:
        return self._published.latest
