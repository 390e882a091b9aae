"""The stack probe: py-spy ``record`` windows turned into phase counts.

Each window is written in py-spy's speedscope format, which keeps every
thread's samples in the order they were taken (the raw format only counts
them): the counts give the phase shares, the order the step's anatomy.

Why rolling ``record`` windows rather than periodic ``dump``: each
``dump`` is a fresh attach, so sampling with dumps costs one attach per sample,
while one ``record`` process attaches once per window and then each sample is a
small fraction of an attach; the price of launching it is spread over the
window. What each costs is measured in docs/benchmarks.md ("What one py-spy call
costs"), and the windows' lengths are ``probes.cadence.TABLE``'s.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from .phases import PhaseClassifier
from .pyspy import PySpyError, classify_failure, pyspy_env, record_args, require_pyspy
from .samples import StackWindow
from .source_lines import SourceLines
from .speedscope import OrderedStacks, parse_speedscope
from .stack_window import SampledSpan, kept_loop_frame, summarize_window
from .step_cycles import CycleCounter

#: Seconds from launching ``py-spy record`` to its first sample: its launch and
#: attach (tens of ms of CPU, docs/benchmarks.md, What one py-spy call costs).
PYSPY_LAUNCH_S = 0.05
#: py-spy writes each window under a directory named after aitop's own PID, so a
#: later run can tell an abandoned one (its aitop was SIGKILLed) from a live one.
WORKDIR_PREFIX = "aitop-stacks-"
_WORKDIR = re.compile(re.escape(WORKDIR_PREFIX) + r"(\d+)-")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_workdirs(tmp: str | None = None) -> list[Path]:
    """Remove the stack directories of aitop runs that no longer exist; the removed."""
    root = Path(tmp or tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except OSError:
        return removed
    for entry in entries:
        match = _WORKDIR.match(entry.name)
        if match and entry.is_dir() and not _alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


class StackProbe:
    """Samples the target's stacks in back-to-back py-spy windows.

    ``run_window`` blocks for one window and returns its StackWindow; the
    collector calls it in a loop on its own thread. Fatal conditions (no py-spy,
    no permission, not Python) raise PySpyError so the collector can stop this
    probe, say why, and keep the others running.
    """

    def __init__(
        self,
        pid: int,
        classifier: PhaseClassifier,
        *,
        rate_hz: int = 20,
        window_s: int = 2,
        binary: str | None = None,
    ) -> None:
        self.pid = pid
        self.classifier = classifier
        self.rate_hz = rate_hz
        self.window_s = window_s
        self.binary = binary or require_pyspy()
        remove_stale_workdirs()
        self._tmpdir = tempfile.TemporaryDirectory(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-")
        self._thread: str | None = None
        self._loop: str | None = None
        self._sources = SourceLines(pid)
        self._paths: dict[str, str] = {}
        self._proc: subprocess.Popen[str] | None = None
        self._stopped = False
        #: When ``stop`` cut the window in progress short (its samples end then).
        self._stopped_at: float | None = None
        self._cycles = CycleCounter()

    def run_window(self, window_s: int | None = None) -> StackWindow:
        duration = window_s or self.window_s
        output = Path(self._tmpdir.name) / "window.json"
        output.unlink(missing_ok=True)
        t_start = time.time()
        rate = self.rate_hz  # read once: set_pace may change it for the next window
        args = record_args(self.binary, self.pid, rate=rate, duration=duration,
                           output=str(output))
        try:
            self._proc = subprocess.Popen(
                args,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=pyspy_env(),
            )
        except OSError as exc:
            raise PySpyError(f"cannot run py-spy: {exc}", kind="missing") from exc
        try:
            _, stderr = self._proc.communicate(timeout=duration + 10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.communicate()
            return StackWindow(t_start, time.time(), None, None, 0, error="py-spy hung; killed")
        returncode = self._proc.returncode
        self._proc = None
        t_end = time.time()
        stopped_at, self._stopped_at = self._stopped_at, None
        text = output.read_text(errors="replace") if output.exists() else ""
        if self._stopped and not text:
            return StackWindow(t_start, t_end, None, None, 0, error="stopped")
        if returncode != 0 and not text:
            raise classify_failure(self.pid, stderr or "")
        try:
            ordered = parse_speedscope(text, self._paths) if text.strip() else OrderedStacks([], {})
        except ValueError:
            return StackWindow(t_start, t_end, None, None, 0,
                               error="py-spy wrote an unreadable profile")
        window = summarize_window(
            ordered.stacks,
            self.classifier,
            pid=self.pid,
            t_start=t_start,
            t_end=t_end,
            previous_thread=self._thread,
            source=self._source_line,
            previous_loop=self._loop,
            order=ordered.order,
            sampled=SampledSpan(t_start + PYSPY_LAUNCH_S, stopped_at or t_end, 1.0 / rate),
            counter=self._cycles,
        )
        self._thread = window.thread_id or self._thread
        self._loop = kept_loop_frame(window, self._loop)
        return window

    def _source_line(self, file: str, line: int) -> str | None:
        """A line of the target's source, by the frame's (possibly shortened) file name."""
        return self._sources.line(self._paths.get(file, file), line)

    def stop(self) -> None:
        """End the window in progress early.

        SIGINT, not SIGTERM: py-spy treats it as Ctrl-C and still writes the
        samples it has, so the last seconds of a session are not thrown away.
        """
        self._stopped = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            self._stopped_at = time.time()
            proc.send_signal(signal.SIGINT)

    def close(self) -> None:
        self.stop()
        self._tmpdir.cleanup()

