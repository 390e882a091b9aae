"""The ``--rules`` a command is given reaches what it prints, through the real CLI.

``aitop replay`` and ``aitop report`` judge a recorded job's straggler by the
cut the rules file names (``conditions: holds_back_job``), and ``aitop diff``
advises by the rules it defines (a resolved finding's ``techniques`` mark the
priority it addressed as done). A bad rules file ends each before it reads a run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aitop.engine.headless.export import write_snapshot
from support.jobs import run_aitop
from support.rule_files import MOVED_TARGETS, THREE_MISTAKES, write_rule_file
from support.tui_session import PID, two_rank_replay

STRAGGLER = f"rank 1 (PID {PID + 1})"


@pytest.mark.parametrize("command", [["replay", "--headless"], ["report"]])
def test_a_replays_straggler_flag_follows_the_rules_cut(tmp_path: Path,
                                                        command: list[str]) -> None:
    """The straggler's score is 0.44: held back under the packaged cut (0.75), not
    under the file's 0.3."""
    recording = write_snapshot(tmp_path / "job.json", two_rank_replay())[0]
    rules = write_rule_file(tmp_path, MOVED_TARGETS)
    packaged = run_aitop(*command, str(recording), "--json", timeout=60)
    moved = run_aitop(*command, str(recording), "--json", "--rules", str(rules), timeout=60)
    assert packaged.returncode == moved.returncode == 0, packaged.stderr + moved.stderr
    before, after = (json.loads(r.stdout)["job_verdict"] for r in (packaged, moved))
    assert before["straggler"] == STRAGGLER, before
    assert after["straggler"] is None, after
    assert before["straggler_score"] == after["straggler_score"] == pytest.approx(0.4444, 1e-3)


def report(findings: list[dict[str, Any]], states: list[dict[str, str]]) -> dict[str, Any]:
    return {"schema": "aitop.report/2", "target": {"pid": 1, "cmdline": ["python"]},
            "phases": None, "steps_per_s": None, "bottleneck": {"category": "host"},
            "findings": findings, "states": states}


def test_aitop_diff_advises_by_the_rules_file(tmp_path: Path) -> None:
    """Before, the file's own rule ``slow_logging`` fired; after, it no longer does
    and the job sits at 70-85 % GPU utilisation, whose Priority 1 is mixed precision:
    the rule recommends it, so with the file that priority reads as done."""
    before, after = tmp_path / "before.json", tmp_path / "after.json"
    before.write_text(json.dumps(report(
        [{"id": "slow_logging", "severity": "medium", "category": "host",
          "title": "Logging takes 30% of the loop"}], [])))
    after.write_text(json.dumps(report(
        [], [{"id": "gpu_util_70_85", "name": "GPU utilization 70-85%"}])))
    rules = write_rule_file(tmp_path, MOVED_TARGETS)
    packaged = run_aitop("diff", str(before), str(after), "--json", timeout=60)
    moved = run_aitop("diff", str(before), str(after), "--json", "--rules", str(rules),
                      timeout=60)
    assert packaged.returncode == moved.returncode == 0, packaged.stderr + moved.stderr
    [plain] = json.loads(packaged.stdout)["next_steps"]
    [advised] = json.loads(moved.stdout)["next_steps"]
    assert "1. Mixed-precision training <- try next" in plain, plain
    assert "1. Mixed-precision training (its finding slow_logging no longer fires)" in advised
    assert "2. Model compilation <- try next" in advised, advised


@pytest.mark.parametrize("command", [["replay", "--headless"], ["report"], ["diff"]])
def test_a_bad_rules_file_ends_the_command_before_it_reads(tmp_path: Path,
                                                           command: list[str]) -> None:
    """Every mistake of the file, one line each (THREE_MISTAKES has three), exit 2."""
    recording = write_snapshot(tmp_path / "job.json", two_rank_replay())[0]
    files = [str(recording)] * (2 if command == ["diff"] else 1)
    bad = write_rule_file(tmp_path, THREE_MISTAKES)
    result = run_aitop(*command, *files, "--rules", str(bad), timeout=60)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith(f"aitop: bad rule file: {bad}:3: "), lines
    assert len(lines) == 3, lines
    assert all(f"{bad}:{n}: " in line for line, n in zip(lines, (3, 4, 7), strict=True)), lines
    missing = run_aitop(*command, *files, "--rules", str(tmp_path / "nope.yaml"), timeout=60)
    assert missing.returncode == 2
    assert missing.stderr.startswith("aitop: rule file not found:"), missing.stderr
