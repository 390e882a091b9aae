"""The small arithmetic every metric family shares, and the shape of a family's values.

Each family of metrics (GPU, phases, loading, ...) is a function that returns
its own :data:`Values`; one that needs another family's values takes them as
a read-only :data:`Metrics`. ``window.compute_metrics`` puts them together.
"""

from __future__ import annotations

from collections.abc import Mapping

#: One family's metrics for a window, by catalogue name (None: not known).
Values = dict[str, "float | None"]
#: Metrics read, never written: other families' values handed to one that needs them.
Metrics = Mapping[str, "float | None"]


def pct(part: float | None, whole: float | None) -> float | None:
    """``part`` as a percentage of ``whole``; None when either is unknown (or zero)."""
    if part is None or not whole:
        return None
    return 100.0 * part / whole


def mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def mb(value: float | None) -> float | None:
    """Bytes (or bytes/s) as MB (MB/s)."""
    return None if value is None else value / 1e6


def flag(value: bool | None) -> float | None:
    """A yes/no as the catalogue's 0/1 (None: unknown)."""
    return None if value is None else float(value)
