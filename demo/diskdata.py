"""Sample data on a real disk, read past the page cache (the ``storage`` demo).

A storage-bound job has to wait on a device, not on memory: the data file is
made on a block-device file system (never tmpfs, where "disk" reads are memory
copies) and read with ``O_DIRECT`` so that every read goes to the device. Where
a file system refuses ``O_DIRECT`` the reader drops the file's cached pages
before each read instead (``POSIX_FADV_DONTNEED``). Torch-free.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

BLOCK = 4096  # bytes per read; O_DIRECT wants block-aligned offsets and buffers
MEMORY_FILE_SYSTEMS = frozenset({"tmpfs", "ramfs", "devtmpfs", "hugetlbfs", "shm"})


def file_system_type(path: Path) -> str:
    """The type of the file system holding ``path`` (longest mount-point match)."""
    target = str(path.resolve())
    best, kind = "", ""
    with open("/proc/mounts") as fh:
        for line in fh:
            fields = line.split()
            if len(fields) < 3:
                continue
            mount = fields[1].replace("\\040", " ")
            inside = target == mount or target.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best):
                best, kind = mount, fields[2]
    return kind


def real_disk_parent(near: Path) -> Path:
    """``near`` when it is on a block device, else the first such candidate."""
    for candidate in (near, Path("/var/tmp"), Path.home()):
        if candidate.is_dir() and file_system_type(candidate) not in MEMORY_FILE_SYSTEMS:
            return candidate
    raise RuntimeError(f"no directory on a real disk near {near} (all are in memory)")


@contextlib.contextmanager
def real_disk_scratch(near: Path) -> Iterator[Path]:
    """A temporary directory on a real disk, removed on exit (Ctrl-C and SIGTERM too)."""
    directory = Path(tempfile.mkdtemp(prefix="aitop-demo-data-", dir=real_disk_parent(near)))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def write_sample_file(path: Path, size_bytes: int) -> int:
    """Fill ``path`` with random bytes, flush it to the device; return its blocks."""
    chunk = 1 << 20
    blocks = max(1, size_bytes // BLOCK)
    with path.open("wb") as fh:
        remaining = blocks * BLOCK
        while remaining > 0:
            n = min(chunk, remaining)
            fh.write(os.urandom(n))
            remaining -= n
        fh.flush()
        os.fsync(fh.fileno())
        # The written pages are clean now; let the kernel forget them.
        os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return blocks


class DirectReader:
    """Reads single 4 KiB blocks of one file from the device, never from the cache.

    Opened lazily and re-opened after a fork, so a Dataset holding one can be
    handed to DataLoader workers.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self._pid = -1
        self._direct = False
        self._buffer = mmap.mmap(-1, BLOCK)  # page-aligned, as O_DIRECT needs

    def _open(self) -> int:
        if self._fd < 0 or self._pid != os.getpid():
            try:
                self._fd = os.open(self.path, os.O_RDONLY | os.O_DIRECT)
                self._direct = True
            except OSError:  # EINVAL: this file system does not do O_DIRECT
                self._fd = os.open(self.path, os.O_RDONLY)
                self._direct = False
            self._pid = os.getpid()
            self._buffer = mmap.mmap(-1, BLOCK)
        return self._fd

    def read_block(self, number: int) -> bytes:
        """The block's bytes, read from the device."""
        fd = self._open()
        offset = number * BLOCK
        if not self._direct:
            os.posix_fadvise(fd, offset, BLOCK, os.POSIX_FADV_DONTNEED)
        os.preadv(fd, [self._buffer], offset)
        return self._buffer[:]

    def __getstate__(self) -> dict[str, object]:
        """Pickled for spawned workers: the path only, the worker opens its own."""
        return {"path": self.path}

    def __setstate__(self, state: dict[str, object]) -> None:
        path = state["path"]
        assert isinstance(path, Path)
        self.__init__(path)  # type: ignore[misc]
