"""A metric over the whole session: a label with now/min/mean/max, and a chart.

Used by the detail screens. The chart is drawn with block characters on a
fixed scale (zero-based unless told otherwise), so a steady 160 MB/s reads as a
tall bar rather than as nothing, which an auto-scaled sparkline would show. One
neutral colour: height is the information; status colour is on the label.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widget import Widget
from textual.widgets import Static

from . import fmt

BLOCKS = " ▁▂▃▄▅▆▇█"


def resample(values: Sequence[float], width: int) -> list[float]:
    """At most ``width`` points: each the maximum of its bucket (peaks stay visible)."""
    n = len(values)
    if n <= width:
        return list(values)
    out = []
    for i in range(width):
        lo = i * n // width
        hi = max(lo + 1, (i + 1) * n // width)
        out.append(max(values[lo:hi]))
    return out


def chart_rows(values: Sequence[float], width: int, height: int, lo: float,
               hi: float | None) -> list[str]:
    """``height`` rows of block characters, top row first, newest value on the right."""
    points = resample(values, width)
    top = hi if hi is not None else max(points, default=0.0)
    span = top - lo
    eighths = []
    for v in points:
        frac = 0.0 if span <= 0 else min(1.0, max(0.0, (v - lo) / span))
        # Any non-zero value gets at least one eighth, so it is never invisible.
        e = round(frac * height * 8)
        eighths.append(max(e, 1 if v > lo else 0))
    rows = []
    for r in range(height - 1, -1, -1):
        rows.append("".join(BLOCKS[min(8, max(0, e - r * 8))] for e in eighths).rjust(width))
    return rows


class Chart(Widget):
    """A block-character area chart of a series on a fixed scale."""

    DEFAULT_CSS = """
    Chart { height: 3; width: 1fr; color: $text-muted; }
    """

    def __init__(self, *, lo: float = 0.0, hi: float | None = None,
                 id: str | None = None) -> None:
        super().__init__(id=id)
        self.lo = lo
        self.hi = hi
        self.series: list[float] = []

    def set_series(self, series: Sequence[float], hi: float | None = None) -> None:
        self.series = list(series)
        if hi is not None:
            self.hi = hi
        self.refresh()

    def render(self) -> Text:
        width, height = self.content_size.width, self.content_size.height
        if not self.series or width <= 0 or height <= 0:
            return Text("")
        return Text("\n".join(chart_rows(self.series, width, height, self.lo, self.hi)))


class MetricChart(Horizontal):
    """``title / now / min mean max`` beside a chart of the series."""

    DEFAULT_CSS = """
    MetricChart { height: 3; }
    MetricChart > .chart-label { width: 40; height: 3; padding: 0 1; }
    """

    def __init__(
        self,
        title: str,
        render_value: Callable[[float], str],
        *,
        lo: float = 0.0,
        hi: float | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.title = title
        self.render_value = render_value
        self.lo = lo
        self.hi = hi

    def compose(self) -> ComposeResult:
        yield Static(Text(self.title, style="bold"), classes="chart-label")
        yield Chart(lo=self.lo, hi=self.hi)

    def update_series(self, series: Sequence[float], status: str = "unknown",
                      note: str = "", hi: float | None = None) -> None:
        """Show a new series; ``status`` colours the current value."""
        label = Text(self.title, style="bold")
        label.append("\n")
        if series:
            style = fmt.STATUS_STYLE.get(status, "") if status != "unknown" else ""
            label.append(f"now {self.render_value(series[-1])}", style=style)
            if status != "unknown":
                label.append(f" {fmt.STATUS_SYMBOL[status]}", style=style)
            label.append("\n")
            show = self.render_value
            label.append(f"min {show(min(series))}  mean {show(statistics.fmean(series))}  "
                         f"max {show(max(series))}", style="dim")
        else:
            label.append(note or "no data", style="dim")
        self.query_one(".chart-label", Static).update(label)
        self.query_one(Chart).set_series(series, hi)
