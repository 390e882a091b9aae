"""The exporter's Publisher reads what it is given: a watched rank, the rules, the attach time."""

from __future__ import annotations

from dataclasses import dataclass

from aitop.engine.live.source import Conclusion, ReplaySource
from aitop.engine.prometheus.exporter import Publisher
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.probes.session import Session
from support.knowledge import PACKAGED
from support.tui_session import NOW, PID, build_diagnoses, build_session, replay_source


@dataclass
class Restarted:
    """A watched job whose lead rank is replaced (an elastic restart hands it over)."""

    source: ReplaySource

    @property
    def session(self) -> Session:
        return self.source.session

    def latest(self) -> Conclusion:
        return self.source.latest()


def test_a_frame_is_the_watched_ranks_newest_diagnosis_and_the_rules_given() -> None:
    source = replay_source()
    rules = load_knowledge_base().rules.rules
    frame = Publisher(source, rules, attached_at=NOW - 60).frame(NOW)
    assert frame.diagnosis is source.latest().diagnosis
    assert frame.rules == rules and frame.attached_at == NOW - 60
    assert frame.target_pid == PID and frame.target_alive
    counted = dict(frame.stack_samples)
    assert sum(counted.values()) == sum(w.total_samples for w in source.session.stacks.items()
                                        if w.error is None and w.t_end <= NOW)
    assert frame.steps_total is not None and frame.steps_total > 0


def test_each_frame_reads_the_rank_afresh_and_the_counters_carry_on() -> None:
    """A launcher's restart hands the job to a new lead rank: the next frame is its."""
    watched = Restarted(replay_source())
    publisher = Publisher(watched, (), attached_at=NOW - 60)
    first = publisher.frame(NOW)
    successor = build_session()
    successor.target_pid = PID + 7
    watched.source = ReplaySource(successor, build_diagnoses(), knowledge=PACKAGED)
    later = publisher.frame(NOW + 1)
    assert (first.target_pid, later.target_pid) == (PID, PID + 7)
    assert dict(later.stack_samples) == dict(first.stack_samples), \
        "samples already counted are not counted again"
