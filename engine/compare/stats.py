"""Small statistics for comparing runs: a rate with its confidence interval.

A run's steps/s is the loop counter's increase over the span of its readings;
each pair of consecutive readings gives one per-window rate. The spread of
those rates says how well the run's speed is known: the 95 % interval is the
estimate plus or minus Student's t times the standard error of the window
rates. Two runs whose intervals do not overlap differ by more than noise (a
conservative test: overlapping intervals can still hide a real difference, so
the wording is "no significant change", never "the same").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

#: A change of steps/s smaller than this, in percent, is not called one even
#: when the two intervals do not overlap: the intervals come from the windows
#: of one watch and miss how far the same job drifts between two watches on a
#: shared machine (the README's "aitop diff" section gives two CI runs' figures).
DRIFT_PCT = 5.0

#: Student's t 0.975 quantiles by degrees of freedom (two-sided 95 %).
_T975: dict[int, float] = {
    1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306,
    9: 2.262, 10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131,
    16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093, 20: 2.086, 25: 2.060, 30: 2.042,
    40: 2.021, 60: 2.000, 120: 1.980,
}


def t975(df: int) -> float:
    """Student's t 0.975 quantile for ``df`` >= 1 degrees of freedom (table, interpolated)."""
    if df < 1:
        raise ValueError("needs at least one degree of freedom")
    if df in _T975:
        return _T975[df]
    keys = sorted(_T975)
    if df > keys[-1]:
        return 1.960
    upper = next(k for k in keys if k > df)
    lower = max(k for k in keys if k < df)
    w = (df - lower) / (upper - lower)
    return _T975[lower] * (1 - w) + _T975[upper] * w


@dataclass(frozen=True)
class Rate:
    """A rate and its 95 % interval from per-window rates (bounds None: unknown)."""

    estimate: float | None
    low: float | None = None
    high: float | None = None
    #: How many per-window rates the interval comes from.
    windows: int = 0

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None

    def overlaps(self, other: Rate) -> bool | None:
        """Whether the two intervals overlap; None when either is unknown."""
        if not (self.has_interval and other.has_interval):
            return None
        assert self.low is not None and self.high is not None
        assert other.low is not None and other.high is not None
        return self.low <= other.high and other.low <= self.high


def rate_interval(estimate: float | None, window_rates: Sequence[float]) -> Rate:
    """``estimate`` with a 95 % interval from the per-window rates (two or more)."""
    if estimate is None:
        return Rate(None, windows=len(window_rates))
    if len(window_rates) < 2:
        return Rate(estimate, windows=len(window_rates))
    half = t975(len(window_rates) - 1) * statistics.stdev(window_rates) / math.sqrt(
        len(window_rates)
    )
    return Rate(estimate, max(0.0, estimate - half), estimate + half, len(window_rates))


def share_tolerance(p1: float, n1: float, p2: float, n2: float) -> float:
    """How far two phase shares may differ by sampling noise alone.

    5 points, or 2.6 standard errors of the difference of two shares estimated
    from n1 and n2 stack samples, whichever is larger: the same bound the
    end-to-end tests hold aitop's phases to against the jobs' own timers.
    """
    variance = p1 * (1 - p1) / max(n1, 1.0) + p2 * (1 - p2) / max(n2, 1.0)
    return max(0.05, 2.6 * math.sqrt(max(variance, 0.0)))
