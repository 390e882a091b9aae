"""When two runs' steps/s count as a change: the intervals and the drift floor."""

from __future__ import annotations

import pytest
from aitop.engine.compare.diff import compare_steps
from aitop.engine.compare.runs import steps_rate
from aitop.engine.compare.stats import DRIFT_PCT, Rate, rate_interval


def tight(estimate: float) -> Rate:
    """A rate known to within a hundredth of itself: any gap between two is outside both."""
    return Rate(estimate, estimate * 0.995, estimate * 1.005, windows=6)


@pytest.mark.parametrize(("after", "verdict"), [
    (14.86, "no significant change"),   # +2.8 %: apart, but under the drift floor
    (14.45 * (1 + DRIFT_PCT / 100) * 1.01, "improved"),
    (14.45 * (1 - DRIFT_PCT / 100) * 0.99, "regressed"),
])
def test_a_change_counts_beyond_both_the_intervals_and_the_drift(after: float,
                                                                 verdict: str) -> None:
    change = compare_steps(tight(14.45), tight(after))
    assert change.verdict == verdict, change
    assert change.change_pct == pytest.approx(100 * (after / 14.45 - 1))


def test_overlapping_intervals_are_no_change_however_large() -> None:
    wide_before = rate_interval(10.0, [4.0, 16.0, 10.0])
    change = compare_steps(wide_before, tight(12.0))
    assert change.verdict == "no significant change"
    assert "overlap" in change.why


def test_an_unknown_rate_is_unknown_not_unchanged() -> None:
    assert compare_steps(Rate(None), tight(3.0)).verdict == "unknown"
    assert compare_steps(Rate(3.0), Rate(6.0)).verdict == "unknown"


def test_a_window_misread_high_is_left_out_of_the_rate_and_its_interval() -> None:
    # A CI run's second watch: windows of 29, 28, 28 steps in 2 s, then 457 in 2 s
    # (a last reading of 855 for the job's 398). Counted, it read 67.6 steps/s.
    windows = [(61.4, 63.4, 29.0), (63.4, 65.4, 28.0), (65.4, 67.4, 28.0), (67.4, 69.4, 457.0)]
    rate = steps_rate(windows)
    assert rate.estimate == pytest.approx(85 / 6)
    assert rate.windows == 3 and rate.high is not None and rate.high < 15.5
    before = steps_rate([(0.0, 2.0, 28.0), (2.0, 4.0, 29.0), (4.0, 8.0, 57.0)])
    assert compare_steps(before, rate).verdict == "no significant change"
