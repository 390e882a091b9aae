"""Building the typed report: a session and its verdict as the declared ``aitop.report/2`` structs.

``build_report`` turns a session and its verdict into a ``schema.Report`` (the
one declaration of the format: engine/reports/schema.py). Every other form is
rendered from that struct (``--json``; the text of ``text.py``; the Markdown
and HTML reports), and numbers are rounded here, once, so all of them and
``aitop diff`` read the same.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
from aitop.engine.live.job import Rank
from aitop.engine.reports import schema as s
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
from aitop.knowledge.metrics.progress import STEPS_WINDOW_S
from aitop.knowledge.metrics.straggler import JobJudgement
from aitop.probes.own_version import aitop_version
from aitop.probes.ranks import Job
from aitop.probes.redact import redact_argv
from aitop.probes.session import PHASES, Session
from aitop.probes.steps import counter_increments

__all__ = ["SCHEMA", "Report", "RunFacts", "build_report"]

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
                             status=e.status)
        for e in items
    }


def finding_of(f: Finding, started_at: float | None) -> s.Finding:
    source = f"{f.source.document}, \u00a7 {f.source.section}" if f.source.section \
        else f.source.document
    return s.Finding(
        id=f.id,
        severity=f.severity,
        category=f.category,
        title=f.title,
        why=f.why,
        evidence=evidence_of(f.evidence),
        actions=list(f.actions),
        snippet=f.snippet,
        est_speedup=_num(f.gain.speedup, 3),
        est_speedup_range=(_num(f.gain.low, 3), _num(f.gain.high, 3)),
        gain_method=f.gain.method,
        gain_ceiling=_num(f.gain.ceiling, 3),
        gain_explanation=f.gain.explanation,
        explains=list(f.explains),
        source=source,
        rule=f.expr,
        fired_after_s=_num(f.fired_at - started_at, 2) if started_at else None,
        last_held_after_s=(_num(f.last_held_at - started_at, 2)
                           if started_at and f.last_held_at is not None else None),
    )


def job_of(job: Job | None) -> s.Job | None:
    """The job around the target: launcher and ranks (None: not looked for)."""
    if job is None:
        return None
    return s.Job(
        given_pid=job.given_pid,
        launcher_pid=job.launcher_pid,
        kind=job.kind,
        ranks=[
            s.JobRank(pid=r.pid, rank=r.rank, local_rank=r.local_rank,
                      world_size=r.world_size, group_rank=r.group_rank)
            for r in job.ranks
        ],
    )


def rank_of(row: Rank) -> Rank:
    """A rank's row as the report writes it: rounded like every other number."""
    return msgspec.structs.replace(
        row,
        phases={k: round(v, 4) for k, v in row.phases.items()} if row.phases else None,
        comm_share=_num(row.comm_share), steps_per_s=_num(row.steps_per_s),
        cpu_percent=_num(row.cpu_percent), gpu_mem_percent=_num(row.gpu_mem_percent),
        gpu_util_percent=_num(row.gpu_util_percent),
        straggler_score=_num(row.straggler_score),
    )


def job_verdict_of(judgement: JobJudgement | None) -> s.JobVerdict | None:
    """The job-level verdict: the straggler (or none), its score and cause, the waits."""
    if judgement is None:
        return None
    metrics = judgement.metrics()
    words = judgement.words()
    score = metrics.get("straggler_score")
    flagged = score is not None and judgement.flagged
    return s.JobVerdict(
        ranks_watched=int(metrics.get("ranks_watched") or 0),
        straggler=words.get("straggler") if flagged else None,
        straggler_pid=judgement.straggler.pid if flagged and judgement.straggler else None,
        straggler_score=_num(score),
        straggler_cause=words.get("straggler_cause") if flagged else None,
        others_wait_share=_num(metrics.get("job_wait_share")),
        comm_share=_num(metrics.get("job_comm_share")),
    )


def timeline(history: Sequence[Diagnosis], started_at: float | None) -> list[s.Change]:
    """Each change of bottleneck category, with seconds since attach."""
    out: list[s.Change] = []
    last = None
    for d in history:
        if d.category != last:
            out.append(s.Change(
                after_s=_num(d.t - started_at, 2) if started_at else None,
                category=d.category,
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


def phase_windows(session: Session,
                  diagnosis: Diagnosis | None) -> list[tuple[float, float, float]]:
    """``[start, end, samples]`` of each stack window behind the phase fractions."""
    if diagnosis is None:
        return []
    return [
        (round(w.t_start, 3), round(w.t_end, 3), float(w.total_samples))
        for w in session.stacks.window(diagnosis.t - diagnosis.window_s, diagnosis.t)
        if w.error is None and w.total_samples
    ]


def phase_span(windows: list[tuple[float, float, float]]) -> tuple[float, float] | None:
    """[start, end] epoch seconds of the stack samples behind the phase fractions."""
    return (windows[0][0], windows[-1][1]) if windows else None


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
        return s.Bottleneck(category=COLLECTING, judged=False,
                            summary="no diagnosis was made")
    top = diagnosis.top
    named = top is not None and diagnosis.category not in ("none", *NOT_JUDGED)
    return s.Bottleneck(
        category=diagnosis.category,
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
    ranks: Sequence[Rank] = (),
    judgement: JobJudgement | None = None,
) -> Report:
    """The report of one run; for a multi-rank job, each rank's own view
    (engine/live/job.py's ``rank_rows``) and the job's ``judgement``."""
    d = diagnosis
    windows = phase_windows(session, d)
    current_state = d.states[0] if d and d.states else None
    return Report(
        schema=SCHEMA,
        aitop_version=aitop_version() or "unknown",
        target=_target(session, attached_at),
        job=job_of(session.job),
        ranks=[rank_of(r) for r in ranks],
        job_verdict=job_verdict_of(judgement),
        duration_s=_num(run.duration_s, 2),
        attached_at=_num(attached_at, 3),
        evaluated_at=_num(d.t, 3) if d else None,
        window_s=d.window_s if d else None,
        compute_device=d.compute_device if d else None,
        phases=normalised_phases(d.phases if d else None),
        phase_span=phase_span(windows),
        phase_windows=windows,
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
