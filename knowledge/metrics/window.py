"""Computing the catalogue's metrics from a session's samples, one window at a time.

Every name in ``catalogue.CATALOGUE`` gets a value here for the window ending at
``now``. A metric that cannot be known (no GPU, no step counter) is ``None``, and
a rule that needs it waits instead of guessing.
"""

from __future__ import annotations

import functools
import itertools
import math
import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence

from aitop.probes.kernel.cgroups import MemoryLimit
from aitop.probes.samples import (
    GpuDevice,
    GpuSample,
    HostSample,
    HotFrame,
    ProcessTreeSample,
    StackWindow,
    StorageSample,
    ThreadActivity,
    hot_frame_counts,
)
from aitop.probes.session import PHASES, Aggregate, Session
from aitop.probes.steps import steps_per_second

from ..base.catalogue import AGGREGATES
from ..reading.loader import load_knowledge_base
from .capacity import suggested_workers
from .stall_feeder import is_gone, live_threads, stall_feeder
from .straggler import comm_metrics

#: Window for rare events (checkpoint saves): one save every few minutes should
#: not look like a 10 % stall just because it fell inside a 20 s window.
LONG_WINDOW_S = 300.0
#: Window for steps/s: the loop counter is read every 5 s, so 30 s gives ~6 readings.
STEPS_WINDOW_S = 30.0
#: How far back a job must have trained for its forward-only passes to be
#: evaluation, not inference.
INFERENCE_LOOKBACK_S = 60.0
#: How far back a stall is traced: a longer one reads as this long.
STALL_LOOKBACK_S = 300.0
#: Seconds of steps after the first compilation that are judged on their own.
JUDGE_AFTER_WARMUP_S = 10.0
#: A stall is judged on the job's activity over its last seconds, at most this many.
STALL_QUIET_S = 10.0
#: A stall whose first window began this soon after aitop's first sample began
#: before aitop attached (py-spy's first window starts a moment after it).
STALL_FROM_ATTACH_SLACK_S = 3.0

#: hw_slowdown alone is not counted: the driver raises it for power brakes too.
THERMAL_REASONS = frozenset({"sw_thermal_slowdown", "hw_thermal_slowdown"})
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake_slowdown"})


def _pct(part: float | None, whole: float | None) -> float | None:
    if part is None or not whole:
        return None
    return 100.0 * part / whole


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def target_devices(sample: GpuSample) -> list[GpuDevice]:
    """GPUs the target uses (by its processes), else all healthy ones."""
    healthy = [d for d in sample.devices if not d.lost]
    used = [d for d in healthy if any(p.in_target for p in d.processes)]
    return used or healthy


def _gpu(fn: Callable[[GpuDevice], float | None]) -> Callable[[GpuSample], float | None]:
    def value(sample: GpuSample) -> float | None:
        if not sample.available:
            return None
        return _mean([v for d in target_devices(sample) if (v := fn(d)) is not None])

    return value


#: GPU utilisation, the one definition every reader uses (the rules' ``gpu_util_*``,
#: the key-metrics table, the Ranks panel): NVML's share of time a kernel was
#: running, the mean over the GPUs the target uses (all healthy GPUs when it
#: holds none). A device's own reading is ``GpuDevice.util_percent``.
gpu_util: Callable[[GpuSample], float | None] = _gpu(lambda d: d.util_percent)


def gpu_util_over(samples: Iterable[GpuSample]) -> float | None:
    """``gpu_util`` over a span: the mean of each sample's (``gpu_util_mean``'s rule)."""
    return _mean([v for s in samples if (v := gpu_util(s)) is not None])


#: The documents' key-metric bound ("GPU temperature: below 83 degrees C"), used
#: where the driver does not report the GPU's own slowdown temperature (which the
#: documents' entry prefers). A test holds it equal to ``documents.yaml``.
FALLBACK_TEMPERATURE_LIMIT_C = 83.0


def temperature_margin(temp_c: float | None, slowdown_c: float | None) -> float | None:
    """Degrees below the GPU's slowdown threshold (the documents' 83 °C if unknown)."""
    if temp_c is None:
        return None
    limit = slowdown_c if slowdown_c is not None else FALLBACK_TEMPERATURE_LIMIT_C
    return limit - temp_c


def _temp_margin(d: GpuDevice) -> float | None:
    return temperature_margin(d.temperature_c, d.temperature_slowdown_c)


def _tree_sum(
    fn: Callable[..., float | None], role: str | None = None
) -> Callable[[ProcessTreeSample], float | None]:
    def value(sample: ProcessTreeSample) -> float | None:
        if not sample.alive:
            return None
        vals = [fn(p) for p in sample.processes if role is None or p.role == role]
        known = [v for v in vals if v is not None]
        return sum(known) if known else None

    return value


def _worker_blocked(sample: ProcessTreeSample) -> float | None:
    """% of the time the average worker neither ran nor waited for a CPU: asleep.

    A worker of a starving loop that is asleep waits on something other than the
    CPU: its reads (storage), or a lock. Unknown without scheduler statistics.
    """
    vals = [
        max(0.0, 100.0 - p.cpu_percent - p.cpu_wait_percent)
        for p in sample.workers
        if p.cpu_percent is not None and p.cpu_wait_percent is not None
    ]
    return sum(vals) / len(vals) if vals else None


def _worker_cpu_wait(sample: ProcessTreeSample) -> float | None:
    vals = [p.cpu_wait_percent for p in sample.workers if p.cpu_wait_percent is not None]
    return sum(vals) / len(vals) if vals else None


def _worker_max_cpu(sample: ProcessTreeSample) -> float | None:
    vals = [p.cpu_percent for p in sample.workers if p.cpu_percent is not None]
    return max(vals) if vals else None


#: A thread this busy (% of a core) counts as doing work; idle pool threads sit near 0.
BUSY_THREAD_PERCENT = 10.0


def _main_busy_threads(
    sample: ProcessTreeSample, helpers: tuple[str, ...] = ()
) -> float | None:
    """How many of the main process's threads are busy computing (parallelism in use).

    ``helpers``: name prefixes of threads busy without being compute parallelism
    (phases.yaml ``helper_threads``: communication, pin memory).
    """
    main = sample.main
    if main is None or not main.threads or not sample.alive:
        return None
    known = [t.cpu_percent for t in main.threads
             if t.cpu_percent is not None and not t.name.startswith(helpers)]
    if not known:
        return None
    return float(sum(1 for c in known if c >= BUSY_THREAD_PERCENT))


def _mb(v: float | None) -> float | None:
    return None if v is None else v / 1e6


def _mounts(fn: Callable[..., float | None]) -> Callable[[StorageSample], float | None]:
    def value(sample: StorageSample) -> float | None:
        vals = [v for m in sample.mounts if (v := fn(m)) is not None]
        return max(vals) if vals else None

    return value


def _swap_pct(sample: HostSample) -> float | None:
    """No swap configured means nothing is swapped: 0 %, not unknown."""
    if sample.swap_total_bytes == 0:
        return 0.0
    return _pct(sample.swap_used_bytes, sample.swap_total_bytes)


def _host_load(sample: HostSample) -> float | None:
    return None if sample.load1 is None else sample.load1 / max(sample.cpu_count, 1)


#: The job's CPU (% of a core) and storage reads (MB/s), its processes summed.
_PROC_CPU = _tree_sum(lambda p: p.cpu_percent)
_PROC_READ = _tree_sum(lambda p: _mb(p.read_bps))

#: How each series metric of the catalogue is sampled: (name, ring attribute,
#: value function); the catalogue's ``SERIES`` says what each one means.
SERIES_VALUES: tuple[tuple[str, str, Callable[..., float | None]], ...] = (
    ("gpu_util", "gpu", gpu_util),
    ("gpu_mem_used", "gpu", _gpu(lambda d: _pct(d.mem_used_bytes, d.mem_total_bytes))),
    ("gpu_temp_margin", "gpu", _gpu(_temp_margin)),
    ("gpu_power", "gpu", _gpu(lambda d: _pct(d.power_w, d.power_limit_w))),
    ("gpu_sm_clock", "gpu", _gpu(lambda d: _pct(d.sm_clock_mhz, d.sm_clock_max_mhz))),
    ("gpu_pcie_rx", "gpu", _gpu(lambda d: _mb(d.pcie_rx_bps))),
    ("gpu_job_sm", "gpu", _gpu(lambda d: d.target_sm_percent)),
    ("gpu_other_sm", "gpu", _gpu(lambda d: d.others_sm_percent)),
    ("host_cpu", "host", lambda s: s.cpu_percent),
    ("host_iowait", "host", lambda s: s.iowait_percent),
    ("host_ram_used", "host", lambda s: _pct(s.ram_used_bytes, s.ram_total_bytes)),
    ("host_swap_used", "host", lambda s: _swap_pct(s)),
    ("host_load_per_core", "host", _host_load),
    ("proc_cpu", "processes", _PROC_CPU),
    ("main_cpu", "processes", _tree_sum(lambda p: p.cpu_percent, "main")),
    ("main_busy_threads", "processes", _main_busy_threads),
    ("workers_cpu", "processes", _tree_sum(lambda p: p.cpu_percent, "worker")),
    ("worker_cpu_max", "processes", _worker_max_cpu),
    ("main_cpu_wait", "processes", _tree_sum(lambda p: p.cpu_wait_percent, "main")),
    ("worker_cpu_wait", "processes", _worker_cpu_wait),
    ("proc_cpu_wait", "processes", _tree_sum(lambda p: p.cpu_wait_percent)),
    ("worker_blocked", "processes", _worker_blocked),
    ("proc_rss", "processes", _tree_sum(lambda p: _mb(p.rss_bytes))),
    ("proc_read", "processes", _PROC_READ),
    ("proc_write", "processes", _tree_sum(lambda p: _mb(p.write_bps))),
    ("disk_read", "storage", _mounts(lambda m: _mb(m.read_bps))),
    ("disk_write", "storage", _mounts(lambda m: _mb(m.write_bps))),
    ("disk_busy", "storage", _mounts(lambda m: m.busy_percent)),
)


def _aggregate_values(prefix: str, agg: Aggregate | None) -> dict[str, float | None]:
    if agg is None:
        return {f"{prefix}_{a}": None for a in AGGREGATES}
    return {
        f"{prefix}_mean": agg.mean,
        f"{prefix}_p5": agg.p5,
        f"{prefix}_p95": agg.p95,
        f"{prefix}_last": agg.last,
        f"{prefix}_min": agg.minimum,
        f"{prefix}_max": agg.maximum,
        f"{prefix}_stdev": agg.stdev,
        f"{prefix}_trend": agg.trend,
    }


def _flag(value: bool | None) -> float | None:
    return None if value is None else float(value)


def compute_metrics(
    session: Session, now: float, window_s: float, helper_threads: tuple[str, ...] | None = None
) -> dict[str, float | None]:
    """All catalogue metrics over the window ending at ``now``.

    ``helper_threads``: the knowledge base's helper-thread prefixes (None: the
    packaged knowledge base's).
    """
    if helper_threads is None:
        helper_threads = load_knowledge_base().phases.helper_threads
    window_s = _after_warmup(session, now, window_s)
    metrics: dict[str, float | None] = {"window_s": window_s}
    for name, ring_name, fn in SERIES_VALUES:
        if fn is _main_busy_threads:
            fn = functools.partial(_main_busy_threads, helpers=helper_threads)
        ring = getattr(session, ring_name)
        metrics.update(_aggregate_values(name, session.aggregate(ring, fn, now, window_s)))
    has_gpu = _gpu_metrics(metrics, session, now, window_s)
    _phase_metrics(metrics, session, now, window_s, has_gpu)
    # The counter is read every few seconds: look back far enough for several.
    rate = steps_per_second(
        session.step_readings(now - max(window_s, STEPS_WINDOW_S), now).readings)
    metrics["steps_per_s"] = rate
    metrics["step_time"] = 1.0 / rate if rate else None
    _process_metrics(metrics, session, now, window_s)
    _storage_metrics(metrics, session, now, window_s)
    _technique_metrics(metrics, session, now, window_s)
    _loading_metrics(metrics, session, now, window_s)
    comm_metrics(metrics)
    metrics["stalled_s"] = stall(session, now)[0] if session.stacks.last() else None
    _stall_activity(metrics, session, now)
    metrics["counter_moved"] = _counter_moved(session, now)
    first_step = session.first_step_at
    metrics["steps_seen"] = float(first_step is not None and first_step <= now)
    return metrics


def _after_warmup(session: Session, now: float, window_s: float) -> float:
    """The window, started after the first compilation once the steps fill
    ``JUDGE_AFTER_WARMUP_S`` after it: they are judged on their own, not after
    the compilation has left a whole window (an unseen job stayed "warming up"
    22 s after compiling ended)."""
    warmup = session.compile_warmup
    if warmup is None or warmup.end is None:
        return window_s
    since = now - warmup.end
    return since if JUDGE_AFTER_WARMUP_S <= since < window_s else window_s


def _stall_activity(metrics: dict[str, float | None], session: Session, now: float) -> None:
    """The job's CPU and reads over the stall's last seconds (``STALL_QUIET_S`` at most).

    A loop that stands in one frame while its producer works is slow, not
    stalled; one whose producer worked as the loop began to wait and then quit
    is stalled, though the window's mean CPU still holds the producer's work.
    """
    quiet = min(metrics.get("stalled_s") or 0.0, STALL_QUIET_S)
    for name, value in (("stall_cpu", _PROC_CPU), ("stall_read", _PROC_READ)):
        agg = session.aggregate(session.processes, value, now, quiet) if quiet > 0 else None
        metrics[name] = None if agg is None else agg.mean


def _latest_stacks(session: Session, now: float, window_s: float) -> list[StackWindow]:
    return [w for w in session.stacks.window(now - window_s, now) if w.error is None]


def _producer(
    windows: list[StackWindow], session: Session | None = None, now: float = 0.0,
    window_s: float = 0.0,
) -> ThreadActivity | None:
    """The busiest other thread over the windows.

    By its CPU where the process probe knows it (a thread asleep in
    ``time.sleep`` has no frame of its own that says it waits), else by the
    samples py-spy saw it outside a wait. A thread that has exited since is
    no producer: an unseen job whose producer died was told to give it "more
    reads in flight" for 15 s before it read as stalled.
    """
    alive = live_threads(session) if session is not None else None
    best: dict[str, tuple[int, int, ThreadActivity]] = {}
    for w in windows:
        for t in w.other_threads:
            if t.is_pin_memory or is_gone(t, alive):
                continue
            busy, total, _ = best.get(t.thread_id, (0, 0, t))
            best[t.thread_id] = (busy + t.busy_samples, total + t.samples, t)
    if not best:
        return None
    cpu = {tid: _thread_cpu(session, tid, now, window_s) for tid in best} if session else {}
    known = {tid: c for tid, c in cpu.items() if c is not None}
    tid = max(known, key=lambda k: known[k]) if known else max(best, key=lambda k: best[k][0])
    busy, total, last = best[tid]
    return ThreadActivity(tid, last.name, total, busy, last.top_frame)


def _loading_metrics(
    metrics: dict[str, float | None], session: Session, now: float, window_s: float
) -> None:
    """Who produces the batches, and the cores left for producing more."""
    windows = _latest_stacks(session, now, window_s)
    main_source = _main_data_source(windows)
    metrics["data_from_queue"] = (
        None if not windows else float(main_source in ("thread queue", "process queue"))
    )
    metrics["data_in_own_code"] = None if not windows else float(main_source == "own code")
    busy_share: float | None = None
    if main_source == "process queue":
        child = _busiest_child(session, now, window_s)
        cpu = child[1] if child else None
    else:
        producer = _producer(windows, session, now, window_s)
        cpu = _thread_cpu(session, producer.thread_id, now, window_s) if producer else None
        if producer is not None and producer.samples:
            busy_share = producer.busy_samples / producer.samples
        elif producer is None and windows:
            cpu = 0.0  # stacks seen, and no other Python thread in them: none works
    metrics["producer_cpu"] = cpu
    others = {t.thread_id for w in windows for t in w.other_threads}
    loads = [_thread_cpu(session, tid, now, window_s) for tid in others]
    metrics["busy_python_threads"] = (
        None if not windows else float(sum(1 for c in loads if (c or 0.0) >= BUSY_THREAD_PERCENT))
    )
    training = next((w.thread_id for w in reversed(windows) if w.thread_id), None)
    metrics["training_thread_cpu"] = (
        _thread_cpu(session, training, now, window_s) if training else None
    )
    metrics["phase_other_idle"] = _other_idle(metrics)
    # Its CPU where known: a sleeping thread's samples can look like work.
    metrics["producer_busy"] = min(cpu / 100.0, 1.0) if cpu is not None else busy_share
    metrics["free_cores"] = _free_cores(metrics, session, now, window_s)
    metrics["compute_threads"] = compute_threads(metrics)
    metrics["free_cores_in_compute"] = free_cores_in_compute(metrics)
    threads = metrics["compute_threads"]
    metrics["threads_beside_worker"] = (
        None if threads is None else float(max(1, round(threads) - 1)))
    # Known wherever any process sample of the window carried its run delay.
    metrics["runqueue_known"] = (
        None if metrics.get("proc_cpu_mean") is None
        else _flag(metrics.get("proc_cpu_wait_mean") is not None)
    )
    metrics["suggested_workers"] = suggested_workers(metrics)
    main_cpu, free = metrics.get("main_cpu_mean"), metrics["free_cores"]
    metrics["suggested_threads"] = (
        None if main_cpu is None or free is None
        else float(max(1, math.floor(main_cpu / 100.0 + free + 0.25)))
    )


def _main_data_source(windows: list[StackWindow]) -> str | None:
    """Where most of the training thread's data waits were spent."""
    sources: dict[str, int] = {}
    for w in windows:
        if w.data_source is not None:
            wait = w.phase_counts.get("data_wait", 0)
            sources[w.data_source] = sources.get(w.data_source, 0) + wait
    return max(sources, key=lambda k: sources[k]) if sources else None


def _busiest_child(session: Session, now: float, window_s: float) -> tuple[str, float] | None:
    """The target's busiest child process ("process 123 (python)", mean CPU)."""
    cpu: dict[int, list[float]] = {}
    names: dict[int, str] = {}
    for tree in session.processes.window(now - window_s, now):
        for p in tree.processes:
            # A multiprocessing producer started like a worker may be counted as one.
            if p.role in ("child", "worker") and p.cpu_percent is not None:
                cpu.setdefault(p.pid, []).append(p.cpu_percent)
                names[p.pid] = p.name
    if not cpu:
        return None
    pid = max(cpu, key=lambda k: sum(cpu[k]) / len(cpu[k]))
    return f"process {pid} ({names[pid]})", sum(cpu[pid]) / len(cpu[pid])


def _thread_cpu(
    session: Session | None, thread_id: str, now: float, window_s: float
) -> float | None:
    """Mean CPU (% of a core) of one thread of the main process over the window."""
    if session is None or not thread_id.isdigit():
        return None
    tid = int(thread_id)
    values = [
        t.cpu_percent
        for tree in session.processes.window(now - window_s, now)
        if tree.main is not None
        for t in tree.main.threads
        if t.tid == tid and t.cpu_percent is not None
    ]
    return sum(values) / len(values) if values else None


def _free_cores(
    metrics: dict[str, float | None], session: Session, now: float, window_s: float
) -> float | None:
    """Cores the job could still use: its allowance minus its use, capped by the idle machine."""
    metrics["other_procs_cpu"] = metrics["free_cores_without_others"] = None
    allowed = metrics.get("cpu_count")
    used = metrics.get("proc_cpu_mean")
    host = metrics.get("host_cpu_mean")
    hosts = session.host.window(now - window_s, now)
    if allowed is None or used is None or host is None or not hosts:
        return None
    machine_idle = hosts[-1].cpu_count * (1.0 - host / 100.0)
    others = _other_processes_cores(hosts)
    metrics["other_procs_cpu"] = others
    metrics["free_cores_without_others"] = (
        None if others is None
        else max(0.0, min(allowed - used / 100.0, machine_idle + others))
    )
    return max(0.0, min(allowed - used / 100.0, machine_idle))


#: The step's phases in which torch's intra-op threads work beside the training thread.
COMPUTE_PHASES = ("forward", "backward", "optimizer", "eval")


def compute_threads(metrics: Mapping[str, float | None]) -> float | None:
    """Threads of the main process at work while the step computes.

    The training thread, and the main process's other threads' mean CPU spread
    over the compute phases' share (torch's intra-op pool works only then), at
    most one core per busy thread: a pool thread busy 38 % of the time in a job
    computing 38 % of it is a second thread at work whenever the step computes.
    """
    main_cpu, training = metrics.get("main_cpu_mean"), metrics.get("training_thread_cpu")
    busy = metrics.get("main_busy_threads_mean")
    if main_cpu is None or training is None or busy is None:
        return None
    shares = [metrics.get(f"phase_{p}") for p in COMPUTE_PHASES]
    compute = sum(s for s in shares if s is not None)
    helpers = max(0.0, main_cpu - training) / 100.0
    if compute < 0.05:
        return 1.0 + helpers
    return 1.0 + min(helpers / min(compute, 1.0), max(0.0, busy - 1.0))


def free_cores_in_compute(metrics: Mapping[str, float | None]) -> float | None:
    """Cores free while the step computes: what a new DataLoader worker would get.

    ``free_cores`` is a mean over the window. Where the job's own compute threads
    (torch's intra-op pool) fill the cores while forward and backward run and
    leave them while the training thread loads a batch, the mean shows a core
    free that a worker running beside the compute would not have: an unseen job
    loading 67 % of its time in its training thread, 0.55 core "free", measured
    x0.97 with one worker against x1.4-1.7 predicted. The main process's threads
    besides the training thread work (as far as they are compute) only during the
    compute phases: their mean CPU over that share, at most one core per busy
    thread, is what they hold then.
    """
    free = metrics.get("free_cores")
    threads = metrics.get("compute_threads")
    main_cpu, training = metrics.get("main_cpu_mean"), metrics.get("training_thread_cpu")
    if free is None or threads is None or main_cpu is None or training is None:
        return free
    helpers = max(0.0, main_cpu - training) / 100.0
    return max(0.0, free - max(0.0, (threads - 1.0) - helpers))


def _other_processes_cores(hosts: list[HostSample]) -> float | None:
    """Cores the processes outside the job kept busy, on average over the window's scans."""
    scans = {h.others for h in hosts if h.others is not None}
    if not scans:
        return None
    return sum(sum(p.cores for p in scan) for scan in scans) / len(scans)


def compute_words(session: Session, now: float, window_s: float) -> dict[str, str]:
    """The names a rule's text may use (see ``WORDS``), where known."""
    windows = _latest_stacks(session, now, window_s)
    words: dict[str, str] = {}
    producer = _producer(windows, session, now, window_s)
    child = (
        _busiest_child(session, now, window_s)
        if _main_data_source(windows) == "process queue" else None
    )
    if child is not None:
        words["producer"] = child[0]
        words["producer_frame"] = "its own process (not sampled)"
    elif producer is not None:
        words["producer"] = f"thread '{producer.name or producer.thread_id}'"
        if producer.top_frame:
            words["producer_frame"] = producer.top_frame
    sources = [w.data_source for w in windows if w.data_source]
    if sources:
        words["data_source"] = max(set(sources), key=sources.count)
    words["other_frame"] = _hottest_other_frame(windows)
    words["warmup_work"] = _warmup_work(windows)
    seconds, frame = stall(session, now)
    if seconds > 0:
        # A stall as old as the watch (or the look-back) began before it.
        watched = None if session.started_at is None else now - session.started_at
        began_before = seconds >= STALL_LOOKBACK_S or (
            watched is not None and seconds >= watched - STALL_FROM_ATTACH_SLACK_S)
        words["stalled_for"] = f"{'at least ' if began_before else ''}{seconds:.0f} s"
        words["stall_feeder"] = stall_feeder(session, now, seconds)
    if frame is not None and seconds > 0:
        called = f", called from {frame.caller.rsplit('/', 1)[-1]}" if frame.caller else ""
        words["stalled_frame"] = (f"{frame.function} ({frame.location.rsplit('/', 1)[-1]})"
                                  f"{called}")
    hosts = session.host.window(now - window_s, now)
    if hosts and hosts[-1].others:
        words["neighbours"] = ", ".join(
            f"PID {p.pid} {p.command} ({p.cores:.1f} core)" for p in hosts[-1].others[:2])
    if hosts:
        words["memory_limit"] = _memory_limit_words(hosts[-1])
    gpus = session.gpu.window(now - window_s, now)
    if gpus:
        words["gpu_neighbours"] = _gpu_neighbour_words(gpus[-1])
    return words


def _gpu_neighbour_words(sample: GpuSample) -> str:
    """The two busiest processes outside the job on the GPUs it uses."""
    others = sorted(
        ((p, d.index) for d in target_devices(sample) for p in d.processes if not p.in_target),
        key=lambda pd: (pd[0].sm_percent or 0.0, pd[0].used_memory_bytes or 0), reverse=True)
    parts = []
    for p, index in others[:2]:
        name = (p.name or "?").rsplit("/", 1)[-1]
        memory = (f", {p.used_memory_bytes / 1e9:.1f} GB" if p.used_memory_bytes is not None
                  else "")
        sm = f"{p.sm_percent:.0f}% SM" if p.sm_percent is not None else "SM unknown"
        parts.append(f"PID {p.pid} {name} on GPU {index} ({sm}{memory})")
    return ", ".join(parts) or "none seen"


def _tighter_cgroup(host: HostSample) -> MemoryLimit | None:
    """The job's cgroup limit when it leaves less than the free RAM, else None."""
    limit = host.memory_limit
    if limit is None or host.ram_total_bytes is None or host.ram_used_bytes is None:
        return None
    if limit.limit_bytes - limit.used_bytes >= host.ram_total_bytes - host.ram_used_bytes:
        return None
    return limit


def _memory_limit_words(host: HostSample) -> str:
    """What the job runs out of first: RAM, or its cgroup's limit when that is tighter."""
    limit = _tighter_cgroup(host)
    if limit is None:
        return "RAM"
    # The group's own name: a pod's full path runs to ~190 characters.
    name = limit.cgroup.rstrip("/").rsplit("/", 1)[-1] or "/"
    return f"its cgroup's {limit.limit_bytes / 1e6:.0f} MB limit ({name})"


#: A window is "in one place" when this share of its samples stands in one frame.
STALL_SHARE = 0.95


def _counter_moved(session: Session, now: float) -> float:
    """1 when the loop's counter (or the step the job prints) changed between two
    readings of the last half minute.

    0 both when it stood still and when no counter is read: a stall is then
    told by the stacks, the CPU and the reads alone. Readings are compared only
    with readings of the same counter: the workers' batch index (25) followed by
    the loop's own ``i`` (24) is two counters, not a step.
    """
    by_counter: dict[tuple[str, str | None], list[int]] = {}
    for s in session.steps.window(now - STEPS_WINDOW_S, now):
        if s.value is not None:
            by_counter.setdefault((s.source, s.name), []).append(s.value)
    return float(any(a != b for values in by_counter.values()
                     for a, b in itertools.pairwise(values)))


def stall(session: Session, now: float) -> tuple[float, HotFrame | None]:
    """How long the training thread has stood in one innermost frame, and which.

    Walks the stack windows back from the newest while each has (nearly) all
    its samples in the same frame; the seconds from the oldest such window's
    start to ``now``. A loop that progresses moves between frames every step.
    """
    windows = [w for w in session.stacks.window(now - STALL_LOOKBACK_S, now)
               if w.error is None and w.total_samples > 0]
    frame: HotFrame | None = None
    since: float | None = None
    for w in reversed(windows):
        top = max(w.hot_frames, key=lambda f: f.count, default=None)
        if top is None or top.count < STALL_SHARE * w.total_samples:
            break
        if frame is not None and (top.function, top.location) != (frame.function,
                                                                   frame.location):
            break
        frame, since = frame or top, w.t_start
    return (0.0 if since is None else max(0.0, now - since)), frame


def _warmup_work(windows: Sequence[StackWindow]) -> str:
    """What the compile phase's warm-up is doing, from the newest window with samples.

    CUDA graph capture runs through the compile phase's frames too (a one-time
    cost before the steps), but telling a user that torch.compile compiles a
    model captured with ``make_graphed_callables`` would send them looking for
    a compile call that is not there.
    """
    newest = next((w for w in reversed(windows) if w.total_samples > 0), None)
    if newest is not None and "cuda_graph_capture" in newest.techniques_seen:
        return "CUDA graphs are being captured"
    return "torch.compile is compiling the model"


def _hottest_other_frame(windows: Sequence[StackWindow]) -> str:
    """Where the training thread's 'other' time goes: its hottest innermost frame.

    An unseen job that logged through a 30 ms call every step read "66 % of the
    loop is spent outside ..."; naming ``log_metrics (train.py:9)`` says what to fix.
    """
    other = [key for key, _n in hot_frame_counts(windows) if key[0] == "other"]
    if not other:
        return "code outside the recognised phases"
    _phase, function, location, caller = other[0]
    # The job's own files are absolute paths: the file name is enough in a title.
    location, caller = location.rsplit("/", 1)[-1], caller.rsplit("/", 1)[-1]
    called = f", called from {caller}" if caller and caller != location else ""
    return f"{function} ({location}){called}"


def _gpu_metrics(
    metrics: dict[str, float | None], session: Session, now: float, window_s: float
) -> bool:
    """Device-level GPU facts beyond the per-sample series; whether a GPU is seen."""
    gpus = session.gpu.window(now - window_s, now)
    last_gpu = gpus[-1] if gpus else None
    has_gpu = last_gpu is not None and last_gpu.available and bool(last_gpu.devices)
    metrics["has_gpu"] = None if last_gpu is None else float(has_gpu)
    metrics["gpu_count"] = None if last_gpu is None else float(len(last_gpu.devices))
    if not has_gpu or last_gpu is None:
        metrics["gpu_throttle_thermal"] = metrics["gpu_throttle_power"] = None
        metrics["gpu_target_devices"] = metrics["gpu_util_spread"] = None
        metrics["gpu_mem_growth"] = metrics["gpu_mem_free_mb"] = None
        metrics["gpu_minutes_left"] = None
        return False

    def share(reasons: frozenset[str]) -> float:
        hits = sum(
            any(set(d.clock_event_reasons) & reasons for d in target_devices(g)) for g in gpus
        )
        return hits / len(gpus)

    metrics["gpu_throttle_thermal"] = share(THERMAL_REASONS)
    metrics["gpu_throttle_power"] = share(POWER_REASONS)
    used = [d for d in last_gpu.devices if any(p.in_target for p in d.processes)]
    metrics["gpu_target_devices"] = float(len(used))
    utils = [d.util_percent for d in used if d.util_percent is not None]
    metrics["gpu_util_spread"] = max(utils) - min(utils) if len(utils) >= 2 else None
    _gpu_memory_runway(metrics, session, now, window_s, used)
    return True


def _gpu_memory_runway(metrics: dict[str, float | None], session: Session, now: float,
                       window_s: float, used: list[GpuDevice]) -> None:
    """The job's GPU memory growth (its processes' own, per NVML), the memory left
    on the fullest device it uses, and how long that lasts at the growth."""

    def target_mb(sample: GpuSample) -> float | None:
        known = [d.target_mem_bytes for d in sample.devices if d.target_mem_bytes is not None]
        return _mb(sum(known)) if known else None

    growth = memory_growth(session.series(session.gpu, target_mb, now,
                                          max(window_s, GROWTH_LOOKBACK_S)))
    metrics["gpu_mem_growth"] = growth
    free = [d.mem_total_bytes - d.mem_used_bytes for d in used
            if d.mem_total_bytes is not None and d.mem_used_bytes is not None]
    headroom = max(0.0, _mb(min(free)) or 0.0) if free else None
    metrics["gpu_mem_free_mb"] = headroom
    metrics["gpu_minutes_left"] = (headroom / growth if headroom is not None and growth
                                   else None)


def _forward_only(session: Session, now: float, window_s: float) -> float | None:
    """1 when the thread runs forward passes but, for a while, no backward or optimizer.

    Looked at over ``INFERENCE_LOOKBACK_S`` (or the window, if longer): a
    training job's evaluation pass may fill a window, its training does not
    stop for a minute.
    """
    counts, total = session.phase_counts(now, max(window_s, INFERENCE_LOOKBACK_S))
    if not total:
        return None
    forward = counts.get("forward", 0) + counts.get("eval", 0)
    trained = counts.get("backward", 0) + counts.get("optimizer", 0)
    return _flag(forward > 0 and trained == 0)


def _phase_metrics(
    metrics: dict[str, float | None], session: Session, now: float, window_s: float,
    has_gpu: bool,
) -> None:
    """The training thread's phase shares, and what stands for accelerator use."""
    fractions = session.phase_fractions(now, window_s)
    _counts, total = session.phase_counts(now, window_s)
    metrics["forward_only"] = _forward_only(session, now, window_s)
    if fractions and metrics["forward_only"] == 1.0:
        # No training for a minute: passes read as evaluation are its work.
        fractions = {**fractions, "forward": fractions["forward"] + fractions["eval"],
                     "eval": 0.0}
    for phase in PHASES:
        metrics[f"phase_{phase}"] = fractions[phase] if fractions else None
    metrics["phase_compute"] = (
        fractions["forward"] + fractions["backward"] + fractions["optimizer"] if fractions else None
    )
    compute = metrics["phase_compute"]
    metrics["phase_device"] = (
        None if fractions is None or compute is None
        else compute + (fractions["sync"] if has_gpu else 0.0)
    )
    metrics["phase_samples"] = float(total)
    _compile_metrics(metrics, session, now, window_s)
    long_fractions = session.phase_fractions(now, max(LONG_WINDOW_S, window_s))
    metrics["phase_checkpoint_long"] = long_fractions["checkpoint"] if long_fractions else None
    metrics["phase_eval_long"] = long_fractions["eval"] if long_fractions else None
    if has_gpu:
        metrics["accel_util"] = metrics["gpu_util_mean"]
    else:
        compute = metrics["phase_compute"]
        metrics["accel_util"] = None if compute is None else 100.0 * compute


def _other_idle(metrics: dict[str, float | None]) -> float | None:
    """The part of the training thread's 'other' time it cannot have spent on a CPU.

    Its CPU use counted as 'other' work, the rest of that share is waiting (a
    sleep, a lock, a pipe to another process): a floor, 0 when the thread's CPU
    is unknown, so that work is never taken for waiting. Without a GPU the
    step's compute phases keep the thread on a CPU, less the time it waited for
    one (schedstat; without it nothing is credited), so that much of its CPU
    is not 'other' work: an unseen job sleeping 10 ms a step at module level
    read 9 % idle (its 41 % of forward and backward counted as 'other' CPU)
    and was told to log less often.
    """
    other = metrics.get("phase_other")
    if other is None:
        return None
    cpu = metrics.get("training_thread_cpu")
    if cpu is None:
        return 0.0
    busy = cpu / 100.0
    waiting = metrics.get("main_cpu_wait_mean")
    if metrics.get("has_gpu") == 0.0 and waiting is not None:
        # Not evaluation: its own data waits (idle) are counted in it. A step
        # that waits in the run queue (other jobs on the cores) is in a compute
        # phase without running: that time is not credited, so the idle share
        # stays a floor (a loaded box read a 74 % wait where removing it gave
        # x3.2, not the x3.8 a floor promises).
        computing = sum(metrics.get(f"phase_{p}") or 0.0
                        for p in ("forward", "backward", "optimizer"))
        busy = max(0.0, busy - max(0.0, computing - waiting / 100.0))
    return max(0.0, other - busy)


def _compile_metrics(metrics: dict[str, float | None], session: Session, now: float,
                     window_s: float) -> None:
    """Recompilation apart from the first compilation draining out of the window.

    The first compilation (``Session.compile_warmup``: the first run of stack
    windows mostly compiling, and its tail) is the warm-up; shares read while
    its windows are in the window describe it, not the steps:
    ``compile_warmup_share`` is how much of the window they fill. Compilation
    in any other window is recompilation: ``phase_compile_steady``. The newest
    window's compile share is ``phase_compile_last`` (compiling now).
    """
    windows = _latest_stacks(session, now, window_s)
    warmup = session.compile_warmup

    def in_warmup(w: StackWindow) -> bool:
        return warmup is not None and w.t_start >= warmup.start and (
            warmup.end is None or w.t_end <= warmup.end)

    counted = [w for w in windows if w.total_samples > 0]
    newest = counted[-1] if counted else None
    metrics["phase_compile_last"] = (
        None if newest is None else newest.phase_counts.get("compile", 0) / newest.total_samples)
    total = sum(w.total_samples for w in counted)
    metrics["compile_warmup_share"] = (
        sum(w.total_samples for w in counted if in_warmup(w)) / total if total else None)
    steady = [w for w in counted if not in_warmup(w)]
    steady_total = sum(w.total_samples for w in steady)
    metrics["phase_compile_steady"] = (
        sum(w.phase_counts.get("compile", 0) for w in steady) / steady_total
        if steady_total else None)


def _process_metrics(
    metrics: dict[str, float | None], session: Session, now: float, window_s: float
) -> None:
    """Workers, pin-memory thread, liveness, the cores allowed and their use."""
    # The newest sample *inside* the window, so a replay cursor or a late
    # evaluation sees the state at `now`, not whatever came last.
    trees = session.processes.window(now - window_s, now)
    tree = trees[-1] if trees else None
    job = session.job
    local = float(len(job.ranks)) if job is not None and job.ranks else 1.0
    metrics["local_ranks"] = local
    # The job's WORLD_SIZE: ranks on other machines are the job's too, watched or not.
    metrics["job_ranks"] = max(local, float(job.world_size)) if job is not None else local
    if tree is not None:
        metrics["num_workers"] = float(len(tree.workers))
        metrics["pin_memory"] = _flag(tree.pin_memory_thread)
        metrics["target_alive"] = float(tree.alive)
    else:
        metrics["num_workers"] = metrics["pin_memory"] = None
        metrics["target_alive"] = None if session.target_exited_at is None else 0.0
    metrics["watched_s"] = (
        None if session.started_at is None else max(0.0, now - session.started_at))
    hosts = session.host.window(now - window_s, now)
    env = session.environment
    if env is not None and env.cpus_allowed:
        metrics["cpu_count"] = float(env.cpus_allowed)
    else:
        metrics["cpu_count"] = float(hosts[-1].cpu_count) if hosts else None
    # Counted in threads, not CPU %, so that other processes loading the host do
    # not make a single-threaded job look parallel (or a parallel one look narrow).
    busy = metrics["main_busy_threads_mean"]
    cores = metrics["cpu_count"]
    metrics["cpu_headroom"] = (
        max(1.0, cores / max(busy, 1.0)) if busy is not None and cores else None
    )
    metrics["proc_rss_growth"] = memory_growth(session.series(
        session.processes, _tree_sum(lambda p: _mb(p.rss_bytes)), now,
        max(window_s, GROWTH_LOOKBACK_S)))
    _memory_runway(metrics, hosts[-1] if hosts else None)


#: Memory growth is fitted over the last minute (at least the rule window), and
#: read once it spans 15 s, with a slope at least 4 standard errors from flat;
#: from 10 s on, a slope twice as clear (8 standard errors) is read already: an
#: unseen job leaking 5 GB/min was still unconfirmed at the end of a 20-s report.
GROWTH_LOOKBACK_S = 60.0
GROWTH_MIN_SPAN_S = 15.0
GROWTH_MIN_T = 4.0
GROWTH_EARLY_SPAN_S = 10.0
GROWTH_EARLY_T = 8.0


def memory_growth(points: Sequence[tuple[float, float]]) -> float | None:
    """MB per minute the memory grows: the least-squares slope where it stands out
    of the memory's own swings, 0 where it does not, None before 10 s of points.

    A slope alone reads a job whose memory swings (the allocator returning and
    taking back tens of MB every few seconds; pytorch/examples'
    word_language_model swings 369-479 MB with no trend) as growing at
    100+ MB/min over any 20 s that happens to end on a high: its t statistic
    there stays under 3.1, a steady leak's climbs with the span.
    """
    span = points[-1][0] - points[0][0] if points else 0.0
    if len(points) < 5 or span < GROWTH_EARLY_SPAN_S:
        return None
    needed = GROWTH_MIN_T if span >= GROWTH_MIN_SPAN_S else GROWTH_EARLY_T
    ts = [t for t, _ in points]
    vs = [v for _, v in points]
    t_mean, v_mean = statistics.fmean(ts), statistics.fmean(vs)
    sxx = sum((t - t_mean) ** 2 for t in ts)
    slope = sum((t - t_mean) * (v - v_mean) for t, v in points) / sxx
    residual = sum((v - v_mean - slope * (t - t_mean)) ** 2 for t, v in points)
    error = math.sqrt(residual / (len(points) - 2) / sxx)
    significant = slope > 0 and (error == 0 or slope / error >= needed)
    if span < GROWTH_MIN_SPAN_S and not significant:
        return None  # not yet clear either way
    return slope * 60.0 if significant else 0.0


def _memory_runway(metrics: dict[str, float | None], host: HostSample | None) -> None:
    """Memory still free (RAM, or the job's cgroup limit when tighter), and how long
    it lasts at the target's growth over the window."""
    if host is None or host.ram_total_bytes is None or host.ram_used_bytes is None:
        metrics["host_ram_free_mb"] = metrics["ram_minutes_left"] = None
        metrics["cgroup_mem_free_mb"] = metrics["mem_free_mb"] = None
        return
    free = max(0.0, _mb(host.ram_total_bytes - host.ram_used_bytes) or 0.0)
    metrics["host_ram_free_mb"] = free
    limit = host.memory_limit
    cgroup_free = (None if limit is None
                   else max(0.0, _mb(limit.limit_bytes - limit.used_bytes) or 0.0))
    metrics["cgroup_mem_free_mb"] = cgroup_free
    headroom = free if _tighter_cgroup(host) is None or cgroup_free is None else cgroup_free
    metrics["mem_free_mb"] = headroom
    growth = metrics.get("proc_rss_growth")
    metrics["ram_minutes_left"] = (headroom / growth if growth is not None and growth > 0
                                   else None)


def _storage_metrics(
    metrics: dict[str, float | None], session: Session, now: float, window_s: float
) -> None:
    """Where the job's files live and whether a checkpoint is being written."""
    # Storage is sampled less often; look back a little further for it.
    storages = session.storage.window(now - max(window_s, 30.0), now)
    storage = storages[-1] if storages else None
    if storage is not None and storage.mounts:
        metrics["network_fs"] = float(any(m.is_network for m in storage.mounts))
        schedulers = [m.scheduler for m in storage.mounts if m.scheduler]
        metrics["scheduler_ok"] = (
            float(all(s in ("none", "mq-deadline") for s in schedulers)) if schedulers else None
        )
        metrics["checkpoint_writing"] = float(bool(storage.writing))
    else:
        metrics["network_fs"] = metrics["scheduler_ok"] = metrics["checkpoint_writing"] = None


def _technique_metrics(
    metrics: dict[str, float | None], session: Session, now: float, window_s: float
) -> None:
    """Techniques seen in the job's stacks (compile, AMP, activation checkpointing)."""
    windows = session.stacks.window(now - window_s, now)
    seen = {t for w in windows for t in w.techniques_seen}
    known = bool(windows)
    metrics["uses_compile"] = _flag("torch_compile" in seen) if known else None
    metrics["uses_amp"] = _flag("mixed_precision" in seen) if known else None
    # The job's own files, where autocast (entered in microseconds) rarely
    # shows in a stack: 0 also when nothing could be read (amp_source_read says).
    env = session.environment
    in_source = env.mixed_precision_in_source if env is not None else None
    metrics["amp_in_source"] = 1.0 if in_source else 0.0
    metrics["amp_source_read"] = 0.0 if in_source is None else 1.0
    metrics["uses_grad_checkpointing"] = _flag("gradient_checkpointing" in seen) if known else None
    metrics["uses_lightning"] = _flag("lightning" in seen) if known else None
    metrics["uses_hf_trainer"] = _flag("hf_trainer" in seen) if known else None
    metrics["uses_accelerate"] = _flag("accelerate" in seen) if known else None
