"""The demo jobs' ground truth counts a long phase the stop interrupts."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from aitop.demo.truth import Truth


def records(path: Path) -> list[dict[str, float]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_phase_finished_is_counted_and_written_with_the_next_record(tmp_path: Path) -> None:
    truth = Truth(tmp_path / "t.jsonl")
    with truth.timing("checkpoint"):
        time.sleep(0.05)
    assert truth.totals["checkpoint"] >= 0.05
    assert not (tmp_path / "t.jsonl").exists()  # written by the loop's maybe_write


def test_a_phase_the_stop_interrupts_is_counted_up_to_the_stop(tmp_path: Path) -> None:
    """A window ending inside a long save must read the save, not the record before it."""
    truth = Truth(tmp_path / "t.jsonl")
    truth.maybe_write(force=True)
    with pytest.raises(KeyboardInterrupt), truth.timing("checkpoint"):
        time.sleep(0.05)
        raise KeyboardInterrupt
    last = records(tmp_path / "t.jsonl")[-1]
    assert len(records(tmp_path / "t.jsonl")) == 2
    assert last["checkpoint"] >= 0.05 and last["checkpoint"] == truth.totals["checkpoint"]
