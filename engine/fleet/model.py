"""The fleet: every PyTorch job on this machine, found, attached, paced and dropped.

One model for both faces of "every job on the node": the node agent
(``aitop --serve`` without ``--pid``, engine/fleet/agent.py) publishes it to
Prometheus, the node view (``aitop`` alone) draws it in the terminal. Nothing
here knows of either, so the view never loads the exporter.

Every few seconds ``poll`` scans ``/proc`` (``probes.discovery``): a new job
root is attached on a thread of its own (an attach takes a second or two of
py-spy preflight, and must not hold up the others, or a key press), a root
that is gone is closed, so nothing stale is shown or served. What the fleet
found but cannot watch stays listed with the reason and what to do.

Cost: N jobs are each watched ``cadence.fleet_pace(N)`` times slower than one
(``FLEET_COST`` in ``probes.cadence``); the job a person looks at (``focus``)
at its own cadence. With a budget the fleet measures its own CPU each minute
and slows every job further while it is over (and speeds up again once well
under), saying so once per change.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from aitop.engine.live.attach import (
    LAUNCHER_RANKS_WAIT_S,
    AttachError,
    AttachOptions,
    LiveJob,
    attach,
)
from aitop.engine.live.node import NodeJob, WatchStatus
from aitop.engine.live.rank import self_cpu_seconds
from aitop.engine.live.source import Timeline
from aitop.knowledge.reading.yamlio import KnowledgeError
from aitop.probes import cadence
from aitop.probes.discovery import (
    Discovery,
    Found,
    JobGroup,
    is_launcher,
    job_groups,
    start_time,
    user_name,
)
from aitop.probes.job_identity import Identity, identify
from aitop.probes.ranks import Job, find_job
from aitop.probes.redact import command_line, redact_argv

#: How often /proc is scanned for jobs that started or ended.
SCAN_EVERY_S = 2.0
#: The span over which the fleet's own CPU is compared with its budget.
BUDGET_SPAN_S = 60.0
#: Each step of shedding (or of getting the cadence back) changes the pace by this.
BUDGET_STEP = 1.5
#: Below this share of the budget, the fleet gives cadence back.
BUDGET_RELAX_BELOW = 0.6
#: The slowest the budget may make a job's watch (on top of the fleet pace).
MAX_BUDGET_PACE = 8.0
#: Launchers whose ranks have not started yet are looked at again next scan.
WAITING = "a launcher whose ranks have not started"

#: Characters of a job's command line that a message about it quotes.
SAID_COMMAND_CHARS = 60


def say_on_stderr(line: str) -> None:
    print(f"aitop: {line}", file=sys.stderr, flush=True)


@dataclass
class Watch:
    """One job root and what the fleet made of it."""

    group: JobGroup
    identity: Identity
    status: WatchStatus = "attaching"
    reason: str = ""
    job: LiveJob | None = None
    found_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    #: Read once when found: the owner, the start time and the command do not change.
    user: str = ""
    started_at: float | None = None
    command: tuple[str, ...] = ()

    @property
    def root(self) -> Found:
        return self.group.root

    @property
    def key(self) -> str:
        """The root's PID and start time: a PID the kernel reuses is another job."""
        return f"{self.root.pid}-{self.root.started}"

    def node_job(self) -> NodeJob:
        """The job as readers see it (a value: the watch keeps changing)."""
        return NodeJob(
            key=self.key, job_id=self.identity.job_id, pid=self.root.pid, user=self.user,
            command=self.command, started_at=self.started_at,
            found_at=self.found_at, status=self.status, reason=self.reason,
            ended_at=self.ended_at, source=self.job)


class Fleet:
    """Finds, attaches, paces and drops the jobs of this machine; one ``poll`` per scan.

    ``poll`` runs on one thread (the agent's loop, or ``start``'s); readers on any
    other take ``watches()`` or ``jobs()``, copies made under the lock.
    """

    live = True

    def __init__(
        self,
        options: AttachOptions,
        *,
        discovery: Discovery | None = None,
        budget_percent: float | None = None,
        match: tuple[str, ...] = (),
        say: Callable[[str], None] = say_on_stderr,
        cpu_seconds: Callable[[], float] = self_cpu_seconds,
        attach_job: Callable[[int, AttachOptions], LiveJob] = attach,
        keep_ended: int = 0,
    ) -> None:
        if options.knowledge is None:
            raise ValueError("a fleet judges every job with one knowledge base: "
                             "give AttachOptions(knowledge=...)")
        self.options = options
        self.knowledge = options.knowledge
        self.discovery = discovery or Discovery()
        self.hostname = socket.gethostname()
        self.budget_percent = budget_percent
        #: Only jobs whose launcher's command line contains one of these (none: every job).
        self.match = match
        self._say = say
        self._cpu = cpu_seconds
        self._attach = attach_job
        self._lock = threading.Lock()
        self._watches: dict[tuple[int, int], Watch] = {}
        #: Jobs that ended, newest last, kept (closed) for a recording of the session.
        self._ended: deque[Watch] = deque(maxlen=keep_ended)
        self._cpu_marks: deque[tuple[float, float]] = deque()
        self._focused: str | None = None
        self.budget_pace = 1.0
        self.budget_ratio: float | None = None
        self._closed = False
        self._stop = threading.Event()
        self._scanner: threading.Thread | None = None

    # ------------------------------------------------------------ scanning

    def poll(self, now: float) -> None:
        """Scan once: attach what is new, drop what has ended, keep the pace."""
        found = job_groups(self.discovery.scan(), self.discovery.proc_root)
        groups = {g.root.key: g for g in found if self._wanted(g)}
        with self._lock:
            if self._closed:
                return
            ended = [w for key, w in self._watches.items() if key not in groups]
            for gone in ended:
                del self._watches[gone.root.key]
                gone.ended_at = now
                self._ended.append(gone)
            for key, group in groups.items():
                known = self._watches.get(key)
                if known is None:
                    self._watches[key] = self._found(group, now)
                else:
                    known.group = group
                    if known.status == "waiting":
                        self._attach_when_ready(known, now)
        for watch in ended:
            self._drop(watch)
        self._keep_budget(now)
        self._apply_pace()

    def start(self, every_s: float = SCAN_EVERY_S) -> Fleet:
        """Poll on a thread of its own every ``every_s`` until ``close``: a reader
        (a terminal UI) never scans or attaches on its own thread."""
        def scan() -> None:
            while not self._stop.is_set():
                self.poll(time.time())
                self._stop.wait(every_s)

        self._scanner = threading.Thread(target=scan, name="aitop-fleet-scan", daemon=True)
        self._scanner.start()
        return self

    def _wanted(self, group: JobGroup) -> bool:
        if not self.match:
            return True
        command = " ".join(group.root.command)
        return any(text in command for text in self.match)

    def _found(self, group: JobGroup, now: float) -> Watch:
        root = group.root
        identity = self._unique(identify(root.pid), root.pid)
        watch = Watch(group, identity, found_at=now, user=user_name(root.uid),
                      started_at=_started(root), command=tuple(redact_argv(root.command)))
        if root.unwatchable is not None:
            watch.status, watch.reason = "not_watched", root.unwatchable
            said = command_line(root.command, SAID_COMMAND_CHARS)
            self._say(f"found PID {root.pid} ({said}), not watching it: {root.unwatchable}")
            return watch
        self._attach_when_ready(watch, now)
        return watch

    def _attach_when_ready(self, watch: Watch, now: float) -> None:
        """Attach on a thread of its own; a launcher whose ranks have not started yet
        (a rendezvous waiting for the other nodes), or not all of them (ranks start
        one by one), is looked at again next scan."""
        root = watch.root
        waited = now - watch.found_at
        if is_launcher(root.command) and not _ranks_up(find_job(root.pid), waited):
            watch.status, watch.reason = "waiting", WAITING
            return
        watch.status, watch.reason = "attaching", ""
        threading.Thread(target=self._attach_one, args=(watch,), name="aitop-fleet-attach",
                         daemon=True).start()

    def _unique(self, identity: Identity, root_pid: int, mine: Watch | None = None) -> Identity:
        """Two jobs of one node with the same id (the same command twice): the later
        one's id gets its root's PID. Called with the lock held."""
        taken = {w.identity.job_id for w in self._watches.values() if w is not mine}
        if identity.job_id not in taken:
            return identity
        return replace(identity, job_id=f"{identity.job_id}-{root_pid}")

    def _attach_one(self, watch: Watch) -> None:
        root = watch.root
        try:
            job = self._attach(root.pid, self.options)
        except (AttachError, KnowledgeError) as exc:
            with self._lock:
                watch.status, watch.reason = "not_watched", str(exc)
            self._say(f"cannot watch PID {root.pid}: {exc}")
            return
        lead = job.session.target_pid
        identity = identify(lead, root.pid if root.pid != lead else None)
        with self._lock:
            dropped = self._closed or self._watches.get(root.key) is not watch
            if not dropped:  # else it ended (or the fleet closed) while attaching
                watch.identity = self._unique(identity, root.pid, watch)
                watch.job = job
                watch.status = "watched"
        if dropped:
            job.close()
            return
        self._apply_pace()
        rank = f", rank {watch.identity.rank}" if watch.identity.rank else ""
        said = command_line(root.command, SAID_COMMAND_CHARS)
        self._say(f"watching PID {root.pid} ({said}) as job_id={watch.identity.job_id}{rank}")

    def _drop(self, watch: Watch) -> None:
        if watch.job is not None:
            threading.Thread(target=watch.job.close, name="aitop-fleet-close",
                             daemon=True).start()
        self._say(f"PID {watch.root.pid} ended")

    # ------------------------------------------------------------ readers

    def watches(self) -> list[Watch]:
        """The jobs found and not ended, in the order they were found."""
        with self._lock:
            return list(self._watches.values())

    def watched(self) -> int:
        with self._lock:
            return sum(w.job is not None for w in self._watches.values())

    def jobs(self, t: float | None = None) -> list[NodeJob]:
        """The jobs on the machine now (a live fleet has no past: ``t`` is ignored),
        each read under the lock an attach thread writes it under."""
        with self._lock:
            return [w.node_job() for w in self._watches.values()]

    def recorded(self) -> list[NodeJob]:
        """The jobs of the session, those that ended (as many as are kept) first."""
        with self._lock:
            return [w.node_job() for w in (*self._ended, *self._watches.values())]

    def timeline(self) -> Timeline | None:
        return None

    # ------------------------------------------------------------ cost

    def pace(self) -> float:
        """How many times slower than its own cadence each job is watched."""
        return cadence.fleet_pace(self.watched()) * self.budget_pace

    def focus(self, key: str | None) -> None:
        self._focused = key
        self._apply_pace()

    def _apply_pace(self) -> None:
        pace = self.pace()
        with self._lock:
            jobs = [(w.key, w.job) for w in self._watches.values() if w.job is not None]
        for key, job in jobs:
            wanted = self.budget_pace if key == self._focused else pace
            if job.pace != wanted:
                job.set_pace(wanted)

    def _keep_budget(self, now: float) -> None:
        """Measure the fleet's CPU over the last minute; shed or give back cadence."""
        if self.budget_percent is None:
            return
        marks = self._cpu_marks
        marks.append((now, self._cpu()))
        while len(marks) > 2 and now - marks[1][0] >= BUDGET_SPAN_S:
            marks.popleft()
        (t0, c0), (t1, c1) = marks[0], marks[-1]
        if t1 - t0 < BUDGET_SPAN_S / 2:
            return  # too short a span to judge
        used = 100.0 * (c1 - c0) / (t1 - t0)
        self.budget_ratio = used / self.budget_percent
        before = self.budget_pace
        if self.budget_ratio > 1.0 and before < MAX_BUDGET_PACE:
            self.budget_pace = min(MAX_BUDGET_PACE, before * BUDGET_STEP)
        elif self.budget_ratio < BUDGET_RELAX_BELOW and before > 1.0:
            self.budget_pace = max(1.0, before / BUDGET_STEP)
        if self.budget_pace != before:
            self._cpu_marks = deque([(now, c1)])  # judge the new pace on its own
            verb = "over" if self.budget_pace > before else "well under"
            self._say(f"{verb} --budget {self.budget_percent:g}% of a core ({used:.0f}% over "
                      f"the last {t1 - t0:.0f} s): each job is now watched "
                      f"{self.pace():.2g}x slower than its own cadence")

    # ------------------------------------------------------------ end

    def close(self) -> None:
        """Stop scanning and close every job (each on its own thread, together)."""
        self._stop.set()
        with self._lock:
            self._closed = True
            jobs = [w.job for w in self._watches.values() if w.job is not None]
        closing = [threading.Thread(target=j.close, daemon=True) for j in jobs]
        for thread in closing:
            thread.start()
        for thread in closing:
            thread.join(timeout=10.0)
        if self._scanner is not None and self._scanner is not threading.current_thread():
            self._scanner.join(timeout=10.0)


def _ranks_up(job: Job, waited_s: float = 0.0) -> bool:
    """Whether a launcher's job can be attached: its ranks started, every one (attached
    with some, the job would be judged without the others), or, after the wait a
    user's ``--pid`` gets (``LAUNCHER_RANKS_WAIT_S``: a rank that exited early never
    comes back), local rank 0, which leads; the others are added as they start."""
    if not job.ranks:
        return False
    if waited_s >= LAUNCHER_RANKS_WAIT_S:
        return any(r.local_rank == 0 for r in job.ranks)
    return not job.starting


def _started(root: Found) -> float | None:
    try:
        return start_time(root)
    except OSError:
        return None


