"""ProcessTreeProbe against real trainers: fork, spawn and forkserver DataLoaders.

Every process here is real and started by the test; nothing is mocked. The three
trainers start together (module fixture) because importing torch dominates the
run time.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest
from aitop.probes.process_tree import (
    PIN_THREAD_NAME,
    WORKER_NAME,
    Node,
    ProcessTreeProbe,
    TargetNotFound,
    classify_roles,
    torch_names_workers,
)
from aitop.probes.samples import ProcessTreeSample
from support.workloads.probe_children import (
    poll,
    run_unprivileged,
    start,
    stop,
    wait_ready,
    wait_until,
    workload,
)

CONTEXTS = ("fork", "spawn", "forkserver")


@pytest.fixture(scope="module")
def trainers() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """One real trainer per start method, each with 2 DataLoader workers.

    All three are started before any is awaited so their torch imports overlap.
    The fork trainer asks for ``pin_memory=True`` to test what really happens on
    a CPU-only machine.
    """
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for ctx in CONTEXTS:
            args = [workload("probe_loader.py"), "--ctx", ctx, "--token=s3cret"]
            if ctx == "fork":
                args.append("--pin")
            procs[ctx] = start(args, ready=None)
        for proc in procs.values():
            wait_ready(proc)
        yield procs
    finally:
        for proc in procs.values():
            stop(proc)


def settled(probe: ProcessTreeProbe, workers: int = 2) -> ProcessTreeSample:
    """Sample until the tree shows the expected workers, then once more 0.5 s later
    so that CPU and I/O rates cover a real interval."""
    wait_until(lambda: len(probe.sample().workers) == workers, timeout=30)
    time.sleep(0.5)
    return probe.sample()


def test_missing_pid_raises_target_not_found() -> None:
    with open("/proc/sys/kernel/pid_max") as fh:
        beyond = int(fh.read()) + 1  # can never be a live PID
    with pytest.raises(TargetNotFound) as info:
        ProcessTreeProbe(beyond)
    assert str(beyond) in str(info.value)
    assert "\n" not in str(info.value)
    assert info.value.pid == beyond
    for bad in (0, -5):
        with pytest.raises(TargetNotFound):
            ProcessTreeProbe(bad)


def test_fork_workers_are_recognised(trainers: dict[str, subprocess.Popen[bytes]]) -> None:
    proc = trainers["fork"]
    s = settled(ProcessTreeProbe(proc.pid, popen=proc))
    assert s.alive and s.error is None
    main = s.main
    assert main is not None and main.pid == proc.pid and main.role == "main"
    assert len(s.workers) == 2
    for w in s.workers:
        assert w.name == WORKER_NAME
        assert w.ppid == proc.pid
        # fork workers share the trainer's command line
        assert w.cmdline == main.cmdline
    assert {p.role for p in s.processes} == {"main", "worker"}


def test_spawn_workers_are_recognised(trainers: dict[str, subprocess.Popen[bytes]]) -> None:
    proc = trainers["spawn"]
    s = settled(ProcessTreeProbe(proc.pid))
    assert len(s.workers) == 2
    for w in s.workers:
        assert w.ppid == proc.pid
        assert any("multiprocessing.spawn" in a for a in w.cmdline)
    # the multiprocessing resource tracker is a descendant but no worker
    others = [p for p in s.processes if p.role == "child"]
    assert others and all("resource_tracker" in " ".join(p.cmdline) for p in others)


def test_forkserver_workers_hang_off_the_forkserver(
    trainers: dict[str, subprocess.Popen[bytes]],
) -> None:
    proc = trainers["forkserver"]
    s = settled(ProcessTreeProbe(proc.pid))
    assert len(s.workers) == 2
    by_pid = {p.pid: p for p in s.processes}
    for w in s.workers:
        parent = by_pid[w.ppid]  # the parent is in the tree...
        assert parent.pid != proc.pid  # ...but it is not the trainer
        assert parent.role == "child"
        assert "multiprocessing.forkserver" in " ".join(parent.cmdline)
        assert parent.ppid == proc.pid


def test_cpu_rss_threads_and_io(trainers: dict[str, subprocess.Popen[bytes]]) -> None:
    proc = trainers["fork"]
    probe = ProcessTreeProbe(proc.pid)
    first = probe.sample()
    # no interval yet: CPU and I/O rates are unknown, not zero
    assert all(p.cpu_percent is None for p in first.processes)
    assert all(p.read_bps is None and p.write_bps is None for p in first.processes)
    assert first.main is not None
    assert all(t.cpu_percent is None for t in first.main.threads)
    time.sleep(1.0)
    s = probe.sample()
    main = s.main
    assert main is not None
    assert main.cpu_percent is not None and main.cpu_percent > 0
    assert sum(w.cpu_percent or 0 for w in s.workers) > 0
    for p in s.processes:
        assert p.rss_bytes is not None and p.rss_bytes > 10 * 2**20
        assert p.rss_bytes == pytest.approx(psutil.Process(p.pid).memory_info().rss, rel=0.5)
        assert p.num_threads is not None and p.num_threads >= 1
        assert p.status in (
            psutil.STATUS_RUNNING,
            psutil.STATUS_SLEEPING,
            psutil.STATUS_DISK_SLEEP,
        )
        # root may read io counters, so rates exist (and are never negative)
        assert p.read_bps is not None and p.read_bps >= 0
        assert p.write_bps is not None and p.write_bps >= 0
    # the main thread is listed with its kernel name and a measured CPU share
    tids = {t.tid: t for t in main.threads}
    assert proc.pid in tids
    with open(f"/proc/{proc.pid}/task/{proc.pid}/comm") as fh:
        assert tids[proc.pid].name == fh.read().strip()
    # the trainer's thread count is stable once it runs: list and count agree
    assert len(main.threads) == main.num_threads
    assert sum(t.cpu_percent or 0 for t in main.threads) > 0
    assert all(t.cpu_percent is not None for t in main.threads if t.tid == proc.pid)
    # workers carry no thread list: that is for the main process only
    assert all(w.threads == () for w in s.workers)


def test_pin_memory_on_cpu_starts_no_pin_thread(
    trainers: dict[str, subprocess.Popen[bytes]],
) -> None:
    # The fork trainer asked for pin_memory=True, but without an accelerator
    # torch drops it: thread names are readable and none is pt_data_pin.
    s = settled(ProcessTreeProbe(trainers["fork"].pid))
    assert s.main is not None and s.main.threads
    assert PIN_THREAD_NAME not in {t.name for t in s.main.threads}
    assert s.pin_memory_thread is False


def test_pin_memory_thread_detected() -> None:
    proc = start([workload("probe_pin_thread.py")])
    try:
        s = ProcessTreeProbe(proc.pid).sample()
        assert s.pin_memory_thread is True
        assert s.main is not None
        assert PIN_THREAD_NAME in {t.name for t in s.main.threads}
    finally:
        stop(proc)


def test_pids_snapshot_covers_the_whole_tree(
    trainers: dict[str, subprocess.Popen[bytes]],
) -> None:
    proc = trainers["forkserver"]
    probe = ProcessTreeProbe(proc.pid)
    s = settled(probe)
    pids = probe.pids()
    assert pids[0] == proc.pid
    assert set(pids) == {p.pid for p in s.processes}
    expected = {proc.pid} | {c.pid for c in psutil.Process(proc.pid).children(recursive=True)}
    assert set(pids) == expected


def test_secret_argument_never_reaches_the_sample(
    trainers: dict[str, subprocess.Popen[bytes]],
) -> None:
    proc = trainers["fork"]
    with open(f"/proc/{proc.pid}/cmdline", "rb") as fh:
        assert b"--token=s3cret" in fh.read()
    s = settled(ProcessTreeProbe(proc.pid))
    assert "s3cret" not in repr(s)
    assert s.main is not None and "--token=***" in s.main.cmdline


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_unnamed_workers_fall_back_to_structure(method: str) -> None:
    """An older torch does not name workers; the structure still identifies them."""
    proc = start([workload("probe_legacy_workers.py"), method])
    try:
        probe = ProcessTreeProbe(proc.pid)
        s = poll(probe.sample, lambda x: len(x.workers) == 2)
        assert all(w.name != WORKER_NAME for w in s.workers)
        for p in s.processes:
            if p.role != "child":
                continue
            text = " ".join(p.cmdline)
            assert "resource_tracker" in text or "forkserver" in text
    finally:
        stop(proc)


def test_target_exiting_mid_session_reports_exit_status() -> None:
    code = "import sys; sys.stdin.readline(); sys.exit(3)"
    proc = start(["-c", code], ready=None)
    try:
        with_popen = ProcessTreeProbe(proc.pid, popen=proc)
        without = ProcessTreeProbe(proc.pid)
        assert with_popen.sample().alive
        assert without.sample().alive
        assert proc.stdin is not None
        proc.stdin.write(b"go\n")
        proc.stdin.flush()
        # Not yet reaped: the target is a zombie, which is not alive.
        gone = poll(without.sample, lambda x: not x.alive)
        assert gone.processes == () and gone.exit_status is None
        assert without.pids() == ()
        s = poll(with_popen.sample, lambda x: not x.alive)
        assert s.exit_status == 3
        assert s.processes == () and s.main is None
        # stays dead, cheaply, on later ticks
        assert with_popen.sample().exit_status == 3
        assert not without.sample().alive
    finally:
        stop(proc)


def test_exit_status_callback_and_killed_target() -> None:
    proc = start(["-c", "import time; time.sleep(60)"], ready=None)
    try:
        probe = ProcessTreeProbe(proc.pid, exit_status=proc.poll)
        assert probe.sample().alive
        proc.kill()
        s = poll(probe.sample, lambda x: not x.alive)
        assert s.exit_status == -9  # Popen's convention: minus the signal number
    finally:
        stop(proc)


def test_dying_child_leaves_the_tree() -> None:
    """A vanished descendant is dropped, never an exception (uses a child of our own)."""
    code = (
        "import subprocess, sys, time\n"
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(c.pid, flush=True)\n"
        "c.wait(); time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        child = int(proc.stdout.readline())
        probe = ProcessTreeProbe(proc.pid)
        assert {p.pid for p in probe.sample().processes} == {proc.pid, child}
        os.kill(child, 9)
        s = poll(probe.sample, lambda x: len(x.processes) == 1)
        assert s.alive and s.processes[0].pid == proc.pid
    finally:
        stop(proc)


def test_dead_unreaped_worker_is_shown_as_a_zombie() -> None:
    proc = start([workload("probe_dead_worker.py")])
    try:
        s = ProcessTreeProbe(proc.pid).sample()
        assert s.alive
        assert len(s.workers) == 1
        dead = s.workers[0]
        assert dead.status == psutil.STATUS_ZOMBIE and dead.name == WORKER_NAME
        assert dead.cmdline == ()  # a zombie has no command line left to read
    finally:
        stop(proc)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_access_denied_blanks_fields_not_the_probe() -> None:
    """Watching another user's process: readable fields stay, denied ones are None."""
    proc = start(["-c", "import time; print('READY', flush=True); time.sleep(60)"])
    try:

        def watch() -> ProcessTreeSample:
            probe = ProcessTreeProbe(proc.pid)
            probe.sample()
            time.sleep(0.3)
            return probe.sample()

        s = run_unprivileged(watch)
        assert isinstance(s, ProcessTreeSample)
        assert s.alive and s.main is not None
        # /proc/PID/io needs ptrace rights: denied, so blank, and said why
        assert s.main.read_bps is None and s.main.write_bps is None
        assert s.error is not None and "io" in s.error
        # world-readable fields are still there
        assert s.main.rss_bytes and s.main.rss_bytes > 0
        assert s.main.cpu_percent is not None
        assert s.main.cmdline[-1] != "" and s.main.name
        assert s.main.threads and s.pin_memory_thread is False
    finally:
        stop(proc)


def test_a_forked_producer_is_no_worker_once_torch_names_its_workers() -> None:
    """A multiprocessing.Process producer looks like an old torch's fork worker
    (same cmdline, forked, no children); a torch that names its workers says it
    is not one."""
    nodes = {
        1: Node(1, None, "python", ("python", "train.py")),
        2: Node(2, 1, "python", ("python", "train.py")),
    }
    assert classify_roles(1, nodes)[2] == "worker"  # torch < 2.1: the hint applies
    assert classify_roles(1, nodes, structural=False)[2] == "child"
    named = {**nodes, 3: Node(3, 1, WORKER_NAME, ("python", "train.py"))}
    assert classify_roles(1, named, structural=False)[3] == "worker"


@pytest.mark.parametrize(("version", "names"), [
    ("2.13.0+cpu", True), ("2.1.0", True), ("2.0.1+cu118", False), ("1.13.1", False),
    (None, False), ("", False),
])
def test_torch_names_its_workers_from_2_1(version: str | None, names: bool) -> None:
    assert torch_names_workers(version) is names


#: A parent that forks a child every 0.2 s and writes a page of each of its 200 MB
#: while the child lives: each write faults and the kernel copies the page, as a
#: training process does that starts its DataLoader workers again each epoch.
_FORKS_AND_WRITES = """
import os, time
buf = bytearray(200 * 2**20)
pages = len(range(0, len(buf), 4096))
buf[::4096] = b'\\x01' * pages
while True:
    pid = os.fork()
    if pid == 0:
        time.sleep(0.2)
        os._exit(0)
    buf[::4096] = b'\\x02' * pages
    os.waitpid(pid, 0)
"""
_COMPUTES = "while True: sum(range(10000))"


def test_kernel_time_tells_a_forking_writer_from_a_computing_loop() -> None:
    """The forks and page copies are the kernel's time on the process's behalf,
    which no stack sample of it shows; a loop that only computes has next to none."""
    procs = [subprocess.Popen([sys.executable, "-c", code])
             for code in (_FORKS_AND_WRITES, _COMPUTES)]
    try:
        time.sleep(1.0)
        probes = [ProcessTreeProbe(p.pid) for p in procs]
        assert all(pr.sample().main.kernel_percent is None  # type: ignore[union-attr]
                   for pr in probes)  # no interval yet
        time.sleep(2.0)
        forker, computer = (pr.sample().main for pr in probes)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    assert forker is not None and computer is not None
    assert forker.cpu_percent and forker.kernel_percent is not None
    assert computer.cpu_percent and computer.kernel_percent is not None
    assert forker.kernel_percent >= 0.3 * forker.cpu_percent, forker
    assert computer.kernel_percent <= 0.1 * computer.cpu_percent, computer
