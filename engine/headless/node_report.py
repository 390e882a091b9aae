"""The report of a node: every job's own report, and what aitop may not watch.

``aitop --headless --json`` without ``--pid`` (and ``aitop replay NODE.json
--headless``) print one ``aitop.node-report/1``: the machine, the time, and for
each job it saw its ``aitop.report/2``, built by the same ``report_of`` as
``aitop --pid ROOT --headless --json``. A job that ended while aitop watched is
reported too (its target not alive); what aitop may not watch is listed with
the reason and what to do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from aitop.engine.headless.source_report import report_of
from aitop.engine.live.job import LiveJob
from aitop.engine.live.node import NO_JOBS, NodeJob, NodeSource, conclusion_of
from aitop.engine.live.source import Conclusion, DataSource
from aitop.engine.reports import schema as s
from aitop.engine.reports.build import RunFacts
from aitop.engine.reports.text import render_text
from aitop.knowledge.judging.job_state import job_state
from aitop.probes.own_version import aitop_version

#: How a job's last conclusion is had: live, one last look (``LiveJob.conclude``).
Conclude = Callable[[DataSource, float], Conclusion]


def node_report(
    node: NodeSource, t: float, *, conclude: Conclude | None = None,
    duration_s: float | None = None, aitop_cpu_percent: float | None = None,
    aitop_rss_bytes: int | None = None, interrupted: bool = False,
) -> s.NodeReport:
    """Every job ``node`` saw, reported as of ``t`` (``conclude``: its last look)."""
    jobs: list[s.NodeJob] = []
    refused: list[s.NotWatched] = []
    for job in node.recorded():
        if job.status == "not_watched":
            refused.append(s.NotWatched(job_id=job.job_id, pid=job.pid, user=job.user,
                                        command=list(job.command), reason=job.reason))
            continue
        jobs.append(_job(job, t, node.live, conclude, interrupted))
    return s.NodeReport(
        schema=s.NODE_SCHEMA,
        aitop_version=aitop_version() or "unknown",
        hostname=node.hostname,
        generated_at=round(t, 3),
        duration_s=round(duration_s, 2) if duration_s is not None else None,
        jobs=jobs,
        not_watched=refused,
        note=None if jobs or refused else NO_JOBS,
        pace=round(node.pace(), 3),
        aitop=s.AitopCost(
            cpu_percent_of_one_core=_round(aitop_cpu_percent, 2),
            rss_mb=_round(aitop_rss_bytes / 1e6, 1) if aitop_rss_bytes else None),
        warnings=[],
    )


def _job(job: NodeJob, t: float, live: bool, conclude: Conclude | None,
         interrupted: bool) -> s.NodeJob:
    source = job.source
    report = None
    state = job_state(None)
    if source is not None:
        conclusion = conclude(source, t) if conclude else conclusion_of(source, t, live)
        attached = source.session.started_at or t
        warnings = source.warnings if isinstance(source, LiveJob) else ()
        facts = RunFacts(max(0.0, t - attached), None, None, warnings, interrupted)
        report = report_of(source, t, conclusion, facts, attached)
        state = job_state(conclusion.diagnosis)
    return s.NodeJob(
        job_id=job.job_id, pid=job.pid, user=job.user, command=list(job.command),
        started_at=_round(job.started_at, 3),
        status=cast(s.WatchStatus, job.status), state=state, report=report)


def render_node_text(report: s.NodeReport) -> str:
    """The human-readable node report: a header, each job's own report, the refused."""
    lines = [f"aitop {report.aitop_version} - node {report.hostname} - "
             f"{len(report.jobs)} PyTorch job(s) watched"
             + (f" for {report.duration_s} s" if report.duration_s is not None else "")
             + (f", each {report.pace:g}x slower than its own cadence"
                if report.pace and report.pace > 1 else "")]
    if report.note:
        lines += ["", report.note]
    for job in report.jobs:
        lines += ["", f"== job {job.job_id}: PID {job.pid}, user {job.user}, "
                      f"{job.state.replace('_', ' ')} ({job.status})",
                  f"   {' '.join(job.command)}"]
        if job.report is not None:
            lines += ["   " + line if line else "" for line in
                      render_text(job.report).splitlines()]
    if report.not_watched:
        lines += ["", "Not watched:"]
        for item in report.not_watched:
            lines.append(f"  PID {item.pid} ({item.user}: {' '.join(item.command)}): "
                         f"{item.reason}")
    a = report.aitop
    if a.cpu_percent_of_one_core is not None:
        lines += ["", f"aitop itself: {a.cpu_percent_of_one_core:.2f}% of one core "
                      f"(py-spy included), {a.rss_mb} MB RSS"]
    return "\n".join(lines)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
