"""Start, wait for and reliably kill the real child processes the probe tests watch.

Children run in their own session (``start_new_session``) so teardown can kill
the whole group at once: DataLoader workers, the multiprocessing forkserver and
its children included (a forkserver's workers otherwise outlive a killed
trainer, since their parent, the forkserver, is still alive).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, TypeVar

T = TypeVar("T")

HERE = Path(__file__).resolve().parent

# Each child's stderr, kept in a temporary file to explain a failed start.
_STDERR: dict[int, IO[bytes]] = {}


def workload(name: str) -> str:
    """Path of a script in this folder."""
    return str(HERE / name)


def start(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    ready: str | None = "READY",
    timeout: float = 120.0,
) -> subprocess.Popen[bytes]:
    """Start ``python *args`` and wait until it prints ``ready`` (unless None)."""
    # Kept open for the child's lifetime; read only to explain a failed start.
    err = tempfile.TemporaryFile()  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=err,
        env=dict(env) if env is not None else None,
        start_new_session=True,
    )
    _STDERR[proc.pid] = err
    if ready is None:
        return proc
    wait_ready(proc, ready, timeout)
    return proc


def wait_ready(proc: subprocess.Popen[bytes], ready: str = "READY", timeout: float = 120.0) -> None:
    """Read the child's stdout until a line equal to ``ready``; kill it on failure."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = deadline - time.monotonic()
        r, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
        if not r:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.decode(errors="replace").strip() == ready:
            return
    stop(proc)
    err = _STDERR.get(proc.pid)
    detail = ""
    if err is not None:
        err.seek(0)
        detail = err.read().decode(errors="replace")[-2000:]
    raise RuntimeError(f"{proc.args} never printed {ready}: {detail}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child's whole process group and reap the child."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    for stream in (proc.stdin, proc.stdout, _STDERR.pop(proc.pid, None)):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


def wait_until(fn: Callable[[], T], timeout: float = 20.0, interval: float = 0.1) -> T:
    """Call ``fn`` until it returns something truthy; return that, or fail loudly."""
    deadline = time.monotonic() + timeout
    value = fn()
    while not value and time.monotonic() < deadline:
        time.sleep(interval)
        value = fn()
    if not value:
        raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
    return value


def poll(fn: Callable[[], T], pred: Callable[[T], bool], timeout: float = 20.0) -> T:
    """Call ``fn`` until ``pred`` holds for its result; return that result."""
    deadline = time.monotonic() + timeout
    value = fn()
    while not pred(value) and time.monotonic() < deadline:
        time.sleep(0.1)
        value = fn()
    if not pred(value):
        raise AssertionError(f"condition not met within {timeout}s (last value {value!r})")
    return value


def run_unprivileged(fn: Callable[[], object], uid: int = 65534, timeout: float = 20.0) -> object:
    """Run ``fn`` in a forked child that dropped root to ``uid``; return its result.

    The child needs no exec (so no readable interpreter path): modules already
    imported here are already in its memory. The result travels back pickled.
    Used to meet real "access denied" answers from /proc without a second user's
    Python installation.
    """
    import pickle

    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(read_fd)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            payload = pickle.dumps(("ok", fn()))
        except BaseException as exc:  # report anything to the parent
            payload = pickle.dumps(("error", repr(exc)))
            code = 1
        with os.fdopen(write_fd, "wb") as out:
            out.write(payload)
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as inp:
        r, _, _ = select.select([inp], [], [], timeout)
        data = inp.read() if r else b""
    os.waitpid(pid, 0)
    if not data:
        raise RuntimeError("unprivileged child returned nothing")
    status, value = pickle.loads(data)
    if status != "ok":
        raise RuntimeError(f"unprivileged child failed: {value}")
    return value
