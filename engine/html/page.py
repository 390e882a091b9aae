"""The self-contained HTML report: a run a colleague opens in any browser, offline.

One file: styles inline, charts as inline SVG (:mod:`aitop.engine.html.svg`),
no script, and a Content-Security-Policy that forbids the page any fetch at
all, so a report opened from a mail or a ticket cannot call anywhere. The
text comes from the typed report (:class:`aitop.engine.reports.schema.Report`:
command lines and environment already redacted) and Jinja2 escapes it.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from importlib import resources

import jinja2
from aitop.engine.compare.diff import Comparison, rate_text, steps_text
from aitop.engine.html.charts import Chart, charts_of
from aitop.engine.html.svg import Marker, chart_svg, legend
from aitop.engine.reports import humanize as fmt
from aitop.engine.reports.gain import gain_text
from aitop.engine.reports.schema import Report
from aitop.probes.session import Session

#: What the page may load: nothing from anywhere; its own inline styles and
#: data: images only.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


@dataclass(frozen=True, slots=True)
class DrawnChart:
    """A chart ready for the page: its SVG markup and its legend."""

    chart: Chart
    svg: str
    legend: list[tuple[str, str]]


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("aitop.engine.html", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters["duration"] = fmt.duration
    env.filters["gain"] = gain_text
    env.filters["pct"] = lambda v: "—" if v is None else f"{v:.0%}"
    env.filters["num"] = lambda v, spec=".2f": "—" if v is None else format(v, spec)
    return env


def _markers(report: Report) -> list[Marker]:
    return [Marker(f.fired_after_s, f"{i}. {f.title}")
            for i, f in enumerate(report.findings, 1) if f.fired_after_s is not None]


def render_html(
    report: Report,
    session: Session,
    *,
    comparison: Comparison | None = None,
    title: str | None = None,
    generated_at: float | None = None,
) -> str:
    """The report as one HTML document (``comparison``: against a baseline run)."""
    start = report.attached_at or session.started_at or 0.0
    charts = charts_of(session, start, report.step_windows)
    t_end = max([report.duration_s or 0.0] +
                [line.points[-1][0] for c in charts for line in c.lines if line.points])
    markers = _markers(report)
    drawn = [DrawnChart(c, chart_svg(c, t_end, markers), legend(c)) for c in charts]
    target = report.target
    command = shlex.join(target.cmdline) if target.cmdline else "?"
    template = _environment().get_template("report.html.j2")
    return template.render(
        csp=CONTENT_SECURITY_POLICY,
        title=title or f"aitop report: {command[:80]}",
        report=report,
        command=command,
        charts=drawn,
        markers=markers,
        comparison=comparison,
        steps_change=steps_text(comparison.steps) if comparison else "",
        rate_text=rate_text,
        generated=time.strftime("%Y-%m-%d %H:%M:%S %Z",
                                time.localtime(generated_at or time.time())),
    )


def template_text() -> str:
    """The template's source (for tests that check what it may load)."""
    return resources.files("aitop.engine.html").joinpath("templates/report.html.j2").read_text()
