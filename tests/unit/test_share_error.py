"""How far a phase's pooled share may be from the job's own (``share_error``).

A phase in blocks (evaluation, saving) fills some stack windows and misses
others: the windows' spread, not the sample count, says how well the pooled
share is known, and the "fewer" predictions take it at both ends.
"""

from __future__ import annotations

import pytest
from aitop.knowledge.metrics.step_phases import share_error
from aitop.probes.samples import StackWindow


def window(i: int, eval_samples: int, total: int = 60) -> StackWindow:
    return StackWindow(t_start=6.0 * i, t_end=6.0 * (i + 1), thread_name="MainThread",
                       thread_id="1", total_samples=total,
                       phase_counts={"eval": eval_samples, "forward": total - eval_samples})


def test_a_phase_spread_evenly_is_known_closely_and_one_in_blocks_loosely() -> None:
    steady = [window(i, 36) for i in range(5)]
    blocks = [window(i, n) for i, n in enumerate((50, 24, 44, 28, 34))]
    assert share_error(steady, "eval") == 0.0
    loose = share_error(blocks, "eval")
    assert loose is not None
    # Shares 0.83, 0.40, 0.73, 0.47, 0.57 around 0.60: their standard error is
    # sqrt(5/4 * sum((c - 0.6 n)^2)) / 300 = 0.081, doubled.
    deviations = sum((n - 36) ** 2 for n in (50, 24, 44, 28, 34))
    assert loose == pytest.approx(2 * (5 / 4 * deviations) ** 0.5 / 300)
    # Four times the windows of the same spread: the error about halves (x0.46).
    many = share_error(blocks * 4, "eval")
    assert many is not None and many < loose / 2


def test_fewer_than_three_windows_or_failed_dumps_give_no_error() -> None:
    assert share_error([window(0, 30), window(1, 40)], "eval") is None
    failed = StackWindow(t_start=6.0, t_end=12.0, thread_name=None, thread_id=None,
                         total_samples=0, error="py-spy: failed to read the stack")
    assert share_error([window(0, 30), window(1, 40), failed], "eval") is None
