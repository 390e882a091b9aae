"""Issue 13: replay reads with bounds, exports land whole, an empty replay is REPLAY.

``aitop replay /dev/zero`` once read until memory ran out and a FIFO blocked it
forever; a failed Markdown write left a JSON without its report; a snapshot with
no samples opened labelled LIVE. Each fault must now end in one line, exit 1.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
from aitop.engine.files import FileError, read_bounded
from aitop.engine.headless.export import write_snapshot
from aitop.engine.live.source import ReplaySource
from aitop.engine.records import snapshot
from aitop.engine.records.snapshot import SnapshotError, check_export_path, load_snapshot
from aitop.probes.session import Session
from support.jobs import run_aitop
from support.knowledge import PACKAGED
from support.tui_pilot import make_app, screen_text, wait_for
from support.tui_session import live_source


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *says: str) -> None:
    """Exit 1, one stderr line that says what to do, no traceback."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for text in says:
        assert text in lines[0], lines[0]


# ------------------------------------------------------------ A: bounded reads


def test_replay_of_dev_zero_fails_in_one_line() -> None:
    result = run_aitop("replay", "--headless", "/dev/zero", timeout=30)
    assert_one_line_failure(result, "/dev/zero", "not a regular file", "written by aitop")


def test_replay_of_a_fifo_returns_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    result = run_aitop("replay", "--headless", str(fifo), timeout=30)
    assert time.monotonic() - started < 10
    assert_one_line_failure(result, "pipe.json", "a FIFO", "written by aitop")


def test_load_snapshot_never_opens_a_fifo(tmp_path: Path) -> None:
    """In-process too: a blocked open would hang this thread, so bound it."""
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    errors: list[BaseException] = []

    def load() -> None:
        try:
            load_snapshot(fifo, PACKAGED)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(5)
    if thread.is_alive():  # unblock it (a writer end) before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("load_snapshot blocked on a FIFO")
    assert len(errors) == 1 and isinstance(errors[0], SnapshotError)


def test_replay_of_a_directory_fails_in_one_line(tmp_path: Path) -> None:
    result = run_aitop("replay", "--headless", str(tmp_path), timeout=30)
    assert_one_line_failure(result, "a directory", "written by aitop")


def test_a_file_over_the_cap_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.json"
    path.write_bytes(b"{" + b" " * 2048 + b"}")
    monkeypatch.setattr(snapshot, "MAX_SNAPSHOT_BYTES", 1024)
    with pytest.raises(SnapshotError) as info:
        load_snapshot(path, PACKAGED)
    message = str(info.value)
    assert "2.0 KiB, more than the 1 KiB a snapshot may be" in message
    assert "\n" not in message and "written by aitop" in message


def test_a_file_growing_past_the_cap_while_read_is_refused(tmp_path: Path) -> None:
    """The size read by stat is no promise: at most cap + 1 bytes are ever read."""
    path = tmp_path / "grows.json"
    path.write_bytes(b"{}")
    real_fstat = os.fstat

    def stale_fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        path.write_bytes(b"{" + b" " * 4096 + b"}")  # grows after the size was taken
        return st

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(snapshot.os, "fstat", stale_fstat)
        with pytest.raises(FileError, match="grew past the 1 KiB"):
            read_bounded(path, 1024)


def test_a_sparse_file_over_the_real_cap_fails_in_one_line(tmp_path: Path) -> None:
    """Through the CLI with the real cap: sparse, so it costs no disk."""
    path = tmp_path / "huge.json"
    with path.open("wb") as f:
        f.truncate(snapshot.MAX_SNAPSHOT_BYTES + 1)
    result = run_aitop("replay", "--headless", str(path), timeout=30)
    assert_one_line_failure(result, "huge.json", "a snapshot may be", "written by aitop")


def test_a_snapshot_under_the_cap_still_replays(tmp_path: Path) -> None:
    written = write_snapshot(tmp_path / "ok.json", live_source())
    assert load_snapshot(written[0], PACKAGED).session.target_pid == 4242


# ------------------------------------------------------------- B: whole exports


@pytest.mark.parametrize("failing", ["run.md", "run.svg", "run.json"])
def test_a_failed_write_leaves_nothing_and_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    real_mkstemp = snapshot.tempfile.mkstemp

    def mkstemp(*, prefix: str, suffix: str, dir: Path) -> tuple[int, str]:
        if prefix == f".{failing}.":
            raise OSError(28, "No space left on device")
        return real_mkstemp(prefix=prefix, suffix=suffix, dir=dir)

    monkeypatch.setattr(snapshot.tempfile, "mkstemp", mkstemp)
    with pytest.raises(SnapshotError) as info:
        write_snapshot(tmp_path / "run.json", live_source(), screenshot_svg="<svg/>")
    message = str(info.value)
    assert f"cannot write {tmp_path / failing}: No space left on device" in message
    assert "nothing was written" in message and "\n" not in message
    assert list(tmp_path.iterdir()) == []  # no JSON, no report, no temporaries


def test_a_directory_at_the_report_path_leaves_no_json(tmp_path: Path) -> None:
    (tmp_path / "run.md").mkdir()
    with pytest.raises(SnapshotError) as info:
        write_snapshot(tmp_path / "run.json", live_source())
    message = str(info.value)
    assert f"cannot write {tmp_path / 'run.md'}: it is a directory" in message
    assert "nothing was written" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.md"]


def test_a_rename_failing_midway_says_exactly_what_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_replace = os.replace

    def replace(src: str, dst: Path) -> None:
        if Path(dst).suffix == ".json":
            raise OSError(5, "Input/output error")
        real_replace(src, dst)

    monkeypatch.setattr(snapshot.os, "replace", replace)
    with pytest.raises(SnapshotError) as info:
        write_snapshot(tmp_path / "run.json", live_source())
    message = str(info.value)
    assert f"cannot write {tmp_path / 'run.json'}: Input/output error" in message
    assert f"written: {tmp_path / 'run.md'}, {tmp_path / 'run.html'};" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.html", "run.md"]  # no temporaries


def test_a_whole_export_returns_json_first(tmp_path: Path) -> None:
    paths = write_snapshot(tmp_path / "run.json", live_source(), screenshot_svg="<svg/>")
    assert [p.name for p in paths] == ["run.json", "run.md", "run.html", "run.svg"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.html", "run.json", "run.md",
                                                          "run.svg"]


def test_check_export_path_accepts_a_writable_place(tmp_path: Path) -> None:
    check_export_path(tmp_path / "run.json")
    assert list(tmp_path.iterdir()) == []  # the probe file is gone


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda tmp: tmp / "missing" / "run.json", "does not exist"),
        (lambda tmp: tmp, "it is a directory"),
        (lambda tmp: _file(tmp / "file.txt") / "run.json", "is not a directory"),
        (lambda tmp: Path("/proc/aitop-export-test.json"), "cannot create a file in /proc"),
        (lambda tmp: tmp / "run.md", "give a .json name"),
    ],
    ids=["missing-dir", "a-directory", "file-as-directory", "not-writable", "companion-name"],
)
def test_check_export_path_refuses_in_one_line(
    tmp_path: Path, make: object, says: str
) -> None:
    assert callable(make)
    with pytest.raises(SnapshotError) as info:
        check_export_path(make(tmp_path))
    message = str(info.value)
    assert says in message and "\n" not in message


def test_check_export_path_refuses_a_directory_at_a_companion(tmp_path: Path) -> None:
    (tmp_path / "run.svg").mkdir()
    with pytest.raises(SnapshotError, match=r"run\.svg: it is a directory"):
        check_export_path(tmp_path / "run.json")


def _file(path: Path) -> Path:
    path.write_text("not a directory\n")
    return path


# ---------------------------------------------------- C: an empty replay is REPLAY


async def test_an_empty_recording_opens_as_replay_not_live(tmp_path: Path) -> None:
    empty = ReplaySource(Session(1234), [], knowledge=PACKAGED)
    replay = load_snapshot(write_snapshot(tmp_path / "empty.json", empty)[0], PACKAGED)
    assert replay.timeline() is None
    app = make_app(replay)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.view is not None)
        await pilot.pause()
        header = screen_text(app).splitlines()[:2]
        text = "\n".join(header)
        assert "REPLAY" in text and "LIVE" not in text, text
        assert "empty recording" in text and "PID 1234" in text
        assert "probes: starting" not in text
