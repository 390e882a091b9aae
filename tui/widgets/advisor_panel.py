"""Advisor panel: the bottleneck, the state in the priority framework, the findings.

Findings come ranked by estimated gain from the engine; ↑/↓ select one and
Enter opens its detail. The selection follows the finding (by id) across
refreshes, so the list reordering under the cursor does not change what Enter
opens.
"""

from __future__ import annotations

import textwrap
from typing import ClassVar

from aitop.engine.reports.gain import gain_text
from aitop.knowledge.base.findings import Diagnosis, Finding
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType

from . import fmt
from .panel import Line, Panel
from .view import View

CATEGORY_WORDS: dict[str, str] = {
    "data_loading": "DATA LOADING",
    "compute": "COMPUTE",
    "memory": "GPU MEMORY",
    "io": "I/O",
    "host": "HOST RAM/CPU",
    "sync": "HOST-GPU SYNC",
    "communication": "RANKS WAIT",
    "evaluation": "EVALUATION",
    "none": "NONE",
}
#: Job states: what the process is doing, said before (and instead of) a bottleneck.
JOB_STATES: dict[str, str] = {"warming_up": "WARMING UP", "stalled": "STALLED"}
#: Categories that are not a verdict yet (or cannot be one).
NOT_JUDGED = ("collecting", "unknown")


class AdvisorPanel(Panel):
    """What limits the job and what to do first."""

    TITLE = "Advisor"
    DETAIL = "finding"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("down", "select(1)", "Next finding", show=False),
        Binding("up", "select(-1)", "Previous finding", show=False),
        Binding("enter", "open_detail", "Open"),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.selected_id: str | None = None

    # ------------------------------------------------------------ selection

    @property
    def findings(self) -> tuple[Finding, ...]:
        d = self.view.diagnosis if self.view is not None else None
        return d.findings if d is not None else ()

    @property
    def selected_index(self) -> int:
        ids = [f.id for f in self.findings]
        return ids.index(self.selected_id) if self.selected_id in ids else 0

    @property
    def selected(self) -> Finding | None:
        fs = self.findings
        return fs[self.selected_index] if fs else None

    def action_select(self, delta: int) -> None:
        """Move the selection; past either end, move focus to the next panel."""
        fs = self.findings
        i = self.selected_index + delta
        if not fs or i < 0 or i >= len(fs):
            move = getattr(self.screen, "action_focus_panel", None)
            if move is not None:
                move("down" if delta > 0 else "up")
            return
        self.selected_id = fs[i].id
        self.refresh()

    def action_open_detail(self) -> None:
        f = self.selected
        if f is not None:
            self.post_message(self.OpenDetail("finding", f.id))
        else:
            self.notify("No finding to open: no rule is firing.", timeout=3)

    def on_click(self, event: events.Click) -> None:
        self.focus()
        row = event.y - self.gutter.top
        index = self.drawn_tags[row] if 0 <= row < len(self.drawn_tags) else None
        if isinstance(index, int) and index < len(self.findings):
            self.selected_id = self.findings[index].id
            self.action_open_detail()
        self.refresh()

    # ---------------------------------------------------------------- draw

    def subtitle(self, view: View) -> str:
        d = view.diagnosis
        if d is None:
            return ""
        return f"at {fmt.clock(d.t)} · {len(d.findings)} findings"

    def lines(self, view: View, width: int) -> list[Line]:
        d = view.diagnosis
        if d is None:
            why = ("collecting: the first diagnosis comes after one full window "
                   f"({fmt.duration(view.window_s)})")
            if view.evaluating_for is not None:
                why = f"evaluating the rules… ({fmt.duration(view.evaluating_for)})"
            return [Line(Text(why, style="dim"), 0)]
        out = self._head(d, width)
        out += self._states(d, width)
        out += self._findings(d, width)
        out += self._next_step(d)
        if d.waiting_for and d.category not in NOT_JUDGED:
            # aitop's own inputs, not the job's batches: named so it is not read
            # as data loading.
            out.append(Line(Text(f"rules still missing a metric: {', '.join(d.waiting_for)}",
                                 style="dim"), 9))
        return out

    def _head(self, d: Diagnosis, width: int) -> list[Line]:
        hardware = [Line(Text(d.hardware, style="dim"), 2)] if d.hardware else []
        # The first sentence is the verdict: shown whole, wrapped, never cut.
        summary = [Line(Text(row), 1) for row in textwrap.wrap(d.summary, max(width, 20))]
        if d.category in JOB_STATES:
            text = Text("Job state ", style="bold")
            text.append(JOB_STATES[d.category], style="bold " + fmt.STATUS_STYLE["near"])
            text.append(f" ({d.compute_device})", style="dim")
            return [Line(text, 0), *summary, *hardware]
        if d.category in NOT_JUDGED:
            text = Text("Not judged yet" if d.category == "collecting" else "Cannot judge",
                        style="bold dim")
            text.append(f" ({d.compute_device})", style="dim")
            return [Line(text, 0), *summary, *hardware]
        if d.category == "none":
            text = Text("No bottleneck", style="bold " + fmt.STATUS_STYLE["within"])
            text.append(f" ({d.compute_device})", style="dim")
            return [Line(text, 0), *summary, *hardware]
        top = d.top
        style = fmt.SEVERITY_STYLE.get(top.severity, "bold") if top else fmt.STATUS_STYLE["within"]
        text = Text("Bottleneck ", style="bold")
        text.append(CATEGORY_WORDS.get(d.category, d.category.upper()), style=style)
        text.append(f" ({d.compute_device})", style="dim")
        return [Line(text, 0), *summary, *hardware]

    def _states(self, d: Diagnosis, width: int) -> list[Line]:
        out = []
        for n, state in enumerate(d.states):
            text = Text("State ", style="dim")
            text.append(state.name, style="bold")
            out.append(Line(text, 2 + n))
            prios = Text("  ")
            for i, p in enumerate(state.priorities[:3], 1):
                if i > 1:
                    prios.append("  ")
                prios.append(f"{i}", style="reverse" if i == 1 else "bold")
                prios.append(f" {p}", style="bold" if i == 1 else "")
            out.append(Line(prios, 3 + n))
        return out

    def _findings(self, d: Diagnosis, width: int) -> list[Line]:
        if not d.findings and d.category in NOT_JUDGED:
            return []  # nothing judged yet: "nothing to fix" would be a verdict
        if not d.findings:
            return [Line(Text("No rule is firing: nothing to fix in this window.",
                              style=fmt.STATUS_STYLE["within"]), 2)]
        out = [Line(Text("Findings, by estimated gain", style="dim underline"), 4)]
        focused = self.has_focus
        sel = self.selected_index
        for i, f in enumerate(d.findings):
            chosen = i == sel
            marker = "▶ " if chosen and focused else ("› " if chosen else "  ")
            text = Text(marker, style="bold")
            text.append(f"{f.severity.upper():<8}", style=fmt.SEVERITY_STYLE.get(f.severity, ""))
            text.append(f"{gain_text(f.gain, brief=True):>6} ", style="bold")
            text.append(f.title, style="reverse" if chosen and focused else "")
            if f.last_held_at is not None:
                text.append(f"  (as at {fmt.clock(f.last_held_at)})", style="dim")
            out.append(Line(text, 2 if i == 0 else 5 + i, tag=i))
            why = Text("    " + f.why, style="dim")
            out.append(Line(why, 6 + 2 * i, tag=i))
        return out

    def _next_step(self, d: Diagnosis) -> list[Line]:
        """The selected finding's concrete change, for when there is room (big screens)."""
        f = self.selected
        if f is None or not (f.actions or f.snippet):
            return []
        out = [Line(Text(""), 20),
               Line(Text(f"What to change: {f.title}", style="bold underline"), 20)]
        for action in f.actions:
            out.append(Line(Text(f"  • {action}"), 21))
        for code in (f.snippet or "").splitlines():
            out.append(Line(Text(f"  │ {code}", style="dim"), 22))
        src = Text(f"  source: {f.source.document} › {f.source.section}", style="dim italic")
        out.append(Line(src, 23))
        return out

    def cache_key(self) -> tuple[object, ...]:
        return (self.has_focus, self.selected_id)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
