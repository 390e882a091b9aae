"""The cgroup reader against the real kernel: a busy process in a real CPU-quota
group (v1 where the machine has it, v2 otherwise) is read as throttled to its quota."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil
from aitop.probes.kernel.cgroups import cpu_limit, read_cgroup
from support.cgroups import cpu_cgroup

#: How long the busy process may take to be throttled: a quota of half a CPU
#: throttles it in its first period it runs a full one, even on a loaded machine.
THROTTLED_WITHIN_S = 15.0


def test_a_busy_process_under_half_a_cpu_is_read_throttled() -> None:
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        with cpu_cgroup(0.5) as group:
            group.add(busy.pid)
            time.sleep(1.5)
            deadline = time.monotonic() + THROTTLED_WITHIN_S
            reading = read_cgroup(busy.pid)
            # Throttled time is added when a throttled period ends: it lags the count.
            while not reading.throttled_us and time.monotonic() < deadline:
                time.sleep(0.2)
                reading = read_cgroup(busy.pid)
            assert reading.version("cpu") == group.version, reading
            assert (reading.cpu_quota_us, reading.cpu_period_us) == (50_000, 100_000), reading
            assert reading.cpu_limit == 0.5 and reading.cpu_limit_group == group.name, reading
            assert cpu_limit(busy.pid) == 0.5
            assert reading.nr_periods and reading.nr_throttled, reading
            assert reading.throttled_us and reading.throttled_us > 0, reading
            # Usage is read too (the process's cpuacct group in v1, which the
            # quota's group need not be; the group's own cpu.stat in v2).
            assert reading.cpu_usage_us is not None and reading.cpu_usage_us > 0, reading
            busy.kill()
            busy.wait()
    finally:
        busy.kill()
        busy.wait()


def test_every_process_of_a_job_is_read_in_its_quota_group() -> None:
    """The process-tree probe reads the cgroup of the job and of a child it starts
    after joining the group (a DataLoader worker is born inside)."""
    from aitop.probes.process_tree import ProcessTreeProbe

    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys\n"
        "sys.stdin.readline()\n"
        "subprocess.Popen([sys.executable, '-c', 'while True: pass'])\n"
        "while True: pass\n")], stdin=subprocess.PIPE)
    try:
        with cpu_cgroup(0.5) as group:
            group.add(parent.pid)
            assert parent.stdin is not None
            parent.stdin.write(b"go\n")
            parent.stdin.flush()
            probe = ProcessTreeProbe(parent.pid)
            deadline = time.monotonic() + THROTTLED_WITHIN_S
            sample = probe.sample()
            # Throttled time is added when a throttled period ends: it lags the count.
            while (len(sample.processes) < 2 or not sample.cpu_groups[0].throttled_us) \
                    and time.monotonic() < deadline:
                time.sleep(0.3)
                sample = probe.sample()
            assert len(sample.processes) == 2, sample.processes
            assert {p.cpu_group for p in sample.processes} == {group.name}
            (reading,) = sample.cpu_groups
            assert (reading.group, reading.limit_group, reading.quota_cpus) == (
                group.name, group.name, 0.5)
            assert reading.version == group.version and reading.period_us == 100_000
            assert reading.nr_periods and reading.nr_throttled and reading.throttled_us
    finally:
        try:
            children = psutil.Process(parent.pid).children(recursive=True)
        except psutil.Error:
            children = []
        for child in children:
            child.kill()
        parent.kill()
        parent.wait()
