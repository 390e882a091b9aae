"""The node view driven by Pilot over a recorded node (tests/support/node_session.py).

Rows, sorting, a job's ranks unfolded, Enter into a job's full view and Escape
back, the time cursor over the node, the keys' help, an export that replays,
and an empty machine. The live node, with real jobs coming and going, is
tests/attach/test_node_view_live.py.
"""

from __future__ import annotations

from pathlib import Path

from aitop.engine.live.node import NO_JOBS, NodeReplay
from aitop.engine.records.node import load_recording
from aitop.tui.node_app import NodeApp
from aitop.tui.screens.help import HelpScreen
from aitop.tui.screens.main import MainScreen
from aitop.tui.screens.node import NodeScreen
from aitop.tui.widgets.grouped_table import GroupedTable
from support.knowledge import PACKAGED
from support.node_session import HOST, NOW, T0, node_replay
from support.tui_pilot import screen_text, wait_exports, wait_for
from textual.pilot import Pilot


def make_node_app(node: NodeReplay | None = None, **kwargs: object) -> NodeApp:
    return NodeApp(node if node is not None else node_replay(), clock=lambda: NOW,
                   **kwargs)  # type: ignore[arg-type]


def table_keys(app: NodeApp) -> list[str]:
    table = app.screen.query_one(GroupedTable)
    return [str(row.key.value) for row in table.ordered_rows]


async def ready(pilot: Pilot[None]) -> NodeApp:
    app = pilot.app
    assert isinstance(app, NodeApp)
    await wait_for(pilot, lambda: app.node_table is not None and bool(table_keys(app)))
    return app


async def test_every_job_is_a_row_sorted_by_cpu_and_what_is_not_watched_says_why() -> None:
    async with make_node_app().run_test(size=(200, 40)) as pilot:
        app = await ready(pilot)
        assert isinstance(app.screen, NodeScreen)
        text = screen_text(app)
        assert f"node {HOST}" in text and "3 PyTorch jobs · 3 watched · 1 not watched" in text
        assert "REPLAY" in text
        # The 2-rank job uses twice the cores of the others: it leads by CPU.
        assert table_keys(app)[0].startswith("5100-")
        assert "DATA LOADING: Training waits on the DataLoader 42% of the time" in text
        assert "warming up" in text and "training" in text
        assert "✗ PID 7100" in text and "run aitop as root (sudo aitop)" in text
        await pilot.press("n")  # by job id, A to Z
        await pilot.pause()
        assert [k.split("-")[0] for k in table_keys(app)] == ["5100", "6100", "4242"]
        await pilot.press("n")
        await pilot.pause()
        assert [k.split("-")[0] for k in table_keys(app)] == ["4242", "6100", "5100"]


async def test_r_unfolds_a_jobs_ranks_beneath_it_whatever_the_order() -> None:
    async with make_node_app().run_test(size=(160, 40)) as pilot:
        app = await ready(pilot)
        await pilot.press("r")  # the cursor is on the 2-rank job
        await pilot.pause()
        keys = table_keys(app)
        assert keys[:3] == ["5100-2000", "5100-2000/4242", "5100-2000/4243"], keys
        text = screen_text(app)
        assert "▾ bert-large-7" in text and "└ rank 1" in text and "straggler" in text
        await pilot.press("a")  # by age: the ranks stay under their job
        await pilot.pause()
        keys = table_keys(app)
        i = keys.index("5100-2000")
        assert keys[i + 1:i + 3] == ["5100-2000/4242", "5100-2000/4243"], keys
        await pilot.press("r")
        await pilot.pause()
        assert "5100-2000/4243" not in table_keys(app)


async def test_enter_opens_the_jobs_full_view_and_escape_returns() -> None:
    async with make_node_app().run_test(size=(160, 40)) as pilot:
        app = await ready(pilot)
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.pause()
        text = screen_text(app)
        # What aitop --pid shows of it: rank 0 leads, the Ranks panel, the verdict.
        assert "PID 4242 rank 0 of 2" in text and "Ranks" in text
        assert "rank 1 holds the job back" in text
        assert app.job_key == "5100-2000"
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("escape")  # the detail screen first
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.press("escape")  # then the node
        await wait_for(pilot, lambda: isinstance(app.screen, NodeScreen))
        assert app.job_key is None
        await pilot.pause()
        assert "3 PyTorch jobs" in screen_text(app)


async def test_enter_on_a_rank_opens_that_ranks_view_and_escape_goes_back_to_the_lead(
        ) -> None:
    async with make_node_app().run_test(size=(160, 40)) as pilot:
        app = await ready(pilot)
        await pilot.press("r", "down", "down", "enter")  # rank 1 of the 2-rank job
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        assert app.viewed_pid == 4243
        await pilot.press("escape")  # rank 1 -> the lead rank
        await pilot.pause()
        assert app.viewed_pid is None and isinstance(app.screen, MainScreen)
        await pilot.press("escape")  # the lead rank -> the node
        await wait_for(pilot, lambda: isinstance(app.screen, NodeScreen))


async def test_the_time_cursor_moves_over_the_node_and_into_a_job() -> None:
    async with make_node_app().run_test(size=(160, 40)) as pilot:
        app = await ready(pilot)
        await pilot.press("home")
        await pilot.pause()
        assert app.cursor == T0
        # The compiling job was found 22 s in: not yet on the machine.
        assert not any(k.startswith("6100-") for k in table_keys(app))
        await pilot.press("end")
        await pilot.pause()
        assert any(k.startswith("6100-") for k in table_keys(app))
        await pilot.press("enter")
        await wait_for(pilot, lambda: isinstance(app.screen, MainScreen))
        await pilot.press("home")  # one cursor for the node and the job's view
        await pilot.pause()
        assert app.view is not None and app.view.now == T0


async def test_help_lists_the_node_views_keys() -> None:
    async with make_node_app().run_test(size=(120, 60)) as pilot:
        app = await ready(pilot)
        await pilot.press("question_mark")
        await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.pause()
        text = screen_text(app)
        assert "Node view (every job of the machine)" in text and "Ranks" in text


async def test_s_exports_the_node_recording_and_it_replays(tmp_path: Path) -> None:
    target = tmp_path / "node.json"
    async with make_node_app(export_path=target).run_test(size=(160, 40)) as pilot:
        app = await ready(pilot)
        await pilot.press("s")
        await wait_exports(app)
        await wait_for(pilot, lambda: bool(app.exports), timeout=10)
    assert app.exports[0] == [target, target.with_suffix(".md"), target.with_suffix(".svg")]
    assert "bert-large-7" in target.with_suffix(".svg").read_text()
    back = load_recording(target, PACKAGED)
    assert isinstance(back, NodeReplay)
    assert {j.job_id for j in back.recorded()} == {j.job_id for j in node_replay().recorded()}


async def test_an_empty_machine_says_how_to_start_the_demo() -> None:
    empty = NodeReplay(HOST, [], PACKAGED, written_at=NOW)
    async with make_node_app(empty).run_test(size=(120, 20)) as pilot:
        app = pilot.app
        await wait_for(pilot, lambda: isinstance(app, NodeApp) and app.node_table is not None)
        await pilot.pause()
        text = " ".join(screen_text(app).split())
        assert " ".join(NO_JOBS.split()) in text
        for key in ("enter", "r", "c", "k", "g", "escape", "right", "space"):
            await pilot.press(key)  # nothing to open, nothing breaks
        await pilot.pause()
        assert isinstance(app.screen, NodeScreen)
