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
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

from aitop.engine.live.job import LiveJob
from aitop.engine.live.rank import LiveSource, SharedHost, self_cpu_seconds, self_rss_bytes
from aitop.engine.live.source import RankPeer, peer_views, watched_peers
from aitop.knowledge.base.facts import Facts
from aitop.knowledge.evaluator import DEFAULT_WINDOW_S, Evaluator
from aitop.knowledge.metrics.straggler import JobJudgement, RankView
from aitop.knowledge.reading.loader import KnowledgeBase, load_knowledge_base
from aitop.probes import cadence
from aitop.probes.collector import Collector, CollectorConfig
from aitop.probes.discovery import is_launcher, is_python_process, python_beneath
from aitop.probes.environment import EnvironmentProbe
from aitop.probes.gpu import GpuProbe
from aitop.probes.host import HostProbe
from aitop.probes.kernel.procfs import process_alive, read_cmdline
from aitop.probes.private_memory import PrivateMemoryReader
from aitop.probes.process_tree import ProcessTreeProbe, TargetNotFound, torch_names_workers
from aitop.probes.pyspy import PySpyError, find_pyspy, missing_pyspy_reason, run_dump
from aitop.probes.ranks import Job, find_job, joined_job
from aitop.probes.redact import command_line
from aitop.probes.session import Session
from aitop.probes.stacks import StackProbe
from aitop.probes.status import ProbeStatus
from aitop.probes.steps import StepProbe
from aitop.probes.storage import StorageProbe

__all__ = ["AttachError", "AttachOptions", "LiveJob", "LiveSource", "attach",
           "await_launcher_ranks", "job_notice", "options_for_peers", "peer_config",
           "self_cpu_seconds", "self_rss_bytes", "through_wrapper"]

#: Dumps tried before attaching (a job between imports can fail one); ~1 s at most.
PREFLIGHT_TRIES = 3
#: How long attaching to a launcher with no ranks waits for them: torchrun's
#: elastic agent between two attempts, or before its rendezvous completes, has
#: no training thread, and its next ranks import torch for seconds.
LAUNCHER_RANKS_WAIT_S = 30.0
#: Seconds between two looks for the launcher's ranks while waiting.
LAUNCHER_POLL_S = 0.5


class AttachError(Exception):
    """Attaching failed for an expected reason; the message says what to do."""


@dataclass(frozen=True)
class AttachOptions:
    rule_files: Sequence[Path] = ()
    window_s: float = DEFAULT_WINDOW_S
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    #: How often rules are evaluated, independent of the display's refresh, and for
    #: how long after attach every second instead (``probes.cadence.TABLE``).
    evaluate_every_s: float = cadence.UI.evaluate_every_s
    evaluate_warmup_s: float = cadence.UI.evaluate_warmup_s
    #: An NVML module to use instead of the real one (tests pass the fake).
    nvml: Any = None
    #: The run's knowledge base, where the command loaded it already (the node view
    #: and agent attach many jobs with one); None: loaded here from ``rule_files``.
    knowledge: KnowledgeBase | None = None


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


class Preflight:
    """:func:`preflight_pyspy` on a thread of its own, started before the knowledge
    base is read: the dump waits on py-spy while the reading works, and the first
    frame waits for both (docs/benchmarks.md, Where aitop's CPU goes)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._result: tuple[str | None, str | None] | None = None
        self._error: Exception | None = None
        self._thread = threading.Thread(target=self._run, name="aitop-preflight", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = preflight_pyspy(self.pid)
        except Exception as exc:  # raised where the result is asked for
            self._error = exc

    def wait(self) -> None:
        """Until the dump is over (its answer no longer wanted: attaching failed)."""
        self._thread.join()

    def result(self) -> tuple[str | None, str | None]:
        """``preflight_pyspy``'s answer (or its AttachError), once it has one."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


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


def through_wrapper(pid: int, options: AttachOptions) -> tuple[int, str | None]:
    """The PID to watch for ``pid``, and what to tell the user of it: ``pid`` itself,
    or, where it is not Python (``bash run.sh``, ``nohup``, ``srun``, a
    container's init), the one Python process beneath it (``python_beneath``).
    A wrapper of several is an AttachError naming them, once the run's rule
    files are known good (a bad one is the error said first, whatever the
    target); one of none is watched as it is (no stacks: the degraded mode)."""
    if not process_alive(pid) or is_python_process(pid):
        return pid, None
    beneath = python_beneath(pid)
    if not beneath:
        return pid, None
    what = _command(pid)
    if len(beneath) > 1:
        if options.knowledge is None:
            load_knowledge_base(options.rule_files)  # raises KnowledgeError on a bad file
        listed = ", ".join(f"{p} ({_command(p)})" for p in beneath[:4])
        more = f" and {len(beneath) - 4} more" if len(beneath) > 4 else ""
        raise AttachError(f"PID {pid} ({what}) is not Python and runs {len(beneath)} Python "
                          f"processes: {listed}{more}; give one of them with --pid")
    return beneath[0], (f"PID {pid} ({what}) is not Python: watching the Python process it "
                        f"runs, PID {beneath[0]} ({_command(beneath[0])})")


#: Characters of a command line a message quotes.
COMMAND_CHARS = 60


def _command(pid: int) -> str:
    """``pid``'s command line, redacted and cut short, for a one-line message."""
    return command_line(read_cmdline(pid), COMMAND_CHARS) or "?"


def await_launcher_ranks(pid: int, timeout_s: float = LAUNCHER_RANKS_WAIT_S,
                         notify: Callable[[str], None] | None = None) -> Job:
    """The job around ``pid``, waiting up to ``timeout_s`` for its ranks when ``pid``
    is a launcher that has none yet (attached in the gap of an elastic restart, the
    launcher alone would be watched for the whole run); ``notify`` is told once why
    it waits. So it does while only some of its ranks have started (``Job.starting``):
    read with one rank, the job would be judged as a one-rank job. Other PIDs, and a
    launcher that never starts ranks, return at once or at the deadline with what
    ``find_job`` sees."""
    job = find_job(pid)
    if (job.ranks and not job.starting) or not is_launcher(read_cmdline(pid)):
        return job
    if notify is not None:
        notify(f"PID {pid} is a launcher whose ranks have not all started yet (a restart or "
               f"a rendezvous): waiting up to {timeout_s:g} s for them")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and process_alive(pid):
        time.sleep(LAUNCHER_POLL_S)
        job = find_job(pid)
        if job.ranks and not job.starting:
            break
    return job


def attach(
    pid: int,
    options: AttachOptions = AttachOptions(),
    *,
    popen: Popen[bytes] | Popen[str] | None = None,
    facts: Facts | None = None,
    also: Sequence[int] = (),
    job: Job | None = None,
) -> LiveJob:
    """Check, build and start everything for one target. Raises AttachError.

    Given a multi-rank job (its launcher or any rank), the lead rank gets the
    full set of probes and every other rank on this machine is watched as a
    peer at lighter cadences; the lead's evaluator judges the job as a whole.
    ``also``: more PIDs of the same job (other nodes' launchers on this
    machine), whose ranks join it (``probes.ranks.joined_job``). ``job``: the job
    around ``pid`` when the caller has found it already (``await_launcher_ranks``).
    """
    if job is None:
        job = find_job(pid)
    preflight = Preflight(job.training_pid()) if not also else None
    # Bad rule files fail before attaching (the dump started is waited for first).
    try:
        knowledge = options.knowledge or load_knowledge_base(options.rule_files)
    except BaseException:
        if preflight is not None:
            preflight.wait()
        raise
    if also:
        for other in also:
            if not process_alive(other):
                raise AttachError(f"no process with PID {other}: give the PIDs of the job's "
                                  "launchers or ranks (`pgrep -af torch`)")
        job = joined_job(job, [find_job(other) for other in also])
    pid = job.training_pid()  # a launcher has no training thread: rank 0 has
    notice = job_notice(job)
    warnings = [notice] if notice else []
    # A launcher still without ranks once ``await_launcher_ranks`` gave up (a slow
    # restart: torchrun grants each old rank up to 30 s to take its SIGTERM, and
    # the new ones import torch): watched itself until its ranks start, then
    # followed, as a restart is.
    launcher_alone = not job.ranks and not also and is_launcher(read_cmdline(pid))
    # So is one whose ranks have not all started yet (``Job.starting``): its first
    # rank leads, and the follower adds the others as they start.
    single = not job.multi_rank and not launcher_alone and not job.starting
    live: LiveJob | None = None

    def lead_judgement() -> JobJudgement | None:
        """The job's newest judgement, made by the lead's evaluator, for every peer."""
        return live.lead.evaluator.judgement if live is not None else None

    def judged_peers() -> Sequence[RankView]:
        """The job's watched peers as the lead's evaluator judges them (read each time:
        the follower changes them)."""
        return peer_views(watched_peers(live.peers)) if live is not None else ()

    def rebuild(new_pid: int, new_job: Job) -> LiveSource:
        """The lead's successor after a restart, sampling the host for every watched peer."""
        assert live is not None
        host = SharedHost(HostProbe(new_job.launcher_pid or new_pid))
        host.subscribe_all([p.source.session for p in watched_peers(live.peers)
                            if p.source is not None])
        return _build(new_pid, new_job, options, knowledge, facts=facts, host=host,
                      samples_host=True, judge_peers=judged_peers)

    def peer_options(of: Job) -> AttachOptions:
        return options_for_peers(options, max(len(of.ranks), 2))

    def make_peer(new_pid: int, new_job: Job) -> RankPeer:
        assert live is not None
        host = live.lead.host
        assert host is not None  # _build gives every rank its host
        return _peer(new_pid, new_job, peer_options(new_job), knowledge, facts, host,
                     lead_judgement)

    host = SharedHost(HostProbe(job.launcher_pid or pid))
    lead = _build(pid, job, options, knowledge, popen=popen, facts=facts, host=host,
                  samples_host=True, judge_peers=None if single else judged_peers,
                  preflight=preflight)
    peers: list[RankPeer] = []
    if not single:
        ranks_options = peer_options(job)
        peers = [_peer(r.pid, job, ranks_options, knowledge, facts, host, lead_judgement)
                 for r in job.ranks if r.pid != pid]
    # A one-process job is followed too, until it starts ranks of its own (an
    # mp.spawn parent found while it built its model would be watched waiting for
    # them, for good).
    live = LiveJob(lead, peers, warnings=warnings,
                   launcher_pid=pid if launcher_alone or single else job.launcher_pid,
                   make_peer=make_peer, rebuild=rebuild, until_ranks=single)
    return live.start()


def options_for_peers(options: AttachOptions, ranks: int) -> AttachOptions:
    """How the ranks beside the lead one are watched and judged: the peer column of
    ``probes.cadence.TABLE``, and a window that spans two of the peer's stack
    windows (a shorter one can hold none of them, and the rank goes unjudged)."""
    cfg = peer_config(options.collector, ranks)
    return dataclasses.replace(
        options, collector=cfg,
        evaluate_every_s=cadence.peer_value("evaluate_every_s", options.evaluate_every_s, ranks),
        evaluate_warmup_s=cadence.peer_value("evaluate_warmup_s", options.evaluate_warmup_s,
                                             ranks),
        window_s=max(options.window_s, 2.0 * cfg.stack_window_s))


def peer_config(cfg: CollectorConfig, ranks: int) -> CollectorConfig:
    """A peer's collector cadences, from the lead's (``probes.cadence.TABLE``'s peer
    rules: N ranks must not cost N times one). The machine-wide host sample is the
    lead's, shared (see ``attach``)."""
    return dataclasses.replace(cfg, **{
        f.name: type(getattr(cfg, f.name))(cadence.peer_value(f.name, getattr(cfg, f.name), ranks))
        for f in dataclasses.fields(cfg)})


def _peer(pid: int, job: Job, options: AttachOptions, knowledge: KnowledgeBase,
          facts: Facts | None, host: SharedHost,
          job_judgement: Callable[[], JobJudgement | None]) -> RankPeer:
    """Watch one other rank (hearing the lead's judgement of the job); a rank that
    cannot be watched is listed with the reason."""
    label = job.label(pid)
    try:
        source = _build(pid, job, options, knowledge, facts=facts, host=host,
                        job_judgement=job_judgement)
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
    host: SharedHost,
    samples_host: bool = False,
    popen: Popen[bytes] | Popen[str] | None = None,
    facts: Facts | None = None,
    judge_peers: Callable[[], Sequence[RankView]] | None = None,
    preflight: Preflight | None = None,
    job_judgement: Callable[[], JobJudgement | None] | None = None,
) -> LiveSource:
    """The probes, session and evaluator for one process, whole and not started.

    ``samples_host``: this rank's collector samples the machine-wide ``host``
    probe for every rank (the lead); otherwise its session receives those
    samples. ``judge_peers``: the job's other ranks, for the rank whose
    evaluator judges the job as a whole; ``job_judgement``: that rank's newest
    judgement, for each other rank. ``preflight``: the py-spy check already started
    for ``pid``, if one was.
    """
    phase_config = knowledge.phases
    session = Session(pid)

    def names_workers() -> bool:
        env = session.environment
        return env is not None and torch_names_workers(env.torch_version)

    cfg = options.collector
    private = PrivateMemoryReader(cfg.smaps_interval_s, cfg.smaps_cpu_share,
                                  others_interval_s=cfg.smaps_others_interval_s)
    try:
        process = ProcessTreeProbe(pid, popen=popen, names_workers=names_workers,
                                   private_memory=private)
    except TargetNotFound as exc:
        raise AttachError(
            f"no process with PID {pid}: find your training job's PID with "
            "`pgrep -af python` (or start one with `aitop demo`)"
        ) from exc
    binary, warning = (preflight.result() if preflight is not None and preflight.pid == pid
                       else preflight_pyspy(pid))
    session.job = job
    stacks = steps = None
    if binary is not None:
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

    if not samples_host:
        host.subscribe(session)
    collector = Collector(
        session,
        process=process,
        host=host if samples_host else None,
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
    if not samples_host:
        session.probe_status["host"] = ProbeStatus("ok", "shared with the lead rank")
    if facts is not None:
        knowledge = dataclasses.replace(knowledge, facts=facts)
    evaluator = Evaluator(session, knowledge, options.window_s)
    evaluator.peers = judge_peers
    evaluator.job_judgement = job_judgement
    return LiveSource(
        session,
        collector,
        evaluator,
        evaluate_every_s=options.evaluate_every_s,
        evaluate_warmup_s=options.evaluate_warmup_s,
        warnings=[warning] if warning else [],
        host=host,
    )
