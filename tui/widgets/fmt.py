"""Terminal styling: the meaning of colours, shared by every panel and screen.

Colours encode *status* (within / near / outside a target range) and nothing
else; every status also has a symbol so that the screen still reads correctly
with ``NO_COLOR`` (Textual then draws in monochrome) or on a colour-blind
terminal. Keeping the palette in one place stops panels from decorating. The
plain-text formatting (sizes, durations, percentages) is the engine's
:mod:`aitop.engine.reports.humanize`, re-exported here so widgets have one ``fmt``.
"""

from __future__ import annotations

from aitop.engine.reports.humanize import (
    PHASE_LABEL,
    PHASE_LETTER,
    STATUS_SYMBOL,
    bar,
    clock,
    duration,
    ellipsize,
    human_bytes,
    human_rate,
    num,
    pct,
    sparkline,
    stamp,
    words,
)
from rich.text import Text

__all__ = [
    "PHASE_LABEL", "PHASE_LETTER", "PHASE_STYLE", "SEVERITY_STYLE", "STATUS_STYLE",
    "STATUS_SYMBOL", "bar", "clock", "duration", "ellipsize", "human_bytes", "human_rate",
    "num", "pct", "sparkline", "stamp", "status_text", "words",
]

#: Rich styles per evidence status (``knowledge.model.Evidence.status``).
STATUS_STYLE: dict[str, str] = {
    "within": "green",
    "near": "yellow",
    "outside": "bold red",
    "unknown": "dim",
}

#: Rich styles per finding severity (``knowledge.model.SEVERITIES``).
SEVERITY_STYLE: dict[str, str] = {
    "critical": "bold reverse red",
    "high": "bold red",
    "medium": "yellow",
    "low": "default",
    "info": "dim",
}

#: Phase colours are categorical (which phase), so they are distinct hues; the
#: *meaning* (data wait too high) is carried by the legend's status colour.
PHASE_STYLE: dict[str, str] = {
    "data_wait": "black on #d08770",
    "forward": "black on #88c0d0",
    "backward": "black on #81a1c1",
    "optimizer": "black on #b48ead",
    "eval": "black on #8fbcbb",
    "checkpoint": "black on #ebcb8b",
    "sync": "black on #a3be8c",
    "comm": "black on #bf616a",
    "compile": "black on #5e81ac",
    "other": "black on #777777",
}


def status_text(status: str) -> Text:
    """The status symbol in its status colour."""
    return Text(STATUS_SYMBOL.get(status, "?"), style=STATUS_STYLE.get(status, "dim"))
