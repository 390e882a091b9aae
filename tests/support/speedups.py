"""Whether a predicted speed-up came true, judged from the job's own counts.

A speed-up is the ratio of two runs' rates, each taken at its own time on a
shared 2-core machine: one run's rate wanders by 10-20 % from run to run there
(docs/predictions.md shows rounds). One pair is measured; a pair outside the
range, widened by ``SLACK`` at each end, is followed by a second pair, and the
two pairs' rates pooled decide. Pooling halves the variance of either pair's
ratio; a range that is wrong still misses, since both pairs then lie on its
wrong side.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["SLACK", "RatePair", "assert_comes_true"]

#: One pair's spread of a measured speed-up on a 2-core machine: a predicted range
#: is widened this much at each end.
SLACK = 1.15

#: A run of the job and a run of it with the change applied: their steps/s.
RatePair = tuple[float, float]


def assert_comes_true(name: str, low: float, high: float,
                      measure: Callable[[], RatePair]) -> float:
    """Fail unless the measured speed-up lies in [low / SLACK, high * SLACK].

    ``measure`` runs the job and its fix once each and returns their rates.
    Returns the speed-up that decided.
    """
    base, fixed = measure()
    first = fixed / base
    decided = first
    if not low / SLACK <= first <= high * SLACK:
        base2, fixed2 = measure()
        decided = (fixed + fixed2) / (base + base2)
        print(f"{name}: second pair x{fixed2 / base2:.2f}; pooled x{decided:.2f}")
    print(f"{name}: predicted {low:.2f}-{high:.2f}, measured x{first:.2f}, decided "
          f"x{decided:.2f}")
    assert low / SLACK <= decided <= high * SLACK, (
        f"{name}: predicted x{low:.2f}-{high:.2f}, measured x{first:.2f}, and with a "
        f"second pair pooled x{decided:.2f}")
    return decided
