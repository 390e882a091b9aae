"""One cgroup reader for v1, v2 and the hybrid of both: quotas, throttling, usage,
cpusets, OOM kills and process counts, read from trees laid out as the kernel
lays them out (``support.kernel_tree``), units normalised, "no limit" blank."""

from __future__ import annotations

from pathlib import Path

import pytest
from aitop.probes.cpu_groups import read_cpu_groups
from aitop.probes.kernel.cgroups import (
    Cgroup,
    CgroupLine,
    CpuCgroup,
    MemoryLimit,
    cpu_limit,
    parse_cgroup,
    parse_cpu_list,
    read_cgroup,
    read_cpu_cgroup,
)
from support.kernel_tree import V1_NO_MEMORY_LIMIT, V1_NO_QUOTA, KernelTree

PID = 4242
JOB = "/kubepods/pod7/job"

#: A hybrid node's /proc/PID/cgroup, as systemd's default leaves it.
V1_LINES = (f"9:pids:{JOB}\n8:memory:{JOB}\n4:cpuset:{JOB}\n3:cpu,cpuacct:{JOB}\n"
            "1:name=systemd:/init.scope\n0::/init.scope\n")


def v1_job(tree: KernelTree, hierarchy: str = "cpu,cpuacct") -> None:
    tree.process(PID, cgroup=V1_LINES.replace("cpu,cpuacct", hierarchy.replace("/", ",")))
    tree.v1(hierarchy, "/", {"cpu.cfs_quota_us": V1_NO_QUOTA, "cpu.cfs_period_us": "100000"})
    tree.v1(hierarchy, "/kubepods/pod7", {"cpu.cfs_quota_us": "150000",
                                          "cpu.cfs_period_us": "100000"})
    tree.v1(hierarchy, JOB, {
        "cpu.cfs_quota_us": "50000",
        "cpu.cfs_period_us": "100000",
        "cpu.stat": "nr_periods 120\nnr_throttled 30\nthrottled_time 2500000000\n"
                    "nr_bursts 0\nburst_time 0\n",
        "cpuacct.usage": "7000000123",
    })
    tree.v1("cpuset", JOB, {"cpuset.cpus": "0-7", "cpuset.effective_cpus": "0-3,8\n"})
    tree.v1("memory", JOB, {
        "memory.limit_in_bytes": "2000000000",
        "memory.usage_in_bytes": "1500000000",
        "memory.stat": "total_inactive_file 500000000\n",
        "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
    })
    tree.v1("pids", JOB, {"pids.current": "17\n", "pids.max": "4096\n"})


def test_v1_limits_and_counters_in_their_own_units(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    v1_job(tree)
    group = read_cgroup(PID, *tree.roots)
    assert group == Cgroup(
        controllers=(("cpu", 1), ("cpuacct", 1), ("cpuset", 1), ("memory", 1), ("pids", 1)),
        cpu_quota_us=50_000, cpu_period_us=100_000,
        cpu_limit=0.5, cpu_limit_group=JOB,
        cpuset=(0, 1, 2, 3, 8),
        # throttled_time and cpuacct.usage are nanoseconds: read as microseconds.
        nr_periods=120, nr_throttled=30, throttled_us=2_500_000,
        cpu_usage_us=7_000_000,
        memory=MemoryLimit(2_000_000_000, 1_000_000_000, JOB),
        oom_kills=2, pids_current=17, pids_max=4096,
    )
    assert group.cpuset_count == 5
    assert group.version("cpu") == 1 and group.version("io") is None


def test_v1_hierarchies_mounted_apart_are_each_found(tmp_path: Path) -> None:
    """This box's layout: cpu and cpuacct each a hierarchy of its own."""
    tree = KernelTree(tmp_path)
    tree.process(PID, cgroup=f"3:cpuacct:{JOB}\n2:cpu:{JOB}\n0::/\n")
    tree.v1("cpu", JOB, {"cpu.cfs_quota_us": "250000", "cpu.cfs_period_us": "100000"})
    tree.v1("cpuacct", JOB, {"cpuacct.usage": "5000"})
    group = read_cgroup(PID, *tree.roots)
    assert (group.cpu_limit, group.cpu_usage_us) == (2.5, 5)
    assert group.controllers == (("cpu", 1), ("cpuacct", 1))


def v2_job(tree: KernelTree, *, hybrid: bool = False) -> None:
    tree.process(PID, cgroup="0::/user.slice/job.scope\n")
    tree.v2("/", {"cpuset.cpus.effective": "0-15\n"}, hybrid=hybrid)
    tree.v2("/user.slice", {"cpu.max": "max 100000", "cpuset.cpus.effective": "2-5\n"},
            hybrid=hybrid)
    tree.v2("/user.slice/job.scope", {
        "cpu.max": "150000 100000\n",
        "cpu.stat": "usage_usec 9000000\nuser_usec 8000000\nsystem_usec 1000000\n"
                    "nr_periods 40\nnr_throttled 12\nthrottled_usec 340000\n",
        "memory.max": "max",
        "memory.current": "600000000",
        "memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
        "pids.current": "9",
        "pids.max": "max",
    }, hybrid=hybrid)


def test_v2_limits_and_counters_and_max_as_no_limit(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    v2_job(tree)
    group = read_cgroup(PID, *tree.roots)
    assert group == Cgroup(
        controllers=(("cpu", 2), ("cpuset", 2), ("memory", 2), ("pids", 2)),
        cpu_quota_us=150_000, cpu_period_us=100_000,
        cpu_limit=1.5, cpu_limit_group="/user.slice/job.scope",
        # The job's group has no cpuset of its own: it runs on its parent's.
        cpuset=(2, 3, 4, 5),
        nr_periods=40, nr_throttled=12, throttled_us=340_000,
        cpu_usage_us=9_000_000,
        memory=None,  # memory.max "max" all the way up: RAM is the limit
        oom_kills=1, pids_current=9, pids_max=None,
    )


def test_a_hybrid_node_reads_v1_controllers_and_v2_usage_under_unified(
        tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    v2_job(tree, hybrid=True)
    # The same group, but its CPU controller in a v1 hierarchy (no cpuacct line:
    # usage is the unified hierarchy's, which keeps it for every group).
    tree.process(PID, cgroup="2:cpu:/job\n0::/user.slice/job.scope\n")
    tree.v1("cpu", "/job", {"cpu.cfs_quota_us": "50000", "cpu.cfs_period_us": "100000",
                            "cpu.stat": "nr_periods 10\nnr_throttled 4\n"
                                        "throttled_time 1000000\n"})
    group = read_cgroup(PID, *tree.roots)
    assert (group.cpu_limit, group.nr_throttled, group.throttled_us) == (0.5, 4, 1000)
    assert group.cpu_usage_us == 9_000_000
    # The unified hierarchy of a hybrid node has no controllers: no pids there.
    assert group.version("cpu") == 1 and group.version("pids") is None


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_the_tightest_quota_on_the_path_wins(tmp_path: Path, layout: str) -> None:
    """A pod of one CPU holding a container allowed three: one CPU it is."""
    tree = KernelTree(tmp_path)
    quotas = {"/": None, "/pod": (100_000, 100_000), "/pod/ctr": (300_000, 100_000)}
    if layout == "v1":
        tree.process(PID, cgroup="2:cpu:/pod/ctr\n")
        for group, quota in quotas.items():
            tree.v1("cpu", group, {
                "cpu.cfs_quota_us": str(quota[0]) if quota else V1_NO_QUOTA,
                "cpu.cfs_period_us": str(quota[1]) if quota else "100000"})
    else:
        tree.process(PID, cgroup="0::/pod/ctr\n")
        for group, quota in quotas.items():
            tree.v2(group, {"cpu.max": f"{quota[0]} {quota[1]}" if quota else "max 100000"})
    group = read_cgroup(PID, *tree.roots)
    assert (group.cpu_quota_us, group.cpu_limit, group.cpu_limit_group) == (
        300_000, 1.0, "/pod")
    assert cpu_limit(PID, *tree.roots) == 1.0


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_no_quota_anywhere_is_no_limit_of_a_found_controller(
        tmp_path: Path, layout: str) -> None:
    tree = KernelTree(tmp_path)
    if layout == "v1":
        tree.process(PID, cgroup="2:cpu:/job\n")
        tree.v1("cpu", "/job", {"cpu.cfs_quota_us": V1_NO_QUOTA, "cpu.cfs_period_us": "100000"})
    else:
        tree.process(PID, cgroup="0::/job\n")
        tree.v2("/job", {"cpu.max": "max 100000"})
    group = read_cgroup(PID, *tree.roots)
    assert (group.cpu_quota_us, group.cpu_period_us, group.cpu_limit) == (None, 100_000, None)
    assert group.version("cpu") == (1 if layout == "v1" else 2)  # found: None is "no limit"
    assert cpu_limit(PID, *tree.roots) is None


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_missing_files_blank_their_fields(tmp_path: Path, layout: str) -> None:
    tree = KernelTree(tmp_path)
    if layout == "v1":
        tree.process(PID, cgroup=V1_LINES)
        for hierarchy in ("cpu,cpuacct", "cpuset", "memory", "pids"):
            tree.v1(hierarchy, JOB, {})
    else:
        tree.process(PID, cgroup="0::/job\n")
        tree.v2("/job", {})
    group = read_cgroup(PID, *tree.roots)
    assert group.controllers and all(value is None for name, value in _fields(group)
                                     if name != "controllers")


def test_nothing_to_read_is_an_empty_cgroup(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    assert read_cgroup(PID, *tree.roots) == Cgroup()  # no such process
    tree.process(PID, cgroup=V1_LINES)                 # no hierarchy mounted
    assert read_cgroup(PID, *tree.roots) == Cgroup()
    v1_job(tree)
    tree.process(PID, cgroup=V1_LINES.replace(JOB, f"/../..{JOB}"))
    assert read_cgroup(PID, *tree.roots) == Cgroup()  # outside the reader's namespace


def test_memory_keeps_its_working_set_rule_in_the_full_reading(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    v1_job(tree)
    tree.v1("memory", "/kubepods", {"memory.limit_in_bytes": V1_NO_MEMORY_LIMIT,
                                    "memory.usage_in_bytes": "1"})
    assert read_cgroup(PID, *tree.roots).memory == MemoryLimit(2_000_000_000, 1_000_000_000, JOB)


def test_cgroup_lines_and_cpu_lists_parse() -> None:
    assert parse_cgroup("4:cpu,cpuacct:/a\n0::/b\nnonsense\n1:name=systemd:\n") == (
        CgroupLine("4", ("cpu", "cpuacct"), "/a"), CgroupLine("0", (), "/b"),
        CgroupLine("1", ("name=systemd",), "/"))
    assert parse_cgroup("0::/b\n")[0].unified
    assert parse_cgroup("0::/../x\n")[0].outside_namespace
    assert parse_cpu_list("0-3,8,10-11\n") == (0, 1, 2, 3, 8, 10, 11)
    assert parse_cpu_list("\n") == ()
    assert parse_cpu_list("0-a") is None and parse_cpu_list(None) is None


def _fields(group: Cgroup) -> list[tuple[str, object]]:
    return [(name, getattr(group, name)) for name in Cgroup.__dataclass_fields__]


# ------------------------------------------------------------ the CPU reading


def test_the_cpu_reading_counts_the_group_whose_quota_binds(tmp_path: Path) -> None:
    """v1 with cpu and cpuacct together: the job's own quota (0.5) is the tightest."""
    tree = KernelTree(tmp_path)
    v1_job(tree)
    assert read_cpu_cgroup(PID, *tree.roots) == CpuCgroup(
        group=JOB, version=1, quota_cpus=0.5, limit_group=JOB, period_us=100_000,
        cpuset_count=5, nr_periods=120, nr_throttled=30, throttled_us=2_500_000,
        usage_us=7_000_000)


@pytest.mark.parametrize("layout", ["v1", "v2"])
def test_a_pods_quota_over_its_container_is_where_the_throttling_is_counted(
        tmp_path: Path, layout: str) -> None:
    """A pod of one CPU holding a container allowed three: the pod throttles."""
    tree = KernelTree(tmp_path)
    pod = "nr_periods 50\nnr_throttled 40\n"
    ctr = "nr_periods 50\nnr_throttled 0\n"
    if layout == "v1":
        tree.process(PID, cgroup="2:cpu,cpuacct:/pod/ctr\n")
        tree.v1("cpu,cpuacct", "/pod", {
            "cpu.cfs_quota_us": "100000", "cpu.cfs_period_us": "100000",
            "cpu.stat": pod + "throttled_time 3000000000\n", "cpuacct.usage": "8000000000"})
        tree.v1("cpu,cpuacct", "/pod/ctr", {
            "cpu.cfs_quota_us": "300000", "cpu.cfs_period_us": "100000",
            "cpu.stat": ctr + "throttled_time 0\n", "cpuacct.usage": "1000"})
    else:
        tree.process(PID, cgroup="0::/pod/ctr\n")
        tree.v2("/pod", {"cpu.max": "100000 100000",
                         "cpu.stat": "usage_usec 8000000\n" + pod + "throttled_usec 3000000\n"})
        tree.v2("/pod/ctr", {"cpu.max": "300000 100000",
                             "cpu.stat": "usage_usec 1\n" + ctr + "throttled_usec 0\n"})
    group = read_cpu_cgroup(PID, *tree.roots)
    assert group is not None
    assert (group.group, group.limit_group, group.counted_group) == ("/pod/ctr", "/pod", "/pod")
    assert (group.quota_cpus, group.nr_throttled, group.throttled_us, group.usage_us) == (
        1.0, 40, 3_000_000, 8_000_000)


def test_usage_of_a_cpuacct_hierarchy_mounted_apart_is_not_the_quota_groups(
        tmp_path: Path) -> None:
    """This box's layout: cpuacct's groups need not hold the cpu group's processes."""
    tree = KernelTree(tmp_path)
    tree.process(PID, cgroup=f"3:cpuacct:/\n2:cpu:{JOB}\n0::/\n")
    tree.v1("cpu", JOB, {"cpu.cfs_quota_us": "100000", "cpu.cfs_period_us": "100000",
                         "cpu.stat": "nr_periods 9\nnr_throttled 9\nthrottled_time 900000\n"})
    tree.v1("cpuacct", "/", {"cpuacct.usage": "123456789"})
    group = read_cpu_cgroup(PID, *tree.roots)
    assert group is not None and group.usage_us is None
    assert (group.quota_cpus, group.nr_throttled, group.throttled_us) == (1.0, 9, 900)


def test_no_quota_counts_the_processs_own_group(tmp_path: Path) -> None:
    tree = KernelTree(tmp_path)
    tree.process(PID, cgroup="0::/job\n")
    tree.v2("/job", {"cpu.max": "max 100000", "cpu.stat": "usage_usec 5\nnr_periods 0\n"})
    group = read_cpu_cgroup(PID, *tree.roots)
    assert group == CpuCgroup(group="/job", version=2, nr_periods=0, usage_us=5)
    assert read_cpu_cgroup(PID + 1, *tree.roots) is None  # no such process


def test_every_process_of_a_job_is_placed_and_each_group_read_once(tmp_path: Path) -> None:
    """The main process and a worker share a container; a second worker is elsewhere."""
    tree = KernelTree(tmp_path)
    for pid, group in ((PID, "/ctr"), (PID + 1, "/ctr"), (PID + 2, "/other")):
        tree.process(pid, cgroup=f"0::{group}\n")
    tree.v2("/ctr", {"cpu.max": "100000 100000", "cpu.stat": "nr_periods 4\n"})
    tree.v2("/other", {"cpu.max": "max 100000"})
    placed, groups = read_cpu_groups((PID, PID + 1, PID + 2, PID + 3), *tree.roots)
    assert placed == {PID: "/ctr", PID + 1: "/ctr", PID + 2: "/other"}
    assert [(g.group, g.quota_cpus) for g in groups] == [("/ctr", 1.0), ("/other", None)]
