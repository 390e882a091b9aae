"""The other ranks of a multi-process job, beside the one aitop leads with.

aitop leads with one rank (the PID given, or rank 0 of a launcher) and watches
every other rank on this machine as a peer: each peer is a full DataSource of
its own (live: its own probes and evaluator; replayed: its own recording), so
the UI can open any rank's single-process view and the report can judge each.
The job-level judgement (knowledge/straggler.py) is recomputed from the newest
diagnoses of all of them, the same way live and in a replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aitop.engine.live.source import DataSource, RankPeer
from aitop.knowledge.model import Diagnosis
from aitop.knowledge.straggler import (
    HOLDS_BACK,
    JobJudgement,
    RankView,
    judge_ranks,
    rank_view,
)
from aitop.probes.session import Session


def peers_of(source: DataSource) -> Sequence[RankPeer]:
    """The other ranks a source watches (none for a single-process job)."""
    peers: Sequence[RankPeer] = getattr(source, "peers", ())
    return peers


def rank_label(source: DataSource) -> str:
    """The lead rank's name ("rank 0"), or its PID outside a multi-rank job."""
    job = source.session.job
    pid = source.session.target_pid
    return job.label(pid) if job is not None and job.multi_rank else f"PID {pid}"


def peer_views(peers: Sequence[RankPeer], now: float | None = None) -> list[RankView]:
    """Each watched peer as its newest diagnosis (at ``now`` in a replay) sees it."""
    views = []
    for peer in peers:
        # An exited rank keeps its last diagnosis for its own view, not for the job's.
        watched = peer.source is not None and peer.status == "watched"
        diagnosis = diagnosis_at(peer.source, now) if watched and peer.source else None
        views.append(rank_view(peer.label, peer.pid, diagnosis))
    return views


def diagnosis_at(source: DataSource, now: float | None) -> Diagnosis | None:
    """A rank's diagnosis at ``now``: live, its newest (never evaluated here, so a
    UI frame never waits on rules); replayed, the one recorded at or before."""
    if now is None or source.live:
        latest = getattr(source, "evaluator", None)
        if latest is not None:
            published: Diagnosis | None = latest.latest()
            return published
    return source.evaluate(now) if now is not None else None


def judge(source: DataSource, now: float, lead: Diagnosis | None) -> JobJudgement | None:
    """The job as a whole at ``now``: every rank's view and the straggler, or None."""
    peers = peers_of(source)
    if not peers:
        return None
    own = rank_view(rank_label(source), source.session.target_pid, lead)
    # Live, the cut is the lead evaluator's knowledge base's (--rules may move it).
    evaluator = getattr(source, "evaluator", None)
    holds_back = evaluator.knowledge.rules.conditions.get(HOLDS_BACK) if evaluator else None
    return judge_ranks([own, *peer_views(peers, now)], holds_back)


@dataclass(frozen=True)
class RankRow:
    """One line of the Ranks panel and one entry of the report's ``ranks``."""

    label: str
    pid: int
    status: str
    phases: dict[str, float] | None
    comm_share: float | None
    steps_per_s: float | None
    cpu_percent: float | None
    gpu_mem_percent: float | None
    gpu_util_percent: float | None
    #: The GPUs the rank's processes hold memory on (NVML's per-process list), "0,1".
    gpus: str
    straggler_score: float | None
    straggler: bool
    lead_finding: str | None
    cause: str | None


def rank_rows(source: DataSource, now: float, lead: Diagnosis | None,
              judgement: JobJudgement | None = None) -> list[RankRow]:
    """Every rank of the job at ``now``, the lead rank first (empty for one process)."""
    judgement = judgement or judge(source, now, lead)
    if judgement is None:
        return []
    status = {p.pid: p.status for p in peers_of(source)}
    diagnoses = {source.session.target_pid: lead}
    sessions = {source.session.target_pid: source.session}
    for peer in peers_of(source):
        diagnoses[peer.pid] = (diagnosis_at(peer.source, now)
                               if peer.source is not None else None)
        if peer.source is not None:
            sessions[peer.pid] = peer.source.session
    straggler = judgement.straggler
    flagged = straggler is not None and judgement.flagged
    rows = []
    for view in judgement.ranks:
        d = diagnoses.get(view.pid)
        m = d.metrics if d is not None else {}
        rows.append(RankRow(
            label=view.label, pid=view.pid, status=status.get(view.pid, "watched"),
            phases=d.phases if d is not None else None,
            comm_share=view.comm_share, steps_per_s=view.steps_per_s,
            cpu_percent=m.get("proc_cpu_mean"),
            gpu_mem_percent=m.get("gpu_mem_used_mean"),
            gpu_util_percent=m.get("gpu_util_mean"),
            gpus=_gpus_used(sessions.get(view.pid)),
            straggler_score=judgement.scores.get(view.pid),
            straggler=flagged and straggler is not None and view.pid == straggler.pid,
            lead_finding=view.cause.id if view.cause is not None else None,
            cause=view.cause.title if view.cause is not None else view.top_phase,
        ))
    return rows


def _gpus_used(session: Session | None) -> str:
    """The indices of the GPUs the rank's own processes use, from its newest GPU sample."""
    sample = session.gpu.last() if session is not None else None
    if sample is None:
        return ""
    return ",".join(str(d.index) for d in sample.devices
                    if any(p.in_target for p in d.processes))


def ranks_json(rows: Sequence[RankRow]) -> list[dict[str, Any]]:
    """The report's per-rank section."""
    return [{
        "label": r.label, "pid": r.pid, "status": r.status,
        "phases": {k: round(v, 4) for k, v in r.phases.items()} if r.phases else None,
        "comm_share": _round(r.comm_share), "steps_per_s": _round(r.steps_per_s),
        "cpu_percent": _round(r.cpu_percent), "gpu_mem_percent": _round(r.gpu_mem_percent),
        "gpu_util_percent": _round(r.gpu_util_percent), "gpus": r.gpus or None,
        "straggler_score": _round(r.straggler_score), "straggler": r.straggler,
        "lead_finding": r.lead_finding, "cause": r.cause,
    } for r in rows]


def job_verdict_json(judgement: JobJudgement | None) -> dict[str, Any] | None:
    """The job-level verdict: the straggler (or none), its score and cause, the waits."""
    if judgement is None:
        return None
    metrics = judgement.metrics()
    words = judgement.words()
    score = metrics.get("straggler_score")
    flagged = score is not None and judgement.flagged
    return {
        "ranks_watched": int(metrics.get("ranks_watched") or 0),
        "straggler": words.get("straggler") if flagged else None,
        "straggler_pid": judgement.straggler.pid if flagged and judgement.straggler else None,
        "straggler_score": _round(score),
        "straggler_cause": words.get("straggler_cause") if flagged else None,
        "others_wait_share": _round(metrics.get("job_wait_share")),
        "comm_share": _round(metrics.get("job_comm_share")),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
