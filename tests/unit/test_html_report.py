"""The HTML report: what it draws, what it escapes, and what it may load."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import msgspec
from aitop.engine.compare.diff import compare
from aitop.engine.compare.runs import run_of_report
from aitop.engine.headless.source_report import recorded_report
from aitop.engine.html.page import CONTENT_SECURITY_POLICY, render_html
from aitop.engine.html.svg import nice_ceiling
from support.knowledge import PACKAGED
from support.tui_session import replay_source


class _Elements(HTMLParser):
    """Every start tag with its attributes, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def elements(page: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Elements()
    parser.feed(page)
    return parser.tags


def test_nice_ceiling_rounds_up_to_a_readable_axis() -> None:
    assert [nice_ceiling(v) for v in (0.0, 0.7, 1.0, 1.3, 2.2, 3.0, 7.0, 430.0)] == [
        1.0, 1.0, 1.0, 2.0, 2.5, 5.0, 10.0, 500.0]


def test_the_page_charts_every_recorded_series_and_marks_when_findings_fired() -> None:
    source = replay_source()
    report = recorded_report(source)
    page = render_html(report, source.session)
    tags = elements(page)
    charts = {a["data-chart"]: int(a["data-points"] or 0) for t, a in tags
              if t == "div" and "data-chart" in a}
    assert set(charts) == {"phases", "steps", "cpu", "memory", "gpu_util", "gpu_memory"}, charts
    assert all(n >= 10 for n in charts.values()), charts
    # Each line's points are in the markup, one "x,y" pair per sample.
    series = [a for t, a in tags if t in ("polyline", "polygon")]
    assert series and all(len(re.findall(r"[\d.]+,[\d.]+", a["points"] or "")) >= 10
                          for a in series)
    fired = [f for f in report.findings if f.fired_after_s is not None]
    assert fired, "the fixture's findings carry when they fired"
    # Findings that fired at the same moment share one numbered line.
    moments = {round(f.fired_after_s or 0.0) for f in fired}
    markers = sum(1 for t, a in tags if t == "g" and a.get("class") == "marker")
    assert markers == len(moments) * len(charts)
    first = min(moments)
    together = [str(i) for i, f in enumerate(report.findings, 1)
                if f.fired_after_s is not None and round(f.fired_after_s) == first]
    assert len(together) >= 2 and f">{','.join(together)}</text>" in page
    for f in report.findings:
        assert f'id="finding-{f.id}"' in page


def test_the_page_loads_nothing_and_runs_no_script() -> None:
    source = replay_source()
    page = render_html(recorded_report(source), source.session)
    tags = elements(page)
    csp = [a["content"] for t, a in tags if t == "meta"
           and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp == [CONTENT_SECURITY_POLICY] and "default-src 'none'" in CONTENT_SECURITY_POLICY
    assert not [t for t, _ in tags if t in ("script", "link", "iframe", "img", "object")]
    assert not [a for _, a in tags for k in ("src", "href") if a.get(k)]


def test_text_from_the_job_is_escaped_and_secrets_stay_redacted() -> None:
    source = replay_source()
    report = recorded_report(source)
    hostile = msgspec.structs.replace(report.findings[0], title='<script>alert("x")</script> & co')
    page = render_html(msgspec.structs.replace(report, findings=[hostile, *report.findings[1:]]),
                       source.session)
    assert "<script>" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; co" in page
    # The fixture's command line carries --token ***: the page shows the redacted form.
    assert "--token &#39;***&#39;" in page and "WANDB_API_KEY" not in page


def test_a_baseline_adds_the_before_and_after_comparison() -> None:
    source = replay_source()
    report = recorded_report(source)
    slower = run_of_report(report, "before")
    page = render_html(report, source.session,
                       comparison=compare(slower, run_of_report(report, "after"),
                                          knowledge=PACKAGED))
    assert 'id="comparison"' in page and "no significant change" in page
    assert 'id="comparison"' not in render_html(report, source.session)


def test_a_finding_kept_firing_says_when_its_condition_last_held() -> None:
    source = replay_source()
    report = recorded_report(source)
    assert "its condition last held" not in render_html(report, source.session)
    held = msgspec.structs.replace(report.findings[0], last_held_after_s=95.0)
    page = render_html(msgspec.structs.replace(report, findings=[held, *report.findings[1:]]),
                       source.session)
    assert "its condition last held after 1m35s, kept firing since" in page
