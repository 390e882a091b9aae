"""The tightest cgroup memory limit over a process, read from /proc and /sys trees
laid out as the kernel lays them out (v1 and v2)."""

from __future__ import annotations

from pathlib import Path

import pytest
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


READER = 777


def pod_tree(base: Path, job: str, reader: str, reader_group: str) -> KernelTree:
    """A node's v2 tree as a node agent's pod mounts it: the job's pod limited to
    1 GB, the reader (PID ``READER``) in ``reader_group`` seeing itself at ``reader``."""
    tree = KernelTree(base)
    tree.process(PID, cgroup=job)
    tree.process(READER, cgroup=reader)
    tree.v2("/kubepods/podB", {"memory.max": "1000000000", "memory.current": "400000000"})
    tree.v2("/kubepods/podB/ctrB", {"memory.max": "max", "memory.current": "400000000"})
    tree.v2("/kubepods/podA", {"memory.max": "300000000", "memory.current": "1000"})
    tree.v2(f"/{reader_group}", {"cgroup.procs": f"12\n{READER}\n"})
    return tree


def test_a_pod_reads_another_pods_limit_through_the_nodes_tree(tmp_path: Path) -> None:
    """A node agent in its own cgroup namespace sees ``/../..`` paths; with the node's
    tree mounted it climbs from its own group, found there by its PID."""
    tree = pod_tree(tmp_path, "0::/../../podB/ctrB\n", "0::/\n", "kubepods/podA/ctrA")
    expected = MemoryLimit(1_000_000_000, 400_000_000, "/kubepods/podB")
    assert memory_limit(PID, *tree.roots, reader=READER) == expected
    # The reader moved into a subgroup of its namespace: the climb starts at its root.
    tree = pod_tree(tmp_path / "sub", "0::/../../podB/ctrB\n", "0::/agent\n",
                    "kubepods/podA/ctrA/agent")
    assert memory_limit(PID, *tree.roots, reader=READER) == expected


def test_the_node_tree_is_named_by_aitop_cgroup_root(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    tree = pod_tree(tmp_path, "0::/../../podB/ctrB\n", "0::/\n", "kubepods/podA/ctrA")
    monkeypatch.setenv("AITOP_CGROUP_ROOT", tree.roots[1])
    assert memory_limit(PID, tree.roots[0], reader=READER) == MemoryLimit(
        1_000_000_000, 400_000_000, "/kubepods/podB")


def test_a_climb_past_the_mounts_root_is_not_followed(tmp_path: Path) -> None:
    """The mount shows only the reader's namespace (its group at the mount's root):
    climbing out would read the reader's own limits, so nothing is read."""
    tree = pod_tree(tmp_path, "0::/../../../podB/ctrB\n", "0::/\n", "kubepods/podA/ctrA")
    assert memory_limit(PID, *tree.roots, reader=READER) is None
    tree = pod_tree(tmp_path / "own", "0::/../podB\n", "0::/\n", "")
    assert memory_limit(PID, *tree.roots, reader=READER) is None
    # The reader is nowhere in the tree: nothing to climb from.
    tree = pod_tree(tmp_path / "gone", "0::/../podB\n", "0::/\n", "kubepods/podA")
    (tree.cgroup / "kubepods" / "podA" / "cgroup.procs").write_text("12\n")
    assert memory_limit(PID, *tree.roots, reader=READER) is None
