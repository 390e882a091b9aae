"""ExportFlow, the engine's interactive exports: background writes, retries, at exit.

Unit-level, without Textual: the flow is driven as the app drives it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import aitop.engine.headless.export as export_module
import pytest
from aitop.engine.headless.export import EXIT_UNSAVED, Exported, ExportFlow, ExportRequest
from aitop.engine.records.snapshot import load_snapshot
from support.knowledge import PACKAGED
from support.tui_session import NOW, replay_source


def request() -> ExportRequest:
    return ExportRequest(NOW, None, "<svg></svg>")


def test_a_background_export_lands_on_its_own_daemon_thread(tmp_path: Path) -> None:
    flow = ExportFlow(replay_source(), path=tmp_path / "run.json")
    landed: list[tuple[Exported, str, bool]] = []
    done = threading.Event()

    def callback(outcome: Exported) -> None:
        thread = threading.current_thread()
        landed.append((outcome, thread.name, thread.daemon))
        done.set()

    flow.start(request(), callback)
    assert done.wait(10)
    outcome, name, daemon = landed[0]
    assert name == "aitop-export" and daemon  # a hung disk cannot hold up quitting
    assert outcome.error is None
    assert [p.name for p in outcome.paths] == ["run.json", "run.md", "run.html", "run.svg"]
    assert flow.exports == [list(outcome.paths)] and flow.unsaved_failure is None
    assert flow.messages == []  # the UI says so itself
    assert load_snapshot(outcome.paths[0], PACKAGED).history()


def test_a_failure_is_remembered_until_an_export_elsewhere_succeeds(tmp_path: Path) -> None:
    flow = ExportFlow(replay_source(), path=tmp_path / "missing" / "run.json")
    failed = flow.write(request())
    assert failed.error is not None and "No such file or directory" in failed.error
    assert "\n" not in failed.error
    assert flow.errors == [failed.error] and flow.unsaved_failure == failed.error
    flow.retry_at(tmp_path / "elsewhere.json")
    assert flow.write(request()).error is None
    assert flow.unsaved_failure is None and (tmp_path / "elsewhere.json").exists()


def test_quitting_exports_first_and_a_failure_keeps_the_session_once(tmp_path: Path) -> None:
    flow = ExportFlow(replay_source(), path=tmp_path / "nowhere" / "x.json", on_exit=True)
    first = flow.quit(request)
    assert first.code is None and first.notice is not None
    assert first.notice.startswith("Export at exit failed:")
    second = flow.quit(request)  # again: leave without saving, and say so
    assert second.code == EXIT_UNSAVED == 1
    assert any("quit without saving" in line for line in flow.exit_errors)


def test_quitting_after_an_export_at_exit_says_where_it_went(tmp_path: Path) -> None:
    flow = ExportFlow(replay_source(), path=tmp_path / "exit.json", on_exit=True)
    assert flow.quit(request).code == 0
    assert flow.messages == [f"aitop: saved {tmp_path / 'exit.json'}"]
    nothing_asked = ExportFlow(replay_source())
    asked: list[int] = []
    assert nothing_asked.quit(lambda: asked.append(1) or request()).code == 0
    assert asked == []  # no screenshot is taken for an export nobody asked for


def test_a_signal_exports_when_asked_and_fails_with_status_1(tmp_path: Path) -> None:
    ok = ExportFlow(replay_source(), path=tmp_path / "term.json", on_exit=True)
    assert ok.on_signal("SIGTERM", request) == 0 and (tmp_path / "term.json").exists()
    bad = ExportFlow(replay_source(), path=tmp_path / "gone" / "x.json", on_exit=True)
    assert bad.on_signal("SIGHUP", request) == 1
    assert bad.exit_errors[0].startswith("aitop: export on SIGHUP failed: ")


def test_the_default_target_is_timestamped_here(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    flow = ExportFlow(replay_source(), clock=lambda: NOW)
    target = flow.target()
    assert target.parent == tmp_path and target.name.startswith("aitop-4242-")
    assert target.suffix == ".json" and not flow.wants_exit_export


def test_finish_waits_for_an_export_in_flight_but_not_forever(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    release = threading.Event()

    def hung(*args: Any, **kwargs: Any) -> list[Path]:
        release.wait(30)
        return [tmp_path / "late.json"]

    monkeypatch.setattr(export_module, "write_snapshot", hung)
    flow = ExportFlow(replay_source(), path=tmp_path / "late.json")
    flow.start(request(), lambda outcome: None)
    started = time.monotonic()
    flow.finish(0.3)
    assert 0.25 < time.monotonic() - started < 5
    release.set()
    flow.finish(5)
    assert flow.exports == [[tmp_path / "late.json"]]


def test_the_flow_needs_no_textual() -> None:
    code = ("import sys, aitop.engine.headless.export\n"
            "assert 'textual' not in sys.modules and 'rich' not in sys.modules\n")
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
