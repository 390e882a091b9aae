"""How far a phase's pooled share may be from the job's own (``share_error``).

A phase in blocks (evaluation, saving) fills some stack windows and misses
others: the windows' spread, not the sample count, says how well the pooled
share is known; before three windows, one block's share of the look does (the
look may hold one block more than the job's cadence gives). The rules judge
the share less this error, and the "fewer" predictions take it at both ends.
"""

from __future__ import annotations

import pytest
from aitop.knowledge.metrics.step_phases import block_error, cluster_error, share_error
from aitop.probes.samples import StackWindow
from aitop.probes.step_anatomy import phase_blocks


def window(i: int, eval_samples: int, total: int = 60, blocks: int | None = None,
           ends: tuple[str, str] = ("forward", "forward")) -> StackWindow:
    """A window of ``total`` samples, ``eval_samples`` of them evaluation in
    ``blocks`` runs (None: the samples came without their order), its first and
    last samples in the phases ``ends``."""
    return StackWindow(t_start=6.0 * i, t_end=6.0 * (i + 1), thread_name="MainThread",
                       thread_id="1", total_samples=total,
                       phase_counts={"eval": eval_samples, "forward": total - eval_samples},
                       phase_blocks={} if blocks is None else {"eval": blocks},
                       ends=() if blocks is None else ends)


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


def test_fewer_than_three_windows_or_failed_dumps_give_no_spread() -> None:
    assert cluster_error([window(0, 30), window(1, 40)], "eval") is None
    failed = StackWindow(t_start=6.0, t_end=12.0, thread_name=None, thread_id=None,
                         total_samples=0, error="py-spy: failed to read the stack")
    assert cluster_error([window(0, 30), window(1, 40), failed], "eval") is None
    # Without sample order nothing else is known either: the share stands as read.
    assert share_error([window(0, 30), window(1, 40)], "eval") == 0.0


def test_blocks_are_the_runs_of_a_phase_in_sample_order() -> None:
    order = ["forward", "eval", "eval", "backward", "eval", "checkpoint", "checkpoint",
             "forward", "eval"]
    assert phase_blocks(order) == {"eval": 3, "checkpoint": 1}
    assert phase_blocks(["forward", "backward"]) == {"eval": 0, "checkpoint": 0}


def test_one_block_in_a_short_look_is_known_only_to_within_itself() -> None:
    """nanoGPT evaluating about one second in six: its first 3-s window held one
    1-s pass (10 of 29 samples) and fired "Evaluation takes 34 %" for a job whose
    own log put it near 17 %."""
    first = window(0, 10, total=29, blocks=1)
    assert share_error([first], "eval") == pytest.approx(10 / 29)
    # A second window with its own pass: the look holds two blocks of 9 samples
    # on average in 89; the share (0.20) is known to within one of them (0.10).
    two = [first, window(1, 8, total=60, blocks=1)]
    assert block_error(two, "eval") == pytest.approx(9 / 89)
    # Many short passes (the HF Trainer evaluating every few steps) are known closely.
    many = [window(i, 30, blocks=10) for i in range(2)]
    assert share_error(many, "eval") == pytest.approx(3 / 120)
    # A phase never sampled has no block and no error.
    assert share_error([window(0, 0, blocks=0)], "eval") == 0.0
    # The spread of three windows rules where it is the larger.
    spread = [window(i, n, blocks=6) for i, n in enumerate((50, 10, 44))]
    cluster = cluster_error(spread, "eval")
    assert cluster is not None and share_error(spread, "eval") == pytest.approx(cluster)
    assert cluster > block_error(spread, "eval")  # type: ignore[operator]


def test_a_block_across_a_windows_edge_is_one_and_order_missing_where_it_counts_is_unknown(
) -> None:
    """A 9-s save in the first 12 s: cut by the edge of the 3-s first window, it is
    still one block, and its share (0.75) is known only to within itself."""
    first = window(0, 22, total=29, blocks=1, ends=("forward", "eval"))
    second = window(1, 44, total=59, blocks=1, ends=("eval", "forward"))
    assert block_error([first, second], "eval") == pytest.approx(66 / 88)
    # A window that sampled the phase without order: how many blocks is not known.
    assert block_error([first, window(1, 44, total=59)], "eval") is None
    # One without order that never sampled it takes nothing away.
    assert block_error([first, window(1, 0, total=59)], "eval") == pytest.approx(22 / 88)
