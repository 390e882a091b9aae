"""Evaluating the knowledge base against a session, one window at a time."""

from __future__ import annotations

import dataclasses
import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path

from aitop.probes.session import Session

from .diagnosis import Diagnoser, Facts
from .metrics import SCALARS, SERIES, compute_metrics
from .model import Diagnosis
from .rules import RuleSet, load_rules

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
        self._latest: Diagnosis | None = None
        self._lock = threading.Lock()

    def evaluate(self, now: float) -> Diagnosis:
        with self._lock:
            metrics = compute_metrics(self.session, now, self.window_s)
            diagnosis = self.diagnoser.diagnose(metrics, now)
            if self._latest is not None:
                self._history[-1] = compact(self._latest)
            self._history.append(diagnosis)
            self._latest = diagnosis
            return diagnosis

    def history(self) -> list[Diagnosis]:
        """All kept diagnoses, oldest first; only the newest has every metric."""
        with self._lock:
            return list(self._history)

    def latest(self) -> Diagnosis | None:
        with self._lock:
            return self._latest


def default_evaluator(
    session: Session, rule_files: Iterable[Path] = (), window_s: float = DEFAULT_WINDOW_S
) -> Evaluator:
    """The packaged knowledge base (plus the user's rule files) over a session."""
    from .facts import load_facts

    return Evaluator(session, load_rules(rule_files), load_facts(), window_s)
