"""Ask where to save when an export failed (full disk, read-only or missing folder).

Nothing recorded is lost when a write fails: the session stays in memory, and
this dialog lets the user name another place instead of quitting without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class ExportPathScreen(ModalScreen[Path | None]):
    """A one-field dialog: the path to export to; Enter saves, Escape cancels."""

    DEFAULT_CSS = """
    ExportPathScreen { align: center middle; }
    ExportPathScreen > Vertical {
        width: 90%; max-width: 110; height: auto; padding: 1 2;
        border: heavy $error; background: $surface;
    }
    ExportPathScreen Static { margin-bottom: 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, reason: str, suggested: Path) -> None:
        super().__init__()
        self.reason = reason
        self.suggested = suggested

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(Text(f"Export failed: {self.reason}", style="bold"))
            yield Static("Nothing is lost. Save to another path (Enter), or Escape to cancel:")
            yield Input(value=str(self.suggested), id="export-path")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        self.dismiss(Path(value).expanduser() if value else None)

    def action_cancel(self) -> None:
        self.dismiss(None)
