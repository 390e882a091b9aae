"""Help, generated from the same BINDINGS tables the keys come from.

Nothing here lists a key by hand (except Tab, which Textual binds itself), so
the help cannot drift from what the keys do.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.keys import format_key
from textual.widgets import Static

from ..widgets.advisor_panel import AdvisorPanel
from ..widgets.panel import Panel
from .base import DetailScreen
from .main import MainScreen
from .node import JobTable, NodeScreen
from .processes import ProcessScreen
from .stacks import StacksScreen


def key_text(binding: Binding) -> str:
    """How a binding's key(s) are shown: its key_display, else each key formatted."""
    if binding.key_display:
        return binding.key_display
    return " ".join(format_key(k.strip()) for k in binding.key.split(","))


def as_bindings(items: list[BindingType]) -> list[Binding]:
    out = []
    for item in items:
        if isinstance(item, Binding):
            out.append(item)
        else:
            out.append(Binding(*item))  # tuple form
    return out


def describe(binding: Binding) -> Text:
    """The footer's word for a binding, then its longer explanation."""
    text = Text(binding.description or binding.action.replace("_", " "))
    if binding.tooltip:
        text.append(f"  {binding.tooltip}", style="dim")
    return text


class HelpScreen(DetailScreen):
    """Every key, grouped by where it works."""

    TITLE = "Help"

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            yield Static(self.render_help(), id="help-body")

    def groups(self) -> list[tuple[str, list[Binding]]]:
        """(heading, bindings) in the order a newcomer needs them."""
        app_bindings = as_bindings(list(type(self.app).BINDINGS))
        replay_only: frozenset[str] = getattr(type(self.app), "REPLAY_ONLY", frozenset())
        live_only: frozenset[str] = getattr(type(self.app), "LIVE_ONLY", frozenset())

        def action_name(b: Binding) -> str:
            return b.action.split("(")[0]

        tab = [Binding("tab", "focus_next", "Next panel"),
               Binding("shift+tab", "focus_previous", "Previous panel")]
        return [
            ("Everywhere", [b for b in app_bindings
                            if action_name(b) not in replay_only | live_only]),
            ("Live only", [b for b in app_bindings if action_name(b) in live_only]),
            ("Replay only (time cursor)", [b for b in app_bindings
                                           if action_name(b) in replay_only]),
            *([("Node view (every job of the machine)",
                as_bindings([*JobTable.BINDINGS, *NodeScreen.BINDINGS]))]
              if hasattr(self.app, "node") else []),
            ("Main screen", tab + as_bindings(list(MainScreen.BINDINGS))
             + as_bindings(list(Panel.BINDINGS))),
            ("Advisor panel", as_bindings(list(AdvisorPanel.BINDINGS))),
            ("Detail screens", as_bindings(list(DetailScreen.BINDINGS))),
            ("Processes screen", as_bindings(list(ProcessScreen.BINDINGS))),
            ("Stacks screen", as_bindings(list(StacksScreen.BINDINGS))),
        ]

    def render_help(self) -> RenderableType:
        parts: list[RenderableType] = [
            Text("aitop: what slows this training job down, and what to change first.",
                 style="bold"),
            Text("Colours mean status: ✓ within the documents' target, ~ near it, "
                 "✗ outside it, ? unknown. With NO_COLOR the symbols carry it alone.",
                 style="dim"),
            Text("Mouse: click a panel to open its detail, a finding to open it, a table "
                 "header to sort by it.", style="dim"),
        ]
        for heading, bindings in self.groups():
            if not bindings:
                continue
            table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 2))
            table.add_column(width=16, style="bold", no_wrap=True)
            table.add_column()
            seen: set[tuple[str, str]] = set()
            for b in bindings:
                key = (key_text(b), b.action)
                if key in seen:
                    continue
                seen.add(key)
                table.add_row(key[0], describe(b))
            parts += [Text(f"\n{heading}", style="bold underline"), table]
        return Group(*parts)
