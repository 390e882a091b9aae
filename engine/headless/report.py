"""The report of a source at a point in time: one builder for live runs and replays."""

from __future__ import annotations

from aitop.engine.live.job import job_verdict_json, judge, rank_rows, ranks_json
from aitop.engine.live.source import DataSource
from aitop.engine.reports.report import RunFacts, build_report
from aitop.engine.reports.schema import Report
from aitop.knowledge.model import Diagnosis


def report_of(
    source: DataSource, now: float, diagnosis: Diagnosis | None, facts: RunFacts,
    attached_at: float,
) -> Report:
    """The report of ``source`` as seen at ``now``, concluding ``diagnosis``."""
    judgement = judge(source, now, diagnosis)
    return build_report(
        source.session,
        diagnosis,
        source.history(),
        facts,
        attached_at,
        ranks=ranks_json(rank_rows(source, now, diagnosis, judgement)),
        job_verdict=job_verdict_json(judgement),
    )
