"""The real aitop app driven by Pilot: panels, keys, drill-downs, pause, refresh, responsiveness."""

from __future__ import annotations

import gc
import re
import statistics
import time
from typing import Any

import pytest
from aitop.engine.live.source import ReplaySource
from aitop.probes.ranks import Job as RankJob
from aitop.probes.ranks import RankProcess
from aitop.probes.session import Session
from aitop.tui.app import REFRESH_STEPS, AitopApp
from aitop.tui.screens import make_screen
from aitop.tui.screens.finding import FindingScreen
from aitop.tui.screens.gpu import GpuScreen
from aitop.tui.screens.help import HelpScreen
from aitop.tui.screens.io_detail import IoScreen
from aitop.tui.screens.knowledge import KnowledgeScreen
from aitop.tui.screens.main import MainScreen
from aitop.tui.screens.processes import ProcessScreen
from aitop.tui.screens.stacks import StacksScreen
from aitop.tui.widgets.advisor_panel import AdvisorPanel
from aitop.tui.widgets.gpu_panel import GpuPanel
from aitop.tui.widgets.header import ExitBanner
from aitop.tui.widgets.panel import Panel
from support.knowledge import PACKAGED
from support.tui_pilot import make_app, screen_text, settle, wait_for
from support.tui_session import NOW, T0, FixtureSource, live_source
from textual.filter import Monochrome, NoColor
from textual.widgets import DataTable

PANEL_DETAIL = {
    "gpu": GpuScreen,
    "host": ProcessScreen,
    "io": IoScreen,
    "step": StacksScreen,
    "advisor": FindingScreen,
}


def focused_id(app: AitopApp) -> str | None:
    focused = app.screen.focused
    return focused.id if focused is not None else None


async def test_start_up_objects_are_set_aside_from_full_collections_after_the_first_frame(
) -> None:
    """Once the first frame is up, what start-up built is frozen (``tui.heap``): full
    garbage collections, which stop the UI's thread, no longer walk it."""
    gc.unfreeze()
    try:
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot)
            await wait_for(pilot, lambda: gc.get_freeze_count() > 0, timeout=10.0)
            assert app.first_frame_at is not None
    finally:
        gc.unfreeze()


async def test_main_screen_shows_every_panel_at_80x24() -> None:
    app = make_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, MainScreen)
        panels = {p.id: p for p in app.screen.query(Panel) if p.display}
        assert set(panels) == set(PANEL_DETAIL)  # no Ranks panel for one process
        for panel in panels.values():
            assert panel.region.height >= 2, panel.id
        text = screen_text(app)
        assert "PID 4242" in text and "LIVE" in text
        assert "DATA LOADING" in text
        assert "data wait 42%" in text
        # the advisor starts focused, so Enter opens the top finding
        assert focused_id(app) == "advisor"


async def test_tab_and_arrows_move_between_panels() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        seen = set()
        for _ in range(5):
            await pilot.press("tab")
            seen.add(focused_id(app))
        assert seen == set(PANEL_DETAIL)
        await pilot.press("shift+tab")
        app.screen.query_one("#gpu").focus()
        await pilot.pause()
        await pilot.press("right")
        assert focused_id(app) == "step"
        await pilot.press("left")
        assert focused_id(app) == "gpu"
        await pilot.press("down")
        assert focused_id(app) == "host"
        await pilot.press("down")
        assert focused_id(app) == "io"
        await pilot.press("down")  # nothing further down: focus stays
        assert focused_id(app) == "io"
        await pilot.press("right")
        assert focused_id(app) == "advisor"
        await pilot.press("up")  # in the advisor, up selects findings first
        assert focused_id(app) == "step"


async def test_enter_opens_each_panels_detail_and_escape_returns() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for panel_id, screen in PANEL_DETAIL.items():
            app.screen.query_one(f"#{panel_id}").focus()
            await pilot.press("enter")
            assert isinstance(app.screen, screen), panel_id
            await pilot.press("escape")
            assert isinstance(app.screen, MainScreen)
            assert focused_id(app) == panel_id


DIRECT_KEYS = [
    ("g", GpuScreen, "GPU 0 · NVIDIA H100"),
    ("w", ProcessScreen, "pt_data_pin"),
    ("f", StacksScreen, "Stalling on: train.py:88"),
    ("i", IoScreen, "/ckpt/epoch_003.pt"),
    ("k", KnowledgeScreen, "GPU utilization below 70%"),
    ("question_mark", HelpScreen, "Knowledge"),
]


async def test_direct_keys_open_every_detail_screen() -> None:
    app = make_app()
    async with app.run_test(size=(140, 50)) as pilot:
        await settle(pilot)
        for key, screen, expect in DIRECT_KEYS:
            await pilot.press(key)
            assert isinstance(app.screen, screen), key
            await wait_for(pilot, lambda e=expect: e in screen_text(app))  # type: ignore[misc]
        # each key replaced the previous detail screen instead of stacking on it
        assert len(app.screen_stack) == 2
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_finding_detail_shows_rule_evidence_source_change_and_gain() -> None:
    app = make_app()
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(pilot)
        await pilot.press("down")  # second finding
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, FindingScreen)
        assert app.screen.finding.id == "dataset_on_network_fs"
        await pilot.press("escape")
        await pilot.press("up")
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, FindingScreen)
        assert screen.finding.id == "data_wait_dominant"
        text = screen_text(app)
        for expected in (
            "phase_data_wait > 0.05 and accel_util < 70",  # the rule
            "< 5% of step time",  # an evidence target
            "outside",
            "optimize-server",  # document
            "Asynchronous Data Loading",  # section
            "num_workers > 0 and pin_memory=True",  # the quote
            "persistent_workers=True",  # the snippet
            "×1.6",
            "amdahl",
            "1/(1-0.42)",  # how the gain was computed
        ):
            assert expected in text, expected


async def test_clicks_open_panels_and_findings() -> None:
    app = make_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.click("#gpu")
        await pilot.pause()
        assert isinstance(app.screen, GpuScreen)
        await pilot.press("escape")
        advisor = app.screen.query_one(AdvisorPanel)
        await wait_for(pilot, lambda: 1 in advisor.drawn_tags)
        row = advisor.drawn_tags.index(1)  # a line of the second finding
        await pilot.click("#advisor", offset=(4, row + advisor.gutter.top))
        await pilot.pause()
        assert isinstance(app.screen, FindingScreen)
        assert app.screen.finding.id == "dataset_on_network_fs"


async def test_process_table_sorts_by_column() -> None:
    app = make_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        await pilot.press("w")
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        assert table.row_count == 5 + 7  # processes and their threads
        await pilot.press("n")  # by name, ascending
        names = [str(table.get_row_at(i)[4].text) for i in range(table.row_count)]
        assert names == sorted(names)
        await pilot.press("c")  # by CPU, busiest first
        cpus = [table.get_row_at(i)[6].key for i in range(table.row_count)]
        assert cpus == sorted(cpus, reverse=True)
        await pilot.press("c")  # again: reversed
        cpus = [table.get_row_at(i)[6].key for i in range(table.row_count)]
        assert cpus == sorted(cpus)
        await pilot.press("t")  # threads hidden
        assert table.row_count == 5


async def test_pause_freezes_the_display_but_not_evaluation() -> None:
    clock = [NOW - 60]
    source = live_source()
    app = make_app(source, clock=lambda: clock[0], refresh_s=0.25)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("p")
        assert app.paused
        frozen = app.view.now if app.view else None
        assert frozen == NOW - 60
        calls = source.calls
        clock[0] = NOW
        await wait_for(pilot, lambda: source.calls > calls + 1)
        app.redraw()
        assert app.view is not None and app.view.now == frozen  # display frozen
        assert "PAUSED" in screen_text(app)
        await pilot.press("p")
        assert not app.paused and app.view.now == NOW


async def test_plus_and_minus_change_the_refresh_rate() -> None:
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert app.refresh_s == 1.0
        await pilot.press("plus")
        assert app.refresh_s == 0.5
        await pilot.press("minus")
        await pilot.press("minus")
        assert app.refresh_s == 2.0
        for _ in range(10):
            await pilot.press("minus")
        assert app.refresh_s == REFRESH_STEPS[-1]
        assert "refresh 10s" in screen_text(app)


async def test_key_is_answered_while_evaluate_is_slow() -> None:
    """Keys work while ``evaluate`` is held: the source evaluates on its own
    thread and the app only reads what it published.

    The evaluation is held until the test releases it, so "answered before it
    ended" is read from the source itself, not from a wall clock that a busy
    box stretches."""
    source = live_source(delay_s=60.0)
    app = make_app(source)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: source.calls >= 1)
            assert source.latest().evaluating_since is not None and app.diagnosis is None
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            # The key was handled while evaluate was still held, not after it.
            assert source.active == 1 and app.diagnosis is None
            await pilot.press("escape")
            assert isinstance(app.screen, MainScreen)
            assert source.max_active == 1  # reading never started an evaluation
            source.release.set()
            await wait_for(pilot, lambda: app.diagnosis is not None, timeout=5.0)
    finally:
        source.release.set()


async def test_quitting_does_not_wait_for_a_hung_evaluate() -> None:
    source = live_source(delay_s=60.0)
    app = make_app(source)
    started = time.monotonic()
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: source.calls >= 1)
            await pilot.press("q")
        assert time.monotonic() - started < 5.0
        assert app.return_code == 0
    finally:
        source.release.set()


def _evaluating_for(screen: str) -> float:
    """Seconds the header says the rules have been evaluating (0 when it says nothing)."""
    found = re.search(r"rules: evaluating for (\d+(?:\.\d+)?)s", screen)
    return float(found.group(1)) if found else 0.0


async def test_slow_evaluation_is_shown_in_the_header() -> None:
    source = live_source(delay_s=10.0)
    app = make_app(source)
    try:
        async with app.run_test(size=(140, 30)) as pilot:
            await wait_for(pilot, lambda: source.calls >= 1)
            source.pretend_evaluating_for(5.0)
            app.redraw()
            # At least the 5 s backdated: a busy box may add a second or two before it draws.
            await wait_for(pilot, lambda: _evaluating_for(screen_text(app)) >= 5.0)
    finally:
        source.release.set()


async def test_evaluation_errors_are_reported_not_raised() -> None:
    source = live_source()

    def broken(now: float) -> None:
        raise RuntimeError("rule file vanished")

    source.evaluate = broken  # type: ignore[method-assign,assignment]
    app = make_app(source)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await wait_for(pilot, lambda: app._last_error is not None)
        assert "rule file vanished" in (app._last_error or "")
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)


async def test_without_a_gpu_the_panel_is_one_line_and_gives_its_room_away() -> None:
    app = make_app(live_source(with_gpu=False))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        gpu = app.screen.query_one(GpuPanel)
        assert gpu.has_class("-unavailable")
        assert gpu.region.height == 1
        text = screen_text(app)
        assert "no NVIDIA driver" in text
        host = app.screen.query_one("#host")
        assert host.region.height >= 8


async def test_several_gpus_fold_to_one_line_each_when_small() -> None:
    app = make_app(live_source(gpus=2))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await wait_for(pilot, lambda: app.screen.query_one(GpuPanel).region.height == 3)
        text = screen_text(app)
        assert "0 H100 80GB HBM3 util  13%" in text
        assert "1 H100 80GB HBM3 util  95%" in text
        await pilot.resize_terminal(200, 60)
        await wait_for(pilot, lambda: screen_text(app).count("throttle ") == 2)
        assert "thermal (hardware)" in screen_text(app)


async def test_exited_target_shows_a_banner_and_keeps_the_data() -> None:
    app = make_app(live_source(exited=True))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        banner = app.screen.query_one(ExitBanner)
        assert banner.has_class("-shown")
        text = screen_text(app)
        assert "target exited at" in text and "status 1" in text
        await pilot.press("g")
        await pilot.pause()
        assert "GPU 0 · NVIDIA H100" in screen_text(app)  # the data stays


async def test_no_color_is_respected(monkeypatch: pytest.MonkeyPatch) -> None:
    """NO_COLOR: Textual draws in monochrome; every status still has its symbol."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert app.no_color
        assert any(isinstance(f, (Monochrome, NoColor)) for f in app._filters)
        text = screen_text(app)
        assert "data wait 42% ✗" in text  # outside the target, said without colour
        assert "✓" in text and "~" in text


async def test_time_to_first_frame(record_property: Any) -> None:
    """Median of 5 starts, from constructing the app to its first drawn frame."""
    times = []
    for _ in range(5):
        started = time.monotonic()
        app = make_app()
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda a=app: a.first_frame_at is not None)  # type: ignore[misc]
            assert app.first_frame_at is not None
            times.append(app.first_frame_at - started)
    median = statistics.median(times)
    record_property("first_frame_median_s", round(median, 3))
    print(f"time to first frame: median {median * 1000:.0f} ms of {len(times)}")
    assert median < 3.0


async def test_header_shows_uptime_probe_status_and_refresh() -> None:
    app = make_app()
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "up 13m00s" in text  # target started at T0 - 600
        assert "stacks ✓ py-spy 0.4.0, 100 Hz" in text
        assert "refresh 1s" in text
        assert "--token '***'" in text  # redacted upstream, shown as is
        assert T0 < NOW


async def test_header_says_which_rank_of_a_multi_rank_job_is_watched() -> None:
    source = live_source()
    pid = source.session.target_pid
    source.session.job = RankJob(pid - 1, pid - 1, "env", (
        RankProcess(pid, 0, 0, 2), RankProcess(pid + 1, 1, 1, 2)))
    app = make_app(source)
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        assert f"PID {pid} rank 0 of 2 " in screen_text(app)


async def test_an_empty_session_draws_and_every_key_is_safe() -> None:
    """Before the first sample: panels say they wait; no key crashes the app."""
    empty = FixtureSource(Session(99), [])
    app = make_app(empty)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        assert "waiting" in screen_text(app) or "collecting" in screen_text(app)
        for key in ("tab", "enter", "escape", "k", "p", "p", "plus", "up", "left"):
            await pilot.press(key)
        for name in ("gpu", "processes", "stacks", "io", "help"):  # each draws from nothing
            app.open_detail(name)
            await pilot.pause()
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)
    replay = ReplaySource(Session(99), [], knowledge=PACKAGED)
    app = make_app(replay)
    async with app.run_test(size=(100, 30)) as pilot:
        for key in ("left", "right", "home", "end", "space", "enter", "escape"):
            await pilot.press(key)
        assert app.is_running


async def test_detail_screens_are_kept_and_the_gpu_screen_follows_new_gpus() -> None:
    """Opening a screen again reuses it; GPUs that appear later get their charts."""
    from support.tui_session import DURATION_S, build_diagnoses, build_session, gpu

    session = build_session(with_gpu=False)
    session.gpu = type(session.gpu)(session.capacity)  # no GPU samples yet
    app = make_app(FixtureSource(session, build_diagnoses()))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("g")
        first = app.screen
        assert isinstance(first, GpuScreen) and first.indices == []
        assert "No GPU samples yet" in screen_text(app)
        await pilot.press("escape")
        for i in range(DURATION_S + 1):
            session.gpu.append(gpu(i, 2))
        await pilot.press("g")
        assert app.screen is first  # the same screen, kept
        await wait_for(pilot, lambda: "GPU 0 · NVIDIA H100" in screen_text(app))
        assert first.indices == [0, 1]
        assert len(first.query("#gpu1-util")) == 1  # charts for the second GPU too


async def test_a_tick_repaints_only_the_rows_that_changed() -> None:
    """A new view re-renders exactly the panel rows whose text changed, and the
    screen shows the new text; an unchanged view re-renders nothing."""
    t = {"now": NOW - 60.0}
    app = make_app(clock=lambda: t["now"])
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot)
        panels = [p for p in app.screen.query(Panel) if p.display]
        rendered: dict[str, list[int]] = {}
        for panel in panels:
            original = panel.render_line

            def spy(y: int, _p: Panel = panel, _orig: Any = original) -> Any:
                rendered.setdefault(_p.id or "", []).append(y)
                return _orig(y)

            panel.render_line = spy  # type: ignore[method-assign]
        app.redraw()
        await pilot.pause()
        assert rendered == {}, "an unchanged view repainted rows"
        before = {p.id: [line.text.plain for line in p._layout()] for p in panels}
        t["now"] += 5.0
        app.redraw()
        await pilot.pause()
        after = {p.id: [line.text.plain for line in p._layout()] for p in panels}
        changed = {pid: sorted(y for y in range(len(after[pid]))
                               if y >= len(before[pid]) or before[pid][y] != after[pid][y])
                   for pid in after}
        assert any(changed.values()), "five seconds on, nothing changed: no test"
        partial = [pid for pid in changed if 0 < len(changed[pid]) < len(after[pid])]
        assert partial, changed  # some panel changed only in part
        for pid in partial:
            assert sorted(set(rendered.get(pid or "", []))) == changed[pid], pid
        text = screen_text(app)
        for pid in partial:
            for y in changed[pid]:
                assert after[pid][y].strip()[:30] in text, (pid, after[pid][y])


async def test_a_tick_between_pushing_a_screen_and_its_mount_is_safe() -> None:
    """A redraw may land after a detail screen is pushed and before it is mounted
    (CI saw ``NoMatches: #io-read``): the screen then draws itself on mount."""
    app = make_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        for name in ("io", "gpu", "processes", "stacks"):
            screen = make_screen(name, app)
            assert screen is not None
            app.push_screen(screen)
            app.redraw()  # before the pushed screen has mounted its widgets
            await pilot.pause()
            assert app.screen is screen and screen.is_mounted
            await pilot.press("escape")
            await pilot.pause()
