"""The typed report as the text ``--headless`` prints without ``--json``.

A rendering of ``schema.Report`` and nothing else, so the text says what the
JSON says.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from aitop.engine.reports import schema as s
from aitop.engine.reports.gain import gain_text
from aitop.engine.reports.schema import Report


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
        if f.last_held_after_s is not None:
            lines.append(f"   kept firing: its condition last held {f.last_held_after_s:.0f} s "
                         "in; the numbers are that moment's")
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
