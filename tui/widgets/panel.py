"""The focusable panel every main-screen section is built on.

A panel draws lines from a ``View``. Each line has a priority, and the panel
keeps the most important lines that fit its height (in their natural order), so
one layout reads well at 80×24 and fills out at 200×50 without a second design.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widget import Widget

from . import fmt
from .view import View


@dataclass(frozen=True)
class Line:
    """One line of a panel; lower ``priority`` numbers survive a small terminal."""

    text: Text
    priority: int = 5
    #: Anything a click on this line should resolve to (a finding index, ...).
    tag: object = None


def fit(lines: list[Line], height: int) -> list[Line]:
    """The most important ``height`` lines, in display order."""
    if height <= 0:
        return []
    if len(lines) <= height:
        return lines
    ranked = sorted(range(len(lines)), key=lambda i: (lines[i].priority, i))[:height]
    return [lines[i] for i in sorted(ranked)]


def label(text: str, width: int = 7) -> Text:
    """A dim fixed-width row label, always followed by at least one space."""
    return Text(f"{text:<{width - 1}} ", style="dim")


def spark_line(
    head: Text,
    series: list[float],
    width: int,
    *,
    lo: float | None = 0.0,
    hi: float | None = None,
    style: str = "",
) -> Text:
    """``head`` then a sparkline filling the rest of the width (when there is room)."""
    room = width - head.cell_len - 1
    line = head.copy()
    if room >= 6 and series:
        line.append(" ")
        line.append(fmt.sparkline(series, room, lo=lo, hi=hi), style=style or "dim")
    return line


class Panel(Widget, can_focus=True):
    """A titled, focusable section of the main screen.

    Subclasses implement ``lines``; Enter (or a click) asks the app to open the
    panel's detail screen, named by ``DETAIL``.
    """

    DEFAULT_CSS = """
    Panel { height: 1fr; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "open_detail", "Details")]

    TITLE = ""
    #: Name of the detail screen Enter opens (see ``AitopApp.open_detail``).
    DETAIL = ""
    #: Size to the content (capped by CSS max-height) instead of a share of the column.
    FIT_CONTENT = False

    class OpenDetail(Message):
        """The user asked for a panel's detail screen."""

        def __init__(self, detail: str, finding_id: str | None = None) -> None:
            super().__init__()
            self.detail = detail
            self.finding_id = finding_id

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: View | None = None
        #: The tag of each line as last drawn, so clicks map to what is on screen.
        self.drawn_tags: list[object] = []
        # Textual renders a widget again on focus changes and layout passes; the
        # lines only change with the view and the width (and ``cache_key``).
        self._cached: tuple[View, tuple[object, ...], list[Line]] | None = None
        self.border_title = self.TITLE

    def update_view(self, view: View) -> None:
        """Take a new view; repaint only if what the panel shows changed.

        Most ticks change a few panels (a sparkline moves, a number changes);
        an unchanged panel is not repainted, which is most of a frame's cost in
        Textual (measured in docs/benchmarks.md). Lines are compared as rich
        Text (characters and styles), so any visible change repaints.
        """
        self.view = view
        subtitle = self.subtitle(view)
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle
        width = self.content_size.width
        if width <= 0 or self._cached is None:
            self.refresh()
            return
        key = (width, *self.cache_key())
        lines = self.lines(view, width)
        old = self._cached
        self._cached = (view, key, lines)
        if old[1] != key or old[2] != lines:
            self.refresh()

    def _fit_height(self, wanted: int) -> None:
        """Ask for ``wanted`` rows (the CSS max-height still caps it)."""
        height = self.styles.height
        if height is None or height.value != wanted:
            self.styles.height = wanted

    def subtitle(self, view: View) -> str:
        """Text for the bottom border (e.g. the window); none by default."""
        return ""

    def lines(self, view: View, width: int) -> list[Line]:
        """The panel's content; subclasses override."""
        return []

    def wanted_height(self, lines: list[Line]) -> int:
        """Rows to ask for when sizing to the content (``FIT_CONTENT``)."""
        return len(lines) + self.gutter.height

    def fit_lines(self, lines: list[Line], height: int) -> list[Line]:
        """Choose what to show in ``height`` rows; subclasses may lay out differently."""
        return fit(lines, height)

    def cache_key(self) -> tuple[object, ...]:
        """What, besides the view and the width, the lines depend on."""
        return ()

    def render(self) -> RenderableType:
        width = max(1, self.content_size.width)
        height = max(1, self.content_size.height)
        if self.view is None:
            self.drawn_tags = []
            return Text("waiting for the first samples…", style="dim")
        key = (width, *self.cache_key())
        if self._cached is not None and self._cached[0] is self.view and self._cached[1] == key:
            lines = self._cached[2]
        else:
            lines = self.lines(self.view, width)
            self._cached = (self.view, key, lines)
        if self.FIT_CONTENT:
            # Measured here, after styles (borders differ when compact) are applied.
            self.call_after_refresh(self._fit_height, self.wanted_height(lines))
        kept = self.fit_lines(lines, height)
        self.drawn_tags = [line.tag for line in kept]
        out = Text(no_wrap=True, overflow="ellipsis")
        for i, line in enumerate(kept):
            if i:
                out.append("\n")
            text = line.text.copy()
            text.truncate(width, overflow="ellipsis")
            out.append_text(text)
        return out

    def action_open_detail(self) -> None:
        self.post_message(self.OpenDetail(self.DETAIL))

    def on_click(self, event: events.Click) -> None:
        self.focus()
        self.action_open_detail()
