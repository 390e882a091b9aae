"""Medians with their spread, because the benchmark machine is shared and noisy.

Every figure in the report is a median over several runs, printed with its
min-max range and its interquartile range, so a reader can see at once whether a
difference is larger than the noise.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (q in 0..1) of already sorted values."""
    if not sorted_values:
        raise ValueError("quantile of no values")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    """Median, quartiles and range of one measured quantity over n runs."""

    n: int
    median: float
    q1: float
    q3: float
    minimum: float
    maximum: float
    p95: float

    @classmethod
    def of(cls, values: Iterable[float | None]) -> Summary | None:
        """Summary of the values that were measured (``None``s are skipped)."""
        data = sorted(float(v) for v in values if v is not None and math.isfinite(v))
        if not data:
            return None
        return cls(
            n=len(data),
            median=statistics.median(data),
            q1=quantile(data, 0.25),
            q3=quantile(data, 0.75),
            minimum=data[0],
            maximum=data[-1],
            p95=quantile(data, 0.95),
        )

    def to_json(self) -> dict[str, float | int]:
        return {
            "n": self.n, "median": self.median, "q1": self.q1, "q3": self.q3,
            "min": self.minimum, "max": self.maximum, "p95": self.p95,
        }

    @classmethod
    def from_json(cls, data: dict[str, float]) -> Summary:
        return cls(int(data["n"]), data["median"], data["q1"], data["q3"], data["min"],
                   data["max"], data["p95"])


def fmt_value(value: float | None, fmt: str) -> str:
    return "—" if value is None else format(value, fmt)


def fmt_summary(s: Summary | None, fmt: str = ".3f", unit: str = "") -> str:
    """``median [min–max] (n=…)``: the spread is printed beside every median."""
    if s is None:
        return "not measured"
    if s.n == 1:
        return f"{s.median:{fmt}}{unit} (n=1)"
    return (f"{s.median:{fmt}}{unit} [{s.minimum:{fmt}}–{s.maximum:{fmt}}] (n={s.n})")


def fmt_iqr(s: Summary | None, fmt: str = ".3f") -> str:
    if s is None or s.n < 2:
        return "—"
    return f"{s.q1:{fmt}}–{s.q3:{fmt}}"
