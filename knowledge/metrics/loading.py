"""Loading: who produces the batches, and the cores left for producing more."""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Mapping

from aitop.probes.samples import HostSample, OtherProcess, StackWindow, ThreadActivity
from aitop.probes.session import Session

from .capacity import loading_capacity_factor, suggested_workers
from .processes import BUSY_THREAD_PERCENT
from .stall_feeder import is_gone, live_threads
from .step_phases import read_stacks
from .units import Metrics, Values, flag

#: The step's phases in which torch's intra-op threads work beside the training thread.
INTRA_OP_PHASES = ("forward", "backward", "optimizer", "eval")


def loading_metrics(session: Session, now: float, window_s: float, known: Metrics) -> Values:
    """Who produces the batches, and the cores left for producing more.

    ``known``: the series, GPU, phase and process metrics of the same window
    (the CPU means, ``cpu_count``, ``num_workers``, the phase shares).
    """
    windows = read_stacks(session, now, window_s)
    main_source = main_data_source(windows)
    values: Values = {
        "data_from_queue": (None if not windows
                            else float(main_source in ("thread queue", "process queue"))),
        "data_in_own_code": None if not windows else float(main_source == "own code"),
    }
    # Formulas over this family's values and the ones it was given.
    seen: Mapping[str, float | None] = ChainMap(values, dict(known))
    busy_share: float | None = None
    if main_source == "process queue":
        child = busiest_child(session, now, window_s)
        cpu = child[1] if child else None
    else:
        producer = busiest_producer(windows, session, now, window_s)
        cpu = thread_cpu(session, producer.thread_id, now, window_s) if producer else None
        if producer is not None and producer.samples:
            busy_share = producer.busy_samples / producer.samples
        elif producer is None and windows:
            cpu = 0.0  # stacks seen, and no other Python thread in them: none works
    values["producer_cpu"] = cpu
    others = {t.thread_id for w in windows for t in w.other_threads}
    loads = [thread_cpu(session, tid, now, window_s) for tid in others]
    values["busy_python_threads"] = (
        None if not windows else float(sum(1 for c in loads if (c or 0.0) >= BUSY_THREAD_PERCENT))
    )
    training = next((w.thread_id for w in reversed(windows) if w.thread_id), None)
    values["training_thread_cpu"] = (
        thread_cpu(session, training, now, window_s) if training else None
    )
    values["phase_other_idle"] = other_idle(seen)
    # Its CPU where known: a sleeping thread's samples can look like work.
    values["producer_busy"] = min(cpu / 100.0, 1.0) if cpu is not None else busy_share
    values |= free_cores(seen, session.host.window(now - window_s, now))
    values["compute_threads"] = compute_threads(seen)
    values["free_cores_in_compute"] = free_cores_in_compute(seen)
    values["free_cores_for_loading"] = free_cores_for_loading(seen)
    threads = values["compute_threads"]
    values["threads_beside_worker"] = (
        None if threads is None else float(max(1, round(threads) - 1)))
    # Known wherever any process sample of the window carried its run delay.
    values["runqueue_known"] = (
        None if known.get("proc_cpu_mean") is None
        else flag(known.get("proc_cpu_wait_mean") is not None)
    )
    values["suggested_workers"] = suggested_workers(seen)
    capacity = loading_capacity_factor(seen)
    values["loading_capacity"] = capacity[0] if capacity else None
    main_cpu, free = known.get("main_cpu_mean"), values["free_cores"]
    values["suggested_threads"] = (
        None if main_cpu is None or free is None
        else float(max(1, math.floor(main_cpu / 100.0 + free + 0.25)))
    )
    return values


def main_data_source(windows: list[StackWindow]) -> str | None:
    """Where most of the training thread's data waits were spent."""
    sources: dict[str, int] = {}
    for w in windows:
        if w.data_source is not None:
            wait = w.phase_counts.get("data_wait", 0)
            sources[w.data_source] = sources.get(w.data_source, 0) + wait
    return max(sources, key=lambda k: sources[k]) if sources else None


def busiest_producer(
    windows: list[StackWindow], session: Session | None = None, now: float = 0.0,
    window_s: float = 0.0,
) -> ThreadActivity | None:
    """The busiest other thread over the windows.

    By its CPU where the process probe knows it (a thread asleep in
    ``time.sleep`` has no frame of its own that says it waits), else by the
    samples py-spy saw it outside a wait. A thread that has exited since is
    no producer: a dead producer gets no advice, and the loop waiting for it
    reads as stalled (docs/diagnosis.md).
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
    cpu = {tid: thread_cpu(session, tid, now, window_s) for tid in best} if session else {}
    known = {tid: c for tid, c in cpu.items() if c is not None}
    tid = max(known, key=lambda k: known[k]) if known else max(best, key=lambda k: best[k][0])
    busy, total, last = best[tid]
    return ThreadActivity(tid, last.name, total, busy, last.top_frame)


def busiest_child(session: Session, now: float, window_s: float) -> tuple[str, float] | None:
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


def thread_cpu(
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


def other_idle(metrics: Metrics) -> float | None:
    """The part of the training thread's 'other' time it cannot have spent on a CPU.

    Its CPU use counted as 'other' work, the rest of that share is waiting (a
    sleep, a lock, a pipe to another process): a floor, 0 when the thread's CPU
    is unknown, so that work is never taken for waiting. Without a GPU the
    step's compute phases keep the thread on a CPU, less the time it waited for
    one (schedstat; without it nothing is credited), so that much of its CPU
    is not 'other' work: counted as 'other', the compute's CPU would hide a
    sleep in the loop behind advice about logging (docs/diagnosis.md).
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


def free_cores(metrics: Metrics, hosts: list[HostSample]) -> Values:
    """Cores the job could still use (its allowance minus its use, capped by the idle
    machine), the cores other processes keep busy, and what would be free without them.

    The allowance is what the job may use (affinity, cpuset, CPU quota); where
    other processes share its quota (a container's other programs), what they
    run is spent from it too. Idle cores outside the allowance are none of its.
    """
    values: Values = {"other_procs_cpu": None, "free_cores_without_others": None,
                      "free_cores": None}
    allowed = metrics.get("cpu_count")
    used = metrics.get("proc_cpu_mean")
    host = metrics.get("host_cpu_mean")
    if allowed is None or used is None or host is None or not hosts:
        return values
    machine_idle = hosts[-1].cpu_count * (1.0 - host / 100.0)
    others = other_processes_cores(hosts)
    sharing = metrics.get("cpu_group_others") or 0.0
    left = allowed - used / 100.0
    return {
        "other_procs_cpu": others,
        "free_cores_without_others": (
            None if others is None else max(0.0, min(left, machine_idle + others))),
        "free_cores": max(0.0, min(left - sharing, machine_idle)),
    }


def other_processes_cores(hosts: list[HostSample]) -> float | None:
    """Cores the processes outside the job kept busy, on average over the window.

    Each host sample carries the newest neighbour scan (scans are sparser than
    samples), so the mean over samples weighs each scan by how long it stood; two
    scans that read the same (a neighbour busy at exactly one core) count twice.
    """
    scans = [h.others for h in hosts if h.others is not None]
    if not scans:
        return None
    return sum(sum(p.cores for p in scan) for scan in scans) / len(scans)


def busiest_neighbours(hosts: list[HostSample], kept: int = 2) -> list[OtherProcess]:
    """The processes outside the job that kept the most cores busy, on average over
    the window as ``other_processes_cores`` counts them: a neighbour that has left
    since (a build, another user's script) is named for what it took."""
    scans = [h.others for h in hosts if h.others is not None]
    totals: dict[tuple[int, str], float] = {}
    for scan in scans:
        for process in scan:
            key = (process.pid, process.command)
            totals[key] = totals.get(key, 0.0) + process.cores
    ranked = sorted(totals.items(), key=lambda item: -item[1])[:kept]
    return [OtherProcess(pid, command, cores / len(scans))
            for (pid, command), cores in ranked]


def compute_threads(metrics: Metrics) -> float | None:
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
    shares = [metrics.get(f"phase_{p}") for p in INTRA_OP_PHASES]
    compute = sum(s for s in shares if s is not None)
    helpers = max(0.0, main_cpu - training) / 100.0
    if compute < 0.05:
        return 1.0 + helpers
    return 1.0 + min(helpers / min(compute, 1.0), max(0.0, busy - 1.0))


def free_cores_in_compute(metrics: Metrics) -> float | None:
    """Cores free while the step computes: what a new DataLoader worker would get.

    ``free_cores`` is a mean over the window. Where the job's own compute threads
    (torch's intra-op pool) fill the cores while forward and backward run and
    leave them while the training thread loads a batch, the mean shows a core
    free that a worker running beside the compute would not have (the measured
    case is in docs/diagnosis.md). The main process's threads
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


def free_cores_for_loading(metrics: Metrics) -> float | None:
    """Cores more loading would get: with DataLoader workers the mean free cores,
    without them those free while the step computes.

    A worker loads beside the whole step, not only while it computes: while the
    loop waits for data the step's compute threads leave their cores, and a new
    worker gets them, so the cores they hold while the step computes are not
    taken from it. Without workers the loading itself leaves the training
    thread, which then computes all the time: a worker gets only what the
    compute threads leave then (``free_cores_in_compute``).
    """
    workers = metrics.get("num_workers")
    if workers is None:
        return None
    return metrics.get("free_cores" if workers >= 1 else "free_cores_in_compute")
