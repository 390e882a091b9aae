"""Files that land whole, and reads that refuse what is not a bounded regular file.

Every file aitop writes (snapshots, their reports, alerting rules) goes to a
temporary beside its target and is renamed into place, so a reader sees the old
file or the new, never half of one. Every file it reads on a user's say-so
(snapshots, reports) is checked first: ``aitop replay /dev/zero`` or a FIFO must
fail in one line, not eat memory or block forever.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path


class FileError(Exception):
    """A file could not be read or written; the message is one line saying why."""


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new, never half.

    Raises ``FileError`` with one line saying why the write failed.
    """
    write_all([(path, data)])


def write_all(files: Sequence[tuple[Path, bytes]]) -> list[Path]:
    """Write a set of files so that it lands whole, or the error says what landed.

    Every file goes to a temporary beside its target first; only when all are
    written are they renamed into place, in the order given (put the file whose
    presence means "complete" last). Returns the paths written, in order.
    Raises ``FileError`` (one line) naming the file that failed and saying
    that nothing was written, or, if a rename failed midway, which files were.
    """
    staged: list[tuple[Path, str]] = []
    try:
        for path, data in files:
            refuse_non_regular(path)
            staged.append((path, _stage(path, data)))
    except FileError as exc:
        discard(tmp for _, tmp in staged)
        raise FileError(f"{exc}; nothing was written") from exc
    written: list[Path] = []
    for i, (path, tmp) in enumerate(staged):
        try:
            os.replace(tmp, path)
        except OSError as exc:
            discard(tmp for _, tmp in staged[i:])
            landed = ", ".join(str(p) for p in written) if written else "nothing"
            raise FileError(
                f"cannot write {path}: {reason_of(exc)}; written: {landed}; "
                "fix the path and export again"
            ) from exc
        written.append(path)
    return written


def _stage(path: Path, data: bytes) -> str:
    """Write ``data`` to a new temporary file beside ``path``; returns its name."""
    directory = path.parent if str(path.parent) else Path(".")
    tmp_name: str | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        # mkstemp makes 0600 files; an export should get the usual permissions.
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        if tmp_name is not None:
            discard([tmp_name])
        raise FileError(f"cannot write {path}: {reason_of(exc)}") from exc
    return tmp_name


def refuse_non_regular(path: Path) -> None:
    """Refuse to replace a directory or a device: ``os.replace`` would, as root."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # absent (the usual case), or the write itself will say why
    if not stat.S_ISREG(mode):
        raise FileError(f"cannot write {path}: it is {_kind(mode)}, not a regular file")


def discard(tmp_names: Iterable[str]) -> None:
    """Remove temporaries of a failed export; a leftover is harmless, never an error."""
    for name in tmp_names:
        with contextlib.suppress(OSError):
            os.unlink(name)


def reason_of(exc: OSError) -> str:
    return exc.strerror or str(exc)


def _file_mode(path: Path) -> int:
    """The mode an ordinary ``open(path, "w")`` would give: the old file's, else umask's."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def read_bounded(path: Path, cap: int, *, verb: str = "read", what: str = "a file",
                 hint: str = "give a regular file") -> bytes:
    """The bytes of a regular file of at most ``cap`` bytes.

    The refusals say ``cannot {verb} {path}: ... {what} may be; {hint}``.

    ``stat`` comes first because ``open`` on a FIFO blocks until a writer
    appears; the open is non-blocking all the same, and ``fstat`` checks the
    file actually opened, in case the path was swapped in between. At most
    ``cap + 1`` bytes are read, so a file growing underneath is caught too.
    """
    limit = cap
    try:
        _check_readable(path, os.stat(path), limit, verb, what, hint)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        raise FileError(f"cannot read {path}: {reason_of(exc)}") from exc
    with os.fdopen(fd, "rb") as f:
        try:
            st = os.fstat(fd)
            _check_readable(path, st, limit, verb, what, hint)
            data = f.read(min(st.st_size, limit) + 1)
            if st.st_size < len(data) <= limit:  # grew since fstat: read on, to the cap
                data += f.read(limit + 1 - len(data))
        except OSError as exc:
            raise FileError(f"cannot read {path}: {reason_of(exc)}") from exc
    if len(data) > limit:
        raise FileError(
            f"cannot {verb} {path}: it grew past the {_size(limit)} {what} may be "
            f"while being read; {hint}"
        )
    return data


def _check_readable(
    path: Path, st: os.stat_result, limit: int, verb: str, what: str, hint: str
) -> None:
    """Refuse, in one line, what cannot be read: not a regular file, or too big."""
    if not stat.S_ISREG(st.st_mode):
        raise FileError(
            f"cannot {verb} {path}: not a regular file (it is {_kind(st.st_mode)}); "
            f"{hint}"
        )
    if st.st_size > limit:
        raise FileError(
            f"cannot {verb} {path}: it is {_size(st.st_size)}, more than the "
            f"{_size(limit)} {what} may be; {hint}"
        )


def _kind(mode: int) -> str:
    """What a non-regular file is, in words."""
    kinds = (
        (stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"), (stat.S_ISREG, "a regular file"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _size(n: float) -> str:
    """``512 MiB``, ``2.0 GiB``: binary units, whole numbers shown whole."""
    value = float(n)
    unit = "bytes"
    for bigger in ("KiB", "MiB", "GiB"):
        if value < 1024:
            break
        value, unit = value / 1024, bigger
    return f"{value:.0f} {unit}" if value.is_integer() else f"{value:.1f} {unit}"

