"""Snapshot tests (pytest-textual-snapshot) of every screen from the fixture session.

Deterministic: the clock is frozen at the fixture's ``NOW``, times are shown in
UTC, sizes are fixed, and the shot is taken once the first diagnosis is drawn.
Update after an intended change with ``pytest tests/test_tui_screenshots.py
--snapshot-update`` and review the SVGs in tests/__snapshots__/.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from support.tui_pilot import make_app, settle
from support.tui_session import CHECKPOINT, T0, live_source, replay_source
from textual.pilot import Pilot


@pytest.fixture(autouse=True)
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Clocks on screen read the same on every machine."""
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.delenv("NO_COLOR", raising=False)
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


async def ready(pilot: Pilot[Any]) -> None:
    await settle(pilot)


def test_main_80x24(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(80, 24), run_before=ready)


def test_main_200x50(snap_compare: Any) -> None:
    assert snap_compare(make_app(), terminal_size=(200, 50), run_before=ready)


def test_main_without_gpu_80x24(snap_compare: Any) -> None:
    app = make_app(live_source(with_gpu=False))
    assert snap_compare(app, terminal_size=(80, 24), run_before=ready)


def test_main_target_exited_120x40(snap_compare: Any) -> None:
    app = make_app(live_source(exited=True))
    assert snap_compare(app, terminal_size=(120, 40), run_before=ready)


def test_replay_during_checkpoint_120x40(snap_compare: Any) -> None:
    app = make_app(replay_source())

    async def at_checkpoint(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        app._move_cursor(T0 + CHECKPOINT[0] + 2)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=at_checkpoint)


@pytest.mark.parametrize(
    "keys",
    [
        pytest.param(["g"], id="gpu"),
        pytest.param(["w"], id="processes"),
        pytest.param(["f"], id="stacks"),
        pytest.param(["i"], id="io"),
        pytest.param(["enter"], id="finding"),
        pytest.param(["k"], id="knowledge"),
        pytest.param(["question_mark"], id="help"),
    ],
)
def test_detail_screen_120x40(snap_compare: Any, keys: list[str]) -> None:
    app = make_app()

    async def open_screen(pilot: Pilot[Any]) -> None:
        await settle(pilot)
        for key in keys:
            await pilot.press(key)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(120, 40), run_before=open_screen)
