"""Synthetic Sessions built from the real sample dataclasses, and a rule driver.

A :class:`Job` describes a steady training job by a few knobs (GPU utilisation,
phase mix, DataLoader workers, host CPU and RAM, storage, ...). :func:`make_session`
turns it into one sample of every kind per second (ProcessTreeSample, HostSample,
GpuSample, StackWindow, StepCounterSample, StorageSample), stamped ``T0 + i``;
:func:`extend` appends more seconds of a different job to the same session, so a
test can make a problem appear and go away. :func:`drive` then evaluates a
:class:`RuleEngine` or :class:`Diagnoser` tick by tick through ``compute_metrics``,
exactly as the live evaluator does, with explicit ``now`` times (no sleeping).

Values are chosen so that thresholds can be hit exactly: percentages of memory
are built on a total of 10**11 bytes, phase counts on 1000 samples per window, and
clock-event reasons repeat with a period of 20 ticks, the length of the default
evaluation window, so a full window always holds the same share of them.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field, replace

from aitop.knowledge.base.findings import Citation, Diagnosis, Finding, Gain
from aitop.knowledge.base.rules import RuleEngine, RuleSet
from aitop.knowledge.judging.diagnosis import Diagnoser, Facts
from aitop.knowledge.metrics.private_memory import process_memory
from aitop.knowledge.metrics.straggler import RankView, judge_ranks
from aitop.knowledge.metrics.window import compute_metrics
from aitop.knowledge.metrics.words import compute_words
from aitop.probes.kernel.cgroups import CpuCgroup, MemoryLimit
from aitop.probes.kernel.shm import ShmUsage
from aitop.probes.ranks import Job as RankJob
from aitop.probes.ranks import RankProcess
from aitop.probes.samples import (
    EnvironmentInfo,
    GpuDevice,
    GpuProcess,
    GpuSample,
    HostSample,
    HotFrame,
    LogEvent,
    MountInfo,
    OtherProcess,
    ProcessInfo,
    ProcessTreeSample,
    StackWindow,
    StepCounterSample,
    StepShape,
    StorageSample,
    ThreadActivity,
    ThreadInfo,
)
from aitop.probes.session import PHASES, Session

from support.knowledge import HELPER_THREADS, HOLDS_BACK

#: 2023-11-14 22:13:20 UTC: every synthetic time is ``T0 + i`` (exact in a float).
T0 = 1_700_000_000.0
#: The live evaluator's default window.
WINDOW_S = 20.0
PID = 4242
#: Totals chosen so that ``100 * used / total`` is exact for round percentages.
MEM_TOTAL = 10**11
SWAP_TOTAL = 8 * 10**9
#: Clock-event reasons repeat with this period (ticks), the length of a window.
THROTTLE_PERIOD = 20

#: pytorch/examples' word_language_model's resident memory (MB), read once a second
#: from 5 s after its start: it swings 369-479 MB and does not grow.
WORD_LM_RSS_SWING = (
    428, 455, 455, 374, 442, 425, 472, 423, 441, 463, 423, 479, 421, 461, 461, 452, 399, 435,
    389, 439, 423, 428, 373, 422, 422, 439, 448, 447, 425, 440, 428, 390, 433, 474, 435, 410,
    443, 459, 376, 476, 419, 375, 424, 448, 369, 439, 412, 423, 411, 467, 437, 430, 386, 475,
    474, 408, 402, 457, 396, 441, 457, 424, 459, 377, 402, 411, 442, 400, 439, 450, 447,
)

#: A healthy job's phase mix: 2 % data wait, 78 % compute, 20 % other.
HEALTHY_PHASES: Mapping[str, float] = {
    "data_wait": 0.02,
    "forward": 0.30,
    "backward": 0.38,
    "optimizer": 0.10,
    "other": 0.20,
}


def mix(**given: float) -> dict[str, float]:
    """A phase mix: the named fractions, the rest split 3:5:2 over forward/backward/optimizer.

    ``mix(data_wait=0.3)`` is a job that waits for data 30 % of the time and
    computes the other 70 %. Fractions are rounded to thousandths (one sample of a
    1000-sample window).
    """
    unknown = set(given) - set(PHASES)
    if unknown:
        raise ValueError(f"unknown phases {sorted(unknown)}")
    out = {p: round(f, 3) for p, f in given.items()}
    rest = round(1.0 - sum(out.values()), 3)
    if rest < 0:
        raise ValueError(f"phase fractions add up to more than 1: {given}")
    compute = [p for p in ("forward", "backward", "optimizer") if p not in out]
    if compute == ["forward", "backward", "optimizer"]:
        out["forward"] = round(rest * 0.3, 3)
        out["backward"] = round(rest * 0.5, 3)
        out["optimizer"] = round(rest - out["forward"] - out["backward"], 3)
    elif rest > 0:
        out["other"] = round(out.get("other", 0.0) + rest, 3)
    return out


@dataclass(frozen=True)
class Job:
    """A steady training job. Every field is a knob; the defaults are a healthy GPU job."""

    # ---------------------------------------------------------------- GPU
    #: False: the GPU probe reports "no NVIDIA driver" (a CPU-only machine).
    gpu: bool = True
    gpu_util: float = 82.0
    #: Per-device utilisation (one device per entry, all used by the target);
    #: overrides ``gpu_util``.
    gpu_utils: tuple[float, ...] | None = None
    gpu_mem_used: float = 60.0  # % of capacity
    #: MB per second the target's GPU memory grows (a leak on the GPU).
    gpu_mem_growth_mb_s: float = 0.0
    #: SM % a process outside the job (PID 9999) takes on each GPU, out of its
    #: utilisation (the job's own processes have the rest).
    gpu_neighbour_sm: float = 0.0
    #: The GPU sample of tick i from elsewhere (the real probe on the fake NVML).
    gpu_source: Callable[[int], GpuSample] | None = None
    temperature_c: float = 65.0
    temperature_slowdown_c: float | None = 83.0
    gpu_power: float = 70.0  # % of the power limit
    sm_clock: float = 95.0  # % of the maximum SM clock
    pcie_rx_mb: float = 500.0
    #: Share of ticks with a thermal / power clock-event reason (multiples of 1/20).
    throttle_thermal: float = 0.0
    throttle_power: float = 0.0
    # ------------------------------------------------------------- stacks
    phases: Mapping[str, float] = field(default_factory=lambda: dict(HEALTHY_PHASES))
    #: (tick, phases): the stack windows from that tick on hold these phases
    #: instead (a first compilation that ends, a job that changes what it does).
    later_phases: tuple[int, Mapping[str, float]] | None = None
    #: py-spy samples per stack window (1000: fractions to a thousandth).
    samples_per_window: int = 1000
    #: One stack window every this many seconds (a window spans that long).
    stack_period_s: int = 1
    techniques: tuple[str, ...] = ("torch_compile",)
    #: Share of the training thread's samples with each technique's frames in
    #: them (StackWindow.technique_samples), e.g. {"optimizer_for_loop": 0.4};
    #: each one named is also among the techniques seen.
    technique_shares: Mapping[str, float] = field(default_factory=dict)
    #: The whole optimizer steps each stack window shows (StackWindow.step_shapes).
    step_shapes: tuple[StepShape, ...] = ()
    #: Runs of each blocky phase each stack window's sample order shows
    #: (StackWindow.phase_blocks); none: the samples came without their order.
    phase_blocks: tuple[tuple[str, int], ...] = ()
    #: The phases each window's ordered samples start and end in (StackWindow.ends):
    #: ("eval", "eval") makes one evaluation pass run on through every window.
    phase_ends: tuple[str, ...] = ()
    #: What the training thread's data waits were spent in (StackWindow.data_source).
    data_source: str | None = "dataloader"
    #: Share of samples the busiest other thread spends working (None: no other thread).
    producer_busy: float | None = None
    # ------------------------------------------------------- process tree
    workers: int = 4
    #: CPU of the busiest worker (% of a core); worker k runs ``5 * k`` lower.
    worker_cpu: float = 40.0
    #: % of a core each worker spends runnable but waiting for a CPU (schedstat);
    #: None: the kernel keeps no scheduler statistics (worker_blocked unknown).
    worker_cpu_wait: float | None = None
    main_cpu: float = 100.0
    #: % of a core the main process's main thread spends runnable but waiting
    #: for a CPU (schedstat; None: unknown).
    main_cpu_wait: float | None = None
    #: Threads of the main process that each keep >= 10 % of a core busy.
    busy_threads: int = 4
    #: Each thread's own CPU % (the training thread first), instead of
    #: ``main_cpu`` shared evenly by ``busy_threads``.
    thread_cpu: tuple[float, ...] = ()
    #: MB per second the main process's resident memory grows (a leak).
    rss_growth_mb_s: float = 0.0
    #: MB of resident memory, one per process sample in turn, added to the growth
    #: (memory that swings up and down).
    rss_swing_mb: tuple[float, ...] = ()
    #: MB the main process's RSS rises through each cycle of ``rss_period_s``
    #: ticks and gives back at its end (a sawtooth; 0: none).
    rss_tooth_mb: float = 0.0
    rss_period_s: int = 0
    #: Workers re-created every this many ticks (new PIDs, started anew); 0:
    #: persistent, started an hour before.
    worker_epoch_s: int = 0
    #: MB/s each worker's private memory (USS) grows: copy-on-read alone, or with
    #: ``worker_rss_growth_mb_s`` memory it allocates (its RSS grows too).
    worker_uss_growth_mb_s: float = 0.0
    worker_rss_growth_mb_s: float = 0.0
    #: Private memory (USS, PSS) is read every this many ticks (None: never).
    uss_every: int | None = 2
    #: Cores a process outside the job keeps busy (PID 4242, "python build.py").
    neighbour_cores: float = 0.0
    #: MB/s the main process reads from storage.
    read_mb_s: float = 1.0
    #: What the job's own files say of mixed precision (None: no environment read).
    amp_in_source: bool | None = None
    #: Names of the busy threads, first to last (the rest are "python").
    busy_thread_names: tuple[str, ...] = ()
    #: Ranks of the job on this machine (torchrun-style; 1: a single process).
    local_ranks: int = 1
    #: The other ranks' communication shares, as their own evaluators saw them:
    #: given, this session is judged as the lead rank of the whole job.
    peer_comm: tuple[float, ...] = ()
    #: The other ranks' own lead finding is ``job_stalled`` (they stand still).
    peers_stalled: bool = False
    #: Given: this session is a peer rank hearing the lead's judgement of the job,
    #: in which rank 0 waits this share of its time and its own lead finding is
    #: ``RANK0_CHECKPOINT`` (it alone saves checkpoints).
    hears_rank0_comm: float | None = None
    #: The hottest frame of the 'other' phase: (function, location, loop line).
    other_frame: tuple[str, str, str] | None = None
    #: Whether the pin-memory thread exists; None: thread names unreadable.
    pin_memory: bool | None = True
    #: False: no process-tree samples at all (the probe failed).
    process_tree: bool = True
    # --------------------------------------------------------------- host
    cpu_count: int = 16
    host_cpu: float = 40.0
    iowait: float | None = 1.0
    ram_used: float = 50.0  # %
    swap_used: float = 0.0  # % of swap_total
    swap_total: int = SWAP_TOTAL
    #: (limit, working set) in MB of a cgroup over the job (None: RAM is the limit).
    cgroup_memory_mb: tuple[float, float] | None = None
    #: The job's /dev/shm: its size and use (MB; size None: unreadable), and
    #: what the job's processes map there.
    shm_size_mb: float | None = 32000.0
    shm_used_mb: float = 100.0
    shm_mapped_mb: float = 20.0
    #: CPUs the CPU quota of the job's cgroup allows (None: no quota); every
    #: process of the job is in that one group.
    cpu_quota: float | None = None
    #: Share of the quota's periods it throttled the group, and the run-queue
    #: time it held back per second (s/s), steady over the session.
    throttled_share: float = 0.0
    throttled_cores: float = 0.0
    #: CPUs of the group's cpuset (None: every CPU of the machine).
    cpuset: int | None = None
    #: Cores the group's processes outside the job run, where the group keeps its
    #: usage with its quota (None: it does not, as with v1's cpuacct mounted apart).
    group_others: float | None = None
    # ------------------------------------------------------------ storage
    storage: bool = True
    network_fs: bool = False
    scheduler: str | None = "none"
    disk_busy: float | None = 10.0
    disk_read_mb: float = 100.0
    disk_write_mb: float = 0.0
    writing: tuple[str, ...] = ()
    # -------------------------------------------------------------- steps
    steps_per_s: float | None = 5.0
    #: The step readings of the first ticks come from another counter (name,
    #: value, ticks): a DataLoader's batch index read before the loop's own
    #: counter is found.
    early_reading: tuple[str, int, int] | None = None
    #: What the job's log or frames say at a tick: (tick, kind, subject, text)
    #: LogEvents (a recompilation seen, dynamo's recompile limit hit).
    events: tuple[tuple[int, str, str, str], ...] = ()
    #: New DataLoader workers (new PIDs) replace the last ones every this many
    #: ticks (persistent_workers=False over short epochs); 0: the same workers.
    worker_epoch_s: int = 0


# ------------------------------------------------------------------ samples


def phases_at(job: Job, i: int) -> Mapping[str, float]:
    """The phases of the stack window that ends at tick ``i``."""
    if job.later_phases is not None and i >= job.later_phases[0]:
        return job.later_phases[1]
    return job.phases


def _phase_counts(job: Job, i: int) -> dict[str, int]:
    """Integer counts out of ``samples_per_window`` (largest remainders); rest to 'other'."""
    n = job.samples_per_window
    phases = phases_at(job, i)
    wanted = round(sum(phases.values()) * n)
    if wanted > n:
        raise ValueError(f"phase fractions exceed 1: {dict(phases)}")
    exact = {p: f * n for p, f in phases.items()}
    counts = {p: int(v + 1e-9) for p, v in exact.items()}
    by_remainder = sorted(exact, key=lambda p: exact[p] - counts[p], reverse=True)
    for p in by_remainder[: max(wanted - sum(counts.values()), 0)]:
        counts[p] += 1
    counts["other"] = counts.get("other", 0) + n - sum(counts.values())
    return counts


def _throttled(i: int, share: float) -> bool:
    return i % THROTTLE_PERIOD < round(share * THROTTLE_PERIOD)


def gpu_sample(job: Job, i: int) -> GpuSample:
    t = T0 + i
    if job.gpu_source is not None:
        return job.gpu_source(i)
    if not job.gpu:
        return GpuSample(t=t, available=False, reason="no NVIDIA driver")
    reasons: list[str] = []
    if _throttled(i, job.throttle_thermal):
        reasons.append("hw_thermal_slowdown")
    if _throttled(i, job.throttle_power):
        reasons.append("sw_power_cap")
    utils = job.gpu_utils if job.gpu_utils is not None else (job.gpu_util,)
    devices = tuple(
        GpuDevice(
            index=k,
            name="NVIDIA H100 80GB HBM3",
            uuid=f"GPU-{k:08x}",
            util_percent=util,
            mem_util_percent=util * 0.5,
            mem_used_bytes=round(job.gpu_mem_used / 100 * MEM_TOTAL),
            mem_total_bytes=MEM_TOTAL,
            temperature_c=job.temperature_c,
            temperature_slowdown_c=job.temperature_slowdown_c,
            power_w=job.gpu_power * 7.0,
            power_limit_w=700.0,
            sm_clock_mhz=job.sm_clock * 20.0,
            sm_clock_max_mhz=2000.0,
            clock_event_reasons=tuple(reasons),
            pcie_tx_bps=1e8,
            pcie_rx_bps=job.pcie_rx_mb * 1e6,
            processes=(GpuProcess(PID + k, 10**9 + round(job.gpu_mem_growth_mb_s * 1e6 * i),
                                  max(util - job.gpu_neighbour_sm, 0.0), True, "python"),
                       *((GpuProcess(9999, 5 * 10**9, job.gpu_neighbour_sm, False, "python3"),)
                         if job.gpu_neighbour_sm else ())),
        )
        for k, util in enumerate(utils)
    )
    return GpuSample(t=t, available=True, devices=devices, driver_version="550.54.15")


def process_tree_sample(job: Job, i: int) -> ProcessTreeSample:
    busy = job.main_cpu / max(job.busy_threads, 1)
    shares = job.thread_cpu or tuple(busy for _ in range(job.busy_threads))
    threads = tuple(
        ThreadInfo(tid=PID + k, name=(job.busy_thread_names[k:k + 1] or ("python",))[0],
                   cpu_percent=shares[k] if k < len(shares) else 0.0)
        for k in range(12)
    )
    read = job.uss_every is not None and i % job.uss_every == 0
    tooth = (job.rss_tooth_mb * (i % job.rss_period_s) / job.rss_period_s
             if job.rss_period_s else 0.0)
    main_rss = (4 * 10**9 + round(job.rss_growth_mb_s * 1e6 * i) + round(tooth * 1e6)
                + round(job.rss_swing_mb[i % len(job.rss_swing_mb)] * 1e6
                        if job.rss_swing_mb else 0))
    main = ProcessInfo(
        pid=PID, ppid=1, role="main", name="python", cmdline=("python", "train.py"),
        status="running", cpu_percent=job.main_cpu, rss_bytes=main_rss, num_threads=12,
        read_bps=job.read_mb_s * 1e6, write_bps=job.disk_write_mb * 1e6, threads=threads,
        cpu_wait_percent=job.main_cpu_wait,
        uss_bytes=main_rss // 2 if read else None, pss_bytes=main_rss * 3 // 4 if read else None,
        started=T0 - 3600,
    )
    epoch = i // job.worker_epoch_s if job.worker_epoch_s else 0
    born = T0 + epoch * job.worker_epoch_s if job.worker_epoch_s else T0 - 3600
    age = i - epoch * job.worker_epoch_s  # ticks its memory has grown (since tick 0)
    worker_rss = 10**9 + round(job.worker_rss_growth_mb_s * 1e6 * age)
    worker_uss = 5 * 10**7 + round(job.worker_uss_growth_mb_s * 1e6 * age)
    workers = tuple(
        ProcessInfo(
            pid=PID + 100 + k + worker_generation(job, i) * 1000, ppid=PID, role="worker",
            name="pt_data_worker",
            cmdline=("python", "train.py"), status="running",
            cpu_percent=max(job.worker_cpu - 5.0 * k, 0.0), rss_bytes=worker_rss,
            num_threads=2,
            read_bps=job.disk_read_mb * 1e6 / max(job.workers, 1), write_bps=0.0,
            cpu_wait_percent=job.worker_cpu_wait,
            uss_bytes=min(worker_uss, worker_rss) if read else None,
            pss_bytes=worker_rss // 3 if read else None, started=born,
        )
        for k in range(job.workers)
    )
    processes = tuple(replace(p, cpu_group=JOB_GROUP) for p in (main, *workers))
    job_cores = sum(p.cpu_percent or 0.0 for p in processes) / 100.0
    return ProcessTreeSample(
        t=T0 + i, target_pid=PID, alive=True, processes=processes,
        pin_memory_thread=job.pin_memory, cpu_groups=(cpu_group(job, i, job_cores),),
        shm_mapped_bytes=round(job.shm_mapped_mb * 1e6) if read else None,
    )


#: The cgroup every synthetic job's processes are in.
JOB_GROUP = "/kubepods/pod7/job"
#: CFS periods a second: a 50 ms period, so that a quarter of them is whole.
PERIODS_PER_S = 20


def cpu_group(job: Job, i: int, job_cores: float) -> CpuCgroup:
    """The job's CPU cgroup at tick ``i``: its counters grow at the job's rates."""
    quota = job.cpu_quota
    return CpuCgroup(
        group=JOB_GROUP, version=2, quota_cpus=quota,
        limit_group=None if quota is None else JOB_GROUP,
        period_us=None if quota is None else 50_000,
        cpuset_count=job.cpuset or job.cpu_count,
        nr_periods=PERIODS_PER_S * i,
        nr_throttled=round(PERIODS_PER_S * i * job.throttled_share),
        throttled_us=round(job.throttled_cores * 1e6 * i),
        usage_us=(None if job.group_others is None
                  else round((job_cores + job.group_others) * 1e6 * i)))


def host_sample(job: Job, i: int) -> HostSample:
    return HostSample(
        t=T0 + i,
        cpu_count=job.cpu_count,
        cpu_percent=job.host_cpu,
        per_core_percent=(job.host_cpu,) * job.cpu_count,
        iowait_percent=job.iowait,
        ram_used_bytes=round(job.ram_used / 100 * MEM_TOTAL),
        ram_total_bytes=MEM_TOTAL,
        swap_used_bytes=round(job.swap_used / 100 * job.swap_total),
        swap_total_bytes=job.swap_total,
        load1=job.host_cpu / 100 * job.cpu_count,
        load5=None,
        load15=None,
        others=(OtherProcess(4242, "python build.py", job.neighbour_cores),)
        if job.neighbour_cores else (),
        memory_limit=None if job.cgroup_memory_mb is None else MemoryLimit(
            round(job.cgroup_memory_mb[0] * 1e6), round(job.cgroup_memory_mb[1] * 1e6),
            "/kubepods/burstable/pod7"),
        shm=None if job.shm_size_mb is None else ShmUsage(
            round(job.shm_size_mb * 1e6), round(job.shm_used_mb * 1e6)),
    )


def stack_window(job: Job, i: int) -> StackWindow:
    return StackWindow(
        t_start=T0 + i - job.stack_period_s,
        t_end=T0 + i,
        thread_name="MainThread",
        thread_id=str(PID),
        total_samples=job.samples_per_window,
        phase_counts=_phase_counts(job, i),
        techniques_seen=tuple(sorted({*job.techniques, *job.technique_shares})),
        technique_samples={t: round(f * job.samples_per_window)
                           for t, f in job.technique_shares.items()},
        technique_frames={t: "_single_tensor_adam (torch/optim/adam.py)"
                          if t == "optimizer_for_loop" else f"{t} (torch/x.py)"
                          for t in job.technique_shares},
        step_shapes=job.step_shapes,
        phase_blocks=dict(job.phase_blocks),
        ends=job.phase_ends,
        loop_frame="train (train.py)",
        hot_frames=() if job.other_frame is None else (HotFrame(
            "other", *job.other_frame[:2],
            count=round(phases_at(job, i).get("other", 0.0) * job.samples_per_window),
            caller=job.other_frame[2]),),
        data_source=job.data_source,
        other_threads=() if job.producer_busy is None else (
            ThreadActivity(
                thread_id=str(PID + 1), name="producer", samples=job.samples_per_window,
                busy_samples=round(job.producer_busy * job.samples_per_window),
                top_frame="produce (/job/train.py:12)",
            ),
        ),
    )


def storage_sample(job: Job, i: int) -> StorageSample:
    mount = MountInfo(
        mountpoint="/data",
        device="fileserver:/export/data" if job.network_fs else "/dev/nvme0n1p1",
        fstype="nfs4" if job.network_fs else "ext4",
        is_network=job.network_fs,
        scheduler=job.scheduler,
        read_bps=job.disk_read_mb * 1e6,
        write_bps=job.disk_write_mb * 1e6,
        busy_percent=job.disk_busy,
        open_files=12,
    )
    return StorageSample(t=T0 + i, mounts=(mount,), writing=job.writing)


def worker_generation(job: Job, i: int) -> int:
    """Which generation of workers runs at tick ``i`` (0 when they persist)."""
    return i // job.worker_epoch_s if job.worker_epoch_s else 0


def compiling_at(job: Job, i: int) -> bool:
    """Whether tick ``i``'s phases are mostly compiling: no step the counter shows."""
    return phases_at(job, i).get("compile", 0.0) >= 0.5


def step_sample(job: Job, i: int, held: int = 0) -> StepCounterSample:
    """The loop counter at tick ``i``: ``steps_per_s`` a tick, except the ``held``
    ticks so far spent mostly compiling."""
    if job.early_reading is not None and i < job.early_reading[2]:
        name, value, _ = job.early_reading
        return StepCounterSample(T0 + i, name, value, "train (train.py)")
    if job.steps_per_s is None:
        return StepCounterSample(T0 + i, None, None, error="no integer step counter")
    return StepCounterSample(T0 + i, "step", round(job.steps_per_s * (i - held)),
                             "train (train.py)")


# ----------------------------------------------------------------- sessions


#: The other ranks' comm shares of each session judged as a job's lead rank.
_PEERS: dict[int, tuple[tuple[float, ...], bool]] = {}
#: The lead rank's own wait each peer session hears the job's judgement with.
_HEARS: dict[int, float] = {}
#: Ticks each session's job spent mostly compiling (its counter stood still).
_HELD: dict[int, int] = {}


def extend(session: Session, job: Job, first: int, last: int) -> Session:
    """Add one second of ``job`` for each tick ``first..last`` (inclusive), at ``T0 + i``."""
    if job.peer_comm:
        _PEERS[id(session)] = (job.peer_comm, job.peers_stalled)
    if job.hears_rank0_comm is not None:
        _HEARS[id(session)] = job.hears_rank0_comm
    if job.local_ranks > 1:
        session.job = RankJob(PID, PID - 1, "env", tuple(
            RankProcess(PID + 1000 * r, r, r, job.local_ranks) for r in range(job.local_ranks)))
    if job.amp_in_source is not None:
        session.add(EnvironmentInfo(t=T0 + first, pid=PID, cmdline=("python", "train.py"),
                                    python_version="3.11.7", torch_version="2.13.0",
                                    mixed_precision_in_source=job.amp_in_source))
    if first <= 1:
        _HELD[id(session)] = 0  # a new session (ids of collected ones are reused)
    for i in range(first, last + 1):
        if job.process_tree:
            session.add(process_tree_sample(job, i))
        session.add(host_sample(job, i))
        session.add(gpu_sample(job, i))
        if i % job.stack_period_s == 0:
            session.add(stack_window(job, i))
        if compiling_at(job, i):
            _HELD[id(session)] = _HELD.get(id(session), 0) + 1
        session.add(step_sample(job, i, _HELD.get(id(session), 0)))
        for tick, kind, subject, text in job.events:
            if tick == i:
                session.add(LogEvent(T0 + i, kind, subject, text))
        if job.storage:
            session.add(storage_sample(job, i))
    return session


def make_session(duration_s: int = 40, **knobs: object) -> Session:
    """A session holding ``duration_s`` seconds (ticks 1..duration_s) of ``Job(**knobs)``."""
    job = Job(**knobs)  # type: ignore[arg-type]
    return extend(Session(PID), job, 1, duration_s)


def metrics_at(
    session: Session, tick: float, window_s: float = WINDOW_S
) -> dict[str, float | None]:
    """``compute_metrics`` for the window ending at ``T0 + tick``."""
    return compute_metrics(session, T0 + tick, window_s, HELPER_THREADS)


# ------------------------------------------------------------------ driving


@dataclass(frozen=True)
class Tick:
    """One evaluation: when, on what metrics, and which rules fired (id -> fired_at)."""

    now: float
    metrics: Mapping[str, float | None]
    firing: Mapping[str, float]
    diagnosis: Diagnosis | None = None


#: Rank 0's own lead finding when a peer hears the job (``hears_rank0_comm``).
RANK0_CHECKPOINT = Finding(
    id="checkpoint_stalls", severity="high", category="io",
    title="Saving checkpoints takes 35% of the time (every 4 steps, 0.6 s each)",
    why="", evidence=(), actions=("Save asynchronously: torch.distributed.checkpoint.async_save",),
    gain=Gain(None), expr="", source=Citation("optimize", "Checkpointing"), fired_at=T0)
#: A peer's lead finding when ``peers_stalled``: its own evaluator's job_stalled.
STALLED_PEER = Finding(
    id="job_stalled", severity="critical", category="stalled",
    title="Stalled: no progress for 30 s, the training thread standing in Queue.get (queue.py)",
    why="", evidence=(), actions=(), gain=Gain(None), expr="",
    source=Citation("optimize", "Profiling for Targeted Improvement"), fired_at=T0)


def evaluate(
    session: Session, evaluator: RuleEngine | Diagnoser, now: float, window_s: float = WINDOW_S
) -> Tick:
    """One evaluation at ``now`` through compute_metrics, as the live evaluator does it."""
    memory = process_memory(session, now)
    metrics = compute_metrics(session, now, window_s, HELPER_THREADS, memory)
    words = compute_words(session, now, window_s, memory)
    given = _PEERS.get(id(session))
    if given:
        peers, stalled = given
        cause = STALLED_PEER if stalled else None
        # As Evaluator._judge_job does with the other ranks' newest diagnoses.
        own = RankView("rank 0", PID, metrics.get("comm_share"), None, None, None)
        judgement = judge_ranks([own, *(RankView(f"rank {i + 1}", PID + 1000 * (i + 1), c,
                                               None, cause, "data wait 40%")
                                      for i, c in enumerate(peers))], HOLDS_BACK)
        metrics.update(judgement.metrics())
        words.update(judgement.words())
    heard = _HEARS.get(id(session))
    if heard is not None:
        # As Evaluator._hear_job does with the lead's newest judgement.
        own = RankView("rank 1", PID, metrics.get("comm_share"), None, None, None)
        rank0 = RankView("rank 0", PID - 1, heard, None, RANK0_CHECKPOINT, None)
        judgement = judge_ranks([rank0, own], HOLDS_BACK)
        metrics.update(judgement.seen_from(PID))
        words.update(judgement.words())
    if isinstance(evaluator, Diagnoser):
        diagnosis = evaluator.diagnose(metrics, now, words)
        return Tick(now, metrics, {f.id: f.fired_at for f in diagnosis.findings}, diagnosis)
    fired = evaluator.step(metrics, now)
    return Tick(now, metrics, {r.id: at for r, at in fired})


def run(
    evaluator: RuleEngine | Diagnoser,
    *segments: tuple[Job, int],
    evaluate_from: int = int(WINDOW_S),
    window_s: float = WINDOW_S,
    session: Session | None = None,
    only_at: Collection[int] | None = None,
) -> tuple[Session, list[Tick]]:
    """Play a timeline live: each ``(job, last_tick)`` runs from the previous segment's
    end (tick 1 for the first) to ``last_tick``; after each tick's samples are added,
    the evaluator runs at ``T0 + tick`` from ``evaluate_from`` on (by default once the
    window is full), so ``now`` is always the newest sample's time. ``only_at``: the
    ticks to evaluate at, where not every one is needed (a rule's hold is timed by
    ``now``, not by the ticks seen).
    """
    session = session if session is not None else Session(PID)
    out: list[Tick] = []
    tick = 1
    for job, last in segments:
        for i in range(tick, last + 1):
            extend(session, job, i, i)
            if i >= evaluate_from and (only_at is None or i in only_at):
                out.append(evaluate(session, evaluator, T0 + i, window_s))
        tick = last + 1
    return session, out


def diagnose_job(
    ruleset: RuleSet, duration_s: int = 32, facts: Facts | None = None, **knobs: object
) -> Diagnosis:
    """Run a steady ``Job(**knobs)`` live through a Diagnoser; the last diagnosis.

    Evaluation starts once the window is full (tick ``WINDOW_S``); the default
    duration outlasts the packaged ``for:`` of 10 s or less (give 40 for the 15-s ones).
    """
    diagnoser = Diagnoser(ruleset, facts or Facts())
    _session, result = run(diagnoser, (Job(**knobs), duration_s))  # type: ignore[arg-type]
    last = result[-1].diagnosis
    assert last is not None
    return last
