"""Private memory and /dev/shm as the kernel counts them: the readers on a fake
/proc tree (and the real one), the cadence their cost sets, and the metrics and
findings they feed, on synthetic sessions."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aitop.knowledge import evaluator as evaluator_module
from aitop.knowledge.evaluator import Evaluator
from aitop.knowledge.metrics.private_memory import ProcessMemory, process_memory
from aitop.knowledge.metrics.window import compute_metrics
from aitop.knowledge.metrics.words import compute_words
from aitop.probes.kernel.shm import parse_shm_mappings, read_shm_mappings, read_shm_usage
from aitop.probes.private_memory import PrivateMemoryReader
from aitop.probes.session import Session
from support.kernel_tree import KernelTree
from support.knowledge import PACKAGED
from support.synthetic import PID, T0, diagnose_job, make_session

RULESET = PACKAGED.rules

ROLLUP = """55972e3b3000-7ffd4c43a000 ---p 00000000 00:00 0                  [rollup]
Rss:              800000 kB
Pss:              500000 kB
Shared_Clean:     100000 kB
Shared_Dirty:     400000 kB
Private_Clean:     50000 kB
Private_Dirty:    250000 kB
Swap:                  0 kB
"""
#: A worker's maps: a library, two batches' segments in /dev/shm (deleted, as
#: torch leaves them), one of them mapped in two pieces, and the heap.
MAPS = """\
7f0000000000-7f0000100000 r-xp 00000000 08:01 1234  /usr/lib/libtorch_cpu.so
7f1000000000-7f1000400000 rw-s 00000000 00:1a 901   /dev/shm/torch_1_2_0 (deleted)
7f1000400000-7f1000600000 rw-s 00000000 00:1a 902   /dev/shm/torch_1_3_0 (deleted)
7f1000600000-7f1000800000 rw-s 00200000 00:1a 902   /dev/shm/torch_1_3_0 (deleted)
55972e3b3000-55972e4b3000 rw-p 00000000 00:00 0     [heap]
"""


class Clocks:
    """A wall clock and a CPU clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 0.0
        #: CPU seconds each read costs (the page-table walk of a big process).
        self.cost = 0.0

    def wall(self) -> float:
        return self.now

    def thread(self) -> float:
        """Each call is a read's end (and the next one's start): ``cost`` later."""
        self.cpu += self.cost
        return self.cpu


def fake_tree(tmp_path: Path, pids: tuple[int, ...]) -> str:
    tree = KernelTree(tmp_path)
    for pid in pids:
        tree.process(pid, files={"smaps_rollup": ROLLUP, "maps": MAPS})
    return str(tree.proc)


def test_maps_give_the_jobs_dev_shm_segments_each_once() -> None:
    segments = parse_shm_mappings(MAPS)
    assert segments == {("00:1a", 901): 4 << 20, ("00:1a", 902): 4 << 20}
    own = read_shm_mappings(os.getpid())
    assert own is not None  # readable; this test process maps nothing there
    usage = read_shm_usage(os.getpid())
    assert usage is not None and usage.size_bytes > 0
    st = os.statvfs("/dev/shm")
    assert usage.size_bytes == st.f_blocks * st.f_frsize
    assert read_shm_usage(10**9) is None  # no such process: unknown, no error


def test_a_small_job_is_read_every_interval_and_a_big_one_as_its_cost_allows(
        tmp_path: Path) -> None:
    proc = fake_tree(tmp_path, (11, 12, 13, 14))
    clocks = Clocks()
    reader = PrivateMemoryReader(2.0, 0.02, proc_root=proc, clock=clocks.wall,
                                 cpu_clock=clocks.thread)
    first = reader.read((11, 12, 13))
    assert set(first.rollups) == {11, 12, 13}
    assert first.rollups[11].uss_bytes == 300000 * 1024
    assert first.shm_mapped_bytes == 8 << 20  # the job's segments, each once
    # Cheap reads: due again after the minimum interval (a tick landing a few ms
    # early still reads).
    clocks.now += 1.0
    assert reader.read((11, 12, 13)).rollups == {}
    clocks.now += 0.95
    assert set(reader.read((11, 12, 13)).rollups) == {11, 12, 13}
    # 40 ms a read (a 2-GB process), 3 processes at 2 % of a core: every 6 s.
    clocks.cost = 0.040
    clocks.now += 2.0
    reader.read((11, 12, 13))
    assert reader.spacing(0.040, 3) == pytest.approx(6.0)
    for wait in (2.0, 2.0):
        clocks.now += wait
        assert reader.read((11, 12, 13)).rollups == {}
    clocks.now += 2.0
    assert set(reader.read((11, 12, 13)).rollups) == {11, 12, 13}
    assert reader.cpu_spent_s == pytest.approx(0.040 * 6)
    # A new worker is read at once; one that is gone is forgotten.
    read = reader.read((11, 14))
    assert set(read.rollups) == {14}


def test_only_the_workers_are_read_at_their_pace(tmp_path: Path) -> None:
    """The training process (11) is read no sooner than every 30 s: its own growth
    shows in its RSS, and its reads are the dearest; the workers every 2 s."""
    proc = fake_tree(tmp_path, (11, 12, 13))
    clocks = Clocks()
    reader = PrivateMemoryReader(2.0, 0.02, others_interval_s=30.0, proc_root=proc,
                                 clock=clocks.wall, cpu_clock=clocks.thread)
    assert set(reader.read((11, 12, 13), workers={12, 13}).rollups) == {11, 12, 13}
    for _ in range(14):
        clocks.now += 2.0
        assert set(reader.read((11, 12, 13), workers={12, 13}).rollups) == {12, 13}
    clocks.now += 2.0
    assert set(reader.read((11, 12, 13), workers={12, 13}).rollups) == {11, 12, 13}


def test_a_process_that_cannot_be_read_blanks_its_fields(tmp_path: Path) -> None:
    proc = str(KernelTree(tmp_path).proc)
    reading = PrivateMemoryReader(2.0, 0.02, proc_root=proc).read((11,))
    assert reading.rollups == {} and reading.shm_mapped_bytes is None


def test_each_workers_private_memory_is_read_on_its_own_series() -> None:
    """Two workers copying 3 MB/s each, their RSS flat, read every other tick."""
    session = make_session(40, workers=2, worker_uss_growth_mb_s=3.0)
    procs = {p.pid: p for p in process_memory(session, T0 + 40)}
    workers = [p for p in procs.values() if p.role == "worker"]
    assert len(workers) == 2
    for w in workers:
        assert w.uss_growth == pytest.approx(180.0)
        assert w.rss_slope == pytest.approx(0.0)
    m = compute_metrics(session, T0 + 40, 20.0, ())
    assert m["workers_uss_growth"] == pytest.approx(360.0)
    assert m["workers_copied_share"] == pytest.approx(1.0)
    assert m["main_rss_growth"] == pytest.approx(0.0)
    # 1 GB RSS each, 50 MB + 3 MB/s x 40 s private: the rest they still share.
    assert m["workers_shared_mb"] == pytest.approx(2 * (1000.0 - 170.0))
    assert m["proc_pss_mb"] == pytest.approx(3000.0 + 2 * 1000.0 / 3)


def test_one_evaluation_reads_the_processes_memory_once_for_metrics_and_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluator reads a minute of every process's memory once and hands the
    reading to the metrics and the words; either, called alone, reads its own."""
    session = make_session(40, workers=2, worker_uss_growth_mb_s=3.0)
    reads: list[float] = []

    def counted(s: Session, now: float) -> tuple[ProcessMemory, ...]:
        reads.append(now)
        return process_memory(s, now)

    monkeypatch.setattr(evaluator_module, "process_memory", counted)
    Evaluator(session, PACKAGED).evaluate(T0 + 40)
    assert reads == [T0 + 40]
    # The reading given is the one used: none given, none of the workers' growth.
    assert compute_metrics(session, T0 + 40, 20.0, (), memory=())["workers_uss_growth"] is None
    assert compute_words(session, T0 + 40, 20.0, memory=())["worker_memory"] == ""
    own = compute_words(session, T0 + 40, 20.0)["worker_memory"]
    assert own == compute_words(session, T0 + 40, 20.0,
                                memory=process_memory(session, T0 + 40))["worker_memory"]
    assert "(+180 MB/min)" in own


def test_copy_on_read_is_named_with_each_worker_and_its_fix() -> None:
    d = diagnose_job(RULESET, 40, workers=2, worker_uss_growth_mb_s=3.0, cpu_count=8,
                     phases={"data_wait": 0.05, "forward": 0.3, "backward": 0.5,
                             "optimizer": 0.15})
    lead = d.findings[0]
    assert lead.id == "dataloader_copy_on_read", [f.id for f in d.findings]
    assert lead.title == ("Copy-on-read in the DataLoader workers: their private memory "
                          "grows 360 MB/min while the training process's holds")
    for k in range(2):
        assert f"PID {PID + 100 + k} 170 MB (+180 MB/min)" in lead.why, lead.why
    assert f"training process PID {PID} RSS 4000 MB (+0 MB/min)" in lead.why
    assert lead.actions[0].startswith("Keep the dataset's records in a few large buffers")
    assert "torch.frombuffer" in (lead.snippet or "")
    assert lead.gain.speedup is None


def test_a_cgroup_the_copies_will_not_fit_in_says_when_it_runs_out() -> None:
    """1.7 GB still shared against a 1-GB headroom: the copying reaches the limit."""
    small = make_session(40, workers=2, worker_uss_growth_mb_s=3.0,
                         cgroup_memory_mb=(8000.0, 7000.0))
    m = compute_metrics(small, T0 + 40, 20.0, ())
    assert m["mem_free_mb"] == pytest.approx(1000.0)
    assert m["cow_minutes_left"] == pytest.approx(1000.0 / 360.0)
    roomy = compute_metrics(make_session(40, workers=2, worker_uss_growth_mb_s=3.0),
                            T0 + 40, 20.0, ())
    assert roomy["cow_minutes_left"] is None  # all they share fits: no runway to tell


def test_dev_shm_nearly_full_names_its_size_and_the_way_out() -> None:
    d = diagnose_job(RULESET, 40, workers=2, shm_size_mb=64.0, shm_used_mb=60.0,
                     shm_mapped_mb=24.0)
    f = next(f for f in d.findings if f.id == "shm_nearly_full")
    assert f.title == ("/dev/shm is 94% full (4 MB left of 64 MB): a DataLoader worker whose "
                       "batch does not fit dies with a Bus error")
    assert "maps 24 MB there now" in f.why
    assert "--shm-size" in f.actions[0] and "--ipc=host" in f.actions[0]
