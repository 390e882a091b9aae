"""The Ranks panel: every rank of a multi-rank job on one line each, the straggler flagged.

Shown only when aitop watches more than one rank. Each line: the rank, its phase
bar (the wait for other ranks is the ``comm`` phase), steps/s, CPU, GPU memory
and utilisation, how long it waits for the others, and its straggler score.
Enter on a rank shows that rank's own full view (Escape comes back).
"""

from __future__ import annotations

from typing import ClassVar

from aitop.engine.live.job import Rank
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message

from . import fmt
from .panel import Line, Panel
from .step_panel import phase_bar
from .view import View

#: Cells of each rank's phase bar when the panel is wide enough.
BAR_WIDTH = 24


def _pct(value: float | None, *, share: bool = False) -> str:
    if value is None:
        return "  —"
    return f"{value * 100:3.0f}%" if share else f"{value:3.0f}%"


class RanksPanel(Panel):
    """One line per rank; the selected one opens on Enter."""

    TITLE = "Ranks"
    FIT_CONTENT = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("down", "select(1)", "Next rank", show=False),
        Binding("up", "select(-1)", "Previous rank", show=False),
        Binding("enter", "open_detail", "View rank"),
    ]

    class ViewRank(Message):
        """The user asked to see one rank's own view."""

        def __init__(self, pid: int) -> None:
            super().__init__()
            self.pid = pid

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.selected = 0

    def update_view(self, view: View) -> None:
        self.display = bool(view.ranks)
        super().update_view(view)

    @property
    def rows(self) -> tuple[Rank, ...]:
        return self.view.ranks if self.view is not None else ()

    def cache_key(self) -> tuple[object, ...]:
        return (self.selected, self.has_focus)

    def action_select(self, delta: int) -> None:
        """Move the selection; past either end, move focus to the next panel."""
        i = self.selected + delta
        if not self.rows or i < 0 or i >= len(self.rows):
            move = getattr(self.screen, "action_focus_panel", None)
            if move is not None:
                move("down" if delta > 0 else "up")
            return
        self.selected = i
        self.refresh()

    def action_open_detail(self) -> None:
        rows = self.rows
        if rows:
            self.post_message(self.ViewRank(rows[min(self.selected, len(rows) - 1)].pid))

    def on_click(self, event: events.Click) -> None:
        self.focus()
        row = event.y - self.gutter.top
        tag = self.drawn_tags[row] if 0 <= row < len(self.drawn_tags) else None
        if isinstance(tag, int):
            self.selected = tag
            self.action_open_detail()

    def subtitle(self, view: View) -> str:
        straggler = next((r for r in view.ranks if r.straggler), None)
        if straggler is not None:
            return f"straggler: {straggler.label}"
        return "no straggler" if len(view.ranks) > 1 else ""

    def lines(self, view: View, width: int) -> list[Line]:
        out = []
        for i, row in enumerate(view.ranks):
            out.append(Line(self._line(row, i == self.selected and self.has_focus, width), 1, i))
        straggler = next((r for r in view.ranks if r.straggler), None)
        if straggler is not None and straggler.cause:
            out.append(Line(Text(f"{straggler.label} holds the others back: {straggler.cause}",
                                 style=fmt.STATUS_STYLE["outside"]), 0))
        return out

    def _line(self, row: Rank, selected: bool, width: int) -> Text:
        text = Text("▶ " if selected else "  ", style="bold")
        text.append(f"{row.label:<8} ", style="bold" if row.straggler else "")
        stats = Text()
        sps = "   —" if row.steps_per_s is None else f"{row.steps_per_s:5.1f}"
        stats.append(f" {sps}/s CPU {_pct(row.cpu_percent)}")
        if row.gpu_mem_percent is not None or row.gpu_util_percent is not None:
            which = f" {row.gpus}" if row.gpus else ""
            stats.append(f"  GPU{which} {_pct(row.gpu_util_percent)} "
                         f"mem {_pct(row.gpu_mem_percent)}")
        stats.append(f"  waits {_pct(row.comm_share, share=True)}")
        if row.straggler_score is not None:
            stats.append(f"  score {row.straggler_score:.2f}")
        if row.straggler:
            stats.append(" ⚑ STRAGGLER", style=fmt.STATUS_STYLE["outside"])
        if row.status != "watched":
            stats.append(f"  ({row.status})", style="dim")
        room = min(BAR_WIDTH, width - text.cell_len - stats.cell_len - 1)
        if row.phases and room >= 4:
            text.append_text(phase_bar(row.phases, room))
        elif not row.phases and room >= 4:
            text.append("no phases yet"[:room].ljust(room), style="dim")
        text.append_text(stats)
        return text
