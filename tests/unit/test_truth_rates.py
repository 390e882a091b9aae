"""The job's own rate over whole cycles of a phase (``rate_over_whole_cycles``), read
from records in the demo jobs' truth format, as a job that evaluates or saves every
few steps writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.jobs import rate_over_whole_cycles, truth_between


def write_cycles(path: Path, steps_per_cycle: int, train_s: float, block_s: float,
                 cycles: int, phase: str) -> None:
    """Training at steps_per_cycle / train_s steps/s, then a ``phase`` block of block_s,
    recorded every 0.25 s (the job's thread) and as each block ends (forced)."""
    records: list[dict[str, float]] = []
    t, steps, spent = 0.0, 0, 0.0

    def record() -> None:
        records.append({"t": 1000.0 + t, "elapsed": t, "steps": steps, phase: spent})

    for _ in range(cycles):
        for _ in range(steps_per_cycle):
            t += train_s / steps_per_cycle
            steps += 1
            record()
        for _ in range(int(block_s / 0.25)):
            t += 0.25
            spent += 0.25
            record()  # inside the block: steps stand still, the total grows
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.mark.parametrize("phase", ["eval", "checkpoint"])
def test_whole_cycles_count_every_block_once(tmp_path: Path, phase: str) -> None:
    truth = tmp_path / "job.jsonl"
    write_cycles(truth, steps_per_cycle=20, train_s=1.0, block_s=1.0, cycles=10, phase=phase)
    # A span from one block's end to the next block's start: the plain rate counts
    # one block too few; the whole cycles' rate is 20 steps per 2 s.
    t0, t1 = 1000.0 + 2.0, 1000.0 + 15.0
    assert truth_between(truth, t0, t1)["steps_per_s"] > 10.5
    assert rate_over_whole_cycles(truth, t0, t1, phase) == pytest.approx(10.0)


def test_a_block_after_every_step_or_two_still_ends(tmp_path: Path) -> None:
    """Blocks so close that no record between them stands still: each is an end
    because steps were taken after it."""
    truth = tmp_path / "job.jsonl"
    lines = []
    for i in range(1, 30):
        # 2 steps in 0.3 s, then a save of 0.1 s, recorded as it ends.
        lines.append({"t": 1000.0 + 0.4 * i, "elapsed": 0.4 * i, "steps": 2 * i,
                      "checkpoint": 0.1 * i})
    truth.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert rate_over_whole_cycles(truth, 1000.0, 1012.0, "checkpoint") == pytest.approx(5.0)


def test_fewer_than_two_block_ends_is_said(tmp_path: Path) -> None:
    truth = tmp_path / "job.jsonl"
    write_cycles(truth, steps_per_cycle=20, train_s=5.0, block_s=1.0, cycles=2, phase="eval")
    with pytest.raises(AssertionError, match="fewer than two eval blocks"):
        rate_over_whole_cycles(truth, 1000.0, 1007.0, "eval")
