"""The headless report: built as the declared ``aitop.report/2`` structs, and its text.

``build_report`` turns a session and its verdict into a ``schema.Report`` (the
one declaration of the format: engine/reports/schema.py); ``render_text`` is
the human-readable form ``--headless`` prints without ``--json``. Numbers are
rounded here, once, so the JSON, the text and ``aitop diff`` read the same.

The knowledge base types severities, categories and statuses as plain strings;
the report's ``Literal`` types name the values it emits, and
tests/test_report_schema.py keeps the two lists equal (a cast here, not a
check: a report must never fail to be written at the end of a run).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec
from aitop.engine.reports import schema as s
from aitop.engine.reports.gain import gain_text
from aitop.engine.reports.schema import SCHEMA, Report
from aitop.knowledge.base.findings import (
    COLLECTING,
    STALLED,
    UNKNOWN,
    WARMING_UP,
    Diagnosis,
    Evidence,
    Finding,
)
from aitop.knowledge.metrics.window import STEPS_WINDOW_S
from aitop.probes.own_version import aitop_version
from aitop.probes.ranks import Job
from aitop.probes.redact import redact_argv
from aitop.probes.session import PHASES, Session
from aitop.probes.steps import counter_increments

__all__ = ["SCHEMA", "Report", "RunFacts", "build_report", "render_text"]

#: Categories that are not a verdict: the diagnosis could not judge (yet), or
#: the job is not in the steady state a bottleneck is judged in.
NOT_JUDGED = (COLLECTING, UNKNOWN, WARMING_UP, STALLED)
#: Raw counter readings kept in a report (the newest), behind ``steps_per_s``.
STEP_READINGS_KEPT = 30


@dataclass(frozen=True)
class RunFacts:
    """What the headless run itself knows beyond the session."""

    duration_s: float
    aitop_cpu_percent: float | None
    aitop_rss_bytes: int | None
    warnings: Sequence[str] = ()
    interrupted: bool = False


def _num(value: float | None, digits: int = 4) -> float | None:
    if value is None or (isinstance(value, float) and (math.isnan(value) or math.isinf(value))):
        return None
    return round(float(value), digits)


def evidence_of(items: Sequence[Evidence]) -> dict[str, s.Evidence]:
    return {
        e.metric: s.Evidence(value=_num(e.value), display=e.display, target=e.target,
                             status=cast(s.EvidenceStatus, e.status))
        for e in items
    }


def finding_of(f: Finding, started_at: float | None) -> s.Finding:
    source = f"{f.source.document}, \u00a7 {f.source.section}" if f.source.section \
        else f.source.document
    return s.Finding(
        id=f.id,
        severity=cast(s.Severity, f.severity),
        category=cast(s.Category, f.category),
        title=f.title,
        why=f.why,
        evidence=evidence_of(f.evidence),
        actions=list(f.actions),
        snippet=f.snippet,
        est_speedup=_num(f.gain.speedup, 3),
        est_speedup_range=(_num(f.gain.low, 3), _num(f.gain.high, 3)),
        gain_method=cast(s.GainMethod, f.gain.method),
        gain_ceiling=_num(f.gain.ceiling, 3),
        gain_explanation=f.gain.explanation,
        explains=list(f.explains),
        source=source,
        rule=f.expr,
        fired_after_s=_num(f.fired_at - started_at, 2) if started_at else None,
    )


def job_of(job: Job | None) -> s.Job | None:
    """The job around the target: launcher and ranks (None: not looked for)."""
    if job is None:
        return None
    return s.Job(
        given_pid=job.given_pid,
        launcher_pid=job.launcher_pid,
        kind=cast(s.JobKind, job.kind),
        ranks=[
            s.JobRank(pid=r.pid, rank=r.rank, local_rank=r.local_rank,
                      world_size=r.world_size, group_rank=r.group_rank)
            for r in job.ranks
        ],
    )


def timeline(history: Sequence[Diagnosis], started_at: float | None) -> list[s.Change]:
    """Each change of bottleneck category, with seconds since attach."""
    out: list[s.Change] = []
    last = None
    for d in history:
        if d.category != last:
            out.append(s.Change(
                after_s=_num(d.t - started_at, 2) if started_at else None,
                category=cast(s.BottleneckCategory, d.category),
                summary=d.summary,
            ))
            last = d.category
    return out


def normalised_phases(phases: dict[str, float] | None) -> dict[str, float] | None:
    """All seven phases, rounded to 4 places, summing to 1."""
    if not phases:
        return None
    out = {p: round(phases.get(p, 0.0), 4) for p in PHASES}
    # Rounding leaves a residue of a few 1e-4: give it to the largest phase.
    largest = max(out, key=out.__getitem__)
    out[largest] = round(out[largest] + 1.0 - sum(out.values()), 4)
    return out


#: Environment variables that shape a training job's performance.
RELEVANT_ENV: tuple[str, ...] = (
    "CUDA_", "NCCL_", "OMP_", "MKL_", "PYTORCH_", "TORCH_", "NVIDIA_", "CUBLAS_",
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "TOKENIZERS_",
)


def environment_of(session: Session) -> s.Environment | None:
    """The target's environment as the probes saw it (secrets already redacted)."""
    env = session.environment
    if env is None:
        return None
    return s.Environment(
        python=env.python_version,
        torch=env.torch_version,
        num_workers=env.num_workers,
        pin_memory_thread=env.pin_memory_thread,
        cpus_allowed=env.cpus_allowed,
        hostname=env.hostname,
        env={k: v for k, v in sorted(env.env.items()) if k.startswith(RELEVANT_ENV)},
    )


def phase_span(session: Session, diagnosis: Diagnosis | None) -> tuple[float, float] | None:
    """[start, end] epoch seconds of the stack samples behind the phase fractions."""
    if diagnosis is None:
        return None
    windows = [
        w for w in session.stacks.window(diagnosis.t - diagnosis.window_s, diagnosis.t)
        if w.error is None and w.total_samples
    ]
    if not windows:
        return None
    return (round(windows[0].t_start, 3), round(windows[-1].t_end, 3))


def steps_span(session: Session, diagnosis: Diagnosis | None) -> tuple[float, float] | None:
    """[first, last] epoch seconds of the counter readings behind steps_per_s."""
    if diagnosis is None or diagnosis.steps_per_s is None:
        return None
    lookback = max(diagnosis.window_s, STEPS_WINDOW_S)
    readings = [
        r for r in session.step_readings(diagnosis.t - lookback, diagnosis.t).readings
        if r.value is not None
    ]
    if len(readings) < 2:
        return None
    return (round(readings[0].t, 3), round(readings[-1].t, 3))


def steps_source(session: Session, diagnosis: Diagnosis | None) -> s.StepsSource | None:
    """Where steps/s comes from (the count's name, frame and source), its raw
    readings, and what the other sources said."""
    if diagnosis is None:
        return None
    lookback = max(diagnosis.window_s, STEPS_WINDOW_S)
    chosen = session.step_readings(diagnosis.t - lookback, diagnosis.t)
    readings = chosen.readings
    named = [r for r in readings if r.value is not None]
    last = named[-1] if named else (readings[-1] if readings else None)
    if last is None and not chosen.tried:
        return None
    return s.StepsSource(
        counter=last.name if last else None,
        frame=last.frame if last else None,
        error=None if named or last is None else last.error,
        rejected=chosen.rejected,
        readings=[(round(r.t, 3), r.name, r.value) for r in named[-STEP_READINGS_KEPT:]
                  if r.value is not None],
        source=chosen.source,
        tried=list(chosen.tried),
    )


def step_windows(session: Session) -> list[tuple[float, float, float]]:
    """``[start, end, steps]`` between consecutive loop-counter readings of the run:
    the per-window rates that give ``aitop diff`` its confidence interval."""
    return [
        (round(prev.t, 3), round(cur.t, 3), float(n))
        for prev, cur, n in counter_increments(session.step_readings().readings)
    ]


def _target(session: Session, attached_at: float) -> s.Target:
    tree = session.processes.last()
    env = session.environment
    cmdline = list(env.cmdline) if env else (list(tree.main.cmdline) if tree and tree.main else [])
    exited = session.target_exited_at
    return s.Target(
        pid=session.target_pid,
        cmdline=redact_argv(cmdline),
        alive=exited is None,
        exited_after_s=_num(exited - attached_at, 2) if exited else None,
        exit_status=session.target_exit_status,
    )


def _bottleneck(diagnosis: Diagnosis | None) -> s.Bottleneck:
    if diagnosis is None:
        return s.Bottleneck(category=cast(s.BottleneckCategory, COLLECTING), judged=False,
                            summary="no diagnosis was made")
    top = diagnosis.top
    named = top is not None and diagnosis.category not in ("none", *NOT_JUDGED)
    return s.Bottleneck(
        category=cast(s.BottleneckCategory, diagnosis.category),
        judged=diagnosis.category not in NOT_JUDGED,
        summary=diagnosis.summary,
        lead_finding=top.id if named and top else None,
        evidence=evidence_of(top.evidence) if named and top else {},
        hardware_well_used=diagnosis.hardware_well_used,
        hardware=diagnosis.hardware,
    )


def build_report(
    session: Session,
    diagnosis: Diagnosis | None,
    history: Sequence[Diagnosis],
    run: RunFacts,
    attached_at: float,
    *,
    ranks: Sequence[dict[str, Any]] = (),
    job_verdict: dict[str, Any] | None = None,
) -> Report:
    """The report of one run; ``ranks`` and ``job_verdict`` for a multi-rank job
    (engine/live/job.py's ``ranks_json`` / ``job_verdict_json``: each rank's own
    view, and the job-level judgement)."""
    d = diagnosis
    current_state = d.states[0] if d and d.states else None
    return Report(
        schema=SCHEMA,
        aitop_version=aitop_version() or "unknown",
        target=_target(session, attached_at),
        job=job_of(session.job),
        ranks=msgspec.convert(list(ranks), list[s.Rank]),
        job_verdict=msgspec.convert(job_verdict, s.JobVerdict) if job_verdict else None,
        duration_s=_num(run.duration_s, 2),
        attached_at=_num(attached_at, 3),
        evaluated_at=_num(d.t, 3) if d else None,
        window_s=d.window_s if d else None,
        compute_device=cast(s.ComputeDevice, d.compute_device) if d else None,
        phases=normalised_phases(d.phases if d else None),
        phase_span=phase_span(session, d),
        steps_per_s=_num(d.steps_per_s, 3) if d else None,
        steps_span=steps_span(session, d),
        steps_source=steps_source(session, d),
        step_windows=step_windows(session),
        bottleneck=_bottleneck(d),
        state=current_state.name if current_state else None,
        state_priorities=list(current_state.priorities) if current_state else [],
        states=[s.State(id=st.id, name=st.name, priorities=list(st.priorities))
                for st in (d.states if d else ())],
        findings=[finding_of(f, attached_at) for f in (d.findings if d else ())],
        timeline=timeline(history, attached_at),
        metrics={k: _num(v) for k, v in sorted((d.metrics if d else {}).items())},
        environment=environment_of(session),
        probes={name: status.text for name, status in session.probe_status.items()},
        probe_states={
            name: s.ProbeReading(state=status.state, detail=status.detail)
            for name, status in session.probe_status.items()
        },
        waiting_for=list(d.waiting_for) if d else [],
        pending=list(d.pending) if d else [],
        aitop=s.AitopCost(
            cpu_percent_of_one_core=_num(run.aitop_cpu_percent, 2),
            rss_mb=_num(run.aitop_rss_bytes / 1e6, 1) if run.aitop_rss_bytes else None,
        ),
        warnings=list(run.warnings),
        interrupted=run.interrupted,
    )


def _bar(fraction: float, width: int = 24) -> str:
    filled = round(fraction * width)
    return "#" * filled + "." * (width - filled)


def _ranks_text(ranks: Sequence[s.Rank], verdict: s.JobVerdict | None) -> list[str]:
    """The per-rank lines of a multi-rank job, the straggler marked."""
    if not ranks:
        return []
    lines = ["", "Ranks (waiting for the others = all-reduce and collectives):"]
    for r in ranks:
        comm = "?" if r.comm_share is None else f"{r.comm_share:.0%}"
        score = "" if r.straggler_score is None else f"  score {r.straggler_score:.2f}"
        flag = "  <- STRAGGLER" if r.straggler else ""
        status = "" if r.status == "watched" else f"  ({r.status})"
        lines.append(f"  {r.label:<11} PID {r.pid:<7} waits {comm:>4}{score}{flag}{status}")
        if r.cause:
            lines.append(f"      own: {r.cause}")
    if verdict is not None and verdict.straggler:
        lines.append(f"  Straggler: {verdict.straggler} (score "
                     f"{_fixed(verdict.straggler_score, '.2f')}); the others wait "
                     f"{_fixed(verdict.others_wait_share, '.0%')} of their time")
    elif verdict is not None:
        lines.append("  No straggler: the ranks wait about equally")
    return lines


def _fixed(value: float | None, spec: str) -> str:
    return "?" if value is None else format(value, spec)


def render_text(report: Report) -> str:
    """The human-readable report printed by ``--headless`` without ``--json``."""
    t = report.target
    lines = []
    cmd = " ".join(t.cmdline) or "?"
    state = "running" if t.alive else (
        f"exited after {t.exited_after_s} s"
        + (f" with status {t.exit_status}" if t.exit_status is not None else "")
    )
    pid = "?" if t.pid is msgspec.UNSET else t.pid
    lines.append(f"aitop {report.aitop_version} - PID {pid} ({cmd}) - {state}")
    lines.append(
        f"measured {report.duration_s} s, window {report.window_s} s, "
        f"compute on {'the CPU (no GPU found)' if report.compute_device == 'cpu' else 'GPU'}"
    )
    b = report.bottleneck
    lines.append("")
    lines.append(f"Bottleneck: {b.category.upper().replace('_', ' ')} - {b.summary}")
    if b.hardware:
        lines.append(f"Hardware: {b.hardware}")
    if report.state:
        prio = "  ".join(f"{i}. {p}" for i, p in enumerate(report.state_priorities, 1))
        lines.append(f"State: {report.state} -> {prio}")
        if report.compute_device == "cpu" and "GPU utilization" in report.state:
            lines.append(
                "  (no GPU: 'GPU utilization' here is the training thread's share of time "
                "in forward/backward/optimizer; compute means the CPU)"
            )
    if report.phases:
        lines.append("Phases of the training thread:")
        for name, value in report.phases.items():
            lines.append(f"  {name:<11} {_bar(value)} {value:6.1%}")
    else:
        lines.append("Phases: unknown (no stack samples)")
    sps = report.steps_per_s
    lines.append(f"Steps/s: {sps:.2f}" if sps else "Steps/s: unknown (no step counter found)")
    lines.extend(_ranks_text(report.ranks, report.job_verdict))
    findings = report.findings
    lines.append("")
    lines.append(
        f"Findings ({len(findings)}, by estimated gain):" if findings else "Findings: none"
    )
    for i, f in enumerate(findings, 1):
        lines.append(f"{i}. [{f.severity}] {f.title}  — {gain_text(f.gain)}")
        lines.append(f"   why: {f.why}")
        for action in f.actions:
            lines.append(f"   -> {action}")
        lines.append(f"   gain: {f.gain_explanation}")
        lines.append(f"   source: {f.source}")
    lines.append("")
    a = report.aitop
    if a.cpu_percent_of_one_core is not None:
        lines.append(
            f"aitop itself: {a.cpu_percent_of_one_core:.2f}% of one core "
            f"(py-spy included), {a.rss_mb} MB RSS"
        )
    for name, status in sorted(report.probes.items()):
        lines.append(f"  probe {name}: {status}")
    for warning in report.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
