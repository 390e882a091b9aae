"""The report of a source at a point in time: one builder for live runs and replays."""

from __future__ import annotations

from aitop.engine.live.job import job_verdict_json, rank_rows, ranks_json
from aitop.engine.live.source import Conclusion, DataSource
from aitop.engine.reports.report import RunFacts, build_report
from aitop.engine.reports.schema import Report


def report_of(
    source: DataSource, now: float, conclusion: Conclusion, facts: RunFacts,
    attached_at: float,
) -> Report:
    """The report of ``source`` as seen at ``now``, with what it concluded then."""
    return build_report(
        source.session,
        conclusion.diagnosis,
        source.history(),
        facts,
        attached_at,
        ranks=ranks_json(rank_rows(source, conclusion, now)),
        job_verdict=job_verdict_json(conclusion.judgement),
    )
