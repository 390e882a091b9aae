"""One run of a job, as ``aitop diff`` compares it: from a snapshot, a report, or live.

A run is what a before/after comparison needs and nothing more: steps/s with
its interval, each phase's share and the stack samples behind it, the verdict
(bottleneck, firing findings) and the priority-framework states. It is read
from an ``aitop.snapshot/1`` file (every sample, so the rates and phases cover
the whole recording), from a ``--json`` report (``aitop.report/1`` or ``/2``:
the report's own window, decoded as the declared ``Report`` of
engine/reports/schema.py, so a damaged file fails in one line saying where), or
from a live session (``--baseline``).

The phase list comes from ``probes.session.PHASES`` plus whatever phases a
file names (a newer aitop may add some), never from a copy here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
from aitop.engine.compare.stats import Rate, rate_interval
from aitop.engine.files import FileError, read_bounded
from aitop.engine.records.snapshot import (
    GIVE_A_SNAPSHOT,
    MAX_SNAPSHOT_BYTES,
    SnapshotError,
    read_snapshot,
    session_from,
)
from aitop.engine.records.snapshot import SCHEMA as SNAPSHOT_SCHEMA
from aitop.engine.reports.schema import READS, Report, decode_report
from aitop.knowledge.base.findings import Diagnosis
from aitop.probes.redact import redact_argv
from aitop.probes.session import PHASES, Session
from aitop.probes.steps import counter_increments, usual_intervals

#: Report schemas this reader understands (the declaration's ``READS``).
REPORT_SCHEMAS: tuple[str, ...] = READS
#: A --json report is a few hundred KiB at most; snapshots may be much larger.
MAX_REPORT_BYTES = 64 * 1024 * 1024


class RunError(Exception):
    """A file cannot be read as a run; the message is one line saying why."""


@dataclass(frozen=True)
class FindingBrief:
    """A firing finding as a comparison shows it."""

    id: str
    severity: str
    category: str
    title: str
    actions: tuple[str, ...] = ()
    est_speedup: float | None = None
    #: Its condition no longer held when the run ended: kept firing a while by
    #: its rule, told with the numbers of when it last held.
    held: bool = False


@dataclass(frozen=True)
class Run:
    """What aitop measured and concluded about one run of a job."""

    label: str
    #: ``snapshot``, ``report`` or ``live``.
    kind: str
    pid: int | None
    command: str
    duration_s: float | None
    steps: Rate
    #: Share of the training thread's time per phase (None: no stack samples).
    phases: Mapping[str, float] | None
    #: Stack samples behind ``phases``.
    phase_samples: float
    category: str
    summary: str
    findings: tuple[FindingBrief, ...] = ()
    #: Priority-framework states that matched, ``(id, name)``, most relevant first.
    states: tuple[tuple[str, str], ...] = ()


# ----------------------------------------------------------------- sessions


def steps_rate(windows: Sequence[tuple[float, float, float]]) -> Rate:
    """The rate over ``(t_start, t_end, steps)`` windows, with its interval; a
    window too fast for the rest (a counter misread high: 457 steps in 2 s among
    windows of 28) is left out, as steps/s itself leaves it out."""
    increments = usual_intervals(windows, lambda w: w[2] / (w[1] - w[0]))
    span = sum(t1 - t0 for t0, t1, _ in increments)
    steps = sum(n for _, _, n in increments)
    if span < 2.0 or steps <= 0:
        return Rate(None, windows=len(increments))
    return rate_interval(steps / span, [n / (t1 - t0) for t0, t1, n in increments])


def session_steps(session: Session, since: float | None = None) -> Rate:
    readings = [r for r in session.step_readings().readings if since is None or r.t >= since]
    return steps_rate([(p.t, c.t, float(n)) for p, c, n in counter_increments(readings)])


def session_phases(session: Session) -> tuple[dict[str, float] | None, float]:
    """Phase shares over every stack sample in the session, and the sample count."""
    counts: dict[str, int] = dict.fromkeys(PHASES, 0)
    total = 0
    for window in session.stacks.items():
        if window.error is not None:
            continue
        for phase, n in window.phase_counts.items():
            counts[phase] = counts.get(phase, 0) + n
        total += window.total_samples
    if total <= 0:
        return None, 0.0
    return {p: n / total for p, n in counts.items()}, float(total)


def run_of_session(
    session: Session, diagnosis: Diagnosis | None, label: str, kind: str
) -> Run:
    """A run from a session's samples and the verdict made on them."""
    env = session.environment
    tree = session.processes.last()
    argv = env.cmdline if env else (tree.main.cmdline if tree and tree.main else ())
    phases, samples = session_phases(session)
    latest = session.latest_time()
    duration = latest - session.started_at if latest and session.started_at else None
    return Run(
        label=label,
        kind=kind,
        pid=session.target_pid,
        command=" ".join(redact_argv(argv)),
        duration_s=duration,
        steps=session_steps(session),
        phases=phases,
        phase_samples=samples,
        category=diagnosis.category if diagnosis else "none",
        summary=diagnosis.summary if diagnosis else "no diagnosis was made",
        findings=tuple(
            FindingBrief(f.id, f.severity, f.category, f.title, tuple(f.actions), f.gain.speedup,
                         held=f.last_held_at is not None)
            for f in (diagnosis.findings if diagnosis else ())
        ),
        states=tuple((s.id, s.name) for s in (diagnosis.states if diagnosis else ())),
    )


# ----------------------------------------------------------------- files


def read_run(path: Path) -> Run:
    """A snapshot or a ``--json`` report as a run; RunError (one line) otherwise."""
    path = Path(path)
    try:
        data = read_bounded(path, MAX_SNAPSHOT_BYTES, verb="compare", what="a snapshot",
                            hint=GIVE_A_SNAPSHOT)
    except FileError as exc:
        raise RunError(str(exc)) from exc
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise RunError(f"{path} is not JSON ({_first_line(exc)}); give a snapshot written "
                       "with --export or a report written with --headless --json") from exc
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if schema == SNAPSHOT_SCHEMA:
        return _run_of_snapshot(path)
    if schema in REPORT_SCHEMAS:
        return run_of_report(doc, str(path))
    if isinstance(schema, str) and schema.startswith(("aitop.report/", "aitop.snapshot/")):
        raise RunError(f"{path} uses {schema}, which this aitop cannot read (it reads "
                       f"{', '.join((*REPORT_SCHEMAS, SNAPSHOT_SCHEMA))}); compare it with "
                       "the aitop version that wrote it")
    what = f"schema {schema!r}" if schema is not None else "no aitop \"schema\" field"
    raise RunError(f"{path} is not an aitop snapshot or report ({what}); give a snapshot "
                   "written with --export or a report written with --headless --json")


def _run_of_snapshot(path: Path) -> Run:
    try:
        snap = read_snapshot(path)
    except SnapshotError as exc:
        raise RunError(str(exc)) from exc
    # The newest diagnosis, as a replay's history orders them (by time, stable).
    history = sorted(snap.diagnoses, key=lambda d: d.t)
    return run_of_session(session_from(snap), history[-1] if history else None, str(path),
                          "snapshot")


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _report_steps(report: Report) -> Rate:
    """Steps/s over the report's ``step_windows`` (every counter reading of the run),
    with its interval; a report without them (older aitop) gives its one figure."""
    increments = [
        (t0, t1, n) for t0, t1, n in report.step_windows
        if all(math.isfinite(v) for v in (t0, t1, n)) and t1 > t0
    ]
    if increments:
        return steps_rate(increments)
    return rate_interval(_finite(report.steps_per_s), [])


def run_of_report(doc: Report | Mapping[str, Any], label: str) -> Run:
    """A run from an ``aitop.report/1`` or ``/2`` document, decoded as the declared
    ``Report`` (a struct passes as it is); RunError if it is not one."""
    try:
        report = doc if isinstance(doc, Report) else decode_report(doc)
    except msgspec.ValidationError as exc:
        raise RunError(f"{label} is a damaged aitop report ({type(exc).__name__}: "
                       f"{_first_line(exc)}); write it again with --headless --json") from exc
    target = report.target
    phases = (
        {k: v for k, v in report.phases.items() if math.isfinite(v)}
        if report.phases is not None else None
    )
    return Run(
        label=label,
        kind="report",
        pid=None if isinstance(target.pid, msgspec.UnsetType) else target.pid,
        command=" ".join(redact_argv(target.cmdline)),
        duration_s=_finite(report.duration_s),
        steps=_report_steps(report),
        phases=phases or None,
        phase_samples=_finite(report.metrics.get("phase_samples")) or 0.0,
        category=report.bottleneck.category,
        summary=report.bottleneck.summary,
        findings=tuple(
            FindingBrief(id=f.id, severity=f.severity, category=f.category, title=f.title,
                         actions=tuple(f.actions), est_speedup=_finite(f.est_speedup),
                         held=f.last_held_after_s is not None)
            for f in report.findings
        ),
        states=tuple((st.id, st.name or st.id) for st in report.states),
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
