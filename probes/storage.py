"""The disks and filesystems behind the target's open files.

Answers "where does this job read and write, and is that storage the
bottleneck?": for each mount holding files the target tree has open, the
filesystem type (network filesystems are flagged: training data belongs on local
NVMe), the block device's throughput and busy % and its I/O scheduler, plus the
files open for writing right now (a checkpoint being saved).

Cost model. Listing open files means a ``readlink`` + ``stat`` + ``fdinfo`` read
per descriptor of every process of the tree; a DataLoader using torch's
``file_descriptor`` sharing strategy can hold thousands. So the list is
refreshed at most every ``open_files_min_interval`` seconds, and less often when
one refresh is slow: the interval adapts so that listing stays under
``max_overhead`` (2 %) of one core. Everything else per tick (one
``/proc/diskstats`` read) is cheap, so throughput stays at 1 s resolution.

``proc_root`` and ``sys_root`` default to the real ``/proc`` and ``/sys``; tests
point them at small fake trees to exercise mount-table, diskstats and scheduler
parsing (``/proc`` is read through ``kernel.procfs``, ``/sys/block`` here). The
mount table is parsed here (``PROC/self/mounts``, the same file
``psutil.disk_partitions(all=True)`` reads) rather than through psutil because
psutil always reads the real ``/proc`` and leaves ``\\040``-style escapes in
paths. The target's open files always come from psutil and the real ``/proc``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import psutil

from .kernel.procfs import PROC, read_diskstats, read_mounts, read_text
from .process_tree import tree_edges
from .redact import redact_text
from .samples import MountInfo, StorageSample

#: Filesystem types whose data crosses a network (or a userspace daemon that
#: usually fetches it from one).
NETWORK_FSTYPES = frozenset(
    {
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "9p",
        "ceph",
        "glusterfs",
        "lustre",
        "beegfs",
        "gpfs",
        "wekafs",
        "afs",
        "panfs",
        "orangefs",
        "pvfs2",
        "ncpfs",
        "fuse",
    }
)

#: FUSE subtypes that serve local data (rootless container roots, archives,
#: bind views, NTFS disks); every other ``fuse.*`` (sshfs, s3fs, gcsfuse,
#: blobfuse2, juicefs, mountpoint-s3...) counts as network.
LOCAL_FUSE_SUBTYPES = frozenset(
    {
        "fuse-overlayfs",
        "lxcfs",
        "squashfuse",
        "squashfuse_ll",
        "bindfs",
        "ntfs-3g",
        "ntfs3g",
        "gvfsd-fuse",
        "portal",
        "appimagekit",
        "fuse-zip",
        "archivemount",
        "encfs",
        "gocryptfs",
    }
)

#: Kernel pseudo filesystems: files open there (``/proc/self/stat`` kept open by a
#: system monitor, cgroup files) are not storage and would only add noise.
PSEUDO_FSTYPES = frozenset(
    {
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "debugfs",
        "tracefs",
        "securityfs",
        "bpf",
        "configfs",
        "pstore",
        "devpts",
        "mqueue",
        "fusectl",
        "binfmt_misc",
        "efivarfs",
    }
)

#: open(2) modes (as psutil reports them) that can write.
WRITE_MODES = frozenset({"w", "a", "r+", "a+"})

_SECTOR = 512  # /proc/diskstats counts 512-byte sectors whatever the device's


def is_network_fstype(fstype: str) -> bool:
    """True for filesystems that read over a network (nfs, cifs, fuse.sshfs, ...)."""
    fs = fstype.strip().lower()
    if fs in NETWORK_FSTYPES:
        return True
    if fs.startswith("fuse."):
        return fs[len("fuse.") :] not in LOCAL_FUSE_SUBTYPES
    return False


# ------------------------------------------------------------ mount table


@dataclass(frozen=True, slots=True)
class Mount:
    """One line of the mount table."""

    device: str
    mountpoint: str
    fstype: str


def _unescape(field: str) -> str:
    r"""Undo the kernel's octal escapes in mount fields (``\040`` is a space)."""
    if "\\" not in field:
        return field
    out: list[str] = []
    i = 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            try:
                out.append(chr(int(field[i + 1 : i + 4], 8)))
                i += 4
                continue
            except ValueError:
                pass
        out.append(field[i])
        i += 1
    return "".join(out)


def parse_mounts(text: str) -> list[Mount]:
    """Parse ``/proc/*/mounts`` text (fstab format) in table order."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        mounts.append(Mount(_unescape(parts[0]), _unescape(parts[1]), parts[2]))
    return mounts


def find_mount(path: str, mounts: Sequence[Mount]) -> Mount | None:
    """The mount a path lives on: longest mountpoint prefix, later mounts winning ties.

    (A later mount on the same mountpoint hides the earlier one, as the kernel does.)
    """
    best: Mount | None = None
    for m in mounts:
        mp = m.mountpoint
        inside = path == mp or mp == "/" or path.startswith(mp.rstrip("/") + "/")
        if inside and (best is None or len(mp) >= len(best.mountpoint)):
            best = m
    return best


# ------------------------------------------------------------ block devices


def _disk_of(name: str, sys_root: str) -> str | None:
    """Whole-disk name for a block device name (``nvme0n1p1`` -> ``nvme0n1``)."""
    if not name or "/" in name:
        return None
    if os.path.isdir(os.path.join(sys_root, "block", name)):
        return name
    # Partitions appear as /sys/block/<disk>/<part>/ (true of sysfs and of fakes).
    for cand in glob.glob(os.path.join(glob.escape(sys_root), "block", "*", name)):
        if os.path.isdir(cand):
            return os.path.basename(os.path.dirname(cand))
    return None


def block_disk(device: str, mountpoint: str | None, sys_root: str = "/sys") -> str | None:
    """The disk (as named in /sys/block and /proc/diskstats) behind a mount, or None.

    Tries the device path (resolving ``/dev/mapper/x`` -> ``dm-0`` and
    ``/dev/disk/by-*`` links), then the mountpoint's ``st_dev`` through
    ``/sys/dev/block/MAJ:MIN`` (which also covers ``/dev/root``). Overlay, tmpfs,
    network and other device-less filesystems have no disk: ``None``.
    """
    if device.startswith("/dev/"):
        disk = _disk_of(os.path.basename(os.path.realpath(device)), sys_root)
        if disk is not None:
            return disk
    if mountpoint is None:
        return None
    try:
        st_dev = os.stat(mountpoint).st_dev
    except OSError:
        return None
    major, minor = os.major(st_dev), os.minor(st_dev)
    if major == 0:  # anonymous device: tmpfs, overlay, nfs, btrfs subvolume...
        return None
    link = os.path.join(sys_root, "dev", "block", f"{major}:{minor}")
    if not os.path.exists(link):
        return None
    return _disk_of(os.path.basename(os.path.realpath(link)), sys_root)


def parse_scheduler(text: str | None) -> str | None:
    """The active scheduler from ``queue/scheduler`` text: ``none [mq-deadline] bfq``.

    A single unbracketed word (some drivers print only ``none``) is active too.
    """
    if not text:
        return None
    words = text.split()
    for w in words:
        if w.startswith("[") and w.endswith("]") and len(w) > 2:
            return w[1:-1]
    return words[0] if len(words) == 1 else None


def read_scheduler(disk: str, sys_root: str = "/sys") -> str | None:
    """Active I/O scheduler of a whole disk, or ``None`` if it has no queue."""
    return parse_scheduler(read_text(os.path.join(sys_root, "block", disk, "queue", "scheduler")))


@dataclass(frozen=True, slots=True)
class DiskCounters:
    """Cumulative counters of one disk from /proc/diskstats."""

    read_bytes: int
    write_bytes: int
    busy_ms: int


def parse_diskstats(text: str | None) -> dict[str, DiskCounters]:
    """``/proc/diskstats`` -> {name: counters}; malformed lines are skipped."""
    out: dict[str, DiskCounters] = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 14:
            continue
        try:
            out[parts[2]] = DiskCounters(
                read_bytes=int(parts[5]) * _SECTOR,
                write_bytes=int(parts[9]) * _SECTOR,
                busy_ms=int(parts[12]),
            )
        except ValueError:
            continue
    return out


# ----------------------------------------------------------------- probe


@dataclass(frozen=True, slots=True)
class _OpenFile:
    path: str
    writing: bool


def _default_provider(target_pid: int) -> Callable[[], Iterable[int]]:
    def provider() -> list[int]:
        return [pid for pid, _parent in tree_edges(target_pid)]

    return provider


class StorageProbe:
    """Samples the mounts behind the target tree's open files and current writes.

    ``tree_pids_provider`` returns the PIDs to inspect (typically
    ``ProcessTreeProbe.pids``, so the tree is walked once per tick); without one
    the probe walks the target's tree itself when it refreshes the file list.

    ``MountInfo.open_files`` counts distinct paths (fork workers inherit their
    parent's descriptors, so counting descriptors would multiply one file by
    the worker count). Disk rates and busy % are the whole disk's, whoever
    causes the I/O. Files on kernel pseudo filesystems are left out.
    """

    def __init__(
        self,
        target_pid: int,
        tree_pids_provider: Callable[[], Iterable[int]] | None = None,
        *,
        proc_root: str = PROC,
        sys_root: str = "/sys",
        open_files_min_interval: float = 2.0,
        open_files_max_interval: float = 30.0,
        max_overhead: float = 0.02,
    ) -> None:
        self.target_pid = target_pid
        self._provider = tree_pids_provider or _default_provider(target_pid)
        self._proc_root = proc_root
        self._sys_root = sys_root
        self._min_interval = open_files_min_interval
        self._max_interval = max(open_files_max_interval, open_files_min_interval)
        self._max_overhead = max_overhead
        self._interval = open_files_min_interval
        self._files: list[_OpenFile] | None = None
        self._files_at = 0.0
        self._files_error: str | None = None
        self._mounts: list[Mount] = []
        self._handles: dict[int, psutil.Process] = {}
        # The target's own handle, made now: it pins the process identity, so a
        # PID reused after the target exits is never mistaken for it.
        self._target: psutil.Process | None = None
        with contextlib.suppress(psutil.Error, ValueError):
            self._target = psutil.Process(target_pid)
        self._disk_cache: dict[tuple[str, str], str | None] = {}
        self._sched_cache: dict[str, str | None] = {}
        self._prev_disk: dict[str, tuple[float, DiskCounters]] = {}

    @property
    def open_files_interval(self) -> float:
        """Seconds between open-file listings right now (adapts to their cost)."""
        return self._interval

    def sample(self) -> StorageSample:
        """One tick: mounts in use with their disk rates, and files being written."""
        t = time.time()
        now = time.monotonic()
        # 10 % slack: a caller sampling every 2 s with a 2 s interval must not
        # skip every other refresh because its timer fired a millisecond early.
        if self._files is None or now - self._files_at >= self._interval * 0.9:
            self._refresh_files()
            cost = time.monotonic() - now
            wanted = cost / self._max_overhead if self._max_overhead > 0 else 0.0
            self._interval = min(self._max_interval, max(self._min_interval, wanted))
            self._files_at = now
        files = self._files or []

        by_mount: dict[Mount, set[str]] = {}
        for f in files:
            m = find_mount(f.path, self._mounts)
            if m is not None and m.fstype not in PSEUDO_FSTYPES:
                by_mount.setdefault(m, set()).add(f.path)

        stats = parse_diskstats(read_diskstats(self._proc_root))
        rates: dict[str, tuple[float | None, float | None, float | None]] = {}
        mounts: list[MountInfo] = []
        for m, paths in by_mount.items():
            disk = self._disk(m)
            if disk is not None and disk not in rates:
                rates[disk] = self._rates(disk, stats.get(disk), now)
            read_bps, write_bps, busy = rates[disk] if disk is not None else (None, None, None)
            mounts.append(
                MountInfo(
                    mountpoint=m.mountpoint,
                    device=redact_text(m.device),
                    fstype=m.fstype,
                    is_network=is_network_fstype(m.fstype),
                    scheduler=self._scheduler(disk) if disk else None,
                    read_bps=read_bps,
                    write_bps=write_bps,
                    busy_percent=busy,
                    open_files=len(paths),
                )
            )
        # Forget disks no longer in use so a later reappearance starts a fresh delta.
        for disk in [d for d in self._prev_disk if d not in rates]:
            del self._prev_disk[disk]
        mounts.sort(key=lambda mi: (-mi.open_files, mi.mountpoint))
        writing = tuple(sorted({redact_text(f.path) for f in files if f.writing}))
        return StorageSample(t=t, mounts=tuple(mounts), writing=writing, error=self._files_error)

    # ------------------------------------------------------------- internals

    def _refresh_files(self) -> None:
        # Mounts, their disks and schedulers change rarely: re-derive them at the
        # same (slow, adaptive) pace as the file list, never per tick.
        self._disk_cache.clear()
        self._sched_cache.clear()
        mounts_text = read_mounts("self", self._proc_root)
        if mounts_text is not None:
            self._mounts = parse_mounts(mounts_text)
        try:
            pids = list(self._provider())
        except Exception:  # a caller's provider must not break sampling
            pids = [self.target_pid]
        if not pids:
            pids = [self.target_pid]
        files: list[_OpenFile] = []
        denied = gone = 0
        for pid in pids:
            handle = self._handle(pid)
            if handle is None:
                gone += 1
                continue
            try:
                entries = handle.open_files()
            except psutil.AccessDenied:
                denied += 1
                continue
            except (psutil.Error, OSError):
                gone += 1
                continue
            files.extend(_OpenFile(e.path, getattr(e, "mode", "r") in WRITE_MODES) for e in entries)
        for pid in [p for p in self._handles if p not in pids]:
            del self._handles[pid]
        self._files = files
        if denied:
            self._files_error = (
                f"access denied listing open files of {denied} process(es)"
                " (run aitop as the target's user or root)"
            )
        elif gone == len(pids):
            self._files_error = f"PID {self.target_pid} is not running"
        else:
            self._files_error = None

    def _handle(self, pid: int) -> psutil.Process | None:
        if pid == self.target_pid:
            try:
                alive = self._target is not None and self._target.is_running()
            except psutil.Error:
                alive = False
            return self._target if alive else None
        handle = self._handles.get(pid)
        try:
            if handle is not None and handle.is_running():
                return handle
            handle = self._handles[pid] = psutil.Process(pid)
            return handle
        except psutil.Error:
            self._handles.pop(pid, None)
            return None

    def _disk(self, m: Mount) -> str | None:
        key = (m.device, m.mountpoint)
        if key not in self._disk_cache:
            self._disk_cache[key] = block_disk(m.device, m.mountpoint, self._sys_root)
        return self._disk_cache[key]

    def _scheduler(self, disk: str) -> str | None:
        if disk not in self._sched_cache:
            self._sched_cache[disk] = read_scheduler(disk, self._sys_root)
        return self._sched_cache[disk]

    def _rates(
        self, disk: str, cur: DiskCounters | None, now: float
    ) -> tuple[float | None, float | None, float | None]:
        """Read B/s, write B/s and busy % of a disk since the previous tick."""
        if cur is None:
            return None, None, None
        prev = self._prev_disk.get(disk)
        self._prev_disk[disk] = (now, cur)
        if prev is None or now <= prev[0]:
            return None, None, None
        dt = now - prev[0]
        before = prev[1]
        if cur.read_bytes < before.read_bytes or cur.write_bytes < before.write_bytes:
            return None, None, None  # counters reset (device re-added)
        busy = max(0.0, min(100.0, (cur.busy_ms - before.busy_ms) / (dt * 1000.0) * 100.0))
        return (
            (cur.read_bytes - before.read_bytes) / dt,
            (cur.write_bytes - before.write_bytes) / dt,
            busy,
        )
