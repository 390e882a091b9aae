"""Every rank hears the job's judgement: a rank that waits for the straggler says
what it waits for (the straggler and its own cause), not that the job scales
poorly. Driven through the real Evaluator of a peer rank, with the lead rank's
judgement as ``judge_ranks`` makes it from the ranks' diagnoses."""

from __future__ import annotations

from aitop.knowledge.evaluator import Evaluator
from aitop.knowledge.metrics.straggler import RankView, judge_ranks
from aitop.probes.session import Session
from support.knowledge import HOLDS_BACK, PACKAGED
from support.synthetic import PID, RANK0_CHECKPOINT, T0, Job, extend, mix

#: A CPU rank of a 2-rank job blocked half its time inside backward (gloo's
#: all-reduce): it waits for the other rank.
WAITING = dict(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
               host_cpu=75.0, workers=0, phases=mix(data_wait=0.0, other=0.01))


def peer_evaluator(rank0_comm: float) -> Evaluator:
    session = Session(PID)
    extend(session, Job(**WAITING), 1, 40)  # type: ignore[arg-type]
    evaluator = Evaluator(session, PACKAGED)
    # The lead's judgement: rank 0 (its own checkpoints) beside this rank, as
    # rank 1's evaluator last saw itself (it waits about half its time).
    rank1 = RankView("rank 1", PID, 0.51, None, None, None)
    rank0 = RankView("rank 0", PID - 1, rank0_comm, None, RANK0_CHECKPOINT, None)
    judgement = judge_ranks([rank0, rank1], HOLDS_BACK)
    evaluator.job_judgement = lambda: judgement
    return evaluator


def test_the_waiting_rank_names_the_straggler_and_its_checkpoint() -> None:
    evaluator = peer_evaluator(rank0_comm=0.02)
    for tick in range(20, 41):
        d = evaluator.evaluate(T0 + tick)
    ids = [f.id for f in d.findings]
    lead = d.findings[0]
    assert lead.id == "rank_waits_for_straggler", ids
    assert lead.title.startswith("This rank waits 5") and (
        f"of its time for rank 0 (PID {PID - 1}), which holds the job back: Saving "
        "checkpoints takes 35% of the time") in lead.title, lead.title
    assert lead.actions[0] == ("Fix rank 0 (PID 4241)'s own bottleneck: Save asynchronously: "
                               "torch.distributed.checkpoint.async_save")
    # Its wait is explained, not a rival saying the job scales poorly; the job's
    # own verdict stays the lead rank's.
    assert not {"ranks_wait_for_each_other", "communication_dominates",
                "straggler_holds_back_job"} & set(ids), ids
    assert lead.gain.method == "amdahl" and lead.gain.speedup is not None
    assert d.metrics["ranks_watched"] == 1.0 and d.metrics["waits_for_straggler"] == 1.0


def test_a_rank_with_no_straggler_to_wait_for_keeps_its_own_wait() -> None:
    """Rank 0 waits as much: no straggler, so the wait is this rank's to explain."""
    evaluator = peer_evaluator(rank0_comm=0.45)
    for tick in range(20, 41):
        d = evaluator.evaluate(T0 + tick)
    ids = [f.id for f in d.findings]
    assert "rank_waits_for_straggler" not in ids and "ranks_wait_for_each_other" in ids, ids
    assert d.metrics["waits_for_straggler"] == 0.0
