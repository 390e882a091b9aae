"""Finding detail: the rule, its evidence, the source passage, the change, the gain.

Everything a person needs to decide whether to act: what fired (the rule's
expression), on which numbers (each against its target), on whose authority
(the document, section and quote), what to change (actions and a code snippet)
and what it should buy (the estimated gain and how it was computed).
"""

from __future__ import annotations

from aitop.engine.reports.gain import gain_text
from aitop.knowledge.base.findings import Finding
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..widgets import fmt
from ..widgets.view import View
from .base import DetailScreen


def section(title: str) -> Text:
    return Text(f"\n{title}", style="bold underline")


def evidence_table(finding: Finding) -> Table:
    """Status, value and target first (short, never cut); the long label wraps."""
    table = Table(box=None, pad_edge=False, header_style="dim", expand=True)
    table.add_column("", width=1, no_wrap=True)
    table.add_column("status", width=8, no_wrap=True)
    table.add_column("value", justify="right", no_wrap=True, max_width=16)
    table.add_column("target", ratio=1, max_width=28)
    table.add_column("evidence", ratio=3)
    for e in finding.evidence:
        style = fmt.STATUS_STYLE.get(e.status, "")
        label = Text(e.label)
        label.append(f"  {e.metric}", style="dim")
        table.add_row(
            Text(fmt.STATUS_SYMBOL.get(e.status, "?"), style=style),
            Text(e.status, style=style),
            Text(e.display, style=style),
            e.target or "—",
            label,
        )
    return table


def bullets(items: tuple[str, ...]) -> Table:
    """A bulleted list whose wrapped lines hang under the text, not the bullet."""
    table = Table.grid(padding=(0, 1))
    table.add_column(width=3, justify="right")
    table.add_column(ratio=1)
    for item in items:
        table.add_row("•", item)
    return table


def render_finding(finding: Finding, view: View | None) -> RenderableType:
    """The whole finding as one renderable (the screen scrolls it)."""
    f = finding
    badge = fmt.SEVERITY_STYLE.get(f.severity, "")
    if "reverse" not in badge:
        badge = f"{badge} reverse".strip()
    head = Text()
    head.append(f" {f.severity.upper()} ", style=badge)
    head.append(f"  {f.title}", style="bold")
    meta = Text(f"category {f.category} · estimated gain {gain_text(f.gain)} · fired at "
                f"{fmt.stamp(f.fired_at)} · id {f.id}", style="dim")
    parts: list[RenderableType] = [head, meta]
    if f.last_held_at is not None:
        parts.append(Text(f"Its condition last held at {fmt.stamp(f.last_held_at)}: kept firing "
                          "since, with that moment's numbers.", style=fmt.STATUS_STYLE["near"]))
    current = view.diagnosis if view is not None else None
    if current is not None and all(x.id != f.id for x in current.findings):
        parts.append(Text(f"Not firing at {fmt.clock(view.now if view else None)}; "
                          "showing it as it was when opened.", style=fmt.STATUS_STYLE["near"]))
    parts += [Text(""), Text(f.why)]
    if f.explains:
        parts.append(Text("Explains: " + "; ".join(f.explains), style="italic"))

    parts.append(section("Rule that fired"))
    parts.append(Padding(Text(f.expr, style="bold"), (0, 2)))

    parts.append(section("Evidence against its target range"))
    parts.append(Padding(evidence_table(f), (0, 2)) if f.evidence
                 else Text("  (none recorded)", style="dim"))

    parts.append(section("What to change"))
    parts.append(bullets(f.actions))
    if f.snippet:
        parts.append(Text(""))
        parts.append(Padding(Syntax(f.snippet.rstrip("\n"), "python", theme="ansi_dark",
                                    word_wrap=True, background_color="default"), (0, 2)))
    if f.techniques:
        parts.append(Text(f"  techniques: {', '.join(f.techniques)}", style="dim"))

    parts.append(section("Estimated gain"))
    gain = Text(f"  {gain_text(f.gain)}", style="bold")
    gain.append(f"   method: {f.gain.method}", style="dim")
    parts.append(gain)
    if f.gain.explanation:
        parts.append(Padding(Text(f.gain.explanation), (0, 2)))

    parts.append(section("Source"))
    src = Text(f"  {f.source.document}", style="bold")
    src.append(f" › {f.source.section}")
    parts.append(src)
    if f.source.quote:
        quote = Table.grid(padding=(0, 1))
        quote.add_column(width=1, style="dim")
        quote.add_column()
        quote.add_row("│", Text(f.source.quote, style="italic"))
        parts.append(Padding(quote, (0, 2)))
    return Group(*parts)


class FindingScreen(DetailScreen):
    """One finding, followed across refreshes by its id."""

    TITLE = "Finding"

    def __init__(self, finding: Finding) -> None:
        super().__init__()
        self.finding = finding

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            yield Static(id="finding-body")

    def update_view(self, view: View) -> None:
        super().update_view(view)
        if view.diagnosis is not None:
            fresh = next((f for f in view.diagnosis.findings if f.id == self.finding.id), None)
            if fresh is not None:
                self.finding = fresh
        self.query_one("#finding-body", Static).update(render_finding(self.finding, view))
