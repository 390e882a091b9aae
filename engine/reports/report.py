"""The headless report: a stable, versioned JSON document and its text rendering.

``aitop.report/2`` is a public interface (scripts and CI parse it). Fields are
only ever added; a change of meaning bumps the schema version.

/2 (from /1): ``bottleneck.category`` names what limits the job whenever it can
be judged: a saturated accelerator is ``compute`` (with
``bottleneck.hardware_well_used`` saying the hardware is well used), and
``collecting`` / ``unknown`` (with ``bottleneck.judged: false``) replace the
``none`` that used to mean "cannot judge yet"; ``none`` now only means "judged,
nothing limits". ``phases`` gains ``eval``; gains may be ``predicted`` ranges
with their Amdahl ``gain_ceiling`` beside them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aitop.engine.reports.gain import gain_text
from aitop.engine.version import aitop_version
from aitop.knowledge.metrics import STEPS_WINDOW_S
from aitop.knowledge.model import COLLECTING, UNKNOWN, Diagnosis, Evidence, Finding, Gain
from aitop.probes.ranks import Job
from aitop.probes.redact import redact_argv
from aitop.probes.session import PHASES, Session
from aitop.probes.steps import counter_increments

SCHEMA = "aitop.report/2"
#: Categories that are not a verdict: the diagnosis could not judge (yet).
NOT_JUDGED = (COLLECTING, UNKNOWN)
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


def evidence_json(items: Sequence[Evidence]) -> dict[str, Any]:
    return {
        e.metric: {
            "value": _num(e.value),
            "display": e.display,
            "target": e.target,
            "status": e.status,
        }
        for e in items
    }


def finding_json(f: Finding, started_at: float | None) -> dict[str, Any]:
    return {
        "id": f.id,
        "severity": f.severity,
        "category": f.category,
        "title": f.title,
        "why": f.why,
        "evidence": evidence_json(f.evidence),
        "actions": list(f.actions),
        "snippet": f.snippet,
        "est_speedup": _num(f.gain.speedup, 3),
        "est_speedup_range": [_num(f.gain.low, 3), _num(f.gain.high, 3)],
        "gain_method": f.gain.method,
        "gain_ceiling": _num(f.gain.ceiling, 3),
        "gain_explanation": f.gain.explanation,
        "explains": list(f.explains),
        "source": f"{f.source.document}, \u00a7 {f.source.section}"
        if f.source.section
        else f.source.document,
        "rule": f.expr,
        "fired_after_s": _num(f.fired_at - started_at, 2) if started_at else None,
    }


def report_gain(finding: dict[str, Any]) -> Gain:
    """A report finding's gain as the knowledge base states one (to word it)."""
    low, high = finding.get("est_speedup_range") or (None, None)
    return Gain(finding.get("est_speedup"), low, high, finding.get("gain_method") or "none",
                finding.get("gain_explanation") or "", finding.get("gain_ceiling"))


def job_json(job: Job | None) -> dict[str, Any] | None:
    """The job around the target: launcher and ranks (None: not looked for)."""
    if job is None:
        return None
    return {
        "given_pid": job.given_pid,
        "launcher_pid": job.launcher_pid,
        "kind": job.kind,
        "ranks": [
            {"pid": r.pid, "rank": r.rank, "local_rank": r.local_rank,
             "world_size": r.world_size, "group_rank": r.group_rank}
            for r in job.ranks
        ],
    }


def timeline(history: Sequence[Diagnosis], started_at: float | None) -> list[dict[str, Any]]:
    """Each change of bottleneck category, with seconds since attach."""
    out: list[dict[str, Any]] = []
    last = None
    for d in history:
        if d.category != last:
            out.append(
                {
                    "after_s": _num(d.t - started_at, 2) if started_at else None,
                    "category": d.category,
                    "summary": d.summary,
                }
            )
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


def environment_json(session: Session) -> dict[str, Any] | None:
    """The target's environment as the probes saw it (secrets already redacted)."""
    env = session.environment
    if env is None:
        return None
    return {
        "python": env.python_version,
        "torch": env.torch_version,
        "num_workers": env.num_workers,
        "pin_memory_thread": env.pin_memory_thread,
        "cpus_allowed": env.cpus_allowed,
        "hostname": env.hostname,
        "env": {k: v for k, v in sorted(env.env.items()) if k.startswith(RELEVANT_ENV)},
    }


def phase_span(session: Session, diagnosis: Diagnosis | None) -> list[float] | None:
    """[start, end] epoch seconds of the stack samples behind the phase fractions."""
    if diagnosis is None:
        return None
    windows = [
        w for w in session.stacks.window(diagnosis.t - diagnosis.window_s, diagnosis.t)
        if w.error is None and w.total_samples
    ]
    if not windows:
        return None
    return [round(windows[0].t_start, 3), round(windows[-1].t_end, 3)]


def steps_span(session: Session, diagnosis: Diagnosis | None) -> list[float] | None:
    """[first, last] epoch seconds of the counter readings behind steps_per_s."""
    if diagnosis is None or diagnosis.steps_per_s is None:
        return None
    lookback = max(diagnosis.window_s, STEPS_WINDOW_S)
    readings = [
        s for s in session.steps.window(diagnosis.t - lookback, diagnosis.t)
        if s.value is not None
    ]
    if len(readings) < 2:
        return None
    return [round(readings[0].t, 3), round(readings[-1].t, 3)]


def steps_source(session: Session, diagnosis: Diagnosis | None) -> dict[str, Any] | None:
    """Where steps/s comes from (the counter's name and frame) and its raw readings."""
    if diagnosis is None:
        return None
    lookback = max(diagnosis.window_s, STEPS_WINDOW_S)
    readings = session.steps.window(diagnosis.t - lookback, diagnosis.t)
    named = [s for s in readings if s.value is not None]
    last = named[-1] if named else (readings[-1] if readings else None)
    if last is None:
        return None
    return {
        "counter": last.name,
        "frame": last.frame,
        "error": None if named else last.error,
        "readings": [
            [round(s.t, 3), s.name, s.value] for s in named[-STEP_READINGS_KEPT:]
        ],
    }


def step_windows(session: Session) -> list[list[float]]:
    """``[start, end, steps]`` between consecutive loop-counter readings of the run:
    the per-window rates that give ``aitop diff`` its confidence interval."""
    return [
        [round(prev.t, 3), round(cur.t, 3), float(n)]
        for prev, cur, n in counter_increments(session.steps.items())
    ]


def build_report(
    session: Session,
    diagnosis: Diagnosis | None,
    history: Sequence[Diagnosis],
    run: RunFacts,
    attached_at: float,
    *,
    ranks: Sequence[dict[str, Any]] = (),
    job_verdict: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The report of one run; ``ranks`` and ``job_verdict`` for a multi-rank job
    (engine/job.py: each rank's own view, and the job-level judgement)."""
    tree = session.processes.last()
    env = session.environment
    cmdline = list(env.cmdline) if env else (list(tree.main.cmdline) if tree and tree.main else [])
    top = diagnosis.top if diagnosis else None
    named = (
        top is not None and diagnosis is not None
        and diagnosis.category not in ("none", *NOT_JUDGED)
    )
    bottleneck_evidence = evidence_json(top.evidence) if named and top else {}
    current_state = diagnosis.states[0] if diagnosis and diagnosis.states else None
    span = phase_span(session, diagnosis)
    return {
        "schema": SCHEMA,
        "aitop_version": aitop_version() or "unknown",
        "target": {
            "pid": session.target_pid,
            "cmdline": redact_argv(cmdline),
            "alive": session.target_exited_at is None,
            "exited_after_s": _num(session.target_exited_at - attached_at, 2)
            if session.target_exited_at
            else None,
            "exit_status": session.target_exit_status,
        },
        "job": job_json(session.job),
        "ranks": list(ranks),
        "job_verdict": job_verdict,
        "duration_s": _num(run.duration_s, 2),
        "attached_at": _num(attached_at, 3),
        "evaluated_at": _num(diagnosis.t, 3) if diagnosis else None,
        "window_s": diagnosis.window_s if diagnosis else None,
        "compute_device": diagnosis.compute_device if diagnosis else None,
        "phases": normalised_phases(diagnosis.phases if diagnosis else None),
        "phase_span": span,
        "steps_per_s": _num(diagnosis.steps_per_s, 3) if diagnosis else None,
        "steps_span": steps_span(session, diagnosis),
        "steps_source": steps_source(session, diagnosis),
        "step_windows": step_windows(session),
        "bottleneck": {
            "category": diagnosis.category if diagnosis else COLLECTING,
            "judged": diagnosis is not None and diagnosis.category not in NOT_JUDGED,
            "summary": diagnosis.summary if diagnosis else "no diagnosis was made",
            "lead_finding": top.id if named and top else None,
            "evidence": bottleneck_evidence,
            "hardware_well_used": diagnosis.hardware_well_used if diagnosis else None,
            "hardware": diagnosis.hardware if diagnosis else "",
        },
        "state": current_state.name if current_state else None,
        "state_priorities": list(current_state.priorities) if current_state else [],
        "states": [
            {"id": s.id, "name": s.name, "priorities": list(s.priorities)}
            for s in (diagnosis.states if diagnosis else ())
        ],
        "findings": [
            finding_json(f, attached_at) for f in (diagnosis.findings if diagnosis else ())
        ],
        "timeline": timeline(history, attached_at),
        "metrics": {
            k: _num(v) for k, v in sorted((diagnosis.metrics if diagnosis else {}).items())
        },
        "environment": environment_json(session),
        "probes": {name: status.text for name, status in session.probe_status.items()},
        "probe_states": {
            name: {"state": status.state, "detail": status.detail}
            for name, status in session.probe_status.items()
        },
        "waiting_for": list(diagnosis.waiting_for) if diagnosis else [],
        "pending": list(diagnosis.pending) if diagnosis else [],
        "aitop": {
            "cpu_percent_of_one_core": _num(run.aitop_cpu_percent, 2),
            "rss_mb": _num(run.aitop_rss_bytes / 1e6, 1) if run.aitop_rss_bytes else None,
        },
        "warnings": list(run.warnings),
        "interrupted": run.interrupted,
    }


def _bar(fraction: float, width: int = 24) -> str:
    filled = round(fraction * width)
    return "#" * filled + "." * (width - filled)


def _ranks_text(ranks: Sequence[dict[str, Any]], verdict: dict[str, Any] | None) -> list[str]:
    """The per-rank lines of a multi-rank job, the straggler marked."""
    if not ranks:
        return []
    lines = ["", "Ranks (waiting for the others = all-reduce and collectives):"]
    for r in ranks:
        comm = "?" if r["comm_share"] is None else f"{r['comm_share']:.0%}"
        score = "" if r["straggler_score"] is None else f"  score {r['straggler_score']:.2f}"
        flag = "  <- STRAGGLER" if r["straggler"] else ""
        status = "" if r["status"] == "watched" else f"  ({r['status']})"
        lines.append(f"  {r['label']:<11} PID {r['pid']:<7} waits {comm:>4}{score}{flag}{status}")
        if r["cause"]:
            lines.append(f"      own: {r['cause']}")
    if verdict is not None and verdict.get("straggler"):
        lines.append(f"  Straggler: {verdict['straggler']} (score "
                     f"{verdict['straggler_score']:.2f}); the others wait "
                     f"{verdict['others_wait_share']:.0%} of their time")
    elif verdict is not None:
        lines.append("  No straggler: the ranks wait about equally")
    return lines


def render_text(report: dict[str, Any]) -> str:
    """The human-readable report printed by ``--headless`` without ``--json``."""
    t = report["target"]
    lines = []
    cmd = " ".join(t["cmdline"]) or "?"
    state = "running" if t["alive"] else (
        f"exited after {t['exited_after_s']} s"
        + (f" with status {t['exit_status']}" if t["exit_status"] is not None else "")
    )
    lines.append(f"aitop {report['aitop_version']} - PID {t['pid']} ({cmd}) - {state}")
    lines.append(
        f"measured {report['duration_s']} s, window {report['window_s']} s, "
        f"compute on {'the CPU (no GPU found)' if report['compute_device'] == 'cpu' else 'GPU'}"
    )
    b = report["bottleneck"]
    lines.append("")
    lines.append(f"Bottleneck: {b['category'].upper().replace('_', ' ')} - {b['summary']}")
    if b.get("hardware"):
        lines.append(f"Hardware: {b['hardware']}")
    if report["state"]:
        prio = "  ".join(f"{i}. {p}" for i, p in enumerate(report["state_priorities"], 1))
        lines.append(f"State: {report['state']} -> {prio}")
        if report["compute_device"] == "cpu" and "GPU utilization" in report["state"]:
            lines.append(
                "  (no GPU: 'GPU utilization' here is the training thread's share of time "
                "in forward/backward/optimizer; compute means the CPU)"
            )
    phases = report["phases"]
    if phases:
        lines.append("Phases of the training thread:")
        for name, value in phases.items():
            lines.append(f"  {name:<11} {_bar(value)} {value:6.1%}")
    else:
        lines.append("Phases: unknown (no stack samples)")
    sps = report["steps_per_s"]
    lines.append(f"Steps/s: {sps:.2f}" if sps else "Steps/s: unknown (no step counter found)")
    lines.extend(_ranks_text(report.get("ranks") or [], report.get("job_verdict")))
    findings = report["findings"]
    lines.append("")
    lines.append(
        f"Findings ({len(findings)}, by estimated gain):" if findings else "Findings: none"
    )
    for i, f in enumerate(findings, 1):
        lines.append(f"{i}. [{f['severity']}] {f['title']}  ({gain_text(report_gain(f))})")
        lines.append(f"   why: {f['why']}")
        for action in f["actions"]:
            lines.append(f"   -> {action}")
        lines.append(f"   gain: {f['gain_explanation']}")
        lines.append(f"   source: {f['source']}")
    lines.append("")
    a = report["aitop"]
    if a["cpu_percent_of_one_core"] is not None:
        lines.append(
            f"aitop itself: {a['cpu_percent_of_one_core']:.2f}% of one core "
            f"(py-spy included), {a['rss_mb']} MB RSS"
        )
    for name, status in sorted(report["probes"].items()):
        lines.append(f"  probe {name}: {status}")
    for warning in report["warnings"]:
        lines.append(f"warning: {warning}")
    return "\n".join(lines)
