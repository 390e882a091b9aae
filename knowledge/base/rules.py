"""Diagnostic rules, shaped like Prometheus alerting rules, and their evaluation.

A rule has a name, a condition over window metrics, a ``for:`` duration (the
condition must hold that long before the rule fires), ``keep_firing_for:`` (once
firing it stays until the condition has been false that long: hysteresis, so a
finding does not flap on and off with every noisy window), a severity, the
bottleneck category, concrete actions and the source in the documents.

This module is the model and the engine; ``rules_reader`` reads rule files into
it and ``loader`` puts the packaged and the user's files together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from .documents import Threshold
from .expressions import Condition, ExpressionError
from .findings import Category, Severity

#: How a rule's gain is estimated (see GainSpec).
EstimateMethod = Literal["amdahl", "parallel", "workers", "worker_core", "offload", "quota",
                         "fewer", "shrink", "no_sync", "document", "none"]
#: Frameworks whose own words a rule may use for its actions.
FRAMEWORKS = ("hf_trainer", "lightning", "accelerate")
#: Metrics read from the stack windows' phase shares begin so (``phase_data_wait``).
PHASE_METRIC_PREFIX = "phase_"


@dataclass(frozen=True)
class GainSpec:
    """How a finding's gain is estimated.

    ``amdahl``: removing a fraction ``removable`` (low..high) of the time in
    ``metric`` (a phase fraction) bounds the speed-up at 1 / (1 - p * removable);
    with ``samples`` (the metric holding the count the share was read over) the
    bound takes the share's sampling error into account (gains.py).
    ``parallel``: Amdahl with the phase ``metric`` run ``factor`` times wider.
    ``workers``: more DataLoader workers, limited by the free cores (gains.py).
    ``offload``: the phase ``metric`` moved off the thread that sets the pace,
    onto the free cores (gains.py).
    ``quota``: the job's CPU quota raised to what it would use (``quota_target``).
    ``fewer``: the phase ``metric`` run ``times`` times less often.
    ``shrink``: predicted, the phase ``metric`` cut by ``removable`` (low..high):
    a faster implementation of the same work (a fused optimizer update).
    ``no_sync``: a ceiling, the all-reduces of all but the last of a step's
    backward passes removed (gradient accumulation inside ``no_sync()``).
    ``document``: the documents' figure for ``technique`` (resolved against the
    knowledge base's technique effects). ``none``: the benefit is not speed.
    """

    method: EstimateMethod
    metric: str | None = None
    removable: tuple[float, float] = (1.0, 1.0)
    technique: str | None = None
    #: For ``parallel``: the metric saying how many times wider the phase could run.
    factor: str | None = None
    #: For ``fewer``: how many times less often the action runs the phase.
    times: float = 1.0
    #: For ``fewer``: how much faster the rest of the step may run once the phase
    #: is rarer (the high end of the range; 1.0 = pure Amdahl).
    rest_speedup: float = 1.0
    #: For ``amdahl``: the metric holding how many stack samples ``metric`` was read over.
    samples: str | None = None
    #: For ``amdahl``: metrics in % of a core of the training process, time the
    #: action removes beside the phase (workers kept alive also stop the kernel's
    #: forks and page copies, which no stack sample shows), added to the share.
    also_removes: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class StateSpec:
    """When a row of the priority framework applies to the job, and where it is shown."""

    id: str
    condition: Condition
    file: str
    line: int
    #: Not shown for a job without a GPU (the compute share is no stand-in for it).
    gpu_only: bool = False
    #: Bottleneck categories for which this row is shown first.
    leads_for: tuple[Category, ...] = ()
    #: Shown after the other rows unless it leads.
    last: bool = False
    #: The documents' own conditions of the row, where ``condition`` is built from them.
    thresholds: tuple[Threshold, ...] = ()
    #: While this row holds, the hardware that computes is well used (the
    #: documents: above 85 % "the GPU is already well-utilized").
    well_used: bool = False
    #: The keys its file gave: a later file's entry of the same id changes only
    #: those (a user's ``expr`` keeps the packaged row's place and GPU rule).
    given: frozenset[str] = field(default=frozenset(), compare=False)


@dataclass(frozen=True)
class Rule:
    id: str
    condition: Condition
    for_s: float
    keep_firing_for_s: float
    severity: Severity
    category: Category
    title: str
    why: str
    actions: tuple[str, ...]
    gain: GainSpec
    source: Mapping[str, str]
    evidence: tuple[str, ...]
    snippet: str | None = None
    techniques: tuple[str, ...] = ()
    #: Whether this finding can name the bottleneck (advisory ones cannot).
    bottleneck: bool = True
    file: str = ""
    line: int = 0
    #: Rules whose finding this one explains (a symptom it is the culprit of).
    explains: tuple[str, ...] = ()
    #: One entry per action: the condition under which it applies, or None.
    actions_when: tuple[Condition | None, ...] = ()
    #: Actions and snippets in a framework's own words ("hf_trainer", "lightning"),
    #: with each action's condition as in ``actions_when``.
    actions_for: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    actions_for_when: Mapping[str, tuple[Condition | None, ...]] = field(default_factory=dict)
    snippet_for: Mapping[str, str] = field(default_factory=dict)
    #: Rules whose finding, when it fires, rules out this one's mechanism: this
    #: finding then carries no gain and cannot lead (more compute threads cannot
    #: help a training thread that waits for the GIL).
    ruled_out_by: tuple[str, ...] = ()
    #: A job state (warming up): while it fires, it is the verdict and the
    #: steady-state findings (and their predictions) are held back.
    job_state: bool = False


@dataclass
class RuleState:
    """Where one rule stands: pending since, firing since, last true."""

    pending_since: float | None = None
    firing_since: float | None = None
    last_true: float | None = None
    last_value: bool | None = None


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    states: tuple[StateSpec, ...] = ()
    files: tuple[str, ...] = field(default_factory=tuple)
    #: The named conditions (``conditions:``) the rules were read with.
    conditions: Mapping[str, Condition] = field(default_factory=dict)

    def well_used_band(self) -> tuple[Threshold, ...]:
        """The documents' thresholds above which the computing hardware is well used."""
        return next((s.thresholds for s in self.states if s.well_used), ())


def reads_stacks(rule: Rule) -> bool:
    """Whether the rule's condition reads the training thread's phase shares."""
    return any(name.startswith(PHASE_METRIC_PREFIX) for name in rule.condition.names)


class RuleEngine:
    """Evaluates a rule set tick by tick, keeping each rule's for/keep-firing state."""

    def __init__(self, ruleset: RuleSet) -> None:
        self.ruleset = ruleset
        self.state: dict[str, RuleState] = {r.id: RuleState() for r in ruleset.rules}
        #: Rules with a hold whose condition reads the training thread's phase
        #: shares (one with no ``for:`` fires on the window it reads, by design).
        self._on_stacks = frozenset(r.id for r in ruleset.rules
                                    if r.for_s > 0 and reads_stacks(r))

    def step(self, metrics: Mapping[str, float | None], now: float) -> list[tuple[Rule, float]]:
        """Advance every rule to ``now``; return the firing ones with when they fired."""
        firing: list[tuple[Rule, float]] = []
        for rule in self.ruleset.rules:
            st = self.state[rule.id]
            try:
                value = rule.condition.evaluate(metrics)
            except ExpressionError:
                value = None
            st.last_value = value
            if value:
                st.last_true = now
                if st.pending_since is None:
                    st.pending_since = now
                if (st.firing_since is None and now - st.pending_since >= rule.for_s
                        and self._confirmed(rule, st.pending_since, metrics, now)):
                    st.firing_since = now
            else:
                st.pending_since = None
                # Unknown (None) data does not clear a firing rule by itself: a
                # probe hiccup is not evidence that the problem went away.
                if st.firing_since is not None and value is False and (
                    st.last_true is None or now - st.last_true >= rule.keep_firing_for_s
                ):
                    st.firing_since = None
            if st.firing_since is not None:
                firing.append((rule, st.firing_since))
        return firing

    def _confirmed(self, rule: Rule, since: float, metrics: Mapping[str, float | None],
                   now: float) -> bool:
        """Whether a stack window that ended after ``since`` has been read, for a
        rule over the phase shares (any other rule: always).

        Phase shares change only when a stack window arrives, and the first one
        stands for about 6 s, longer than most holds: a hold it alone met would
        fire on one window's reading (29 samples: a 5 % phase reaches a 15 % cut, 5
        samples, about 1 time in 70). The next window must agree first, unless
        the job has exited: no window comes after it, and what was read stands
        (a short job's report kept "collecting" where its data wait was plain).
        """
        if rule.id not in self._on_stacks or metrics.get("target_alive") == 0.0:
            return True
        age = metrics.get("stacks_age_s")
        return age is None or now - age > since

    def pending(self, now: float) -> list[tuple[Rule, float]]:
        """Rules whose condition holds but whose ``for:`` has not elapsed yet, with
        how long it has held."""
        out = []
        for rule in self.ruleset.rules:
            st = self.state[rule.id]
            if st.firing_since is None and st.pending_since is not None:
                out.append((rule, now - st.pending_since))
        return out

    def waiting(self, metrics: Mapping[str, float | None]) -> list[str]:
        """Rules whose last evaluation was unknown, with the metrics they lack."""
        out = []
        for rule in self.ruleset.rules:
            if self.state[rule.id].last_value is None:
                missing = rule.condition.missing(metrics)
                out.append(f"{rule.id}: needs {', '.join(missing) or 'data'}")
        return out
