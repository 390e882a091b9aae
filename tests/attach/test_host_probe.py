"""HostProbe against the real machine, loaded by a real CPU-burning child."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator

import psutil
import pytest
from aitop.probes.host import HostProbe
from support.workloads.probe_children import start, stop


@pytest.fixture()
def burner() -> Iterator[subprocess.Popen[bytes]]:
    """A child spinning one core flat out."""
    proc = start(["-c", "print('READY', flush=True)\nwhile True: pass"])
    yield proc
    stop(proc)


def test_shape_and_ranges() -> None:
    probe = HostProbe()
    time.sleep(0.3)
    s = probe.sample()
    n = psutil.cpu_count(logical=True)
    assert s.cpu_count == n
    assert len(s.per_core_percent) == len(psutil.cpu_times(percpu=True))
    assert all(0.0 <= c <= 100.0 for c in s.per_core_percent)
    assert s.cpu_percent is not None and 0.0 <= s.cpu_percent <= 100.0
    assert s.iowait_percent is not None and 0.0 <= s.iowait_percent <= 100.0
    vm = psutil.virtual_memory()
    assert s.ram_total_bytes == vm.total
    assert s.ram_used_bytes is not None and 0 < s.ram_used_bytes <= vm.total
    sw = psutil.swap_memory()
    assert s.swap_total_bytes == sw.total
    assert s.swap_used_bytes is not None and 0 <= s.swap_used_bytes <= max(sw.total, 0)
    load = os.getloadavg()
    assert s.load1 is not None and s.load1 == pytest.approx(load[0], abs=2.0)
    assert s.load15 is not None and s.load15 >= 0
    assert s.t == pytest.approx(time.time(), abs=5)


def test_busy_child_shows_up_in_cpu(burner: subprocess.Popen[bytes]) -> None:
    probe = HostProbe()
    time.sleep(1.0)
    s = probe.sample()
    n = len(s.per_core_percent)
    assert n >= 1
    # one core spinning: overall at least ~ 1/n of the machine, one core near full
    assert s.cpu_percent is not None and s.cpu_percent >= 100.0 / n * 0.7
    assert max(s.per_core_percent) >= 70.0


def test_other_cpu_percent_callers_do_not_disturb_our_interval(
    burner: subprocess.Popen[bytes],
) -> None:
    """psutil.cpu_percent() keeps a global baseline; ours is private to the probe."""
    probe = HostProbe()
    time.sleep(1.0)
    psutil.cpu_percent(interval=None)  # someone else resets psutil's global baseline
    psutil.cpu_percent(percpu=True, interval=None)
    s = probe.sample()
    n = len(s.per_core_percent)
    # still measured over our full second with the burner running
    assert s.cpu_percent is not None and s.cpu_percent >= 100.0 / n * 0.7


def test_idle_interval_keeps_baseline() -> None:
    """Back-to-back calls either measure a real interval or say None, never 0/0."""
    probe = HostProbe()
    time.sleep(0.2)
    first = probe.sample()
    second = probe.sample()
    assert first.cpu_percent is not None
    if second.cpu_percent is None:
        assert second.per_core_percent == () and second.iowait_percent is None
        time.sleep(0.2)
        third = probe.sample()
        assert third.cpu_percent is not None
    else:
        assert len(second.per_core_percent) == len(first.per_core_percent)


def test_neighbours_are_named_redacted_and_a_pipe_partner_is_not_one() -> None:
    """Busy loops beside a job whose output goes into a pipe: one in a session of
    its own (with a secret on its command line), one in this process's group (as
    a batch script starts every command), one writing into the job's pipe too;
    all neighbours. The busy reader at the pipe's other end (``| tee log``) is
    part of the run."""
    import os
    import subprocess
    import sys

    from aitop.probes.neighbours import NeighbourScanner

    busy = [sys.executable, "-c", "while True: pass", "--api-key", "s3cr3t-value"]
    read_end, write_end = os.pipe()
    neighbour = subprocess.Popen(busy, start_new_session=True, stdin=subprocess.DEVNULL)
    sibling = subprocess.Popen(busy, stdin=subprocess.DEVNULL)
    co_writer = subprocess.Popen(busy, stdin=subprocess.DEVNULL, stdout=write_end)
    reader = subprocess.Popen(busy, stdin=read_end)
    # aitop itself and the job: processes of their own (this test process is the
    # busy loops' parent); the job writes into the pipe the reader reads.
    aitop = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)
    job = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL, stdout=write_end)
    os.close(read_end)
    os.close(write_end)
    procs = (neighbour, sibling, co_writer, reader, aitop, job)
    try:
        # Every busy process kept: other tests' jobs may be busier than these.
        scanner = NeighbourScanner(job_pid=job.pid, every_s=1.0, own_pid=aitop.pid, kept=50)
        assert scanner.others() is None, "no baseline to compare with yet"
        time.sleep(1.5)
        others = scanner.others()
    finally:
        for p in procs:
            p.kill()
            p.wait()
    assert others is not None
    by_pid = {p.pid: p for p in others}
    assert reader.pid not in by_pid, f"the reader of the job's pipe is part of the run: {others}"
    for busy_loop in (neighbour, sibling, co_writer):
        assert busy_loop.pid in by_pid, (busy_loop.args, others)
    assert by_pid[neighbour.pid].cores > 0.2
    command = by_pid[neighbour.pid].command
    assert "s3cr3t-value" not in command and "***" in command, command


def test_the_jobs_own_tree_is_no_neighbour_even_in_sessions_of_its_own() -> None:
    """torchrun starts each rank in a new session: the job's tree counts as the job."""
    import subprocess
    import sys

    from aitop.probes.neighbours import NeighbourScanner

    code = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
            "'while True: pass'], start_new_session=True).wait()")
    launcher = subprocess.Popen([sys.executable, "-c", code], start_new_session=True,
                                stdin=subprocess.DEVNULL)
    aitop = subprocess.Popen(["sleep", "30"], stdin=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        rank = psutil.Process(launcher.pid).children()[0].pid
        scanner = NeighbourScanner(job_pid=launcher.pid, every_s=1.0, own_pid=aitop.pid)
        time.sleep(1.5)
        others = scanner.others() or ()
    finally:
        for p in psutil.Process(launcher.pid).children(recursive=True):
            p.kill()
        for proc in (launcher, aitop):
            proc.kill()
            proc.wait()
    assert rank not in {p.pid for p in others}, others
