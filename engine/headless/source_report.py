"""The report of a source at a point in time: one builder for live runs and replays."""

from __future__ import annotations

import time

from aitop.engine.live.job import rank_rows
from aitop.engine.live.source import Conclusion, DataSource
from aitop.engine.reports.build import RunFacts, build_report
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
        ranks=rank_rows(source, conclusion, now),
        judgement=conclusion.judgement,
    )


def recorded_report(source: DataSource) -> Report:
    """The report of a whole recording, as of its last sample (``aitop replay --headless``,
    ``aitop report``)."""
    conclusion = source.latest()
    diagnosis = conclusion.diagnosis
    started = source.session.started_at or (diagnosis.t if diagnosis else time.time())
    latest = source.session.latest_time() or started
    return report_of(source, latest, conclusion, RunFacts(latest - started, None, None), started)
