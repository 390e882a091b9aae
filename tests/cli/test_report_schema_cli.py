"""The CLI's own ``--json`` bytes validate against the shipped report schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from aitop.engine.headless.export import write_snapshot
from support.report_schema import errors_of
from support.tui_session import replay_source


@pytest.mark.timeout(120)
def test_a_real_replay_report_validates_against_the_shipped_schema(tmp_path: Path) -> None:
    """The CLI's own ``--json`` bytes (a subprocess), not a struct built here."""
    recording = tmp_path / "rec.json"
    write_snapshot(recording, replay_source())
    result = subprocess.run(
        [sys.executable, "-m", "aitop.tui", "replay", "--headless", "--json", str(recording)],
        capture_output=True, text=True, timeout=100, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert errors_of(doc) == []
    assert doc["findings"] and doc["steps_source"] is not None
