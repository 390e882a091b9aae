"""The /proc door: each format parsed once, from trees laid out as the kernel lays
them out (``support.kernel_tree``) and from this process's own entry."""

from __future__ import annotations

import os
from pathlib import Path

from aitop.probes.kernel.process_files import in_root, of_fd, read_bounded
from aitop.probes.kernel.procfs import (
    fd_is_regular_file,
    list_fds,
    list_pids,
    process_alive,
    read_children,
    read_cmdline,
    read_environ,
    read_fdinfo,
    read_link,
    read_nspid,
    read_rss_bytes,
    read_stat,
    read_task_stat,
    same_namespace,
)
from aitop.probes.kernel.smaps import SmapsRollup, parse_smaps_rollup, read_smaps_rollup
from support.kernel_tree import KernelTree

PID = 4242
# pid (comm) state ppid ... utime(11) stime(12) ... starttime(19), counted after comm.
STAT = f"{PID} (pt worker) (1)) S 1 " + " ".join(["0"] * 9) + " 70 30 " \
    + " ".join(["0"] * 6) + " 5000 0 0\n"

SMAPS_ROLLUP = """55972e3b3000-7ffd4c43a000 ---p 00000000 00:00 0                  [rollup]
Rss:                1760 kB
Pss:                 324 kB
Pss_Dirty:           116 kB
Shared_Clean:       1592 kB
Shared_Dirty:          8 kB
Private_Clean:        52 kB
Private_Dirty:       116 kB
Swap:                 12 kB
SwapPss:               0 kB
"""


def test_stat_splits_a_comm_holding_parentheses_and_names_its_fields(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    tree.process(PID, files={"stat": STAT, "task/4243/stat": STAT.replace(" S ", " R ")})
    stat = read_stat(PID, proc_root=str(tree.proc))
    assert stat is not None
    assert (stat.comm, stat.state, stat.ppid, stat.start_ticks) == ("pt worker) (1)", "S", 1,
                                                                    5000)
    task = read_task_stat(PID, 4243, str(tree.proc))
    assert task is not None and (task.name, task.ticks) == ("pt worker) (1)", 100)
    assert process_alive(PID, str(tree.proc))
    tree.process(PID, files={"stat": STAT.replace(" S ", " Z ")})
    assert not process_alive(PID, str(tree.proc))
    assert read_stat(PID + 1, proc_root=str(tree.proc)) is None


def test_environ_and_cmdline_are_parsed_once_into_their_shapes(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    tree.process(PID, cmdline=("python", "train.py", "--lr=1e-3"),
                 files={"environ": b"RANK=3\0PATH=/bin\0BROKEN\0BYTES=\xff\0"})
    assert read_environ(PID, str(tree.proc)) == {"RANK": "3", "PATH": "/bin", "BYTES": "\ufffd"}
    assert read_cmdline(PID, str(tree.proc)) == ("python", "train.py", "--lr=1e-3")
    # Unreadable is None (not an empty environment); no cmdline is no arguments.
    assert read_environ(PID + 1, str(tree.proc)) is None
    assert read_cmdline(PID + 1, str(tree.proc)) == ()
    # The real thing: this process's own start environment.
    own = read_environ(os.getpid())
    assert own is not None and own.get("PATH") == os.environ.get("PATH")


def test_status_children_statm_and_listings(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    tree.process(PID, files={"status": "Name:\tpython\nNSpid:\t5000\t7\n",
                             "statm": "1000 250 30 1 0 100 0\n",
                             "task/4242/children": "4300 4301 ",
                             "task/4243/children": ""})
    tree.process("self", files={"status": "Name:\taitop\n"})
    proc = str(tree.proc)
    assert read_nspid(PID, proc) == (5000, 7)
    assert read_nspid("self", proc) is None
    assert read_children(PID, 4242, proc) == [4300, 4301]
    assert read_children(PID, 4243, proc) == []
    assert read_children(PID, 4244, proc) is None  # no file: the caller falls back
    assert read_rss_bytes(PID, proc) == 250 * os.sysconf("SC_PAGE_SIZE")
    assert list_pids(proc) == [PID]


def test_descriptors_links_and_fdinfo(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    log = tmp_path / "train.log"
    log.write_text("iter 1\n")
    entry = tree.process(PID, files={"fdinfo/3": "pos:\t0\nflags:\t01\nmnt_id:\t15\n"})
    (entry / "fd").mkdir()
    os.symlink("pipe:[123]", entry / "fd" / "3")
    os.symlink(log, entry / "fd" / "1")
    os.symlink("/usr/bin/python3.11", entry / "exe")
    proc = str(tree.proc)
    assert list_fds(PID, proc) == [1, 3]
    assert read_link(PID, "fd", "3", proc_root=proc) == "pipe:[123]"
    assert read_fdinfo(PID, 3, proc) == {"pos": "0", "flags": "01", "mnt_id": "15"}
    assert fd_is_regular_file(PID, 1, proc) and not fd_is_regular_file(PID, 3, proc)
    assert read_link(PID, "exe", proc_root=proc) == "/usr/bin/python3.11"
    assert read_link(PID, "cwd", proc_root=proc) is None
    found = read_bounded(of_fd(PID, 1, proc), 1024)
    assert found is not None and found.data == b"iter 1\n"
    assert same_namespace(os.getpid(), "mnt") is True


def test_smaps_rollup_splits_memory_by_kind() -> None:
    kib = 1024
    assert parse_smaps_rollup(SMAPS_ROLLUP) == SmapsRollup(
        rss_bytes=1760 * kib, pss_bytes=324 * kib, uss_bytes=(52 + 116) * kib,
        shared_clean_bytes=1592 * kib, shared_dirty_bytes=8 * kib, swap_bytes=12 * kib)
    assert parse_smaps_rollup("Rss: 4 kB\n").uss_bytes is None  # no private lines: unknown
    own = read_smaps_rollup(os.getpid())
    assert own is not None and own.rss_bytes and own.pss_bytes and own.uss_bytes
    assert own.uss_bytes <= own.pss_bytes <= own.rss_bytes


def test_a_jobs_file_is_read_bounded_and_never_blocks(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    entry = tree.process(PID)
    (entry / "root" / "srv").mkdir(parents=True)
    script = entry / "root" / "srv" / "train.py"
    script.write_bytes(b"0123456789")
    path = in_root(PID, "/srv/train.py", str(tree.proc))
    whole = read_bounded(path, 10, whole=True)
    assert whole is not None and (whole.data, whole.start, whole.size) == (b"0123456789", 0, 10)
    assert read_bounded(path, 9, whole=True) is None        # too large to read whole
    tail = read_bounded(path, 4, offset=None)
    assert tail is not None and (tail.data, tail.start) == (b"6789", 6)
    skipped = read_bounded(path, 4, offset=3)              # more was written than is read
    assert skipped is not None and skipped.data == b"6789"
    new = read_bounded(path, 100, offset=8)
    assert new is not None and (new.data, new.start) == (b"89", 8)
    cut = read_bounded(path, 100, offset=50)                 # truncated since: from the start
    assert cut is not None and cut.start == 0 and cut.data == b"0123456789"
    os.mkfifo(entry / "root" / "srv" / "pipe")
    assert read_bounded(in_root(PID, "/srv/pipe", str(tree.proc)), 100) is None
    assert read_bounded(in_root(PID, "/srv", str(tree.proc)), 100) is None
    assert read_bounded(in_root(PID, "/srv/missing", str(tree.proc)), 100) is None
