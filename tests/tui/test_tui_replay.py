"""Replay: the same UI on a recording, with a time cursor (←/→, Home/End, space)."""

from __future__ import annotations

import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aitop.engine.headless.export import write_snapshot
from aitop.engine.records.snapshot import load_snapshot
from aitop.tui.screens.main import MainScreen
from support.knowledge import PACKAGED
from support.tui_pilot import make_app, screen_text, settle, wait_for
from support.tui_session import CHECKPOINT, NOW, T0, replay_source


async def test_replay_starts_at_the_end_and_the_cursor_moves() -> None:
    source = replay_source()
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        assert app.cursor == NOW
        assert "REPLAY" in screen_text(app) and "22:16:20" in screen_text(app)
        await pilot.press("left")
        assert app.cursor == NOW - 1
        assert app.view is not None and app.view.now == NOW - 1
        await pilot.press("shift+left")
        assert app.cursor == NOW - 11
        await pilot.press("home")
        assert app.cursor == T0
        assert app.diagnosis is None  # nothing was concluded before the first window
        assert "+0.0s/3m00s" in screen_text(app)
        await pilot.press("right")
        assert app.cursor == T0 + 1
        await pilot.press("end")
        assert app.cursor == NOW
        for _ in range(5):  # cannot step past the end
            await pilot.press("right")
        assert app.cursor == NOW
        assert app.diagnosis is not None and app.diagnosis.t == NOW


async def test_the_cursor_shows_the_past_truthfully() -> None:
    app = make_app(replay_source())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        app._move_cursor(T0 + CHECKPOINT[0] + 1)
        await pilot.pause()
        text = screen_text(app)
        assert "writing /ckpt/epoch_003.pt" in text  # the checkpoint, as it happened
        assert "22:14:21" in text  # cursor time in the header
        # the diagnosis recorded then, not the last one
        assert app.diagnosis is not None and app.diagnosis.t == T0 + 60
        assert all(f.id != "checkpoint_blocking" for f in app.diagnosis.findings)


async def test_space_plays_and_pauses() -> None:
    app = make_app(replay_source(), refresh_s=0.25)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        await pilot.press("home")
        await pilot.press("space")
        assert app.playing
        await wait_for(pilot, lambda: app.cursor >= T0 + 2, timeout=5)
        await pilot.press("space")
        assert not app.playing
        stopped = app.cursor
        await pilot.pause(0.6)
        assert app.cursor == stopped
        assert "⏸" in screen_text(app)


async def test_live_only_keys_are_hidden_in_replay_and_arrows_still_navigate() -> None:
    app = make_app(replay_source())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        footer_keys = {key for key, b in app.screen.active_bindings.items()
                       if b.binding.show and b.enabled}
        assert "space" in footer_keys and "p" not in footer_keys
        app.screen.query_one("#gpu").focus()
        await pilot.press("down")  # ↑/↓ still move between panels
        assert app.screen.focused is not None and app.screen.focused.id == "host"
        await pilot.press("enter")
        await pilot.press("escape")
        assert isinstance(app.screen, MainScreen)


async def test_replay_of_an_exported_file_opens(tmp_path: Path) -> None:
    path = write_snapshot(tmp_path / "r.json", replay_source())[0]
    app = make_app(load_snapshot(path, PACKAGED))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert "DATA LOADING" in screen_text(app)


class Terminal:
    """A child process on a pseudo-terminal, as a person's terminal would run it."""

    def __init__(self, code: str) -> None:
        self.primary, secondary = pty.openpty()
        env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
        env.pop("NO_COLOR", None)
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=secondary,
                                     stdout=secondary, stderr=secondary, env=env,
                                     close_fds=True)
        os.close(secondary)
        self.seen = b""

    def read_until(self, done: Callable[[], bool], timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not done() and time.monotonic() < deadline:
            ready, _, _ = select.select([self.primary], [], [], 0.2)
            if ready:
                try:
                    self.seen += os.read(self.primary, 65536)
                except OSError:  # the child closed the terminal
                    return

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        os.close(self.primary)


def app_code(snapshot: Path, **kwargs: object) -> str:
    args = "".join(
        f", {k}=Path({str(v)!r})" if isinstance(v, Path) else f", {k}={v!r}"
        for k, v in kwargs.items()
    )
    return (
        "import sys\n"
        "from pathlib import Path\n"
        "from aitop.tui.app import run_app\n"
        "from aitop.engine.records.snapshot import load_snapshot\n"
        "from aitop.knowledge.reading.loader import load_knowledge_base\n"
        f"sys.exit(run_app(load_snapshot(Path({str(snapshot)!r}), load_knowledge_base()){args}))\n"
    )


def test_run_app_works_on_a_real_terminal(tmp_path: Path) -> None:
    """run_app on a pseudo-terminal: it draws, answers q, restores the terminal, returns 0."""
    snapshot = write_snapshot(tmp_path / "t.json", replay_source())[0]
    term = Terminal(app_code(snapshot))
    try:
        term.read_until(lambda: b"DATA LOADING" in term.seen)
        assert b"DATA LOADING" in term.seen, term.seen[-2000:]
        os.write(term.primary, b"q")
        term.read_until(lambda: term.proc.poll() is not None)
        assert term.proc.wait(timeout=10) == 0
        assert b"\x1b[?1049l" in term.seen  # left the alternate screen: terminal restored
    finally:
        term.close()


def test_sigterm_on_a_real_terminal_exports_and_exits_cleanly(tmp_path: Path) -> None:
    snapshot = write_snapshot(tmp_path / "t.json", replay_source())[0]
    out = tmp_path / "on-term.json"
    term = Terminal(app_code(snapshot, export_path=out, export_on_exit=True))
    try:
        term.read_until(lambda: b"DATA LOADING" in term.seen)
        term.proc.send_signal(signal.SIGTERM)
        term.read_until(lambda: term.proc.poll() is not None)
        assert term.proc.wait(timeout=10) == 0
        assert b"\x1b[?1049l" in term.seen
        assert b"aitop: saved" in term.seen
        assert load_snapshot(out, PACKAGED).history()  # a complete, loadable snapshot
        assert out.with_suffix(".svg").exists()
    finally:
        term.close()
