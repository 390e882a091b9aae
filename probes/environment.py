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
from .own_version import aitop_version
from .process_tree import count_workers, pin_thread_present
from .procfs import read_text, read_thread_names
from .redact import redact_argv, redact_env
from .samples import EnvironmentInfo

_LIBPYTHON_RE = re.compile(r"/libpython(\d+)\.(\d+)[a-z]*\.so")
_EXT_TAG_RE = re.compile(r"\.cpython-(\d)(\d+)[a-z]*-")
_EXE_RE = re.compile(r"^python(\d+)\.(\d+)[a-z]*$")
_PY_VERSION_RE = re.compile(r"Python (\d+\.\d+\.\d+\S*)")
_TORCH_LIB_RE = re.compile(r"(/\S*/torch)/lib/libtorch[\w.]*\.so")
_VERSION_PY_RE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)
_DIST_INFO_RE = re.compile(r"^torch-(\d[^-]*)\.dist-info$")


def parse_environ(raw: bytes) -> dict[str, str]:
    """``/proc/PID/environ`` bytes (``NAME=value\\0``...) -> dict, undecodable bytes replaced."""
    env: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        if not entry or b"=" not in entry:
            continue
        name, _, value = entry.partition(b"=")
        env[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


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
    text = read_text(f"{root}{torch_dir}/version.py")
    if text:
        m = _VERSION_PY_RE.search(text)
        if m:
            return m.group(1)
    site = os.path.dirname(torch_dir)
    try:
        names = os.listdir(f"{root}{site}")
    except OSError:
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


def cgroup_cpu_quota(cgroup_text: str, sys_root: str = "/sys") -> float | None:
    """CPUs granted by a cgroup v2 ``cpu.max`` ("200000 100000" -> 2.0); None if unlimited."""
    for line in cgroup_text.splitlines():
        hierarchy, _, path = line.partition("::")
        if hierarchy != "0" or not path:
            continue
        text = read_text(f"{sys_root}/fs/cgroup{path.strip()}/cpu.max")
        if not text:
            return None
        fields = text.split()
        if len(fields) != 2 or fields[0] == "max":
            return None
        try:
            return int(fields[0]) / int(fields[1])
        except (ValueError, ZeroDivisionError):
            return None
    return None


def cpus_allowed(pid: int, proc_root: str = "/proc", sys_root: str = "/sys") -> float | None:
    """How many CPUs the target can really use: affinity, capped by a cgroup quota.

    Containers often see every host CPU in /proc/cpuinfo while their quota
    allows two; advice such as "use the free cores" must count the latter.
    """
    try:
        count: float = float(len(os.sched_getaffinity(pid)))
    except OSError:
        return None
    cgroup = read_text(f"{proc_root}/{pid}/cgroup")
    quota = cgroup_cpu_quota(cgroup, sys_root) if cgroup else None
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
        self._proc = f"/proc/{target_pid}"
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
        self._aitop = aitop_version()

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
            maps = read_text(f"{self._proc}/maps")
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
            aitop_version=self._aitop,
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
        raw_cmd = read_text(f"{self._proc}/cmdline")
        # As the job has it: read for settings (mixed precision), never shown.
        argv = tuple(a for a in (raw_cmd or "").split("\0") if a)
        if raw_cmd:
            self._cmdline = tuple(redact_argv(argv))
        try:
            with open(f"{self._proc}/environ", "rb") as fh:
                self._env = redact_env(parse_environ(fh.read()))
        except OSError:
            self._env = {}
        try:
            self._start = self._handle.create_time() if self._handle is not None else None
        except psutil.Error:
            self._start = None
        self._hostname = self._read_hostname()
        self._mixed_precision = mixed_precision_in_source(self.target_pid, argv)
        self._static_done = bool(raw_cmd)

    def _read_hostname(self) -> str | None:
        """Our hostname, or the target's own if it lives in another UTS namespace."""
        try:
            same = os.readlink("/proc/self/ns/uts") == os.readlink(f"{self._proc}/ns/uts")
        except OSError:
            same = True
        if not same:
            theirs = read_text(f"{self._proc}/root/etc/hostname")
            if theirs and theirs.strip():
                return theirs.strip()
        try:
            return socket.gethostname()
        except OSError:
            return None

    def _read_torch(self, maps: str) -> str | None:
        torch_dir = torch_dir_from_maps(maps)
        if torch_dir is None:
            return None
        return torch_version_from_dir(torch_dir, f"{self._proc}/root") or torch_version_from_dir(
            torch_dir
        )

    def _read_python(self, maps: str | None) -> None:
        minor = python_minor_from_maps(maps) if maps else None
        exe_path = f"{self._proc}/exe"
        if minor is None:
            with contextlib.suppress(OSError):
                m = _EXE_RE.match(os.path.basename(os.readlink(exe_path)))
                if m:
                    minor = f"{m.group(1)}.{m.group(2)}"
        full = self._exe_version(exe_path) if self._run_exe else None
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
        try:
            return os.readlink("/proc/self/ns/mnt") == os.readlink(f"{self._proc}/ns/mnt")
        except OSError:
            return False

    def _exe_version(self, exe_path: str) -> str | None:
        with contextlib.suppress(OSError):
            if not os.path.basename(os.readlink(exe_path)).startswith("python"):
                return None
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
