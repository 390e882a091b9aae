"""A process's files in ``/proc``, and the machine's: read here and nowhere else.

They return ``None`` (or empty) for what is missing or unreadable, never raise:
a process that exits between two reads, or a file the kernel does not offer,
blanks one field. ``proc_root`` lets tests point them at a tree of their own;
``pid`` may be ``"self"`` (aitop's own entry). Formats are parsed once, here:
``environ`` into a dict, ``stat`` into its comm and fields, ``status`` into its
``Key: value`` pairs.
"""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass

PROC = "/proc"

#: A process as ``/proc`` names it: its PID, or ``"self"``.
Pid = int | str


def process_path(pid: Pid, *parts: str, proc_root: str = PROC) -> str:
    """``/proc/PID/part/...``: for the few callers that hand a path on (a job's file
    to ``process_files.read_bounded``, the ``exe`` to run); everything else reads
    through the functions below."""
    return "/".join((proc_root, str(pid), *parts))


def read_text(path: str) -> str | None:
    """Read a small /proc or /sys file, or ``None`` if it is missing or unreadable.

    Decoded as a text-mode ``open`` would (UTF-8, bad bytes replaced, ``\\r\\n``
    and ``\\r`` read as ``\\n``), from :func:`_read_bytes`.
    """
    raw = _read_bytes(path)
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace")
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _read_bytes(path: str) -> bytes | None:
    """The whole file, read with ``os.read``: no file object is built, which is
    most of a small /proc file's cost to Python (the neighbour scan reads one
    per process on the machine; ``docs/benchmarks.md``, Where aitop's CPU goes)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except (OSError, ValueError):
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    return b"".join(chunks)


def read_file(pid: Pid, *parts: str, proc_root: str = PROC) -> str | None:
    """One of a process's text files (``maps``, ``comm``, ``cgroup``...), or ``None``."""
    return read_text(process_path(pid, *parts, proc_root=proc_root))


def read_maps(pid: Pid, proc_root: str = PROC) -> str | None:
    """``/proc/PID/maps``: the files a process has mapped (libraries, extensions)."""
    return read_file(pid, "maps", proc_root=proc_root)


# ------------------------------------------------------------ processes, tasks


def list_pids(proc_root: str = PROC) -> list[int]:
    """Every PID ``proc_root`` lists, in order (empty when it cannot be listed)."""
    try:
        return sorted(int(name) for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        return []


def process_uid(pid: Pid, proc_root: str = PROC) -> int | None:
    """The user a process runs as (the owner of its ``/proc`` directory)."""
    try:
        return os.stat(process_path(pid, proc_root=proc_root)).st_uid
    except OSError:
        return None


def list_tids(pid: Pid, proc_root: str = PROC) -> list[int] | None:
    """Thread ids of ``pid`` (``None`` when its task directory cannot be listed)."""
    try:
        return sorted(int(t) for t in os.listdir(process_path(pid, "task", proc_root=proc_root))
                      if t.isdigit())
    except OSError:
        return None


def read_cmdline(pid: Pid, proc_root: str = PROC) -> tuple[str, ...]:
    """A process's arguments from ``/proc/PID/cmdline`` (empty if unreadable)."""
    raw = read_file(pid, "cmdline", proc_root=proc_root) or ""
    return tuple(a for a in raw.split("\0") if a)


def parse_environ(raw: bytes) -> dict[str, str]:
    """``/proc/PID/environ`` bytes (``NAME=value\\0``...) -> dict, undecodable bytes replaced."""
    env: dict[str, str] = {}
    for entry in raw.split(b"\0"):
        if not entry or b"=" not in entry:
            continue
        name, _, value = entry.partition(b"=")
        env[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return env


def read_environ(pid: Pid, proc_root: str = PROC) -> dict[str, str] | None:
    """The environment a process *started* with (later ``os.environ[...] =`` changes
    are invisible), or ``None`` when it cannot be read (another user's, gone)."""
    raw = _read_bytes(process_path(pid, "environ", proc_root=proc_root))
    return None if raw is None else parse_environ(raw)


def parse_stat(text: str) -> tuple[str, list[str]] | None:
    """Split a ``/proc/.../stat`` line into ``(comm, fields after comm)``.

    ``comm`` sits in parentheses and may itself contain spaces or ``)``, so it is
    cut at the first ``(`` and the *last* ``)``.
    """
    start = text.find("(")
    end = text.rfind(")")
    if start < 0 or end < start:
        return None
    return text[start + 1 : end], text[end + 2 :].split()


@dataclass(frozen=True, slots=True)
class ProcStat:
    """``/proc/PID/stat`` (or a thread's): its comm and the fields after it.

    Fields are numbered from the state (0): ppid 1, utime 11, stime 12,
    starttime 19 (``man 5 proc`` numbers them from the PID, 3 higher).
    """

    comm: str
    fields: tuple[str, ...]

    def number(self, index: int) -> int | None:
        """Field ``index`` as an integer, ``None`` when absent or not one."""
        try:
            return int(self.fields[index])
        except (IndexError, ValueError):
            return None

    @property
    def state(self) -> str:
        return self.fields[0] if self.fields else ""

    @property
    def ppid(self) -> int | None:
        return self.number(1)

    @property
    def start_ticks(self) -> int | None:
        """Clock ticks after boot at which the process started."""
        return self.number(19)


def read_stat(pid: Pid, tid: int | None = None, proc_root: str = PROC) -> ProcStat | None:
    """A process's (or one of its threads') stat line, or ``None``."""
    parts = ("stat",) if tid is None else ("task", str(tid), "stat")
    text = read_file(pid, *parts, proc_root=proc_root)
    parsed = parse_stat(text) if text else None
    return None if parsed is None else ProcStat(parsed[0], tuple(parsed[1]))


def process_alive(pid: int, proc_root: str = PROC) -> bool:
    """Whether the process exists and is no zombie (exited, not yet reaped)."""
    stat = read_stat(pid, proc_root=proc_root)
    return stat is not None and bool(stat.fields) and stat.state != "Z"


@dataclass(frozen=True, slots=True)
class TaskStat:
    """One thread's name and cumulative CPU ticks (user + system)."""

    tid: int
    name: str
    ticks: int


def read_task_stat(pid: int, tid: int, proc_root: str = PROC) -> TaskStat | None:
    """Name and CPU ticks of one thread, or ``None`` if it is gone/unreadable."""
    stat = read_stat(pid, tid, proc_root)
    if stat is None:
        return None
    utime, stime = stat.number(11), stat.number(12)
    return TaskStat(tid, stat.comm, 0 if utime is None or stime is None else utime + stime)


def read_comm(pid: Pid, tid: int | None = None, proc_root: str = PROC) -> str | None:
    """A process's (or thread's) kernel name, without its newline."""
    parts = ("comm",) if tid is None else ("task", str(tid), "comm")
    text = read_file(pid, *parts, proc_root=proc_root)
    return None if text is None else text.rstrip("\n")


def read_thread_names(pid: int, proc_root: str = PROC) -> list[str] | None:
    """Names (comm) of all threads of ``pid``; ``None`` when none could be read."""
    tids = list_tids(pid, proc_root)
    if not tids:
        return None
    names = [name for tid in tids if (name := read_comm(pid, tid, proc_root)) is not None]
    return names or None


def read_children(pid: int, tid: int, proc_root: str = PROC) -> list[int] | None:
    """Children one thread forked (``/proc/PID/task/TID/children``), ``None`` when the
    file is missing (a kernel without ``CONFIG_PROC_CHILDREN``, a thread gone)."""
    text = read_file(pid, "task", str(tid), "children", proc_root=proc_root)
    return None if text is None else [int(c) for c in text.split() if c.isdigit()]


def read_runqueue_wait_ns(pid: int, proc_root: str = PROC) -> int | None:
    """Nanoseconds the process's main thread has spent runnable, waiting for a CPU.

    The second field of ``/proc/PID/schedstat`` (kernels with scheduler
    statistics, the default in common distributions). It tells a worker starved
    of CPU (contention) from one asleep on a disk read: both show low CPU.
    """
    text = read_file(pid, "schedstat", proc_root=proc_root)
    fields = text.split() if text else []
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1])


def parse_status(text: str) -> dict[str, str]:
    """``/proc/PID/status`` (``Key:\\tvalue`` lines) -> {key: value}."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key] = value.strip()
    return out


def read_status(pid: Pid, proc_root: str = PROC) -> dict[str, str] | None:
    text = read_file(pid, "status", proc_root=proc_root)
    return None if text is None else parse_status(text)


def parse_nspid(status_text: str) -> tuple[int, ...] | None:
    """PIDs from the ``NSpid:`` line of a ``/proc/PID/status`` text, or ``None``."""
    value = parse_status(status_text).get("NSpid")
    if value is None:
        return None
    try:
        pids = tuple(int(tok) for tok in value.split())
    except ValueError:
        return None
    return pids or None


def read_nspid(pid: Pid, proc_root: str = PROC) -> tuple[int, ...] | None:
    """A process's PID in each PID namespace, from ``proc_root``'s own inwards."""
    text = read_file(pid, "status", proc_root=proc_root)
    return None if text is None else parse_nspid(text)


def read_rss_bytes(pid: Pid, proc_root: str = PROC) -> int | None:
    """Resident memory from ``/proc/PID/statm`` (its second field, in pages)."""
    fields = (read_file(pid, "statm", proc_root=proc_root) or "").split()
    if len(fields) < 2 or not fields[1].isdigit():
        return None
    return int(fields[1]) * resource.getpagesize()


# ------------------------------------------------------- links and descriptors


def read_link(pid: Pid, *parts: str, proc_root: str = PROC) -> str | None:
    """Where one of a process's links points: ``exe``, ``cwd``, ``ns/mnt``, ``fd/3``."""
    try:
        return os.readlink(process_path(pid, *parts, proc_root=proc_root))
    except OSError:
        return None


def same_namespace(pid: Pid, kind: str, proc_root: str = PROC) -> bool | None:
    """Whether ``pid`` shares aitop's namespace of ``kind`` (``mnt``, ``uts``, ``pid``),
    ``None`` when either link cannot be read."""
    ours = read_link("self", "ns", kind, proc_root=proc_root)
    theirs = read_link(pid, "ns", kind, proc_root=proc_root)
    return None if ours is None or theirs is None else ours == theirs


def list_fds(pid: Pid, proc_root: str = PROC) -> list[int] | None:
    """A process's open file descriptors, ``None`` when they cannot be listed."""
    try:
        return sorted(int(fd) for fd in os.listdir(process_path(pid, "fd", proc_root=proc_root))
                      if fd.isdigit())
    except OSError:
        return None


def read_fdinfo(pid: Pid, fd: int, proc_root: str = PROC) -> dict[str, str] | None:
    """``/proc/PID/fdinfo/FD`` (``pos``, ``flags`` in octal, ``mnt_id``...) as a dict."""
    text = read_file(pid, "fdinfo", str(fd), proc_root=proc_root)
    return None if text is None else parse_status(text)


def fd_is_regular_file(pid: Pid, fd: int, proc_root: str = PROC) -> bool:
    """Whether descriptor ``fd`` is open on a regular file (not a pipe, a terminal)."""
    try:
        return os.path.isfile(process_path(pid, "fd", str(fd), proc_root=proc_root))
    except OSError:
        return False


# ---------------------------------------------------------------- the machine


def read_diskstats(proc_root: str = PROC) -> str | None:
    """``/proc/diskstats``: cumulative I/O counters of every block device."""
    return read_text(f"{proc_root}/diskstats")


def read_mounts(pid: Pid = "self", proc_root: str = PROC) -> str | None:
    """``/proc/PID/mounts`` (fstab format): the mount table a process sees."""
    return read_file(pid, "mounts", proc_root=proc_root)


def read_sysctl(name: str, proc_root: str = PROC) -> str | None:
    """A kernel setting from ``/proc/sys`` (``kernel/yama/ptrace_scope``), or ``None``
    where the kernel has no such setting."""
    return read_text(f"{proc_root}/sys/{name}")
