"""StorageProbe: real open files of a real child, real and fake mount/sys trees."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from aitop.probes.kernel.procfs import read_text
from aitop.probes.process_tree import ProcessTreeProbe
from aitop.probes.samples import StorageSample
from aitop.probes.storage import (
    StorageProbe,
    block_disk,
    find_mount,
    is_network_fstype,
    parse_mounts,
    parse_scheduler,
)
from support.workloads.probe_children import run_unprivileged, start, stop, workload


@pytest.fixture()
def writer(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A child holding data.bin (read), train.log (append), ckpt.pt (write) open."""
    proc = start([workload("probe_writer.py"), str(tmp_path)])
    yield proc
    stop(proc)


def _mount_of(path: Path) -> Any:
    """The mount psutil says ``path`` is on (independent of the probe's own parser)."""
    parts = psutil.disk_partitions(all=True)
    real = os.path.realpath(path)
    best = max(
        (
            p
            for p in parts
            if real == p.mountpoint or real.startswith(p.mountpoint.rstrip("/") + "/")
        ),
        key=lambda p: len(p.mountpoint),
    )
    return best


# ------------------------------------------------------------ real storage


def test_files_being_written_are_listed(writer: subprocess.Popen[bytes], tmp_path: Path) -> None:
    tree = ProcessTreeProbe(writer.pid)
    tree.sample()
    s = StorageProbe(writer.pid, tree.pids, open_files_min_interval=0).sample()
    assert s.error is None
    real = os.path.realpath(tmp_path)
    assert f"{real}/ckpt.pt" in s.writing  # opened "wb"
    assert f"{real}/train.log" in s.writing  # opened "a"
    assert f"{real}/data.bin" not in s.writing  # read-only


def test_real_mount_mapping_and_disk_rates(writer: subprocess.Popen[bytes], tmp_path: Path) -> None:
    probe = StorageProbe(writer.pid, open_files_min_interval=0)
    probe.sample()
    time.sleep(0.6)
    s = probe.sample()
    expected = _mount_of(tmp_path)
    mine = [m for m in s.mounts if m.mountpoint == expected.mountpoint]
    assert len(mine) == 1
    m = mine[0]
    assert m.fstype == expected.fstype
    assert m.device == expected.device
    assert m.open_files >= 3  # data.bin, train.log, ckpt.pt (distinct paths)
    assert m.is_network is False
    disk = block_disk(m.device, m.mountpoint)
    if disk is None or disk not in psutil.disk_io_counters(perdisk=True):
        pytest.skip(f"{tmp_path} is not on a block device with I/O counters")
    # the child fsyncs 1 MiB every 50 ms: the disk saw writes
    assert m.write_bps is not None and m.write_bps > 0
    assert m.read_bps is not None and m.read_bps >= 0
    assert m.busy_percent is not None and 0 <= m.busy_percent <= 100
    sched = read_text(f"/sys/block/{disk}/queue/scheduler")
    if sched is not None:
        active = next(w for w in sched.split() if w.startswith("["))
        assert m.scheduler == active.strip("[]")


def test_open_file_list_is_refreshed_only_every_interval(
    writer: subprocess.Popen[bytes], tmp_path: Path
) -> None:
    """The costly open-files listing is cached; the cheap rates are not."""
    pids = [writer.pid]  # what a tree probe would hand over; grows below
    slow = StorageProbe(writer.pid, lambda: list(pids), open_files_min_interval=60)
    fast = StorageProbe(writer.pid, lambda: list(pids), open_files_min_interval=0)
    before = slow.sample()
    late = Path(os.path.realpath(tmp_path)) / "late.pt"
    code = f"import time; f = open({str(late)!r}, 'wb'); print('READY', flush=True); time.sleep(60)"
    extra = start(["-c", code])
    try:
        pids.append(extra.pid)
        assert str(late) not in slow.sample().writing  # still the cached list
        assert slow.open_files_interval >= 60
        assert str(late) in fast.sample().writing
        assert before.writing == slow.sample().writing
    finally:
        stop(extra)


def test_exited_target_reports_error_not_exception() -> None:
    proc = start(["-c", "print('READY', flush=True)"])
    proc.wait()
    probe = StorageProbe(proc.pid, open_files_min_interval=0)
    s = probe.sample()
    assert s.mounts == () and s.writing == ()
    assert s.error is not None and str(proc.pid) in s.error
    stop(proc)


# ----------------------------------------------- fake /proc and /sys trees


def _fake_sys(root: Path) -> Path:
    sys_root = root / "sys"
    (sys_root / "block" / "nvme0n1" / "queue").mkdir(parents=True)
    (sys_root / "block" / "nvme0n1" / "queue" / "scheduler").write_text(
        "none [mq-deadline] kyber bfq\n"
    )
    (sys_root / "block" / "nvme0n1" / "nvme0n1p2").mkdir()
    (sys_root / "block" / "sdb" / "queue").mkdir(parents=True)
    (sys_root / "block" / "sdb" / "queue" / "scheduler").write_text("[bfq] none\n")
    (sys_root / "block" / "sdb" / "sdb1").mkdir()
    return sys_root


def _diskstats(nvme_read_sectors: int, nvme_write_sectors: int, io_ticks: int) -> str:
    # major minor name reads rmerged rsect rms writes wmerged wsect wms inflight io_ticks wticks
    return (
        f" 259 0 nvme0n1 10 0 {nvme_read_sectors} 5 20 0 {nvme_write_sectors} 7 0 {io_ticks} 9\n"
        f" 259 2 nvme0n1p2 10 0 {nvme_read_sectors} 5 20 0 {nvme_write_sectors} 7 0 {io_ticks} 9\n"
        "   8 16 sdb 1 0 8 1 1 0 8 1 0 1 2\n"
        "   7 0 loop0 0 0 0 0 0 0 0 0 0 0 0\n"
    )


def test_fake_trees_classify_mounts_and_compute_rates(tmp_path: Path) -> None:
    """Real files opened by a real child, mounts/diskstats/sys read from fakes."""
    base = Path(os.path.realpath(tmp_path))  # open_files reports resolved paths
    dirs = {name: base / name for name in ("local", "nfs", "ssh", "shm", "with space")}
    for d in dirs.values():
        d.mkdir()
    proc_root = base / "proc"
    (proc_root / "self").mkdir(parents=True)
    esc = str(dirs["with space"]).replace(" ", "\\040")
    (proc_root / "self" / "mounts").write_text(
        "/dev/vda / ext4 rw 0 0\n"
        f"/dev/nvme0n1p2 {dirs['local']} ext4 rw,relatime 0 0\n"
        f"fileserver:/export {dirs['nfs']} nfs4 rw,vers=4.2 0 0\n"
        f"me@host:/data {dirs['ssh']} fuse.sshfs rw 0 0\n"
        f"tmpfs {dirs['shm']} tmpfs rw 0 0\n"
        f"/dev/sdb1 {esc} xfs rw 0 0\n"
    )
    (proc_root / "diskstats").write_text(_diskstats(0, 0, 0))
    sys_root = _fake_sys(base)

    proc = start([workload("probe_writer.py"), str(dirs["local"]), *map(str, dirs.values())])
    try:
        probe = StorageProbe(
            proc.pid,
            lambda: [proc.pid],
            proc_root=str(proc_root),
            sys_root=str(sys_root),
            open_files_min_interval=0,
        )
        t0 = time.monotonic()
        probe.sample()
        time.sleep(0.3)
        # 2048 sectors read (1 MiB), 4096 written (2 MiB), 150 ms busy
        (proc_root / "diskstats").write_text(_diskstats(2048, 4096, 150))
        s = probe.sample()
        elapsed_max = time.monotonic() - t0
    finally:
        stop(proc)

    by_mp = {m.mountpoint: m for m in s.mounts}
    local = by_mp[str(dirs["local"])]
    assert local.fstype == "ext4" and not local.is_network
    assert local.scheduler == "mq-deadline"  # partition nvme0n1p2 -> disk nvme0n1
    assert local.open_files == 4  # data.bin, train.log, ckpt.pt, shard.bin
    assert local.read_bps is not None and local.write_bps is not None
    assert 2**20 / elapsed_max <= local.read_bps <= 2**20 / 0.3
    assert 2 * 2**20 / elapsed_max <= local.write_bps <= 2 * 2**20 / 0.3
    assert local.busy_percent is not None
    assert 150 / (elapsed_max * 1000) * 100 <= local.busy_percent <= 50.0

    nfs = by_mp[str(dirs["nfs"])]
    assert nfs.is_network and nfs.fstype == "nfs4" and nfs.device == "fileserver:/export"
    assert nfs.scheduler is None and nfs.read_bps is None and nfs.busy_percent is None
    assert by_mp[str(dirs["ssh"])].is_network
    shm = by_mp[str(dirs["shm"])]
    assert not shm.is_network and shm.scheduler is None and shm.write_bps is None
    spaced = by_mp[str(dirs["with space"])]  # \040 in the mount table decoded
    assert spaced.fstype == "xfs" and spaced.scheduler == "bfq"
    assert spaced.open_files == 1
    assert spaced.write_bps == 0.0  # sdb's counters did not move
    # the most-used mount comes first
    assert s.mounts[0].mountpoint == str(dirs["local"])
    assert s.writing == tuple(
        sorted([str(dirs["local"] / "ckpt.pt"), str(dirs["local"] / "train.log")])
    )


# ------------------------------------------------------------------ parsing


@pytest.mark.parametrize(
    ("fstype", "network"),
    [
        ("nfs", True),
        ("nfs4", True),
        ("cifs", True),
        ("smb3", True),
        ("smbfs", True),
        ("fuse.sshfs", True),
        ("fuse.s3fs", True),
        ("fuse.gcsfuse", True),
        ("9p", True),
        ("ceph", True),
        ("glusterfs", True),
        ("lustre", True),
        ("beegfs", True),
        ("gpfs", True),
        ("ext4", False),
        ("xfs", False),
        ("btrfs", False),
        ("tmpfs", False),
        ("overlay", False),
        ("nfsd", False),
        ("fuse.fuse-overlayfs", False),
        ("fuse.lxcfs", False),
        ("fuseblk", False),
    ],
)
def test_network_classification(fstype: str, network: bool) -> None:
    assert is_network_fstype(fstype) is network


@pytest.mark.parametrize(
    ("text", "active"),
    [
        ("none [mq-deadline] kyber bfq\n", "mq-deadline"),
        ("[none] mq-deadline\n", "none"),
        ("noop deadline [cfq]\n", "cfq"),
        ("none\n", "none"),
        ("", None),
        (None, None),
        ("none mq-deadline\n", None),
    ],
)
def test_scheduler_parsing(text: str | None, active: str | None) -> None:
    assert parse_scheduler(text) == active


def test_longest_prefix_respects_path_boundaries() -> None:
    mounts = parse_mounts(
        "/dev/vda / ext4 rw 0 0\n/dev/sdb /data xfs rw 0 0\nsrv:/x /data2 nfs rw 0 0\n"
        "/dev/sdc /data ext4 rw 0 0\n"
    )
    m = find_mount("/data2/file", mounts)
    assert m is not None and m.fstype == "nfs"
    m = find_mount("/data/file", mounts)
    assert m is not None and m.device == "/dev/sdc"  # the later mount hides the earlier
    m = find_mount("/datafile", mounts)
    assert m is not None and m.mountpoint == "/"
    assert find_mount("/x", []) is None


def test_block_disk_from_fake_sysfs(tmp_path: Path) -> None:
    sys_root = str(_fake_sys(tmp_path))
    assert block_disk("/dev/nvme0n1p2", None, sys_root) == "nvme0n1"
    assert block_disk("/dev/nvme0n1", None, sys_root) == "nvme0n1"
    assert block_disk("/dev/nvme9n9p9", None, sys_root) is None
    assert block_disk("overlay", None, sys_root) is None
    assert block_disk("tmpfs", str(tmp_path), sys_root) is None  # tmp_path: no fake dev link


def test_pseudo_filesystems_are_not_storage(tmp_path: Path) -> None:
    """A file kept open under /proc (as system monitors do) adds no mount."""
    code = (
        "import time; f = open('/proc/self/stat'); g = open('/proc/self/status');"
        " print('READY', flush=True); time.sleep(60)"
    )
    proc = start(["-c", code])
    try:
        files = psutil.Process(proc.pid).open_files()
        assert any(f.path.startswith("/proc/") for f in files)  # really open
        s = StorageProbe(proc.pid, open_files_min_interval=0).sample()
        assert all(m.fstype != "proc" for m in s.mounts)
        assert not any(m.mountpoint == "/proc" for m in s.mounts)
    finally:
        stop(proc)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_access_denied_is_an_error_not_an_exception(writer: subprocess.Popen[bytes]) -> None:
    def watch() -> StorageSample:
        return StorageProbe(writer.pid, open_files_min_interval=0).sample()

    s = run_unprivileged(watch)
    assert isinstance(s, StorageSample)
    assert s.mounts == () and s.writing == ()
    assert s.error is not None and "access denied" in s.error


def test_listing_interval_adapts_to_its_cost(writer: subprocess.Popen[bytes]) -> None:
    """The interval stretches until listing costs at most max_overhead of a core."""
    strict = StorageProbe(
        writer.pid, open_files_min_interval=1, open_files_max_interval=7, max_overhead=1e-9
    )
    strict.sample()
    assert strict.open_files_interval == 7  # any real cost / 1e-9 hits the cap
    relaxed = StorageProbe(writer.pid, open_files_min_interval=1, max_overhead=1.0)
    relaxed.sample()
    assert relaxed.open_files_interval == 1  # a listing costs far less than 1 s
