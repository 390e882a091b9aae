"""The Markdown report is rendered from the typed report, so it says what the JSON says."""

from __future__ import annotations

from pathlib import Path

from aitop.engine.headless.export import write_snapshot
from aitop.engine.headless.source_report import report_of
from aitop.engine.reports import humanize as fmt
from aitop.engine.reports.build import RunFacts
from aitop.engine.reports.markdown import Wording, render_markdown, wording_of
from aitop.knowledge.base.catalogue import CATALOGUE
from support.knowledge import PACKAGED
from support.tui_session import DATA_SOURCE, NOW, T0, replay_source


def test_an_export_of_a_headless_run_says_what_its_report_says(tmp_path: Path) -> None:
    """The report handed in (a verdict older than the newest, attached later than the
    recording began) is the one the Markdown renders, not the history's newest."""
    source = replay_source()
    report = report_of(source, NOW, source.at(T0 + 120), RunFacts(150.0, None, None), T0 + 30)
    assert report.evaluated_at == T0 + 120 and source.history()[-1].t == NOW
    md = write_snapshot(tmp_path / "run.json", source, report=report)[1].read_text()
    assert f"- **Recorded:** {fmt.stamp(T0 + 30)} to {fmt.stamp(NOW)} (2m30s)" in md
    assert f"the 30s ending {fmt.stamp(T0 + 120)}" in md
    titles = [line.split(". ", 1)[1] for line in md.splitlines() if line.startswith("### ")]
    assert titles == [f.title for f in report.findings]
    assert f"**{report.bottleneck.category}** on gpu: {report.bottleneck.summary}" in md


def test_the_words_the_report_only_names_come_from_the_diagnoses() -> None:
    source = replay_source()
    report = report_of(source, NOW, source.latest(), RunFacts(180.0, None, None), T0)
    lead = report.findings[0]
    quote = f"> {DATA_SOURCE.quote}"
    bare = render_markdown(report, source.session, PACKAGED)
    assert quote not in bare
    described = CATALOGUE["phase_data_wait"].description
    assert f"| {described} | 42% |" in bare, "a label not found is the catalogue's"
    worded = render_markdown(report, source.session, PACKAGED,
                             wording_of(report, reversed(source.history())))
    assert quote in worded and "| Data wait share of step | 42% |" in worded
    assert wording_of(report, []) == Wording()
    assert lead.id in wording_of(report, reversed(source.history())).quotes


def test_a_finding_kept_firing_says_when_its_condition_last_held() -> None:
    """A held finding is told with the numbers of the moment its condition last
    held; the report says which moment, so its title is not read as today's."""
    source = replay_source()
    report = report_of(source, NOW, source.latest(), RunFacts(180.0, None, None), T0)
    lead = report.findings[0]
    assert lead.last_held_after_s is None
    assert "Condition last held" not in render_markdown(report, source.session, PACKAGED)
    lead.last_held_after_s = 95.0
    md = render_markdown(report, source.session, PACKAGED)
    assert f"**Condition last held:** {fmt.stamp(T0 + 95.0)} (kept firing since" in md
