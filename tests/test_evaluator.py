"""The evaluator's history stays small: compact entries that share unchanged findings."""

from __future__ import annotations

from aitop.knowledge.evaluator import HISTORY_METRICS, Evaluator
from aitop.knowledge.facts import load_facts
from aitop.knowledge.metrics import CATALOGUE
from aitop.knowledge.rules import load_rules
from aitop.probes.session import Session
from synthetic import T0, Job, extend, mix


def run_starved_job(seconds: int) -> Evaluator:
    session = Session(4242)
    extend(session, Job(phases=mix(data_wait=0.6)), 1, seconds)
    evaluator = Evaluator(session, load_rules(), load_facts())
    for tick in range(20, seconds + 1):
        evaluator.evaluate(T0 + tick)
    return evaluator


def test_only_the_newest_diagnosis_keeps_every_metric() -> None:
    evaluator = run_starved_job(60)
    history = evaluator.history()
    latest = evaluator.latest()
    assert latest is history[-1]
    assert set(latest.metrics) == set(CATALOGUE)
    for old in history[:-1]:
        assert set(old.metrics) <= HISTORY_METRICS
        assert "phase_data_wait" in old.metrics and "gpu_util_mean" in old.metrics
    assert len(HISTORY_METRICS) < len(CATALOGUE) / 3


def test_a_steady_finding_is_one_object_across_the_history() -> None:
    evaluator = run_starved_job(60)
    history = [d for d in evaluator.history() if d.findings]
    tops = [next(f for f in d.findings if f.id == "data_wait_dominant") for d in history
            if any(f.id == "data_wait_dominant" for f in d.findings)]
    assert len(tops) > 20
    # The job does not change, so neither does what the finding says: one object.
    assert len({id(f) for f in tops}) < len(tops) / 5
    assert all(f.title == tops[0].title for f in tops)
