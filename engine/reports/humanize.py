"""Numbers, times and names as people read them: plain text, no terminal styling.

Shared by the Markdown report, the text report and the UI, so that a value reads
the same everywhere. Colours and styles live in the UI (``aitop.tui.widgets.fmt``);
this module is plain strings so the headless and export paths never load Rich.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

#: Symbols per status, so the meaning survives without colour.
STATUS_SYMBOL: dict[str, str] = {
    "within": "✓",
    "near": "~",
    "outside": "✗",
    "unknown": "?",
}

#: Short phase labels for narrow bars and legends.
PHASE_LABEL: dict[str, str] = {
    "data_wait": "data wait",
    "forward": "forward",
    "backward": "backward",
    "optimizer": "optimizer",
    "eval": "evaluation",
    "checkpoint": "checkpoint",
    "sync": "sync",
    "comm": "comm",
    "compile": "compile",
    "other": "other",
}

#: One letter per phase, written into the stacked bar so it reads without colour.
PHASE_LETTER: dict[str, str] = {
    "data_wait": "D",
    "forward": "F",
    "backward": "B",
    "optimizer": "O",
    "eval": "E",
    "checkpoint": "C",
    "sync": "S",
    "comm": "X",
    "compile": "K",
    "other": "·",
}

SPARK_CHARS = "▁▂▃▄▅▆▇█"


def human_bytes(n: float | None, *, precision: int = 1) -> str:
    """``1.5G`` style sizes (binary units, as nvidia-smi and top use)."""
    if n is None:
        return "—"
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if abs(value) < 1024 or unit == "T":
            if unit == "B":
                return f"{value:.0f}B"
            return f"{value:.{precision}f}{unit}"
        value /= 1024
    return f"{value:.{precision}f}T"  # pragma: no cover - loop always returns


def human_rate(bps: float | None) -> str:
    """Bytes per second as ``12.3M/s``."""
    if bps is None:
        return "—"
    return f"{human_bytes(bps)}/s"


def pct(value: float | None, *, digits: int = 0) -> str:
    """A percentage, or a dash when unknown."""
    if value is None or math.isnan(value):
        return "—"
    return f"{value:.{digits}f}%"


def num(value: float | None, fmt: str = ".1f", unit: str = "") -> str:
    """A number with a unit, or a dash when unknown."""
    if value is None or math.isnan(value):
        return "—"
    return f"{value:{fmt}}{unit}"


def duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12s``, ``0.4s``: compact and sortable by eye."""
    if seconds is None:
        return "—"
    s = max(0.0, seconds)
    if s < 10:
        return f"{s:.1f}s"
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"


def clock(t: float | None) -> str:
    """Local wall-clock time of day, to line up with the job's own logs."""
    if t is None:
        return "—"
    return time.strftime("%H:%M:%S", time.localtime(t))


def stamp(t: float | None) -> str:
    """Local date and time, for reports."""
    if t is None:
        return "—"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def sparkline(values: Sequence[float], width: int, *, lo: float | None = None,
              hi: float | None = None) -> str:
    """A one-line sparkline of the last ``width`` values (newest on the right).

    ``lo``/``hi`` fix the scale (e.g. 0..100 for percentages) so that a flat 40 %
    does not look like a full bar; without them the data's range is used.
    """
    if width <= 0 or not values:
        return ""
    data = list(values)[-width:]
    low = min(data) if lo is None else lo
    high = max(data) if hi is None else hi
    span = high - low
    chars = []
    for v in data:
        if span <= 0:
            idx = 0 if high <= 0 else len(SPARK_CHARS) // 2
        else:
            frac = min(1.0, max(0.0, (v - low) / span))
            idx = min(len(SPARK_CHARS) - 1, int(frac * (len(SPARK_CHARS) - 1) + 0.5))
        chars.append(SPARK_CHARS[idx])
    return "".join(chars)


def bar(fraction: float | None, width: int, *, fill: str = "█", empty: str = "░") -> str:
    """A horizontal gauge of ``width`` cells."""
    if width <= 0:
        return ""
    if fraction is None or math.isnan(fraction):
        return empty * width
    cells = round(min(1.0, max(0.0, fraction)) * width)
    return fill * cells + empty * (width - cells)


def ellipsize(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` cells with an ellipsis."""
    if width <= 0:
        return ""
    if len(text) <= width:
        return text
    if width == 1:
        return "…"
    return text[: width - 1] + "…"


#: NVML clock-event (throttle) reasons in words a person can act on.
REASON_WORDS: dict[str, str] = {
    "gpu_idle": "idle (no work queued)",
    "applications_clocks_setting": "application clock setting",
    "sw_power_cap": "power cap (software)",
    "hw_slowdown": "hardware slowdown",
    "sync_boost": "sync boost",
    "sw_thermal_slowdown": "thermal (software)",
    "hw_thermal_slowdown": "thermal (hardware)",
    "hw_power_brake_slowdown": "power brake (hardware)",
    "display_clock_setting": "display clock setting",
}


def words(reason: str) -> str:
    """An NVML reason code (``sw_power_cap``) in words (``power cap (software)``)."""
    return REASON_WORDS.get(reason, reason.replace("_", " "))
