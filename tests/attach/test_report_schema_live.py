"""A live headless ``--json`` report (the data demo's shared watched run) validates
against the shipped schema."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.jobs import WatchedRun
from support.report_schema import errors_of

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "selftest_data"


@pytest.mark.attach
def test_a_live_headless_report_validates_against_the_shipped_schema(
    watched_run: WatchedRun,
) -> None:
    """``aitop --pid P --headless --json`` of a real training job, py-spy attached."""
    report = watched_run("data").report
    assert errors_of(report) == []
    assert report["findings"] and report["steps_source"] is not None
