"""Attaching to a live process: build the probes, start collecting, evaluate.

``attach`` checks everything that can be checked up front (the PID exists,
the rule files load, py-spy is installed and may attach) and turns each
expected failure into an :class:`AttachError` whose message is one line that
says what to do. Stacks that cannot be had (no py-spy, no ptrace rights, a
target that is not Python) are not an error: the stack probe is left out, the
GPU/CPU/I/O probes run without it, and the reason is shown and reported.
"""

from __future__ import annotations

import dataclasses
import resource
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

from aitop.engine.live.follow import JobFollower, watched_peers
from aitop.engine.live.job import peer_views
from aitop.engine.live.source import RankPeer
from aitop.knowledge.evaluator import DEFAULT_WINDOW_S, Evaluator
from aitop.knowledge.facts import Facts
from aitop.knowledge.loader import KnowledgeBase, load_knowledge_base
from aitop.knowledge.model import Diagnosis
from aitop.probes.collector import Collector, CollectorConfig, PeriodicTask
from aitop.probes.environment import EnvironmentProbe
from aitop.probes.gpu import GpuProbe
from aitop.probes.host import HostProbe
from aitop.probes.process_tree import ProcessTreeProbe, TargetNotFound, torch_names_workers
from aitop.probes.pyspy import PySpyError, find_pyspy, missing_pyspy_reason, run_dump
from aitop.probes.ranks import Job, find_job
from aitop.probes.session import Session
from aitop.probes.stacks import StackProbe
from aitop.probes.status import ProbeStatus
from aitop.probes.steps import StepProbe
from aitop.probes.storage import StorageProbe

#: Dumps tried before attaching (a job between imports can fail one); ~1 s at most.
PREFLIGHT_TRIES = 3


class AttachError(Exception):
    """Attaching failed for an expected reason; the message says what to do."""


#: Seconds after attach during which rules are evaluated every second: the
#: time to the first verdict (a healthy job's compute verdict: 9 s, not 10 s)
#: is the evaluation cadence's too.
EVALUATE_WARMUP_S = 30.0


@dataclass(frozen=True)
class AttachOptions:
    rule_files: Sequence[Path] = ()
    window_s: float = DEFAULT_WINDOW_S
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    #: How often rules are evaluated, independent of the display's refresh. Each
    #: evaluation costs ~3 ms and keeps a diagnosis in the history: every 2 s,
    #: not 1 s, saved ~0.15 % of a core and half of the history's growth.
    evaluate_every_s: float = 2.0
    #: Seconds after attach during which rules are evaluated every second.
    evaluate_warmup_s: float = EVALUATE_WARMUP_S
    #: An NVML module to use instead of the real one (tests pass the fake).
    nvml: Any = None


def self_cpu_seconds() -> float:
    """CPU seconds of aitop and of every child it has reaped (py-spy runs)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def self_rss_bytes() -> int:
    """aitop's current resident memory."""
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        return pages * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class SharedHost:
    """The machine-wide host probe, sampled once for every rank's session.

    Host samples (CPU per core, RAM, load) are the same for every rank on the
    machine; the lead rank's collector samples them and each peer's session
    receives the same sample.
    """

    def __init__(self, probe: HostProbe) -> None:
        self.probe = probe
        self._sessions: list[Session] = []

    def subscribe(self, session: Session) -> None:
        self._sessions = [*self._sessions, session]

    def subscribe_all(self, sessions: Sequence[Session]) -> None:
        self._sessions = [*self._sessions, *sessions]

    def sample(self) -> object:
        sample = self.probe.sample()
        for session in self._sessions:
            session.add(sample)
        return sample


class LiveSource:
    """Probes filling a session, plus a periodic evaluator; the UI's live DataSource."""

    live = True

    def __init__(
        self,
        session: Session,
        collector: Collector,
        evaluator: Evaluator,
        *,
        evaluate_every_s: float = 2.0,
        evaluate_warmup_s: float = EVALUATE_WARMUP_S,
        warnings: Sequence[str] = (),
    ) -> None:
        self.session = session
        self.collector = collector
        self.evaluator = evaluator
        self.warnings = list(warnings)
        self.started_at = time.time()
        self.cpu_at_start = self_cpu_seconds()
        self._closed = False
        #: The job's other ranks, each watched by a LiveSource of its own.
        self.peers: list[RankPeer] = []
        #: The host probe this source's collector samples (peers subscribe to it).
        self.host: SharedHost | None = None
        #: Follows the launcher's ranks (exits, elastic restarts) for a multi-rank job.
        self.follower: JobFollower | None = None
        #: Builds a source for another PID of the job (a restarted lead rank).
        self.rebuild: Callable[[int, Job], LiveSource] | None = None
        #: Set on close: stops what outlives one collector (the follower).
        self.closing = threading.Event()

        def evaluate_now() -> None:
            now = time.time()
            self.evaluator.evaluate(now)
            if now - self.started_at >= evaluate_warmup_s:
                self._eval_loop.interval_s = evaluate_every_s

        # Every second while the first verdict forms (a rule's ``for:`` is
        # confirmed a second sooner), then at the steady cadence.
        self._eval_loop = PeriodicTask(
            "diagnosis",
            evaluate_now,
            min(1.0, evaluate_every_s) if evaluate_warmup_s > 0 else evaluate_every_s,
            session.probe_status,
            collector.stop_event,
        )

    def start(self) -> LiveSource:
        self.collector.start()
        self._eval_loop.start()
        return self

    def evaluate(self, now: float) -> Diagnosis | None:
        latest = self.evaluator.latest()
        return latest if latest is not None else self.evaluator.evaluate(now)

    def history(self) -> Sequence[Diagnosis]:
        return self.evaluator.history()

    def cpu_percent(self) -> float:
        """aitop's own CPU use since attach, as % of one core (py-spy included)."""
        elapsed = max(time.time() - self.started_at, 1e-6)
        return 100.0 * (self_cpu_seconds() - self.cpu_at_start) / elapsed

    def adopt_lead(self, pid: int, job: Job) -> None:
        """Lead with another rank (the lead's successor after an elastic restart).

        Its probes, session and evaluator replace the exited rank's; readers take
        ``session``/``evaluator`` afresh each time, so the UI and a headless run
        carry on with the new rank. The exited rank's samples are dropped.
        """
        assert self.rebuild is not None
        new = self.rebuild(pid, job)
        new.evaluator.peers = self.evaluator.peers
        old_collector = self.collector
        self.session, self.collector, self.evaluator = new.session, new.collector, new.evaluator
        self._eval_loop = new._eval_loop
        self.host = new.host
        new.start()
        old_collector.stop()

    def awaiting_restart(self) -> bool:
        """Whether the lead rank exited and its launcher may restart it (headless waits)."""
        return self.follower is not None and self.follower.awaiting_restart()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.closing.set()
        for peer in self.peers:  # all stop together, then each is joined
            if isinstance(peer.source, LiveSource):
                peer.source.collector.stop_event.set()
        self.collector.stop()
        self._eval_loop.thread.join(timeout=2.0)
        for peer in self.peers:
            if peer.source is not None:
                peer.source.close()


def preflight_pyspy(pid: int) -> tuple[str | None, str | None]:
    """(py-spy binary or None, why stacks are off or incomplete).

    Only a target that is gone stops us (AttachError). No py-spy, no ptrace
    rights or a target that is not Python all give the same degraded mode: the
    GPU, CPU, memory and I/O probes run, stacks and phases are off, and the
    reason is on screen and in the report.
    """
    binary = find_pyspy()
    if binary is None:
        return None, f"stacks off: {missing_pyspy_reason()}"
    last: PySpyError | None = None
    for attempt in range(PREFLIGHT_TRIES):
        try:
            run_dump(binary, pid, locals_=False, timeout_s=10.0)
            return binary, None
        except PySpyError as exc:
            if exc.kind == "gone":
                raise AttachError(f"no process with PID {pid} (it exited?)") from exc
            if exc.kind in ("not_python", "permission", "missing"):
                return None, f"stacks off: {exc}"
            # A process still starting up (or between imports) can fail one
            # dump; try again briefly, then start anyway and let the stack
            # probe retry with back-off (its status says why).
            last = exc
            if attempt + 1 < PREFLIGHT_TRIES:
                time.sleep(0.5)
    return binary, f"stacks may be incomplete: {last}"


def job_notice(job: Job) -> str | None:
    """What to tell the user when the PID they gave is not the one watched."""
    watched = job.training_pid()
    if watched == job.given_pid:
        return None
    first = job.ranks[0]
    which = (f"rank {first.rank}" if first.rank is not None
             else "the first-started rank")  # mp.spawn ranks carry no numbers
    return (f"{job.describe()}: watching {which} (PID {watched}); give another rank's PID "
            "to watch that rank")


def attach(
    pid: int,
    options: AttachOptions = AttachOptions(),
    *,
    popen: Popen[bytes] | Popen[str] | None = None,
    facts: Facts | None = None,
) -> LiveSource:
    """Check, build and start everything for one target. Raises AttachError.

    Given a multi-rank job (its launcher or any rank), the lead rank gets the
    full set of probes and every other rank on this machine is watched as a
    peer at lighter cadences; the lead's evaluator judges the job as a whole.
    """
    knowledge = load_knowledge_base(options.rule_files)  # bad rule files fail before attaching
    job = find_job(pid)
    pid = job.training_pid()  # a launcher has no training thread: rank 0 has
    notice = job_notice(job)
    source = _build(pid, job, options, knowledge, popen=popen, facts=facts,
                    warnings=[notice] if notice else [])
    if job.multi_rank:
        peer_options = options_for_peers(options, len(job.ranks))
        host = source.host
        assert host is not None  # _build always gives the lead its host probe
        source.peers = [_peer(r.pid, job, peer_options, knowledge, facts, host)
                        for r in job.ranks if r.pid != pid]
        source.evaluator.peers = lambda: peer_views(watched_peers(source.peers))

        def rebuild(new_pid: int, new_job: Job) -> LiveSource:
            lead = _build(new_pid, new_job, options, knowledge, facts=facts, warnings=[])
            assert lead.host is not None
            lead.host.subscribe_all([p.source.session for p in watched_peers(source.peers)
                                     if p.source is not None])
            return lead

        def make_peer(new_pid: int, new_job: Job) -> RankPeer:
            assert source.host is not None
            return _peer(new_pid, new_job, peer_options, knowledge, facts, source.host)

        source.rebuild = rebuild
        if job.launcher_pid is not None:
            source.follower = JobFollower(source, job.launcher_pid, make_peer, source.closing)
    source.start()
    if source.follower is not None:
        source.follower.start()
    return source


#: A peer's py-spy windows and judgements: the cadences the straggler verdict
#: was measured with (8-10 s to the verdict, docs/benchmarks.md).
PEER_MAX_STACK_WINDOW_S = 20
PEER_EVALUATE_EVERY_S = 5.0


def options_for_peers(options: AttachOptions, ranks: int) -> AttachOptions:
    """How the ranks beside the lead one are watched and judged.

    A peer's diagnosis feeds the job's judgement, which changes slowly, so it is
    judged less often; its window spans two of its stack windows (a 20 s window
    could hold none of a peer's 20 s stack windows, and the straggler then went
    unjudged at the end of a run).
    """
    cfg = peer_config(options.collector, ranks)
    return dataclasses.replace(
        options, collector=cfg, evaluate_every_s=PEER_EVALUATE_EVERY_S, evaluate_warmup_s=0.0,
        window_s=max(options.window_s, 2.0 * cfg.stack_window_s))


def peer_config(cfg: CollectorConfig, ranks: int) -> CollectorConfig:
    """Cadences for the ranks beside the lead one: N ranks must not cost N times one.

    Measured on a gloo rank (docs/benchmarks.md, "Every rank of a job"): one
    py-spy sample costs ~0.35 ms and a ``record`` launch ~10 ms; a step-counter
    read ~12 ms, a process-tree read 0.25 ms; py-spy is three quarters of
    aitop's CPU on a 4-rank job. So each peer samples at ``rate / N`` (at
    least 2 Hz: the 20 s evaluation window still holds 40 evenly spaced
    samples, and the ranks' waits stayed within 2 points of their timers),
    launches py-spy half as often, at most every 20 s (its first window 5 s,
    not 3: the job's verdict needs a few windows anyway), reads its step
    counter every 60 s after one early read (DDP ranks step in lockstep: the
    lead's counter is the job's pace), its process tree half as often, and
    storage and environment rarely (they are the job's, not the rank's). The
    machine-wide host sample is the lead's, shared (see ``attach``); a peer is
    judged every 5 s.
    """
    return dataclasses.replace(
        cfg,
        stack_rate_hz=max(2, min(cfg.stack_rate_hz, round(cfg.stack_rate_hz / ranks))),
        stack_window_s=min(cfg.stack_window_s * 2, PEER_MAX_STACK_WINDOW_S),
        first_stack_window_s=max(cfg.first_stack_window_s, 5),
        steps_interval_s=max(60.0, cfg.steps_interval_s),
        steps_warmup_readings=1,
        interval_s=cfg.interval_s * 2,
        storage_interval_s=cfg.storage_interval_s * 8,
        environment_interval_s=cfg.environment_interval_s * 4,
    )


def _peer(pid: int, job: Job, options: AttachOptions, knowledge: KnowledgeBase,
          facts: Facts | None, host: SharedHost) -> RankPeer:
    """Watch one other rank; a rank that cannot be watched is listed with the reason."""
    label = job.label(pid)
    try:
        source = _build(pid, job, options, knowledge, facts=facts, warnings=[], host=host)
    except AttachError as exc:
        return RankPeer(label, pid, None, status=str(exc))
    stacks = source.session.probe_status.get("stacks")
    status = (f"stacks off: {stacks.detail}"
              if stacks is not None and stacks.state == "unavailable" else "watched")
    return RankPeer(label, pid, source.start(), status=status)


def _build(
    pid: int,
    job: Job,
    options: AttachOptions,
    knowledge: KnowledgeBase,
    *,
    popen: Popen[bytes] | Popen[str] | None = None,
    facts: Facts | None = None,
    warnings: list[str],
    host: SharedHost | None = None,
) -> LiveSource:
    """The probes, session and evaluator for one process, not started.

    ``host`` given: the machine-wide samples come from the lead rank's host
    probe, shared, instead of a probe of this process's own.
    """
    phase_config = knowledge.phases
    session = Session(pid)

    def names_workers() -> bool:
        env = session.environment
        return env is not None and torch_names_workers(env.torch_version)

    try:
        process = ProcessTreeProbe(pid, popen=popen, names_workers=names_workers)
    except TargetNotFound as exc:
        raise AttachError(
            f"no process with PID {pid}: find your training job's PID with "
            "`pgrep -af python` (or start one with `aitop demo`)"
        ) from exc
    binary, warning = preflight_pyspy(pid)
    session.job = job
    stacks = steps = None
    if binary is not None:
        cfg = options.collector
        stacks = StackProbe(
            pid,
            phase_config.classifier(),
            rate_hz=cfg.stack_rate_hz,
            window_s=cfg.stack_window_s,
            binary=binary,
        )
        steps = StepProbe(pid, phase_config.step_counters, binary=binary)
    gpu_probe = GpuProbe(options.nvml)

    def gpu_sample() -> object:
        return gpu_probe.sample(set(process.pids()))

    shared = host or SharedHost(HostProbe())
    if host is not None:
        host.subscribe(session)
    collector = Collector(
        session,
        process=process,
        host=None if host is not None else shared,
        gpu=gpu_sample,
        storage=StorageProbe(pid, process.pids),
        environment=EnvironmentProbe(pid),
        stacks=stacks,
        steps=steps,
        config=options.collector,
    )
    if binary is None and warning:
        session.probe_status["stacks"] = ProbeStatus(
            "unavailable", warning.removeprefix("stacks off: ")
        )
        session.probe_status["steps"] = ProbeStatus("unavailable", "needs stacks")
    if host is not None:
        session.probe_status["host"] = ProbeStatus("ok", "shared with the lead rank")
    if facts is not None:
        knowledge = dataclasses.replace(knowledge, facts=facts)
    evaluator = Evaluator(session, knowledge, options.window_s)
    source = LiveSource(
        session,
        collector,
        evaluator,
        evaluate_every_s=options.evaluate_every_s,
        evaluate_warmup_s=options.evaluate_warmup_s,
        warnings=[*warnings, warning] if warning else warnings,
    )
    source.host = shared
    return source
