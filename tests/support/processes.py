"""Processes a test starts: their output kept where a failure shows it, and stopped whole.

Every job a test starts writes its output to a log file (never ``DEVNULL``):
:func:`keep_log` registers it, and the root ``conftest.py`` appends the tail of
each registered log to the report of a test that failed. :func:`stop_tree`
stops a process with everything it started, children that left its process
group included (torchrun's ranks do), so no test leaves a process behind; the
root conftest fails the run on any that did.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psutil

#: How much of each log a failed test's report shows.
LOG_TAIL_BYTES = 4000

_logs: list[Path] = []
_log_dir: Path | None = None


def new_log(stem: str) -> Path:
    """A fresh log file path in this run's log directory (kept after the run)."""
    global _log_dir
    if _log_dir is None:
        _log_dir = Path(tempfile.mkdtemp(prefix="aitop-test-logs-"))
    fd, name = tempfile.mkstemp(prefix=f"{stem}-", suffix=".log", dir=_log_dir)
    os.close(fd)
    return Path(name)


def keep_log(path: Path) -> Path:
    """Show ``path``'s tail in the report if the running test fails."""
    _logs.append(Path(path))
    return path


def take_logs() -> list[Path]:
    """The logs registered since the last call (the root conftest's hook)."""
    logs = list(_logs)
    _logs.clear()
    return logs


def log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"(cannot read {path}: {exc.strerror})"
    return data[-limit:].decode("utf-8", "replace")


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_tree(proc: subprocess.Popen[bytes] | subprocess.Popen[str] | int,
              timeout: float = 20.0) -> None:
    """SIGTERM ``proc`` and every descendant, SIGKILL what is left after ``timeout``.

    The descendants are listed before anything is signalled: once a launcher is
    gone its ranks are orphans that no process-group kill reaches.
    """
    pid = proc if isinstance(proc, int) else proc.pid
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            p.send_signal(signal.SIGTERM)
    _gone, alive = psutil.wait_procs(tree, timeout=timeout)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    if not isinstance(proc, int):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)


def start_logged(command: Sequence[str], log: Path | None = None, *,
                 env: dict[str, str] | None = None, new_session: bool = False,
                 cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output in ``log`` (kept for a failure's report)."""
    log = keep_log(log if log is not None else new_log(Path(command[-1]).name[:40]))
    with log.open("ab") as out:
        return subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                start_new_session=new_session)


@contextlib.contextmanager
def started(command: Sequence[str], log: Path | None = None, *,
            env: dict[str, str] | None = None, new_session: bool = False,
            ) -> Iterator[subprocess.Popen[bytes]]:
    """A process for the ``with`` block, stopped with its whole tree afterwards."""
    proc = start_logged(command, log, env=env, new_session=new_session)
    try:
        yield proc
    finally:
        stop_tree(proc)


def start_sleeper(seconds: float = 120.0, *, python: bool = True) -> subprocess.Popen[bytes]:
    """A process that only sleeps: plain Python (stacks all idle, never imports
    torch) or, with ``python=False``, ``sleep`` itself (no stacks to sample)."""
    command = ([sys.executable, "-c", f"import time; time.sleep({seconds})"] if python
               else ["sleep", str(seconds)])
    return subprocess.Popen(command, stdin=subprocess.DEVNULL)


@contextlib.contextmanager
def sleeping(seconds: float = 120.0, *, python: bool = True,
             ) -> Iterator[subprocess.Popen[bytes]]:
    """:func:`start_sleeper` for the ``with`` block, stopped afterwards."""
    proc = start_sleeper(seconds, python=python)
    try:
        yield proc
    finally:
        stop_tree(proc, timeout=5)


def wait_until(predicate: Callable[[], object], timeout: float, every: float = 0.2) -> bool:
    """Poll ``predicate()`` until it is true or ``timeout`` passes; whether it became true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return bool(predicate())


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``).

    Then a rank whose launcher died is still this process's descendant, and the
    session-end check below sees it. Returns whether it worked.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    pr_set_child_subreaper = 36
    libc = ctypes.CDLL(None, use_errno=True)
    return bool(libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) == 0)


def leftover_descendants(grace_s: float = 5.0) -> list[psutil.Process]:
    """This process's descendants still alive after ``grace_s`` (zombies reaped first)."""
    me = psutil.Process(os.getpid())

    def alive() -> list[psutil.Process]:
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:  # reap adopted orphans
                pass
        out = []
        for p in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if p.status() != psutil.STATUS_ZOMBIE:
                    out.append(p)
        return out

    wait_until(lambda: not alive(), grace_s)
    return alive()


def describe(p: psutil.Process) -> str:
    try:
        return f"PID {p.pid}: {' '.join(p.cmdline())[:160]}"
    except psutil.Error:
        return f"PID {p.pid}"
