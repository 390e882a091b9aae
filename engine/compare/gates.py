"""CI gates: exit non-zero when a run is worse than a line you draw.

``--fail-on SEVERITY`` (with ``--headless``): a finding of that severity or
worse is firing in the final report. ``aitop diff --fail-on-regression PCT``:
steps/s fell by more than PCT percent. A tripped gate exits ``EXIT_GATE`` (3),
apart from 1 (aitop could not run) and 2 (usage), so a pipeline can tell a
slower job from a broken invocation; the reason is one line on stderr.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from aitop.engine.errors import EXIT_GATE, CliError
from aitop.engine.reports.schema import Report
from aitop.knowledge.base.findings import SEVERITIES

if TYPE_CHECKING:
    from aitop.engine.compare.diff import Comparison


def at_least(severity: str, threshold: str) -> bool:
    """Whether ``severity`` is ``threshold`` or worse (the knowledge base's order)."""
    order: dict[str, int] = {s: i for i, s in enumerate(SEVERITIES)}
    return order.get(severity, -1) >= order[threshold]


def findings_gate(report: Report, threshold: str) -> int:
    """``EXIT_GATE`` when the report's findings include one of ``threshold`` or worse."""
    hits = [f for f in report.findings if at_least(f.severity, threshold)]
    if not hits and not report.bottleneck.judged:
        # A run too short to judge is no pass: the gate would wave through a job
        # it never saw.
        raise CliError(f"--fail-on {threshold}: nothing could be judged "
                       f"({report.bottleneck.summary}); watch longer (--duration)")
    if not hits:
        return 0
    names = ", ".join(f"{f.id} [{f.severity}]" for f in hits)
    print(f"aitop: --fail-on {threshold}: {len(hits)} finding(s) at {threshold} or worse "
          f"fire: {names}", file=sys.stderr)
    return EXIT_GATE


def regression_gate(c: Comparison, pct: float) -> int:
    """``EXIT_GATE`` when steps/s fell by more than ``pct`` percent, significantly.

    A fall inside the runs' own noise (``aitop diff`` says "no significant
    change") does not trip the gate, however large its point estimate; nor does
    one under ``stats.DRIFT_PCT``, whatever ``pct`` says.
    """
    s = c.steps
    if s.change_pct is None:
        raise CliError(f"cannot check --fail-on-regression: {s.why}")
    if s.change_pct < -pct and s.verdict == "regressed":
        print(f"aitop: --fail-on-regression {pct:g}: steps/s fell {-s.change_pct:.1f}% "
              f"({s.verdict}: {s.why})", file=sys.stderr)
        return EXIT_GATE
    return 0
