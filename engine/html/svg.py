"""Charts drawn as inline SVG: a report that needs no script and fetches nothing.

The browser draws them, so the file opens anywhere with no network, and the
figures stay in the markup (a test reads them back from the rendered page).
Every text is escaped here: titles and labels can carry a job's own names.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from aitop.engine.html.charts import Chart, Line

WIDTH, HEIGHT = 760, 180
LEFT, RIGHT, TOP, BOTTOM = 56, 14, 12, 26

#: One colour per phase, the same on every chart and in every report.
PHASE_COLOURS: dict[str, str] = {
    "data_wait": "#e4572e", "forward": "#4c78a8", "backward": "#72b7b2",
    "optimizer": "#54a24b", "eval": "#b279a2", "checkpoint": "#f2b701",
    "sync": "#9d755d", "comm": "#ff9da6", "compile": "#bab0ac", "other": "#d8d8d8",
}
LINE_COLOURS = ("#4c78a8", "#e4572e", "#54a24b", "#b279a2", "#f2b701", "#72b7b2")


@dataclass(frozen=True, slots=True)
class Marker:
    """A moment on every chart's time axis: a finding that fired, say."""

    t: float
    label: str


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 × 10^k at or above ``value`` (1 for nothing)."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        if value <= step * power * (1 + 1e-9):
            return step * power
    return 10 * power


def _fmt(value: float) -> str:
    """An axis label: no trailing zeros, thousands as k."""
    if abs(value) >= 10_000:
        return f"{value / 1000:g}k"
    return f"{value:g}" if value == int(value) else f"{value:.2g}"


class _Frame:
    """Data coordinates to pixels for one chart."""

    def __init__(self, t_end: float, y_max: float) -> None:
        self.t_end = max(t_end, 1e-9)
        self.y_max = y_max
        self.w = WIDTH - LEFT - RIGHT
        self.h = HEIGHT - TOP - BOTTOM

    def x(self, t: float) -> float:
        return LEFT + self.w * min(max(t, 0.0), self.t_end) / self.t_end

    def y(self, v: float) -> float:
        return TOP + self.h * (1 - min(max(v, 0.0), self.y_max) / self.y_max)


def _axes(frame: _Frame, percent: bool) -> list[str]:
    parts = []
    for i in range(5):
        v = frame.y_max * i / 4
        y = frame.y(v)
        label = f"{v:.0%}" if percent else _fmt(v)
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" '
                     f'y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="tick" x="{LEFT - 6}" y="{y + 4:.1f}" '
                     f'text-anchor="end">{escape(label)}</text>')
    step = nice_ceiling(frame.t_end / 6)
    t = 0.0
    while t <= frame.t_end + 1e-9:
        x = frame.x(t)
        parts.append(f'<text class="tick" x="{x:.1f}" y="{HEIGHT - 8}" '
                     f'text-anchor="middle">{escape(_fmt(t))} s</text>')
        t += step
    return parts


def _polyline(frame: _Frame, line: Line, colour: str) -> str:
    points = " ".join(f"{frame.x(t):.1f},{frame.y(v):.1f}" for t, v in line.points)
    last = line.points[-1][1]
    return (f'<polyline class="series" data-label="{escape(line.label)}" '
            f'data-points="{len(line.points)}" fill="none" stroke="{colour}" '
            f'stroke-width="1.6" points="{points}">'
            f'<title>{escape(line.label)}: last {escape(_fmt(round(last, 3)))}</title></polyline>')


def _stacked(frame: _Frame, lines: Sequence[Line]) -> list[str]:
    """Each line's share on top of the ones below it, as filled bands."""
    parts = []
    below = [0.0] * len(lines[0].points)
    for line in lines:
        top = [b + v for b, (_, v) in zip(below, line.points, strict=True)]
        times = [t for t, _ in line.points]
        upper = [f"{frame.x(t):.1f},{frame.y(v):.1f}" for t, v in zip(times, top, strict=True)]
        lower = [f"{frame.x(t):.1f},{frame.y(v):.1f}"
                 for t, v in zip(reversed(times), reversed(below), strict=True)]
        mean = sum(v for _, v in line.points) / len(line.points)
        colour = PHASE_COLOURS.get(line.label, "#999999")
        parts.append(f'<polygon class="series band" data-label="{escape(line.label)}" '
                     f'data-points="{len(line.points)}" fill="{colour}" '
                     f'points="{" ".join(upper + lower)}">'
                     f'<title>{escape(line.label)}: {mean:.0%} of the samples</title></polygon>')
        below = top
    return parts


def _markers(frame: _Frame, markers: Sequence[Marker]) -> list[str]:
    """One dashed line per moment, numbered with every marker that falls on it."""
    moments: dict[int, list[int]] = {}
    for i, m in enumerate(markers):
        moments.setdefault(round(frame.x(m.t)), []).append(i)
    parts = []
    for x, indices in moments.items():
        numbers = ",".join(str(i + 1) for i in indices)
        titles = "\n".join(markers[i].label for i in indices)
        parts.append(f'<g class="marker"><line x1="{x}" x2="{x}" y1="{TOP}" '
                     f'y2="{HEIGHT - BOTTOM}"/><text x="{x + 3}" y="{TOP + 10}">{numbers}</text>'
                     f'<title>{escape(titles)}</title></g>')
    return parts


def chart_svg(chart: Chart, t_end: float, markers: Sequence[Marker] = ()) -> str:
    """The chart as one ``<svg>`` element, ``t_end`` seconds wide."""
    if chart.stacked:
        frame = _Frame(t_end, 1.0)
        body = _stacked(frame, chart.lines)
    else:
        peak = max((v for line in chart.lines for _, v in line.points), default=0.0)
        frame = _Frame(t_end, nice_ceiling(peak * 1.05) if chart.unit != "%" else 100.0)
        body = [_polyline(frame, line, LINE_COLOURS[i % len(LINE_COLOURS)])
                for i, line in enumerate(chart.lines)]
    parts = [f'<svg class="chart" id="chart-{escape(chart.key)}" role="img" '
             f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
             f"<title>{escape(chart.title)}</title>",
             *_axes(frame, chart.stacked), *body, *_markers(frame, markers), "</svg>"]
    return "".join(parts)


def legend(chart: Chart) -> list[tuple[str, str]]:
    """``(label, colour)`` of each line, for the legend under the chart."""
    if chart.stacked:
        return [(line.label, PHASE_COLOURS.get(line.label, "#999999")) for line in chart.lines]
    return [(line.label, LINE_COLOURS[i % len(LINE_COLOURS)]) for i, line in enumerate(chart.lines)]
