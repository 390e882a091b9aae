"""Replay: the same UI on a recording, with a time cursor (←/→, Home/End, space)."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from aitop.tui.screens.main import MainScreen
from aitop.tui.snapshot import load_snapshot, write_snapshot
from fixtures.tui_pilot import make_app, screen_text, settle, wait_for
from fixtures.tui_session import CHECKPOINT, NOW, T0, replay_source


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
    app = make_app(load_snapshot(path))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(pilot)
        assert "DATA LOADING" in screen_text(app)


def test_run_app_works_on_a_real_terminal(tmp_path: Path) -> None:
    """run_app on a pseudo-terminal: it draws, answers q, restores the terminal, returns 0."""
    snapshot = write_snapshot(tmp_path / "t.json", replay_source())[0]
    code = (
        "import sys\n"
        "from aitop.tui.app import run_app\n"
        "from aitop.tui.snapshot import load_snapshot\n"
        f"sys.exit(run_app(load_snapshot({str(snapshot)!r})))\n"
    )
    primary, secondary = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100", "LINES": "30"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=secondary, stdout=secondary,
                            stderr=secondary, env=env, close_fds=True)
    os.close(secondary)
    seen = b""
    deadline = time.monotonic() + 30
    try:
        while b"DATA LOADING" not in seen and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(primary, 65536)
                except OSError:
                    break
        assert b"DATA LOADING" in seen, seen[-2000:]
        os.write(primary, b"q")
        while proc.poll() is None and time.monotonic() < deadline:
            ready, _, _ = select.select([primary], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(primary, 65536)
                except OSError:
                    break
        assert proc.wait(timeout=10) == 0
        assert b"\x1b[?1049l" in seen  # left the alternate screen: terminal restored
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(primary)
