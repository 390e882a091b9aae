"""The tightest cgroup memory limit over a process, read from /proc and /sys trees
laid out as the kernel lays them out (v1 and v2)."""

from __future__ import annotations

from pathlib import Path

from aitop.probes.kernel.cgroups import MemoryLimit, memory_limit
from support.kernel_tree import V1_NO_MEMORY_LIMIT, KernelTree

PID = 4242


def test_v1_the_tightest_headroom_on_the_path_counts_and_page_cache_does_not(
        tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    tree.process(PID, cgroup="5:cpu:/\n4:memory:/kubepods/pod7/job\n0::/\n")
    tree.v1("memory", "/", {"memory.limit_in_bytes": V1_NO_MEMORY_LIMIT,
                            "memory.usage_in_bytes": "9000000000"})
    tree.v1("memory", "/kubepods/pod7", {
        "memory.limit_in_bytes": "2000000000",
        "memory.usage_in_bytes": "1500000000",
        "memory.stat": "cache 1\ntotal_inactive_file 300000000\n",
    })
    tree.v1("memory", "/kubepods/pod7/job", {"memory.limit_in_bytes": "3000000000",
                                             "memory.usage_in_bytes": "1400000000"})
    # The pod's 2 GB (0.8 GB left once 0.3 GB of cache is reclaimed) is tighter than
    # the job group's own 3 GB (1.6 GB left); the root's "no limit" limits nothing.
    assert memory_limit(PID, *tree.roots) == MemoryLimit(2_000_000_000, 1_200_000_000,
                                                         "/kubepods/pod7")


def test_v2_max_is_no_limit_and_memory_max_is(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    tree.process(PID, cgroup="0::/user.slice/job.scope\n")
    tree.v2("/user.slice", {"memory.max": "max", "memory.current": "5000000000"})
    tree.v2("/user.slice/job.scope", {
        "memory.max": "1000000000",
        "memory.current": "600000000",
        "memory.stat": "anon 500000000\ninactive_file 100000000\n",
    })
    assert memory_limit(PID, *tree.roots) == MemoryLimit(1_000_000_000, 500_000_000,
                                                         "/user.slice/job.scope")


def test_no_limit_anywhere_or_nothing_readable_is_none(tmp_path: Path) -> None:
    unlimited = KernelTree(tmp_path / "a")
    unlimited.process(PID, cgroup="4:memory:/job\n")
    unlimited.v1("memory", "/job", {"memory.limit_in_bytes": V1_NO_MEMORY_LIMIT,
                                    "memory.usage_in_bytes": "1000"})
    assert memory_limit(PID, *unlimited.roots) is None
    unreadable = KernelTree(tmp_path / "b")
    unreadable.process(PID, cgroup="0::/job\n")
    assert memory_limit(PID, *unreadable.roots) is None
    assert memory_limit(PID + 1, *unreadable.roots) is None   # no such process


def test_a_group_outside_the_readers_namespace_is_not_followed(tmp_path: Path) -> None:
    """A sidecar reading a job in another cgroup namespace sees ``/../..`` paths:
    walking them up would land on the reader's own root and report its limit."""
    tree = KernelTree(tmp_path)
    tree.process(PID, cgroup="0::/../../kubepods/pod1/ctr\n")
    tree.v2("/", {"memory.max": "1000000000", "memory.current": "1000"})
    assert memory_limit(PID, *tree.roots) is None
