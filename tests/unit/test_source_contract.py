"""The DataSource contract: what live and replay sources publish, and how readers read it.

Unit-level: real ``LiveSource``/``LiveJob``/``ReplaySource`` objects on the
fixture session, with no probes running (a ``Collector`` without probes) and
no Textual.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aitop.engine.live.job import LiveJob, rank_rows
from aitop.engine.live.rank import LiveSource
from aitop.engine.live.source import (
    NOTHING,
    Conclusion,
    DataSource,
    RankPeer,
    ReplaySource,
    judge_at,
)
from aitop.knowledge.base.findings import Diagnosis
from aitop.knowledge.evaluator import Evaluator
from aitop.knowledge.metrics.straggler import JobJudgement, RankView, rank_view
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.probes.collector import Collector
from aitop.probes.ranks import Job as RankJob
from aitop.probes.ranks import RankProcess
from aitop.probes.session import Session
from support.knowledge import PACKAGED
from support.tui_session import (
    NOW,
    PID,
    build_diagnoses,
    build_session,
    two_rank_replay,
    with_comm,
)

ROOT = Path(__file__).resolve().parents[2]


def idle_collector(session: Session) -> Collector:
    return Collector(session, process=None, host=None, gpu=None, storage=None,
                     environment=None, stacks=None, steps=None)


def live_rank(session: Session | None = None, evaluator: Evaluator | None = None) -> LiveSource:
    """A LiveSource on the fixture session whose evaluations a test makes (not started)."""
    session = session or build_session()
    evaluator = evaluator or Evaluator(session, load_knowledge_base())
    return LiveSource(session, idle_collector(session), evaluator)


# ----------------------------------------------------------- the protocol


def test_live_rank_live_job_and_replay_all_implement_the_protocol() -> None:
    rank = live_rank()
    for source in (rank, LiveJob(rank), ReplaySource(Session(1), [], knowledge=PACKAGED)):
        assert isinstance(source, DataSource), type(source).__name__
        assert isinstance(source.latest(), Conclusion)
        assert isinstance(source.at(NOW), Conclusion)
        assert list(source.peers) == []
        source.close()
        source.close()  # idempotent


def test_no_reader_reaches_past_the_protocol() -> None:
    """No ``getattr(source, ...)`` and no ``isinstance(..., ReplaySource)`` outside
    the sources themselves: readers use what the protocol offers."""
    pattern = re.compile(r"getattr\(\s*[\w.]*source|isinstance\([^)]*(ReplaySource|LiveSource)")
    offenders = []
    for room in ("engine", "tui", "knowledge", "probes"):
        for path in (ROOT / room).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


# ----------------------------------------------------------------- replay


def test_a_replay_answers_at_a_time_with_what_was_recorded_then() -> None:
    diagnoses = build_diagnoses()
    replay = ReplaySource(build_session(), diagnoses, knowledge=PACKAGED)
    assert replay.at(diagnoses[0].t - 1) == NOTHING  # before the first diagnosis
    assert replay.at(diagnoses[3].t + 0.5).diagnosis is diagnoses[3]
    assert replay.latest().diagnosis is diagnoses[-1]
    timeline = replay.timeline()
    assert timeline is not None and timeline.end == NOW and timeline.step_s == 1.0
    assert ReplaySource(Session(1), [], knowledge=PACKAGED).timeline() is None


def test_a_replayed_jobs_judgement_is_made_once_per_time_asked(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import aitop.engine.live.source as source_module

    calls: list[int] = []
    real = source_module.judge_ranks

    def counting(ranks: Any, holds_back: Any) -> JobJudgement:
        calls.append(len(ranks))
        return real(ranks, holds_back)

    monkeypatch.setattr(source_module, "judge_ranks", counting)
    replay = two_rank_replay()
    t = NOW - 30
    first = replay.at(t)
    for _ in range(5):  # every frame at the same cursor
        assert replay.at(t) is first
    assert calls == [2]
    judgement = first.judgement
    assert judgement is not None and judgement.straggler is not None
    assert judgement.straggler.pid == PID + 1  # the rank that waits least


# ------------------------------------------------------------------- live


def test_a_live_rank_publishes_each_evaluation_whole() -> None:
    rank = live_rank()
    assert rank.latest() == NOTHING
    published = rank.conclude(NOW)
    assert published.diagnosis is not None and published.evaluating_since is None
    assert rank.latest() is published  # a reference read, nothing recomputed
    assert rank.history()[-1] is published.diagnosis
    # An earlier time: the history's diagnosis then, not the newest one.
    older = rank.conclude(NOW + 5)
    assert rank.at(NOW + 1).diagnosis is not None
    assert rank.at(NOW + 1).diagnosis is not older.diagnosis
    assert rank.at(NOW + 5) is older


def test_a_running_evaluation_and_a_failed_one_are_published(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rank = live_rank()
    good = rank.conclude(NOW)
    entered, release = threading.Event(), threading.Event()

    def slow(now: float) -> Diagnosis:
        entered.set()
        release.wait(5)
        raise RuntimeError("rule file vanished")

    monkeypatch.setattr(rank.evaluator, "evaluate", slow)
    def conclude() -> None:
        with pytest.raises(RuntimeError):
            rank.conclude(NOW + 1)

    worker = threading.Thread(target=conclude)
    worker.start()
    assert entered.wait(5)
    running = rank.latest()
    assert running.evaluating_since is not None and running.diagnosis is good.diagnosis
    release.set()
    worker.join(5)
    failed = rank.latest()
    assert failed.error == "RuntimeError: rule file vanished"
    assert failed.evaluating_since is None and failed.diagnosis is good.diagnosis


def test_the_jobs_judgement_is_made_once_per_evaluation_and_rows_only_read_it() -> None:
    session = build_session()
    session.job = RankJob(PID - 1, PID - 1, "env", (RankProcess(PID, 0, 0, 2),
                                                   RankProcess(PID + 1, 1, 1, 2)))
    peer_source = ReplaySource(build_session(), [with_comm(d, 0.1) for d in build_diagnoses()],
                               knowledge=PACKAGED)
    peers = [RankPeer("rank 1", PID + 1, peer_source)]
    asked: list[float] = []

    def judged_peers() -> list[RankView]:
        asked.append(time.monotonic())
        return [rank_view("rank 1", PID + 1, peer_source.latest().diagnosis)]

    evaluator = Evaluator(session, load_knowledge_base())
    evaluator.peers = judged_peers
    job = LiveJob(live_rank(session, evaluator), peers)
    published = job.conclude(NOW)
    assert len(asked) == 1
    assert published.judgement is not None and published.judgement is evaluator.judgement
    for _ in range(10):  # ten frames
        rows = rank_rows(job, job.latest(), NOW)
    assert len(asked) == 1, "a frame judged the job again"
    assert [r.label for r in rows] == ["rank 0", "rank 1"]
    assert rows[1].straggler_score == published.judgement.scores.get(PID + 1)


def test_rows_take_scores_and_the_straggler_from_the_conclusion() -> None:
    replay = two_rank_replay()
    made_up = JobJudgement((), RankView("rank 0", PID, 0.6, None, None, None), {PID: 0.5},
                           flagged=True)
    rows = rank_rows(replay, Conclusion(replay.at(NOW).diagnosis, made_up), NOW)
    assert [(r.pid, r.straggler, r.straggler_score) for r in rows] == [
        (PID, True, 0.5), (PID + 1, False, None)]


def test_judge_at_is_none_for_a_single_process() -> None:
    assert judge_at(build_session(), None, [], PACKAGED) is None


# -------------------------------------------------------------------- job


def test_a_live_job_hands_the_lead_to_a_restarted_rank() -> None:
    first, second = live_rank(), live_rank(build_session())
    job = LiveJob(first, warnings=["watching rank 0"], rebuild=lambda pid, j: second)
    assert job.session is first.session and job.warnings == ["watching rank 0"]
    job.adopt_lead(PID + 7, RankJob(PID - 1, PID - 1, "env", ()))
    assert job.lead is second and job.session is second.session
    assert first.collector.stop_event.is_set()  # the exited rank's probes stopped
    job.close()
    assert second.collector.stop_event.is_set()


def test_a_lead_adopted_as_the_job_closes_is_closed_too() -> None:
    """aitop quit while the follower builds a restarted rank's lead: the new lead
    is started and then closed, never left sampling nor stopped unstarted."""
    first, second = live_rank(), live_rank(build_session())
    building, release = threading.Event(), threading.Event()

    def rebuild(pid: int, j: RankJob) -> LiveSource:
        building.set()
        release.wait(5)
        return second

    job = LiveJob(first, rebuild=rebuild)
    adopting = threading.Thread(target=job.adopt_lead,
                                args=(PID + 7, RankJob(PID - 1, PID - 1, "env", ())))
    adopting.start()
    assert building.wait(5)
    closing = threading.Thread(target=job.close)
    closing.start()
    time.sleep(0.2)
    assert closing.is_alive()  # close waits for the lead being built
    release.set()
    adopting.join(5)
    closing.join(5)
    assert job.lead is second and second.collector.stop_event.is_set()
    assert first.collector.stop_event.is_set()


def test_a_closed_job_adopts_no_lead() -> None:
    first = live_rank()
    built: list[int] = []

    def rebuild(pid: int, j: RankJob) -> LiveSource:
        built.append(pid)
        return live_rank()

    job = LiveJob(first, rebuild=rebuild)
    job.close()
    job.adopt_lead(PID + 7, RankJob(PID - 1, PID - 1, "env", ()))
    assert built == [] and job.lead is first


def test_closing_a_job_closes_every_rank() -> None:
    peers = [RankPeer(f"rank {n}", PID + n, live_rank()) for n in (1, 2)]
    job = LiveJob(live_rank(), [*peers, RankPeer("rank 3", PID + 3, None, "gone")])
    job.close()
    assert job.closing.is_set() and job.lead.collector.stop_event.is_set()
    for peer in peers:
        assert isinstance(peer.source, LiveSource)
        assert peer.source.collector.stop_event.is_set()
