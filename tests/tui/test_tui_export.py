"""Snapshots: write (atomic, versioned), read back as a replay, fail in one line."""

from __future__ import annotations

import json
import os
import signal
from importlib import metadata
from pathlib import Path

import msgspec
import pytest
from aitop.engine.headless.export import write_snapshot
from aitop.engine.live.source import ReplaySource
from aitop.engine.records.snapshot import SCHEMA, SnapshotError, load_snapshot
from aitop.probes.ranks import Job as RankJob
from aitop.probes.ranks import RankProcess
from aitop.probes.session import RING_KINDS
from aitop.tui.app import EXIT_UNSAVED
from aitop.tui.screens.export_path import ExportPathScreen
from support.knowledge import PACKAGED
from support.tui_pilot import make_app, settle, wait_exports, wait_for
from support.tui_session import NOW, live_source
from textual.widgets import Input


def sample_counts(session: object) -> dict[str, int]:
    return {name: len(getattr(session, name)) for name in RING_KINDS}


def test_write_then_load_round_trips_every_sample_and_finding(tmp_path: Path) -> None:
    source = live_source()
    paths = write_snapshot(tmp_path / "run.json", source)
    assert [p.name for p in paths] == ["run.json", "run.md", "run.html"]
    data = json.loads(paths[0].read_text())
    assert data["schema"] == SCHEMA
    assert data["target_pid"] == 4242
    assert data["environment"]["torch_version"] == "2.4.1+cu124"
    assert data["probe_status"]["stacks"] == {"state": "ok", "detail": "py-spy 0.4.0, 100 Hz"}
    replay = load_snapshot(paths[0], PACKAGED)
    assert isinstance(replay, ReplaySource) and replay.live is False
    assert sample_counts(replay.session) == sample_counts(source.session)
    # the typed samples come back equal, not just similar
    assert replay.session.gpu.items() == source.session.gpu.items()
    assert replay.session.stacks.items() == source.session.stacks.items()
    assert replay.session.events.items() == source.session.events.items() != []
    assert replay.session.environment == source.session.environment
    assert replay.history() == source.history()
    assert replay.at(NOW).diagnosis == source.at(NOW).diagnosis
    assert replay.session.started_at == source.session.started_at
    # no temporary files left behind, and ordinary permissions (not mkstemp's 0600)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.html", "run.json", "run.md"]
    mask = os.umask(0)
    os.umask(mask)
    assert paths[0].stat().st_mode & 0o777 == 0o666 & ~mask


def test_exit_info_survives_the_round_trip(tmp_path: Path) -> None:
    source = live_source(exited=True)
    replay = load_snapshot(write_snapshot(tmp_path / "x.json", source)[0], PACKAGED)
    assert replay.session.target_exited_at == NOW
    assert replay.session.target_exit_status == 1


def test_the_job_and_its_ranks_survive_the_round_trip(tmp_path: Path) -> None:
    source = live_source()
    pid = source.session.target_pid
    source.session.job = RankJob(pid, 77, "env", (
        RankProcess(pid, 0, 0, 2, 0, "run-1"), RankProcess(pid + 1, 1, 1, 2, 0, "run-1")))
    path = write_snapshot(tmp_path / "ranks.json", source)[0]
    assert json.loads(path.read_text())["job"]["launcher_pid"] == 77
    assert load_snapshot(path, PACKAGED).session.job == source.session.job
    # Older files have no job: they replay as before.
    data = json.loads(path.read_text())
    del data["job"]
    path.write_text(json.dumps(data))
    assert load_snapshot(path, PACKAGED).session.job is None


def test_markdown_report_says_what_to_paste_into_an_issue(tmp_path: Path) -> None:
    md = write_snapshot(tmp_path / "run.json", live_source())[1].read_text()
    for expected in (
        "# aitop report: PID 4242",
        "python train.py --data /mnt/datasets/imagenet --token '***'",
        "**data_loading** on gpu",
        "| GPU utilization below 70% | Data pipeline optimization | Batch size tuning |",
        "### 1. Training waits on the DataLoader 42% of the time",
        "| Data wait share of step | 42% | < 5% of step time | ✗ outside |",
        "at most ×1.6 (Amdahl ceiling)",
        "**Source:** optimize-server",
        "> PyTorch's DataLoader with num_workers > 0",
        "| data wait | 42.0% |",
        "| GPU utilization | 80-95% during training | 48% mean | ✗ outside |",
        "aitop replay run.json",
    ):
        assert expected in md, expected


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"not json at all", "is not an aitop snapshot"),
        (b"[1, 2, 3]", "is not an aitop snapshot"),
        (b'{"hello": "world"}', 'no "schema" field'),
        (b'{"schema": "aitop.snapshot/99", "aitop_version": "9.0"}',
         "uses snapshot format aitop.snapshot/99 (written by aitop 9.0)"),
        (b'{"schema": "aitop.snapshot/1", "samples": {"gpu": [{"t": "soon"}]}}',
         "damaged or incompatible"),
    ],
)
def test_bad_files_fail_with_one_line_that_says_what_to_do(
    tmp_path: Path, content: bytes, says: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(SnapshotError) as info:
        load_snapshot(path, PACKAGED)
    message = str(info.value)
    assert says in message
    assert "\n" not in message
    assert "aitop" in message  # says what to do: export/replay with aitop


def test_missing_file_fails_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(SnapshotError, match=r"cannot read .*nope\.json"):
        load_snapshot(tmp_path / "nope.json", PACKAGED)


def test_failed_write_leaves_nothing_behind_and_says_why(tmp_path: Path) -> None:
    target = tmp_path / "missing-dir" / "run.json"
    with pytest.raises(SnapshotError, match=r"cannot write .*No such file or directory"):
        write_snapshot(target, live_source())
    assert list(tmp_path.iterdir()) == []


def test_a_replay_can_be_exported_again(tmp_path: Path) -> None:
    first = load_snapshot(write_snapshot(tmp_path / "a.json", live_source())[0], PACKAGED)
    second = load_snapshot(write_snapshot(tmp_path / "b.json", first)[0], PACKAGED)
    assert sample_counts(second.session) == sample_counts(first.session)
    assert second.history() == first.history()
    raw = msgspec.json.decode((tmp_path / "b.json").read_bytes())
    assert raw["live"] is False


# ----------------------------------------------------------------- in the app


async def test_s_writes_json_markdown_and_svg_and_the_export_replays(tmp_path: Path) -> None:
    target = tmp_path / "session.json"
    source = live_source()
    app = make_app(source, export_path=target)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await wait_exports(app)
        await wait_for(pilot, lambda: bool(app.exports))
    paths = app.exports[0]
    assert [p.name for p in paths] == ["session.json", "session.md", "session.html", "session.svg"]
    data = json.loads(paths[0].read_text())
    assert data["schema"] == "aitop.snapshot/1"
    assert data["aitop_version"] == metadata.version("torch-aitop")
    assert len(data["diagnoses"]) == len(source.history())
    last = source.history()[-1]
    assert data["diagnoses"][-1]["findings"][0]["fired_at"] == last.findings[0].fired_at
    assert "**data_loading**" in paths[1].read_text()
    svg = paths[3].read_text()
    assert "<h1>aitop report</h1>" in paths[2].read_text()
    assert svg.lstrip().startswith("<svg") and "</svg>" in svg
    # replay the export: same samples, same findings
    replay = load_snapshot(paths[0], PACKAGED)
    assert sample_counts(replay.session) == sample_counts(source.session)
    assert [[f.id for f in d.findings] for d in replay.history()] == [
        [f.id for f in d.findings] for d in source.history()
    ]


async def test_failed_export_notifies_in_one_line_and_retry_works(tmp_path: Path) -> None:
    target = tmp_path / "not-yet" / "session.json"
    app = make_app(export_path=target)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await wait_exports(app)
        await wait_for(pilot, lambda: bool(app.export_errors))
        assert "No such file or directory" in app.export_errors[0]
        assert "\n" not in app.export_errors[0]
        # The failure asks for another path; Escape keeps the session unsaved.
        await wait_for(pilot, lambda: isinstance(app.screen, ExportPathScreen))
        await pilot.press("escape")
        notes = [n.message for n in app._notifications]
        assert any("Not saved" in m and "press s to try again" in m for m in notes)
        assert len(app.source.session.host) == 181  # nothing lost
        target.parent.mkdir()
        await pilot.press("s")
        await wait_exports(app)
        await wait_for(pilot, lambda: bool(app.exports))
    assert target.exists()


async def test_export_on_exit_writes_when_quitting(tmp_path: Path) -> None:
    target = tmp_path / "exit.json"
    app = make_app(export_path=target, export_on_exit=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("q")
    assert app.return_code == 0
    assert target.exists() and target.with_suffix(".md").exists()
    assert target.with_suffix(".svg").exists()


async def test_failed_export_at_exit_keeps_the_app_open_once(tmp_path: Path) -> None:
    app = make_app(export_path=tmp_path / "nowhere" / "x.json", export_on_exit=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("q")
        await pilot.pause()
        assert app.is_running  # the session is still there to save elsewhere
        assert app.export_errors
        await pilot.press("q")  # second time: quit without saving
    assert app.return_code == EXIT_UNSAVED == 1  # a script must not take it for a saved run
    assert any("quit without saving" in e for e in app.exit_errors)


async def test_a_failed_export_asks_for_another_path_and_saves_there(tmp_path: Path) -> None:
    app = make_app(export_path=tmp_path / "missing-dir" / "x.json")
    elsewhere = tmp_path / "elsewhere.json"
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await wait_for(pilot, lambda: isinstance(app.screen, ExportPathScreen), timeout=5.0)
        field = app.screen.query_one(Input)
        field.value = str(elsewhere)
        await pilot.press("enter")
        await wait_for(pilot, lambda: bool(app.exports), timeout=5.0)
        assert app.unsaved_failure is None
        await pilot.press("q")
    assert app.return_code == 0
    assert elsewhere.exists() and elsewhere.with_suffix(".md").exists()


async def test_sigterm_exports_then_exits(tmp_path: Path) -> None:
    target = tmp_path / "term.json"
    app = make_app(export_on_exit=True, export_path=target)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        if signal.SIGTERM not in app._signals:
            pytest.skip("signal handlers need the main thread")
        os.kill(os.getpid(), signal.SIGTERM)
        await wait_for(pilot, lambda: not app.is_running or bool(app.exports), timeout=5)
    assert target.exists()
    assert app.return_code == 0


async def test_exited_target_can_still_be_exported(tmp_path: Path) -> None:
    target = tmp_path / "after-exit.json"
    app = make_app(live_source(exited=True), export_path=target)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("s")
        await wait_exports(app)
        await wait_for(pilot, lambda: bool(app.exports))
    assert load_snapshot(target, PACKAGED).session.target_exit_status == 1
