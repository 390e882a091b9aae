"""Runs every probe on its own cadence, each on its own thread, into a Session.

A slow or hung probe (NVML stuck in the driver, py-spy waiting on ptrace) only
delays its own samples: nothing else waits for it, and no UI thread ever does.
Each loop sleeps until its next due time (not a fixed sleep after the work), so
cadences do not drift and polls never pile up. A probe that fails for a reason
that will not go away (no permission, not a Python process) stops, and says why
in ``session.probe_status``; the others keep running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .cadence import HEADLESS, UI, Profile
from .pyspy import PySpyError
from .samples import LogEvent, StackWindow, StepCounterSample
from .session import Session
from .status import ProbeStatus
from .steps import SLOW_COUNTER_STEPS

#: A failing task retries after this long at first (even one that runs back to
#: back when healthy, like py-spy windows), doubling up to ``MAX_RETRY_S``.
MIN_RETRY_S = 1.0
MAX_RETRY_S = 30.0
#: The lowest py-spy rate a paced-down collector samples at (``Collector.set_pace``):
#: the peer rank's floor in ``probes.cadence.TABLE``.
MIN_PACED_RATE_HZ = 2
#: The longest a headless report's last step reading waits for one in progress.
LAST_READING_WAIT_S = 5.0
#: The step counter is read at moments ``1 ± this`` of its cadence apart: a
#: count that starts again each epoch, read on one beat, can advance by the
#: same leftover of an epoch at every reading and look like a slow steady
#: count; read off the beat, its rises disagree and it is set aside
#: (``step_rate.epochs_pass_unseen``; docs/step-rates.md).
STEP_READ_JITTER = 0.3


class Sampler(Protocol):
    def sample(self) -> object: ...


class StackSampler(Protocol):
    #: Samples per second of the next window (read at each window's start).
    rate_hz: int

    def run_window(self, window_s: int | None = None) -> StackWindow: ...

    def stop(self) -> None:
        """Cut a window in progress short."""

    def close(self) -> None:
        """Stop, and remove the files it keeps."""


class StepSampler(Protocol):
    def sample(
        self, loop_frame: str | None, thread_id: str | None, worker_pids: Sequence[int] = (),
        compiling: bool = False,
    ) -> Sequence[StepCounterSample]: ...

    def read_log(self) -> StepCounterSample | None: ...

    def log_events(self) -> list[LogEvent]: ...

    def frame_events(self) -> list[LogEvent]: ...

    @property
    def log_name(self) -> str | None: ...

    @property
    def log_via(self) -> str | None: ...


@dataclass(frozen=True)
class CollectorConfig:
    """The collector's cadences: a column of ``probes.cadence.TABLE`` (each row says
    its rule and cites the measurement behind it). The defaults are the UI's."""

    interval_s: float = UI.interval_s
    gpu_interval_s: float = UI.gpu_interval_s
    storage_interval_s: float = UI.storage_interval_s
    environment_interval_s: float = UI.environment_interval_s
    stack_rate_hz: int = UI.stack_rate_hz
    stack_window_s: int = UI.stack_window_s
    first_stack_window_s: int = UI.first_stack_window_s
    steps_interval_s: float = UI.steps_interval_s
    #: Readings taken every ``steps_warmup_interval_s`` before settling.
    steps_warmup_readings: int = UI.steps_warmup_readings
    steps_warmup_interval_s: float = UI.steps_warmup_interval_s
    #: Readings of a counter that moves few steps between readings (slow steps).
    steps_slow_interval_s: float = UI.steps_slow_interval_s
    #: Private memory (``smaps_rollup``): the soonest a DataLoader worker is read
    #: again, the soonest any other process is, and the share of a core the reads
    #: may take (``private_memory.py``).
    smaps_interval_s: float = UI.smaps_interval_s
    smaps_others_interval_s: float = UI.smaps_others_interval_s
    smaps_cpu_share: float = UI.smaps_cpu_share

    def stack_window(self, index: int) -> int:
        """Length of the index-th py-spy window: the first one, doubling up to the
        steady length (a verdict within seconds, then the launch cost spread)."""
        return min(self.stack_window_s, self.first_stack_window_s * 2**index)

    @classmethod
    def of(cls, profile: Profile) -> CollectorConfig:
        """The collector's part of a profile."""
        return cls(**{f.name: getattr(profile, f.name) for f in dataclasses.fields(cls)})

    @classmethod
    def headless(cls) -> CollectorConfig:
        """The headless column: nobody watches a refresh (see ``probes.cadence``)."""
        return cls.of(HEADLESS)


class PeriodicTask:
    """Calls ``work`` every ``interval_s`` on a daemon thread until stopped.

    Used for every probe and for the live rule evaluation: a failure is written
    to ``status[name]`` (the task keeps going, backing off), a failure that will
    not go away stops the task and says why.
    """

    def __init__(
        self,
        name: str,
        work: Callable[[], None],
        interval_s: float,
        status: dict[str, ProbeStatus],
        stop: threading.Event,
        on_fatal: Callable[[BaseException], None] | None = None,
        first_delay_s: float = 0.0,
        jitter: float = 0.0,
    ) -> None:
        self.first_delay_s = first_delay_s
        #: Each healthy wait is ``interval_s`` times a factor drawn from
        #: ``1 ± jitter``: readings that never keep one beat with the job.
        self.jitter = jitter
        self._draws = random.Random()
        self.name = name
        self.work = work
        self.interval_s = interval_s
        self.status = status
        self.stop_event = stop
        self.on_fatal = on_fatal
        #: Consecutive failures so far (0 once a run succeeds).
        self.failures = 0
        #: How many times its own interval the task waits between runs (a node
        #: agent sharing its cost among jobs, or keeping inside a CPU budget).
        self.pace = 1.0
        self.thread = threading.Thread(target=self._run, name=f"aitop-{name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def delay_after(self, failures: int) -> float:
        """Seconds to the next run: the cadence, or a doubling back-off after failures.

        The back-off has a floor, so a task that runs back to back when healthy
        (py-spy windows, interval 0) cannot relaunch a failing program in a loop.
        """
        if failures == 0:
            spread = self._draws.uniform(-self.jitter, self.jitter) if self.jitter else 0.0
            return self.interval_s * self.pace * (1.0 + spread)
        base = max(self.interval_s, MIN_RETRY_S)
        return min(base * 2 ** (failures - 1), max(MAX_RETRY_S, self.interval_s))

    def _failed(self, reason: str, failures: int) -> ProbeStatus:
        retry = self.delay_after(failures)
        return ProbeStatus("error", f"{reason} (failed {failures}x; retrying in {retry:g} s)")

    def _run(self) -> None:
        next_due = time.monotonic() + self.first_delay_s
        if self.stop_event.wait(self.first_delay_s):
            return
        failures = 0
        while not self.stop_event.is_set():
            try:
                self.work()
                failures = 0
            except PySpyError as exc:
                if exc.kind in ("permission", "missing", "not_python", "gone"):
                    self.status[self.name] = ProbeStatus("unavailable", str(exc))
                    if self.on_fatal is not None:
                        self.on_fatal(exc)
                    return
                failures += 1
                self.status[self.name] = self._failed(str(exc), failures)
            except Exception as exc:  # a probe bug must not kill collection
                failures += 1
                self.status[self.name] = self._failed(f"{type(exc).__name__}: {exc}", failures)
            self.failures = failures
            next_due = max(next_due + self.delay_after(failures), time.monotonic())
            self.stop_event.wait(max(0.0, next_due - time.monotonic()))


class Collector:
    """Owns the probe threads that fill one Session.

    Probes are passed in already constructed (so tests and the CLI decide which
    exist); any may be None, and its absence is stated in the probe status.
    """

    def __init__(
        self,
        session: Session,
        *,
        process: Sampler | None,
        host: Sampler | None,
        gpu: Callable[[], object] | None,
        storage: Sampler | None,
        environment: Sampler | None,
        stacks: StackSampler | None,
        steps: StepSampler | None,
        config: CollectorConfig = CollectorConfig(),
    ) -> None:
        self.session = session
        self.config = config
        self.stop_event = threading.Event()
        self.loops: list[PeriodicTask] = []
        self._stacks = stacks
        #: One step reading, run here and now (``read_steps_now``); None without steps.
        self._read_steps: Callable[[], None] | None = None
        cfg = config
        for name, sampler, interval in (
            ("process", process.sample if process else None, cfg.interval_s),
            ("host", host.sample if host else None, cfg.interval_s),
            ("gpu", gpu, cfg.gpu_interval_s),
            ("storage", storage.sample if storage else None, cfg.storage_interval_s),
            ("environment", environment.sample if environment else None,
             cfg.environment_interval_s),
        ):
            if sampler is not None:
                self._add_periodic(name, sampler, interval)
        if stacks is not None:
            self._add_stacks(stacks)
        if steps is not None:
            self._add_steps(steps)
        for name, probe in (
            ("process", process), ("host", host), ("gpu", gpu), ("storage", storage),
            ("stacks", stacks), ("steps", steps),
        ):
            if probe is None:
                session.probe_status.setdefault(name, ProbeStatus("off"))

    def _add_periodic(self, name: str, sampler: Callable[[], object], interval: float) -> None:
        session, status = self.session, self.session.probe_status
        ok = ProbeStatus("ok", f"every {interval:g} s")

        def work() -> None:
            sample = sampler()
            session.add(sample)
            # A probe that answers "not available" (no GPU driver) says why.
            if getattr(sample, "available", True) is False:
                reason = getattr(sample, "reason", None) or "unknown reason"
                status[name] = ProbeStatus("unavailable", reason)
            else:
                status[name] = ok

        self.loops.append(PeriodicTask(name, work, interval, status, self.stop_event))

    def _add_stacks(self, stacks: StackSampler) -> None:
        session, cfg = self.session, self.config
        ok = ProbeStatus(
            "ok", f"py-spy {cfg.stack_rate_hz} Hz, {cfg.stack_window_s} s windows (nonblocking)"
        )
        windows_done = 0

        def work() -> None:
            nonlocal windows_done
            session.add(stacks.run_window(cfg.stack_window(windows_done)))
            windows_done += 1
            session.probe_status["stacks"] = ok

        self.loops.append(
            PeriodicTask("stacks", work, 0.0, session.probe_status, self.stop_event)
        )

    def _add_steps(self, steps: StepSampler) -> None:
        session, cfg = self.session, self.config
        # First read right after the first stack window has found the loop frame.
        task = PeriodicTask(
            "steps", lambda: None, min(cfg.steps_interval_s, cfg.steps_warmup_interval_s),
            session.probe_status,
            self.stop_event, first_delay_s=cfg.first_stack_window_s + 0.5,
            jitter=STEP_READ_JITTER,
        )
        readings = 0
        previous: StepCounterSample | None = None
        #: Whether the loop's counter has ever moved (a constant is no slow counter).
        moved = False

        lock = threading.Lock()  # the loop's thread and a last reading never read at once

        def read() -> tuple[Sequence[StepCounterSample], StepCounterSample | None]:
            """One reading into the session (``lock`` held): its samples, and the
            first that counted."""
            window = session.stacks.last()
            tree = session.processes.last()
            workers = tuple(p.pid for p in tree.workers) if tree is not None else ()
            samples = steps.sample(
                window.loop_frame if window else None,
                window.thread_id if window else None,
                workers,
                compiling=window is not None and window.phase_counts.get("compile", 0) > 0,
            )
            for event in steps.frame_events():
                session.add(event)
            for sample in samples:
                session.add(sample)
            return samples, next((s for s in samples if s.value is not None), None)

        def work() -> None:
            nonlocal readings, previous, moved
            with lock:
                samples, counted = read()
            readings += counted is not None
            # Read often until a rate is well established, then settle; a slow
            # counter is read more often still, so that its few moves are timed.
            step = (None if counted is None or previous is None or previous.value is None
                    or counted.name != previous.name else (counted.value or 0) - previous.value)
            moved = moved or bool(step)
            slow = step is not None and moved and 0 <= step <= SLOW_COUNTER_STEPS
            if slow:
                task.interval_s = min(cfg.steps_slow_interval_s, cfg.steps_interval_s)
            elif readings >= cfg.steps_warmup_readings:
                task.interval_s = cfg.steps_interval_s
            else:
                task.interval_s = min(cfg.steps_interval_s, cfg.steps_warmup_interval_s)
            previous = counted if counted is not None and counted.source == "loop" else None
            via = f" (written by {steps.log_via})" if steps.log_via else ""
            printed = (f"; its log {steps.log_name}{via} is read for a step it prints"
                       if steps.log_name else "")
            missing = samples[0].error if samples else None
            session.probe_status["steps"] = (
                ProbeStatus("ok", f"counter '{counted.name}' every {task.interval_s:g} s"
                                  f"{printed}")
                if counted is not None
                else ProbeStatus("ok", f"no counter{printed}") if steps.log_name
                else ProbeStatus("partial", missing or "no step counter found")
            )

        def last() -> None:
            # Only a counter already found is read again, and only the session
            # hears of it: the cadence and the probe's status stay the loop's.
            if readings and lock.acquire(timeout=LAST_READING_WAIT_S):
                try:
                    read()
                finally:
                    lock.release()

        task.work = work
        self._read_steps = last
        self.loops.append(task)
        if steps.log_name is not None:
            self._add_log(steps)

    def _add_log(self, steps: StepSampler) -> None:
        """The job's log, read as often as the process tree: a read is a stat and
        the bytes appended since, and each new step line is a reading (stamped
        with its write, so the cadence sets how many readings, not their time).
        Its state is the steps probe's, so it keeps no status of its own."""

        def work() -> None:
            logged = steps.read_log()
            if logged is not None:
                self.session.add(logged)
            for event in steps.log_events():
                self.session.add(event)

        self.loops.append(PeriodicTask("log", work, self.config.interval_s, {}, self.stop_event))

    def read_steps_now(self) -> None:
        """One more step reading, here and now: a headless report's last, so that its
        rate spans the whole watch. Its cadence (``probes.cadence``) reads the counter
        a few times quickly, then at a steady interval that can outlast what is left
        of a short report: without this, a pace that changed after the quick
        readings would not be in the report's rate. The job's log needs none: it is
        read every tick."""
        if self._read_steps is not None and not self.stop_event.is_set():
            with contextlib.suppress(Exception):
                self._read_steps()

    def set_pace(self, pace: float) -> None:
        """Sample ``pace`` times less often than the config says (1 = as configured).

        Every periodic probe waits ``pace`` times its interval, and py-spy
        samples at ``rate / pace``, never under ``MIN_PACED_RATE_HZ`` (a window
        must still hold enough samples to count phases in). Takes effect from
        each probe's next run: nothing restarts.
        """
        pace = max(1.0, pace)
        for loop in self.loops:
            loop.pace = pace
        if self._stacks is not None:
            base = self.config.stack_rate_hz
            self._stacks.rate_hz = max(min(base, MIN_PACED_RATE_HZ), round(base / pace))

    def start(self) -> None:
        for loop in self.loops:
            if loop.status is self.session.probe_status:
                self.session.probe_status.setdefault(loop.name, ProbeStatus("starting"))
            loop.start()

    def stop(self, timeout_s: float = 3.0) -> None:
        """Stop all loops; a py-spy window in progress is cut short."""
        self.stop_event.set()
        if self._stacks is not None:
            with contextlib.suppress(Exception):
                self._stacks.stop()
        deadline = time.monotonic() + timeout_s
        for loop in self.loops:
            if loop.thread.ident is not None:  # stopped before it started: nothing runs
                loop.thread.join(max(0.0, deadline - time.monotonic()))
        if self._stacks is not None:
            with contextlib.suppress(Exception):
                self._stacks.close()
