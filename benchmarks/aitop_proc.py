"""Starting aitop the way a user does, and measuring it from the outside.

Headless: the real CLI (``--headless --json``) under :mod:`benchmarks.wrap`, which
counts the CPU time of aitop and everything it started, reaped or orphaned.
TUI: the real ``aitop`` console script in a detached tmux session of a fixed size
(a real pseudo-terminal, a real Textual driver), also under the wrapper; its
first frame is detected by polling ``tmux capture-pane`` and it is quit with the
``q`` key, as a person would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aitop.engine.commands.ui import DEFAULT_REFRESH_S

from .jobs import REPO
from .procs import rss_bytes, tree_cpu_seconds, tree_rss_bytes

PYTHON = sys.executable
AITOP_BIN = str(Path(sys.executable).with_name("aitop"))
TMUX_SIZE = (200, 50)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _wait_file(path: Path, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if path.exists():
            return True
        time.sleep(0.02)
    return path.exists()


@dataclass
class AitopRun:
    """One aitop process under the wrapper; subclasses say how it is launched."""

    workdir: Path
    name: str
    launched_at: float = 0.0
    #: When the wrapper started the command itself (its ``.pid`` file says).
    command_started_at: float = 0.0
    pid: int | None = None
    wrap_result: dict[str, Any] = field(default_factory=dict)

    @property
    def out(self) -> Path:
        return self.workdir / f"{self.name}.wrap.json"

    def _wait_pid(self, timeout_s: float = 15.0) -> int:
        pid_file = self.out.with_suffix(".pid")
        if not _wait_file(pid_file, timeout_s):
            raise RuntimeError(f"{self.name}: aitop did not start within {timeout_s:.0f} s")
        pid, started = pid_file.read_text().split()[:2]
        self.pid, self.command_started_at = int(pid), float(started)
        return self.pid

    def cpu_seconds(self) -> float | None:
        """aitop + its live and reaped children, CPU seconds so far (None once gone)."""
        return tree_cpu_seconds(self.pid) if self.pid is not None else None

    def rss(self) -> tuple[int | None, int | None]:
        """(aitop's own RSS, aitop + live children RSS) in bytes."""
        if self.pid is None:
            return None, None
        return rss_bytes(self.pid), tree_rss_bytes(self.pid)

    def _collect(self, timeout_s: float) -> dict[str, Any]:
        if not _wait_file(self.out, timeout_s):
            raise RuntimeError(f"{self.name}: aitop did not exit within {timeout_s:.0f} s")
        self.wrap_result = json.loads(self.out.read_text())
        return self.wrap_result

    @property
    def whole_run_cpu_percent(self) -> float | None:
        """CPU of everything, startup included, as % of one core over the whole run."""
        w = self.wrap_result
        if not w:
            return None
        wall = max(w["ended"] - self.launched_at, 1e-6)
        return 100.0 * w["cpu_s"] / wall


@dataclass
class HeadlessRun(AitopRun):
    """``aitop --pid N --headless --json --duration D`` (via :mod:`benchmarks.hooked_cli`)."""

    proc: subprocess.Popen[bytes] | None = None
    report: dict[str, Any] = field(default_factory=dict)
    history: dict[str, Any] = field(default_factory=dict)

    def start(self, target_pid: int, duration_s: float) -> HeadlessRun:
        self.workdir.mkdir(parents=True, exist_ok=True)
        for path in (self.out, self.out.with_suffix(".pid"), self.history_path):
            path.unlink(missing_ok=True)
        command = [
            PYTHON, "-m", "benchmarks.wrap", "--out", str(self.out), "--",
            PYTHON, "-m", "benchmarks.hooked_cli", "--history", str(self.history_path), "--",
            "--pid", str(target_pid), "--headless", "--json", "--duration", f"{duration_s:g}",
        ]
        self.launched_at = time.time()
        with (self.workdir / f"{self.name}.report.json").open("wb") as stdout, \
                (self.workdir / f"{self.name}.stderr").open("wb") as stderr:
            self.proc = subprocess.Popen(command, cwd=REPO, env=_env(), stdout=stdout,
                                         stderr=stderr, stdin=subprocess.DEVNULL)
        self._wait_pid()
        return self

    @property
    def history_path(self) -> Path:
        return self.workdir / f"{self.name}.history.json"

    def wait(self, timeout_s: float = 60.0) -> HeadlessRun:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"{self.name}: headless aitop did not finish") from None
        self._collect(5.0)
        text = (self.workdir / f"{self.name}.report.json").read_text()
        if self.proc.returncode != 0 or not text.strip():
            err = (self.workdir / f"{self.name}.stderr").read_text()[-500:]
            raise RuntimeError(f"{self.name}: aitop exited {self.proc.returncode}: {err}")
        self.report = json.loads(text)
        if self.history_path.exists():
            self.history = json.loads(self.history_path.read_text())
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()


@dataclass
class TmuxRun(AitopRun):
    """A full-screen program in a detached tmux session of a fixed size, under the wrapper."""

    socket: str = ""

    def _tmux(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True,
                              text=True, check=check, timeout=10)

    def _launch(self, command: Sequence[str]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.socket = self.socket or f"aitop-bench-{os.getpid()}"
        for path in (self.out, self.out.with_suffix(".pid")):
            path.unlink(missing_ok=True)
        inner = " ".join(["cd", str(REPO), "&&", "exec", "env", f"PYTHONPATH={REPO}",
                          PYTHON, "-m", "benchmarks.wrap", "--out", str(self.out), "--",
                          *command])
        width, height = TMUX_SIZE
        self.launched_at = time.time()
        self._tmux("new-session", "-d", "-s", self.name, "-x", str(width), "-y", str(height),
                   inner, check=True)
        self._wait_pid()

    def screen(self) -> str:
        result = self._tmux("capture-pane", "-p", "-t", self.name)
        return result.stdout if result.returncode == 0 else ""

    def quit(self, timeout_s: float = 15.0) -> dict[str, Any]:
        """Press q, as a person would; SIGTERM if the program does not go."""
        self._tmux("send-keys", "-t", self.name, "q")
        try:
            return self._collect(timeout_s)
        except RuntimeError:
            if self.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGTERM)
            self._tmux("kill-session", "-t", self.name)
            return self._collect(10.0)

    def kill(self) -> None:
        self._tmux("kill-session", "-t", self.name)


@dataclass
class TuiRun(TmuxRun):
    """``aitop --pid N`` in tmux."""

    target_pid: int = 0
    first_frame_s: float | None = None
    first_data_s: float | None = None
    refresh_s: float | None = None

    def start(self, target_pid: int) -> TuiRun:
        self.target_pid = target_pid
        refresh = [] if self.refresh_s is None else ["--refresh", f"{self.refresh_s:g}"]
        self._launch([AITOP_BIN, "--pid", str(target_pid), *refresh])
        return self

    def wait_first_frame(self, deadline: float) -> float | None:
        """Seconds from launch until the header (``PID N``) is on the terminal."""
        self.first_frame_s = self._wait_for(f"PID {self.target_pid}", deadline)
        return self.first_frame_s

    def wait_first_data(self, deadline: float) -> float | None:
        """Seconds from launch until a panel shows live data: the process panel's
        row for the target (``main N``), drawn from the first process-tree sample."""
        self.first_data_s = self._wait_for(f"main {self.target_pid}", deadline)
        return self.first_data_s

    def _wait_for(self, marker: str, deadline: float) -> float | None:
        """Seconds from the command's own start (not the tmux server's or the
        wrapper's, which a user typing ``aitop`` does not pay) until ``marker``
        is on the pane."""
        while time.time() < deadline:
            if marker in self.screen():
                return time.time() - self.command_started_at
            time.sleep(0.02)
        return None


@dataclass
class MonitorRun(TmuxRun):
    """Another full-screen monitor (glances, a bare Textual app), in tmux like the UI.

    Measured exactly as the aitop UI is (same terminal size, same wrapper, CPU
    of its whole process tree), so the session benchmark can set them side by side.
    """

    command: tuple[str, ...] = ()

    def start(self) -> MonitorRun:
        self._launch(self.command)
        return self


def glances_command() -> tuple[str, ...] | None:
    """glances at aitop's default refresh (2 s, glances' own default too), if
    installed (``.[bench]``)."""
    binary = Path(sys.executable).with_name("glances")
    return (str(binary), "--time", f"{DEFAULT_REFRESH_S:g}") if binary.exists() else None


def bare_textual_command() -> tuple[str, ...]:
    """The bare Textual app at aitop's default refresh."""
    return (PYTHON, "-m", "benchmarks.bare_textual", f"{DEFAULT_REFRESH_S:g}")
