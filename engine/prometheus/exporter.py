"""aitop's live conclusions as Prometheus metrics, read without disturbing the job.

Two halves, so that a scrape can never slow a probe down:

* :class:`Publisher` runs on the serve loop's thread. Once a second it reads the
  evaluator's already-published diagnosis (an immutable value, swapped whole)
  and the newest samples, keeps the counters (stack samples per phase, training
  steps, rule firings), and builds a frozen :class:`Frame`.
* :class:`AitopCollector` is the custom ``prometheus_client`` collector. A scrape
  takes the current frame reference (one attribute read: no lock, no
  evaluation) and builds the metric families from it at scrape time, adding
  what only the scrape moment knows (how old the evaluation is, aitop's own CPU).

Conventions (prometheus.io/docs/practices/naming and /instrumentation/writing_exporters):
``aitop_`` prefix, base units, ``_total`` counters, ``aitop_up`` for health,
``_info`` for metadata, no high-cardinality labels (the PID and command line live
only in ``aitop_target_info``). GPU series carry dcgm-exporter's labels
(``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``) plus ``rank`` when
the job has one, so dashboards can join them with ``DCGM_FI_*`` series. Every
label value passes through :mod:`aitop.probes.redact` first.
"""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from aitop.engine.prometheus.names import PHASE_LABEL, base_value, exported_metrics
from aitop.knowledge.metrics import STEPS_WINDOW_S
from aitop.knowledge.model import CATEGORIES, COLLECTING, UNKNOWN, Diagnosis
from aitop.knowledge.rules import Rule
from aitop.probes.own_version import aitop_version
from aitop.probes.redact import redact_argv, redact_text
from aitop.probes.samples import EnvironmentInfo, GpuDevice, GpuSample, StepCounterSample
from aitop.probes.session import PHASES, Session
from aitop.probes.status import PROBE_STATES, ProbeStatus
from aitop.probes.steps import counter_increments
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

#: A frame older than this (the serve loop publishes every second) means aitop
#: itself is stuck: ``aitop_up`` reads 0.
STALE_AFTER_S = 10.0
#: The longest command line exported in ``aitop_target_info`` (a label, not a log).
MAX_COMMAND_CHARS = 256

#: dcgm-exporter's label names, spelled as it spells them (``Hostname`` with a
#: capital H), so that ``on(UUID)`` / ``on(gpu, Hostname)`` joins work.
DCGM_LABELS: tuple[str, ...] = ("gpu", "UUID", "device", "modelName", "Hostname")


@dataclass(frozen=True)
class Frame:
    """Everything a scrape shows, as of one moment; never changed once built."""

    published_at: float
    attached_at: float
    target_pid: int
    target_alive: bool
    diagnosis: Diagnosis | None
    gpu: GpuSample | None
    environment: EnvironmentInfo | None
    #: The rules in force (packaged plus --rules files): each gets a firing series.
    rules: tuple[Rule, ...] = ()
    probe_states: tuple[tuple[str, str], ...] = ()
    #: Cumulative stack samples of the training thread per phase since attach.
    stack_samples: tuple[tuple[str, int], ...] = ()
    #: Cumulative training steps counted since attach; None until a counter is found.
    steps_total: int | None = None
    #: Times each rule has started firing since attach.
    fired_total: tuple[tuple[str, int], ...] = ()


@dataclass
class Publisher:
    """Builds frames from a live session and its evaluator's published diagnosis.

    Runs on one thread (the serve loop). It reads rings the way every other
    reader does (each ring's short append lock), never the scrape thread.
    """

    session: Session
    latest: Callable[[], Diagnosis | None]
    attached_at: float
    rules: tuple[Rule, ...] = ()
    _stack_counts: dict[str, int] = field(default_factory=dict)
    _stacks_seen_to: float = -math.inf
    _last_reading: StepCounterSample | None = None
    _steps_total: int | None = None
    _fired_at: dict[str, float] = field(default_factory=dict)
    _fired_total: dict[str, int] = field(default_factory=dict)

    def frame(self, now: float) -> Frame:
        diagnosis = self.latest()
        self._count_stacks(now)
        self._count_steps(now)
        self._count_firings(diagnosis)
        session = self.session
        return Frame(
            published_at=now,
            attached_at=self.attached_at,
            target_pid=session.target_pid,
            target_alive=session.target_exited_at is None,
            diagnosis=diagnosis,
            gpu=session.gpu.last(),
            environment=session.environment,
            rules=self.rules,
            probe_states=tuple(
                (name, status.state) for name, status in dict(session.probe_status).items()
                if isinstance(status, ProbeStatus)
            ),
            stack_samples=tuple(self._stack_counts.items()),
            steps_total=self._steps_total,
            fired_total=tuple(self._fired_total.items()),
        )

    def _count_stacks(self, now: float) -> None:
        for window in self.session.stacks.window(self._stacks_seen_to, now):
            self._stacks_seen_to = max(self._stacks_seen_to, window.t_end)
            if window.error is not None:
                continue
            for phase, n in window.phase_counts.items():
                self._stack_counts[phase] = self._stack_counts.get(phase, 0) + n
        for phase in PHASES:
            self._stack_counts.setdefault(phase, 0)

    def _count_steps(self, now: float) -> None:
        # The chosen source's readings (loop counter or the job's printed step)
        # since the last one counted, chosen over at least the half minute that
        # steps/s is judged on; a change of source starts from its first.
        since = self._last_reading.t if self._last_reading is not None else -math.inf
        chosen = self.session.step_readings(min(since, now - STEPS_WINDOW_S), now).readings
        new = [s for s in chosen if s.value is not None and s.t > since]
        if not new:
            return
        readings = [self._last_reading, *new] if self._last_reading is not None else new
        increments = counter_increments(readings)
        if self._steps_total is None:
            self._steps_total = 0
        self._steps_total += sum(n for _prev, _cur, n in increments)
        self._last_reading = readings[-1]

    def _count_firings(self, diagnosis: Diagnosis | None) -> None:
        for finding in diagnosis.findings if diagnosis else ():
            if self._fired_at.get(finding.id) != finding.fired_at:
                self._fired_at[finding.id] = finding.fired_at
                self._fired_total[finding.id] = self._fired_total.get(finding.id, 0) + 1


def _clean(value: object) -> str:
    """A label value as exported: text, secrets redacted."""
    return redact_text(str(value))


def _number(value: float | None) -> float | None:
    if value is None:
        return None
    number = float(value)
    return number if math.isfinite(number) else None


class AitopCollector(Collector):
    """The metrics of one attached job, built at scrape time from the newest frame."""

    def __init__(
        self,
        *,
        self_cpu_seconds: Callable[[], float],
        self_rss_bytes: Callable[[], int],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._self_cpu = self_cpu_seconds
        self._self_rss = self_rss_bytes
        self._clock = clock
        self._frame: Frame | None = None
        self._hostname = socket.gethostname()

    def publish(self, frame: Frame) -> None:
        """Make ``frame`` what scrapes show (an atomic reference swap)."""
        self._frame = frame

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: registering must not build a scrape (see ``collect``)."""
        return ()

    def collect(self) -> Iterator[Metric]:
        frame = self._frame  # the one read of shared state a scrape makes
        now = self._clock()
        yield from self._health(frame, now)
        if frame is None:
            return
        yield from self._target(frame)
        diagnosis = frame.diagnosis
        if diagnosis is not None:
            yield from self._evaluation(diagnosis, now)
            yield from self._catalogue(diagnosis.metrics)
        yield from self._counters(frame)
        yield from self._findings(frame)
        yield from self._probes(frame)
        yield from self._gpus(frame)

    # ------------------------------------------------------------ families

    def _health(self, frame: Frame | None, now: float) -> Iterator[Metric]:
        fresh = frame is not None and now - frame.published_at <= STALE_AFTER_S
        up = bool(frame is not None and frame.target_alive and fresh)
        yield GaugeMetricFamily(
            "aitop_up",
            "1 while aitop is attached to a live training process and publishing "
            f"evaluations (the newest under {STALE_AFTER_S:g} s old), else 0",
            value=float(up),
        )
        build = InfoMetricFamily("aitop_build", "aitop's version")
        build.add_metric([], {"version": _clean(aitop_version() or "unknown")})
        yield build
        yield CounterMetricFamily(
            "aitop_self_cpu_seconds",
            "CPU time aitop itself has used (py-spy runs included), in seconds",
            value=self._self_cpu(),
        )
        yield GaugeMetricFamily(
            "aitop_self_resident_memory_bytes", "aitop's own resident memory in bytes",
            value=float(self._self_rss()),
        )

    def _target(self, frame: Frame) -> Iterator[Metric]:
        env = frame.environment
        info: dict[str, str] = {"pid": str(frame.target_pid)}
        if env is not None:
            command = " ".join(redact_argv(env.cmdline))
            info["command"] = command[:MAX_COMMAND_CHARS]
            info["hostname"] = env.hostname or self._hostname
            if env.python_version:
                info["python_version"] = env.python_version
            if env.torch_version:
                info["torch_version"] = env.torch_version
            rank = self._rank(env)
            if rank is not None:
                info["rank"] = rank
        target = InfoMetricFamily(
            "aitop_target", "the training process aitop is attached to (secrets redacted)"
        )
        target.add_metric([], {k: _clean(v) for k, v in info.items()})
        yield target
        yield GaugeMetricFamily(
            "aitop_attach_time_seconds", "when aitop attached, in seconds since the epoch",
            value=frame.attached_at,
        )

    @staticmethod
    def _rank(env: EnvironmentInfo) -> str | None:
        rank = env.env.get("RANK")
        return rank if rank is not None and rank.isdigit() else None

    def _evaluation(self, diagnosis: Diagnosis, now: float) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "aitop_evaluation_timestamp_seconds",
            "when the exported diagnosis was made, in seconds since the epoch",
            value=diagnosis.t,
        )
        yield GaugeMetricFamily(
            "aitop_evaluation_age_seconds",
            "seconds between the exported diagnosis and this scrape",
            value=max(0.0, now - diagnosis.t),
        )
        bottleneck = GaugeMetricFamily(
            "aitop_bottleneck",
            "1 for the category aitop names as the job's bottleneck now, 0 for the others",
            labels=["category"],
        )
        # Every value, always (the enum pattern), so a panel never sees a gap;
        # "collecting"/"unknown" are what a diagnosis says before it can judge.
        categories = [*CATEGORIES, COLLECTING, UNKNOWN]
        if diagnosis.category not in categories:
            categories.append(diagnosis.category)  # a category newer than this list
        for category in categories:
            bottleneck.add_metric([_clean(category)], float(category == diagnosis.category))
        yield bottleneck

    def _catalogue(self, metrics: Mapping[str, float | None]) -> Iterator[Metric]:
        """Every catalogue metric with a value, in base units (unknown ones are absent)."""
        families: dict[str, GaugeMetricFamily] = {}
        for metric, spec in exported_metrics().items():
            value = _number(metrics.get(metric))
            if value is None:
                continue
            family = families.get(spec.name)
            if family is None:
                family = GaugeMetricFamily(
                    spec.name, spec.help, labels=[k for k, _ in spec.labels]
                )
                families[spec.name] = family
            family.add_metric([v for _, v in spec.labels], base_value(value, spec.scale))
        yield from families.values()

    def _counters(self, frame: Frame) -> Iterator[Metric]:
        samples = CounterMetricFamily(
            "aitop_stack_samples",
            "stack samples of the training thread per step phase since aitop attached "
            "(rate() of these gives the phase shares over any range)",
            labels=[PHASE_LABEL],
        )
        for phase, n in frame.stack_samples:
            samples.add_metric([_clean(phase)], float(n))
        yield samples
        if frame.steps_total is not None:
            yield CounterMetricFamily(
                "aitop_training_steps",
                "training steps counted since aitop attached (the loop counter, or the step "
                "the job prints)",
                value=float(frame.steps_total),
            )

    def _findings(self, frame: Frame) -> Iterator[Metric]:
        diagnosis = frame.diagnosis
        firing = {f.id: f for f in (diagnosis.findings if diagnosis else ())}
        labels = ["rule", "severity", "category"]
        state = GaugeMetricFamily(
            "aitop_finding_firing",
            "1 while a rule of aitop's knowledge base is firing (for: and keep_firing_for: "
            "applied), 0 otherwise",
            labels=labels,
        )
        speedup = GaugeMetricFamily(
            "aitop_finding_estimated_speedup",
            "estimated speed-up of the training step from acting on a firing finding "
            "(1 = none); method: predicted (for this job on this machine), amdahl (a "
            "ceiling, at most) or document (the source documents' general figure)",
            labels=[*labels, "method"],
        )
        fired = CounterMetricFamily(
            "aitop_finding_fired", "times a rule has started firing since aitop attached",
            labels=labels,
        )
        totals = dict(frame.fired_total)
        for rule in frame.rules:
            values = [_clean(rule.id), _clean(rule.severity), _clean(rule.category)]
            finding = firing.get(rule.id)
            state.add_metric(values, float(finding is not None))
            fired.add_metric(values, float(totals.get(rule.id, 0)))
            gain = _number(finding.gain.speedup) if finding is not None else None
            if gain is not None and finding is not None:
                speedup.add_metric([*values, _clean(finding.gain.method)], gain)
        yield state
        yield speedup
        yield fired

    def _probes(self, frame: Frame) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "aitop_probe_state",
            "1 for each probe's current state (ok, starting, partial, error, unavailable, off)",
            labels=["probe", "state"],
        )
        for probe, current in frame.probe_states:
            for state in PROBE_STATES:
                family.add_metric([_clean(probe), state], float(state == current))
        yield family

    def _gpus(self, frame: Frame) -> Iterator[Metric]:
        sample = frame.gpu
        if sample is None or not sample.available or not sample.devices:
            return
        env = frame.environment
        hostname = (env.hostname if env else None) or self._hostname
        rank = self._rank(env) if env else None
        names = [*DCGM_LABELS, *(["rank"] if rank is not None else [])]
        specs: tuple[tuple[str, str, Callable[[GpuDevice], float | None]], ...] = (
            ("aitop_gpu_utilization_ratio", "share of time a kernel was running (NVML), 0-1",
             lambda d: None if d.util_percent is None else d.util_percent / 100.0),
            ("aitop_gpu_memory_used_bytes", "GPU memory in use, bytes",
             lambda d: d.mem_used_bytes),
            ("aitop_gpu_memory_total_bytes", "GPU memory capacity, bytes",
             lambda d: d.mem_total_bytes),
            ("aitop_gpu_job_memory_used_bytes",
             "GPU memory used by the attached job's processes, bytes",
             lambda d: d.target_mem_bytes),
            ("aitop_gpu_temperature_celsius", "GPU temperature", lambda d: d.temperature_c),
            ("aitop_gpu_power_watts", "GPU power draw", lambda d: d.power_w),
            ("aitop_gpu_power_limit_watts", "enforced GPU power limit", lambda d: d.power_limit_w),
            ("aitop_gpu_sm_clock_hertz", "SM clock",
             lambda d: None if d.sm_clock_mhz is None else d.sm_clock_mhz * 1e6),
            ("aitop_gpu_pcie_rx_bytes_per_second", "PCIe host-to-GPU traffic",
             lambda d: d.pcie_rx_bps),
            ("aitop_gpu_pcie_tx_bytes_per_second", "PCIe GPU-to-host traffic",
             lambda d: d.pcie_tx_bps),
            ("aitop_gpu_lost", "1 when the GPU fell off the bus or stopped answering",
             lambda d: float(d.lost)),
        )
        families = [GaugeMetricFamily(name, text, labels=names) for name, text, _ in specs]
        for device in sample.devices:
            values = [
                str(device.index), device.uuid or "", f"nvidia{device.index}",
                device.name or "", hostname, *([rank] if rank is not None else []),
            ]
            clean = [_clean(v) for v in values]
            for family, (_name, _text, read) in zip(families, specs, strict=True):
                value = _number(read(device))
                if value is not None:
                    family.add_metric(clean, value)
        yield from families
