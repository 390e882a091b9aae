"""The floor for aitop's UI: a bare Textual app repainting six widgets every refresh.

Run in tmux beside aitop in the session benchmark: what Textual itself costs to
keep a 200x50 screen of six bordered panels live at aitop's default refresh,
with nothing measured and nothing judged. The refresh (seconds) is the first
argument, 1 by default; the session benchmark passes aitop's default. aitop's
UI cannot cost less than this on the same Textual; the gap between the two is
aitop's own drawing.
"""

from __future__ import annotations

import sys
import time
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

#: Rows of text in each panel (a full panel's worth at 200x50).
ROWS = 12


class BareApp(App[None]):
    """Six panels whose text changes every refresh."""

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

    def __init__(self, refresh_s: float = 1.0) -> None:
        super().__init__()
        self.refresh_s = refresh_s

    def on_mount(self) -> None:
        self.tick()
        self.set_interval(self.refresh_s, self.tick)

    def tick(self) -> None:
        now = time.time()
        for i, panel in enumerate(self.query(Static)):
            lines = [f"panel {i} row {r}: {now * (r + 1) % 1000:10.3f}" for r in range(ROWS)]
            panel.update("\n".join(lines))


if __name__ == "__main__":
    BareApp(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0).run()
