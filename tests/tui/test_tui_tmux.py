"""The UI as a person uses it: a real terminal (tmux), a real training job, real keys.

Start a demo job, run ``aitop --pid`` in tmux, wait for the diagnosis on screen,
drill into the advisor's top finding, export with ``s``, quit with ``q``; then
check the terminal was restored and the exported files are valid and replay.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.jobs import run_aitop, start_job, stop_job
from support.terminal import pane_command

pytestmark = pytest.mark.attach

#: One session name per test process: xdist runs this file's tests side by side.
SESSION = f"aitop-e2e-{os.getpid()}"


def tmux(*args: str) -> str:
    result = subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, f"tmux {args}: {result.stderr}"
    return result.stdout


def screen() -> str:
    return tmux("capture-pane", "-p", "-t", SESSION)


def wait_for(predicate: Callable[[str], bool], what: str, timeout: float = 45.0) -> str:
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = screen()
        if predicate(text):
            return text
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; screen was:\n{text}")


def running(pid: int) -> bool:
    """Alive and not a zombie (a reaped-later child still has a /proc entry)."""
    try:
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def keys(*names: str) -> None:
    tmux("send-keys", "-t", SESSION, *names)


@pytest.fixture
def tmux_session(tmp_path: Path):  # type: ignore[no-untyped-def]
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    yield
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


def test_drill_down_export_quit_in_a_real_terminal(tmp_path: Path, tmux_session: None) -> None:
    job = start_job("data", tmp_path / "truth.jsonl")
    try:
        aitop = pane_command([sys.executable, "-m", "aitop.tui", "--pid", str(job.pid)])
        # After aitop exits the shell prints its status and waits, so the pane
        # (and what aitop left on it) can still be inspected.
        tmux(
            "new-session", "-d", "-s", SESSION, "-x", "160", "-y", "45", "-c", str(tmp_path),
            f"{aitop}; echo AITOP_EXIT=$?; sleep 120",
        )
        # The data wait leads; when tests beside this one run busy jobs of their
        # own, the cores they hold (which starve the job's loader worker) may.
        first = wait_for(lambda s: "DATA LOADING" in s or "HOST RAM/CPU" in s,
                         "the data-loading diagnosis")
        assert "Advisor" in first and "Data loader" in first

        # Find the advisor by moving focus until Enter opens a finding's detail.
        opened = ""
        for _ in range(8):
            keys("Tab")
            time.sleep(0.3)
            keys("Enter")
            time.sleep(0.8)
            opened = screen()
            if "Rule that fired" in opened:
                break
            keys("Escape")
            time.sleep(0.3)
        assert "Rule that fired" in opened, f"never reached a finding detail:\n{opened}"
        assert "Evidence against its target range" in opened, opened
        # The lead's evidence: the data wait, or (when a test beside this one runs
        # busy processes of its own) the cores those neighbours hold.
        assert "phase_data_wait" in opened or "other_procs_cpu" in opened, opened
        keys("Escape")
        wait_for(lambda s: "Advisor" in s, "the main screen again", timeout=10)

        keys("s")
        exported = wait_for(lambda s: any(tmp_path.glob("aitop-*.json")), "the export", 20)
        assert "Traceback" not in exported
        keys("q")
        after = wait_for(lambda s: "AITOP_EXIT=" in s, "aitop to exit", 20)
    finally:
        stop_job(job)

    assert "AITOP_EXIT=0" in after
    assert "Traceback" not in after
    # The terminal is restored: alternate screen off, cursor visible again.
    assert tmux("display", "-p", "-t", SESSION, "#{alternate_on}").strip() == "0"
    assert tmux("display", "-p", "-t", SESSION, "#{cursor_flag}").strip() == "1"

    snapshots = sorted(tmp_path.glob("aitop-*.json"))
    assert len(snapshots) == 1
    snapshot = json.loads(snapshots[0].read_text())
    assert snapshot["schema"] == "aitop.snapshot/1"
    markdown = snapshots[0].with_suffix(".md").read_text()
    assert "data_loading" in markdown.lower().replace(" ", "_") or "DATA LOADING" in markdown
    svg = snapshots[0].with_suffix(".svg").read_text()
    assert svg.lstrip().startswith("<svg")

    replay = run_aitop("replay", str(snapshots[0]), "--headless", "--json")
    assert replay.returncode == 0, replay.stderr
    report = json.loads(replay.stdout)
    # As live: the data wait, or the cores a test beside this one holds.
    assert (report["bottleneck"]["category"] == "data_loading"
            or report["bottleneck"]["lead_finding"] == "cores_taken_by_other_processes"), (
        report["bottleneck"])
    assert report["target"]["pid"] == job.pid


def test_closing_the_terminal_stops_aitop(tmp_path: Path, tmux_session: None) -> None:
    """A closed window (SIGHUP) must not leave aitop sampling the job forever."""
    job = start_job("data", tmp_path / "truth.jsonl")
    try:
        aitop = pane_command([sys.executable, "-m", "aitop.tui", "--pid", str(job.pid)])
        # Under a shell, as from a terminal window: the shell dies with the
        # window, and aitop gets the hang-up.
        tmux("new-session", "-d", "-s", SESSION, "-x", "120", "-y", "40", f"{aitop}; sleep 60")
        wait_for(lambda s: "Advisor" in s, "the UI")
        shell = tmux("display", "-p", "-t", SESSION, "#{pane_pid}").strip()
        children = subprocess.run(["pgrep", "-P", shell], capture_output=True, text=True)
        pid = int(children.stdout.split()[0])
        subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
        deadline = time.time() + 15
        while time.time() < deadline and running(pid):
            time.sleep(0.2)
        assert not running(pid), "aitop kept running after its terminal was closed"
        assert job.poll() is None, "closing aitop must not stop the training job"
    finally:
        stop_job(job)
