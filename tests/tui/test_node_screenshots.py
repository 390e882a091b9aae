"""Snapshot tests (pytest-textual-snapshot) of the node view from a recorded node.

Deterministic like tests/tui/test_tui_screenshots.py: the recording is
tests/support/node_session.py (every value a function of fixed times), the
clock reads UTC and the shot is taken once the node's table is drawn. Update
after an intended change with ``--snapshot-update`` and review the SVGs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from aitop.engine.live.node import NodeReplay
from aitop.tui.node_app import NodeApp
from support.knowledge import PACKAGED
from support.node_session import HOST, NOW, node_replay
from support.tui_pilot import wait_for
from textual.pilot import Pilot


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("NO_COLOR", raising=False)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def drawn(*keys: str) -> Any:
    async def run_before(pilot: Pilot[None]) -> None:
        app = pilot.app
        assert isinstance(app, NodeApp)
        await wait_for(pilot, lambda: app.node_table is not None)
        for key in keys:
            await pilot.press(key)
        await pilot.pause()

    return run_before


def test_node_with_a_jobs_ranks_unfolded_200x50(snap_compare: Any) -> None:
    app = NodeApp(node_replay(), clock=lambda: NOW)
    assert snap_compare(app, terminal_size=(200, 50), run_before=drawn("r"))


def test_node_120x30(snap_compare: Any) -> None:
    app = NodeApp(node_replay(), clock=lambda: NOW)
    assert snap_compare(app, terminal_size=(120, 30), run_before=drawn())


def test_empty_node_100x20(snap_compare: Any) -> None:
    app = NodeApp(NodeReplay(HOST, [], PACKAGED, written_at=NOW), clock=lambda: NOW)
    assert snap_compare(app, terminal_size=(100, 20), run_before=drawn())
