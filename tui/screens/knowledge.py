"""Knowledge: the documents' own tables, with where this job stands highlighted.

The priority framework (current state → priorities 1-3) with the matching
rows marked, the key-metrics table with this job's current values judged
against each target, and the bottleneck-location table with the current
category marked. Loaded with ``aitop.knowledge.reading.loader.load_knowledge_base()``;
if the knowledge file cannot be loaded, the screen says why and still shows
the diagnosis's states and the current values.
"""

from __future__ import annotations

from typing import Any

from aitop.engine.reports.key_metrics import read_key_metric
from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..widgets import fmt
from ..widgets.view import View
from .base import DetailScreen

NOW_STYLE = "bold reverse"


def documents_or_error() -> tuple[Any | None, str | None]:
    """The loaded documents, or why they could not be loaded (one line)."""
    try:
        from aitop.knowledge.reading.loader import load_knowledge_base

        return load_knowledge_base().documents, None
    except Exception as exc:  # a missing or malformed file must not break the UI
        return None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def priority_table(kd: Any | None, view: View) -> Table:
    states = view.diagnosis.states if view.diagnosis is not None else ()
    current = {s.id for s in states}
    table = Table(expand=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("", width=5, no_wrap=True)
    table.add_column("Current state", ratio=3)
    table.add_column("Priority 1 (highest impact)", ratio=3)
    table.add_column("Priority 2", ratio=2)
    table.add_column("Priority 3", ratio=2)
    rows: list[tuple[str, str, list[str]]] = []
    if kd is not None:
        rows = [(p.id, p.state, [x.text for x in p.priorities])
                for p in kd.priority_framework]
    known = {r[0] for r in rows}
    rows += [(s.id, s.name, list(s.priorities)) for s in states if s.id not in known]
    for sid, name, prios in rows:
        prios = (prios + ["—"] * 3)[:3]
        on = sid in current
        style = NOW_STYLE if on else ""
        table.add_row(Text("now ▶" if on else "", style="bold"), Text(name, style=style),
                      *(Text(p, style="bold" if on else "") for p in prios))
    return table


def metrics_table(kd: Any, view: View) -> Table:
    table = Table(expand=True, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("Metric", ratio=2)
    table.add_column("Tool", ratio=2)
    table.add_column("Target range", ratio=3)
    table.add_column("This job now", ratio=3)
    table.add_column("", width=2)
    table.add_column("What it tells you", ratio=3)
    for mid, name, tool, target, tells in ((m.id, m.metric, m.tool, m.target, m.tells)
                                           for m in kd.metrics):
        reading = read_key_metric(mid, view.session, view.diagnosis, view.now, view.window_s)
        style = fmt.STATUS_STYLE.get(reading.status, "")
        table.add_row(Text(name, style="bold"), Text(tool, style="dim"), target,
                      Text(reading.display, style=style),
                      Text(fmt.STATUS_SYMBOL.get(reading.status, "?")
                           if reading.status != "unknown" else "", style=style),
                      Text(tells, style="dim"))
    return table


def bottleneck_table(kd: Any, view: View) -> Table:
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

    def __init__(self) -> None:
        super().__init__()
        self.documents: Any | None = None
        self.error: str | None = None
        #: Still parsing the file (not ``loading``: that is Textual's spinner reactive).
        self.pending = True

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            yield Static(id="knowledge-body")

    def on_mount(self) -> None:
        super().on_mount()
        self._load_documents()

    @work(thread=True, exclusive=True, group="knowledge", exit_on_error=False)
    def _load_documents(self) -> None:
        """Parse the knowledge file off the event loop (seconds on a busy machine)."""
        documents, error = documents_or_error()
        self.app.call_from_thread(self._loaded, documents, error)

    def _loaded(self, documents: Any | None, error: str | None) -> None:
        self.documents, self.error, self.pending = documents, error, False
        view = self.current_view()
        if view is not None and self.is_mounted:
            self.update_view(view)

    def update_view(self, view: View) -> None:
        super().update_view(view)
        self.query_one("#knowledge-body", Static).update(self.render_body(view))

    def render_body(self, view: View) -> RenderableType:
        kd = self.documents
        parts: list[RenderableType] = []
        if self.pending:
            parts.append(Text("Loading the documents…", style="dim"))
        elif kd is None:
            parts.append(Text(f"The knowledge file could not be loaded ({self.error}); "
                              "showing the diagnosis's own states.",
                              style=fmt.STATUS_STYLE["near"]))
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
        if kd is None:
            # The rows and their targets are the documents' own: no copy of them here
            # to drift from the file aitop judges with.
            parts.append(Text("The key metrics and their targets come with the documents.",
                              style="dim"))
        else:
            parts.append(metrics_table(kd, view))
        if kd is not None and getattr(kd, "bottlenecks", None):
            parts.append(Text("\nBottleneck location", style="bold underline"))
            parts.append(bottleneck_table(kd, view))
        if kd is not None:
            titles = " · ".join(f"{doc.id}: {doc.title}" for doc in kd.documents)
            parts.append(Text(f"\nSources: {titles}", style="dim"))
        return Group(*parts)
