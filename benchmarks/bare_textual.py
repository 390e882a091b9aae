"""The floor for aitop's UI: a bare Textual app repainting six widgets once a second.

Run in tmux beside aitop in the session benchmark: what Textual itself costs to
keep a 200x50 screen of six bordered panels live at aitop's default refresh,
with nothing measured and nothing judged. aitop's UI cannot cost less than this
on the same Textual; the gap between the two is aitop's own drawing.
"""

from __future__ import annotations

import time
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

#: Rows of text in each panel (a full panel's worth at 200x50).
ROWS = 12


class BareApp(App[None]):
    """Six panels whose text changes every second."""

    CSS = """
    Static { border: round $panel-lighten-2; height: 1fr; padding: 0 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [Binding("q", "quit", "Quit")]

    def compose(self) -> ComposeResult:
        with Horizontal():
            with Vertical():
                for i in range(3):
                    yield Static(id=f"p{i}")
            with Vertical():
                for i in range(3, 6):
                    yield Static(id=f"p{i}")

    def on_mount(self) -> None:
        self.tick()
        self.set_interval(1.0, self.tick)

    def tick(self) -> None:
        now = time.time()
        for i, panel in enumerate(self.query(Static)):
            lines = [f"panel {i} row {r}: {now * (r + 1) % 1000:10.3f}" for r in range(ROWS)]
            panel.update("\n".join(lines))


if __name__ == "__main__":
    BareApp().run()
