"""A finding kept firing after its condition stopped holding says so on screen.

``keep_firing_for`` keeps a finding up a while after its condition last held,
told with that moment's numbers (tests/unit/test_rules.py). The findings list
and the finding's own screen say which moment, so "waits for data 50 %" is not
read as now.
"""

from __future__ import annotations

from aitop.knowledge.base.findings import Diagnosis
from aitop.knowledge.judging.diagnosis import Diagnoser, Facts
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.tui.screens.finding import render_finding
from aitop.tui.widgets import fmt
from aitop.tui.widgets.advisor_panel import AdvisorPanel
from aitop.tui.widgets.view import View
from rich.console import Console
from support.synthetic import Job, mix, run

KB = load_knowledge_base()
RULE = "data_wait_dominant"


def _text(renderable: object) -> str:
    console = Console(width=160, record=True)
    console.print(renderable)
    return console.export_text()


def test_the_list_and_the_finding_say_when_a_held_condition_last_held() -> None:
    session, ticks = run(Diagnoser(KB.rules, Facts()), (Job(phases=mix(data_wait=0.5)), 40),
                         (Job(phases=mix(data_wait=0.02)), 60))
    shown: list[tuple[Diagnosis, float]] = []
    for tick in ticks:
        if tick.diagnosis is not None and RULE in tick.firing:
            shown.append((tick.diagnosis, tick.now))
    holding = [(d, now) for d, now in shown
               if next(f for f in d.findings if f.id == RULE).last_held_at is None]
    held = [(d, now) for d, now in shown if (d, now) not in holding]
    assert holding and held
    for diagnosis, now in (holding[-1], held[-1]):
        finding = next(f for f in diagnosis.findings if f.id == RULE)
        view = View(session, diagnosis, now, live=True, knowledge=KB)
        lines = [line.text.plain for line in AdvisorPanel().lines(view, 160)]
        # The list's row (severity, gain, title), not the verdict's headline above it.
        listed = next(line for line in lines
                      if finding.title in line and finding.severity.upper() in line)
        page = _text(render_finding(finding, view))
        if finding.last_held_at is None:
            assert "(as at" not in listed and "last held" not in page
        else:
            assert listed.endswith(f"(as at {fmt.clock(finding.last_held_at)})"), listed
            assert f"Its condition last held at {fmt.stamp(finding.last_held_at)}" in page
