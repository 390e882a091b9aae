"""Where a job's output goes: its own files, and through pipes to whoever reads them.

``python train.py | tee train.log`` writes into a pipe; ``tee`` reads it and
writes the file. Reading the pipe would take the job's output from ``tee``, so
aitop never does: it finds the process holding the pipe's read end and the
regular files *that* process holds open for writing, and reads those files
(``probes.job_log``). A reader whose own output is another pipe (``train.py | ts
| tee log``) is followed on, a few hops at most.

Everything is read from ``/proc/PID/fd`` and ``/proc/PID/fdinfo`` through
``probes.kernel``; a process whose descriptors cannot be read (another user's)
is simply not found.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .kernel.procfs import (
    PROC,
    fd_is_regular_file,
    list_fds,
    list_pids,
    read_comm,
    read_fdinfo,
    read_link,
)

#: ``/proc/PID/fdinfo`` flags' access mode: read only, write only, read-write.
READ, WRITE, READ_WRITE, ACCESS_MODE = 0, 1, 2, 3
#: Pipes followed from the job to a process that writes a file.
MAX_HOPS = 3
#: Files kept per writer.
MAX_FILES = 4
#: Top-level folders where no log lives: the kernel's filesystems, devices and
#: shared memory (a DataLoader's tensors in ``/dev/shm``).
NOT_LOGS = frozenset({"proc", "sys", "dev"})


def fd_mode(pid: int, fd: int, proc_root: str = PROC) -> int | None:
    """The access mode a descriptor was opened with (``READ``, ``WRITE``, ``READ_WRITE``)."""
    flags = (read_fdinfo(pid, fd, proc_root) or {}).get("flags")
    try:
        return int(flags or "", 8) & ACCESS_MODE
    except ValueError:
        return None


def pipe_ends(pid: int, proc_root: str = PROC) -> set[tuple[str, int]]:
    """The pipes a process holds open, as (``pipe:[inode]``, access mode) pairs.

    Empty where its file descriptors cannot be read (another user's process
    without the rights to it, a process that has exited).
    """
    ends: set[tuple[str, int]] = set()
    for fd in list_fds(pid, proc_root) or ():
        target = read_link(pid, "fd", str(fd), proc_root=proc_root)
        if target is None or not target.startswith("pipe:"):
            continue
        mode = fd_mode(pid, fd, proc_root)
        if mode is not None:
            ends.add((target, mode))
    return ends


def readers_of(pipe: str, candidates: Iterable[int], proc_root: str = PROC) -> list[int]:
    """The processes among ``candidates`` that hold ``pipe``'s read end."""
    return [pid for pid in candidates if (pipe, READ) in pipe_ends(pid, proc_root)]


@dataclass(frozen=True, slots=True)
class WrittenFile:
    """A regular file a process holds open for writing."""

    pid: int
    fd: int
    #: The file's name as the process sees it.
    name: str


def _may_be_log(name: str) -> bool:
    """An absolute path outside the kernel's filesystems and devices."""
    parts = name.split("/")
    return name.startswith("/") and len(parts) > 2 and parts[1] not in NOT_LOGS


def written_files(pid: int, proc_root: str = PROC) -> list[WrittenFile]:
    """Regular files ``pid`` holds open for writing: its stdout first, then the
    files it opened, in the order it opened them. Its stderr is where it writes
    its own errors, not what it passes on."""
    out: list[WrittenFile] = []
    for fd in list_fds(pid, proc_root) or ():
        if fd in (0, 2) or not fd_is_regular_file(pid, fd, proc_root):
            continue
        if fd_mode(pid, fd, proc_root) not in (WRITE, READ_WRITE):
            continue
        name = read_link(pid, "fd", str(fd), proc_root=proc_root)
        if name is None or not _may_be_log(name):
            continue
        out.append(WrittenFile(pid, fd, name))
    # A file deleted since it was opened (a tool's temporary file) comes last.
    out.sort(key=lambda f: f.name.endswith(" (deleted)"))
    return out[:MAX_FILES]


def describe_fd(pid: int, fd: int, proc_root: str = PROC) -> str:
    """What a descriptor is, as a person names it: a file, a terminal, /dev/null, a pipe."""
    target = read_link(pid, "fd", str(fd), proc_root=proc_root)
    if target is None:
        return "closed or unreadable"
    if target.startswith("/dev/pts/") or target.startswith("/dev/tty"):
        return f"a terminal ({target})"
    if target.startswith("pipe:"):
        return "a pipe"
    if target.startswith("socket:"):
        return "a socket (a service manager's journal, a container's log driver)"
    return target


@dataclass(frozen=True, slots=True)
class PipeFollowed:
    """Where following a job's output pipe led: the files its readers write, and
    the readers seen on the way (``comm (PID)``), for saying why when no file was."""

    files: list[WrittenFile]
    readers: list[str]


def follow_pipe(pid: int, fd: int, proc_root: str = PROC,
                exclude: Iterable[int] = ()) -> PipeFollowed:
    """The regular files written by the process reading ``pid``'s descriptor
    ``fd`` (a pipe), following readers whose own stdout is a pipe again."""
    skip = {pid, *exclude}
    pids = [p for p in list_pids(proc_root) if p not in skip]
    files: list[WrittenFile] = []
    readers: list[str] = []
    writer, out_fd = pid, fd
    for _ in range(MAX_HOPS):
        pipe = read_link(writer, "fd", str(out_fd), proc_root=proc_root)
        if pipe is None or not pipe.startswith("pipe:"):
            break
        found = readers_of(pipe, pids, proc_root)
        if not found:
            break
        for reader in found:
            readers.append(f"{read_comm(reader, proc_root=proc_root) or '?'} (PID {reader})")
            files.extend(written_files(reader, proc_root))
        if files:
            break
        writer, out_fd = found[0], 1
    return PipeFollowed(files[:MAX_FILES], readers)
