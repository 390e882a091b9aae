"""Immutable samples: one per probe per tick.

Every probe returns one of these frozen dataclasses. Panels, rules, exports and
replays all read these and never live handles, so a session is nothing more than
lists of samples: exactly what a snapshot file writes and a replay reads back.

A value that could not be read is ``None`` (one field blank, never a whole probe).
Times ``t`` are wall-clock seconds since the epoch (``time.time()``), so that a
recording can be lined up with the training job's own logs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .kernel.cgroups import CpuCgroup, MemoryLimit
from .kernel.shm import ShmUsage

# ---------------------------------------------------------------- processes


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    """One OS thread of a process (names come from /proc/PID/task/TID/comm)."""

    tid: int
    name: str
    cpu_percent: float | None


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """One process of the target tree at one tick.

    ``role`` is ``main`` for the target itself, ``worker`` for a recognised
    DataLoader worker, ``child`` for any other descendant.
    """

    pid: int
    ppid: int | None
    role: str
    name: str
    cmdline: tuple[str, ...]
    status: str | None
    cpu_percent: float | None
    rss_bytes: int | None
    num_threads: int | None
    read_bps: float | None
    write_bps: float | None
    threads: tuple[ThreadInfo, ...] = ()
    #: % of a core its main thread spent runnable but waiting for a CPU
    #: (/proc/PID/schedstat): contention, as opposed to sleeping on I/O.
    cpu_wait_percent: float | None = None
    #: % of a core the kernel spent working on its behalf (system time: forks,
    #: page faults, the copies a write to a page shared since a fork makes, system
    #: calls), part of ``cpu_percent``.
    kernel_percent: float | None = None
    #: Its private memory (USS: pages no other process maps) and its
    #: proportional share (PSS: shared pages divided among their mappers), from
    #: ``smaps_rollup``; read only on the ticks its cadence allows
    #: (``private_memory.py``), None on the others.
    uss_bytes: int | None = None
    pss_bytes: int | None = None
    #: When it started (seconds since the epoch): a worker re-created each
    #: epoch is young, a persistent one as old as the job.
    started: float | None = None
    #: Its group in the cpu cgroup hierarchy (``CpuCgroup.group`` of one of the
    #: tree sample's ``cpu_groups``); None where unread.
    cpu_group: str | None = None


@dataclass(frozen=True, slots=True)
class ProcessTreeSample:
    """The target and its descendants at one tick."""

    t: float
    target_pid: int
    alive: bool
    processes: tuple[ProcessInfo, ...]
    #: ``True``/``False`` when the main process has/lacks a ``pt_data_pin`` thread;
    #: ``None`` when thread names could not be read.
    pin_memory_thread: bool | None = None
    exit_status: int | None = None
    error: str | None = None
    #: Bytes the tree maps from ``/dev/shm`` (batches in flight between
    #: DataLoader workers and the training process), read with the private
    #: memory; None on the ticks it is not read.
    shm_mapped_bytes: int | None = None
    #: The CPU cgroups of the tree's processes, one per group, read at this tick:
    #: the quota each runs under and its throttling counters.
    cpu_groups: tuple[CpuCgroup, ...] = ()

    @property
    def workers(self) -> tuple[ProcessInfo, ...]:
        return tuple(p for p in self.processes if p.role == "worker")

    @property
    def main(self) -> ProcessInfo | None:
        return next((p for p in self.processes if p.role == "main"), None)


@dataclass(frozen=True, slots=True)
class OtherProcess:
    """A process outside the watched job that keeps a CPU busy: a neighbour."""

    pid: int
    #: Its name and command line, secrets redacted.
    command: str
    #: Cores it kept busy since the previous scan.
    cores: float


@dataclass(frozen=True, slots=True)
class HostSample:
    """Whole-machine CPU, memory and load at one tick."""

    t: float
    cpu_count: int
    cpu_percent: float | None
    per_core_percent: tuple[float, ...]
    iowait_percent: float | None
    ram_used_bytes: int | None
    ram_total_bytes: int | None
    swap_used_bytes: int | None
    swap_total_bytes: int | None
    load1: float | None
    load5: float | None
    load15: float | None
    #: The busiest processes outside the job and aitop (``neighbours.py``),
    #: from the latest scan; None before the first scan has a baseline to compare.
    others: tuple[OtherProcess, ...] | None = None
    #: The tightest cgroup memory limit over the job (``kernel/cgroups.py``);
    #: None when there is none: RAM is then the limit.
    memory_limit: MemoryLimit | None = None
    #: The job's ``/dev/shm`` (in its own mount namespace): size and use.
    shm: ShmUsage | None = None


# ---------------------------------------------------------------------- GPU


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process seen on a GPU by NVML (PID already mapped into our namespace)."""

    pid: int
    used_memory_bytes: int | None
    sm_percent: float | None
    in_target: bool
    name: str | None = None


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU at one tick. Each field is ``None`` when NVML could not read it."""

    index: int
    name: str | None
    uuid: str | None
    lost: bool = False
    util_percent: float | None = None
    mem_util_percent: float | None = None
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    temperature_c: float | None = None
    temperature_slowdown_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    #: Active clock event reasons, decoded to short words ("sw_power_cap", ...).
    clock_event_reasons: tuple[str, ...] = ()
    pcie_tx_bps: float | None = None
    pcie_rx_bps: float | None = None
    processes: tuple[GpuProcess, ...] = ()
    #: Fields the driver answered NotSupported for (so the UI can say why blank).
    unsupported: tuple[str, ...] = ()

    @property
    def target_mem_bytes(self) -> int | None:
        vals = [p.used_memory_bytes for p in self.processes if p.in_target]
        known = [v for v in vals if v is not None]
        return sum(known) if known else None

    @property
    def target_sm_percent(self) -> float | None:
        vals = [p.sm_percent for p in self.processes if p.in_target]
        known = [v for v in vals if v is not None]
        return sum(known) if known else None

    @property
    def others_sm_percent(self) -> float | None:
        """SM % of the processes outside the target: 0 when NVML gave per-process
        readings and none of them is another's, None when it gave none at all."""
        if not any(p.sm_percent is not None for p in self.processes):
            return None
        return sum(p.sm_percent or 0.0 for p in self.processes if not p.in_target)


@dataclass(frozen=True, slots=True)
class GpuSample:
    """All GPUs at one tick, or why there are none to read."""

    t: float
    available: bool
    devices: tuple[GpuDevice, ...] = ()
    #: Why ``available`` is False ("no NVIDIA driver", ...).
    reason: str | None = None
    driver_version: str | None = None


# ------------------------------------------------------------------- stacks


@dataclass(frozen=True, slots=True)
class HotFrame:
    """A frame and how many samples of the window had it innermost, per phase."""

    phase: str
    function: str
    location: str
    count: int
    #: The training-loop line that led into this phase ("train.py:42").
    caller: str = ""


@dataclass(frozen=True, slots=True)
class ThreadActivity:
    """Another thread of the target in the same window: a possible batch producer.

    ``busy_samples`` leave out samples parked in a wait (``Condition.wait``,
    ``Queue.get``, ``select``...): py-spy records idle threads too, and a thread
    that only waits is not producing anything.
    """

    thread_id: str
    name: str | None
    samples: int
    busy_samples: int
    #: The innermost frame it was busy in most often ("decode (/job/data.py:41)").
    top_frame: str | None = None

    @property
    def is_pin_memory(self) -> bool:
        """The DataLoader's own pin-memory thread: part of loading, not a producer of its own."""
        return "pin_memory" in f"{self.name} {self.top_frame}"


@dataclass(frozen=True, slots=True)
class StepCycles:
    """Step cycles counted in one stack window's sample sequence (``probes.step_cycles``).

    ``count`` boundaries were seen, the first at ``t_first`` and the last at
    ``t_last`` (epoch seconds, estimated from their place among the window's
    samples); a boundary is where the training thread leaves a step's backward
    and optimizer for the next step's data or forward (a server's: where it
    leaves a request's forward).
    """

    count: int
    t_first: float
    t_last: float
    #: What a cycle is: "training" (backward -> optimizer -> data|forward) or
    #: "serving" (forward -> the wait for the next request).
    kind: str = "training"
    #: The share of boundaries expected to fall between samples (each cycle
    #: stands for ``1 / (1 - missed)`` steps).
    missed: float = 0.0
    #: The window follows one whose last boundary is one cycle before this
    #: one's first (the side the samples were on carried across the gap).
    joined: bool = False


@dataclass(frozen=True, slots=True)
class StepShape:
    """One optimizer step as the training thread's samples, in the order taken, show it.

    From the first sample of one optimizer run (consecutive samples in the
    optimizer phase) to the first of the next: ``samples`` long, with
    ``backwards`` the length in samples of each backward pass seen in between
    (backward samples up to a forward or data-wait sample), in order, and
    ``optimizer`` the length of the run it starts with. Several backward
    passes per step is gradient accumulation.
    """

    samples: int
    backwards: tuple[int, ...]
    optimizer: int = 1


@dataclass(frozen=True, slots=True)
class StackWindow:
    """The training thread's stack samples over one py-spy window, by phase.

    ``phase_counts`` maps every phase name to its number of samples in the
    window; fractions are derived by the session over a sliding set of windows.
    """

    t_start: float
    t_end: float
    thread_name: str | None
    thread_id: str | None
    total_samples: int
    phase_counts: dict[str, int] = field(default_factory=dict)
    hot_frames: tuple[HotFrame, ...] = ()
    #: Techniques seen in use in the stacks ("torch_compile", "grad_scaler", ...).
    techniques_seen: tuple[str, ...] = ()
    #: The frame that drives the training loop ("train (train.py)"), learnt from
    #: the parents of phase frames; the step probe reads its integer locals.
    loop_frame: str | None = None
    error: str | None = None
    #: What the training thread's data waits were spent in: "dataloader",
    #: "thread queue", "process queue" or "own code" (a generator, a custom
    #: iterator: the loop's fetch statement with the job's code beneath it).
    data_source: str | None = None
    #: The target's other threads, busiest first (at most a few).
    other_threads: tuple[ThreadActivity, ...] = ()
    #: The training thread's step cycles, where the samples resolve each one.
    cycles: StepCycles | None = None
    #: Why no cycles were counted in this window, when they were not.
    cycles_note: str | None = None
    #: The training thread's samples with each technique's frames in them
    #: (``techniques_seen`` counts any thread): how much of the step uses it.
    technique_samples: dict[str, int] = field(default_factory=dict)
    #: Each technique's frame the training thread was seen in most
    #: ("_single_tensor_adam (torch/optim/adam.py)").
    technique_frames: dict[str, str] = field(default_factory=dict)
    #: The optimizer steps the window's sample order shows whole (none where
    #: the samples came without their order).
    step_shapes: tuple[StepShape, ...] = ()
    #: Separate runs of each phase that comes in blocks (evaluation passes,
    #: saves) in the window's sample order; empty where it came without order.
    phase_blocks: dict[str, int] = field(default_factory=dict)
    #: The phases of the window's first and last ordered samples: a block that
    #: runs across the edge between two windows is one block, not two.
    ends: tuple[str, ...] = ()


#: A hot frame's identity across windows: (phase, function, location, caller).
FrameKey = tuple[str, str, str, str]


def hot_frame_counts(windows: Iterable[StackWindow]) -> list[tuple[FrameKey, int]]:
    """Hot frames summed over stack windows (failed ones skipped), hottest first."""
    sums: Counter[FrameKey] = Counter()
    for w in windows:
        if w.error is not None:
            continue
        for f in w.hot_frames:
            # ``caller`` arrived after the first recordings; older files lack it.
            caller = str(getattr(f, "caller", "") or "")
            sums[(f.phase, f.function, f.location, caller)] += f.count
    return sums.most_common()


@dataclass(frozen=True, slots=True)
class StepCounterSample:
    """A reading of a count that advances with the steps, and where it came from.

    ``value`` is None when the source could not be read, and ``error`` says why.
    """

    t: float
    name: str | None
    value: int | None
    frame: str | None = None
    error: str | None = None
    #: "loop" (an integer local of the loop frame), "workers" (the DataLoader
    #: workers' batch index), "log" (the step the job printed, ``probes.job_log``;
    #: ``frame`` is the file) or "stacks" (step cycles, ``probes.step_cycles``).
    #: Recordings made before "workers" existed mark the workers' index "loop".
    source: str = "loop"
    #: A count starts afresh here: the steps since the reading before are not
    #: known (stack windows count cycles within each window, not between them).
    start: bool = False
    #: Read right after the reading before it, to bound how fast the count
    #: moves between two readings (``probes.step_sources``, the workers' index).
    paired: bool = False
    #: The workers' index: the dataset their ``_worker_loop`` loads, as py-spy
    #: shows it (``<Images at 0x7f..>``), one per DataLoader; several, joined
    #: with ", ", where workers of several loaders were fetching at once.
    loader: str | None = None


@dataclass(frozen=True, slots=True)
class LogEvent:
    """Something the job's own log, or its frames, say happened.

    ``thread_died`` (the log): ``subject`` the thread's name, ``text`` the
    exception's last line as printed ("RuntimeError: shard 42 truncated").
    ``recompile_limit`` (the log): dynamo gave up compiling ``subject`` (the
    function) and runs it eagerly; ``text`` the limit and the last failed
    guard. ``compile`` / ``recompile`` (a locals dump, ``probes.compile_frames``):
    torch.compile was compiling ``subject``; a recompilation's ``text`` is its
    compile id and the guard that failed. Text is redacted like any other
    text aitop shows.
    """

    t: float
    kind: str
    subject: str
    text: str


# ------------------------------------------------------------------ storage


@dataclass(frozen=True, slots=True)
class MountInfo:
    """A filesystem behind some of the target's open files."""

    mountpoint: str
    device: str
    fstype: str
    is_network: bool
    scheduler: str | None
    read_bps: float | None
    write_bps: float | None
    busy_percent: float | None
    open_files: int


@dataclass(frozen=True, slots=True)
class StorageSample:
    """Disks behind the target's open files, and what it is writing now."""

    t: float
    mounts: tuple[MountInfo, ...] = ()
    #: Files the target tree has open for writing (checkpoints as they happen).
    writing: tuple[str, ...] = ()
    error: str | None = None


# -------------------------------------------------------------- environment


@dataclass(frozen=True, slots=True)
class EnvironmentInfo:
    """Facts about the target that change rarely; secrets already redacted."""

    t: float
    pid: int
    cmdline: tuple[str, ...]
    python_version: str | None
    torch_version: str | None
    env: dict[str, str] = field(default_factory=dict)
    num_workers: int | None = None
    pin_memory_thread: bool | None = None
    start_time: float | None = None
    hostname: str | None = None
    aitop_version: str | None = None
    #: CPUs the target may use: its affinity, capped by its cgroup's CPU quota.
    cpus_allowed: float | None = None
    #: Whether the job's script, config files or command line ask for mixed
    #: precision (autocast, GradScaler, bf16=True...); None: none could be read.
    mixed_precision_in_source: bool | None = None
