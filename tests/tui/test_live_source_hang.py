"""A hung rule evaluation never freezes the UI: tested on the real live source.

``LiveSource`` evaluates on its own thread once a second; the UI reads its
history and latest diagnosis on the event loop every frame. Those reads must
not wait for an evaluation in progress. Here the real evaluator hangs inside
``compute_metrics`` (as a stuck probe read or a pathological rule would) and
the real app keeps answering keys, drawing and exporting.
"""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

import aitop.knowledge.evaluator as evaluator_module
import pytest
from aitop.engine.headless.export import write_snapshot
from aitop.engine.live.attach import LiveSource
from aitop.knowledge.evaluator import Evaluator
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.probes.collector import Collector
from aitop.tui.screens.help import HelpScreen
from aitop.tui.screens.main import MainScreen
from support.tui_pilot import make_app, wait_for
from support.tui_session import NOW, build_session


class HangAfterFirst:
    """``compute_metrics`` that works once, then blocks until released."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.calls = 0
        self.hanging = threading.Event()
        self.release = threading.Event()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls > 1:
            self.hanging.set()
            self.release.wait(60)
        return self.real(*args, **kwargs)


@pytest.fixture
def hanging_source(monkeypatch: pytest.MonkeyPatch) -> Any:
    hang = HangAfterFirst(evaluator_module.compute_metrics)
    monkeypatch.setattr(evaluator_module, "compute_metrics", hang)
    session = build_session()
    collector = Collector(session, process=None, host=None, gpu=None, storage=None,
                          environment=None, stacks=None, steps=None)
    evaluator = Evaluator(session, load_knowledge_base())
    evaluator.evaluate(NOW)  # the first, good diagnosis
    source = LiveSource(session, collector, evaluator, evaluate_every_s=0.1).start()
    assert hang.hanging.wait(5), "the evaluator thread never reached the hang"
    yield source, hang
    hang.release.set()
    source.close()


def test_reads_do_not_wait_for_a_hung_evaluation(hanging_source: Any) -> None:
    source, hang = hanging_source
    started = time.monotonic()
    history = source.history()
    latest = source.latest().diagnosis
    assert time.monotonic() - started < 0.5
    assert len(history) == 1 and latest is history[-1]
    assert hang.hanging.is_set() and not hang.release.is_set()


async def test_app_answers_keys_and_exports_while_evaluation_hangs(
    hanging_source: Any, tmp_path: Path
) -> None:
    source, hang = hanging_source
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.diagnosis is not None)
        for _ in range(3):
            started = time.monotonic()
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen), timeout=2.0)
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), timeout=2.0)
            assert time.monotonic() - started < 2.0
        # An export reads the whole history: it must not wait either.
        written = write_snapshot(tmp_path / "during-hang.json", source)
        assert written[0].exists()
        assert not hang.release.is_set()  # all of the above happened during the hang
        await pilot.press("q")


def test_rules_are_evaluated_every_second_while_the_first_verdict_forms() -> None:
    """Every second during the warm-up (a rule's for: is confirmed a second
    sooner), then at the steady cadence (each evaluation costs CPU and memory)."""
    session = build_session()
    collector = Collector(session, process=None, host=None, gpu=None, storage=None,
                          environment=None, stacks=None, steps=None)
    evaluator = Evaluator(session, load_knowledge_base())
    source = LiveSource(session, collector, evaluator, evaluate_every_s=3.0,
                        evaluate_warmup_s=1.5).start()
    try:
        time.sleep(5.5)
    finally:
        source.close()
    times = [d.t for d in source.history()]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(times) == 4, gaps  # at 0, 1, 2 (warm-up over), then 5
    assert all(0.8 < g < 1.5 for g in gaps[:2]), gaps
    assert 2.5 < gaps[2] < 3.5, gaps
