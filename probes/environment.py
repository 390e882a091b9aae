"""Slow-changing facts about the target: versions, environment, DataLoader shape.

Everything is read from ``/proc`` and the files the target has mapped; nothing
runs inside the target. Versions come from evidence that cannot lie about the
*running* process (a venv can be upgraded under a live job, so "what
``pip show torch`` says now" is not good enough):

* Python: ``X.Y`` from the mapped ``libpythonX.Y.so`` / ``cpython-3XY`` extension
  modules / the executable's name; the full ``X.Y.Z`` by running
  ``/proc/PID/exe --version`` (the very binary the target runs, even if it was
  replaced on disk since) as an argument list with a short timeout, and only
  when that binary is owned by root or by us and writable by no one else (so
  that a root aitop never executes a file a less-privileged user controls) and
  the target shares our mount namespace; the answer must agree with ``X.Y``.
* torch: the ``torch/lib/libtorch*.so`` the target has mapped locates the
  package; its ``version.py`` (or the ``torch-X.Y.Z.dist-info`` beside it) gives
  the version. Files are read through ``/proc/PID/root`` so a target in a
  container is read in its own filesystem.
* Environment: ``/proc/PID/environ`` (the environment the process *started*
  with; later ``os.environ[...] =`` changes are invisible), all of it, redacted.

Static facts are read once and cached; ``num_workers`` and
``pin_memory_thread`` are re-read each call (a tree walk of a few files), and
the torch lookup is retried at most every ``torch_retry_s`` seconds until torch
is imported (the same throttle bounds the Python lookup).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import stat
import subprocess
import time

import psutil

from .job_source import mixed_precision_in_source
from .kernel.cgroups import cpu_limit
from .kernel.process_files import in_root, list_dir, read_bounded
from .kernel.procfs import (
    PROC,
    process_path,
    read_cmdline,
    read_environ,
    read_link,
    read_maps,
    read_thread_names,
    same_namespace,
)
from .own_version import aitop_version
from .process_tree import count_workers, pin_thread_present
from .redact import redact_argv, redact_env
from .samples import EnvironmentInfo

_LIBPYTHON_RE = re.compile(r"/libpython(\d+)\.(\d+)[a-z]*\.so")
_EXT_TAG_RE = re.compile(r"\.cpython-(\d)(\d+)[a-z]*-")
_EXE_RE = re.compile(r"^python(\d+)\.(\d+)[a-z]*$")
_PY_VERSION_RE = re.compile(r"Python (\d+\.\d+\.\d+\S*)")
_TORCH_LIB_RE = re.compile(r"(/\S*/torch)/lib/libtorch[\w.]*\.so")
_VERSION_PY_RE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)
_DIST_INFO_RE = re.compile(r"^torch-(\d[^-]*)\.dist-info$")
#: torch's ``version.py`` is a few hundred bytes; larger is not it.
VERSION_PY_BYTES = 64 << 10


def python_minor_from_maps(maps: str) -> str | None:
    """``X.Y`` of the interpreter from a maps listing (libpython or extension tags)."""
    m = _LIBPYTHON_RE.search(maps)
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    m = _EXT_TAG_RE.search(maps)
    if m:
        return f"{m.group(1)}.{m.group(2)}"
    return None


def torch_dir_from_maps(maps: str) -> str | None:
    """Directory of the torch package whose ``libtorch*.so`` is mapped, if any."""
    m = _TORCH_LIB_RE.search(maps)
    return m.group(1) if m else None


def torch_version_from_dir(torch_dir: str, root: str = "") -> str | None:
    """Version of the torch package at ``torch_dir`` (read under ``root``)."""
    found = read_bounded(f"{root}{torch_dir}/version.py", VERSION_PY_BYTES, whole=True)
    if found:
        m = _VERSION_PY_RE.search(found.data.decode("utf-8", "replace"))
        if m:
            return m.group(1)
    names = list_dir(f"{root}{os.path.dirname(torch_dir)}")
    if names is None:
        return None
    versions = [m.group(1) for n in names if (m := _DIST_INFO_RE.match(n))]
    # Several dist-infos mean a botched upgrade; we cannot tell which is loaded.
    return versions[0] if len(versions) == 1 else None


def _safe_to_execute(path: str) -> bool:
    """Owned by root or by us, and not group/world-writable (see module docstring)."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_uid not in (0, os.geteuid()):
        return False
    return not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def cpus_allowed(pid: int, proc_root: str = PROC) -> float | None:
    """How many CPUs the target can really use: affinity, capped by a cgroup quota.

    Containers often see every host CPU in /proc/cpuinfo while their quota
    allows two; advice such as "use the free cores" must count the latter.
    """
    try:
        count: float = float(len(os.sched_getaffinity(pid)))
    except OSError:
        return None
    quota = cpu_limit(pid, proc_root)
    return min(count, quota) if quota else count


class EnvironmentProbe:
    """Samples versions, redacted cmdline and environment, workers and pin thread.

    Never raises: when the target is gone or unreadable, the fields that could
    not be read are ``None`` (or empty).
    """

    def __init__(
        self,
        target_pid: int,
        *,
        run_exe_version: bool = True,
        exe_timeout_s: float = 2.0,
        torch_retry_s: float = 5.0,
    ) -> None:
        self.target_pid = target_pid
        self._run_exe = run_exe_version
        self._exe_timeout = exe_timeout_s
        self._torch_retry = torch_retry_s
        self._static_done = False
        self._cmdline: tuple[str, ...] = ()
        self._mixed_precision: bool | None = None
        self._env: dict[str, str] = {}
        self._start: float | None = None
        self._hostname: str | None = None
        self._python: str | None = None
        self._python_done = False
        self._torch: str | None = None
        self._maps_checked_at: float | None = None
        self._handle: psutil.Process | None = None
        with contextlib.suppress(psutil.Error, ValueError):
            self._handle = psutil.Process(target_pid)

    def sample(self) -> EnvironmentInfo:
        """Current facts; static ones come from the first successful read."""
        t = time.time()
        alive = self._alive()
        if alive and not self._static_done:
            self._read_static()
        now = time.monotonic()
        lookups_due = (self._torch is None or not self._python_done) and (
            self._maps_checked_at is None or now - self._maps_checked_at >= self._torch_retry
        )
        if alive and lookups_due:
            self._maps_checked_at = now
            maps = read_maps(self.target_pid)
            if maps is not None and self._torch is None:
                self._torch = self._read_torch(maps)
            if not self._python_done:
                self._read_python(maps)
        workers = count_workers(self.target_pid) if alive else None
        pin = pin_thread_present(read_thread_names(self.target_pid)) if alive else None
        return EnvironmentInfo(
            t=t,
            pid=self.target_pid,
            cmdline=self._cmdline,
            python_version=self._python,
            torch_version=self._torch,
            env=dict(self._env),
            num_workers=workers,
            pin_memory_thread=pin,
            start_time=self._start,
            hostname=self._hostname,
            aitop_version=aitop_version(),
            cpus_allowed=cpus_allowed(self.target_pid) if alive else None,
            mixed_precision_in_source=self._mixed_precision,
        )

    # ------------------------------------------------------------- internals

    def _alive(self) -> bool:
        """Target still running (not a zombie, PID not reused)?"""
        if self._handle is None:
            return False
        try:
            return self._handle.is_running() and self._handle.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    def _read_static(self) -> None:
        # As the job has it: read for settings (mixed precision), never shown.
        argv = read_cmdline(self.target_pid)
        if argv:
            self._cmdline = tuple(redact_argv(argv))
        self._env = redact_env(read_environ(self.target_pid) or {})
        try:
            self._start = self._handle.create_time() if self._handle is not None else None
        except psutil.Error:
            self._start = None
        self._hostname = self._read_hostname()
        self._mixed_precision = mixed_precision_in_source(self.target_pid, argv)
        self._static_done = bool(argv)

    def _read_hostname(self) -> str | None:
        """Our hostname, or the target's own if it lives in another UTS namespace."""
        if same_namespace(self.target_pid, "uts") is False:
            found = read_bounded(in_root(self.target_pid, "/etc/hostname"), 4096, whole=True)
            theirs = found.data.decode("utf-8", "replace").strip() if found else ""
            if theirs:
                return theirs
        try:
            return socket.gethostname()
        except OSError:
            return None

    def _read_torch(self, maps: str) -> str | None:
        torch_dir = torch_dir_from_maps(maps)
        if torch_dir is None:
            return None
        return torch_version_from_dir(
            torch_dir, process_path(self.target_pid, "root")) or torch_version_from_dir(torch_dir)

    def _read_python(self, maps: str | None) -> None:
        minor = python_minor_from_maps(maps) if maps else None
        exe = read_link(self.target_pid, "exe")
        if minor is None and exe is not None:
            m = _EXE_RE.match(os.path.basename(exe))
            if m:
                minor = f"{m.group(1)}.{m.group(2)}"
        full = self._exe_version(exe) if self._run_exe else None
        if full is not None and (minor is None or full.startswith(minor + ".")):
            self._python = full
        elif minor is not None:
            self._python = minor
        # One attempt at running the binary only: never fork a subprocess every
        # few seconds for nothing. "X.Y" without "Z" is final too.
        self._run_exe = False
        self._python_done = self._python is not None

    def _same_mount_namespace(self) -> bool:
        """Run the target's binary only where its shared libraries resolve the same.

        From another mount namespace (target in a container) the binary would load
        *our* libpython, or none, and could report a version it is not running.
        """
        return same_namespace(self.target_pid, "mnt") is True

    def _exe_version(self, exe: str | None) -> str | None:
        """``--version`` of the binary the target runs (``/proc/PID/exe``, the one it
        started from even if replaced on disk since), where safe (module docstring)."""
        if exe is not None and not os.path.basename(exe).startswith("python"):
            return None
        exe_path = process_path(self.target_pid, "exe")
        if not _safe_to_execute(exe_path) or not self._same_mount_namespace():
            return None
        try:
            out = subprocess.run(
                [exe_path, "--version"],
                capture_output=True,
                timeout=self._exe_timeout,
                stdin=subprocess.DEVNULL,
                env={},
                check=False,
            )
        except (OSError, subprocess.SubprocessError):
            return None
        m = _PY_VERSION_RE.search((out.stdout + out.stderr).decode("utf-8", "replace"))
        return m.group(1) if m else None
