"""What a diagnosis says: findings, their evidence and estimated gains.

These are the knowledge room's outputs. Like probe samples they are frozen, so a
diagnosis can be drawn, exported and replayed without anyone changing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

#: The bottleneck categories, after the documents' bottleneck-location table
#: (data loading, GPU computation, GPU memory, system RAM/CPU) plus the checklist's
#: I/O symptom, host-device synchronisation, evaluation passes, and ``none`` when
#: nothing limits the job.
Category = Literal[
    "data_loading", "compute", "memory", "io", "host", "sync", "communication", "evaluation",
    "warming_up", "stalled", "none",
]
CATEGORIES: tuple[Category, ...] = get_args(Category)
#: What a diagnosis says before it can judge (no stack samples yet, or a verdict
#: still held for its ``for:``): not a verdict.
COLLECTING: Final = "collecting"
#: How the summary of a verdict still held for its ``for:`` begins.
NOT_YET_CONFIRMED: Final = "Not yet confirmed: "
#: What it says when it cannot judge at all (no stacks: py-spy missing or denied).
UNKNOWN: Final = "unknown"
#: What a diagnosis names: a finding's category, or not judged (yet).
BottleneckCategory = Literal[Category, "collecting", "unknown"]
#: A job state, not a bottleneck: compiling before its first steps. While a
#: ``job_state`` rule of this category fires, steady-state findings are held back.
WARMING_UP: Final = "warming_up"
#: A job state: no progress, the training thread standing in one frame.
STALLED: Final = "stalled"
#: What computes the job's steps: ``gpu`` when NVML sees a GPU, else ``cpu``.
ComputeDevice = Literal["gpu", "cpu"]

#: What a job is doing, as one word a list of jobs can show (the node view): not
#: judged yet, one of the job states its rules name (warming up, stalled), or, in
#: its steady state, whether it trains, evaluates or serves (forward passes only).
JobState = Literal["collecting", "warming_up", "stalled", "serving", "evaluating", "training"]
JOB_STATES: tuple[JobState, ...] = get_args(JobState)

Severity = Literal["info", "low", "medium", "high", "critical"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
#: Where a value stands against its target (``targets.target_status``).
Status = Literal["within", "near", "outside", "unknown"]
#: How a gain was worked out (see ``Gain.method``).
GainMethod = Literal["predicted", "amdahl", "document", "none"]


@dataclass(frozen=True, slots=True)
class Citation:
    """Where in which document a claim comes from."""

    document: str
    section: str
    quote: str = ""


@dataclass(frozen=True, slots=True)
class Evidence:
    """One metric value that supports a finding, judged against its target."""

    metric: str
    label: str
    value: float | None
    display: str
    target: str | None = None
    #: ``within`` / ``near`` / ``outside`` the target range, or ``unknown``.
    status: Status = "unknown"


@dataclass(frozen=True, slots=True)
class Gain:
    """What acting on a finding is estimated to buy, and how that was worked out."""

    #: Expected speed-up factor of the training step (1.0 = none); ``None`` when
    #: the benefit is not speed (memory headroom, reliability).
    speedup: float | None
    low: float | None = None
    high: float | None = None
    #: ``predicted`` (a range for this action on this machine, from the phases
    #: and the resources it needs), ``amdahl`` (a ceiling: removing the phase
    #: entirely), ``document`` (the figure the source documents claim), ``none``.
    method: GainMethod = "none"
    explanation: str = ""
    #: The Amdahl ceiling beside a prediction (removing the phase entirely).
    ceiling: float | None = None


@dataclass(frozen=True, slots=True)
class Finding:
    """A rule that is firing, with everything needed to act on it."""

    id: str
    title: str
    severity: Severity
    category: Category
    why: str
    evidence: tuple[Evidence, ...]
    actions: tuple[str, ...]
    gain: Gain
    source: Citation
    expr: str
    fired_at: float
    snippet: str | None = None
    techniques: tuple[str, ...] = ()
    #: Symptoms this culprit explains (their titles), folded into it.
    explains: tuple[str, ...] = ()
    #: When its condition last held, if not now: kept firing by the rule's
    #: ``keep_firing_for`` since, and told with that moment's numbers. None
    #: while the condition holds.
    last_held_at: float | None = None


@dataclass(frozen=True, slots=True)
class StateMatch:
    """A row of the optimization priority framework that matches the job now."""

    id: str
    name: str
    priorities: tuple[str, ...]
    evidence: tuple[Evidence, ...] = ()


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The engine's conclusion at one moment, from one window of samples."""

    t: float
    window_s: float
    category: BottleneckCategory
    #: One line saying why this category: the top finding's title, or why none.
    summary: str
    #: ``cpu``: no GPU, and compute then means the CPU.
    compute_device: ComputeDevice
    states: tuple[StateMatch, ...] = ()
    findings: tuple[Finding, ...] = ()
    phases: dict[str, float] | None = None
    steps_per_s: float | None = None
    #: Every metric for the newest diagnosis; a history entry keeps fewer, packed
    #: (``PackedMetrics``). Read-only either way.
    metrics: Mapping[str, float | None] = field(default_factory=dict)
    #: Rules that could not be evaluated for lack of data, with the missing metric.
    waiting_for: tuple[str, ...] = ()
    #: Bottleneck rules whose condition holds but whose ``for:`` has not elapsed:
    #: "title (held 3 s of 5 s)". A verdict in the making, not yet a finding.
    pending: tuple[str, ...] = ()
    #: Whether the hardware that computes (GPU, else CPU cores) is well used,
    #: said apart from the bottleneck: a saturated GPU is ``compute`` *and* well
    #: used. ``None`` while it cannot be judged.
    hardware_well_used: bool | None = None
    hardware: str = ""

    @property
    def top(self) -> Finding | None:
        return self.findings[0] if self.findings else None

