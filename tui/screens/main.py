"""The main screen: header, five panels, footer; arrows move between panels.

Panel focus moves spatially (the nearest panel in the arrow's direction), so the
keys do what the eye expects whichever panels are shown and however big.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.geometry import Region

from ..widgets.advisor_panel import AdvisorPanel
from ..widgets.gpu_panel import GpuPanel
from ..widgets.host_panel import HostPanel
from ..widgets.io_panel import IoPanel
from ..widgets.key_bar import KeyBar
from ..widgets.panel import Panel
from ..widgets.ranks_panel import RanksPanel
from ..widgets.step_panel import StepPanel
from ..widgets.view import View
from .base import ViewScreen


def direction_score(cur: Region, cand: Region, direction: str) -> float | None:
    """How far ``cand`` lies from ``cur`` in ``direction``; ``None`` if not that way."""
    if direction == "down" and cand.y >= cur.bottom:
        primary, off = cand.y - cur.bottom, _gap(cur.x, cur.right, cand.x, cand.right)
    elif direction == "up" and cand.bottom <= cur.y:
        primary, off = cur.y - cand.bottom, _gap(cur.x, cur.right, cand.x, cand.right)
    elif direction == "right" and cand.x >= cur.right:
        primary, off = cand.x - cur.right, _gap(cur.y, cur.bottom, cand.y, cand.bottom)
    elif direction == "left" and cand.right <= cur.x:
        primary, off = cur.x - cand.right, _gap(cur.y, cur.bottom, cand.y, cand.bottom)
    else:
        return None
    return primary + 3 * off


def _gap(a0: int, a1: int, b0: int, b1: int) -> int:
    """Distance between two intervals on one axis (0 when they overlap)."""
    return max(0, b0 - a1, a0 - b1)


class MainScreen(ViewScreen):
    """All panels at once."""

    AUTO_FOCUS = "#advisor"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "focus_panel('up')", "Panel up", show=False),
        Binding("down", "focus_panel('down')", "Panel down", show=False),
        Binding("left", "focus_panel('left')", "Panel left", show=False),
        Binding("right", "focus_panel('right')", "Panel right", show=False),
        Binding("escape", "app.view_rank(0)", "Lead rank",
                tooltip="multi-rank job: from another rank's view (Enter in Ranks) to the lead"),
    ]

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        with Horizontal(id="panels"):
            with Vertical(id="left"):
                yield GpuPanel(id="gpu")
                yield HostPanel(id="host")
                yield IoPanel(id="io")
            with Vertical(id="right"):
                yield StepPanel(id="step")
                yield RanksPanel(id="ranks")
                yield AdvisorPanel(id="advisor")
        yield KeyBar()

    def on_resize(self) -> None:
        # Small terminals: panels keep only their title line (see app.tcss).
        self.set_class(self.size.height < 34, "-compact")

    def update_view(self, view: View) -> None:
        super().update_view(view)
        for panel in self.query(Panel):
            panel.update_view(view)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # In a replay ←/→ move the time cursor (an app binding): let them through.
        if action == "focus_panel" and parameters and parameters[0] in ("left", "right"):
            view = self.current_view()
            return view is None or view.live
        return True

    def action_focus_panel(self, direction: str) -> None:
        """Focus the nearest panel in ``direction`` (no wrap-around)."""
        panels = [p for p in self.query(Panel) if p.display and p.region.area > 0]
        if not panels:
            return
        cur = self.focused if isinstance(self.focused, Panel) else None
        if cur is None:
            panels[0].focus()
            return
        scored = [
            (score, i, p)
            for i, p in enumerate(panels)
            if p is not cur
            and (score := direction_score(cur.region, p.region, direction)) is not None
        ]
        if scored:
            min(scored, key=lambda s: (s[0], s[1]))[2].focus()
