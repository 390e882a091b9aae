"""A deterministic node recording for the node view's tests and snapshots.

Three minutes of a machine (``tui_session``'s clock) with four jobs: the
data-starved fixture job, a 2-rank torchrun job whose rank 1 holds the other
back, a job compiling before its first steps, and another user's job that aitop
may not read. Every job is a real ``ReplaySource`` over the fixture's samples;
only the diagnoses differ, so every value is a pure function of time.
"""

from __future__ import annotations

import dataclasses

from aitop.engine.live.node import NodeJob, NodeReplay
from aitop.engine.live.source import RankPeer, ReplaySource
from aitop.knowledge.base.findings import Diagnosis, Gain
from aitop.probes.discovery import other_user
from aitop.probes.ranks import Job, RankProcess

from support.knowledge import PACKAGED

from .tui_session import DURATION_S, NOW, PID, T0, build_diagnoses, build_session

HOST = "gpu-node-07"
DDP_PID = 5100
COMPILE_PID = 6100


def _straggling(d: Diagnosis, rank: int) -> Diagnosis:
    """Rank 0 waits for rank 1; rank 1 builds its batches in its training thread."""
    lead = d.findings[0]
    if rank == 0:
        finding = dataclasses.replace(
            lead, id="straggler_holds_back_job", category="communication",
            title="rank 1 holds the job back: the other ranks wait 62% of their time for it",
            gain=Gain(1.6, 1.5, 1.7, "predicted", "rank 1's data wait removed", 2.6))
        return dataclasses.replace(
            d, category="communication", summary=finding.title, findings=(finding,),
            steps_per_s=1.8,
            metrics={**d.metrics, "comm_share": 0.62, "steps_per_s": 1.8, "phase_sync": 0.62})
    return dataclasses.replace(
        d, steps_per_s=1.8, metrics={**d.metrics, "comm_share": 0.05, "steps_per_s": 1.8})


def _compiling(d: Diagnosis) -> Diagnosis:
    title = ("Warming up: compiling the model with torch.compile (40 s so far); judging "
             "starts with the first steps")
    return dataclasses.replace(d, category="warming_up", summary=title, findings=(),
                               steps_per_s=None, states=())


def ddp_source() -> ReplaySource:
    lead_session = build_session()
    # The fixture's samples are of PID 4242: here, rank 0 of the launcher DDP_PID.
    lead_session.job = Job(DDP_PID, DDP_PID, "env", (
        RankProcess(PID, 0, 0, 2), RankProcess(PID + 1, 1, 1, 2)))
    rank1_session = build_session()
    rank1_session.target_pid = PID + 1  # rank 1's own samples, as its recording names them
    rank1 = ReplaySource(rank1_session, [_straggling(d, 1) for d in build_diagnoses()],
                         knowledge=PACKAGED)
    peer = RankPeer("rank 1", PID + 1, rank1)
    return ReplaySource(lead_session, [_straggling(d, 0) for d in build_diagnoses()],
                        peers=[peer], knowledge=PACKAGED)


def node_replay() -> NodeReplay:
    """The recorded node: four jobs found over the session, none ended."""
    jobs = [
        NodeJob(key=f"{PID}-1000", job_id="imagenet-resnet50", pid=PID, user="alice",
                command=("python", "train.py", "--data", "/mnt/datasets/imagenet", "--token",
                         "***"), started_at=T0 - 600, found_at=T0, status="watched",
                source=ReplaySource(build_session(), build_diagnoses(),
                                    knowledge=PACKAGED)),
        NodeJob(key=f"{DDP_PID}-2000", job_id="bert-large-7", pid=DDP_PID, user="bob",
                command=("python", "-m", "torch.distributed.run", "--nproc_per_node=2",
                         "pretrain.py"), started_at=T0 - 3600, found_at=T0, status="watched",
                source=ddp_source()),
        NodeJob(key=f"{COMPILE_PID}-3000", job_id="c0ffee12", pid=COMPILE_PID, user="carol",
                command=("python", "finetune.py", "--compile"), started_at=T0 + 20,
                found_at=T0 + 22, status="watched",
                source=ReplaySource(build_session(),
                                    [_compiling(d) for d in build_diagnoses()],
                                    knowledge=PACKAGED)),
        NodeJob(key="7100-4000", job_id="5d1e0b7a", pid=7100, user="dave",
                command=("python", "sweep.py", "--trial", "12"), started_at=T0 - 120,
                found_at=T0, status="not_watched", reason=other_user(1003, 1001)),
    ]
    return NodeReplay(HOST, jobs, PACKAGED, recorded_pace=1.7, written_at=NOW)


__all__ = ["DURATION_S", "HOST", "NOW", "T0", "node_replay"]
