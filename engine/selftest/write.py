"""The self-test's two reports: ``selftest.json`` for scripts, ``selftest.md`` for people.

Both hold the same facts: the machine, driver, GPU and PyTorch, and every
check with what was expected, what aitop gave, the tolerance and the verdict.
The Markdown is meant to be pasted into an issue as it is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aitop.engine.selftest.model import FAIL, Check, summarise

SCHEMA = "aitop.selftest/1"

GROUP_TITLES: dict[str, str] = {
    "pyspy": "py-spy attach",
    "nvml": "NVML fields: aitop's probe vs nvidia-smi at the same moment",
    "gpm": "GPM metrics (Hopper and newer)",
    "pcie": "PCIe counters vs bytes copied",
    "jobs": "The GPU jobs module",
    "cli": "The command line",
}


@dataclass
class SelftestResult:
    """Everything one self-test run established."""

    mode: str  # "gpu" or "cpu"
    quick: bool
    started_at: float
    duration_s: float
    machine: dict[str, Any]
    checks: list[Check]
    #: Why the GPU checks did not run ("no NVIDIA driver: ..."), in CPU mode.
    no_gpu_reason: str | None = None
    timings: dict[str, float] = field(default_factory=dict)
    job_titles: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(c.status == FAIL for c in self.checks)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "ok": self.ok,
            "mode": self.mode,
            "quick": self.quick,
            "no_gpu_reason": self.no_gpu_reason,
            "started_at": round(self.started_at, 3),
            "duration_s": round(self.duration_s, 1),
            "machine": self.machine,
            "summary": summarise(self.checks),
            "timings_s": {k: round(v, 1) for k, v in self.timings.items()},
            "checks": [c.to_json() for c in self.checks],
            "raw": "raw/ (nvidia-smi outputs, job logs and truth, aitop's reports)",
        }


def show(value: Any) -> str:
    """A value as a table cell: compact, no Python reprs."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={show(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return str(value)


def _cell(value: Any) -> str:
    return show(value).replace("|", "\\|").replace("\n", " ")


def _group_title(group: str, job_titles: Mapping[str, str]) -> str:
    if group.startswith("job:"):
        name = group.split(":", 1)[1]
        return f"Job `{name}`: {job_titles.get(name, name)}"
    return GROUP_TITLES.get(group, group)


def render_markdown(result: SelftestResult) -> str:
    counts = summarise(result.checks)
    verdict = "PASS" if result.ok else "FAIL"
    lines = [
        "# aitop selftest --gpu",
        "",
        f"**{verdict}**: {counts['pass']} passed, {counts['fail']} failed, "
        f"{counts['skip']} skipped, {counts['info']} for information; "
        f"{result.duration_s:.0f} s{' (--quick)' if result.quick else ''}.",
        "",
    ]
    if result.no_gpu_reason:
        lines += [f"No GPU here ({result.no_gpu_reason}): only the checks that run without "
                  "one ran; the GPU checks are listed as skipped, with why.", ""]
    lines += ["## Machine", "", "| | |", "|---|---|"]
    lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in result.machine.items()]
    groups: dict[str, list[Check]] = {}
    for check in result.checks:
        groups.setdefault(check.group, []).append(check)
    for group, checks in groups.items():
        lines += ["", f"## {_group_title(group, result.job_titles)}", "",
                  "| check | status | expected | seen | tolerance | detail |",
                  "|---|---|---|---|---|---|"]
        for c in checks:
            status = f"**{c.status.upper()}**" if c.status == FAIL else c.status
            lines.append(f"| {_cell(c.title)} | {status} | {_cell(c.expected)} | "
                         f"{_cell(c.seen)} | {_cell(c.tolerance)} | {_cell(c.detail)} |")
    if result.timings:
        lines += ["", "## Time spent", "", "| stage | seconds |", "|---|---|"]
        lines += [f"| {k} | {v:.1f} |" for k, v in result.timings.items()]
    lines += ["", "Raw outputs (nvidia-smi, job logs and ground truth, aitop's reports) are in "
              "`raw/` beside this file.", ""]
    return "\n".join(lines)


def write_reports(result: SelftestResult, out_dir: Path) -> tuple[Path, Path]:
    """Write ``selftest.json`` and ``selftest.md`` into ``out_dir``; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / "selftest.json", out_dir / "selftest.md"
    json_path.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    md_path.write_text(render_markdown(result))
    return json_path, md_path


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAIL]
