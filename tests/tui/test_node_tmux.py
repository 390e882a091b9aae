"""``aitop`` alone in a real terminal (tmux): the node view of a real job, and into it.

Start a training loop, run ``aitop`` without ``--pid`` (``--match`` keeps it to
this test's job), wait for the job's row to be judged, open its full view with
Enter, come back with Escape, quit with ``q``; the terminal is restored.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.processes import start_logged, stop_tree
from support.terminal import pane_command

from benchmarks.jobs import LIGHT_JOB

pytestmark = pytest.mark.attach

#: One session name per test process: xdist runs this file's tests side by side.
SESSION = f"aitop-node-e2e-{os.getpid()}"


def tmux(*args: str) -> str:
    result = subprocess.run(["tmux", *args], capture_output=True, text=True, timeout=10)
    assert result.returncode == 0, f"tmux {args}: {result.stderr}"
    return result.stdout


def screen() -> str:
    return tmux("capture-pane", "-p", "-t", SESSION)


def wait_for(predicate: Callable[[str], bool], what: str, timeout: float = 60.0) -> str:
    deadline = time.time() + timeout
    text = ""
    while time.time() < deadline:
        text = screen()
        if predicate(text):
            return text
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}; screen was:\n{text}")


@pytest.fixture
def tmux_session() -> Iterator[None]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)
    yield
    subprocess.run(["tmux", "kill-session", "-t", SESSION], capture_output=True)


def test_aitop_alone_shows_the_node_and_opens_a_job(tmp_path: Path, tmux_session: None) -> None:
    job = start_logged([sys.executable, "-c", LIGHT_JOB, str(tmp_path)])
    try:
        aitop = pane_command([sys.executable, "-m", "aitop.tui", "--match", str(tmp_path)])
        tmux("new-session", "-d", "-s", SESSION, "-x", "200", "-y", "45", "-c", str(tmp_path),
             f"{aitop}; echo AITOP_EXIT=$?; sleep 120")
        node = wait_for(lambda s: "1 PyTorch job · 1 watched" in s, "the job's row")
        assert "node " in node and "Bottleneck" in node
        judged = wait_for(lambda s: any(w in s for w in ("training", "warming up")),
                          "the job's row judged", timeout=90)
        assert "Traceback" not in judged
        tmux("send-keys", "-t", SESSION, "Enter")
        # The key bar says how to go back; it is drawn after the screen's body (a CI
        # run captured the job's view under the node's key bar), so it is waited for.
        opened = wait_for(lambda s: f"PID {job.pid}" in s and "Advisor" in s
                          and "esc  Node" in s, "the job's full view and its key bar",
                          timeout=20)
        assert "esc  Node" in opened
        tmux("send-keys", "-t", SESSION, "Escape")
        wait_for(lambda s: "1 PyTorch job · 1 watched" in s and "Advisor" not in s,
                 "the node again", timeout=20)
        tmux("send-keys", "-t", SESSION, "q")
        after = wait_for(lambda s: "AITOP_EXIT=" in s, "aitop to exit", timeout=30)
    finally:
        stop_tree(job)
    assert "AITOP_EXIT=0" in after and "Traceback" not in after
    assert tmux("display", "-p", "-t", SESSION, "#{alternate_on}").strip() == "0"
