"""Stacks: the hottest frames of the training thread per phase — which line stalls.

Hot frames of every stack window in the aggregation window are summed; phases
are listed by their share of the thread's time, data wait judged against its
target. ``a`` switches between the window and the whole session.
"""

from __future__ import annotations

from typing import ClassVar

from aitop.engine.live.series import FrameTotal, hot_frames, latest, recent, upto
from aitop.knowledge.judging import verdicts
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from ..widgets import fmt
from ..widgets.step_panel import ordered_phases
from ..widgets.view import View
from .base import DetailScreen

FRAMES_PER_PHASE = 8


def phase_table(frames: list[FrameTotal], top: int) -> Table:
    """A phase's hottest frames; bars are relative to the hottest frame of any phase."""
    table = Table(box=None, pad_edge=False, show_header=True, header_style="dim", expand=True)
    table.add_column("share", justify="right", width=6, no_wrap=True)
    table.add_column("", width=8, no_wrap=True)
    table.add_column("samples", justify="right", width=7, no_wrap=True)
    # The loop line is the answer to "which line is stalling": never cut it short.
    caller_width = min(48, max([len(f.caller) for f in frames] + [9]))
    table.add_column("loop line", width=caller_width, no_wrap=True, overflow="ellipsis")
    table.add_column("innermost frame", ratio=5, no_wrap=True, overflow="ellipsis")
    for f in frames[:FRAMES_PER_PHASE]:
        frame = Text(f.function, style="bold")
        frame.append(f"  {f.location}", style="dim")
        table.add_row(
            f"{f.share * 100:.1f}%",
            Text(fmt.bar(f.count / max(top, 1), 8, empty=" "), style="dim"),
            str(f.count),
            Text(f.caller or "—", style="bold" if f.caller else "dim"),
            frame,
        )
    return table


class StacksScreen(DetailScreen):
    """Per phase, where the training thread's samples landed."""

    TITLE = "Stacks"

    BINDINGS: ClassVar[list[BindingType]] = [Binding("a", "toggle_span", "Window/session")]

    def __init__(self) -> None:
        super().__init__()
        self.whole_session = False

    def compose_body(self) -> ComposeResult:
        with VerticalScroll(id="body"):
            yield Static(id="stacks-body")

    def action_toggle_span(self) -> None:
        self.whole_session = not self.whole_session
        view = self.current_view()
        if view is not None:
            self.update_view(view)

    def update_view(self, view: View) -> None:
        super().update_view(view)
        self.query_one("#stacks-body", Static).update(self.render_body(view))

    def render_body(self, view: View) -> RenderableType:
        if self.whole_session:
            windows = upto(view.session.stacks, view.now)
            span = "the whole session"
        else:
            windows = recent(view.session.stacks, view.now, view.window_s)
            span = f"the last {fmt.duration(view.window_s)}"
        good = [w for w in windows if w.error is None]
        if not good:
            status = view.session.probe_text("stacks", "no stack samples yet")
            errors = [w.error for w in windows if w.error]
            why = errors[-1] if errors else status
            return Text(f"No stack samples over {span}: {why}", style="dim")
        last = latest(view.session.stacks, view.now)
        total = sum(w.total_samples for w in good)
        counts: dict[str, int] = {}
        for w in good:
            for phase, n in w.phase_counts.items():
                counts[phase] = counts.get(phase, 0) + n
        frames = hot_frames(good)
        hottest = max((fs[0].count for fs in frames.values() if fs), default=1)
        head = Text()
        head.append(f"Training thread {last.thread_name if last else '?'} "
                    f"(tid {last.thread_id if last else '?'})", style="bold")
        loop = getattr(last, "loop_frame", None) if last else None
        if loop:
            head.append(f" · loop {loop}")
        head.append(f"\n{total} samples in {len(good)} windows over {span} "
                    f"(a: {'window' if self.whole_session else 'whole session'})", style="dim")
        parts: list[RenderableType] = [head]
        stall = self._stall_line(frames)
        if stall is not None:
            parts += [Text(""), stall]
        fractions = {p: n / total for p, n in counts.items()} if total else {}
        for phase in sorted(ordered_phases(fractions), key=lambda p: -fractions[p]):
            frac = fractions[phase]
            if frac <= 0:
                continue
            title = Text("\n")
            title.append(f" {fmt.PHASE_LETTER.get(phase, '?')} ",
                         style=fmt.PHASE_STYLE.get(phase, "reverse"))
            title.append(f" {fmt.PHASE_LABEL.get(phase, phase)} ", style="bold")
            if phase == "data_wait":
                status = verdicts.data_wait(frac, view.targets)
                target = verdicts.target("phase_data_wait", view.targets)
                said = f" (target < {target.high:.0%})" if target and target.high else ""
                title.append(f"{frac * 100:.1f}% {fmt.STATUS_SYMBOL[status]}{said}",
                             style=fmt.STATUS_STYLE[status])
            else:
                title.append(f"{frac * 100:.1f}%")
            title.append(f" of the thread's time · {counts.get(phase, 0)} samples", style="dim")
            parts.append(title)
            phase_frames = frames.get(phase, [])
            if phase_frames:
                parts.append(phase_table(phase_frames, hottest))
            else:
                parts.append(Text("   (no frames recorded)", style="dim"))
        techniques = sorted({t for w in good for t in w.techniques_seen})
        if techniques:
            parts.append(Text(f"\nTechniques seen in the stacks: {', '.join(techniques)}",
                              style="dim"))
        return Group(*parts)

    @staticmethod
    def _stall_line(frames: dict[str, list[FrameTotal]]) -> Text | None:
        """Name the line the loop waits on, when data wait is the hottest phase."""
        waits = frames.get("data_wait")
        if not waits:
            return None
        top = waits[0]
        text = Text("Stalling on: ", style="bold")
        if top.caller:
            text.append(top.caller, style="bold reverse")
            text.append(" → ")
        text.append(f"{top.function} ({top.location})")
        text.append(f"  {top.share * 100:.1f}% of the time", style="dim")
        return text
