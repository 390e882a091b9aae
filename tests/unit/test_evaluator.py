"""The evaluator's history stays small: compact entries that share unchanged findings."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path

from aitop.engine.live.source import ReplaySource
from aitop.engine.records.snapshot import encode, load_snapshot, snapshot_of
from aitop.knowledge.base.catalogue import CATALOGUE
from aitop.knowledge.evaluator import HISTORY_METRICS, Evaluator, compact
from aitop.knowledge.metrics.packed import PackedMetrics
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.probes.session import Session
from support.knowledge import PACKAGED
from support.synthetic import T0, Job, extend, mix


def run_starved_job(seconds: int) -> Evaluator:
    session = Session(4242)
    extend(session, Job(phases=mix(data_wait=0.6)), 1, seconds)
    evaluator = Evaluator(session, load_knowledge_base())
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
    # Scalars and series means only: well under half the catalogue (about 135 of
    # 330 once the private-memory, cgroup and recompile scalars arrived), the
    # series' other aggregates (min, max, p5, p95, last, ...) dropped.
    assert len(HISTORY_METRICS) < 0.45 * len(CATALOGUE)
    assert not any(name.endswith(("_p95", "_max", "_p5")) for name in HISTORY_METRICS)


def test_a_steady_finding_is_one_object_across_the_history() -> None:
    evaluator = run_starved_job(60)
    history = [d for d in evaluator.history() if d.findings]
    tops = [next(f for f in d.findings if f.id == "data_wait_dominant") for d in history
            if any(f.id == "data_wait_dominant" for f in d.findings)]
    assert len(tops) > 20
    # The job does not change, so neither does what the finding says: one object.
    assert len({id(f) for f in tops}) < len(tops) / 5
    assert all(f.title == tops[0].title for f in tops)


def test_history_packs_its_metrics_and_reads_them_back() -> None:
    evaluator = run_starved_job(40)
    full = evaluator.latest()
    assert full is not None
    evaluator.evaluate(T0 + 41)
    kept = evaluator.history()[-2]
    assert kept.t == full.t and isinstance(kept.metrics, PackedMetrics)
    expected = {k: None if v is None else float(v)
                for k, v in full.metrics.items() if k in HISTORY_METRICS}
    assert None in expected.values()  # unknowns stay unknown, not 0 or NaN
    assert dict(kept.metrics) == expected
    assert kept.metrics.get("no_such_metric") is None and "phase_data_wait" in kept.metrics


def test_packed_history_is_a_fraction_of_the_dicts_it_replaces() -> None:
    evaluator = run_starved_job(30)
    latest = evaluator.latest()
    assert latest is not None
    dicts = {k: v for k, v in latest.metrics.items() if k in HISTORY_METRICS}

    def traced(build: Callable[[], object]) -> int:
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        kept = [build() for _ in range(200)]
        size = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert len(kept) == 200
        return size

    as_dicts = traced(lambda: {k: None if v is None else float(v) + 0.5 for k, v in dicts.items()})
    packed = traced(lambda: compact(latest).metrics)
    assert packed < as_dicts / 3, (packed, as_dicts)


def test_a_snapshot_writes_packed_metrics_as_the_mapping_they_read_as(tmp_path: Path) -> None:
    evaluator = run_starved_job(25)
    history = list(evaluator.history())
    assert isinstance(history[0].metrics, PackedMetrics)
    path = tmp_path / "run.json"
    replay = ReplaySource(evaluator.session, history, knowledge=PACKAGED)
    path.write_bytes(encode(snapshot_of(replay)))
    back = load_snapshot(path, PACKAGED).history()
    assert [d.t for d in back] == [d.t for d in history]
    assert [dict(d.metrics) for d in back] == [dict(d.metrics) for d in history]
