"""Writing the HTML report of a source: beside an export, or for ``aitop report --html``."""

from __future__ import annotations

from aitop.engine.compare.diff import compare
from aitop.engine.compare.runs import Run, run_of_report
from aitop.engine.html.page import render_html
from aitop.engine.live.source import DataSource
from aitop.engine.reports.schema import Report


def html_of(report: Report, source: DataSource, baseline: Run | None = None) -> str:
    """The HTML page of ``report`` (``source``'s samples drawn), against ``baseline`` if given."""
    comparison = (compare(baseline, run_of_report(report, "this run"), knowledge=source.knowledge)
                  if baseline else None)
    return render_html(report, source.session, comparison=comparison)

