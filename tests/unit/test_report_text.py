"""The headless text report: what each line claims."""

from __future__ import annotations

import pytest
from aitop.engine.reports.gain import gain_text
from aitop.engine.reports.schema import Finding
from aitop.knowledge.base.findings import GainMethod


def finding(speedup: float | None, low: float | None, high: float | None,
            method: GainMethod, ceiling: float | None = None) -> Finding:
    """A report finding as ``--json`` writes it (what render_text reads)."""
    return Finding(id="f", severity="high", category="data_loading", title="t",
                   est_speedup=speedup, est_speedup_range=(low, high), gain_method=method,
                   gain_ceiling=ceiling)


def test_a_finding_without_a_figure_says_why() -> None:
    gain = Finding(id="f", severity="high", category="compute", title="t", gain_method="none",
                   gain_explanation="depends on the batch it can form").gain
    assert gain_text(gain) == "no figure: depends on the batch it can form"
    assert gain_text(gain, brief=True).strip() == "·"


@pytest.mark.parametrize(("report_finding", "label"), [
    # Two significant figures: reruns of one job differ in the second.
    (finding(1.9, 1.69, 2.18, "predicted", 20.93), "predicted ×1.7–2.2 (ceiling ×21)"),
    (finding(1.0, 1.0, 1.0, "predicted"), "predicted ×1.0"),
    (finding(1.5, 1.46, 1.54, "predicted"), "predicted ×1.5"),
    (finding(8.9, 8.9, 8.9, "amdahl", 8.9), "at most ×8.9 (Amdahl ceiling)"),
    (finding(86.3, 86.3, 86.3, "amdahl", 86.3), "at most ×86 (Amdahl ceiling)"),
    (finding(100.0, 100.0, 100.0, "amdahl", 100.0), "at most ×100 (Amdahl ceiling)"),
    (finding(9.96, 9.96, 9.96, "amdahl", 9.96), "at most ×10 (Amdahl ceiling)"),
    # A ceiling whose low end slows the job says so (a worker beside compute threads).
    (finding(1.6, 0.79, 1.6, "amdahl", 1.6),
     "at most ×1.6 (Amdahl ceiling), ×0.79 where its compute scales over threads"),
    (finding(1.67, 1.25, 1.67, "amdahl", 1.67), "at most ×1.7 (Amdahl ceiling)"),
    (finding(1.4, 1.3, 1.5, "document"), "documents: ×1.4 (1.3–1.5)"),
    (finding(None, None, None, "none"), "no figure"),
    (finding(None, None, None, "predicted"), "no prediction yet"),
])
def test_the_text_report_says_which_kind_of_gain(report_finding: Finding, label: str) -> None:
    """A prediction is not a ceiling: the headless text never says "at most" for one."""
    assert gain_text(report_finding.gain) == label


def test_a_finding_kept_firing_says_so_in_the_text_report_and_in_a_comparison() -> None:
    """Held findings (kept firing after their condition stopped holding) are named as
    such by the text report and by ``aitop diff``, which would otherwise call them
    "still limiting"."""
    import msgspec
    from aitop.engine.compare.diff import HELD_NOTE, compare
    from aitop.engine.compare.diff import render_text as diff_text
    from aitop.engine.compare.runs import run_of_report
    from aitop.engine.headless.source_report import recorded_report
    from aitop.engine.reports.text import render_text
    from support.knowledge import PACKAGED
    from support.tui_session import replay_source

    report = recorded_report(replay_source())
    assert "kept firing" not in render_text(report)
    held = msgspec.structs.replace(report.findings[0], last_held_after_s=95.0)
    report = msgspec.structs.replace(report, findings=[held, *report.findings[1:]])
    assert "   kept firing: its condition last held 95 s in" in render_text(report)
    comparison = compare(run_of_report(report, "before"), run_of_report(report, "after"),
                         knowledge=PACKAGED)
    text = diff_text(comparison)
    assert f"{held.id} [{held.severity}] {held.title}{HELD_NOTE}" in text
    if comparison.next_steps:
        assert f"still limiting [{held.severity}]: {held.title}" not in text
