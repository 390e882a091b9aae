"""aitop's live conclusions as Prometheus metrics, read without disturbing the job.

Two halves, so that a scrape can never slow a probe down:

* :class:`Publisher` runs on the serve loop's thread. Once a second it reads the
  watched rank's already-published diagnosis (an immutable value, swapped whole)
  and newest samples (a :class:`Watched`: a live job, or one of its ranks), keeps
  the counters (stack samples per phase, training steps, rule firings), and
  builds a frozen :class:`Frame`. What it exports is passed in explicitly: the
  rank, the rules in force, when aitop attached, the job's identity.
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
import string
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aitop.engine.live.source import Conclusion
from aitop.engine.prometheus.names import PHASE_LABEL, base_value, exported_metrics
from aitop.knowledge.base.findings import CATEGORIES, COLLECTING, UNKNOWN, Diagnosis
from aitop.knowledge.base.rules import Rule
from aitop.knowledge.metrics.progress import STEPS_WINDOW_S
from aitop.probes.job_identity import node_name
from aitop.probes.own_version import aitop_version
from aitop.probes.redact import command_line, redact_text
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

#: dcgm-exporter's label names, spelled as its current releases spell them
#: (``hostname``: see the README on versions that wrote ``Hostname``), so that
#: ``on(UUID)`` / ``on(gpu, hostname)`` joins work.
DCGM_LABELS: tuple[str, ...] = ("gpu", "UUID", "device", "modelName", "hostname")


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
    #: The job's identity and placement (``probes.job_identity.LABELS``), carried by
    #: each of its series so that one scrape can hold several jobs.
    identity: tuple[tuple[str, str], ...] = ()


class Watched(Protocol):
    """What a :class:`Publisher` reads of the rank it exports, afresh at each frame
    (any DataSource: a live job, follows its lead through a restart; a peer rank)."""

    @property
    def session(self) -> Session:
        """The rank's samples."""
        ...

    def latest(self) -> Conclusion:
        """Its newest published conclusion (never waits for an evaluation)."""
        ...


@dataclass
class Publisher:
    """Builds frames from a watched rank's samples and its published diagnosis.

    Runs on one thread (the serve loop). It reads rings the way every other
    reader does (each ring's short append lock), never the scrape thread.
    """

    watched: Watched
    #: The rules in force (packaged plus --rules files): each gets a firing series.
    rules: tuple[Rule, ...]
    #: When aitop attached to the job (``aitop_attach_time_seconds``).
    attached_at: float
    #: The job's identity and the rank's placement (``probes.job_identity.LABELS``).
    identity: tuple[tuple[str, str], ...] = ()
    _stack_counts: dict[str, int] = field(default_factory=dict)
    _stacks_seen_to: float = -math.inf
    _last_reading: StepCounterSample | None = None
    _steps_total: int | None = None
    _fired_at: dict[str, float] = field(default_factory=dict)
    _fired_total: dict[str, int] = field(default_factory=dict)

    def frame(self, now: float) -> Frame:
        session = self.watched.session
        diagnosis = self.watched.latest().diagnosis
        self._count_stacks(session, now)
        self._count_steps(session, now)
        self._count_firings(diagnosis)
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
            identity=self.identity,
        )

    def _count_stacks(self, session: Session, now: float) -> None:
        for window in session.stacks.window(self._stacks_seen_to, now):
            self._stacks_seen_to = max(self._stacks_seen_to, window.t_end)
            if window.error is not None:
                continue
            for phase, n in window.phase_counts.items():
                self._stack_counts[phase] = self._stack_counts.get(phase, 0) + n
        for phase in PHASES:
            self._stack_counts.setdefault(phase, 0)

    def _count_steps(self, session: Session, now: float) -> None:
        # The chosen source's readings (loop counter or the job's printed step)
        # since the last one counted, chosen over at least the half minute that
        # steps/s is judged on; a change of source starts from its first.
        since = self._last_reading.t if self._last_reading is not None else -math.inf
        chosen = session.step_readings(min(since, now - STEPS_WINDOW_S), now).readings
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


@dataclass(frozen=True)
class WatchInfo:
    """One job (or process) the node agent found: watched, or why not.

    Exported as ``aitop_job_info``, so that what aitop could not watch (another
    user's process, a binary without Python, an attach that failed) is listed
    with its reason instead of missing silently.
    """

    identity: tuple[tuple[str, str], ...]
    pid: int
    command: tuple[str, ...]
    #: "watched", "attaching", "waiting" (a launcher before its ranks) or "not_watched".
    status: str
    reason: str = ""


def stable_title(template: str) -> str:
    """A rule's title with each ``{field}`` as ``…``: the live figures would make a new
    series at every evaluation."""
    parts = []
    for literal, name, _spec, _conversion in string.Formatter().parse(template):
        parts.append(literal)
        if name is not None:
            parts.append("…")
    return "".join(parts)


class _Families:
    """Metric families built once per scrape, each series prefixed by its job's identity."""

    def __init__(self) -> None:
        self._families: dict[str, Metric] = {}

    def add(self, kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str,
            text: str, identity: tuple[tuple[str, str], ...],
            labels: Mapping[str, str], value: float) -> None:
        family = self._families.get(name)
        names = [*(k for k, _ in identity), *labels]
        if family is None:
            family = kind(name, text, labels=names)
            self._families[name] = family
        elif getattr(family, "_labelnames", names) != tuple(names):
            raise ValueError(f"{name}: label names {names} differ from the family's")
        values = [*(v for _, v in identity), *labels.values()]
        family.add_metric([_clean(v) for v in values], value)  # type: ignore[attr-defined]

    def declare(self, kind: type[GaugeMetricFamily] | type[CounterMetricFamily], name: str,
                text: str, identity: tuple[tuple[str, str], ...], labels: Iterable[str]) -> None:
        """A family that exists even with no series (a rule with no gain yet)."""
        if name not in self._families:
            self._families[name] = kind(name, text, labels=[*(k for k, _ in identity), *labels])

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


class AitopCollector(Collector):
    """The metrics of the watched jobs, built at scrape time from their newest frames.

    ``publish`` shows one job (``aitop --pid P --serve``); ``publish_jobs`` shows
    every job the node agent watches, with ``aitop_job_info`` for what it found.
    A job that ended leaves the next frame set, and its series leave the next
    scrape: nothing stale is served.
    """

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
        self._frames: tuple[Frame, ...] = ()
        self._infos: tuple[WatchInfo, ...] | None = None
        self._agent: tuple[tuple[str, float], ...] = ()
        self._hostname = node_name()

    def publish(self, frame: Frame) -> None:
        """Make ``frame`` what scrapes show (an atomic reference swap)."""
        self._frames = (frame,)

    def publish_jobs(self, frames: Iterable[Frame], infos: Iterable[WatchInfo],
                     agent: Mapping[str, float] | None = None) -> None:
        """Make these jobs what scrapes show; ``agent``: the agent's own gauges."""
        state = (tuple(frames), tuple(infos), tuple((agent or {}).items()))
        self._frames, self._infos, self._agent = state

    def describe(self) -> Iterable[Metric]:
        """Nothing up front: registering must not build a scrape (see ``collect``)."""
        return ()

    def collect(self) -> Iterator[Metric]:
        frames, infos = self._frames, self._infos  # the reads of shared state a scrape makes
        now = self._clock()
        yield from self._own()
        families = _Families()
        if not frames and infos is None:
            families.add(GaugeMetricFamily, "aitop_up", UP_HELP, (), {}, 0.0)
        for frame in frames:
            self._health(families, frame, now)
            self._target(families, frame)
            if frame.diagnosis is not None:
                self._evaluation(families, frame, frame.diagnosis, now)
                self._catalogue(families, frame, frame.diagnosis.metrics)
            self._counters(families, frame)
            self._findings(families, frame)
            self._probes(families, frame)
            self._gpus(families, frame)
        if infos is not None:
            self._job_info(families, infos)
        for name, value in self._agent:
            families.add(GaugeMetricFamily, f"aitop_agent_{name}", AGENT_HELP.get(name, name),
                         (), {}, value)
        yield from families

    # ------------------------------------------------------------ families

    def _own(self) -> Iterator[Metric]:
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

    def _health(self, families: _Families, frame: Frame, now: float) -> None:
        fresh = now - frame.published_at <= STALE_AFTER_S
        up = bool(frame.target_alive and fresh)
        families.add(GaugeMetricFamily, "aitop_up", UP_HELP, frame.identity, {}, float(up))

    def _target(self, families: _Families, frame: Frame) -> None:
        env = frame.environment
        known = dict(frame.identity)
        # The same label names for every job, so one family holds them all.
        info: dict[str, str] = {"pid": str(frame.target_pid), "command": "",
                                "python_version": "", "torch_version": ""}
        if "hostname" not in known:
            info["hostname"] = (env.hostname if env else None) or self._hostname
        if "rank" not in known:
            info["rank"] = (self._rank(env) if env else None) or ""
        if env is not None:
            info["command"] = command_line(env.cmdline, MAX_COMMAND_CHARS)
            info["python_version"] = env.python_version or ""
            info["torch_version"] = env.torch_version or ""
        families.add(GaugeMetricFamily, "aitop_target_info",
                     "the training process aitop is attached to (secrets redacted)",
                     frame.identity, info, 1.0)
        families.add(GaugeMetricFamily, "aitop_attach_time_seconds",
                     "when aitop attached, in seconds since the epoch",
                     frame.identity, {}, frame.attached_at)

    @staticmethod
    def _rank(env: EnvironmentInfo) -> str | None:
        rank = env.env.get("RANK")
        return rank if rank is not None and rank.isdigit() else None

    def _evaluation(self, families: _Families, frame: Frame, diagnosis: Diagnosis,
                    now: float) -> None:
        ident = frame.identity
        families.add(GaugeMetricFamily, "aitop_evaluation_timestamp_seconds",
                     "when the exported diagnosis was made, in seconds since the epoch",
                     ident, {}, diagnosis.t)
        families.add(GaugeMetricFamily, "aitop_evaluation_age_seconds",
                     "seconds between the exported diagnosis and this scrape",
                     ident, {}, max(0.0, now - diagnosis.t))
        # Every value, always (the enum pattern), so a panel never sees a gap;
        # "collecting"/"unknown" are what a diagnosis says before it can judge.
        categories = [*CATEGORIES, COLLECTING, UNKNOWN]
        if diagnosis.category not in categories:
            categories.append(diagnosis.category)  # a category newer than this list
        for category in categories:
            families.add(GaugeMetricFamily, "aitop_bottleneck",
                         "1 for the category aitop names as the job's bottleneck now, 0 for "
                         "the others", ident, {"category": category},
                         float(category == diagnosis.category))

    def _catalogue(self, families: _Families, frame: Frame,
                   metrics: Mapping[str, float | None]) -> None:
        """Every catalogue metric with a value, in base units (unknown ones are absent)."""
        for metric, spec in exported_metrics().items():
            value = _number(metrics.get(metric))
            if value is not None:
                families.add(GaugeMetricFamily, spec.name, spec.help, frame.identity,
                             dict(spec.labels), base_value(value, spec.scale))

    def _counters(self, families: _Families, frame: Frame) -> None:
        for phase, n in frame.stack_samples:
            families.add(CounterMetricFamily, "aitop_stack_samples",
                         "stack samples of the training thread per step phase since aitop "
                         "attached (rate() of these gives the phase shares over any range)",
                         frame.identity, {PHASE_LABEL: phase}, float(n))
        if frame.steps_total is not None:
            families.add(CounterMetricFamily, "aitop_training_steps",
                         "training steps counted since aitop attached (the loop counter, or "
                         "the step the job prints)", frame.identity, {},
                         float(frame.steps_total))

    def _findings(self, families: _Families, frame: Frame) -> None:
        diagnosis = frame.diagnosis
        firing = {f.id: f for f in (diagnosis.findings if diagnosis else ())}
        totals = dict(frame.fired_total)
        ident = frame.identity
        families.declare(GaugeMetricFamily, "aitop_finding_estimated_speedup", SPEEDUP_HELP,
                         ident, ("rule", "severity", "category", "method"))
        for rule in frame.rules:
            labels = {"rule": rule.id, "severity": rule.severity, "category": rule.category}
            finding = firing.get(rule.id)
            families.add(GaugeMetricFamily, "aitop_finding_firing",
                         "1 while a rule of aitop's knowledge base is firing (for: and "
                         "keep_firing_for: applied), 0 otherwise",
                         ident, labels, float(finding is not None))
            families.add(CounterMetricFamily, "aitop_finding_fired",
                         "times a rule has started firing since aitop attached",
                         ident, labels, float(totals.get(rule.id, 0)))
            families.add(GaugeMetricFamily, "aitop_finding_condition_holding",
                         "1 while a firing finding's condition holds; 0 while keep_firing_for "
                         "keeps it after its condition stopped holding (its figures are then "
                         "those of when it last held), or while it is not firing",
                         ident, labels,
                         float(finding is not None and finding.last_held_at is None))
            if finding is not None:
                families.add(GaugeMetricFamily, "aitop_finding_info",
                             "1 for each firing finding, with its rule's title (the figures in "
                             "it left out, so the series stays one while it fires)",
                             ident, {**labels, "title": stable_title(rule.title)}, 1.0)
            gain = _number(finding.gain.speedup) if finding is not None else None
            if gain is not None and finding is not None:
                families.add(GaugeMetricFamily, "aitop_finding_estimated_speedup",
                             SPEEDUP_HELP, ident, {**labels, "method": finding.gain.method},
                             gain)

    def _probes(self, families: _Families, frame: Frame) -> None:
        for probe, current in frame.probe_states:
            for state in PROBE_STATES:
                families.add(GaugeMetricFamily, "aitop_probe_state",
                             "1 for each probe's current state (ok, starting, partial, error, "
                             "unavailable, off)", frame.identity,
                             {"probe": probe, "state": state}, float(state == current))

    def _gpus(self, families: _Families, frame: Frame) -> None:
        sample = frame.gpu
        if sample is None or not sample.available or not sample.devices:
            return
        env = frame.environment
        known = dict(frame.identity)
        hostname = known.get("hostname") or (env.hostname if env else None) or self._hostname
        # The job's identity, less the hostname dcgm-exporter's labels carry.
        ident = tuple((k, v) for k, v in frame.identity if k != "hostname")
        rank = None if "rank" in known else (self._rank(env) if env else None)
        for device in sample.devices:
            labels = dict(zip(DCGM_LABELS, (
                str(device.index), device.uuid or "", f"nvidia{device.index}",
                device.name or "", hostname), strict=True))
            if rank is not None:
                labels["rank"] = rank
            for name, text, read in GPU_SERIES:
                value = _number(read(device))
                if value is not None:
                    families.add(GaugeMetricFamily, name, text, ident, labels, value)

    def _job_info(self, families: _Families, infos: Iterable[WatchInfo]) -> None:
        for info in infos:
            command = command_line(info.command, MAX_COMMAND_CHARS)
            families.add(GaugeMetricFamily, "aitop_job_info",
                         "every PyTorch job the node agent found: status watched, attaching, "
                         "waiting or not_watched, with the reason (secrets redacted)",
                         info.identity, {"pid": str(info.pid), "command": command,
                                         "status": info.status, "reason": info.reason}, 1.0)


UP_HELP = (f"1 while aitop is attached to a live training process and publishing "
           f"evaluations (the newest under {STALE_AFTER_S:g} s old), else 0")
SPEEDUP_HELP = (
    "estimated speed-up of the training step from acting on a firing finding (1 = none); "
    "method: predicted (for this job on this machine), amdahl (a ceiling, at most) or "
    "document (the source documents' general figure)")
AGENT_HELP = {
    "jobs": "jobs the node agent watches now",
    "pace": "how much slower than its own cadence each job is sampled (1 = not at all); "
            "above 1 while the agent sheds cadence to stay inside --budget or to share "
            "its cost among many jobs",
    "budget_ratio": "the agent's CPU over the last minute as a share of --budget "
                    "(above 1: over it)",
}

GPU_SERIES: tuple[tuple[str, str, Callable[[GpuDevice], float | None]], ...] = (
    ("aitop_gpu_utilization_ratio", "share of time a kernel was running (NVML), 0-1",
     lambda d: None if d.util_percent is None else d.util_percent / 100.0),
    ("aitop_gpu_memory_used_bytes", "GPU memory in use, bytes", lambda d: d.mem_used_bytes),
    ("aitop_gpu_memory_total_bytes", "GPU memory capacity, bytes", lambda d: d.mem_total_bytes),
    ("aitop_gpu_job_memory_used_bytes", "GPU memory used by the attached job's processes, bytes",
     lambda d: d.target_mem_bytes),
    ("aitop_gpu_temperature_celsius", "GPU temperature", lambda d: d.temperature_c),
    ("aitop_gpu_power_watts", "GPU power draw", lambda d: d.power_w),
    ("aitop_gpu_power_limit_watts", "enforced GPU power limit", lambda d: d.power_limit_w),
    ("aitop_gpu_sm_clock_hertz", "SM clock",
     lambda d: None if d.sm_clock_mhz is None else d.sm_clock_mhz * 1e6),
    ("aitop_gpu_pcie_rx_bytes_per_second", "PCIe host-to-GPU traffic", lambda d: d.pcie_rx_bps),
    ("aitop_gpu_pcie_tx_bytes_per_second", "PCIe GPU-to-host traffic", lambda d: d.pcie_tx_bps),
    ("aitop_gpu_lost", "1 when the GPU fell off the bus or stopped answering",
     lambda d: float(d.lost)),
)
