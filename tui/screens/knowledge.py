"""Knowledge: the documents' own tables, with where this job stands highlighted.

The priority framework (current state → priorities 1-3) with the matching
rows marked, the key-metrics table with this job's current values judged
against each target, and the bottleneck-location table with the current
category marked. The documents and targets are the run's knowledge base
(``View.knowledge``: loaded once where the command started, with its ``--rules``).
"""

from __future__ import annotations

from aitop.engine.reports.key_metrics import read_key_metric, target_text
from aitop.knowledge.base.documents import KnowledgeDocuments
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..widgets import fmt
from ..widgets.view import View
from .base import DetailScreen

NOW_STYLE = "bold reverse"


def priority_table(kd: KnowledgeDocuments, view: View) -> Table:
    states = view.diagnosis.states if view.diagnosis is not None else ()
    current = {s.id for s in states}
    table = Table(expand=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("", width=5, no_wrap=True)
    table.add_column("Current state", ratio=3)
    table.add_column("Priority 1 (highest impact)", ratio=3)
    table.add_column("Priority 2", ratio=2)
    table.add_column("Priority 3", ratio=2)
    rows = [(p.id, p.state, [x.text for x in p.priorities]) for p in kd.priority_framework]
    known = {r[0] for r in rows}
    rows += [(s.id, s.name, list(s.priorities)) for s in states if s.id not in known]
    for sid, name, prios in rows:
        prios = (prios + ["—"] * 3)[:3]
        on = sid in current
        style = NOW_STYLE if on else ""
        table.add_row(Text("now ▶" if on else "", style="bold"), Text(name, style=style),
                      *(Text(p, style="bold" if on else "") for p in prios))
    return table


def metrics_table(kd: KnowledgeDocuments, view: View) -> Table:
    table = Table(expand=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("Metric", ratio=2)
    table.add_column("Tool", ratio=2)
    table.add_column("Target range", ratio=3)
    table.add_column("This job now", ratio=3)
    table.add_column("", width=2)
    table.add_column("What it tells you", ratio=3)
    for m in kd.metrics:
        reading = read_key_metric(m.id, view.session, view.diagnosis, view.now, view.window_s,
                                  view.targets)
        style = fmt.STATUS_STYLE.get(reading.status, "")
        table.add_row(Text(m.metric, style="bold"), Text(m.tool, style="dim"),
                      target_text(m.id, m.target, view.targets),
                      Text(reading.display, style=style),
                      Text(fmt.STATUS_SYMBOL.get(reading.status, "?")
                           if reading.status != "unknown" else "", style=style),
                      Text(m.tells, style="dim"))
    return table


def bottleneck_table(kd: KnowledgeDocuments, view: View) -> Table:
    category = view.diagnosis.category if view.diagnosis is not None else None
    table = Table(expand=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("", width=5, no_wrap=True)
    table.add_column("Bottleneck location", ratio=2)
    table.add_column("Primary symptom", ratio=3)
    table.add_column("Key fix", ratio=3)
    for row in kd.bottlenecks:
        on = row.category == category
        table.add_row(Text("now ▶" if on else "", style="bold"),
                      Text(row.location, style=NOW_STYLE if on else ""),
                      row.primary_symptom, row.key_fix)
    return table


class KnowledgeScreen(DetailScreen):
    """The documents' priority framework and key metrics, with this job in them."""

    TITLE = "Knowledge"

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            yield Static(id="knowledge-body")

    def update_view(self, view: View) -> None:
        super().update_view(view)
        self.query_one("#knowledge-body", Static).update(self.render_body(view))

    def render_body(self, view: View) -> RenderableType:
        kd = view.knowledge.documents
        parts: list[RenderableType] = []
        d = view.diagnosis
        parts.append(Text("Optimization priority framework", style="bold underline"))
        parts.append(Text("Start with Priority 1 for your current state, measure the impact, "
                          "then move to Priority 2.", style="dim italic"))
        if d is None:
            parts.append(Text("No diagnosis yet: the current state is not known.", style="dim"))
        elif not d.states:
            parts.append(Text("No row of the framework matches the job right now.", style="dim"))
        parts.append(priority_table(kd, view))
        parts.append(Text("\nKey metrics to track", style="bold underline"))
        parts.append(metrics_table(kd, view))
        if kd.bottlenecks:
            parts.append(Text("\nBottleneck location", style="bold underline"))
            parts.append(bottleneck_table(kd, view))
        titles = " · ".join(f"{doc.id}: {doc.title}" for doc in kd.documents)
        parts.append(Text(f"\nSources: {titles}", style="dim"))
        return Group(*parts)
