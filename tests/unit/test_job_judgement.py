"""The arithmetic of a rank's hidden wait and of the straggler (knowledge/metrics/straggler.py).

The end-to-end checks against real torchrun/mp.spawn jobs are in test_ranks.py;
these pin the rules of the reading on numbers small enough to check by hand.
"""

from __future__ import annotations

import pytest
from aitop.knowledge.base.expressions import MAX_WORD_CHARS
from aitop.knowledge.metrics.straggler import (
    EXCESS_ACTIONS,
    RankView,
    hidden_comm,
    judge_ranks,
    own_phases,
)
from support.knowledge import HOLDS_BACK


def cpu_rank(**metrics: float | None) -> dict[str, float | None]:
    base: dict[str, float | None] = {
        "local_ranks": 2.0, "has_gpu": 0.0, "phase_compute": 0.9, "training_thread_cpu": 40.0,
        "main_cpu_wait_mean": 0.0, "phase_other": 0.05, "phase_eval": 0.0,
        "phase_checkpoint": 0.0, "phase_data_wait": 0.05, "num_workers": 2.0,
        "data_from_queue": 0.0, "data_in_own_code": 0.0,
    }
    base.update(metrics)
    return base


def test_a_cpu_rank_in_backward_but_off_the_cpu_is_waiting() -> None:
    # 90 % of samples in compute, 40 % of a core used, 5 % of it spent in 'other':
    # compute ran 35 % of the time, so 55 % of it was waiting.
    assert hidden_comm(cpu_rank()) == pytest.approx(0.55)


def test_time_queued_for_a_cpu_is_not_a_wait_for_other_ranks() -> None:
    assert hidden_comm(cpu_rank(main_cpu_wait_mean=30.0)) == pytest.approx(0.25)


def test_loading_in_the_training_thread_takes_its_cpu_share_first() -> None:
    # No workers: the 5 % of data wait was the thread working, not waiting.
    assert hidden_comm(cpu_rank(num_workers=0.0)) == pytest.approx(0.60)


def test_no_hidden_wait_on_gpu_ranks_or_single_processes() -> None:
    assert hidden_comm(cpu_rank(has_gpu=1.0)) is None
    assert hidden_comm(cpu_rank(local_ranks=1.0)) is None
    assert hidden_comm(cpu_rank(training_thread_cpu=None)) is None


def test_the_wait_is_never_more_than_the_compute_phases_nor_negative() -> None:
    assert hidden_comm(cpu_rank(training_thread_cpu=0.0)) == pytest.approx(0.9)
    assert hidden_comm(cpu_rank(training_thread_cpu=100.0)) == 0.0


def view(label: str, comm: float | None) -> RankView:
    return RankView(label, hash(label) % 10_000, comm, None, None, None)


def test_the_rank_that_waits_least_is_the_straggler_with_nvidias_score() -> None:
    judgement = judge_ranks([view("rank 0", 0.70), view("rank 1", 0.24), view("rank 2", 0.68)],
                            HOLDS_BACK)
    straggler = judgement.straggler
    assert straggler is not None and straggler.label == "rank 1"
    # Fastest own work 0.30 (rank 0) over rank 1's 0.76.
    assert judgement.scores[straggler.pid] == pytest.approx(0.30 / 0.76)
    assert judgement.flagged  # below the knowledge base's holds_back_job cut
    m = judgement.metrics()
    assert m["job_wait_share"] == pytest.approx(0.69)
    assert m["straggler_excess"] == pytest.approx(0.45)
    assert m["ranks_watched"] == 3


def test_ranks_that_wait_alike_have_no_flagged_straggler() -> None:
    judgement = judge_ranks([view("rank 0", 0.45), view("rank 1", 0.40)], HOLDS_BACK)
    assert judgement.straggler is not None
    assert not judgement.flagged


def test_ranks_without_a_reading_are_not_judged() -> None:
    judgement = judge_ranks([view("rank 0", 0.5), view("rank 1", None)], HOLDS_BACK)
    assert judgement.straggler is None and judgement.metrics()["straggler_score"] is None


def rank_with(label: str, pid: int, comm: float, **phases: float) -> RankView:
    metrics = {f"phase_{p}": share for p, share in phases.items()}
    metrics["phase_compute"] = sum(phases.get(p, 0.0) for p in ("forward", "backward", "optimizer"))
    own = own_phases(metrics)
    kind, share = max(own.items(), key=lambda kv: kv[1])
    return RankView(label, pid, comm, None, None, f"{kind.replace('_', ' ')} {share:.0%}", own)


def test_the_straggler_is_said_to_do_what_the_others_do_not_not_its_largest_phase() -> None:
    """A torchrun job (an unseen one, docs/diagnosis.md) whose rank 0 alone builds a
    Python histogram each step: its compute is its largest share, as on rank 1,
    and what it does beyond rank 1 is its own code outside the phases. Removing
    that measured x1.23, the ranks' wait beyond rank 0's own."""
    slow = rank_with("rank 0", 1, 0.38, forward=0.11, backward=0.32, optimizer=0.02, other=0.16)
    fast = rank_with("rank 1", 2, 0.57, forward=0.10, backward=0.30, optimizer=0.01, other=0.01)
    judgement = judge_ranks([slow, fast], HOLDS_BACK)
    assert judgement.straggler == slow and judgement.flagged
    words = judgement.words()
    assert words["straggler_cause"] == ("its own code outside the step's phases (other) 16% of "
                                        "its time, against 1% on the other ranks")
    assert words["straggler_action"].startswith("move what rank 0 does beyond the others")
    assert judgement.excess_row() == "other 16% (others 1%)"
    # The straggler judging the job keeps what the others wait beyond it: the ceiling.
    assert judgement.seen_from(slow.pid)["straggler_excess"] == pytest.approx(0.19)
    assert judgement.metrics()["straggler_excess"] == pytest.approx(0.19)
    assert judgement.seen_from(fast.pid)["straggler_excess"] == pytest.approx(0.19)


def test_a_straggler_that_does_the_same_work_slower_keeps_its_largest_phase() -> None:
    slow = rank_with("rank 0", 1, 0.10, forward=0.30, backward=0.55, other=0.02)
    fast = rank_with("rank 1", 2, 0.40, forward=0.20, backward=0.37, other=0.02)
    words = judge_ranks([slow, fast], HOLDS_BACK).words()
    assert words["straggler_cause"].startswith("its compute 85% of its time, against 57%")
    even = rank_with("rank 1", 2, 0.40, forward=0.29, backward=0.53, other=0.02)
    words = judge_ranks([slow, even], HOLDS_BACK).words()
    assert words["straggler_cause"] == "its own compute 85%"


def test_every_straggler_action_fits_a_word_with_a_long_rank_label() -> None:
    for phase, action in EXCESS_ACTIONS.items():
        text = action.format(rank="node-a17 rank 15", pid=4_194_304)
        assert len(text) <= MAX_WORD_CHARS, (phase, len(text))


def test_a_rank_whose_phases_are_not_known_yet_is_left_out_of_the_comparison() -> None:
    slow = rank_with("rank 0", 1, 0.38, forward=0.11, backward=0.32, optimizer=0.02, other=0.16)
    fast = rank_with("rank 1", 2, 0.57, forward=0.10, backward=0.30, optimizer=0.01, other=0.01)
    starting = RankView("rank 2", 3, 0.55, None, None, None, own_phases({"phase_other": None}))
    assert starting.own == {}
    judgement = judge_ranks([slow, fast, starting], HOLDS_BACK)
    assert judgement.excess() == ("other", pytest.approx(0.16), pytest.approx(0.01))
