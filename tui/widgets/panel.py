"""The focusable panel every main-screen section is built on.

A panel draws lines from a ``View``. Each line has a priority, and the panel
keeps the most important lines that fit its height (in their natural order), so
one layout reads well at 80×24 and fills out at 200×50 without a second design.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size, Spacing
from textual.message import Message
from textual.strip import Strip
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
        # The lines only change with the view and the width (and ``cache_key``);
        # what is shown of them, with the height too.
        self._cached: tuple[View, tuple[object, ...], list[Line]] | None = None
        self._shown: tuple[list[Line], int, list[Line]] | None = None
        self._line_style: Style | None = None
        self._gutter: Spacing | None = None
        self.border_title = self.TITLE

    def update_view(self, view: View) -> None:
        """Take a new view; repaint only the rows whose text changed.

        Most ticks change a few lines (a sparkline moves, a number changes).
        Textual's cost of a frame is mostly rendering widgets' lines into
        segments and compositing them, so an unchanged panel is not repainted
        and a changed one repaints only its changed rows (docs/benchmarks.md).
        Lines are compared as rich Text (characters and styles), so any visible
        change is repainted.
        """
        self.view = view
        subtitle = self.subtitle(view)
        if subtitle != self.border_subtitle:
            self.border_subtitle = subtitle
        width = self._inner_size().width
        if width <= 0 or self._cached is None or self._shown is None:
            self.refresh()
            return
        old_key, before = self._cached[1], self._shown[2]
        after = self._layout()
        if self._cached[1] != old_key:
            self.refresh()
            return
        rows = max(len(before), len(after))
        changed = [
            y for y in range(rows)
            if y >= len(before) or y >= len(after) or before[y].text != after[y].text
        ]
        if len(changed) == rows and rows:
            self.refresh()
        elif changed:
            self.refresh(*(Region(0, y, width, 1) for y in changed))

    def _layout(self) -> list[Line]:
        """The lines on screen for the current view and size, computed once each."""
        if self.view is None:
            return []
        width, height = self._inner_size()
        key = (width, *self.cache_key())
        if self._cached is None or self._cached[0] is not self.view or self._cached[1] != key:
            self._cached = (self.view, key, self.lines(self.view, width))
        lines = self._cached[2]
        if self._shown is None or self._shown[0] is not lines or self._shown[1] != height:
            if self.FIT_CONTENT:
                # Measured here, after styles (borders differ when compact) are applied.
                self.call_after_refresh(self._fit_height, self.wanted_height(lines))
            kept = self.fit_lines(lines, height)
            self.drawn_tags = [line.tag for line in kept]
            self._shown = (lines, height, kept)
        return self._shown[2]

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

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._line_style = None
        self._gutter = None

    def _inner_size(self) -> Size:
        """The content's size from the widget's own size: ``content_size`` asks the
        screen where the widget is, which cost a third of a frame when asked per line."""
        if self._gutter is None:
            self._gutter = self.styles.gutter  # border + padding: they change with styles
        outer, gutter = self.outer_size, self._gutter
        return Size(max(0, outer.width - gutter.width), max(0, outer.height - gutter.height))

    def render_line(self, y: int) -> Strip:
        """Row ``y`` of the content (Textual's line API: only dirty rows are asked for)."""
        width = max(1, self._inner_size().width)
        if self._line_style is None:
            # Walks every ancestor's styles; they change only with a style update.
            self._line_style = self.rich_style
        style = self._line_style
        if self.view is None:
            text = Text("waiting for the first samples…", style="dim") if y == 0 else None
        else:
            kept = self._layout()
            text = kept[y].text if y < len(kept) else None
        if text is None:
            return Strip.blank(width, style)
        line = text.copy()
        line.no_wrap = True
        line.truncate(width, overflow="ellipsis")
        line.stylize_before(style)
        return Strip(line.render(self.app.console, end=""), line.cell_len)

    def action_open_detail(self) -> None:
        self.post_message(self.OpenDetail(self.DETAIL))

    def on_click(self, event: events.Click) -> None:
        self.focus()
        self.action_open_detail()
