"""The CI gates on the real CLI: a gate that could not look is no pass, and a
regression inside the runs' own noise is no regression."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.jobs import EXIT_GATE, run_aitop
from support.processes import sleeping


def test_fail_on_exits_1_when_nothing_could_be_judged() -> None:
    """A 2-s look at a process that only sleeps judges nothing: exit 1, not a pass."""
    with sleeping() as target:
        result = run_aitop("--pid", str(target.pid), "--headless", "--json", "--duration", "2",
                           "--fail-on", "high", timeout=60)
    report = json.loads(result.stdout)  # the report is still written in full
    assert report["bottleneck"]["judged"] is False, report["bottleneck"]
    assert result.returncode == 1, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("aitop: --fail-on high: nothing could be judged ("), lines
    assert lines[-1].endswith("watch longer (--duration)") and "Traceback" not in result.stderr


def report_with_windows(rates: list[float]) -> dict[str, Any]:
    """A report whose steps/s comes from one-second counter windows at ``rates``."""
    windows = [[1000.0 + i, 1001.0 + i, rate] for i, rate in enumerate(rates)]
    return {"schema": "aitop.report/2", "target": {"pid": 1, "cmdline": ["python"]},
            "phases": None, "steps_per_s": sum(rates) / len(rates), "step_windows": windows,
            "bottleneck": {"category": "none"}, "findings": []}


def test_fail_on_regression_trips_only_on_a_significant_fall(tmp_path: Path) -> None:
    before, noisy, slower = (tmp_path / f"{n}.json" for n in ("before", "noisy", "slower"))
    before.write_text(json.dumps(report_with_windows([10.0, 10.2, 9.8, 10.1, 9.9])))
    # 20 % lower on average, but its windows swing from 2 to 14 steps/s.
    noisy.write_text(json.dumps(report_with_windows([2.0, 14.0, 4.0, 12.0, 8.0])))
    slower.write_text(json.dumps(report_with_windows([8.0, 8.1, 7.9, 8.0, 8.0])))
    calm = run_aitop("diff", str(before), str(noisy), "--fail-on-regression", "10", timeout=60)
    assert "no significant change" in calm.stdout, calm.stdout
    assert calm.returncode == 0, calm.stderr
    fell = run_aitop("diff", str(before), str(slower), "--fail-on-regression", "10", timeout=60)
    assert fell.returncode == EXIT_GATE, fell.stderr
    assert "--fail-on-regression 10: steps/s fell 20.0%" in fell.stderr, fell.stderr
